"""RocketStore as users run it: ``helm install`` of the chart, a RocketStore of 2 brokers, and a
real RocketMQ client, on a real cluster: our own real node (kubelet, containerd, kube-proxy,
CoreDNS) or any cluster a kubeconfig reaches (conftest.py).

Nothing here is simulated: the operator runs in a pod from the project's image and reaches the API
server through the ``kubernetes`` Service and the brokers through their headless DNS names; the
brokers are containers of the same image writing to PersistentVolumes. The test reaches the
cluster only as an outside user can: the API server (including ``exec`` into a broker container
to look at the files it wrote) and node ports.

The clients are on this machine, outside the cluster network, as an application elsewhere would
be: the RocketStores have ``externalAccess`` (NodePort), so their name servers answer on the
nodes' addresses at 30876 (30877 for the TLS store) and each broker advertises its node's address
and its own node port (30911 + ordinal; 30950), which kube-proxy forwards to its pod. The one
exception is the Lease failover store, whose Java 5.x client needs the brokers' gRPC port, which
no store publishes outside the cluster: its clients are on the node's pod network, as an
application in the cluster would be.

The tests run in file order and build on each other: install, produce and consume, live retention,
a broker pod deleted, manual delete (which also deletes the first segment of broker-0, where the
produce test's messages are), scaling 2 -> 3, a TLS store, a LoadBalancer store, a replicated
store (master and slave) losing its master pod and rolling, a Lease failover store whose master
moves within its group twice while Java 4.x and 5.x producers send and which then rolls for an
upgrade while a Java 4.x producer sends, the RocketStore deleted.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import java5_driver
import pytest
from java_rocketmq import ClientDriver, build_driver
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from node_support import ROOT, Target, wait_until
from tls_certs import make_certs, tls_jvm

from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    BrokerRoutes,
    NameServerClient,
    Producer,
    PullConsumer,
    RemotingClient,
    RemotingClientError,
    RemotingConnectError,
    SessionCredentials,
    client_ssl_context,
)
from rocketstore.client.consumer import PullStatus
from rocketstore.common.replica_lease import ReplicaInfo, lease_name, parse_lease
from rocketstore.operator.desired import GRPC_PORT, LISTEN_PORT, NAMESRV_PORT, STORE_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow]

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
OPERATOR_NS = "rocketstore-system"
NS = "shop"
NAME = "orders"
TOPIC = "NodeTopic"
MESSAGES = 200
BASE_PORT, NAMESRV_NODE_PORT = 30911, 30876
VAULT_PORT, VAULT_NAMESRV_NODE_PORT = 30950, 30877
#: the node has 2 CPUs: the default requests (500m per broker) would leave the 4th broker Pending
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
SECURE_NS = "bank"
#: the LoadBalancer store: one broker on EDGE_PORT, its name server on 9876 of its balancer
EDGE_NS, EDGE_PORT = "edge", 30960
#: the replicated store (a master and a slave): masters from LEDGER_PORT, slave k of group i on
#: LEDGER_PORT + 64k + i (the operator's rule), its name servers on LEDGER_NAMESRV_NODE_PORT
LEDGER_NS, LEDGER_PORT, LEDGER_NAMESRV_NODE_PORT = "ledger", 30970, 30878
#: the replicated store's send loop: more sends than it gets through before it is stopped
LOOP_SENDS = 100_000
#: how long a consumer goes on after its count: a send in flight at the kill may be stored and
#: unacknowledged, so the count is reached before every acknowledged message has come
LINGER_MS = 5000
#: the Lease failover store: one group of two candidates (replica ids 1 and 2), no external access
RELAY_NS, RELAY = "relay", "relay"
RELAY_GROUP, RELAY_TOPIC = f"{RELAY}-0", "RelayTopic"
RELAY_MEMBERS = {1: f"{RELAY}-0", 2: f"{RELAY}-slave-1-0"}
#: a Lease naming the other member within this of the master's loss: D (3 s) unrenewed, R (1 s)
#: to see it, and a busy 2-CPU node's room; the test prints what it measured
TAKEOVER_LIMIT_S = 30
#: both clients acknowledged by the new master within this of the kill: the 5.x client refreshes
#: its routes only every 30 s (the 4.x one every second here), and a send to a dead address waits
#: for its timeout
RESUME_LIMIT_S = 90
#: the failover store's send loops: one send per PAUSE_MS each, more than they get through
RELAY_SENDS, RELAY_PAUSE_MS = 100_000, 100
#: the rolling upgrade's send loop on the Lease store: one send per ROLL_PAUSE_MS, more than it
#: gets through
ROLL_TOPIC, ROLL_SENDS, ROLL_PAUSE_MS = "RollTopic", 100_000, 20
#: the longest a rolling upgrade may leave the group without an acknowledged send: the test's
#: docstring says why
ROLL_GAP_LIMIT_S = 3
#: the namespaces of the RocketStores, deleted again at the end
STORE_NAMESPACES = (NS, SECURE_NS, EDGE_NS, LEDGER_NS, RELAY_NS)
#: the store left when the chart is uninstalled (the other order of uninstalling), made at the end
LEFT_NS = "leftover"
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


def broker_addr(kube: Any, ordinal: int) -> str:
    """Broker ``ordinal`` as an outside client reaches it: its node's address and node port."""
    pod = pods(kube)[f"{NAME}-{ordinal}"]
    return f"{pod.status.host_ip}:{BASE_PORT + ordinal}"


def namesrv_addr(kube: Any) -> str:
    """The store's name servers as an outside client reaches them: any node, NAMESRV_NODE_PORT."""
    return f"{next(iter(pods(kube).values())).status.host_ip}:{NAMESRV_NODE_PORT}"


def java_client(kube: Any, workdir: Path) -> ClientDriver:
    """A Java client whose name server is the RocketStore's external one."""
    return ClientDriver(namesrv_addr(kube), workdir)


def in_broker(kube: Any, ordinal: int, *command: str) -> str:
    """Run ``command`` in broker ``ordinal``'s container through the API server (``kubectl exec``);
    its stdout, or the test fails with its exit code and stderr."""
    ws = stream(client.CoreV1Api(kube).connect_get_namespaced_pod_exec, f"{NAME}-{ordinal}", NS,
                container="broker", command=list(command), stdin=False, stdout=True, stderr=True, tty=False,
                _preload_content=False)
    ws.run_forever(timeout=60)
    out, err = ws.read_stdout(), ws.read_stderr()
    ws.close()
    assert ws.returncode == 0, f"{' '.join(command)} in {NAME}-{ordinal}: exit {ws.returncode}: {err}"
    return str(out)


def commitlog_files(kube: Any, ordinal: int) -> list[str]:
    """The CommitLog segment names on broker ``ordinal``'s volume, oldest first."""
    return sorted(in_broker(kube, ordinal, "ls", "-1", f"{STORE_DIR}/commitlog").split())


def claim_of(kube: Any, ordinal: int) -> Any:
    return next(c for c in client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(NS).items
                if c.metadata.name.endswith(f"{NAME}-{ordinal}"))


def run_helm(helm_bin: Path, cluster: Target, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(helm_bin), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"helm {' '.join(args[:2])} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def operator_logs(kube: Any, namespace: str = OPERATOR_NS, tail: int = 60, store_ns: str | None = None) -> str:
    """The pods of ``namespace``: phase, container states and the last ``tail`` log lines each;
    with ``store_ns``, before those the lines of the whole log that name a store of that
    namespace (kopf prefixes a handler's lines with ``[namespace/name]``)."""
    core = client.CoreV1Api(kube)
    out = []
    for p in core.list_namespaced_pod(namespace).items:
        states = [(c.name, c.ready, c.restart_count, c.state.to_dict()) for c in p.status.container_statuses or []]
        # a pod never scheduled has no container state: its conditions say why (PodScheduled's message)
        unmet = [(c.type, c.reason, c.message) for c in p.status.conditions or [] if c.status != "True"]
        out.append(f"-- {p.metadata.name}: {p.status.phase} {states} {unmet}")
        try:
            if store_ns is not None:
                whole = core.read_namespaced_pod_log(p.metadata.name, namespace) or ""
                out.extend(line for line in whole.splitlines() if f"[{store_ns}/" in line)
                out.append("-- last lines:")
            out.append(core.read_namespaced_pod_log(p.metadata.name, namespace, tail_lines=tail) or "(empty log)")
        except Exception as exc:  # the pod may not have started: say so instead of hiding the cause
            out.append(f"{p.metadata.name}: no log ({exc})")
    return "\n".join(out)


def _delete_everything(kube: Any, helm_bin: Path, cluster: Target) -> None:
    """What a user does to remove it all, in both orders docs/operator.md ("Uninstalling") says
    work: the scenario's RocketStores first, while the operator runs (it removes its finalizers);
    then, with one store still there (LEFT_NS, made here, reconciled so it carries the finalizer),
    the chart: its pre-delete Job, a pod of the operator image, stops the operator and releases
    that store, which stays; then the CRD, which takes it and its objects but not its PVC
    (deleteClaim false); then the namespaces, PVCs with them. Asserted, so that a stuck finalizer,
    CRD or namespace fails the run instead of the next one."""
    objects, core, apps = client.CustomObjectsApi(kube), client.CoreV1Api(kube), client.AppsV1Api(kube)
    core.create_namespace({"metadata": {"name": LEFT_NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", LEFT_NS), 60)
    objects.create_namespaced_custom_object(G, V, LEFT_NS, P, {
        "apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "left"},
        "spec": {"brokers": 1, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL, "storage": storage(cluster)}})
    wait_until("the left store's claim made and the finalizer on it", lambda: (
        core.list_namespaced_persistent_volume_claim(LEFT_NS).items and "rocketstore.io/operator" in (
            objects.get_namespaced_custom_object(G, V, LEFT_NS, P, "left")["metadata"].get("finalizers") or [])),
        180, interval=1)
    for ns in STORE_NAMESPACES:
        for item in objects.list_namespaced_custom_object(G, V, ns, P).get("items", []) if _exists(core, ns) else []:
            objects.delete_namespaced_custom_object(G, V, ns, P, item["metadata"]["name"])
        wait_until(f"RocketStores of {ns} gone", lambda ns=ns: not _exists(core, ns)
                   or not objects.list_namespaced_custom_object(G, V, ns, P).get("items"), 180, interval=1)
    for ns in STORE_NAMESPACES:
        if _exists(core, ns):
            core.delete_namespace(ns)
    run_helm(helm_bin, cluster, "uninstall", "rocketstore", "--namespace", OPERATOR_NS, "--wait", "--timeout", "3m")
    left = objects.get_namespaced_custom_object(G, V, LEFT_NS, P, "left")
    assert not left["metadata"].get("finalizers") and not left["metadata"].get("deletionTimestamp"), left["metadata"]
    assert apps.read_namespaced_stateful_set("left", LEFT_NS)  # released, not deleted
    client.ApiextensionsV1Api(kube).delete_custom_resource_definition(f"{P}.{G}")
    wait_until("the CRD gone", lambda: f"{P}.{G}" not in {
        c.metadata.name for c in client.ApiextensionsV1Api(kube).list_custom_resource_definition().items}, 120,
        interval=1)
    wait_until("the left store's StatefulSet and pod collected", lambda: not apps.list_namespaced_stateful_set(
        LEFT_NS).items and not core.list_namespaced_pod(LEFT_NS).items, 180, interval=1)
    assert [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(LEFT_NS).items] == ["store-left-0"]
    core.delete_namespace(LEFT_NS)
    core.delete_namespace(OPERATOR_NS)
    wait_until("the scenario's namespaces gone",
               lambda: not any(_exists(core, ns) for ns in (*STORE_NAMESPACES, LEFT_NS, OPERATOR_NS)), 300, interval=2)


def _exists(core: Any, namespace: str) -> bool:
    return any(n.metadata.name == namespace for n in core.list_namespace().items)


@pytest.fixture(scope="module")
def installed(cluster: Target, kube: Any, helm_bin: Path) -> Iterator[Target]:
    """The chart installed as docs/operator.md says, waited for: its operator pod Running and Ready. The
    namespace enforces the "restricted" Pod Security Standard, as the broker namespaces do. At the
    end everything the scenario made is deleted again (a persistent cluster is left as it was)."""
    core = client.CoreV1Api(kube)
    taken = [ns for ns in (OPERATOR_NS, *STORE_NAMESPACES, LEFT_NS) if _exists(core, ns)]
    if taken:
        pytest.fail(f"namespaces {taken} exist already: the scenario creates and deletes them itself", pytrace=False)
    core.create_namespace({"metadata": {"name": OPERATOR_NS, "labels": RESTRICTED}})
    # every store's volumes, made here so that any test runs alone (-k): 3 brokers of the first
    # store, 1 of the TLS store, 1 of the LoadBalancer store, 2 of the replicated one, 2 of the
    # Lease failover one, 1 of the store left at the uninstall
    cluster.add_volumes(10)
    try:
        # readReferencedSecrets: the operator reads the credentials Secret of the secured store below
        run_helm(helm_bin, cluster, "install", "rocketstore", str(ROOT / "charts" / "rocketstore-operator"),
                 "--namespace", OPERATOR_NS, "--set", "rbac.readReferencedSecrets=true", "--wait", "--timeout", "4m")
        yield cluster
    finally:
        _delete_everything(kube, helm_bin, cluster)


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_driver()
    return tmp_path_factory.mktemp("java")


def storage(cluster: Target) -> dict[str, Any]:
    """spec.storage: 8 segments of the cluster's class (its default class when none is named)."""
    return {"segments": 8, **({"storageClassName": cluster.storage_class} if cluster.storage_class else {})}


@pytest.fixture(scope="module")
def store(installed: Target, kube: Any) -> dict[str, Any]:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", NS), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": NAME},
            "spec": {"brokers": 2, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "externalAccess": {"type": "NodePort", "basePort": BASE_PORT,
                                        "namesrvNodePort": NAMESRV_NODE_PORT},
                     "storage": storage(installed),
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


def test_operator_runs_in_its_pod_from_the_chart(installed: Target, kube: Any, helm_bin: Path) -> None:
    deploys = client.AppsV1Api(kube).list_namespaced_deployment(OPERATOR_NS).items
    # the chart's default: two replicas with leader election, both ready (a standby serves /healthz too)
    assert len(deploys) == 1 and deploys[0].spec.replicas == 2, operator_logs(kube)
    assert deploys[0].status.ready_replicas == 2, operator_logs(kube)
    selector = ",".join(f"{k}={v}" for k, v in deploys[0].spec.selector.match_labels.items())
    pods = client.CoreV1Api(kube).list_namespaced_pod(OPERATOR_NS, label_selector=selector).items
    assert len(pods) == 2
    for pod in pods:
        assert pod.spec.node_name in installed.nodes  # a real node (the test control plane's kwok node runs nothing)
        assert pod.spec.containers[0].image.startswith("rocketstore/rocketstore:")
    # exactly one of them leads
    lease = client.CoordinationV1Api(kube).read_namespaced_lease("rocketstore-rocketstore-operator", OPERATOR_NS)
    assert lease.spec.holder_identity and lease.spec.holder_identity.split("_")[0] in {p.metadata.name for p in pods}
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


def test_tls_and_acl_from_secrets_end_to_end(store: dict[str, Any], installed: Target, kube: Any, java: Path,
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
                     "externalAccess": {"type": "NodePort", "basePort": VAULT_PORT,
                                        "namesrvNodePort": VAULT_NAMESRV_NODE_PORT},
                     "storage": storage(installed),
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
    addr = f"{pod.status.host_ip}:{VAULT_PORT}"

    # our Python admin client, as the operator connects: served over TLS with the admin account
    # (retried: the node port may not lead to the new pod yet) ...
    tls = client_ssl_context(trust_cert=certs.ca)
    hook = AclClientRPCHook(SessionCredentials(OPERATOR_AK, OPERATOR_SK))
    config = wait_until("the TLS broker answering on its node port", lambda: BrokerAdmin(
        addr, timeout=5, ssl_context=tls, rpc_hook=hook).get_broker_config(), 60, interval=1)
    assert config["aclEnable"] == "true"
    with BrokerAdmin(addr, timeout=5, ssl_context=tls, rpc_hook=hook) as admin:
        admin.create_topic("VaultTopic", read_queues=2, write_queues=2)
    # ... and refused over plain TCP by the enforcing port
    with pytest.raises(RemotingConnectError):
        BrokerAdmin(addr, timeout=5).get_runtime_info()

    driver = ClientDriver(f"{pod.status.host_ip}:{VAULT_NAMESRV_NODE_PORT}", java / "vault",
                          jvm_args=tls_jvm(certs.ca))
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
    volume = claim_of(kube, 1).spec.volume_name
    client.CoreV1Api(kube).delete_namespaced_pod(f"{NAME}-1", NS)
    wait_until("broker-1 recreated and Ready", lambda: (p := pods(kube).get(f"{NAME}-1")) is not None
               and p.metadata.uid != old.metadata.uid and ready(p), 240, interval=1)
    assert claim_of(kube, 1).spec.volume_name == volume  # the same claim, the same volume

    def stored_messages() -> int:  # retried: Ready comes before kube-proxy has the new endpoint
        with BrokerAdmin(broker_addr(kube, 1), timeout=5) as admin:
            return sum(q.max_offset for q in admin.topic_stats(TOPIC))

    stored = wait_until("broker-1 answering on its node port", stored_messages, 60, interval=1)
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
    assert commitlog_files(kube, 0), "no CommitLog files on broker-0's volume"
    # several full 1 MiB segments on broker-0: routes asked of broker-0 itself (a name server names
    # every broker of the store for every topic) send to it alone
    with BrokerAdmin(broker_addr(kube, 0), timeout=5) as admin:
        admin.create_topic("NodeFiller", read_queues=1, write_queues=1)
    remoting = RemotingClient(timeout=5)
    routes = BrokerRoutes(broker_addr(kube, 0), remoting)
    with remoting, Producer(None, "node-filler", client=remoting, routes=routes) as producer:
        assert {q.broker_name for q in producer.queues("NodeFiller")} == {f"{NAME}-0"}
        for _ in range(20):
            producer.send_batch("NodeFiller", [os.urandom(16 * 1024) for _ in range(16)])
    before = wait_until("at least 4 segments", lambda: len(s := commitlog_files(kube, 0)) >= 4 and s, 60)
    # the newest two stay young: the one being written, and the next one the store may have
    # allocated ahead of need
    aged = before[:-2]
    in_broker(kube, 0, "touch", "-m", "-d", f"@{int(time.time()) - 3 * 3600}",
              *(f"{STORE_DIR}/commitlog/{name}" for name in aged))
    patch(kube, {"maintenance": {"deleteExpiredRequest": "node-1"}})
    after = wait_until("expired segments gone from the pod's volume",
                       lambda: set(aged) - set(s := commitlog_files(kube, 0)) and s, 150, interval=1)
    assert set(before[-2:]) <= set(after)  # files within fileReservedTime are kept


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def test_volume_growth_where_the_storage_class_allows_it(store: dict[str, Any], kube: Any) -> None:
    """spec.storage.size grows by 1 GiB. Where the class can expand, every claim asks for
    the new size and gets it, the brokers keep running; where it cannot (``local`` volumes, kind's
    local-path), the API server refuses the claims' resize and the RocketStore says so, changing
    nothing."""
    core = client.CoreV1Api(kube)
    claims = {c.metadata.name: c for c in core.list_namespaced_persistent_volume_claim(NS).items}
    sizes = {name: c.spec.resources.requests["storage"] for name, c in claims.items()}
    class_name = claim_of(kube, 0).spec.storage_class_name
    expandable = bool(client.StorageV1Api(kube).read_storage_class(class_name).allow_volume_expansion)
    old_size = get(kube)["status"]["volumeSize"]
    new_size = f"{int(old_size.removesuffix('Gi')) + 1}Gi"
    patch(kube, {"storage": {"size": new_size}})
    if expandable:
        wait_until("the RocketStore's volume size grown",
                   lambda: get(kube)["status"]["volumeSize"] == new_size, 120, interval=1)
        wait_until(f"every claim granted {new_size}", lambda: all(
            c.status.capacity and c.status.capacity["storage"] == new_size
            for c in core.list_namespaced_persistent_volume_claim(NS).items), 600, interval=5)
        wait_until("2 broker pods Ready", lambda: len(ps := pods(kube)) == 2 and all(ready(p) for p in ps.values()),
                   300, interval=1)
        return
    refused = wait_until("StorageExpansionFailed", lambda: (c := condition(get(kube), "Degraded"))
                         and c.get("reason") == "StorageExpansionFailed" and c, 120, interval=1)
    assert "PVC" in refused["message"], refused
    after = {c.metadata.name: c.spec.resources.requests["storage"]
             for c in core.list_namespaced_persistent_volume_claim(NS).items}
    assert after == sizes and get(kube)["status"]["volumeSize"] == old_size
    patch(kube, {"storage": {"size": None}})  # back to the size from segments, for what follows
    wait_until("Degraded cleared", lambda: (condition(get(kube), "Degraded") or {}).get("status") != "True", 120)


def test_scale_to_three_brokers_and_the_new_one_serves(store: dict[str, Any], kube: Any, java: Path) -> None:
    patch(kube, {"brokers": 3})
    wait_until("3 broker pods Ready", lambda: len(ps := pods(kube)) == 3 and all(ready(p) for p in ps.values()),
               300, interval=1)
    driver = java_client(kube, java)

    def served_by_new_broker() -> bool:
        sent = driver.produce("NodeScaled", 60, check=False)
        return f"{NAME}-2" in {line["brokerName"] for line in sent.of("sent")}

    wait_until("a send landing on the new broker", served_by_new_broker, 120, interval=5)


def test_load_balancer_store_starts_once_its_balancer_has_an_address(installed: Target, kube: Any,
                                                                     java: Path) -> None:
    """A RocketStore with ``externalAccess: LoadBalancer``: its broker waits in its init container
    until the operator has written its balancer's address (observed on the Service) into the pod's
    mounted ConfigMap, then starts advertising that address, and an outside client reaches it
    through the balancers.

    No test machine has a cloud controller to provision a balancer, so unless
    ``ROCKETSTORE_TEST_LOAD_BALANCER=cloud`` says the cluster has one, the test plays that part: it
    writes the Service status as a cloud controller would, giving the broker's node address, to
    which kube-proxy (which programs every balancer address it sees in a Service's status) forwards
    the Service ports."""
    core, objects = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": EDGE_NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", EDGE_NS), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "gate"},
            "spec": {"brokers": 1, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "externalAccess": {"type": "LoadBalancer", "basePort": EDGE_PORT},
                     "storage": storage(installed),
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    objects.create_namespaced_custom_object(G, V, EDGE_NS, P, body)
    services = ("gate-0-external", "gate-namesrv-external")
    wait_until("the balancer Services", lambda: all(
        s in {x.metadata.name for x in core.list_namespaced_service(EDGE_NS).items} for s in services), 120)

    def waiting_for_address() -> bool:
        pod = next(iter(core.list_namespaced_pod(EDGE_NS).items), None)
        states = (pod and pod.status.init_container_statuses) or []
        return bool(states and states[0].name == "wait-for-address" and states[0].state.running)

    wait_until("broker-0 waiting in its init container", waiting_for_address, 180, interval=1)
    pod = core.read_namespaced_pod("gate-0", EDGE_NS)
    assert not ready(pod)

    def balancer(service: str) -> str | None:
        ingress = core.read_namespaced_service(service, EDGE_NS).status.load_balancer.ingress
        return (ingress[0].ip or ingress[0].hostname) if ingress else None

    if os.environ.get("ROCKETSTORE_TEST_LOAD_BALANCER") == "cloud":  # the cluster provisions balancers
        wait_until("balancer addresses from the cloud", lambda: all(balancer(s) for s in services), 600, interval=5)
    else:
        ingress = {"status": {"loadBalancer": {"ingress": [{"ip": pod.status.host_ip}]}}}
        for s in services:
            core.patch_namespaced_service_status(s, EDGE_NS, ingress)
    address, namesrv = balancer(services[0]), balancer(services[1])

    def gate() -> dict[str, Any]:
        obj: dict[str, Any] = objects.get_namespaced_custom_object(G, V, EDGE_NS, P, "gate")
        return obj

    try:
        # the operator observes the Services every 30 s, kubelet refreshes the mounted ConfigMap
        # within about a minute more
        wait_until("broker-0 started and Ready", lambda: ready(core.read_namespaced_pod("gate-0", EDGE_NS)), 300,
                   interval=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nstatus: {gate().get('status')}\noperator log:\n{operator_logs(kube)}") from exc
    assert core.read_namespaced_pod("gate-0", EDGE_NS).metadata.uid == pod.metadata.uid  # started, not replaced
    wanted = (f"{namesrv}:9876", [f"{address}:{EDGE_PORT}"])
    wait_until(f"status naming the balancers {wanted}", lambda: (st := gate()["status"]).get("externalNamesrvAddr")
               == wanted[0] and [b.get("externalAddress") for b in st.get("brokers") or []] == wanted[1], 120)
    # retried: Ready comes before kube-proxy has programmed the new endpoint
    config = wait_until("broker-0 answering at its balancer",
                        lambda: BrokerAdmin(f"{address}:{EDGE_PORT}", timeout=5).get_broker_config(), 60, interval=1)
    assert config["brokerIP1"] == address
    with BrokerAdmin(f"{address}:{EDGE_PORT}", timeout=5) as admin:
        admin.create_topic("EdgeTopic", read_queues=2, write_queues=2)

    def edge_route() -> Any:
        with RemotingClient(timeout=5) as remoting:
            return NameServerClient(f"{namesrv}:9876", remoting, timeout=5).get_route("EdgeTopic")

    # retried as the broker's address was: kube-proxy may not have programmed the name server's
    # balancer yet (a refused connection failed the Java client's first route query once)
    wait_until("the name server answering at its balancer with EdgeTopic's route", edge_route, 60, interval=1)
    driver = ClientDriver(f"{namesrv}:9876", java / "edge")
    sent = driver.produce("EdgeTopic", 20)
    assert len(sent.of("sent")) == 20 and {line["brokerName"] for line in sent.of("sent")} == {"gate-0"}, sent.lines


def test_a_replicated_group_keeps_every_acknowledged_message_through_a_master_loss_and_a_rolling_restart(
        installed: Target, kube: Any, java: Path) -> None:
    """``replication: {replicasPerGroup: 2, mode: SYNC_MASTER}``: a master and a slave of one
    brokerName. The Java 4.x client's sends are acknowledged SEND_OK only once the slave has them;
    the master pod is force-deleted (its process killed, no grace), and every acknowledged message
    is then read from the slave, by pulls at the slave's own address and by a new Java consumer
    group through the name servers (with the master gone, the slave's embedded name server answers
    behind the name-server Service). When the master is back, a rolling restart (a changed pod
    template) restarts the slave before the master and loses nothing."""
    core, objects = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    core.create_namespace({"metadata": {"name": LEDGER_NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", LEDGER_NS), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "ledger"},
            "spec": {"brokers": 1, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "replication": {"replicasPerGroup": 2, "mode": "SYNC_MASTER"},
                     "externalAccess": {"type": "NodePort", "basePort": LEDGER_PORT,
                                        "namesrvNodePort": LEDGER_NAMESRV_NODE_PORT},
                     "storage": storage(installed),
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    objects.create_namespaced_custom_object(G, V, LEDGER_NS, P, body)
    master, slave = "ledger-0", "ledger-slave-1-0"

    def ledger() -> dict[str, Any]:
        obj: dict[str, Any] = objects.get_namespaced_custom_object(G, V, LEDGER_NS, P, "ledger")
        return obj

    def ledger_pods() -> dict[str, Any]:
        return {p.metadata.name: p for p in core.list_namespaced_pod(LEDGER_NS).items}

    def in_sync() -> bool:
        return any(c["type"] == "ReplicationInSync" and c["status"] == "True"
                   for c in ledger().get("status", {}).get("conditions", []))

    try:
        wait_until("master and slave Ready", lambda: set(ps := ledger_pods()) == {master, slave}
                   and all(ready(p) for p in ps.values()), 300, interval=1)
        wait_until("ReplicationInSync", in_sync, 180, interval=2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nstatus: {ledger().get('status')}\noperator log:\n"
                             f"{operator_logs(kube, store_ns=LEDGER_NS)}\n"
                             f"brokers:\n{operator_logs(kube, LEDGER_NS, 40)}") from exc
    node_ip = ledger_pods()[master].status.host_ip
    master_addr, slave_addr = f"{node_ip}:{LEDGER_PORT}", f"{node_ip}:{LEDGER_PORT + 64}"
    namesrv = f"{node_ip}:{LEDGER_NAMESRV_NODE_PORT}"
    with BrokerAdmin(master_addr, timeout=5) as admin:
        admin.create_topic("LedgerTopic", read_queues=2, write_queues=2)

    def slave_has_topic() -> bool:  # the slave's SlaveSynchronize copies the master's topics every 10 s
        with RemotingClient(timeout=5) as remoting:
            try:
                return bool(BrokerRoutes(slave_addr, remoting).get_route("LedgerTopic").queue_datas)
            except RemotingClientError:
                return False

    wait_until("the topic synchronized to the slave", slave_has_topic, 60, interval=1)

    # routes polled every second, so the clients follow the group's members as pods come and go
    driver = ClientDriver(namesrv, java / "ledger", poll_namesrv_ms=1000, heartbeat_ms=1000,
                          rebalance_interval_ms=1000)
    sent = driver.produce("LedgerTopic", 100)
    acked = [line for line in sent.of("sent") if line["status"] == "SEND_OK"]
    assert len(acked) == 100, sent.lines  # SYNC_MASTER with its slave in sync: every send acknowledged
    expected = {line["body"] for line in acked}

    # the Java producer sends in a loop (one sync send at a time) while the master pod is
    # force-deleted; what it printed SEND_OK for before it is stopped must all be on the slave
    loop = driver.start("produce", "-t", "LedgerTopic", "-c", LOOP_SENDS, "--mode", "sync", "--start", 1000,
                        check=False)

    def loop_acked() -> set[str]:
        return {line["body"] for line in loop.lines_so_far()
                if line.get("kind") == "sent" and line["status"] == "SEND_OK"}

    wait_until("the send loop acknowledged", lambda: len(loop_acked()) >= 50, 120)
    old_master = ledger_pods()[master]
    core.delete_namespaced_pod(master, LEDGER_NS, grace_period_seconds=0)
    killed_at = len(loop_acked())
    # the loop goes on against the dead master until its sends fail (no master in the routes, or
    # a timeout): nothing may be acknowledged that the slave lacks
    wait_until("the send loop failing against the dead master",
               lambda: any(line.get("kind") == "error" for line in loop.lines_so_far()), 120)
    loop.kill()
    stopped = loop.wait(30)  # after the kill: its readers have taken every line it printed
    acked_in_loop = {line["body"] for line in stopped.of("sent") if line["status"] == "SEND_OK"}
    assert killed_at >= 50 and len(acked_in_loop) < LOOP_SENDS, "the loop ended before the master was killed"
    expected |= acked_in_loop
    # a send in flight at the kill may be stored on both yet never acknowledged: such bodies may be
    # read too, and nothing else
    in_flight = {f"body-{i}" for i in range(1000, 1000 + LOOP_SENDS)} - acked_in_loop
    # straight away, whether or not the StatefulSet has a new master pod yet: every acknowledged
    # message is on the slave, pulled at the slave's own address
    with RemotingClient() as remoting:
        on_slave = BrokerRoutes(slave_addr, remoting)
        with PullConsumer(None, "LedgerSlaveReaders", client=remoting, routes=on_slave) as consumer:
            from_slave = {m.body.decode() for mq in consumer.queues("LedgerTopic")
                          for m in pull_all(consumer, mq)}
    assert expected <= from_slave, sorted(expected - from_slave)[:20]
    assert from_slave - expected <= in_flight, sorted(from_slave - expected - in_flight)[:20]
    # a client knowing only the name servers reads them too (the slave answers as name server)
    # the count is reached early when in-flight bodies come too: lingering takes the rest
    got = driver.push_consume("LedgerTopic", "LedgerGroup", len(expected), timeout_s=120, linger_ms=LINGER_MS)
    assert {line["body"] for line in got.of("received")} >= expected, got.summary

    wait_until("the master back and Ready", lambda: (p := ledger_pods().get(master)) is not None
               and p.metadata.uid != old_master.metadata.uid and ready(p), 300, interval=1)
    # the new master pod has a new address: its slave learns it at its next registration (30 s)
    # and reconnects; until then SYNC_MASTER answers SLAVE_NOT_AVAILABLE
    def acknowledged() -> bool:
        with Producer(namesrv, "LedgerProbe") as producer:
            return producer.send("LedgerTopic", b"probe", timeout=10).status == "SEND_OK"

    wait_until("a SEND_OK from the restarted master", acknowledged, 180, interval=2)
    more = driver.produce("LedgerTopic", 50, start=100)
    assert len([line for line in more.of("sent") if line["status"] == "SEND_OK"]) == 50, more.lines
    expected |= {line["body"] for line in more.of("sent")} | {"probe"}

    # a rolling restart: a new pod template (another CPU request) for every member of the group
    before = {name: p.metadata.uid for name, p in ledger_pods().items()}
    objects.patch_namespaced_custom_object(G, V, LEDGER_NS, P, "ledger", {"spec": {"resources": {
        **SMALL, "requests": {**SMALL["requests"], "cpu": "110m"}}}})
    wait_until("both members replaced and Ready", lambda: all(
        (p := ledger_pods().get(name)) is not None and p.metadata.uid != uid and ready(p)
        for name, uid in before.items()), 600, interval=2)
    restarted = ledger_pods()
    assert (restarted[slave].metadata.creation_timestamp
            <= restarted[master].metadata.creation_timestamp), "the master restarted before its slave"
    wait_until("ReplicationInSync after the rollout", in_sync, 180, interval=2)
    after = driver.push_consume("LedgerTopic", "LedgerGroupAfterRollout", len(expected), timeout_s=120,
                                linger_ms=LINGER_MS)
    received = {line["body"] for line in after.of("received")}
    assert expected <= received and received - expected <= in_flight, after.summary


def pull_all(consumer: PullConsumer, mq: Any) -> list[Any]:
    """Every message of ``mq`` from its first offset."""
    out, offset = [], 0
    while True:
        result = consumer.pull(mq, offset, 32)
        if result.status is not PullStatus.FOUND:
            return out
        out += result.messages
        offset = result.next_begin_offset


class RelayStore:
    """The Lease failover store (``relay``): one group of two candidates, as the tests look at it."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self.core, self.objects = client.CoreV1Api(kube), client.CustomObjectsApi(kube)

    def get(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.objects.get_namespaced_custom_object(G, V, RELAY_NS, P, RELAY)
        return obj

    def pods(self) -> dict[str, Any]:
        return {p.metadata.name: p for p in self.core.list_namespaced_pod(RELAY_NS).items}

    def lease(self) -> ReplicaInfo | None:
        try:
            obj = client.CoordinationV1Api(self.kube).read_namespaced_lease(lease_name(RELAY, RELAY_GROUP), RELAY_NS)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return parse_lease(client.ApiClient().sanitize_for_serialization(obj)).info

    def in_sync_master(self) -> int | None:
        """The master's replica id once both members are in the SyncStateSet (either may take over)."""
        info = self.lease()
        return info.master_replica_id if info and info.sync_state_set == frozenset(RELAY_MEMBERS) else None

    def shown_master(self) -> int | None:
        """The master the operator shows in status.masters."""
        masters = self.get().get("status", {}).get("masters") or []
        return next((m["masterReplicaId"] for m in masters if m["brokerName"] == RELAY_GROUP), None)

    def member_addr(self, replica: int) -> str:
        return f"{self.pods()[RELAY_MEMBERS[replica]].status.pod_ip}:{LISTEN_PORT}"

    def has_topic(self, replica: int, topic: str) -> bool:
        with RemotingClient(timeout=5) as remoting:
            try:
                return bool(BrokerRoutes(self.member_addr(replica), remoting).get_route(topic).queue_datas)
            except RemotingClientError:
                return False

    def create_topic(self, topic: str) -> None:
        """``topic`` on the master, waited for on the other member too (either may take over)."""
        master = self.in_sync_master()
        assert master is not None, self.lease()
        with BrokerAdmin(self.member_addr(master), timeout=5) as admin:
            admin.create_topic(topic, read_queues=2, write_queues=2)
        wait_until(f"{topic} synchronized to the other member", lambda: self.has_topic(3 - master, topic), 60,
                   interval=1)

    def settled(self, timeout: float) -> int:
        """Wait for both members Ready and in the SyncStateSet, and for status.masters naming the
        master; its replica id."""
        try:
            wait_until("both members Ready", lambda: set(ps := self.pods()) == set(RELAY_MEMBERS.values())
                       and all(ready(p) for p in ps.values()), timeout, interval=1)
            master: int = wait_until("a master with both members in sync", self.in_sync_master, 180, interval=1)
            wait_until(f"status.masters naming replica {master}", lambda: self.shown_master() == master, 60,
                       interval=1)
        except AssertionError as exc:
            raise self.diagnose(exc) from exc
        return master

    def diagnose(self, exc: AssertionError) -> AssertionError:
        return AssertionError(f"{exc}\nLease: {self.lease()}\nstatus: {self.get().get('status')}\noperator log:\n"
                              f"{operator_logs(self.kube, store_ns=RELAY_NS)}\n"
                              f"brokers:\n{operator_logs(self.kube, RELAY_NS, 40)}")

    def java_client(self, workdir: Path) -> ClientDriver:
        """A Java 4.x client of the name servers behind the store's client Service, polling its
        routes and heartbeating every second (the defaults, 30 s, would dwarf a takeover)."""
        service_ip = self.core.read_namespaced_service(RELAY, RELAY_NS).spec.cluster_ip
        return ClientDriver(f"{service_ip}:{NAMESRV_PORT}", workdir, poll_namesrv_ms=1000, heartbeat_ms=1000,
                            rebalance_interval_ms=1000)


@pytest.fixture(scope="module")
def relay_store(installed: Target, kube: Any) -> RelayStore:
    """``replication: {replicasPerGroup: 2, failover: {mode: Lease}}`` with the default timings and
    no external access, both members Ready and in sync: made once for the failover test and the
    rolling upgrade after it (either runs alone too)."""
    store = RelayStore(kube)
    store.core.create_namespace({"metadata": {"name": RELAY_NS, "labels": RESTRICTED}})
    wait_until("default SA", lambda: store.core.read_namespaced_service_account("default", RELAY_NS), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": RELAY},
            "spec": {"brokers": 1, "commitLog": {"segmentSize": "1Mi"}, "resources": SMALL,
                     "replication": {"replicasPerGroup": 2, "failover": {"mode": "Lease"}},
                     "storage": storage(installed),
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    store.objects.create_namespaced_custom_object(G, V, RELAY_NS, P, body)
    store.settled(300)
    return store


def test_lease_failover_moves_the_master_within_its_group_while_java_4_and_5_clients_send(
        relay_store: RelayStore, installed: Target, java: Path) -> None:
    """``replication: {replicasPerGroup: 2, failover: {mode: Lease}}``: two candidates of one
    brokerName, the group's Lease naming its master. A Java 4.x producer (remoting, name servers
    behind the store's client Service) and a Java 5.x producer (gRPC, the client Service's gRPC
    port as its access point) send in paced loops while the master is lost twice: its pod
    force-deleted (``--grace-period=0 --force``), then, once the replacement has rejoined the
    SyncStateSet, the new master's broker process SIGKILLed in its container. Each time a member
    takes the Lease for the same brokerName in a newer epoch within TAKEOVER_LIMIT_S (the other
    member, or, after the SIGKILL, the killed one when its container restarts within D), both clients' sends
    are acknowledged by that brokerName again, and at the end a Java 4.x consumer reads every
    message either client was acknowledged (``allAckInSyncStateSet``: an acknowledged message is
    on every member in sync, so on whichever becomes master).

    The store has no external access: the clients reach the pods' addresses, as the test machine
    is on the node's pod network (the brokers publish no gRPC port outside the cluster)."""
    store = relay_store
    store.settled(60)
    store.create_topic(RELAY_TOPIC)
    service_ip = store.core.read_namespaced_service(RELAY, RELAY_NS).spec.cluster_ip
    driver = store.java_client(java / "relay")
    loop4 = driver.start("produce", "-t", RELAY_TOPIC, "-c", RELAY_SENDS, "--mode", "sync",
                         "--pause", RELAY_PAUSE_MS, "--timeout", 1200, check=False)
    java5 = java5_driver.require_java5_driver()
    loop5, out5 = java5_driver.start(java5, f"{service_ip}:{GRPC_PORT}", java / "relay5", "send-loop", RELAY_TOPIC,
                                     RELAY_SENDS, "j5", RELAY_PAUSE_MS)

    def acked(since_ms: float = 0) -> dict[str, list[dict[str, Any]]]:
        """Each client's acknowledged sends since ``since_ms`` (wall clock, as the clients print it)."""
        return {"4.x": [line for line in loop4.lines_so_far() if line.get("kind") == "sent"
                        and line["status"] == "SEND_OK" and line["at_ms"] >= since_ms],
                "5.x": [line for line in java5_driver.lines_in(out5) if line["kind"] == "sent"
                        and line["at_ms"] >= since_ms]}

    def lose_master(how: str, kill: Callable[[Any], None]) -> None:
        """Lose the master by ``kill`` (its pod); a member must take the Lease in a newer epoch and
        both clients resume on the group; then wait for the other member in the SyncStateSet.

        Which member: usually the other one, but a killed broker whose container restarts within
        D finds the Lease still naming it and takes it back at once (``decide``: its own Lease
        from before a restart), which is as good (it has every acknowledged message)."""
        info = store.lease()
        assert info is not None and info.master_replica_id is not None
        old = info.master_replica_id
        pod = store.pods()[RELAY_MEMBERS[old]]
        killed_at = time.time()
        kill(pod)
        try:
            taken = wait_until(f"a master of a newer epoch after the {how}", lambda: (i := store.lease()) is not None
                               and i.master_replica_id is not None and i.master_epoch > info.master_epoch and i,
                               TAKEOVER_LIMIT_S, interval=0.2)
            taken_at = time.time()
            new = taken.master_replica_id

            def resumed_on_new_master() -> dict[str, list[dict[str, Any]]] | None:
                # acknowledged after the new Lease was seen, so by its master: the old one was dead
                # (the Lease waits D after its last renewal) and a SIGKILL may land a moment after the call
                after = acked(taken_at * 1000)
                return after if all(after.values()) else None

            resumed = wait_until(f"both clients acknowledged after the {how}", resumed_on_new_master,
                                 RESUME_LIMIT_S, interval=0.5)
        except AssertionError as exc:
            raise store.diagnose(exc) from exc
        took = taken_at - killed_at
        first = {client_: min(line["at_ms"] for line in lines) / 1000 - killed_at for client_, lines in resumed.items()}
        print(f"\n{how} of {RELAY_MEMBERS[old]}: the Lease named {RELAY_MEMBERS[new]} in epoch {taken.master_epoch} "
              f"after {took:.1f} s; "
              f"first acknowledged send after {first['4.x']:.1f} s (Java 4.x), {first['5.x']:.1f} s (Java 5.x)")
        # the same brokerName, at the new master's address
        assert {line["brokerName"] for lines in resumed.values() for line in lines} == {RELAY_GROUP}, resumed
        assert store.lease().master_address == store.member_addr(new)  # type: ignore[union-attr]
        try:
            wait_until(f"status.masters naming replica {new}", lambda: store.shown_master() == new, 60, interval=1)
            # both members in the SyncStateSet again (the lost one a new pod, or its container restarted)
            wait_until(f"{RELAY_MEMBERS[old]} back in the SyncStateSet", lambda: store.in_sync_master() == new, 300,
                       interval=1)
        except AssertionError as exc:
            raise store.diagnose(exc) from exc

    try:
        wait_until("both clients acknowledged", lambda: all(len(lines) >= 20 for lines in acked().values()), 120,
                   interval=1)
        lose_master("pod force-deleted", lambda pod: store.core.delete_namespaced_pod(
            pod.metadata.name, RELAY_NS, grace_period_seconds=0))
        if installed.kill_container is None:
            print("\nkill -9 of the broker process not run: the nodes' container runtimes are out of reach")
        else:
            kill_container = installed.kill_container
            lose_master("broker process SIGKILLed", lambda pod: kill_container(next(
                c.container_id for c in pod.status.container_statuses if c.name == "broker")))
        # some sends after the last takeover, then the loops are stopped
        settled = time.time() * 1000
        wait_until("sends after the last takeover", lambda: all(
            len(lines) >= 20 for lines in acked(settled).values()), 120, interval=1)
    finally:
        loop4.kill()
        loop5.kill()
        loop5.wait()
    stopped4 = loop4.wait(30)
    acked_bodies = {line["body"] for lines in acked().values() for line in lines}
    sent4 = {line["body"] for line in stopped4.of("sent") if line["status"] == "SEND_OK"}
    sent5 = {line["body"] for line in java5_driver.lines_in(out5) if line["kind"] == "sent"}
    assert acked_bodies == sent4 | sent5
    # a send that failed (or was in flight when a loop was stopped) may have been stored: such bodies
    # may be read too, and nothing else
    tried = ({f"body-{i}" for i in range(RELAY_SENDS)} | {f"j5-{i}" for i in range(RELAY_SENDS)})
    got = driver.push_consume(RELAY_TOPIC, "RelayReaders", len(acked_bodies), timeout_s=180, linger_ms=LINGER_MS)
    received = {line["body"] for line in got.of("received")}
    assert acked_bodies <= received, (len(acked_bodies - received), sorted(acked_bodies - received)[:20])
    assert received <= tried, sorted(received - tried)[:20]
    print(f"\n{len(sent4)} (Java 4.x) + {len(sent5)} (Java 5.x) acknowledged sends, all consumed")


def write_pauses(acked: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per brokerName, the gaps between consecutive acknowledged sends, longest first, each with
    when it began (seconds, wall clock as the client printed it)."""
    times: dict[str, list[float]] = {}
    for line in acked:
        times.setdefault(line["brokerName"], []).append(line["at_ms"] / 1000)
    return {group: sorted(((b - a, a) for a, b in zip(sorted(at), sorted(at)[1:], strict=False)), reverse=True)
            for group, at in times.items()}


def test_a_rolling_upgrade_of_the_lease_store_pauses_its_group_only_for_a_hand_over(
        relay_store: RelayStore, java: Path) -> None:
    """A rolling upgrade as a user starts one: a new pod annotation in the RocketStore's
    ``spec.podTemplate``, so every broker pod's template changes. The operator rolls the Lease
    group OnDelete, the member the Lease does not name first, the Lease's master last, and the
    master's SIGTERM hands the Lease to the in-sync member (docs/failover.md, "Planned hand-over").
    Meanwhile a Java 4.x producer sends one message after another (synchronously, SYNC_MASTER
    acknowledgements: ``allAckInSyncStateSet``), each ROLL_PAUSE_MS apart, and records when each
    was acknowledged.

    Every pod must be replaced, the brokerName must stay, and every acknowledged message must be
    consumed afterwards. The longest gap between two acknowledged sends of the group must stay
    within ROLL_GAP_LIMIT_S (3 s). What a Java 4.x client sees is the hand-over (0.13 to 0.2 s
    with broker processes: the Lease released to the in-sync member, its promotion and
    registration) and then its own route poll (every second here): meanwhile the stopping master,
    unregistered and with its name server and gRPC port closed, answers its sends
    SERVICE_NOT_AVAILABLE, which the client retries at once and then reports as failed, for the
    operator's ``shutdownWaitTimeSeconds`` (30 s), so no send waits for a timeout on a deleted
    pod's address. Measured on the node on 2026-11-28: 0.76 s (29 sends failed, within 2 to
    34 ms each). Without that wait the gap was 3.63 s (a connect timeout to the deleted pod), and
    before the stopping broker answered at all 5.1 and 6.2 s (send timeouts): 3 s fails both, and
    a rollout that stalls a group's writes while a member restarts (a slave dropped from the
    SyncStateSet only after ``haMaxTimeSlaveNotCatchup``, 15 s, or a master restarted before its
    successor is in sync), and leaves a busy two-core node twice the route poll and hand-over."""
    store = relay_store
    master = store.settled(60)
    store.create_topic(ROLL_TOPIC)
    driver = store.java_client(java / "roll")
    loop = driver.start("produce", "-t", ROLL_TOPIC, "-c", ROLL_SENDS, "--mode", "sync", "--pause", ROLL_PAUSE_MS,
                        "--timeout", 1200, check=False)

    def acked() -> list[dict[str, Any]]:
        return [line for line in loop.lines_so_far() if line.get("kind") == "sent" and line["status"] == "SEND_OK"]

    before = {name: p.metadata.uid for name, p in store.pods().items()}
    try:
        wait_until("the producer acknowledged", lambda: len(acked()) >= 20, 120, interval=1)
        patched_at = time.time()
        store.objects.patch_namespaced_custom_object(G, V, RELAY_NS, P, RELAY, {"spec": {"podTemplate": {
            "metadata": {"annotations": {"example.com/release": "2"}}}}})
        try:
            wait_until("both members replaced and Ready", lambda: all(
                (p := store.pods().get(name)) is not None and p.metadata.uid != uid and ready(p)
                for name, uid in before.items()), 300, interval=1)
            store.settled(120)
        except AssertionError as exc:
            raise store.diagnose(exc) from exc
        rolled_at = time.time()
        wait_until("sends after the rollout", lambda: sum(line["at_ms"] >= rolled_at * 1000 for line in acked()) >= 20,
                   60, interval=1)
    finally:
        loop.kill()
    stopped = loop.wait(30)
    sent = [line for line in stopped.of("sent") if line["status"] == "SEND_OK"]
    restarted = store.pods()
    first, last = RELAY_MEMBERS[3 - master], RELAY_MEMBERS[master]
    assert restarted[first].metadata.creation_timestamp <= restarted[last].metadata.creation_timestamp, \
        "the Lease's master restarted before the other member"
    assert {line["brokerName"] for line in sent} == {RELAY_GROUP}, {line["brokerName"] for line in sent}
    pauses = write_pauses(sent)
    created = {name: p.metadata.creation_timestamp.timestamp() - patched_at for name, p in restarted.items()}
    print(f"\nrolling upgrade: {first} recreated {created[first]:.0f} s and {last} {created[last]:.0f} s after the "
          f"patch, the rollout done after {rolled_at - patched_at:.0f} s; {len(sent)} sends acknowledged, "
          f"{len(stopped.errors)} failed; longest gaps between acknowledged sends: " + "; ".join(
              f"{group} " + ", ".join(f"{gap:.2f} s from {at - patched_at:.1f} s" for gap, at in gaps[:3])
              for group, gaps in pauses.items())
          + f"; the failed sends: {sorted({e.get('exception', e['error'])[:160] for e in stopped.errors})}")
    for group, gaps in pauses.items():
        gap, at = gaps[0]
        assert gap <= ROLL_GAP_LIMIT_S, f"{group} unwritable for {gap:.2f} s from {at - patched_at:.1f} s"
    acked_bodies = {line["body"] for line in sent}
    got = driver.push_consume(ROLL_TOPIC, "RollReaders", len(acked_bodies), timeout_s=180, linger_ms=LINGER_MS)
    received = {line["body"] for line in got.of("received")}
    assert acked_bodies <= received, (len(acked_bodies - received), sorted(acked_bodies - received)[:20])
    # a send refused or cut at the hand-over may have been stored: such bodies may be read too
    assert received <= {f"body-{i}" for i in range(ROLL_SENDS)}, sorted(received)[:20]


def test_deleting_the_rocketstore_keeps_its_volumes(store: dict[str, Any], kube: Any) -> None:
    core = client.CoreV1Api(kube)
    claims = {c.metadata.name for c in core.list_namespaced_persistent_volume_claim(NS).items}
    assert len(claims) == 3
    client.CustomObjectsApi(kube).delete_namespaced_custom_object(G, V, NS, P, NAME)
    wait_until("broker pods gone", lambda: not pods(kube), 180, interval=1)
    kept = core.list_namespaced_persistent_volume_claim(NS).items
    assert {c.metadata.name for c in kept} == claims
    assert all(c.status.phase == "Bound" for c in kept), [(c.metadata.name, c.status.phase) for c in kept]
