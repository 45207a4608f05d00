"""Broker groups (spec.replication), pure parts: the spec, the desired objects, the slaves-first
rollout decision, the masters' HA metrics and the groups' status. No API server, no broker."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.broker_config import load_config
from rocketstore.operator.brokers import BrokerAccess, BrokerAddressing, ReplicationView, SlaveLag, parse_ha_metrics
from rocketstore.operator.desired import (
    POD_INDEX_LABEL,
    ROLE_LABEL,
    SLAVE_LABEL,
    Owner,
    Plan,
    all_objects,
    broker_conf,
    configmap,
    group_pdbs,
    listen_port,
    slave_statefulset,
    statefulset,
)
from rocketstore.operator.model import SpecError, parse_spec
from rocketstore.operator.retention import Decision
from rocketstore.operator.rollout import GroupRollout, group_rollouts, held_masters, master_partition, pod_updated
from rocketstore.operator.sizing import volume_size
from rocketstore.operator.status import (
    REPLICATION_CONDITION,
    BrokerObservation,
    group_views,
    groups_status,
    observed_status,
)

OWNER = Owner(name="rs", namespace="ns", uid="1234")
GROUPS = {"brokers": 2, "replication": {"replicasPerGroup": 2}}
SYNC = {"brokers": 2, "replication": {"replicasPerGroup": 3, "mode": "SYNC_MASTER"}}


def plan(spec: dict[str, Any] | None = None, partition: int = 0) -> Plan:
    s = parse_spec(spec or {})
    return Plan(OWNER, s, s.brokers, volume_size(s), default_image="rocketstore/rocketstore:test",
                master_partition=partition)


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


# -- spec --------------------------------------------------------------------------------------------

def test_replication_defaults_to_one_broker_per_group() -> None:
    r = parse_spec({}).replication
    assert (r.replicas_per_group, r.mode, r.max_in_sync_lag, r.slaves) == (1, "ASYNC_MASTER", 1024**2, 0)
    r = parse_spec({"replication": {"replicasPerGroup": 3, "mode": "SYNC_MASTER", "maxInSyncLag": "64Ki"}}).replication
    assert (r.replicas_per_group, r.mode, r.max_in_sync_lag, r.slaves) == (3, "SYNC_MASTER", 65536, 2)


@pytest.mark.parametrize(("spec", "field"), [
    ({"replication": {"replicasPerGroup": 0}}, "replication.replicasPerGroup"),
    ({"replication": {"replicasPerGroup": 5}}, "replication.replicasPerGroup"),
    ({"replication": {"mode": "SLAVE", "replicasPerGroup": 2}}, "replication.mode"),
    # RocketMQ's SYNC_MASTER answers SLAVE_NOT_AVAILABLE to every send without a slave
    ({"replication": {"mode": "SYNC_MASTER"}}, "replication.mode"),
    ({"replication": {"replicasPerGroup": 2, "maxInSyncLag": "a lot"}}, "replication.maxInSyncLag"),
    ({"replication": {"replicasPerGroup": 2}, "externalAccess": {"type": "LoadBalancer"}},
     "replication.replicasPerGroup"),
    # the slaves' node ports (basePort + 64..127) take namesrvNodePort's
    ({"replication": {"replicasPerGroup": 2}, "externalAccess": {"basePort": 30000, "namesrvNodePort": 30100}},
     "externalAccess.namesrvNodePort"),
    ({"brokers": 64, "replication": {"replicasPerGroup": 4}, "externalAccess": {"basePort": 65300}},
     "externalAccess.basePort"),
    ({"replication": {}, "brokerConfig": {"brokerRole": "SLAVE"}}, "brokerConfig.brokerRole"),
    ({"replication": {"replicasPerGroup": 2}, "brokerConfig": {"namesrvAddr": "x:9876"}}, "brokerConfig.namesrvAddr"),
])
def test_bad_replication_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert e.value.field == field


def test_broker_role_stays_free_in_broker_config_without_replication() -> None:
    """Specs written before broker groups keep working: brokerRole was a plain brokerConfig key."""
    assert parse_spec({"brokerConfig": {"brokerRole": "ASYNC_MASTER"}}).broker_config == {"brokerRole": "ASYNC_MASTER"}


# -- desired objects -----------------------------------------------------------------------------------

def test_one_broker_per_group_builds_exactly_what_it_did_before() -> None:
    """replicasPerGroup 1, written or not: no slave objects, the store-wide PDB, the same masters."""
    before = all_objects(plan({"brokers": 3}))
    assert all_objects(plan({"brokers": 3, "replication": {"replicasPerGroup": 1}})) == before
    assert [o["kind"] for o in before] == [
        "ServiceAccount", "ConfigMap", "Service", "Service", "PodDisruptionBudget", "StatefulSet"]
    sts = before[-1]
    assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    assert list(configmap(plan({"brokers": 3}))["data"]) == ["broker.conf"]
    assert "brokerRole" not in broker_conf(plan({"brokers": 3}))


def test_groups_add_a_statefulset_per_slave_and_a_budget_per_group() -> None:
    objs = all_objects(plan(SYNC, partition=2))
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("ServiceAccount", "rs-broker"), ("ConfigMap", "rs-config"), ("Service", "rs-headless"), ("Service", "rs"),
        ("PodDisruptionBudget", "rs-0"), ("PodDisruptionBudget", "rs-1"),
        ("StatefulSet", "rs-slave-1"), ("StatefulSet", "rs-slave-2"), ("StatefulSet", "rs")]
    for o in objs:
        assert o["metadata"]["ownerReferences"][0]["uid"] == "1234"
    pdbs = group_pdbs(plan(SYNC))
    assert [p["spec"] for p in pdbs] == [
        {"minAvailable": 2, "selector": {"matchLabels": {
            "app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/instance": "rs", POD_INDEX_LABEL: str(i)}}}
        for i in range(2)]
    masters = objs[-1]["spec"]
    assert masters["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}


def test_a_slave_statefulset_is_every_groups_slave_on_its_own_volumes() -> None:
    sts = slave_statefulset(plan(GROUPS), 1)
    spec = sts["spec"]
    assert sts["metadata"]["name"] == "rs-slave-1" and spec["replicas"] == 2
    # the pods' DNS names come from the store's headless Service, like the masters'
    assert spec["serviceName"] == "rs-headless"
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/instance": "rs", SLAVE_LABEL: "1"}
    labels = spec["template"]["metadata"]["labels"]
    assert labels[SLAVE_LABEL] == "1" and labels["app.kubernetes.io/component"] == "broker"
    # its own PVCs (store-rs-slave-1-<i>), sized like the masters', kept like theirs
    assert spec["volumeClaimTemplates"] == statefulset(plan(GROUPS))["spec"]["volumeClaimTemplates"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert spec["updateStrategy"] == {"type": "RollingUpdate"}
    pod = spec["template"]["spec"]
    assert pod["topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rocketstore",
                                          "app.kubernetes.io/instance": "rs"}},
        "matchLabelKeys": [POD_INDEX_LABEL]}]


def test_user_spread_constraints_stay_and_the_group_spread_is_added() -> None:
    user = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}
    sts = slave_statefulset(plan({**GROUPS, "scheduling": {"topologySpreadConstraints": [user]}}), 1)
    spread = sts["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]


def test_adding_a_slave_under_async_master_does_not_touch_the_masters_pods() -> None:
    """Raising replicasPerGroup adds StatefulSets; the masters' pod template stays as it is, so no
    master restarts (the new slave copies its data over HA)."""
    single, grouped = statefulset(plan({"brokers": 2})), statefulset(plan(GROUPS, partition=2))
    assert grouped["spec"]["template"] == single["spec"]["template"]
    assert grouped["spec"]["selector"] == single["spec"]["selector"]
    # only namesrvPeers (live, outside the hash) names the new slaves' name servers
    grouped_conf, single_conf = broker_conf(plan(GROUPS)), broker_conf(plan({"brokers": 2}))
    assert grouped_conf.pop("namesrvPeers") != single_conf.pop("namesrvPeers")
    assert grouped_conf == single_conf


def test_every_broker_registers_with_the_name_server_of_every_pod_of_the_store() -> None:
    """namesrvPeers: masters' and slaves' name servers at their stable DNS names, the same list
    for every role; it is pushed live, so scaling changes no pod template."""
    p = plan(SYNC)
    want = ";".join(f"{pod}.rs-headless.ns.svc:9876" for pod in (
        "rs-0", "rs-1", "rs-slave-1-0", "rs-slave-1-1", "rs-slave-2-0", "rs-slave-2-1"))
    assert broker_conf(p)["namesrvPeers"] == broker_conf(p, 1)["namesrvPeers"] == want
    assert broker_conf(plan({"brokers": 1}))["namesrvPeers"] == "rs-0.rs-headless.ns.svc:9876"
    # parsed by the broker's own loader as a name-server list
    bcfg, _ = load_config({**broker_conf(p, 2), "brokerName": "rs-1"})
    assert bcfg.namesrv_peers == want
    assert (statefulset(plan({**SYNC, "brokers": 3}))["spec"]["template"]
            == statefulset(plan(SYNC))["spec"]["template"])
    with pytest.raises(SpecError, match="namesrvPeers"):
        parse_spec({"brokerConfig": {"namesrvPeers": "elsewhere:9876"}})


def test_sync_master_is_the_masters_role_and_slaves_have_theirs() -> None:
    p = plan(SYNC)
    master, slave2 = broker_conf(p), broker_conf(p, 2)
    assert master["brokerId"] == "0" and master["brokerRole"] == "SYNC_MASTER"
    assert slave2["brokerId"] == "2" and slave2["brokerRole"] == "SLAVE"
    # a slave serves reads (while its master is down); the master's conf does not change with slaves
    assert slave2["slaveReadEnable"] == "true" and "slaveReadEnable" not in master
    assert list(master)[:3] == ["brokerClusterName", "brokerId", "brokerRole"]
    assert {k: v for k, v in slave2.items() if k not in ("brokerId", "brokerRole", "slaveReadEnable")} == {
        k: v for k, v in master.items() if k not in ("brokerId", "brokerRole")}
    # brokerConfig still decides
    assert broker_conf(plan({**SYNC, "brokerConfig": {"slaveReadEnable": "false"}}), 1)["slaveReadEnable"] == "false"
    data = configmap(p)["data"]
    assert list(data) == ["broker.conf", "broker-slave-1.conf", "broker-slave-2.conf"]
    assert "brokerRole=SLAVE\n" in data["broker-slave-1.conf"] and "brokerId=1\n" in data["broker-slave-1.conf"]
    # the roles the operator writes label the pods (the chart's SYNC_MASTER alert selects on it)
    assert statefulset(p)["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == "SYNC_MASTER"
    assert slave_statefulset(p, 1)["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == "SLAVE"
    assert ROLE_LABEL not in statefulset(plan(GROUPS))["spec"]["template"]["metadata"]["labels"]
    assert statefulset(p)["spec"]["selector"] == statefulset(plan(GROUPS))["spec"]["selector"]
    # a slave's template hashes its own configuration
    hashes = {sts["spec"]["template"]["metadata"]["annotations"]["rocketstore.io/config-hash"]
              for sts in (statefulset(p), slave_statefulset(p, 1), slave_statefulset(p, 2))}
    assert len(hashes) == 3


def test_slave_conf_parses_with_the_brokers_own_loader() -> None:
    props = {**broker_conf(plan(SYNC), 1), "brokerName": "rs-1", "namesrvAddr": "rs-1.rs-headless.ns.svc:9876"}
    bcfg, scfg = load_config(props)
    assert bcfg.broker_name == "rs-1" and bcfg.broker_id == 1
    assert scfg.broker_role.name == "SLAVE"
    bcfg, scfg = load_config({**broker_conf(plan(SYNC)), "brokerName": "rs-0"})
    assert bcfg.broker_id == 0 and scfg.broker_role.name == "SYNC_MASTER"


def run_start_command(container: dict[str, Any], tmp_path: Path, conf: dict[str, str], **env: str) -> list[str]:
    """Runs a container's start command with sh; ``rocketstore`` is a script printing the
    broker.conf it was given."""
    for d in ("conf", "run", "bin"):
        (tmp_path / d).mkdir(exist_ok=True)
    for name, text in conf.items():
        (tmp_path / "conf" / name).write_text(text)
    (tmp_path / "bin" / "rocketstore").write_text('#!/bin/sh\ncat "$3"\n')
    (tmp_path / "bin" / "rocketstore").chmod(0o755)
    full = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    full.update(CONF_DIR=str(tmp_path / "conf"), RUN_DIR=str(tmp_path / "run"),
                PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", **env)
    return subprocess.run(container["command"], env=full, capture_output=True, text=True,
                          check=True).stdout.splitlines()


def test_slave_start_command_names_its_group_and_its_masters_name_server(tmp_path: Path) -> None:
    p = plan(SYNC)
    container = slave_statefulset(p, 2)["spec"]["template"]["spec"]["containers"][0]
    out = run_start_command(container, tmp_path, configmap(p)["data"], POD_NAME="rs-slave-2-1", POD_NAMESPACE="ns")
    assert "brokerId=2" in out and "brokerRole=SLAVE" in out
    assert out[-2:] == ["brokerName=rs-1", "namesrvAddr=rs-1.rs-headless.ns.svc:9876"]
    # spelled as in namesrvPeers, so the slave registers with its master's name server once
    peers = next(line for line in out if line.startswith("namesrvPeers=")).removeprefix("namesrvPeers=")
    assert "rs-1.rs-headless.ns.svc:9876" in peers.split(";")
    master = statefulset(p)["spec"]["template"]["spec"]["containers"][0]
    out = run_start_command(master, tmp_path, configmap(p)["data"], POD_NAME="rs-1", POD_NAMESPACE="ns")
    assert "brokerRole=SYNC_MASTER" in out and out[-1] == "brokerName=rs-1"


# -- rollout: slaves first ---------------------------------------------------------------------------

def group(i: int, *, master_ready: bool = True, master_updated: bool = False, slaves_updated: bool = True,
          in_sync: bool = True) -> GroupRollout:
    return GroupRollout(i, master_ready, master_updated, slaves_updated, in_sync)


def test_masters_wait_for_their_slaves_to_be_updated_and_in_sync() -> None:
    assert master_partition(3, [group(0), group(1), group(2)]) == 0
    assert master_partition(3, [group(0), group(1), group(2, slaves_updated=False)]) == 3
    assert master_partition(3, [group(0), group(1), group(2, in_sync=False)]) == 3
    # the controller rolls from the top ordinal down: a held group holds those below it
    assert master_partition(3, [group(0), group(1, in_sync=False), group(2)]) == 2
    assert master_partition(3, [group(0, slaves_updated=False), group(1), group(2)]) == 1


def test_a_master_already_updated_or_not_ready_never_holds_the_rollout() -> None:
    # group 2's master restarted: its slaves are catching up again, the groups below go on
    assert master_partition(3, [group(0), group(1), group(2, master_updated=True, in_sync=False)]) == 0
    # a crash-looping master takes the new template (it serves nothing to lose)
    assert master_partition(2, [group(0), group(1, master_ready=False, slaves_updated=False, in_sync=False)]) == 0
    # a group not observed holds
    assert master_partition(2, [group(0)]) == 2


def test_held_masters_are_those_below_the_partition_on_the_old_template() -> None:
    groups = [group(0), group(1, master_updated=True), group(2, in_sync=False), group(3)]
    partition = master_partition(4, groups)
    assert partition == 3 and held_masters("rs", partition, groups) == ["rs-0", "rs-2"]
    spec = parse_spec(GROUPS)
    broker = BrokerObservation("rs-0", "a", pod("rs-0"), None)
    report = observed_status(spec, 1, [broker], Decision(72, False, "Fixed"), None, "t",
                             group_views(OWNER, spec, 1, {"rs-slave-1-0": pod("rs-slave-1-0")}, {}), ["rs-0"])
    progressing = next(c for c in report.conditions if c.type == "Progressing")
    assert progressing.status
    assert "new template held from rs-0 until their slaves are updated and in sync" in progressing.message


def sts(name: str, generation: int = 2, observed: int = 2, update: str = "rev-new") -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation},
            "status": {"observedGeneration": observed, "updateRevision": update, "currentRevision": "rev-old"}}


def pod(name: str, revision: str = "rev-new", ready: bool = True, ip: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": {"name": name, "labels": {"controller-revision-hash": revision}}, "status": status}


def test_pod_updated_needs_the_controller_to_have_seen_the_latest_spec() -> None:
    assert pod_updated(sts("rs-slave-1"), pod("rs-slave-1-0"))
    assert not pod_updated(sts("rs-slave-1"), pod("rs-slave-1-0", revision="rev-old"))
    # just applied: updateRevision is still the previous template's
    assert not pod_updated(sts("rs-slave-1", generation=3), pod("rs-slave-1-0"))
    assert not pod_updated(None, pod("rs-slave-1-0")) and not pod_updated(sts("rs-slave-1"), {})


def test_group_rollouts_from_statefulsets_pods_and_lag() -> None:
    spec = parse_spec(GROUPS)
    pods = {"rs-0": pod("rs-0", "rev-old"), "rs-1": pod("rs-1", "rev-old"),
            "rs-slave-1-0": pod("rs-slave-1-0", ip="10.0.0.5"), "rs-slave-1-1": pod("rs-slave-1-1", ip="10.0.0.6")}
    masters = {"rs-0": ReplicationView("MASTER", (SlaveLag("10.0.0.5:41000", 10, 0.0),), 1),
               "rs-1": ReplicationView("MASTER", (SlaveLag("10.0.0.6:41000", 5 * 1024**2, 3.0),), 0)}
    views = group_views(OWNER, spec, 2, pods, masters)
    rollouts = group_rollouts("rs", views, {"rs": sts("rs"), "rs-slave-1": sts("rs-slave-1")})
    assert rollouts == [GroupRollout(0, True, False, True, True), GroupRollout(1, True, False, True, False)]
    # group 1's slave is 5 MiB behind (maxInSyncLag 1Mi): its master waits, and holds group 0's
    assert master_partition(2, rollouts) == 2


# -- HA metrics and status ---------------------------------------------------------------------------

METRICS = """\
# HELP rocketstore_ha_slave_lag_bytes CommitLog bytes the slave has yet to confirm
# TYPE rocketstore_ha_slave_lag_bytes gauge
rocketstore_ha_slave_lag_bytes{slave="10.0.0.5:41000"} 0.0
rocketstore_ha_slave_lag_bytes{slave="10.0.0.7:52000"} 2097152.0
# HELP rocketstore_ha_slave_lag_seconds seconds since the slave confirmed the master's last append
# TYPE rocketstore_ha_slave_lag_seconds gauge
rocketstore_ha_slave_lag_seconds{slave="10.0.0.5:41000"} 0.0
rocketstore_ha_slave_lag_seconds{slave="10.0.0.7:52000"} 4.5
# HELP rocketstore_ha_slaves_in_sync slaves in sync
# TYPE rocketstore_ha_slaves_in_sync gauge
rocketstore_ha_slaves_in_sync 1.0
# TYPE rocketstore_commitlog_max_offset gauge
rocketstore_commitlog_max_offset 12345.0
"""

#: a slave's HA families: the master's without samples, its own with
SLAVE_METRICS = """\
# TYPE rocketstore_ha_slave_lag_bytes gauge
# TYPE rocketstore_ha_slaves_in_sync gauge
# TYPE rocketstore_ha_master_connected gauge
rocketstore_ha_master_connected 1.0
# TYPE rocketstore_ha_slave_behind_refused gauge
rocketstore_ha_slave_behind_refused 0.0
"""


def test_parse_ha_metrics() -> None:
    assert parse_ha_metrics(METRICS) == ReplicationView(
        "MASTER", (SlaveLag("10.0.0.5:41000", 0, 0.0), SlaveLag("10.0.0.7:52000", 2 * 1024**2, 4.5)), 1)
    assert parse_ha_metrics("# no HA here\nup 1\n") == ReplicationView()
    assert parse_ha_metrics(SLAVE_METRICS) == ReplicationView("SLAVE", master_connected=True)
    assert SlaveLag("[fd00::5]:41000").host == "fd00::5"


def test_metrics_address_follows_the_broker_addressing() -> None:
    assert BrokerAddressing().http_address("rs", "ns", 1, 10925) == "rs-1.rs-headless.ns.svc:10925"
    assert BrokerAddressing.from_text("127.0.0.1:{port}").http_address("rs", "ns", 0, 18080) == "127.0.0.1:18080"
    pinned = BrokerAddressing.from_text("ns/rs-0=127.0.0.1:20911;ns/rs-slave-1-0=127.0.0.2:20912")
    assert pinned.http_address("rs", "ns", 0, 20925) == "127.0.0.1:20925"
    assert pinned.http_address("rs", "ns", 0, 20925, slave=1) == "127.0.0.2:20925"
    assert BrokerAddressing().http_address("rs", "ns", 1, 10925, slave=2) == "rs-slave-2-1.rs-headless.ns.svc:10925"


def test_groups_status_lists_roles_and_lag() -> None:
    spec = parse_spec(SYNC)
    pods = {"rs-0": pod("rs-0"), "rs-slave-1-0": pod("rs-slave-1-0", ip="10.0.0.5"),
            "rs-slave-2-0": pod("rs-slave-2-0", ip="10.0.0.7", ready=False), "rs-1": pod("rs-1")}
    seen = {"rs-0": parse_ha_metrics(METRICS), "rs-slave-1-0": parse_ha_metrics(SLAVE_METRICS)}
    views = group_views(OWNER, spec, 2, pods, seen, {"rs-1": "rs-1:10925/metrics: refused"})
    entries, condition = groups_status(spec, views)
    assert entries[0] == {"name": "rs-0", "mode": "SYNC_MASTER", "master": "rs-0", "slavesInSync": 1, "members": [
        {"name": "rs-0", "role": "MASTER", "brokerId": 0, "ready": True},
        {"name": "rs-slave-1-0", "role": "SLAVE", "brokerId": 1, "ready": True, "inSync": True,
         "haAddress": "10.0.0.5:41000", "lagBytes": 0, "lagSeconds": 0.0},
        # its own /metrics not read: no role, the lag is still its master's word
        {"name": "rs-slave-2-0", "brokerId": 2, "ready": False, "inSync": False,
         "haAddress": "10.0.0.7:52000", "lagBytes": 2 * 1024**2, "lagSeconds": 4.5}]}
    # group 1: its master's metrics could not be read, its slaves have no pods
    assert entries[1]["message"] == "no member reports the MASTER role (rs-1: rs-1:10925/metrics: refused)"
    assert "slavesInSync" not in entries[1] and "master" not in entries[1]
    assert entries[1]["members"][0] == {"name": "rs-1", "brokerId": 0, "ready": True, "inSync": False,
                                        "message": "rs-1:10925/metrics: refused"}
    assert [m["inSync"] for m in entries[1]["members"][1:]] == [False, False]
    assert (condition.type, condition.status, condition.reason) == (REPLICATION_CONDITION, False, "SlavesBehind")
    assert "rs-slave-2-0" in condition.message and "rs-slave-1-0" not in condition.message


def test_a_sync_master_without_a_slave_in_sync_is_its_own_reason() -> None:
    spec = parse_spec(SYNC)
    views = group_views(OWNER, spec, 2, {}, {"rs-0": ReplicationView("MASTER", (), 1),
                                              "rs-1": ReplicationView("MASTER", (), 0)})
    _, condition = groups_status(spec, views)
    assert (condition.status, condition.reason) == (False, "NoSlaveInSync")
    assert "rs-1" in condition.message and "rs-0" not in condition.message
    # ASYNC_MASTER takes writes without a slave: only behind
    async_spec = parse_spec(GROUPS)
    _, condition = groups_status(async_spec, group_views(OWNER, async_spec, 1, {},
                                                         {"rs-0": ReplicationView("MASTER", (), 0)}))
    assert condition.reason == "SlavesBehind"


def test_every_slave_in_sync() -> None:
    spec = parse_spec(GROUPS)
    pods = {"rs-slave-1-0": pod("rs-slave-1-0", ip="10.0.0.5")}
    master = ReplicationView("MASTER", (SlaveLag("10.0.0.5:1", 1024**2, 0.1),), 1)
    views = group_views(OWNER, spec, 1, pods, {"rs-0": master})
    _, condition = groups_status(spec, views)
    assert (condition.status, condition.reason) == (True, "AllSlavesInSync")


def test_observed_status_carries_groups_only_with_slaves() -> None:
    fixed = Decision(72, False, "Fixed")
    single = parse_spec({"brokers": 1})
    broker = BrokerObservation("rs-0", "rs-0.rs-headless.ns.svc:10911", pod("rs-0"), None)
    report = observed_status(single, 1, [broker], fixed, None, "2026-01-02T03:04:05Z")
    assert report.status["groups"] is None and REPLICATION_CONDITION in report.dropped
    grouped = parse_spec({"replication": {"replicasPerGroup": 2}})
    views = group_views(OWNER, grouped, 1, {}, {})
    report = observed_status(grouped, 1, [broker], fixed, None, "2026-01-02T03:04:05Z", views)
    assert [g["name"] for g in report.status["groups"]] == ["rs-0"]
    assert REPLICATION_CONDITION not in report.dropped
    assert {c.type for c in report.conditions} >= {"Ready", REPLICATION_CONDITION}
    # the master is ready, its slave has no pod yet: the store is not Ready
    ready = next(c for c in report.conditions if c.type == "Ready")
    assert (ready.status, ready.message) == (False, "1/1 broker pods ready, 0/1 slave pods")
    views = group_views(OWNER, grouped, 1, {"rs-slave-1-0": pod("rs-slave-1-0")}, {})
    report = observed_status(grouped, 1, [broker], fixed, None, "2026-01-02T03:04:05Z", views)
    ready = next(c for c in report.conditions if c.type == "Ready")
    assert (ready.status, ready.message) == (True, "1/1 broker pods ready, 1/1 slave pods")


# -- clients outside the cluster ---------------------------------------------------------------------

EXTERNAL = {"brokers": 2, "replication": {"replicasPerGroup": 3},
            "externalAccess": {"basePort": 31000, "namesrvNodePort": 30876}}


def test_slaves_get_node_ports_of_their_own_above_every_master() -> None:
    assert parse_spec({"externalAccess": {"basePort": 30000, "namesrvNodePort": 30100}}).external_access
    services = {(o["metadata"]["name"]): o for o in all_objects(plan(EXTERNAL)) if o["kind"] == "Service"}
    ports = {name: s["spec"]["ports"][0]["nodePort"] for name, s in services.items() if name.endswith("-external")}
    assert ports == {"rs-0-external": 31000, "rs-1-external": 31001,
                     "rs-slave-1-0-external": 31064, "rs-slave-1-1-external": 31065,
                     "rs-slave-2-0-external": 31128, "rs-slave-2-1-external": 31129,
                     "rs-namesrv-external": 30876}
    slave = services["rs-slave-2-1-external"]["spec"]
    assert slave["selector"]["statefulset.kubernetes.io/pod-name"] == "rs-slave-2-1"
    assert slave["ports"] == [{"name": "remoting", "port": 31129, "targetPort": 31129, "protocol": "TCP",
                               "nodePort": 31129},
                              # grpcBasePort (basePort + 256) + 64 k + i: the remoting port's offset
                              {"name": "grpc", "port": 31385, "targetPort": "grpc", "protocol": "TCP",
                               "nodePort": 31385}]


def test_external_slave_start_command_writes_its_port_and_address(tmp_path: Path) -> None:
    p = plan({**EXTERNAL, "externalAccess": {**EXTERNAL["externalAccess"], "host": "ext.example"}})
    container = slave_statefulset(p, 2)["spec"]["template"]["spec"]["containers"][0]
    out = run_start_command(container, tmp_path, configmap(p)["data"], POD_NAME="rs-slave-2-1", POD_NAMESPACE="ns",
                            HOST_IP="10.1.2.3")
    assert out[-4:] == ["brokerName=rs-1", "namesrvAddr=rs-1.rs-headless.ns.svc:9876", "listenPort=31129",
                        "brokerIP1=ext.example"]
    container["env"] = [e for e in container["env"] if e["name"] != "EXTERNAL_HOST"]
    out = run_start_command(container, tmp_path, configmap(p)["data"], POD_NAME="rs-slave-2-1", POD_NAMESPACE="ns",
                            HOST_IP="10.1.2.3")
    assert out[-1] == "brokerIP1=10.1.2.3"


# -- slaves take the live keys too -------------------------------------------------------------------

def test_slave_addresses() -> None:
    assert BrokerAddressing().address("rs", "ns", 1, 10911, slave=2) == "rs-slave-2-1.rs-headless.ns.svc:10911"
    assert BrokerAddressing.from_text("{pod}@{ordinal}:{port}").address("rs", "ns", 1, 9, slave=2) == "rs-slave-2-1@1:9"
    pinned = BrokerAddressing.from_text("ns/rs-slave-1-0=127.0.0.1:20911")
    assert pinned.address("rs", "ns", 0, slave=1) == "127.0.0.1:20911"
    assert pinned.address("rs", "ns", 1, slave=1) == "rs-slave-1-1.rs-headless.ns.svc:10911"


def test_ready_slaves_get_the_retention_and_peers_pushed() -> None:
    """A slave runs the live keys of its broker.conf from its start; changes reach it as they reach
    the masters, by UPDATE_BROKER_CONFIG (the ConfigMap change rolls nobody)."""
    import asyncio

    from rocketstore.operator.brokers import Brokers
    from rocketstore.operator.reconcile import Outcome, _converge_slaves

    running: dict[str, dict[str, str]] = {"rs-slave-1-0:10911": {"fileReservedTime": "72"}}

    class Admin:
        def __init__(self, addr: str) -> None:
            self.addr = addr

        def get_broker_config(self) -> dict[str, str]:
            return dict(running.setdefault(self.addr, {}))

        def update_broker_config(self, props: Any) -> None:
            running[self.addr].update(props)

        def close(self) -> None:
            pass

    brokers = Brokers(BrokerAddressing.from_text("{pod}:{port}"), factory=lambda addr, _: Admin(addr))  # type: ignore[arg-type,return-value]
    spec = parse_spec({"replication": {"replicasPerGroup": 2}, "retention": {"fileReservedTime": 24}})
    want = spec.retention.broker_properties()
    out = Outcome()
    pods = {"rs-slave-1-0": pod("rs-slave-1-0"), "rs-slave-1-1": pod("rs-slave-1-1", ready=False)}
    peers = {"clusterPeers": "rs-0@a:1", "namesrvPeers": "a:9876;b:9876"}
    asyncio.run(_converge_slaves(brokers, BrokerAccess(), OWNER, spec, 2, pods, want, peers, out))
    # a broker that does not report namesrvPeers (an older image) would refuse the whole update with it
    assert running["rs-slave-1-0:10911"] == {**want, "clusterPeers": "rs-0@a:1"}
    assert "rs-slave-1-1:10911" not in running  # not ready: nothing to push to yet
    assert [e.reason for e in out.events] == ["BrokerConfigApplied"]
    # one that does gets it
    running["rs-slave-1-0:10911"]["namesrvPeers"] = ""
    asyncio.run(_converge_slaves(brokers, BrokerAccess(), OWNER, spec, 2, pods, want, peers, out))
    assert running["rs-slave-1-0:10911"] == {**want, **peers}
    # metricsPerQueueEnable (spec.metrics.perQueue) likewise: only where the broker reports it
    live = {**peers, **parse_spec({"metrics": {"perQueue": False}}).metrics.broker_properties()}
    asyncio.run(_converge_slaves(brokers, BrokerAccess(), OWNER, spec, 2, pods, want, live, out))
    assert "metricsPerQueueEnable" not in running["rs-slave-1-0:10911"]
    running["rs-slave-1-0:10911"]["metricsPerQueueEnable"] = "true"
    asyncio.run(_converge_slaves(brokers, BrokerAccess(), OWNER, spec, 2, pods, want, live, out))
    assert running["rs-slave-1-0:10911"]["metricsPerQueueEnable"] == "false"


def test_users_and_acls_go_to_the_masters_that_answered_and_every_ready_slave() -> None:
    """spec.auth: each broker keeps its own users and ACLs, so slaves (which serve reads, and with
    failover become masters) are converged too, as soon as they are ready."""
    from rocketstore.operator.brokers import Brokers
    from rocketstore.operator.reconcile import auth_targets

    brokers = Brokers(BrokerAddressing.from_text("{pod}:{port}"))
    spec = parse_spec({"replication": {"replicasPerGroup": 3}})
    pods = {"rs-slave-1-0": pod("rs-slave-1-0"), "rs-slave-1-1": pod("rs-slave-1-1", ready=False),
            "rs-slave-2-1": pod("rs-slave-2-1")}
    targets = auth_targets(brokers, OWNER, spec, 2, ["rs-0:10911", "rs-1:10911"], {1}, pods)
    assert [name for name, _ in targets] == ["rs-1", "rs-slave-1-0", "rs-slave-2-1"]
    assert dict(targets)["rs-slave-1-0"] == brokers.address(OWNER.name, OWNER.namespace, 0, listen_port(spec, 0, 1),
                                                            slave=1)
    # without slaves, the masters alone, as before
    assert auth_targets(brokers, OWNER, parse_spec({}), 2, ["rs-0:10911", "rs-1:10911"], {0, 1}, {}) == [
        ("rs-0", "rs-0:10911"), ("rs-1", "rs-1:10911")]
