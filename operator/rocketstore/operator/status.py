"""A RocketStore's status and conditions, as pure functions of what was observed.

:func:`rocketstore.operator.reconcile.observe` reads the pods, Services and brokers, tunes the
brokers, and hands what it saw to :func:`observed_status` as plain data; the handlers write the
result. Keeping the decisions here, apart from the API calls, lets them be tested without an API
server or a broker (tests/operator/test_operator_status.py).

What the status says:

* ``brokers``: one entry per broker (pod readiness, whether its admin API answered, its disk usage
  and CommitLog offsets, the retention it runs with, the last manual delete, the address outside
  clients reach); ``brokersReady``, ``diskUsage`` (the highest broker's), the retention in effect;
* ``externalNamesrvAddr``: the name server address outside clients use (``spec.externalAccess``);
* conditions ``Ready``, ``Progressing``, ``DiskPressure``, ``ExternalAccessReady`` and, from the
  problems found on the way, ``Degraded``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rocketstore.operator.brokers import BrokerRuntime
from rocketstore.operator.conditions import Condition
from rocketstore.operator.desired import (
    NAMESRV_PORT,
    Owner,
    external_service_name,
    ingress_address,
    listen_port,
    load_balancer_addresses,
    namesrv_external_name,
    pod_name,
)
from rocketstore.operator.model import Spec
from rocketstore.operator.retention import Decision

__all__ = [
    "EXTERNAL_CONDITION",
    "BrokerObservation",
    "ExternalView",
    "Report",
    "degraded",
    "external_view",
    "max_disk_usage",
    "observed_status",
    "same_setting",
]

#: the condition of spec.externalAccess: True once every address clients need is known
EXTERNAL_CONDITION: Final = "ExternalAccessReady"

_NUMERIC_TOLERANCE = 1e-9


def same_setting(a: str | None, b: str | None) -> bool:
    """Whether two broker configuration values mean the same: numbers compare as numbers (72 and
    72.0 are no change to push), other values without surrounding whitespace."""
    if a is None or b is None:
        return a == b
    try:
        return abs(float(a) - float(b)) < _NUMERIC_TOLERANCE
    except ValueError:
        return a.strip() == b.strip()


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    for c in pod.get("status", {}).get("conditions", []) or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def max_disk_usage(runtimes: Iterable[BrokerRuntime | None]) -> float | None:
    """The highest disk usage the brokers report (None: none reported one): adaptive retention
    and DiskPressure follow the fullest broker, as forced cleanup starts there first."""
    usages = [r.disk_usage_ratio for r in runtimes if r is not None and r.disk_usage_ratio is not None]
    return max(usages) if usages else None


@dataclass(frozen=True)
class ExternalView:
    """What outside clients reach (with ``spec.externalAccess``), as far as known."""

    #: broker ordinal -> the host outside clients reach it on (its node, its load balancer)
    hosts: dict[int, str]
    #: host:port of the name servers outside (None: not known yet)
    namesrv_address: str | None
    condition: Condition


def external_view(owner: Owner, spec: Spec, replicas: int, pods: Mapping[str, Mapping[str, Any]],
                  services: Sequence[Mapping[str, Any]]) -> ExternalView | None:
    """The observed address of each broker clients outside reach (its pod's node with NodePort,
    its Service's load balancer with LoadBalancer) and the ExternalAccessReady condition; None
    without external access. A balancer still being provisioned is a condition (False,
    LoadBalancerPending), not an error: the next observation looks again.

    ``pods`` by name; ``services``: this RocketStore's Services (only read with LoadBalancer)."""
    ext = spec.external_access
    if ext is None:
        return None
    if not ext.load_balancer:
        hosts = {i: ip for i in range(replicas)
                 if (ip := pods.get(pod_name(owner.name, i), {}).get("status", {}).get("hostIP"))}
        namesrv_host = ext.host or next(iter(hosts.values()), None)
        return ExternalView(
            hosts, None if namesrv_host is None else f"{namesrv_host}:{ext.namesrv_node_port}",
            Condition(EXTERNAL_CONDITION, True, "NodePorts",
                      f"brokers on node ports {ext.base_port}..{ext.listen_port(replicas - 1)} of every node, "
                      f"name servers on node port {ext.namesrv_node_port}"))
    hosts = load_balancer_addresses(owner, replicas, services)
    namesrv = next((ingress_address(s) for s in services
                    if s.get("metadata", {}).get("name") == namesrv_external_name(owner.name)), None)
    namesrv_address = None if namesrv is None else f"{namesrv}:{NAMESRV_PORT}"
    waiting = [] if ext.host else [external_service_name(owner.name, i) for i in range(replicas) if i not in hosts]
    pending = waiting + ([] if namesrv is not None else [namesrv_external_name(owner.name)])
    if pending:
        message = f"no load balancer address yet (status.loadBalancer.ingress) for {', '.join(pending)}"
        if waiting:
            message += "; their brokers wait for it in their init container"
    else:
        message = f"name servers at {namesrv_address}"
    return ExternalView(hosts, namesrv_address, Condition(
        EXTERNAL_CONDITION, not pending, "LoadBalancerPending" if pending else "AddressesAssigned", message))


def _external_address(spec: Spec, hosts: Mapping[int, str], ordinal: int) -> str | None:
    """What broker ``ordinal`` advertises to clients outside (None: no external access, or its
    address not known yet)."""
    ext = spec.external_access
    host = None if ext is None else ext.host or hosts.get(ordinal)
    return None if host is None else f"{host}:{listen_port(spec, ordinal)}"


@dataclass(frozen=True)
class BrokerObservation:
    """One broker as observed, after the observer's tuning steps ran on it."""

    name: str
    #: where the operator reached (or tried to reach) its admin API
    address: str
    #: its pod ({} when there is none)
    pod: Mapping[str, Any]
    #: what its admin API reported (None: it did not answer)
    runtime: BrokerRuntime | None
    #: why its admin API did not answer
    error: str | None = None
    #: the retention keys as the broker runs them (None: never read)
    applied_retention: Mapping[str, str] | None = None
    #: the last manual delete run on it (None: none yet)
    last_manual_delete: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Report:
    """What to write: status fields, conditions, and condition types to remove."""

    status: dict[str, Any]
    conditions: list[Condition]
    #: condition types that no longer apply (ExternalAccessReady once external access is off)
    dropped: list[str] = field(default_factory=list)


def observed_status(spec: Spec, replicas: int, brokers: Sequence[BrokerObservation], decision: Decision,
                    external: ExternalView | None, at: str) -> Report:
    """The status and conditions an observation at time ``at`` yields.

    ``replicas``: the broker count applied (it stays above ``spec.brokers`` while a scale down is
    refused); ``brokers``: one per ordinal, in order; ``decision``: the retention the brokers were
    tuned to; ``external``: see :func:`external_view`.
    """
    hosts = {} if external is None else external.hosts
    want = spec.retention.broker_properties(decision.file_reserved_time)
    max_usage = max_disk_usage(b.runtime for b in brokers)
    broker_status: list[dict[str, Any]] = []
    for i, b in enumerate(brokers):
        entry: dict[str, Any] = {
            "name": b.name,
            "address": b.address,
            "ready": _pod_ready(b.pod),
            "reachable": b.runtime is not None,
            "appliedRetention": b.applied_retention,
            "lastManualDelete": b.last_manual_delete,
            "externalAddress": _external_address(spec, hosts, i),
        }
        if b.error is not None:
            entry["message"] = b.error[:300]
        if b.runtime is not None:
            entry.update({
                "diskUsageRatio": b.runtime.disk_usage_ratio,
                "commitLogMinOffset": b.runtime.commit_log_min_offset,
                "commitLogMaxOffset": b.runtime.commit_log_max_offset,
            })
        broker_status.append({k: v for k, v in entry.items() if v is not None})

    ready = sum(1 for b in broker_status if b["ready"])
    converged = all(
        b.get("appliedRetention") is not None
        and all(same_setting(b["appliedRetention"].get(k), v) for k, v in want.items())
        for b in broker_status
    )
    status: dict[str, Any] = {
        "externalNamesrvAddr": None if external is None else external.namesrv_address,
        "observedAt": at,
        "brokers": broker_status,
        "brokersReady": ready,
        "brokersReadyText": f"{ready}/{spec.brokers}",
        "diskUsage": "" if max_usage is None else f"{max_usage:.0%}",
        "effectiveFileReservedTime": decision.file_reserved_time,
        "retention": f"{decision.file_reserved_time}h" + (
            "" if decision.file_reserved_time == spec.retention.file_reserved_time
            else f" (spec {spec.retention.file_reserved_time}h)"),
    }
    conditions = [] if external is None else [external.condition]
    all_ready = ready == spec.brokers == replicas
    conditions.append(Condition(
        "Ready", all_ready, "AllBrokersReady" if all_ready else "BrokersNotReady",
        f"{ready}/{spec.brokers} broker pods ready"))
    pending = [] if converged else ["retention not applied on every broker"]
    if external is not None and not external.condition.status:
        pending.insert(0, "load balancer addresses pending")
    if not all_ready:
        pending.insert(0, "broker pods rolling out")
    conditions.append(Condition(
        "Progressing", bool(pending), "Converging" if pending else "Converged", "; ".join(pending)))
    conditions.append(Condition(
        "DiskPressure", decision.pressure,
        {"Lowered": "RetentionLowered", "AtFloor": "RetentionAtFloor", "Holding": "RetentionHeldLow"}.get(
            decision.reason, "UsageNormal") if decision.pressure else "UsageNormal",
        "" if max_usage is None else f"max commitLogDiskRatio {max_usage:.2%}; fileReservedTime "
        f"{decision.file_reserved_time}h (spec {spec.retention.file_reserved_time}h)"))
    return Report(status, conditions, [] if external is not None else [EXTERNAL_CONDITION])


def degraded(problems: Sequence[Mapping[str, str]], brokers: Sequence[Mapping[str, Any]]) -> Condition:
    """Degraded from refused changes (written by the apply step), missing Secrets (observed) and
    unreachable ready brokers."""
    if problems:
        return Condition("Degraded", True, problems[0]["reason"], "; ".join(p["message"] for p in problems))
    unreachable = [b["name"] for b in brokers if b.get("ready") and not b.get("reachable")]
    if unreachable:
        return Condition("Degraded", True, "BrokerUnreachable", "admin API not answering: " + ", ".join(unreachable))
    return Condition("Degraded", False, "AsExpected")
