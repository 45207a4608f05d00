"""The RocketStore's status and conditions as decided from an observation (rocketstore.operator.status):
pure functions of plain data, no API server and no broker."""

from __future__ import annotations

from typing import Any

from rocketstore.common.replica_lease import ReplicaInfo, lease_body
from rocketstore.operator.brokers import BrokerRuntime
from rocketstore.operator.conditions import Condition, merge_conditions
from rocketstore.operator.desired import Owner
from rocketstore.operator.model import Spec, parse_spec
from rocketstore.operator.retention import Decision, decide
from rocketstore.operator.status import (
    EXTERNAL_CONDITION,
    REPLICATION_CONDITION,
    BrokerObservation,
    Report,
    degraded,
    external_view,
    masters_status,
    max_disk_usage,
    observed_status,
    same_setting,
)

OWNER = Owner(name="rs", namespace="ns", uid="1234")
AT = "2026-01-02T03:04:05Z"
FIXED = Decision(72, False, "Fixed")


def pod(ready: bool, host_ip: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "PodScheduled", "status": "True"},
                                             {"type": "Ready", "status": "True" if ready else "False"}]}
    if host_ip is not None:
        status["hostIP"] = host_ip
    return {"metadata": {"name": "ignored"}, "status": status}


def runtime(usage: float | None, min_offset: int | None = 0, max_offset: int | None = 100) -> BrokerRuntime:
    return BrokerRuntime(disk_usage_ratio=usage, commit_log_min_offset=min_offset, commit_log_max_offset=max_offset)


def converged_broker(spec: Spec, i: int, usage: float | None = 0.5, hours: int = 72) -> BrokerObservation:
    """A ready, reachable broker running the retention the spec asks for (``hours``)."""
    return BrokerObservation(f"rs-{i}", f"rs-{i}.rs-headless.ns.svc:10911", pod(True), runtime(usage),
                             applied_retention=spec.retention.broker_properties(hours))


def conditions(report: Report) -> dict[str, Condition]:
    by_type = {c.type: c for c in report.conditions}
    assert len(by_type) == len(report.conditions), "one condition per type"
    return by_type


def test_every_broker_ready_and_converged() -> None:
    spec = parse_spec({"brokers": 2})
    brokers = [converged_broker(spec, 0, 0.5), converged_broker(spec, 1, 0.62)]
    report = observed_status(spec, 2, brokers, FIXED, None, AT)
    assert report.status == {
        "externalNamesrvAddr": None,
        "observedAt": AT,
        "brokers": [
            {"name": f"rs-{i}", "address": f"rs-{i}.rs-headless.ns.svc:10911", "ready": True, "reachable": True,
             "appliedRetention": spec.retention.broker_properties(72), "diskUsageRatio": usage,
             "commitLogMinOffset": 0, "commitLogMaxOffset": 100}
            for i, usage in ((0, 0.5), (1, 0.62))
        ],
        "brokersReady": 2,
        "brokersReadyText": "2/2",
        "diskUsage": "62%",
        "effectiveFileReservedTime": 72,
        "retention": "72h",
        "groups": None,  # no slaves: a former status.groups is removed
    }
    by_type = conditions(report)
    assert by_type["Ready"] == Condition("Ready", True, "AllBrokersReady", "2/2 broker pods ready")
    assert by_type["Progressing"] == Condition("Progressing", False, "Converged", "")
    assert by_type["DiskPressure"] == Condition(
        "DiskPressure", False, "UsageNormal", "max commitLogDiskRatio 62.00%; fileReservedTime 72h (spec 72h)")
    # no external access: its condition is dropped, not reported
    assert EXTERNAL_CONDITION not in by_type and report.dropped == [EXTERNAL_CONDITION, REPLICATION_CONDITION]


def test_unreachable_and_unconverged_brokers_keep_it_progressing() -> None:
    """A broker whose admin API did not answer: reachable false, why (cut to 300 characters), no
    runtime fields; a broker whose retention differs from the spec's: not converged."""
    spec = parse_spec({"brokers": 2})
    silent = BrokerObservation("rs-0", "a:1", pod(True), None, error="connection refused " * 40)
    stale = BrokerObservation("rs-1", "b:1", pod(False), runtime(None),
                              applied_retention={**spec.retention.broker_properties(72), "fileReservedTime": "48"},
                              last_manual_delete={"token": "t1", "result": "Requested"})
    report = observed_status(spec, 2, [silent, stale], FIXED, None, AT)
    entries = report.status["brokers"]
    assert entries[0] == {"name": "rs-0", "address": "a:1", "ready": True, "reachable": False,
                          "message": ("connection refused " * 40)[:300]}
    assert entries[1]["reachable"] and not entries[1]["ready"]
    assert "diskUsageRatio" not in entries[1]  # the broker reported none: no key, not null
    assert entries[1]["lastManualDelete"] == {"token": "t1", "result": "Requested"}
    assert report.status["brokersReady"] == 1 and report.status["diskUsage"] == ""
    by_type = conditions(report)
    assert by_type["Ready"] == Condition("Ready", False, "BrokersNotReady", "1/2 broker pods ready")
    assert by_type["Progressing"] == Condition(
        "Progressing", True, "Converging", "broker pods rolling out; retention not applied on every broker")
    assert by_type["DiskPressure"] == Condition("DiskPressure", False, "UsageNormal", "")


def test_a_refused_scale_down_is_not_ready() -> None:
    """spec.brokers 1 while 2 keep running (scale down refused): every wanted broker ready is not
    enough, the surplus one is still there."""
    spec = parse_spec({"brokers": 1})
    report = observed_status(spec, 2, [converged_broker(spec, 0), converged_broker(spec, 1)], FIXED, None, AT)
    assert report.status["brokersReadyText"] == "2/1"
    by_type = conditions(report)
    assert not by_type["Ready"].status
    assert by_type["Progressing"].message == "broker pods rolling out"


def test_adaptive_retention_lowered_is_disk_pressure() -> None:
    spec = parse_spec({"brokers": 1, "retention": {"policy": "adaptive"}})
    decision = decide(spec.retention, 72, 0.81)
    assert decision == Decision(36, True, "Lowered")
    report = observed_status(spec, 1, [converged_broker(spec, 0, 0.81, hours=36)], decision, None, AT)
    assert report.status["effectiveFileReservedTime"] == 36
    assert report.status["retention"] == "36h (spec 72h)"
    by_type = conditions(report)
    assert by_type["DiskPressure"] == Condition(
        "DiskPressure", True, "RetentionLowered", "max commitLogDiskRatio 81.00%; fileReservedTime 36h (spec 72h)")
    # the brokers run 36h, as decided: converged, although the spec says 72h
    assert by_type["Progressing"].reason == "Converged"
    # brokers still on 72h are not
    behind = observed_status(spec, 1, [converged_broker(spec, 0, 0.81, hours=72)], decision, None, AT)
    assert conditions(behind)["Progressing"].message == "retention not applied on every broker"


def test_same_setting_compares_numbers_as_numbers() -> None:
    assert same_setting("0.85", "0.850") and same_setting("72", "72.0")
    assert not same_setting("0.85", "0.86")
    assert same_setting("04;16", " 04;16\n") and not same_setting("04", "05;16")
    assert same_setting(None, None) and not same_setting(None, "") and not same_setting("1", None)


def test_max_disk_usage_skips_brokers_that_report_none() -> None:
    assert max_disk_usage([runtime(0.3), None, runtime(None), runtime(0.7)]) == 0.7
    assert max_disk_usage([None, runtime(None)]) is None


NODE_PORT: dict[str, Any] = {"brokers": 3, "externalAccess": {"type": "NodePort", "basePort": 31000,
                                                              "namesrvNodePort": 30876}}


def test_node_port_addresses_are_the_pods_nodes() -> None:
    spec = parse_spec(NODE_PORT)
    pods = {"rs-0": pod(True, "192.0.2.10"), "rs-2": pod(True, "192.0.2.12"), "rs-1": pod(False)}
    view = external_view(OWNER, spec, 3, pods, [])
    assert view is not None
    assert view.hosts == {0: "192.0.2.10", 2: "192.0.2.12"}
    assert view.namesrv_address == "192.0.2.10:30876"
    assert view.condition == Condition(
        EXTERNAL_CONDITION, True, "NodePorts",
        "brokers on node ports 31000..31002 of every node, name servers on node port 30876")
    brokers = [converged_broker(spec, i) for i in range(3)]
    report = observed_status(spec, 3, brokers, FIXED, view, AT)
    assert [b.get("externalAddress") for b in report.status["brokers"]] == [
        "192.0.2.10:31000", None, "192.0.2.12:31002"]  # rs-1 has no node yet
    assert report.status["externalNamesrvAddr"] == "192.0.2.10:30876"
    assert conditions(report)[EXTERNAL_CONDITION] == view.condition and report.dropped == [REPLICATION_CONDITION]
    # a fixed host wins over the nodes
    fixed = parse_spec({**NODE_PORT, "externalAccess": {**NODE_PORT["externalAccess"], "host": "mq.example"}})
    fixed_view = external_view(OWNER, fixed, 3, pods, [])
    assert fixed_view is not None and fixed_view.namesrv_address == "mq.example:30876"
    fixed_report = observed_status(fixed, 3, brokers, FIXED, fixed_view, AT)
    assert fixed_report.status["brokers"][1]["externalAddress"] == "mq.example:31001"
    # no pods scheduled yet: nothing known
    empty = external_view(OWNER, spec, 3, {}, [])
    assert empty is not None and empty.hosts == {} and empty.namesrv_address is None


def balancer(name: str, ip: str | None = None, hostname: str | None = None) -> dict[str, Any]:
    ingress = [{k: v for k, v in (("ip", ip), ("hostname", hostname)) if v}] if ip or hostname else []
    return {"metadata": {"name": name}, "status": {"loadBalancer": {"ingress": ingress}}}


LOAD_BALANCER: dict[str, Any] = {"brokers": 2, "externalAccess": {"type": "LoadBalancer", "basePort": 31000}}


def test_load_balancers_pending_then_assigned() -> None:
    spec = parse_spec(LOAD_BALANCER)
    brokers = [converged_broker(spec, i) for i in range(2)]
    pending = external_view(OWNER, spec, 2, {}, [balancer("rs-0-external", ip="203.0.113.7"),
                                                 balancer("rs-1-external"), balancer("rs-namesrv-external")])
    assert pending is not None and pending.hosts == {0: "203.0.113.7"} and pending.namesrv_address is None
    assert pending.condition == Condition(
        EXTERNAL_CONDITION, False, "LoadBalancerPending",
        "no load balancer address yet (status.loadBalancer.ingress) for rs-1-external, rs-namesrv-external; "
        "their brokers wait for it in their init container")
    report = observed_status(spec, 2, brokers, FIXED, pending, AT)
    assert conditions(report)["Progressing"] == Condition(
        "Progressing", True, "Converging", "load balancer addresses pending")
    assert [b.get("externalAddress") for b in report.status["brokers"]] == ["203.0.113.7:31000", None]

    assigned = external_view(OWNER, spec, 2, {}, [
        balancer("rs-0-external", ip="203.0.113.7"), balancer("rs-1-external", hostname="lb-1.example"),
        balancer("rs-namesrv-external", ip="203.0.113.9"), balancer("rs-2-external", ip="203.0.113.99")])
    assert assigned is not None and assigned.hosts == {0: "203.0.113.7", 1: "lb-1.example"}
    assert assigned.condition == Condition(EXTERNAL_CONDITION, True, "AddressesAssigned",
                                           "name servers at 203.0.113.9:9876")
    done = observed_status(spec, 2, brokers, FIXED, assigned, AT)
    assert done.status["externalNamesrvAddr"] == "203.0.113.9:9876"
    assert conditions(done)["Progressing"].reason == "Converged"

    # a fixed host: the brokers do not wait; only the name servers' balancer is pending
    fixed = parse_spec({**LOAD_BALANCER, "externalAccess": {**LOAD_BALANCER["externalAccess"], "host": "mq.example"}})
    view = external_view(OWNER, fixed, 2, {}, [])
    assert view is not None and view.condition.message == (
        "no load balancer address yet (status.loadBalancer.ingress) for rs-namesrv-external")


def test_degraded_says_the_first_problem_then_unreachable_ready_brokers() -> None:
    problems = [{"reason": "ScaleDownRefused", "message": "a"}, {"reason": "SecretNotFound", "message": "b"}]
    entries = [{"name": "rs-0", "ready": True, "reachable": False},
               {"name": "rs-1", "ready": False, "reachable": False},
               {"name": "rs-2", "ready": True, "reachable": True}]
    assert degraded(problems, entries) == Condition("Degraded", True, "ScaleDownRefused", "a; b")
    # a broker not ready yet is expected to be silent; a ready one is not
    assert degraded([], entries) == Condition("Degraded", True, "BrokerUnreachable",
                                              "admin API not answering: rs-0")
    assert degraded([], entries[1:]) == Condition("Degraded", False, "AsExpected")


def test_resource_state_follows_the_conditions() -> None:
    from prometheus_client import REGISTRY

    from rocketstore.operator import metrics

    def state(condition: str) -> float | None:
        return REGISTRY.get_sample_value("rocketstore_resource_state", {
            "kind": "RocketStore", "name": "rs", "namespace": "ns-state", "condition": condition})

    metrics.record_conditions("ns-state", "rs", merge_conditions(None, [
        Condition("Ready", True, "AllBrokersReady"), Condition("Degraded", False, "AsExpected"),
        Condition("ExternalAccessReady", False, "LoadBalancerPending")], 1))
    assert (state("Ready"), state("Degraded"), state("ExternalAccessReady")) == (1.0, 0.0, 0.0)
    metrics.record_conditions("ns-state", "rs", merge_conditions(None, [
        Condition("Ready", False, "BrokersNotReady"), Condition("Degraded", True, "BrokerUnreachable")], 2))
    # a condition no longer reported (external access switched off) leaves no series behind
    assert (state("Ready"), state("Degraded"), state("ExternalAccessReady")) == (0.0, 1.0, None)
    metrics.forget_resource("ns-state", "rs")
    assert (state("Ready"), state("Degraded")) == (None, None)


# -- automatic failover: each group's master from its Lease -------------------------------------------

def test_each_groups_master_epoch_and_sync_state_set_come_from_its_lease() -> None:
    def group_lease(broker: str, info: ReplicaInfo) -> dict[str, Any]:
        return lease_body("ns", "rs", broker, info, lease_duration_seconds=3, renew_time="2026-01-02T03:04:05.000001Z",
                          acquire_time=None, resource_version="9")

    leases = [
        group_lease("rs-1", ReplicaInfo(None, "", "", 4, frozenset({2}), 6)),  # released, none took it yet
        group_lease("rs-0", ReplicaInfo(2, "10.0.0.2:10911", "10.0.0.2:10912", 3, frozenset({2, 0}), 5)),
        {"metadata": {"name": "rs.rs-2", "annotations": {"rocketstore.io/sync-state-set": "{"}},
         "spec": {"holderIdentity": "someone"}},
    ]
    groups = masters_status(leases)
    assert groups[0] == {"brokerName": "rs-0", "masterReplicaId": 2, "masterAddress": "10.0.0.2:10911",
                         "masterEpoch": 3, "syncStateSet": [0, 2], "syncStateSetEpoch": 5,
                         "renewTime": "2026-01-02T03:04:05.000001Z"}
    assert groups[1] == {"brokerName": "rs-1", "masterEpoch": 4, "syncStateSet": [2], "syncStateSetEpoch": 6,
                         "renewTime": "2026-01-02T03:04:05.000001Z"}
    assert groups[2]["brokerName"] == "rs.rs-2" and "is not a broker group's" in groups[2]["message"]
    assert masters_status([]) == []
