"""Scale-down drain and scale-up topic copy end to end: the operator against the REAL API server,
with both brokers of the RocketStore real ``rocketstore broker`` processes on loopback (conftest
pins SCALING_STORE-0 and -1 to them; the pods themselves run on a kwok node).

Scale-down 2 -> 1: the StatefulSet keeps 2 while ``billing`` has messages left on rss-1, whose
write permission every name server drops; once billing consumed them (and the route refresh grace
passed), the StatefulSet shrinks. Scale-up 1 -> 2: rss-1 is given the topic created on rss-0
meanwhile, and its write permission back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import Broker
from kubernetes import client
from operator_support import SCALING_NAMESPACE, SCALING_STORE, STORAGE_CLASS, wait_until

from rocketstore.client.admin import BrokerAdmin
from rocketstore.client.producer import Producer
from rocketstore.client.remoting_client import MessageQueue, NameServerClient, RemotingClient
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig

pytestmark = pytest.mark.integration

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}
QUEUES = 2
SENT = 10


@pytest.fixture(scope="module")
def brokers(scaling_broker_ports: list[int], tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Broker]]:
    procs = [Broker(tmp_path_factory.mktemp(f"{SCALING_STORE}-{i}"),
                    f"brokerClusterName={SCALING_STORE}\nbrokerName={SCALING_STORE}-{i}\n", listen_port=port)
             for i, port in enumerate(scaling_broker_ports)]
    started: list[Broker] = []
    try:
        for b in procs:
            b.start()
            started.append(b)
            with BrokerAdmin(b.addr) as admin:
                admin.create_topic("Orders", QUEUES, QUEUES)
                admin.create_subscription_group(SubscriptionGroupConfig(group_name="billing"))
        # SENT messages on rss-1 that billing has not consumed (its offsets at 0)
        with Producer(procs[1].namesrv, "scaling-test") as producer:
            for i in range(SENT):
                assert producer.send("Orders", f"m{i}".encode()).broker_name == f"{SCALING_STORE}-1"
        with BrokerAdmin(procs[1].addr) as admin:
            for q in range(QUEUES):
                admin.update_consumer_offset("billing", MessageQueue("Orders", f"{SCALING_STORE}-1", q), 0)
        yield procs
    finally:
        for b in started:
            b.stop()


def _get(kube: Any) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        G, V, SCALING_NAMESPACE, P, SCALING_STORE)
    return obj


def _patch(kube: Any, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(G, V, SCALING_NAMESPACE, P, SCALING_STORE,
                                                                 {"spec": spec})


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None)


def _perm(namesrv: str, broker_name: str) -> int | None:
    remoting = RemotingClient(timeout=5.0)
    try:
        route = NameServerClient(namesrv, remoting).get_route("Orders")
        return next((q.perm for q in route.queue_datas if q.broker_name == broker_name), None)
    finally:
        remoting.close()


def _replicas(kube: Any) -> int:
    return int(client.AppsV1Api(kube).read_namespaced_stateful_set(SCALING_STORE, SCALING_NAMESPACE).spec.replicas)


def _reasons(kube: Any) -> set[str]:
    return {e.reason for e in client.CoreV1Api(kube).list_namespaced_event(SCALING_NAMESPACE).items
            if e.involved_object.kind == "RocketStore"}


def test_scale_down_waits_for_the_consumers_and_scale_up_copies_topics(kube: Any, operator_process: Any,
                                                                       brokers: list[Broker]) -> None:
    rs0, rs1 = brokers
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": SCALING_NAMESPACE}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", SCALING_NAMESPACE), 60)
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, SCALING_NAMESPACE, P, {
        "apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": SCALING_STORE},
        "spec": {"brokers": 2, "scheduling": KWOK, "commitLog": {"segmentSize": "64Mi"},
                 "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
                 "scaling": {"allowScaleDown": True, "drainTimeoutSeconds": 600},
                 # the drain reads the leaving rss-1's /metrics (its held messages) at the host of
                 # its pinned address and the store's metrics port: rss-1's
                 "metrics": {"port": rs1.http_port}}})
    # reachable (the pinned processes answer) and ready (kwok ran the pods): the name servers the
    # drain wipes rss-1 on are those of ready pods, and kwok may lag on a busy machine
    wait_until("both brokers ready and reachable", lambda: [(b.get("ready"), b.get("reachable")) for b in _get(
        kube).get("status", {}).get("brokers", [])] == [(True, True)] * 2, 90)

    _patch(kube, {"brokers": 1})
    obj = wait_until("draining rss-1 with billing's backlog", lambda: (o := _get(kube)) and (
        o["status"].get("drain") or {}).get("messagesPending") == SENT and o, 60)
    drain = obj["status"]["drain"]
    assert (drain["brokers"], drain["phase"], drain["groupsPending"], drain["queuesPending"]) == (
        [f"{SCALING_STORE}-1"], "Draining", ["billing"], QUEUES), drain
    assert (drain["delayedPending"], drain["timerPending"], drain["halfPending"], drain["unreachable"]) == (
        0, 0, 0, []), drain
    condition = _condition(obj, "Draining")
    assert condition is not None and condition["status"] == "True", condition
    # producers are routed away from rss-1 by both name servers; consumers still read it
    assert wait_until("rss-1 read-only in both name servers", lambda: [
        _perm(ns, f"{SCALING_STORE}-1") for ns in (rs0.namesrv, rs1.namesrv)] == [4, 4], 30)
    assert _replicas(kube) == 2

    with BrokerAdmin(rs1.addr) as admin:
        held = {s.queue.queue_id: s.max_offset for s in admin.topic_stats("Orders")}
        for q, offset in held.items():
            admin.update_consumer_offset("billing", MessageQueue("Orders", f"{SCALING_STORE}-1", q), offset)
    # drained, and past the 60 s in which a producer may still have used its older route
    wait_until("scaled down once drained", lambda: _replicas(kube) == 1, 150)
    wait_until("DrainStarted, Drained and ScaledDown events",
               lambda: {"DrainStarted", "Drained", "ScaledDown"} <= _reasons(kube), 30)
    assert "DrainDeadlineExceeded" not in _reasons(kube)

    # scale up: rss-1 is back (its process kept running) and lacks a topic rss-0 was given meanwhile
    with BrokerAdmin(rs0.addr) as admin:
        admin.create_topic("Payments", 4, 4)
    _patch(kube, {"brokers": 2})
    obj = wait_until("topics copied", lambda: (o := _get(kube)) and _replicas(kube) == 2 and not o["status"].get(
        "topicCopyPending") and "TopicsCopied" in _reasons(kube) and o, 90)
    with BrokerAdmin(rs1.addr) as admin:
        payments = admin.topic_configs()["Payments"]
    assert (payments.read_queue_nums, payments.write_queue_nums) == (4, 4)
    # its write permission, wiped on rss-0's name server by the drain, is back
    assert wait_until("rss-1 writable again", lambda: _perm(rs0.namesrv, f"{SCALING_STORE}-1") == 6, 30)
    assert _condition(obj, "Draining") is None and not obj["status"].get("drain")
