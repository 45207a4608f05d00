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
* ``groups`` (broker groups, ``replication.replicasPerGroup`` above 1): each group's master, its
  members with the role each broker reports, brokerId, readiness and, for the others, the
  replication lag the master reports; with automatic failover also the group's master epoch and
  SyncStateSet from its Lease;
* with automatic failover, each group's master, master epoch and SyncStateSet as its Lease
  records them (:func:`masters_status`), and an event for each election (:func:`elections`);
* conditions ``Ready``, ``Progressing``, ``DiskPressure``, ``ExternalAccessReady``,
  ``ReplicationInSync`` (with slaves) and, from the problems found on the way, ``Degraded``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from rocketstore.common.replica_lease import LeaseFormatError, ReplicaInfo, parse_lease
from rocketstore.operator.brokers import BrokerRuntime, ReplicationView, SlaveLag
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
    replica_id,
    slave_pod_name,
)
from rocketstore.operator.model import Spec
from rocketstore.operator.retention import Decision

__all__ = [
    "EXTERNAL_CONDITION",
    "REPLICATION_CONDITION",
    "BrokerObservation",
    "ExternalView",
    "GroupView",
    "MemberView",
    "Report",
    "degraded",
    "elections",
    "external_view",
    "group_views",
    "groups_status",
    "masters_status",
    "max_disk_usage",
    "observed_status",
    "pod_ready",
    "same_setting",
]

#: the condition of spec.externalAccess: True once every address clients need is known
EXTERNAL_CONDITION: Final = "ExternalAccessReady"
#: the condition of broker groups: every slave in sync (False when a SYNC_MASTER group has none)
REPLICATION_CONDITION: Final = "ReplicationInSync"

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


def pod_ready(pod: Mapping[str, Any]) -> bool:
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
class MemberView:
    """One member of a broker group as observed."""

    name: str
    #: its place in the group: 0 for the masters' StatefulSet ``NAME``, k for ``NAME-slave-<k>``
    member: int
    #: its brokerId in broker.conf (with Lease failover its replica id, ``member + 1``)
    broker_id: int
    #: its pod ({} when there is none)
    pod: Mapping[str, Any]
    #: MASTER or SLAVE as the broker itself reports it (None: its /metrics did not say)
    role: str | None = None
    #: not the group's master: the lag the master reports for it (None: the master names no
    #: connection from it, or no master was observed)
    lag: SlaveLag | None = None
    #: not the group's master: its lag is known and at most ``replication.maxInSyncLag``
    in_sync: bool = False
    #: with Lease failover: whether the Lease's SyncStateSet names it (None: no Lease read)
    in_sync_state_set: bool | None = None
    #: why its /metrics could not be read
    error: str | None = None


@dataclass(frozen=True)
class GroupView:
    """A broker group: its members in StatefulSet order, the one serving as master, and what that
    master's HA metrics and (with Lease failover) the group's Lease said."""

    ordinal: int
    name: str
    #: member 0 (the masters' StatefulSet) first, then the slaves' StatefulSets in order
    members: tuple[MemberView, ...]
    #: the member serving as master (None: none observed)
    master: MemberView | None
    #: the master's own count of slaves in sync (``rocketstore_ha_slaves_in_sync``; None: unknown)
    slaves_in_sync: int | None
    #: why no master's lag could be read
    error: str | None = None
    #: with Lease failover, the group's Lease as the brokers wrote it (None: none, or not read)
    lease: ReplicaInfo | None = None

    @property
    def slaves(self) -> tuple[MemberView, ...]:
        """The members that are not the observed master (every member while none is)."""
        return tuple(m for m in self.members if m is not self.master)


def _group_master(members: Sequence[MemberView], lease: ReplicaInfo | None) -> MemberView | None:
    """The member serving as master: the one whose broker reports MASTER. Two can while an
    election settles (a deposed master has not noticed yet); the Lease's master is then the one,
    as the others stop acknowledging sends within the Lease's margin."""
    masters = [m for m in members if m.role == "MASTER"]
    if len(masters) > 1 and lease is not None and lease.master_replica_id is not None:
        named = [m for m in masters if m.broker_id == lease.master_replica_id]
        masters = named or masters
    return masters[0] if masters else None


def group_views(owner: Owner, spec: Spec, replicas: int, pods: Mapping[str, Mapping[str, Any]],
                seen: Mapping[str, ReplicationView], errors: Mapping[str, str] | None = None,
                leases: Mapping[str, ReplicaInfo] | None = None) -> list[GroupView]:
    """Each group's members with their roles and lag.

    ``pods``, ``seen`` (each member broker's HA view that answered) and ``errors`` (why the others
    did not) by pod name; ``leases``: with Lease failover, each group's Lease by brokerName. Each
    member's role is what its broker reports; the lag of the others is what the observed master
    reports, which names each slave by its end of the HA connection (host:ephemeral port): the
    slave is the member whose pod has that IP (``status.podIP``)."""
    max_lag = spec.replication.max_in_sync_lag
    errors = errors or {}
    lease_mode = spec.replication.failover.lease
    views: list[GroupView] = []
    for i in range(replicas):
        group = pod_name(owner.name, i)
        lease = (leases or {}).get(group)
        members = []
        for k in range(spec.replication.replicas_per_group):
            name = slave_pod_name(owner.name, k, i) if k else group
            view = seen.get(name)
            sync_set = None if lease is None else replica_id(k) in lease.sync_state_set
            members.append(MemberView(name, k, replica_id(k) if lease_mode else k, pods.get(name, {}),
                                      None if view is None else view.role, in_sync_state_set=sync_set,
                                      error=errors.get(name)))
        master = _group_master(members, lease)
        ha = None if master is None else seen.get(master.name)
        by_host = {} if ha is None else {lag.host: lag for lag in ha.slaves}
        for n, m in enumerate(members):
            if m is master:
                continue
            ip = m.pod.get("status", {}).get("podIP")
            lag = by_host.get(ip) if ip else None
            members[n] = replace(m, lag=lag, in_sync=lag is not None and lag.lag_bytes is not None
                                 and lag.lag_bytes <= max_lag)
        master = None if master is None else members[master.member]
        error = None
        if master is None:
            unread = [f"{m.name}: {m.error}" for m in members if m.error]
            error = "no member reports the MASTER role" + (f" ({'; '.join(unread)})" if unread else "")
        views.append(GroupView(i, group, tuple(members), master, None if ha is None else ha.slaves_in_sync, error,
                               lease))
    return views


def _member_status(m: MemberView, master: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": m.name, "brokerId": m.broker_id, "ready": pod_ready(m.pod)}
    if m.role is not None:
        entry["role"] = m.role
    if m.in_sync_state_set is not None:
        entry["inSyncStateSet"] = m.in_sync_state_set
    if not master:
        entry["inSync"] = m.in_sync
        if m.lag is not None:
            entry["haAddress"] = m.lag.address
            if m.lag.lag_bytes is not None:
                entry["lagBytes"] = m.lag.lag_bytes
            if m.lag.lag_seconds is not None:
                entry["lagSeconds"] = m.lag.lag_seconds
    if m.error is not None:
        entry["message"] = m.error[:300]
    return entry


def groups_status(spec: Spec, groups: Sequence[GroupView]) -> tuple[list[dict[str, Any]], Condition]:
    """``status.groups`` and the ReplicationInSync condition.

    Each group names the member serving as master (``master``) and, with Lease failover, its
    Lease's ``masterEpoch``, ``syncStateSet`` and ``syncStateSetEpoch``; each member its role as
    its broker reports it and, unless it is the master, its lag as the master reports it.

    False with reason ``NoSlaveInSync`` when a SYNC_MASTER group's master counts no slave in sync
    (its sends answer FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE: the store does not take writes
    there), with ``SlavesBehind`` when some slave lags more than ``maxInSyncLag``, is not
    connected or no master's metrics could be read (an ASYNC_MASTER group keeps taking writes,
    but losing its master would lose what the slave lacks)."""
    mode = spec.replication.mode
    entries: list[dict[str, Any]] = []
    stalled: list[str] = []
    behind: list[str] = []
    for g in groups:
        entry: dict[str, Any] = {"name": g.name, "mode": "Lease" if spec.replication.failover.lease else mode,
                                 "members": [_member_status(m, m is g.master) for m in g.members]}
        if g.master is not None:
            entry["master"] = g.master.name
        if g.lease is not None:
            entry.update({"masterEpoch": g.lease.master_epoch, "syncStateSet": sorted(g.lease.sync_state_set),
                          "syncStateSetEpoch": g.lease.sync_state_set_epoch})
        if g.slaves_in_sync is not None:
            entry["slavesInSync"] = g.slaves_in_sync
        if g.error is not None:
            entry["message"] = g.error[:300]
        entries.append(entry)
        if mode == "SYNC_MASTER" and not spec.replication.failover.lease and g.slaves_in_sync == 0:
            stalled.append(g.name)
        behind.extend(m.name for m in g.slaves if not m.in_sync)
    if stalled:
        condition = Condition(REPLICATION_CONDITION, False, "NoSlaveInSync",
                              f"SYNC_MASTER group {', '.join(stalled)} has no slave in sync: its sends fail "
                              "(FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE)")
    elif behind:
        condition = Condition(REPLICATION_CONDITION, False, "SlavesBehind",
                              f"not in sync (lag above {spec.replication.max_in_sync_lag} bytes, or not "
                              f"connected to their master): {', '.join(behind)}")
    else:
        condition = Condition(REPLICATION_CONDITION, True, "AllSlavesInSync",
                              f"every slave within {spec.replication.max_in_sync_lag} bytes of its master")
    return entries, condition


def masters_status(leases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each broker group's master, epoch and SyncStateSet, as its Lease records them
    (:mod:`rocketstore.common.replica_lease`; the brokers hold the Leases, the operator only reads
    them). Sorted by brokerName; a Lease that is no group's is named with its error, not skipped,
    so a hand-edited Lease shows up where someone looks."""
    entries: list[dict[str, Any]] = []
    for obj in leases:
        try:
            lease = parse_lease(obj)
        except LeaseFormatError as e:
            entries.append({"brokerName": (obj.get("metadata") or {}).get("name", ""), "message": str(e)[:300]})
            continue
        info = lease.info
        entry: dict[str, Any] = {"brokerName": lease.broker_name or lease.name, "masterEpoch": info.master_epoch,
                                 "syncStateSet": sorted(info.sync_state_set),
                                 "syncStateSetEpoch": info.sync_state_set_epoch}
        if info.master_replica_id is not None:
            entry["masterReplicaId"] = info.master_replica_id
            entry["masterAddress"] = info.master_address
        if lease.renew_time is not None:
            entry["renewTime"] = lease.renew_time
        entries.append(entry)
    return sorted(entries, key=lambda e: str(e["brokerName"]))


def elections(previous: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]) -> list[str]:
    """What changed between two :func:`masters_status`: one message per group whose master epoch
    moved (an election, or a master that released its Lease), for an event each.

    Only changes between two observations count: a group seen for the first time (the operator
    just started, or the first master took its new Lease) has no election to report, and a group
    elected twice between two observations is one event naming both epochs."""
    before = {e["brokerName"]: e for e in previous if "masterEpoch" in e}
    messages: list[str] = []
    for entry in current:
        old = before.get(entry["brokerName"])
        if old is None or "masterEpoch" not in entry or entry["masterEpoch"] == old["masterEpoch"]:
            continue
        master = entry.get("masterReplicaId")
        who = "no master (Lease released)" if master is None else (
            f"master replica {master} at {entry.get('masterAddress') or 'an unknown address'}")
        messages.append(f"{entry['brokerName']}: epoch {old['masterEpoch']} -> {entry['masterEpoch']}, {who}, "
                        f"SyncStateSet {entry.get('syncStateSet', [])}")
    return messages


@dataclass(frozen=True)
class Report:
    """What to write: status fields, conditions, and condition types to remove."""

    status: dict[str, Any]
    conditions: list[Condition]
    #: condition types that no longer apply (ExternalAccessReady once external access is off)
    dropped: list[str] = field(default_factory=list)


def observed_status(spec: Spec, replicas: int, brokers: Sequence[BrokerObservation], decision: Decision,
                    external: ExternalView | None, at: str, groups: Sequence[GroupView] = (),
                    held: Sequence[str] = ()) -> Report:
    """The status and conditions an observation at time ``at`` yields.

    ``replicas``: the broker count applied (it stays above ``spec.brokers`` while a scale down is
    refused); ``brokers``: one per ordinal (the masters), in order; ``decision``: the retention
    the brokers were tuned to; ``external``: see :func:`external_view`; ``groups``: see
    :func:`group_views` (with slaves only); ``held``: masters with a new pod template waiting
    for their slaves (:mod:`rocketstore.operator.rollout`).
    """
    hosts = {} if external is None else external.hosts
    want = spec.retention.broker_properties(decision.file_reserved_time)
    max_usage = max_disk_usage(b.runtime for b in brokers)
    broker_status: list[dict[str, Any]] = []
    for i, b in enumerate(brokers):
        entry: dict[str, Any] = {
            "name": b.name,
            "address": b.address,
            "ready": pod_ready(b.pod),
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
    # with slaves, a group is whole with all its members (brokersReady counts the masters'
    # StatefulSet's pods, as before; these are the slaves' StatefulSets' pods, whatever their role)
    slaves = [m for g in groups for m in g.members[1:]]
    slaves_ready = sum(1 for m in slaves if pod_ready(m.pod))
    all_ready = ready == spec.brokers == replicas and slaves_ready == len(slaves)
    conditions.append(Condition(
        "Ready", all_ready, "AllBrokersReady" if all_ready else "BrokersNotReady",
        f"{ready}/{spec.brokers} broker pods ready" + (f", {slaves_ready}/{len(slaves)} slave pods" if slaves else "")))
    pending = [] if converged else ["retention not applied on every broker"]
    if external is not None and not external.condition.status:
        pending.insert(0, "load balancer addresses pending")
    if held:
        pending.insert(0, f"new template held from {', '.join(held)} until their slaves are updated and in sync")
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
    dropped = [] if external is not None else [EXTERNAL_CONDITION]
    if spec.replication.slaves:
        status["groups"], replication = groups_status(spec, groups)
        conditions.append(replication)
    else:
        status["groups"] = None  # removed by the status merge patch, once the slaves are gone
        dropped.append(REPLICATION_CONDITION)
    return Report(status, conditions, dropped)


def degraded(problems: Sequence[Mapping[str, str]], brokers: Sequence[Mapping[str, Any]]) -> Condition:
    """Degraded from refused changes (written by the apply step), missing Secrets (observed) and
    unreachable ready brokers."""
    if problems:
        return Condition("Degraded", True, problems[0]["reason"], "; ".join(p["message"] for p in problems))
    unreachable = [b["name"] for b in brokers if b.get("ready") and not b.get("reachable")]
    if unreachable:
        return Condition("Degraded", True, "BrokerUnreachable", "admin API not answering: " + ", ".join(unreachable))
    return Condition("Degraded", False, "AsExpected")
