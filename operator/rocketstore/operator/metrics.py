"""Prometheus metrics of the operator (served by ``rocketstore operator --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

__all__ = ["BROKER_DISK_USAGE", "ERRORS", "RECONCILES", "TUNING_ACTIONS"]

RECONCILES = Counter(
    "rocketstore_operator_reconciles", "Reconciliations of RocketStore objects", ["kind"]
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
