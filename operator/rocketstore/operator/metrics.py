"""Prometheus metrics of the operator (served by ``rocketstore operator --metrics-port``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from rocketstore.operator.conditions import TYPES

__all__ = ["BROKER_DISK_USAGE", "DRIFT_REPAIRS", "ERRORS", "LEADER", "RECONCILES", "RECONCILE_DURATION",
           "RESOURCE_STATE", "TUNING_ACTIONS", "forget_resource", "record_conditions"]

RECONCILES = Counter(
    "rocketstore_operator_reconciles", "Reconciliations of RocketStore objects", ["kind"]
)
#: one reconciliation, from the handler's start to its status patch being ready (kopf writes it
#: after): apply plus observe, including the brokers' admin round trips. Buckets from a quick
#: no-change pass (milliseconds) to a storage growth that waits for the StatefulSet's orphan delete
#: (tens of seconds).
RECONCILE_DURATION = Histogram(
    "rocketstore_operator_reconcile_duration_seconds", "Duration of RocketStore reconciliations", ["kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
#: 1 while this process holds the leader election Lease (``--leader-elect``) and reconciles; a
#: standby reports 0. Without leader election the operator always reconciles and reports 1.
LEADER = Gauge("rocketstore_operator_leader", "Whether this operator process is the one reconciling")
ERRORS = Counter(
    "rocketstore_operator_errors", "Failed reconciliation steps", ["step"]
)
TUNING_ACTIONS = Counter(
    "rocketstore_operator_tuning_actions",
    "Actions on brokers: retention pushes, adaptive lower/raise, manual deletes",
    ["action"],
)
BROKER_DISK_USAGE = Gauge(
    "rocketstore_operator_broker_disk_usage_ratio", "Last observed commitLogDiskRatio",
    ["namespace", "name", "broker"],
)
#: child objects the timer found deleted or edited by hand and applied again (by kind)
DRIFT_REPAIRS = Counter(
    "rocketstore_operator_drift_repairs", "Child objects restored after a change by hand", ["kind"]
)
#: each condition of each RocketStore, 1 while it is True (Strimzi's strimzi_resource_state): what
#: the Degraded alert reads, and the list of the stores this operator knows
RESOURCE_STATE = Gauge(
    "rocketstore_resource_state", "1 while the condition of the resource is True, else 0",
    ["kind", "name", "namespace", "condition"],
)


def record_conditions(namespace: str, name: str, conditions: Iterable[Mapping[str, Any]],
                      kind: str = "RocketStore") -> None:
    """Set :data:`RESOURCE_STATE` from a status's conditions; types no longer there are removed."""
    seen = set()
    for c in conditions:
        seen.add(str(c["type"]))
        RESOURCE_STATE.labels(kind, name, namespace, str(c["type"])).set(1 if c.get("status") == "True" else 0)
    forget_resource(namespace, name, kind, keep=seen)


def forget_resource(namespace: str, name: str, kind: str = "RocketStore", keep: Iterable[str] = ()) -> None:
    """Remove a resource's :data:`RESOURCE_STATE` series (all, or those not in ``keep``)."""
    for condition in set(TYPES) - set(keep):
        with contextlib.suppress(KeyError):  # never set
            RESOURCE_STATE.remove(kind, name, namespace, condition)
