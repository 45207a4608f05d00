"""Automatic failover on Kubernetes (spec.replication.failover), pure parts: the spec, what the
brokers get (broker.conf, Role, RoleBinding, token, env) and the status and events from the
groups' Leases. No API server, no broker; the real API server's side is
test_operator_failover_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest

from rocketstore.broker.broker_config import load_config
from rocketstore.common.replica_lease import ReplicaInfo, lease_body
from rocketstore.operator.brokers import ReplicationView, SlaveLag
from rocketstore.operator.desired import (
    ROLE_LABEL,
    Owner,
    Plan,
    all_objects,
    broker_conf,
    broker_service_account_name,
    replica_id,
    slave_statefulset,
    statefulset,
)
from rocketstore.operator.model import SpecError, parse_spec
from rocketstore.operator.sizing import volume_size
from rocketstore.operator.status import elections, group_views, groups_status, masters_status

OWNER = Owner(name="rs", namespace="ns", uid="1234")
LEASE = {"brokers": 2, "replication": {"replicasPerGroup": 3, "failover": {"mode": "Lease"}}}


def plan(spec: dict[str, Any]) -> Plan:
    s = parse_spec(spec)
    return Plan(OWNER, s, s.brokers, volume_size(s), default_image="rocketstore/rocketstore:test")


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


# -- spec --------------------------------------------------------------------------------------------

def test_failover_defaults_to_none_with_the_electors_timings() -> None:
    f = parse_spec({"replication": {"replicasPerGroup": 2}}).replication.failover
    assert (f.mode, f.lease, f.lease_duration_ms, f.renew_interval_ms, f.margin_ms) == ("None", False, 3000, 1000, 150)
    f = parse_spec({"replication": {"replicasPerGroup": 2, "failover": {
        "mode": "Lease", "leaseDurationMillis": 6000, "renewIntervalMillis": 2000, "marginMillis": 300}}}
    ).replication.failover
    assert (f.lease, f.lease_duration_ms, f.renew_interval_ms, f.margin_ms) == (True, 6000, 2000, 300)


@pytest.mark.parametrize(("failover", "replicas", "field"), [
    ({"mode": "Lease"}, 1, "replication.failover.mode"),
    ({"mode": "Raft"}, 2, "replication.failover.mode"),
    ({"mode": "Lease", "renewIntervalMillis": 3000}, 2, "replication.failover.renewIntervalMillis"),
    ({"mode": "Lease", "leaseDurationMillis": 2000, "renewIntervalMillis": 1000, "marginMillis": 1000}, 2,
     "replication.failover.marginMillis"),
    ({"mode": "Lease", "leaseDurationMillis": 500}, 2, "replication.failover.leaseDurationMillis"),
])
def test_bad_failover_names_the_field(failover: dict[str, Any], replicas: int, field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"replication": {"replicasPerGroup": replicas, "failover": failover}})
    assert e.value.field == field


@pytest.mark.parametrize("key", ["enableControllerMode", "controllerLeaseEnable", "allAckInSyncStateSet",
                                 "controllerLeaseDurationMills", "controllerAddr"])
def test_failover_keys_are_the_operators_only_with_lease(key: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({**LEASE, "brokerConfig": {key: "x"}})
    assert e.value.field == f"brokerConfig.{key}"
    parse_spec({"replication": {"replicasPerGroup": 2}, "brokerConfig": {key: "x"}})


# -- desired objects ---------------------------------------------------------------------------------

def test_every_member_is_a_candidate_with_a_stable_replica_id() -> None:
    p = plan(LEASE)
    assert [replica_id(k) for k in range(3)] == [1, 2, 3]
    for k in range(3):
        conf = broker_conf(p, k)
        assert conf["brokerId"] == str(k + 1)
        assert "brokerRole" not in conf
        assert {key: conf[key] for key in ("enableControllerMode", "controllerLeaseEnable", "allAckInSyncStateSet",
                                           "slaveReadEnable", "controllerLeaseDurationMills",
                                           "controllerLeaseRenewIntervalMills", "controllerLeaseMarginMills")} == {
            "enableControllerMode": "true", "controllerLeaseEnable": "true", "allAckInSyncStateSet": "true",
            "slaveReadEnable": "true", "controllerLeaseDurationMills": "3000",
            "controllerLeaseRenewIntervalMills": "1000", "controllerLeaseMarginMills": "150"}
    # no role is labelled: it changes with each election
    for sts in (statefulset(p), slave_statefulset(p, 1), slave_statefulset(p, 2)):
        assert ROLE_LABEL not in sts["spec"]["template"]["metadata"]["labels"]


def test_the_timings_reach_broker_conf() -> None:
    p = plan({"replication": {"replicasPerGroup": 2, "failover": {
        "mode": "Lease", "leaseDurationMillis": 6000, "renewIntervalMillis": 2000, "marginMillis": 300}}})
    conf = broker_conf(p, 1)
    assert (conf["controllerLeaseDurationMills"], conf["controllerLeaseRenewIntervalMills"],
            conf["controllerLeaseMarginMills"]) == ("6000", "2000", "300")


def test_lease_members_stop_gracefully_within_their_pods_grace_period() -> None:
    """A stopping member answers for the Java clients' route poll (30 s) and its pod has room for
    that beyond the minute a stop takes; brokerConfig may shorten the wait, and the pods follow."""
    conf = broker_conf(plan(LEASE), 1)
    assert (conf["enableShutdownGracefully"], conf["shutdownWaitTimeSeconds"]) == ("true", "30")
    bcfg, _ = load_config({**conf, "brokerName": "rs-1"})
    assert bcfg.enable_shutdown_gracefully and bcfg.shutdown_wait_time_seconds == 30
    assert pod_grace(statefulset(plan(LEASE))) == pod_grace(slave_statefulset(plan(LEASE), 1)) == 90
    short = plan({**LEASE, "brokerConfig": {"shutdownWaitTimeSeconds": "3"}})
    assert broker_conf(short, 2)["shutdownWaitTimeSeconds"] == "3"
    assert pod_grace(slave_statefulset(short, 2)) == 63
    off = plan({**LEASE, "brokerConfig": {"enableShutdownGracefully": "false"}})
    assert pod_grace(statefulset(off)) == 60
    # without failover no member can take the writes: the broker's default (no wait) stands
    plain = plan({"replication": {"replicasPerGroup": 2}})
    assert "enableShutdownGracefully" not in broker_conf(plain, 1)
    assert pod_grace(statefulset(plain)) == pod_grace(slave_statefulset(plain, 1)) == 60


def pod_grace(sts: dict[str, Any]) -> int:
    return int(sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])


@pytest.mark.parametrize("wait", ["-1", "thirty", "601", "2.5"])
def test_a_bad_shutdown_wait_names_the_key(wait: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({**LEASE, "brokerConfig": {"shutdownWaitTimeSeconds": wait}})
    assert e.value.field == "brokerConfig.shutdownWaitTimeSeconds" and repr(wait) in str(e.value)


def test_failover_conf_parses_with_the_brokers_own_loader() -> None:
    for k in range(3):
        bcfg, scfg = load_config({**broker_conf(plan(LEASE), k), "brokerName": "rs-1"})
        assert bcfg.broker_id == k + 1
        assert bcfg.enable_controller_mode and bcfg.controller_lease_enable and scfg.all_ack_in_sync_state_set


def test_without_failover_nothing_changes() -> None:
    p = plan({"brokers": 2, "replication": {"replicasPerGroup": 2}})
    objs = by_key(all_objects(p))
    assert not any(kind in ("Role", "RoleBinding") for kind, _ in objs)
    assert broker_conf(p)["brokerId"] == "0" and broker_conf(p, 1)["brokerId"] == "1"
    assert "enableControllerMode" not in broker_conf(p, 1)
    assert statefulset(p)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_lease_failover_grants_the_brokers_their_leases_and_mounts_the_token() -> None:
    objs = all_objects(plan(LEASE))
    kinds = [o["kind"] for o in objs]
    # the Role exists before any pod asks for its Lease
    assert kinds.index("RoleBinding") < kinds.index("StatefulSet")
    found = by_key(objs)
    sa = broker_service_account_name("rs")
    role, binding = found[("Role", sa)], found[("RoleBinding", sa)]
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "ns"}]
    for obj in (role, binding):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "1234"
    for sts_name in ("rs", "rs-slave-1", "rs-slave-2"):
        pod = found[("StatefulSet", sts_name)]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == sa and pod["automountServiceAccountToken"] is True
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # the ServiceAccount itself stays without a token: only the pods that elect mount one
    assert found[("ServiceAccount", sa)]["automountServiceAccountToken"] is False


# -- status and events -------------------------------------------------------------------------------

def lease(group: str, master: int | None, epoch: int, sync: set[int]) -> dict[str, Any]:
    info = ReplicaInfo(master_replica_id=master, master_address="" if master is None else f"10.0.0.{master}:10911",
                       master_ha_address="", master_epoch=epoch, sync_state_set=frozenset(sync),
                       sync_state_set_epoch=epoch)
    return lease_body("ns", "rs", group, info, lease_duration_seconds=3, renew_time=None, acquire_time=None,
                      resource_version="1")


def test_an_election_between_observations_is_one_message_per_group() -> None:
    before = masters_status([lease("rs-0", 1, 1, {1, 2}), lease("rs-1", 1, 4, {1})])
    after = masters_status([lease("rs-0", 2, 2, {2}), lease("rs-1", 1, 4, {1, 2})])
    assert elections(before, after) == ["rs-0: epoch 1 -> 2, master replica 2 at 10.0.0.2:10911, SyncStateSet [2]"]
    # a SyncStateSet change is no election; a group seen first is none either
    assert elections(after, after) == []
    assert elections([], after) == []
    released = masters_status([lease("rs-0", None, 3, {2})])
    assert elections(after, released) == ["rs-0: epoch 2 -> 3, no master (Lease released), SyncStateSet [2]"]


def test_an_unreadable_lease_raises_no_event() -> None:
    bad = {"metadata": {"name": "rs.rs-0", "annotations": {"rocketstore.io/sync-state-set": "{"}}, "spec": {}}
    before = masters_status([lease("rs-0", 1, 1, {1})])
    assert elections(before, masters_status([bad])) == []


def _pod(ip: str) -> dict[str, Any]:
    return {"status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]}}


def test_after_a_failover_status_groups_follow_the_brokers_roles_and_the_lease() -> None:
    spec = parse_spec({**LEASE, "brokers": 1})
    pods = {"rs-0": _pod("10.0.0.1"), "rs-slave-1-0": _pod("10.0.0.2"), "rs-slave-2-0": _pod("10.0.0.3")}
    # member 1 (replica 2) won the election: it reports MASTER and the lag of the two others
    seen = {"rs-0": ReplicationView("SLAVE", master_connected=True),
            "rs-slave-1-0": ReplicationView("MASTER", (SlaveLag("10.0.0.1:40000", 0, 0.0),
                                                       SlaveLag("10.0.0.3:40001", 3 * 1024**2, 2.5)), 1)}
    info = ReplicaInfo(master_replica_id=2, master_address="10.0.0.2:10911", master_ha_address="10.0.0.2:10912",
                       master_epoch=3,
                       sync_state_set=frozenset({1, 2}), sync_state_set_epoch=5)
    views = group_views(OWNER, spec, 1, pods, seen, {"rs-slave-2-0": "refused"}, {"rs-0": info})
    entries, condition = groups_status(spec, views)
    assert entries == [{"name": "rs-0", "mode": "Lease", "master": "rs-slave-1-0", "masterEpoch": 3,
                        "syncStateSet": [1, 2], "syncStateSetEpoch": 5, "slavesInSync": 1, "members": [
        {"name": "rs-0", "brokerId": 1, "ready": True, "role": "SLAVE", "inSyncStateSet": True, "inSync": True,
         "haAddress": "10.0.0.1:40000", "lagBytes": 0, "lagSeconds": 0.0},
        {"name": "rs-slave-1-0", "brokerId": 2, "ready": True, "role": "MASTER", "inSyncStateSet": True},
        {"name": "rs-slave-2-0", "brokerId": 3, "ready": True, "inSyncStateSet": False, "inSync": False,
         "haAddress": "10.0.0.3:40001", "lagBytes": 3 * 1024**2, "lagSeconds": 2.5, "message": "refused"}]}]
    assert (condition.status, condition.reason) == (False, "SlavesBehind") and "rs-slave-2-0" in condition.message
    # a deposed master that has not noticed yet: the Lease's master is the group's
    seen["rs-0"] = ReplicationView("MASTER", (), 0)
    master = group_views(OWNER, spec, 1, pods, seen, {}, {"rs-0": info})[0].master
    assert master is not None and master.name == "rs-slave-1-0"
