"""Pausing reconciliation: ``rocketstore.io/pause-reconciliation: "true"`` on a RocketStore.

An administrator who must change a store's children by hand (a StatefulSet edited while debugging
a broker, a Service held on an old port during a migration) needs the operator to leave them as
they are: its drift repair would otherwise undo every edit within one timer interval. While the
annotation says ``"true"`` the operator changes nothing of the store: no apply (spec edits wait),
no drift repair, no broker setting pushed, no rolling update partition moved. The status says so
with the ``ReconciliationPaused`` condition. Removing the annotation (or any other value) resumes:
the next timer run applies the spec as it is then and drops the condition.

Deleting a paused RocketStore still deletes it: kopf removes its finalizer and the garbage
collector its children, as for any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rocketstore.operator import GROUP
from rocketstore.operator.conditions import Condition

__all__ = ["PAUSED", "PAUSE_ANNOTATION", "paused", "paused_condition", "shows_paused"]

PAUSE_ANNOTATION: Final = f"{GROUP}/pause-reconciliation"
#: the condition type while paused
PAUSED: Final = "ReconciliationPaused"


def paused(annotations: Mapping[str, str] | None) -> bool:
    """Whether the RocketStore's annotations pause its reconciliation (the value ``true``, any case)."""
    return (annotations or {}).get(PAUSE_ANNOTATION, "").strip().lower() == "true"


def paused_condition() -> Condition:
    return Condition(PAUSED, True, "PauseAnnotation",
                     f"{PAUSE_ANNOTATION} is \"true\": no child object, broker setting or drift is reconciled "
                     "until the annotation is removed")


def shows_paused(status: Mapping[str, Any]) -> bool:
    """Whether the status already carries the paused condition (so it is not written again)."""
    return any(c.get("type") == PAUSED and c.get("status") == "True" for c in status.get("conditions") or [])
