"""spec.auth against a REAL broker process running RocketMQ 5.3 authentication and authorization.

The broker's auth keys are the operator's own: ``authenticationEnabled`` / ``authorizationEnabled``
from the broker.conf of the ConfigMap it generated (read from the API server), the inner client's
credentials from the lines its start command appends at pod start, run with the Secret's values
(the Secret volume's directory replaced by a temporary one). The conftest points the operator at
this broker for ``authz-0``; the operator signs as the inner client, creates the declared user and
ACL, follows an edit of the ACL without restarting anything and, with ``prune``, deletes the user
once the spec drops it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import Broker
from kubernetes import client
from operator_support import AUTH_NAMESPACE, AUTH_STORE, STORAGE_CLASS, wait_until

from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    Producer,
    RemotingClient,
    RemotingError,
    SessionCredentials,
)
from rocketstore.operator.desired import AUTH_DIR, auth_start_lines
from rocketstore.operator.model import parse_spec
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
INNER_AK, INNER_SK = "rocketstoreOperator", "inner-client-secret"
ALICE_SK = "alice-secret"
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}


def _acl(topic: str) -> list[dict[str, Any]]:
    return [{"subject": "User:alice", "policies": [{"resources": [{"type": "Topic", "name": topic}],
                                                    "actions": ["Pub"]}]}]


AUTH: dict[str, Any] = {
    "innerClient": {"secretName": "authz-inner"},
    "users": [{"name": "alice", "passwordSecretKeyRef": {"name": "authz-users", "key": "alice"}}],
    "acls": _acl("AliceTopic"),
}


def get(kube: Any) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        G, V, AUTH_NAMESPACE, P, AUTH_STORE)
    return obj


@pytest.fixture(scope="module")
def store(kube: Any, operator_process: Any) -> dict[str, str]:
    """The namespace, the Secrets and the RocketStore; returns the operator's broker.conf."""
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": AUTH_NAMESPACE}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", AUTH_NAMESPACE), 60)
    core.create_namespaced_secret(AUTH_NAMESPACE, {"metadata": {"name": "authz-inner"},
                                                   "stringData": {"accessKey": INNER_AK, "secretKey": INNER_SK}})
    core.create_namespaced_secret(AUTH_NAMESPACE, {"metadata": {"name": "authz-users"},
                                                   "stringData": {"alice": ALICE_SK + "\n"}})
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, AUTH_NAMESPACE, P, {
        "apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": AUTH_STORE},
        "spec": {"brokers": 1, "scheduling": KWOK, "commitLog": {"segmentSize": "64Mi"},
                 "storage": {"segments": 2, "storageClassName": STORAGE_CLASS}, "auth": AUTH}})
    cm = wait_until("the broker ConfigMap", lambda: core.read_namespaced_config_map(
        f"{AUTH_STORE}-config", AUTH_NAMESPACE), 60)
    text = cm.data["broker.conf"]
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


@pytest.fixture(scope="module")
def auth_broker(store: dict[str, str], auth_broker_port: int, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Broker]:
    work = tmp_path_factory.mktemp("auth-broker")
    inner = work / "secrets" / "inner"
    inner.mkdir(parents=True)
    (inner / "accessKey").write_text(INNER_AK)
    (inner / "secretKey").write_text(INNER_SK)
    switches = "".join(f"{k}={store[k]}\n" for k in ("authenticationEnabled", "authorizationEnabled"))
    # the start command's auth lines, as the pod runs them, on the Secret's values
    auth = parse_spec({"auth": AUTH}).auth
    assert auth is not None
    run = work / "run"
    run.mkdir()
    lines = auth_start_lines(auth).replace(AUTH_DIR, str(work / "secrets"))
    subprocess.run(["sh", "-c", lines], check=True, env={"RUN_DIR": str(run), "PATH": "/usr/bin:/bin"})
    broker = Broker(work, f"brokerClusterName=authz\nbrokerName={AUTH_STORE}-0\n{switches}"
                    + (run / "broker.conf").read_text(), listen_port=auth_broker_port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def admin(broker: Broker, credentials: SessionCredentials | None = None) -> BrokerAdmin:
    return BrokerAdmin(broker.addr, timeout=5, rpc_hook=None if credentials is None else AclClientRPCHook(credentials))


def inner_admin(broker: Broker) -> BrokerAdmin:
    return admin(broker, SessionCredentials(INNER_AK, INNER_SK))


def alice_can_send(broker: Broker, topic: str) -> bool:
    """A send signed as alice: True when stored, False when the broker refuses it NO_PERMISSION."""
    remoting = RemotingClient(rpc_hook=AclClientRPCHook(SessionCredentials("alice", ALICE_SK)))
    with remoting, Producer(broker.namesrv, "alice-producer", client=remoting) as producer:
        try:
            producer.send(topic, b"hello")
            return True
        except RemotingError as e:
            if e.code != ResponseCode.NO_PERMISSION:
                raise
            return False


def users(broker: Broker) -> list[str]:
    with inner_admin(broker) as a:
        return sorted(str(u["username"]) for u in a.list_users())


def test_declared_user_and_acl_are_converged_live(kube: Any, auth_broker: Broker) -> None:
    assert auth_broker.conf.read_text().count("innerClientAuthenticationCredentials") == 1
    # unsigned: refused at authentication
    with admin(auth_broker) as a, pytest.raises(RemotingError) as refused:
        a.get_runtime_info()
    assert (refused.value.code, refused.value.remark) == (ResponseCode.NO_PERMISSION, "username cannot be null.")
    with inner_admin(auth_broker) as a:
        for topic in ("AliceTopic", "OtherTopic"):
            a.create_topic(topic, 2, 2)

    wait_until("alice created by the operator", lambda: "alice" in users(auth_broker), 60)
    wait_until("alice may send on AliceTopic", lambda: alice_can_send(auth_broker, "AliceTopic"), 30)
    assert not alice_can_send(auth_broker, "OtherTopic")

    # the ACL edited in the spec: in force on the same broker process, no restart
    process = auth_broker.process
    custom = client.CustomObjectsApi(kube)
    custom.patch_namespaced_custom_object(G, V, AUTH_NAMESPACE, P, AUTH_STORE, {"spec": {"auth": {
        "acls": _acl("OtherTopic")}}})
    wait_until("alice may send on OtherTopic", lambda: alice_can_send(auth_broker, "OtherTopic"), 60)
    assert not alice_can_send(auth_broker, "AliceTopic")
    assert auth_broker.process is process

    # dropped from the spec: kept without prune, deleted with it (the inner client stays)
    custom.patch_namespaced_custom_object(G, V, AUTH_NAMESPACE, P, AUTH_STORE, {"spec": {"auth": {
        "users": None, "acls": None}}})
    obj = wait_until("the edit observed", lambda: (o := get(kube)) and o.get("status", {}).get(
        "observedGeneration") == o["metadata"]["generation"] and o, 60)
    assert "alice" in users(auth_broker), obj.get("status")
    custom.patch_namespaced_custom_object(G, V, AUTH_NAMESPACE, P, AUTH_STORE, {"spec": {"auth": {"prune": True}}})
    wait_until("alice pruned", lambda: users(auth_broker) == [INNER_AK], 60)
    assert not alice_can_send(auth_broker, "OtherTopic")
