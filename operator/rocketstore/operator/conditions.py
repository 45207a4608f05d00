"""Status conditions in the Kubernetes convention (``type``, ``status``, ``reason``, ``message``,
``lastTransitionTime``, ``observedGeneration``).

Types: ``Ready`` (every broker pod ready), ``Progressing`` (objects being rolled out or a broker
not yet converged), ``Degraded`` (a spec that cannot be applied, a refused change, unreachable
brokers, a missing ACL or TLS Secret or key), ``DiskPressure`` (a broker's disk usage near
``diskSpaceCleanForciblyRatio``), ``ExternalAccessReady`` (with ``spec.externalAccess`` only: every
address outside clients need is known, e.g. the load balancers are provisioned), ``ReplicationInSync``
(with slaves only: every slave in sync; False when a SYNC_MASTER group has none),
``ReconciliationPaused`` (while the pause annotation is set, :mod:`rocketstore.operator.pause`),
``UpgradeQueued`` (while the store waits for its turn to roll to a new default broker image,
:mod:`rocketstore.operator.upgrade`).
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TYPES", "Condition", "merge_conditions", "now"]

TYPES = ("Ready", "Progressing", "Degraded", "DiskPressure", "ExternalAccessReady", "ReplicationInSync",
         "ReconciliationPaused", "UpgradeQueued")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str = ""


def merge_conditions(
    old: Iterable[Mapping[str, Any]] | None, new: Iterable[Condition], generation: int, at: str | None = None,
    drop: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The new condition list; ``lastTransitionTime`` moves only when a status flips.

    Types not mentioned in ``new`` keep their old entry, except those in ``drop`` (a condition
    about a feature the spec no longer asks for), which are removed.
    """
    at = at or now()
    by_type = {c.get("type"): dict(c) for c in (old or ()) if c.get("type") not in drop}
    for cond in new:
        status = "True" if cond.status else "False"
        prev = by_type.get(cond.type)
        changed = prev is None or prev.get("status") != status
        by_type[cond.type] = {
            "type": cond.type,
            "status": status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": at if changed or prev is None else prev.get("lastTransitionTime", at),
            "observedGeneration": generation,
        }
    order = {t: i for i, t in enumerate(TYPES)}
    return sorted(by_type.values(), key=lambda c: order.get(str(c.get("type")), len(order)))
