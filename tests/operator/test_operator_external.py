"""``spec.externalAccess`` against a REAL API server (kwok nodes): the per-broker Services, their
removal when brokers or external access go, and load balancer addresses reaching a broker.

No cloud controller runs here, or on any test machine: nothing provisions a LoadBalancer
Service, so its ``status.loadBalancer.ingress`` stays empty. The test plays that part itself,
writing the status subresource as a cloud controller does, and checks what the operator does
with it: the addresses ConfigMap the pods' init container waits on, the status, and
``clusterPeers`` pushed to a real broker process (the operator's broker-0 of that store is pinned
to it, conftest ``--broker-address``), whose name server then routes clients to the balancer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import EXTERNAL_NAMESPACE, EXTERNAL_STORE, wait_until
from test_operator_cluster import G, P, V, condition, create, get, make_ns, patch_spec, reconciled, store

from rocketstore.client.admin import BrokerAdmin, MQAdmin
from rocketstore.operator.desired import labels
from rocketstore.operator.model import parse_spec

pytestmark = pytest.mark.integration

#: inside the API server's static node port band (30000..30085 of the default range), which
#: the random node ports of the load balancers below avoid while other ports are free
BASE_PORT, NAMESRV_NODE_PORT = 30010, 30080
LB_BASE_PORT = 31100


def services(kube: Any, ns: str) -> dict[str, Any]:
    items: list[Any] = client.CoreV1Api(kube).list_namespaced_service(ns).items
    return {s.metadata.name: s for s in items}


def configmaps(kube: Any, ns: str) -> set[str]:
    items: list[Any] = client.CoreV1Api(kube).list_namespaced_config_map(ns).items
    return {c.metadata.name for c in items}


def external(kube: Any, ns: str) -> set[str]:
    return {name for name in services(kube, ns) if name.endswith("-external")}


def test_schema_checks_node_ports_of_node_port_access_only(kube: Any, crd: Any) -> None:
    def create_dry(access: dict[str, Any]) -> None:
        body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "ext"},
                "spec": {"externalAccess": access}}
        client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body, dry_run="All")

    with pytest.raises(ApiException) as e:
        create_dry({"basePort": 30000, "namesrvNodePort": 30010})
    assert "namesrvNodePort must lie outside basePort..basePort+63" in json.loads(e.value.body)["message"]
    with pytest.raises(ApiException) as e:
        create_dry({"type": "ClusterIP"})
    assert 'spec.externalAccess.type: Unsupported value: "ClusterIP"' in json.loads(e.value.body)["message"]
    # the gRPC ports: a range of their own, clear of the name servers' node port
    for access, expected in (({"basePort": 30000, "grpcBasePort": 30063}, "grpcBasePort..grpcBasePort+63 (the "
                              "brokers' gRPC ports) must not overlap basePort..basePort+63"),
                             ({"basePort": 30064, "grpcBasePort": 30001}, "must not overlap basePort..basePort+63"),
                             ({"basePort": 30000, "grpcBasePort": 30100, "namesrvNodePort": 30163},
                              "namesrvNodePort must lie outside grpcBasePort..grpcBasePort+63"),
                             # unset: basePort + 256
                             ({"basePort": 30000, "namesrvNodePort": 30256},
                              "namesrvNodePort must lie outside grpcBasePort..grpcBasePort+63")):
        with pytest.raises(ApiException) as e:
            create_dry(access)
        assert expected in json.loads(e.value.body)["message"], access
    # no schema default (it follows basePort): what the API server accepts, the operator parses alike
    obj: Any = client.CustomObjectsApi(kube).create_namespaced_custom_object(
        G, V, "default", P, {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "ext"},
                             "spec": {"externalAccess": {"basePort": 30000, "namesrvNodePort": 30320}}},
        dry_run="All")
    ext = parse_spec(obj["spec"]).external_access
    assert "grpcBasePort" not in obj["spec"]["externalAccess"] and ext is not None and ext.grpc_base_port == 30256
    # a load balancer's node ports are Kubernetes' choice: namesrvNodePort does not apply
    create_dry({"type": "LoadBalancer", "basePort": 30000, "namesrvNodePort": 30010})
    create_dry({"type": "LoadBalancer", "grpcBasePort": 30000, "namesrvNodePort": 30010})


def test_external_services_follow_the_brokers_and_only_ours_are_deleted(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-ext-prune")
    core = client.CoreV1Api(kube)
    create(kube, ns, store("rs", brokers=3, scaling={"allowScaleDown": True, "drainTimeoutSeconds": 0},
                           externalAccess={"type": "NodePort", "basePort": BASE_PORT,
                                           "namesrvNodePort": NAMESRV_NODE_PORT}))
    wanted = {"rs-0-external", "rs-1-external", "rs-2-external", "rs-namesrv-external"}
    wait_until("external Services", lambda: external(kube, ns) == wanted, 60)
    svcs = services(kube, ns)
    assert [svcs[f"rs-{i}-external"].spec.ports[0].node_port for i in range(3)] == [30010, 30011, 30012]
    # the gRPC ports, by default basePort + 256 + i (the dynamic band: the static one has no room
    # for a second range; allocated here before any random port of this module's balancers)
    assert [(p.name, p.node_port) for i in range(3) for p in svcs[f"rs-{i}-external"].spec.ports[1:]] == [
        ("grpc", 30266), ("grpc", 30267), ("grpc", 30268)]
    assert svcs["rs-namesrv-external"].spec.ports[0].node_port == NAMESRV_NODE_PORT
    # someone else's Services under our labels and name pattern, not controlled by the RocketStore
    owner = get(kube, ns, "rs")["metadata"]
    for name, refs in (("rs-3-external", []), ("rs-4-external", [{
            "apiVersion": f"{G}/{V}", "kind": "RocketStore", "name": "rs", "uid": owner["uid"]}])):
        core.create_namespaced_service(ns, {"metadata": {"name": name, "labels": labels("rs"), "ownerReferences": refs},
                                            "spec": {"ports": [{"port": 1}], "selector": {"nobody": "here"}}})
    obj = wait_until("ExternalAccessReady", lambda: (o := get(kube, ns, "rs")) and condition(
        o, "ExternalAccessReady") and o, 60)
    c = condition(obj, "ExternalAccessReady")
    assert c is not None and c["status"] == "True" and c["reason"] == "NodePorts", c

    # pods placed on the kwok node: its address is what the brokers advertise
    def placed() -> dict[str, Any] | None:
        o = get(kube, ns, "rs")
        brokers = o.get("status", {}).get("brokers") or []
        return o if len(brokers) == 3 and all("externalAddress" in b for b in brokers) else None

    obj = wait_until("external addresses in status", placed, 60)
    host_ip = core.read_namespaced_pod("rs-1", ns).status.host_ip
    assert obj["status"]["brokers"][1]["externalAddress"] == f"{host_ip}:30011"
    assert obj["status"]["externalNamesrvAddr"].endswith(f":{NAMESRV_NODE_PORT}")

    patch_spec(kube, ns, "rs", {"brokers": 1})
    wait_until("external Services of removed brokers deleted",
               lambda: external(kube, ns) == {"rs-0-external", "rs-namesrv-external", "rs-3-external",
                                              "rs-4-external"}, 60)
    # the event is posted after the deletion it reports (kopf posts events from its own task)
    wait_until("a Deleted event for rs-2-external",
               lambda: any(e.reason == "Deleted" and "rs-2-external" in e.message
                           for e in core.list_namespaced_event(ns).items), 30)

    patch_spec(kube, ns, "rs", {"externalAccess": None})
    wait_until("every external Service of the store deleted",
               lambda: external(kube, ns) == {"rs-3-external", "rs-4-external"}, 60)
    obj = wait_until("reconciled", lambda: reconciled(kube, ns, "rs"), 60)
    obj = wait_until("ExternalAccessReady dropped", lambda: (o := get(kube, ns, "rs")) and condition(
        o, "ExternalAccessReady") is None and o, 30)
    assert "externalNamesrvAddr" not in obj["status"]
    assert all("externalAddress" not in b for b in obj["status"]["brokers"])
    assert "rs-headless" in services(kube, ns) and "rs" in services(kube, ns)


@pytest.fixture(scope="module")
def lb_broker(external_broker_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The real broker the operator reaches as broker-0 of the load-balanced store."""
    work: Path = tmp_path_factory.mktemp("lb-broker")
    b = Broker(work, f"brokerClusterName={EXTERNAL_STORE}\nbrokerName={EXTERNAL_STORE}-0\n",
               listen_port=external_broker_port)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def peers(broker: Broker) -> str:
    with BrokerAdmin(broker.addr, timeout=5) as admin:
        return str(admin.get_broker_config().get("clusterPeers", ""))


def routed_address(broker: Broker, broker_name: str) -> str | None:
    """Where the broker's name server sends clients for ``broker_name`` (its cluster info)."""
    with MQAdmin(broker.namesrv, timeout=5) as admin:
        data = admin.cluster_list().broker_addr_table.get(broker_name)
        return None if data is None else data.broker_addrs.get(0)


def ingress(kube: Any, service: str, **address: str) -> None:
    """What a cloud controller does once it has provisioned a Service's load balancer."""
    client.CoreV1Api(kube).patch_namespaced_service_status(
        service, EXTERNAL_NAMESPACE, {"status": {"loadBalancer": {"ingress": [address]}}})


def test_load_balancer_addresses_reach_the_brokers(kube: Any, operator_process: Any, lb_broker: Broker) -> None:
    ns, name = make_ns(kube, EXTERNAL_NAMESPACE), EXTERNAL_STORE
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    create(kube, ns, store(name, brokers=2, externalAccess={"type": "LoadBalancer", "basePort": LB_BASE_PORT}))
    wait_until("load balancer Services", lambda: external(kube, ns) == {"lb-0-external", "lb-1-external",
                                                                         "lb-namesrv-external"}, 60)
    svcs = services(kube, ns)
    for i in range(2):
        spec = svcs[f"lb-{i}-external"].spec
        assert spec.type == "LoadBalancer" and spec.selector["statefulset.kubernetes.io/pod-name"] == f"lb-{i}"
        assert (spec.ports[0].port, spec.ports[0].target_port) == (LB_BASE_PORT + i, LB_BASE_PORT + i)
    namesrv = svcs["lb-namesrv-external"].spec
    assert namesrv.type == "LoadBalancer" and namesrv.ports[0].port == 9876
    # applied after the Services (all_objects' order): on a busy machine a look may come between
    pod: Any = wait_until("the StatefulSet", lambda: apps.read_namespaced_stateful_set(name, ns).spec.template, 30)
    assert [c.name for c in pod.spec.init_containers] == ["wait-for-address"]
    assert core.read_namespaced_config_map("lb-addresses", ns).data in (None, {})

    # nothing provisioned: a condition saying so, no error loop
    obj = wait_until("LoadBalancerPending", lambda: (o := get(kube, ns, name)) and (
        condition(o, "ExternalAccessReady") or {}).get("reason") == "LoadBalancerPending" and o, 60)
    message = (condition(obj, "ExternalAccessReady") or {}).get("message", "")
    assert "lb-0-external, lb-1-external, lb-namesrv-external" in message, message
    assert reconciled(kube, ns, name) is not None
    degraded = condition(obj, "Degraded") or {}
    assert degraded.get("reason") not in ("InvalidSpec", "AddressesNotPublished"), degraded
    # until then the peers are pushed with their in-cluster names
    wait_until("DNS peers pushed", lambda: peers(lb_broker) == (
        f"lb-0@lb-0.lb-headless.{ns}.svc:31100,lb-1@lb-1.lb-headless.{ns}.svc:31101"), 60)

    ingress(kube, "lb-1-external", ip="203.0.113.11")
    wait_until("lb-1's address in the addresses ConfigMap", lambda: core.read_namespaced_config_map(
        "lb-addresses", ns).data == {"lb-1": "203.0.113.11"}, 30)
    wait_until("lb-1's balancer pushed to broker-0", lambda: "lb-1@203.0.113.11:31101" in peers(lb_broker), 30)
    assert routed_address(lb_broker, "lb-1") == "203.0.113.11:31101"  # what a client outside is told
    obj = wait_until("lb-1's address in status", lambda: (o := get(kube, ns, name)) and o["status"]["brokers"][1].get(
        "externalAddress") == "203.0.113.11:31101" and o, 30)
    assert (condition(obj, "ExternalAccessReady") or {}).get("status") == "False"
    wait_until("a LoadBalancerAddress event", lambda: any(
        e.reason == "LoadBalancerAddress" and e.message == "lb-1 advertises 203.0.113.11"
        for e in core.list_namespaced_event(ns).items), 30)

    ingress(kube, "lb-0-external", hostname="lb-0.elb.example")  # a cloud that hands out names only
    ingress(kube, "lb-namesrv-external", ip="203.0.113.20")
    obj = wait_until("AddressesAssigned", lambda: (o := get(kube, ns, name)) and (
        condition(o, "ExternalAccessReady") or {}).get("reason") == "AddressesAssigned" and o, 30)
    assert obj["status"]["externalNamesrvAddr"] == "203.0.113.20:9876"
    assert core.read_namespaced_config_map("lb-addresses", ns).data == {"lb-0": "lb-0.elb.example",
                                                                         "lb-1": "203.0.113.11"}
    # addresses change the ConfigMap, never the pod template: no rollout
    assert apps.read_namespaced_stateful_set(name, ns).spec.template == pod

    # external access off: the balancers and the addresses ConfigMap go, the peers are in-cluster again
    patch_spec(kube, ns, name, {"externalAccess": None})
    wait_until("load balancers deleted", lambda: not external(kube, ns), 60)
    wait_until("addresses ConfigMap deleted", lambda: "lb-addresses" not in configmaps(kube, ns), 30)
    wait_until("in-cluster peers pushed", lambda: peers(lb_broker) == (
        f"lb-0@lb-0.lb-headless.{ns}.svc:10911,lb-1@lb-1.lb-headless.{ns}.svc:10911"), 60)


def test_waiting_brokers_are_admitted_in_a_restricted_namespace(kube: Any, operator_process: Any) -> None:
    """The init container that waits for the balancer's address passes PodSecurity admission
    ("restricted", enforced by kube-apiserver) as the broker container does."""
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "t-ext-restricted", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    ns = "t-ext-restricted"
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", ns), 60)
    create(kube, ns, store("rs", brokers=1, externalAccess={"type": "LoadBalancer"}))
    pod = wait_until("broker pod admitted", lambda: (ps := core.list_namespaced_pod(ns).items) and ps[0], 60)
    assert [c.name for c in pod.spec.init_containers] == ["wait-for-address"]
    assert not [e for e in core.list_namespaced_event(ns).items if e.reason == "FailedCreate"]
