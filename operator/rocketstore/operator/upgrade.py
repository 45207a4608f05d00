"""Operator upgrades: a new default broker image reaches the stores a few at a time.

RocketStores without ``spec.image`` run the operator's default broker image (``--broker-image``;
the chart's operator image). Upgrading the operator changes it for all of them at once, and each
store would start its rolling restart in the same minute: every store's brokers one pod at a
time, but all stores together, so a bad image would take a broker of every store down before
anyone noticed, and the cluster would reschedule and re-read many CommitLogs at once.

So a store moves to the new default image only while fewer than ``max_concurrent`` stores
(``--max-concurrent-upgrades``, 1 by default) are rolling; the others keep the image their
StatefulSets run and wait. A store counts as rolling from the moment the operator lets it start
until every one of its StatefulSets is settled: the controller has seen its latest spec, and all
replicas run the update revision and are ready (:func:`statefulset_settled`). A store whose new
pods never become ready therefore holds the queue, which is the point: the rollout stops at the
first store it breaks.

New stores (no StatefulSet yet) start on the default image; stores that pin ``spec.image`` are
their owner's to roll and never wait. The decision (:func:`broker_image`) is pure; the operator
keeps the StatefulSets' state in a kopf index and the stores it let start in :class:`UpgradeGate`.

A store that waits shows it: the condition ``UpgradeQueued`` (True, :func:`queued_condition`)
names the image it waits for and the stores holding the slots, until it starts. It has no place
in a line: when a slot frees, the waiting store whose reconcile runs first takes it (each store's
timer runs every ``--interval``), so the condition says what it waits for, not when its turn comes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocketstore.operator.conditions import Condition

__all__ = ["UPGRADE_QUEUED", "StatefulSetRollout", "StoreRollout", "UpgradeGate", "broker_image",
           "queued_condition", "rolling", "statefulset_rollout", "statefulset_settled", "store_rollout"]

#: the condition of a store waiting for an upgrade slot
UPGRADE_QUEUED = "UpgradeQueued"


@dataclass(frozen=True)
class StatefulSetRollout:
    """What the upgrade decision reads of one broker StatefulSet."""

    name: str
    image: str | None
    settled: bool


@dataclass(frozen=True)
class StoreRollout:
    """A store as its StatefulSets show it: the masters' image (applied last, so the newest) and
    whether every StatefulSet of it is settled."""

    image: str | None
    settled: bool


def statefulset_settled(sts: Mapping[str, Any]) -> bool:
    """The controller has seen the latest spec and every replica runs its template and is ready.

    Under ``OnDelete`` (Lease failover, rollout.py) the controller never moves currentRevision to
    the update revision, so there the updated replicas alone say the rollout is done."""
    spec, status = sts.get("spec") or {}, sts.get("status") or {}
    replicas = int(spec.get("replicas", 1))  # the API server defaults it to 1
    generation = (sts.get("metadata") or {}).get("generation")
    on_delete = (spec.get("updateStrategy") or {}).get("type") == "OnDelete"
    return (status.get("observedGeneration") == generation
            and int(status.get("updatedReplicas") or 0) >= replicas
            and int(status.get("readyReplicas") or 0) >= replicas
            and (on_delete or status.get("currentRevision") == status.get("updateRevision")))


def statefulset_rollout(sts: Mapping[str, Any]) -> StatefulSetRollout:
    containers = (((sts.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    image = next((c.get("image") for c in containers if c.get("name") == "broker"), None)
    return StatefulSetRollout(name=str(sts["metadata"]["name"]), image=image, settled=statefulset_settled(sts))


def store_rollout(name: str, statefulsets: Iterable[StatefulSetRollout]) -> StoreRollout:
    """The store ``name`` from its StatefulSets (the masters' is named after it); ``image`` None
    when it has none yet."""
    seen = list(statefulsets)
    masters = next((s for s in seen if s.name == name), None)
    return StoreRollout(image=None if masters is None else masters.image, settled=all(s.settled for s in seen))


def broker_image(key: str, stores: Mapping[str, StoreRollout], default_image: str, max_concurrent: int,
                 started: Iterable[str] = ()) -> tuple[str, bool]:
    """The image the store ``key`` (``namespace/name``, one without spec.image) is applied with,
    and whether its upgrade to ``default_image`` starts now.

    ``stores``: every operator-managed store by key, as its StatefulSets show it; ``started``: the
    stores the operator let start and whose StatefulSets may not show it yet (an apply's watch
    event arrives later than the next store's reconcile may run)."""
    own = stores.get(key)
    if own is None or own.image is None or own.image == default_image:
        return default_image, False
    if key in started:
        return default_image, False
    if len(rolling(stores, default_image, started)) < max_concurrent:
        return default_image, True
    return own.image, False


def rolling(stores: Mapping[str, StoreRollout], default_image: str, started: Iterable[str] = ()) -> set[str]:
    """The stores holding an upgrade slot: rolling to ``default_image``, or let start and not done."""
    out = {k for k, s in stores.items() if s.image == default_image and not s.settled}
    return out | {k for k in started if not _done(stores.get(k), default_image)}


def queued_condition(running: str, default_image: str, holders: Iterable[str], max_concurrent: int) -> Condition:
    """``UpgradeQueued`` of a store left on ``running`` while ``holders`` take the slots."""
    names = ", ".join(sorted(holders)) or "none"
    return Condition(UPGRADE_QUEUED, True, "WaitingForUpgradeSlot", (
        f"runs {running}, waits to roll to {default_image}: {max_concurrent} store(s) roll at a time "
        f"(--max-concurrent-upgrades) and these are rolling: {names}"))


def _done(store: StoreRollout | None, default_image: str) -> bool:
    """A started store that finished, or is gone (deleted: it holds no slot)."""
    return store is None or (store.image == default_image and store.settled)


@dataclass
class UpgradeGate:
    """The operator's memory of the stores it let start upgrading (one process decides: the leader)."""

    max_concurrent: int = 1
    started: set[str] = field(default_factory=set)

    def image(self, key: str, stores: Mapping[str, StoreRollout], default_image: str) -> tuple[str, bool]:
        """:func:`broker_image`, remembering a start; no await in between, so two reconciles of the
        event loop cannot both take the last slot."""
        self.started = {k for k in self.started if not _done(stores.get(k), default_image)}
        image, starts = broker_image(key, stores, default_image, self.max_concurrent, self.started)
        if starts:
            self.started.add(key)
        return image, starts

    def queued(self, image: str, stores: Mapping[str, StoreRollout], default_image: str) -> Condition | None:
        """The ``UpgradeQueued`` condition of a store :meth:`image` left on ``image``; None when it
        runs the default image (new, rolling or rolled)."""
        if image == default_image:
            return None
        return queued_condition(image, default_image, rolling(stores, default_image, self.started),
                                self.max_concurrent)
