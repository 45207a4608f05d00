"""Automatic failover (spec.replication.failover: Lease) against a REAL API server: the operator
applies the brokers' Role and RoleBinding and mounts their ServiceAccount token; a group Lease
written as the brokers' elector writes it (rocketstore.common.replica_lease) shows up in
status.masters, and a new epoch raises a MasterElected event; the brokers' token may get and
update the Leases of its namespace and nothing in another; switching it off is refused."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from operator_support import wait_until, write_kubeconfig
from test_operator_cluster import G, P, V, condition, create, get, make_ns, patch_spec, store

from rocketstore.common.replica_lease import ReplicaInfo, lease_body, micro_time, parse_lease

pytestmark = pytest.mark.integration

NAME = "fo"
FAILOVER = {"replicasPerGroup": 2, "failover": {"mode": "Lease"}}


@pytest.mark.parametrize(("spec", "expected"), [
    ({"replicasPerGroup": 1, "failover": {"mode": "Lease"}}, "failover Lease needs a group to fail over to"),
    ({"replicasPerGroup": 2, "failover": {"mode": "Lease", "renewIntervalMillis": 3000}},
     "renewIntervalMillis must be below leaseDurationMillis"),
    ({"replicasPerGroup": 2, "failover": {"mode": "Lease", "leaseDurationMillis": 2000, "marginMillis": 1000}},
     "marginMillis must be below leaseDurationMillis - renewIntervalMillis"),
    ({"replicasPerGroup": 2, "failover": {"mode": "Raft"}}, 'spec.replication.failover.mode: Unsupported value'),
])
def test_invalid_failover_is_rejected_by_the_api_server(kube: Any, crd: Any, spec: dict[str, Any],
                                                        expected: str) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "bad"},
            "spec": {"replication": spec}}
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body)
    assert e.value.status == 422
    message = json.loads(e.value.body)["message"]
    assert expected in message, message


def group_lease(ns: str, group: str, master: int, epoch: int, sync: set[int],
                resource_version: str | None = None) -> dict[str, Any]:
    """The Lease as the master's elector writes it."""
    info = ReplicaInfo(master_replica_id=master, master_address=f"10.1.0.{master}:10911",
                       master_ha_address=f"10.1.0.{master}:10912", master_epoch=epoch,
                       sync_state_set=frozenset(sync), sync_state_set_epoch=epoch)
    now = micro_time(time.time())
    return lease_body(ns, NAME, group, info, lease_duration_seconds=3, renew_time=now, acquire_time=now,
                      resource_version=resource_version)


def test_lease_failover_end_to_end(kube: Any, control_plane: Any, operator_process: Any, tmp_path: Path) -> None:
    ns = make_ns(kube, "t-failover")
    other = make_ns(kube, "t-failover-other")
    create(kube, ns, store(NAME, brokers=1, replication=FAILOVER))
    rbac, apps, core = client.RbacAuthorizationV1Api(kube), client.AppsV1Api(kube), client.CoreV1Api(kube)
    coordination = client.CoordinationV1Api(kube)
    sa = f"{NAME}-broker"

    # 1. what the operator applies
    binding = wait_until("RoleBinding", lambda: _read(lambda: rbac.read_namespaced_role_binding(sa, ns)), 60)
    role = rbac.read_namespaced_role(sa, ns)
    assert [(r.api_groups, r.resources, r.verbs) for r in role.rules] == [
        (["coordination.k8s.io"], ["leases"], ["get", "create", "update"])]
    assert [(s.kind, s.name) for s in binding.subjects] == [("ServiceAccount", sa)]
    for obj in (role, binding):
        assert obj.metadata.owner_references[0].kind == "RocketStore"
    for sts_name, replica in ((NAME, 1), (f"{NAME}-slave-1", 2)):
        sts = wait_until(sts_name, lambda n=sts_name: _read(lambda: apps.read_namespaced_stateful_set(n, ns)), 60)
        pod = sts.spec.template.spec
        assert pod.automount_service_account_token is True and pod.service_account_name == sa
        env = {e.name: e for e in pod.containers[0].env}
        assert env["POD_NAMESPACE"].value_from.field_ref.field_path == "metadata.namespace"
        conf_name = "broker.conf" if replica == 1 else "broker-slave-1.conf"
        conf = dict(line.split("=", 1) for line in core.read_namespaced_config_map(
            f"{NAME}-config", ns).data[conf_name].splitlines() if "=" in line)
        assert conf["brokerId"] == str(replica) and "brokerRole" not in conf
        assert (conf["enableControllerMode"], conf["controllerLeaseEnable"], conf["allAckInSyncStateSet"]) == (
            "true", "true", "true")
        assert conf["controllerLeaseDurationMills"] == "3000"

    # 2. a group Lease as the master's elector writes it shows up in status.masters
    group = f"{NAME}-0"
    created = coordination.create_namespaced_lease(ns, group_lease(ns, group, 1, 1, {1, 2}))

    def masters() -> list[dict[str, Any]]:
        return list(get(kube, ns, NAME).get("status", {}).get("masters") or [])

    entry = wait_until("status.masters", lambda: next(iter(masters()), None), 60)
    assert (entry["brokerName"], entry["masterReplicaId"], entry["masterEpoch"], entry["syncStateSet"],
            entry["masterAddress"]) == (group, 1, 1, [1, 2], "10.1.0.1:10911")

    # 3. an election (a new epoch, the slave as master) raises an event
    coordination.replace_namespaced_lease(created.metadata.name, ns, group_lease(
        ns, group, 2, 2, {2}, created.metadata.resource_version))
    wait_until("epoch 2 in status", lambda: [m.get("masterEpoch") for m in masters()] == [2], 60)

    def elected() -> list[str]:
        return [e.message for e in core.list_namespaced_event(ns).items
                if e.reason == "MasterElected" and e.involved_object.name == NAME]

    messages = wait_until("MasterElected event", elected, 30)
    assert f"{group}: epoch 1 -> 2, master replica 2 at 10.1.0.2:10911" in messages[0], messages

    # 4. the brokers' own token: their group's Lease yes, another namespace's no
    token = core.create_namespaced_service_account_token(sa, ns, {"spec": {"expirationSeconds": 3600}}).status.token
    kubeconfig = write_kubeconfig(tmp_path / "broker.kubeconfig", control_plane.server,
                                  {"broker": {"token": token}}, "broker")
    broker = client.CoordinationV1Api(config.new_client_from_config(str(kubeconfig)))
    mine = broker.read_namespaced_lease(created.metadata.name, ns)
    lease = parse_lease(client.ApiClient().sanitize_for_serialization(mine))
    assert lease.info.master_replica_id == 2
    broker.replace_namespaced_lease(created.metadata.name, ns, group_lease(
        ns, group, 2, 2, {1, 2}, mine.metadata.resource_version))
    foreign = coordination.create_namespaced_lease(other, group_lease(other, group, 1, 1, {1}))
    for call in (lambda: broker.read_namespaced_lease(foreign.metadata.name, other),
                 lambda: broker.replace_namespaced_lease(foreign.metadata.name, other, group_lease(
                     other, group, 2, 2, {2}, foreign.metadata.resource_version))):
        with pytest.raises(ApiException) as e:
            call()
        assert e.value.status == 403
    # no list or delete in its own namespace either
    with pytest.raises(ApiException) as e:
        broker.delete_namespaced_lease(created.metadata.name, ns)
    assert e.value.status == 403

    # 5. failover switched off on the running store: refused (test_operator_failover_switch.py),
    # the grant and status.masters stay
    patch_spec(kube, ns, NAME, {"replication": {"failover": {"mode": "None"}}})
    wait_until("FailoverOffRefused", lambda: (c := condition(get(kube, ns, NAME), "Degraded")) is not None
               and c["reason"] == "FailoverOffRefused", 60)
    assert rbac.read_namespaced_role(sa, ns) and masters()
    assert apps.read_namespaced_stateful_set(NAME, ns).spec.template.spec.automount_service_account_token is True


def _read(call: Any) -> Any:
    try:
        return call()
    except ApiException as e:
        if e.status == 404:
            return None
        raise
