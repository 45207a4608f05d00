"""Broker groups against a REAL API server (kwok nodes): a RocketStore with replicasPerGroup 2
gets its slave StatefulSet, a PodDisruptionBudget per group that selects the group's two pods,
status groups with the lag its masters report, the ReplicationInSync condition, and rolls a
new pod template into the slaves first and into a master only once its group's slave is in
sync. The masters' /metrics are served by this test (the operator's addressing pins both
masters to loopback), so each slave's lag is whatever the test says."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import GROUPS_NAMESPACE, GROUPS_STORE, SLAVE_HOST, free_port, wait_until
from test_operator_cluster import G, P, V, condition, create, get, make_ns, patch_spec, store

from rocketstore.operator.model import format_quantity, parse_spec
from rocketstore.operator.sizing import volume_size

pytestmark = pytest.mark.integration

NAME = GROUPS_STORE


@pytest.mark.parametrize(("spec", "expected"), [
    ({"replication": {"replicasPerGroup": 5}}, "spec.replication.replicasPerGroup: Invalid value: 5"),
    ({"replication": {"replicasPerGroup": 0}}, "spec.replication.replicasPerGroup: Invalid value: 0"),
    ({"replication": {"replicasPerGroup": 2, "mode": "SLAVE"}}, 'spec.replication.mode: Unsupported value: "SLAVE"'),
    ({"replication": {"mode": "SYNC_MASTER"}}, "SYNC_MASTER needs a slave to acknowledge sends"),
    ({"replication": {"replicasPerGroup": 2, "maxInSyncLag": "1MB"}},
     "spec.replication.maxInSyncLag in body should match"),
    ({"replication": {"replicasPerGroup": 2}, "externalAccess": {"type": "LoadBalancer"}},
     "slaves are published on node ports only"),
    ({"replication": {"replicasPerGroup": 2}, "externalAccess": {"basePort": 30000, "namesrvNodePort": 30100}},
     "namesrvNodePort must lie outside basePort..basePort+64*replicasPerGroup-1"),
    # apart for the masters alone (30000..30063, 30100..30163), not with every slave's port
    ({"replication": {"replicasPerGroup": 2}, "externalAccess": {"basePort": 30000, "grpcBasePort": 30100}},
     "grpcBasePort..grpcBasePort+64*replicasPerGroup-1 (the gRPC ports of the masters and slaves) must not overlap"),
    ({"replication": {"replicasPerGroup": 2},
      "externalAccess": {"basePort": 30000, "grpcBasePort": 30200, "namesrvNodePort": 30300}},
     "namesrvNodePort must lie outside grpcBasePort..grpcBasePort+64*replicasPerGroup-1"),
])
def test_invalid_replication_is_rejected_by_the_api_server(kube: Any, crd: Any, spec: dict[str, Any],
                                                           expected: str) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body)
    assert e.value.status == 422
    message = json.loads(e.value.body)["message"]
    assert expected in message, message


def test_replication_defaults_and_what_the_schema_accepts_the_operator_accepts(kube: Any, crd: Any) -> None:
    def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "groups"}, "spec": spec}
        obj: Any = client.CustomObjectsApi(kube).create_namespaced_custom_object(
            G, V, "default", P, body, dry_run="All")
        return dict(obj["spec"])

    # no section unless written: brokerConfig.brokerRole of older specs stays free
    assert "replication" not in defaulted({"brokerConfig": {"brokerRole": "ASYNC_MASTER"}})
    spec = defaulted({"replication": {}})
    assert spec["replication"] == {"replicasPerGroup": 1, "mode": "ASYNC_MASTER", "maxInSyncLag": "1Mi"}
    assert parse_spec(spec).replication == parse_spec({}).replication
    spec = defaulted({"replication": {"replicasPerGroup": 4, "mode": "SYNC_MASTER"},
                      # just past both port ranges: the remoting 30000..30255, the gRPC 30256..30511
                      "externalAccess": {"basePort": 30000, "namesrvNodePort": 30512}})
    assert parse_spec(spec).replication.slaves == 3


#: what the slaves' /metrics says (their addresses are pinned to this host): connected to a master
SLAVE_BODY = "# TYPE rocketstore_ha_master_connected gauge\nrocketstore_ha_master_connected 1\n"


class MasterMetrics:
    """The masters' /metrics: one body for both (each master's view is matched by its slave's pod
    IP), on 127.0.0.1; the slaves' on SLAVE_HOST, the same port."""

    def __init__(self, kube: Any) -> None:
        self.core = client.CoreV1Api(kube)
        self.lag: dict[str, int] = {}  # slave pod -> lag bytes (absent: not connected)
        self.in_sync = 1
        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler(self.body))
        self.slaves = http.server.ThreadingHTTPServer((SLAVE_HOST, self.port), self._handler(lambda: SLAVE_BODY))

    def body(self) -> str:
        lines = ["# TYPE rocketstore_ha_slave_lag_bytes gauge", "# TYPE rocketstore_ha_slave_lag_seconds gauge"]
        for pod, lag in sorted(self.lag.items()):
            try:
                ip = self.core.read_namespaced_pod(pod, GROUPS_NAMESPACE).status.pod_ip
            except client.ApiException:
                continue
            if ip:
                lines.append(f'rocketstore_ha_slave_lag_bytes{{slave="{ip}:40000"}} {lag}')
                lines.append(f'rocketstore_ha_slave_lag_seconds{{slave="{ip}:40000"}} {lag / 1e6}')
        lines += ["# TYPE rocketstore_ha_slaves_in_sync gauge", f"rocketstore_ha_slaves_in_sync {self.in_sync}"]
        return "\n".join(lines) + "\n"

    @staticmethod
    def _handler(body_of: Callable[[], str]) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = body_of().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def masters(kube: Any) -> Iterator[MasterMetrics]:
    m = MasterMetrics(kube)
    for server in (m.server, m.slaves):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield m
    finally:
        m.server.shutdown()
        m.slaves.shutdown()


def group(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in obj.get("status", {}).get("groups") or [] if g["name"] == name)


def member(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    for g in obj.get("status", {}).get("groups") or []:
        for m in g["members"]:
            if m["name"] == name:
                return dict(m)
    return None


def revision_of(core: Any, pod: str) -> str | None:
    try:
        return str(core.read_namespaced_pod(pod, GROUPS_NAMESPACE).metadata.labels.get("controller-revision-hash"))
    except client.ApiException:
        return None


def test_broker_groups_budgets_status_and_slaves_first(kube: Any, operator_process: Any,
                                                       masters: MasterMetrics) -> None:
    ns = make_ns(kube, GROUPS_NAMESPACE)
    apps, policy, core = client.AppsV1Api(kube), client.PolicyV1Api(kube), client.CoreV1Api(kube)
    masters.lag = {"rsg-slave-1-0": 0, "rsg-slave-1-1": 0}
    create(kube, ns, store(NAME, replication={"replicasPerGroup": 2, "mode": "SYNC_MASTER"},
                           metrics={"port": masters.port}))

    # objects: masters and slaves StatefulSets, each pod on a PVC of its own, a budget per group
    slaves = wait_until("slave StatefulSet", lambda: apps.read_namespaced_stateful_set("rsg-slave-1", ns), 60)
    assert slaves.spec.replicas == 2 and slaves.spec.selector.match_labels["rocketstore.io/slave"] == "1"
    cm = core.read_namespaced_config_map("rsg-config", ns)
    assert "brokerRole=SYNC_MASTER\n" in cm.data["broker.conf"]
    assert "brokerRole=SLAVE\n" in cm.data["broker-slave-1.conf"] and "brokerId=1\n" in cm.data["broker-slave-1.conf"]
    for pvc in ("store-rsg-0", "store-rsg-1", "store-rsg-slave-1-0", "store-rsg-slave-1-1"):
        wait_until(f"PVC {pvc}", lambda pvc=pvc: core.read_namespaced_persistent_volume_claim(pvc, ns), 60)

    def budgets() -> dict[str, Any] | None:
        found = {b.metadata.name: b for b in policy.list_namespaced_pod_disruption_budget(ns).items}
        # the disruption controller counts the pods each selects, a group's master and its
        # slave, and allows one of them to go once both are up
        ready = set(found) == {"rsg-0", "rsg-1"} and all(
            b.status and b.status.expected_pods == 2 and b.status.disruptions_allowed == 1 for b in found.values())
        return found if ready else None

    found = wait_until("a budget per group over its two pods", budgets, 90)
    assert found["rsg-1"].spec.min_available == 1
    assert found["rsg-1"].spec.selector.match_labels["apps.kubernetes.io/pod-index"] == "1"

    # status: each group's roles (each broker's own /metrics) and lag, every slave in sync
    obj = wait_until("groups in sync", lambda: (o := get(kube, ns, NAME)) and (c := condition(
        o, "ReplicationInSync")) and c["status"] == "True" and o, 90)
    assert [(m["name"], m["role"], m["brokerId"]) for m in group(obj, "rsg-1")["members"]] == [
        ("rsg-1", "MASTER", 0), ("rsg-slave-1-1", "SLAVE", 1)]
    assert group(obj, "rsg-0")["mode"] == "SYNC_MASTER" and group(obj, "rsg-0")["slavesInSync"] == 1
    assert [group(obj, g)["master"] for g in ("rsg-0", "rsg-1")] == ["rsg-0", "rsg-1"]
    slave = member(obj, "rsg-slave-1-0")
    assert slave is not None and slave["inSync"] and slave["lagBytes"] == 0 and slave["ready"]

    # group 1's slave falls behind: said in status and in the condition
    masters.lag["rsg-slave-1-1"] = 8 * 1024**2
    obj = wait_until("slave behind", lambda: (o := get(kube, ns, NAME)) and (c := condition(
        o, "ReplicationInSync")) and c["reason"] == "SlavesBehind" and o, 60)
    assert "rsg-slave-1-1" in condition(obj, "ReplicationInSync")["message"]
    behind = member(obj, "rsg-slave-1-1")
    assert behind is not None and behind["lagBytes"] == 8 * 1024**2 and not behind["inSync"]

    # a new pod template: the slaves roll, the masters wait while group 1's slave is behind
    old = {p: revision_of(core, p) for p in ("rsg-0", "rsg-1")}
    patch_spec(kube, ns, NAME, {"podTemplate": {"metadata": {"annotations": {"example.com/rev": "2"}}}})

    def slaves_rolled() -> bool:
        sts = apps.read_namespaced_stateful_set("rsg-slave-1", ns)
        update = sts.status.update_revision
        return bool(sts.status.observed_generation == sts.metadata.generation and all(
            revision_of(core, f"rsg-slave-1-{i}") == update for i in range(2)))

    wait_until("slaves on the new template", slaves_rolled, 120)
    wait_until("masters' partition held", lambda: apps.read_namespaced_stateful_set(
        NAME, ns).spec.update_strategy.rolling_update.partition == 2, 30)
    time.sleep(5)  # several observations (interval 1s): the masters are still held
    progressing = condition(get(kube, ns, NAME), "Progressing")
    assert progressing is not None and "new template held from rsg-0, rsg-1 until" in progressing["message"]
    assert {p: revision_of(core, p) for p in ("rsg-0", "rsg-1")} == old
    assert apps.read_namespaced_stateful_set(NAME, ns).spec.update_strategy.rolling_update.partition == 2

    # the slave catches up: the masters take the new template
    masters.lag["rsg-slave-1-1"] = 0

    def masters_rolled() -> bool:
        sts = apps.read_namespaced_stateful_set(NAME, ns)
        return all(revision_of(core, p) == sts.status.update_revision for p in ("rsg-0", "rsg-1"))

    wait_until("masters on the new template", masters_rolled, 120)
    assert apps.read_namespaced_stateful_set(NAME, ns).spec.update_strategy.rolling_update.partition == 0

    # a SYNC_MASTER whose master counts no slave in sync takes no writes: its own reason
    masters.in_sync = 0
    wait_until("no slave in sync", lambda: (c := condition(get(kube, ns, NAME), "ReplicationInSync"))
               and c["reason"] == "NoSlaveInSync", 60)

    # a larger volume: the slaves' PVCs grow too, their StatefulSet is replaced, their pods kept
    slave_uid = core.read_namespaced_pod("rsg-slave-1-0", ns).metadata.uid
    patch_spec(kube, ns, NAME, {"storage": {"segments": 40}})
    want = format_quantity(volume_size(parse_spec(store(NAME, storage={"segments": 40})["spec"])))
    for pvc in ("store-rsg-0", "store-rsg-1", "store-rsg-slave-1-0", "store-rsg-slave-1-1"):
        wait_until(f"{pvc} expanded", lambda pvc=pvc: core.read_namespaced_persistent_volume_claim(
            pvc, ns).spec.resources.requests["storage"] == want, 60)
    wait_until("slave template", lambda: apps.read_namespaced_stateful_set(
        "rsg-slave-1", ns).spec.volume_claim_templates[0].spec.resources.requests["storage"] == want, 60)
    assert core.read_namespaced_pod("rsg-slave-1-0", ns).metadata.uid == slave_uid

    # back to one broker per group: the slaves' StatefulSet and the group budgets go, the
    # store-wide budget and an unpartitioned rollout come back, status.groups is removed
    patch_spec(kube, ns, NAME, {"replication": {"replicasPerGroup": 1, "mode": "ASYNC_MASTER"}})

    def single() -> bool:
        names = {b.metadata.name for b in policy.list_namespaced_pod_disruption_budget(ns).items}
        sets = {s.metadata.name for s in apps.list_namespaced_stateful_set(ns).items}
        o = get(kube, ns, NAME)
        return (names == {NAME} and sets == {NAME} and "groups" not in o.get("status", {})
                and condition(o, "ReplicationInSync") is None)

    wait_until("one broker per group again", single, 90)
    # no partition holds the masters (reset to 0, or gone with the applied field)
    strategy = apps.read_namespaced_stateful_set(NAME, ns).spec.update_strategy
    assert strategy.type == "RollingUpdate" and not (strategy.rolling_update and strategy.rolling_update.partition)
    # the slaves' volumes stay (storage.deleteClaim is false): raising replicasPerGroup again reuses them
    assert core.read_namespaced_persistent_volume_claim("store-rsg-slave-1-0", ns)
