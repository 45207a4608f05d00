"""Uninstalling the operator: release the RocketStores from its finalizer (the chart's pre-delete hook).

kopf puts the finalizer ``rocketstore.io/operator`` on every RocketStore (the timer needs one, see
:mod:`rocketstore.operator.handlers`), and only a running operator removes it. Once the chart is
gone, a RocketStore deleted later (by hand, with its namespace, or with the CRD) would stay
``Terminating`` for good, and its namespace or the CRD with it.

``rocketstore operator --release-finalizers`` (the chart's ``pre-delete`` Job) therefore:

1. scales the operator's Deployment to 0 and waits until none of its pods is left: a running
   operator would put the finalizer back at the next event of the store (removing it is one);
2. removes that one finalizer from every RocketStore in the watched namespaces, leaving the
   others' finalizers and everything else as it is.

It does not delete the RocketStores: uninstalling the operator leaves the brokers, their messages
and their volumes running, as Helm leaves the CRD (``crds/``) and so every RocketStore in place.
The stores are deleted on purpose, before (the operator then removes the finalizer as each goes)
or after (nothing holds them any more: the garbage collector removes their objects, the PVCs
follow ``storage.deleteClaim``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rocketstore.operator import FINALIZER, GROUP, KIND, VERSION
from rocketstore.operator.kube import ApiError, Kube

API_VERSION = f"{GROUP}/{VERSION}"
#: how often the pods of a stopping operator and conflicting stores are looked at again
POLL = 1.0
#: rounds of patches before the release gives up: a round re-reads the stores that answered 409
ROUNDS = 5


def released(finalizers: Sequence[str] | None) -> list[str] | None:
    """A store's finalizers without the operator's, or None when it does not carry it (no patch)."""
    if not finalizers or FINALIZER not in finalizers:
        return None
    return [f for f in finalizers if f != FINALIZER]


def release_patch(store: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that removes the operator's finalizer from ``store``, or None. It carries
    the resourceVersion read, so a store changed since answers 409 and is read again instead of
    losing a finalizer someone else added meanwhile."""
    meta = store["metadata"]
    rest = released(meta.get("finalizers"))
    if rest is None:
        return None
    return {"metadata": {"finalizers": rest or None, "resourceVersion": meta["resourceVersion"]}}


async def stop_operator(kube: Kube, namespace: str, deployment: str, pods: Mapping[str, str],
                        timeout: float) -> None:
    """Scale the operator's Deployment to 0 and wait until no pod matching ``pods`` is left (a
    terminating leader still reconciles). Raises TimeoutError naming the pods still there."""
    await kube.merge_patch("apps/v1", "Deployment", namespace, deployment, {"spec": {"replicas": 0}})
    deadline = time.monotonic() + timeout
    while left := await kube.list("v1", "Pod", namespace, pods):
        if time.monotonic() > deadline:
            names = ", ".join(p["metadata"]["name"] for p in left)
            raise TimeoutError(f"operator pods still running {timeout:g} s after scaling {namespace}/{deployment} "
                               f"to 0: {names}")
        await asyncio.sleep(POLL)


async def release_stores(kube: Kube, namespaces: Sequence[str]) -> list[str]:
    """Remove the operator's finalizer from every RocketStore of ``namespaces`` (none: every
    namespace); returns the ``namespace/name`` of the stores released."""
    done: list[str] = []
    scopes: list[str | None] = [*namespaces] or [None]  # None: every namespace
    for _ in range(ROUNDS):
        conflicts = 0
        for namespace in scopes:
            for store in await kube.list(API_VERSION, KIND, namespace, {}):
                patch = release_patch(store)
                if patch is None:
                    continue
                meta = store["metadata"]
                try:
                    await kube.merge_patch(API_VERSION, KIND, meta["namespace"], meta["name"], patch)
                except ApiError as e:
                    if e.status == 404:
                        continue  # gone meanwhile
                    if e.status != 409:
                        raise
                    conflicts += 1
                    continue
                done.append(f"{meta['namespace']}/{meta['name']}")
        if not conflicts:
            return done
        await asyncio.sleep(POLL)
    raise RuntimeError(f"RocketStores kept changing: {conflicts} still carry {FINALIZER} after {ROUNDS} rounds")


async def uninstall(kube: Kube, *, operator_namespace: str, deployment: str, pods: Mapping[str, str],
                    namespaces: Sequence[str], timeout: float) -> list[str]:
    """Stop the operator, then release its RocketStores (see the module docstring)."""
    await stop_operator(kube, operator_namespace, deployment, pods, timeout)
    return await release_stores(kube, namespaces)
