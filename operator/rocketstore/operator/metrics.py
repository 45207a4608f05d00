"""Prometheus metrics of the operator (served by ``rocketstore operator --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = ["BROKER_DISK_USAGE", "DRIFT_REPAIRS", "ERRORS", "RECONCILES", "RECONCILE_DURATION", "TUNING_ACTIONS"]

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
