"""RocketStore as users run it: ``helm install`` of the chart, a RocketStore of 2 brokers, and a
real RocketMQ client, all on a real node (kubelet, containerd, kube-proxy, CoreDNS; conftest.py).

Nothing here is simulated: the operator runs in a pod from the project's image and reaches the API
server through the ``kubernetes`` Service (kube-proxy) and the brokers through their headless DNS
names (CoreDNS); the brokers are containers of the same image writing to local PersistentVolumes,
which are directories on this machine, so the test can look at the files a broker wrote.

The client is the Java RocketMQ 4.9.8 client on the host. Routes name each broker by its pod's
stable DNS name (``orders-1.orders-headless.shop.svc``), which an application pod resolves through
cluster DNS; the host is outside cluster DNS, so the JVM gets a hosts file with the names CoreDNS
would answer (``jdk.net.hosts.file``), and reaches the pod addresses over the node's bridge.

The tests run in file order and build on each other: install, produce and consume, live retention,
a broker pod deleted, manual delete (which also deletes the first segment of broker-0, where the
produce test's messages are), scaling 2 -> 3, the RocketStore deleted.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from node_support import ROOT, STORAGE_CLASS, wait_until

from rocketstore.client.admin import BrokerAdmin

CLIENTS_DIR = str(ROOT / "tests" / "clients")
if CLIENTS_DIR not in sys.path:
    sys.path.insert(0, CLIENTS_DIR)

from java_rocketmq import ClientDriver, build_driver  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
OPERATOR_NS = "rocketstore-system"
NS = "shop"
NAME = "orders"
TOPIC = "NodeTopic"
MESSAGES = 200
#: the namespaces enforce the "restricted" Pod Security Standard: the pods run as they are admitted
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
#: acknowledged sends of TOPIC per broker, recorded by the produce test for the restart test
SENT_TO: dict[str, int] = {}


def _hour_far_away() -> str:
    """A ``deleteWhen`` hour 12 h from now: the brokers' own daily deletion never runs in a test."""
    return f"{(datetime.datetime.now().hour + 12) % 24:02d}"


def get(kube: Any) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(G, V, NS, P, NAME)
    return obj


def patch(kube: Any, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(G, V, NS, P, NAME, {"spec": spec})


def pods(kube: Any) -> dict[str, Any]:
    """This RocketStore's broker pods by name."""
    items = client.CoreV1Api(kube).list_namespaced_pod(NS, label_selector=f"app.kubernetes.io/instance={NAME}").items
    return {p.metadata.name: p for p in items}


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))


def broker_addr(kube: Any, ordinal: int, port: int = 10911) -> str:
    pod = pods(kube)[f"{NAME}-{ordinal}"]
    return f"{pod.status.pod_ip}:{port}"


def java_client(kube: Any, workdir: Path, ordinal: int = 0) -> ClientDriver:
    """A Java client whose name server is broker ``ordinal``'s, resolving the brokers' DNS names."""
    hosts = workdir / "hosts"
    hosts.write_text("".join(f"{p.status.pod_ip} {name}.{NAME}-headless.{NS}.svc\n"
                             for name, p in pods(kube).items() if p.status.pod_ip))
    return ClientDriver(broker_addr(kube, ordinal, 9876), workdir, jvm_args=[f"-Djdk.net.hosts.file={hosts}"])


def volume_of(kube: Any, ordinal: int) -> Path:
    """The host directory behind broker ``ordinal``'s PersistentVolume (a ``local`` volume)."""
    core = client.CoreV1Api(kube)
    claim = next(c for c in core.list_namespaced_persistent_volume_claim(NS).items
                 if c.metadata.name.endswith(f"{NAME}-{ordinal}"))
    pv = core.read_persistent_volume(claim.spec.volume_name)
    return Path(pv.spec.local.path)


def run_helm(helm_bin: Path, cluster: Any, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(helm_bin), "--kubeconfig", str(cluster.cp.kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args[:2])} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def operator_logs(kube: Any) -> str:
    core = client.CoreV1Api(kube)
    out = []
    for p in core.list_namespaced_pod(OPERATOR_NS).items:
        try:
            out.append(core.read_namespaced_pod_log(p.metadata.name, OPERATOR_NS, tail_lines=60))
        except Exception as exc:  # the pod may not have started: say so instead of hiding the cause
            out.append(f"{p.metadata.name}: no log ({exc})")
    return "\n".join(out)


@pytest.fixture(scope="module")
def installed(cluster: Any, kube: Any, helm_bin: Path) -> Any:
    """The chart installed as README says, waited for: its operator pod Running and Ready. The
    namespace enforces the "restricted" Pod Security Standard, as the broker namespace does."""
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": OPERATOR_NS, "labels": RESTRICTED}})
    run_helm(helm_bin, cluster, "install", "rocketstore", str(ROOT / "charts" / "rocketstore-operator"),
             "--namespace", OPERATOR_NS, "--wait", "--timeout", "4m")
    return cluster


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_driver()
    return tmp_path_factory.mktemp("java")


@pytest.fixture(scope="module")
def store(installed: Any, kube: Any) -> dict[str, Any]:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", NS), 60)
    installed.add_local_volumes(4, "100Gi", STORAGE_CLASS)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": NAME},
            "spec": {"brokers": 2, "commitLog": {"segmentSize": "1Mi"},
                     "storage": {"segments": 8, "storageClassName": STORAGE_CLASS},
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, NS, P, body)
    try:
        wait_until("2 broker pods Ready", lambda: len(ps := pods(kube)) == 2 and all(ready(p) for p in ps.values()),
                   300, interval=1)
        wait_until("RocketStore Ready", lambda: any(c["type"] == "Ready" and c["status"] == "True"
                                                    for c in get(kube).get("status", {}).get("conditions", [])), 120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nstatus: {get(kube).get('status')}\noperator log:\n{operator_logs(kube)}") from exc
    return get(kube)


def test_operator_runs_in_its_pod_from_the_chart(installed: Any, kube: Any, helm_bin: Path) -> None:
    deploys = client.AppsV1Api(kube).list_namespaced_deployment(OPERATOR_NS).items
    assert len(deploys) == 1 and deploys[0].status.ready_replicas == 1, operator_logs(kube)
    pod = client.CoreV1Api(kube).list_namespaced_pod(OPERATOR_NS).items[0]
    assert pod.spec.node_name == installed.name  # the real node, not kwok
    assert pod.spec.containers[0].image.startswith("rocketstore/rocketstore:")
    # the chart's own test: a pod of the operator image asks the operator's /healthz
    out = run_helm(helm_bin, installed, "test", "rocketstore", "--namespace", OPERATOR_NS, "--timeout", "3m")
    assert "Succeeded" in out, out


def test_produce_and_consume_through_the_cluster(store: dict[str, Any], kube: Any, java: Path) -> None:
    # as `mqadmin updateTopic -c`: the topic on every broker (auto-creation would put it on the
    # broker that took the first send only, as in RocketMQ)
    for i in range(2):
        with BrokerAdmin(broker_addr(kube, i), timeout=5) as admin:
            admin.create_topic(TOPIC, read_queues=4, write_queues=4)
    driver = java_client(kube, java)
    sent = driver.produce(TOPIC, MESSAGES, keys=True)
    assert sent.summary["failed"] == 0 and len(sent.of("sent")) == MESSAGES, sent.errors
    brokers = {line["brokerName"] for line in sent.of("sent")}
    for line in sent.of("sent"):
        SENT_TO[line["brokerName"]] = SENT_TO.get(line["brokerName"], 0) + 1
    assert brokers == {f"{NAME}-0", f"{NAME}-1"}, brokers  # the topic spans both brokers
    got = driver.push_consume(TOPIC, "NodeGroup", MESSAGES, timeout_s=90)
    assert got.summary["consumed"] == MESSAGES, got.summary
    bodies = {line["body"] for line in got.of("received")}
    assert bodies == {f"body-{i}" for i in range(MESSAGES)}


def test_retention_change_is_applied_live(store: dict[str, Any], kube: Any) -> None:
    uids = {n: p.metadata.uid for n, p in pods(kube).items()}
    patch(kube, {"retention": {"fileReservedTime": 96}})

    def applied() -> bool:
        for i in range(2):
            with BrokerAdmin(broker_addr(kube, i), timeout=5) as admin:
                if admin.get_broker_config().get("fileReservedTime") != "96":
                    return False
        return True

    wait_until("both brokers run fileReservedTime=96", applied, 120)
    assert {n: p.metadata.uid for n, p in pods(kube).items()} == uids  # no pod was replaced


def test_deleted_broker_pod_comes_back_on_its_volume(store: dict[str, Any], kube: Any, java: Path) -> None:
    old = pods(kube)[f"{NAME}-1"]
    volume = volume_of(kube, 1)
    client.CoreV1Api(kube).delete_namespaced_pod(f"{NAME}-1", NS)
    wait_until("broker-1 recreated and Ready", lambda: (p := pods(kube).get(f"{NAME}-1")) is not None
               and p.metadata.uid != old.metadata.uid and ready(p), 240, interval=1)
    assert volume_of(kube, 1) == volume  # the same claim, the same directory
    with BrokerAdmin(broker_addr(kube, 1), timeout=5) as admin:
        stored = sum(q.max_offset for q in admin.topic_stats(TOPIC))
    assert stored == SENT_TO[f"{NAME}-1"], (stored, SENT_TO)
    # every acknowledged message is still there: a new group reads the topic from the start
    driver = java_client(kube, java)
    got = driver.push_consume(TOPIC, "NodeGroupAfterRestart", MESSAGES, timeout_s=120)
    assert {line["body"] for line in got.of("received")} == {f"body-{i}" for i in range(MESSAGES)}


def test_manual_delete_token_removes_expired_files_from_the_volume(store: dict[str, Any], kube: Any) -> None:
    patch(kube, {"retention": {"fileReservedTime": 1}})
    addr = broker_addr(kube, 0)
    wait_until("broker-0 runs fileReservedTime=1",
               lambda: BrokerAdmin(addr, timeout=5).get_broker_config().get("fileReservedTime") == "1", 120)
    commitlog = volume_of(kube, 0) / "commitlog"
    assert sorted(commitlog.iterdir()), f"no CommitLog files in {commitlog}"
    # several full 1 MiB segments on broker-0: queue_id pins the sends to the first broker of the
    # route, which is the broker whose name server answers (its peers' DNS names do not resolve here)
    from rocketstore.client.producer import Producer

    with Producer(broker_addr(kube, 0, 9876), "node-filler") as producer:
        for _ in range(20):
            producer.send_batch("NodeFiller", [os.urandom(16 * 1024) for _ in range(16)], queue_id=0)
    before = wait_until("at least 4 segments", lambda: len(s := sorted(commitlog.iterdir())) >= 4 and s, 60)
    # the newest two stay young: the one being written, and the next one the store may have
    # allocated ahead of need
    aged = before[:-2]
    old = time.time() - 3 * 3600
    for f in aged:
        os.utime(f, (old, old))
    patch(kube, {"maintenance": {"deleteExpiredRequest": "node-1"}})
    after = wait_until("expired segments gone from the pod's volume",
                       lambda: set(aged) - set(s := sorted(commitlog.iterdir())) and s, 150, interval=1)
    assert set(before[-2:]) <= set(after)  # files within fileReservedTime are kept


def test_scale_to_three_brokers_and_the_new_one_serves(store: dict[str, Any], kube: Any, java: Path) -> None:
    patch(kube, {"brokers": 3})
    wait_until("3 broker pods Ready", lambda: len(ps := pods(kube)) == 3 and all(ready(p) for p in ps.values()),
               300, interval=1)
    driver = java_client(kube, java, 2)

    def served_by_new_broker() -> bool:
        sent = driver.produce("NodeScaled", 60, check=False)
        return f"{NAME}-2" in {line["brokerName"] for line in sent.of("sent")}

    wait_until("a send landing on the new broker", served_by_new_broker, 120, interval=5)


def test_deleting_the_rocketstore_keeps_its_volumes(store: dict[str, Any], kube: Any) -> None:
    core = client.CoreV1Api(kube)
    claims = {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NS).items}
    assert len(claims) == 3
    client.CustomObjectsApi(kube).delete_namespaced_custom_object(G, V, NS, P, NAME)
    wait_until("broker pods gone", lambda: not pods(kube), 180, interval=1)
    assert {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NS).items} == claims
    assert (volume_of(kube, 0) / "commitlog").is_dir()
