"""RocketStore as users run it: ``helm install`` of the chart, a RocketStore of 2 brokers, and a
real RocketMQ client, all on a real node (kubelet, containerd, kube-proxy, CoreDNS; conftest.py).

Nothing here is simulated: the operator runs in a pod from the project's image and reaches the API
server through the ``kubernetes`` Service (kube-proxy) and the brokers through their headless DNS
names (CoreDNS); the brokers are containers of the same image writing to local PersistentVolumes,
which are directories on this machine, so the test can look at the files a broker wrote.

The client is the Java RocketMQ 4.9.8 client on the host, outside the cluster network, as an
application elsewhere would be: the RocketStore has ``externalAccess`` (NodePort), so its name
servers answer on the node's address and port 30876 and each broker advertises the node's address
and its own node port (30911 + ordinal), which kube-proxy forwards to its pod.

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
from tls_certs import make_certs, tls_jvm

from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    RemotingConnectError,
    SessionCredentials,
    client_ssl_context,
)

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
BASE_PORT, NAMESRV_NODE_PORT = 30911, 30876
#: the node has 2 CPUs: the default requests (500m per broker) would leave the 4th broker Pending
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
SECURE_NS = "bank"
OPERATOR_AK, OPERATOR_SK = "rocketstoreOperator", "operator-secret-1"
APP_AK, APP_SK = "payments", "payments-secret-1"
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


def broker_addr(kube: Any, ordinal: int, port: int | None = None) -> str:
    """Broker ``ordinal``'s pod address, at its remoting port (``BASE_PORT + ordinal``) unless
    ``port`` says otherwise (9876: its name server)."""
    pod = pods(kube)[f"{NAME}-{ordinal}"]
    return f"{pod.status.pod_ip}:{BASE_PORT + ordinal if port is None else port}"


def java_client(kube: Any, workdir: Path) -> ClientDriver:
    """A Java client whose name server is the RocketStore's external one, on the node's address."""
    node_ip = next(iter(pods(kube).values())).status.host_ip
    return ClientDriver(f"{node_ip}:{NAMESRV_NODE_PORT}", workdir)


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
    # readReferencedSecrets: the operator reads the credentials Secret of the secured store below
    run_helm(helm_bin, cluster, "install", "rocketstore", str(ROOT / "charts" / "rocketstore-operator"),
             "--namespace", OPERATOR_NS, "--set", "rbac.readReferencedSecrets=true", "--wait", "--timeout", "4m")
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
    installed.add_local_volumes(5, "100Gi", STORAGE_CLASS)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": NAME},
            "spec": {"brokers": 2, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "externalAccess": {"type": "NodePort", "basePort": BASE_PORT,
                                        "namesrvNodePort": NAMESRV_NODE_PORT},
                     "storage": {"segments": 8, "storageClassName": STORAGE_CLASS},
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, NS, P, body)
    try:
        wait_until("2 broker pods Ready", lambda: len(ps := pods(kube)) == 2 and all(ready(p) for p in ps.values()),
                   300, interval=1)
        wait_until("RocketStore Ready", lambda: any(c["type"] == "Ready" and c["status"] == "True"
                                                    for c in get(kube).get("status", {}).get("conditions", [])), 120)
        # the operator pushes each broker the node addresses of its peers once it has seen the pods
        # placed (until then routes name peers by their in-cluster DNS names)
        wait_until("clusterPeers at node addresses", lambda: all(
            ".svc:" not in BrokerAdmin(broker_addr(kube, i), timeout=5).get_broker_config()["clusterPeers"]
            for i in range(2)), 120, interval=1)
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


def test_tls_and_acl_from_secrets_end_to_end(store: dict[str, Any], kube: Any, java: Path,
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    """A RocketStore whose broker enforces TLS and plain ACL from Secrets: the operator reaches it
    over TLS, verified against the Secret's CA and signed with its own account; a Java client
    with TLS and an account produces; one without the account is refused."""
    certs = make_certs(tmp_path_factory.mktemp("certs"))
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": SECURE_NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", SECURE_NS), 60)
    acl = (f"accounts:\n- accessKey: {OPERATOR_AK}\n  secretKey: {OPERATOR_SK}\n  admin: true\n"
           f"- accessKey: {APP_AK}\n  secretKey: {APP_SK}\n  defaultTopicPerm: PUB|SUB\n  defaultGroupPerm: SUB\n")
    for name, data, kind in (
            ("vault-tls", {"tls.crt": certs.server_cert.read_text(), "tls.key": certs.server_key.read_text(),
                           "ca.crt": certs.ca.read_text()}, "kubernetes.io/tls"),
            ("vault-acl", {"plain_acl.yml": acl}, "Opaque"),
            ("vault-operator", {"accessKey": OPERATOR_AK, "secretKey": OPERATOR_SK}, "Opaque")):
        core.create_namespaced_secret(SECURE_NS, {"metadata": {"name": name}, "type": kind, "stringData": data})
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "vault"},
            "spec": {"brokers": 1, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "storage": {"segments": 8, "storageClassName": STORAGE_CLASS},
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()},
                     "acl": {"secretName": "vault-acl", "operatorCredentials": {"secretName": "vault-operator"}},
                     "tls": {"secretName": "vault-tls", "mode": "enforcing"}}}
    objects = client.CustomObjectsApi(kube)
    objects.create_namespaced_custom_object(G, V, SECURE_NS, P, body)

    def observed_reachable() -> bool:
        status = objects.get_namespaced_custom_object(G, V, SECURE_NS, P, "vault").get("status", {})
        brokers = status.get("brokers") or []
        return bool(brokers and brokers[0].get("reachable") and brokers[0].get("appliedRetention"))

    try:
        wait_until("the operator reaching the TLS + ACL broker", observed_reachable, 300, interval=1)
    except AssertionError as exc:
        status = objects.get_namespaced_custom_object(G, V, SECURE_NS, P, "vault").get("status")
        raise AssertionError(f"{exc}\nstatus: {status}\noperator log:\n{operator_logs(kube)}") from exc
    pod = client.CoreV1Api(kube).read_namespaced_pod("vault-0", SECURE_NS)
    addr = f"{pod.status.pod_ip}:10911"

    # our Python admin client, as the operator connects: plain TCP is refused by the enforcing port
    with pytest.raises(RemotingConnectError):
        BrokerAdmin(addr, timeout=5).get_runtime_info()
    tls = client_ssl_context(trust_cert=certs.ca)
    with BrokerAdmin(addr, timeout=5, ssl_context=tls,
                     rpc_hook=AclClientRPCHook(SessionCredentials(OPERATOR_AK, OPERATOR_SK))) as admin:
        assert admin.get_broker_config()["aclEnable"] == "true"
        admin.create_topic("VaultTopic", read_queues=2, write_queues=2)

    driver = ClientDriver(f"{pod.status.pod_ip}:9876", java / "vault", jvm_args=tls_jvm(certs.ca))
    sent = driver.run("acl-produce", "-t", "VaultTopic", "-c", 5, "--ak", APP_AK, "--sk", APP_SK)
    assert len(sent.of("sent")) == 5, sent.lines
    refused = driver.run("acl-produce", "-t", "VaultTopic", "-c", 1, "--ak", APP_AK, "--sk", "wrong", check=False)
    assert not refused.of("sent"), refused.lines
    assert [line["remark"] for line in refused.of("refused")] == [
        f"org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey={APP_AK}"]


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
    driver = java_client(kube, java)

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
