"""The operator's own admin connection to a REAL broker process that enforces ACL and TLS.

The broker runs ``aclEnable`` with a plain_acl.yml and ``tls.server.mode=enforcing`` with
certificates made by openssl (tests/support/tls_certs.py); the ACL file, the TLS material and the
operator's credentials are Secrets in the real API server, referenced by the RocketStore. Without
``spec.acl.operatorCredentials`` the broker refuses the operator (the TLS handshake, verified
against the Secret's ``ca.crt``, succeeds: the refusal is the ACL's) and the status says so in the
Degraded condition; with them, the operator's observation, its live retention push and a manual
delete reach the broker. The conftest points the operator at this broker for ``guarded-0``.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from commit_log_files import settled_segments
from kubernetes import client
from operator_support import SECURED_NAMESPACE, SECURED_STORE, STORAGE_CLASS, wait_until
from tls_certs import Certs, make_certs, sign

from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    RemotingConnectError,
    SessionCredentials,
    client_ssl_context,
)

pytestmark = pytest.mark.integration

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
OPERATOR_AK, OPERATOR_SK = "rocketstoreOperator", "operator-admin-secret"
APP_AK, APP_SK = "someApplication", "application-secret"
ACL = f"""accounts:
- accessKey: {OPERATOR_AK}
  secretKey: {OPERATOR_SK}
  admin: true
- accessKey: {APP_AK}
  secretKey: {APP_SK}
  defaultTopicPerm: PUB
"""
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}


def _hour_far_away() -> str:
    """A ``deleteWhen`` hour 12 h from now: only the manual delete removes files in this test."""
    return f"{(datetime.datetime.now().hour + 12) % 24:02d}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """The test CA, and as the broker's certificate one good for clients too (the operator presents
    the TLS Secret's certificate when the brokers require client certificates)."""
    directory = tmp_path_factory.mktemp("certs")
    made = make_certs(directory)
    cert, key = sign(directory, "dual", "/CN=127.0.0.1",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n", "ca")
    return dataclasses.replace(made, server_cert=cert, server_key=key, client_cert=cert, client_key=key)


@pytest.fixture(scope="module")
def secured_broker(secured_broker_port: int, certs: Certs, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Broker]:
    work = tmp_path_factory.mktemp("secured-broker")
    (work / "plain_acl.yml").write_text(ACL)
    broker = Broker(work, "\n".join([
        "brokerClusterName=guarded", f"brokerName={SECURED_STORE}-0", "mappedFileSizeCommitLog=65536",
        "cleanResourceInterval=1000", "fileReservedTime=72", f"deleteWhen={_hour_far_away()}",
        "aclEnable=true", f"rocketmq.acl.plain.file={work / 'plain_acl.yml'}",
        "tls.server.mode=enforcing", f"tls.server.certPath={certs.server_cert}",
        f"tls.server.keyPath={certs.server_key}", "tls.config.file=/nonexistent/tls.properties", ""]),
        listen_port=secured_broker_port)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def as_admin(broker: Broker, certs: Certs, *, client_cert: bool = True) -> BrokerAdmin:
    """What the test itself reads the broker with: TLS verified (presenting a client certificate,
    for when the broker requires one), signed with the admin account."""
    context = client_ssl_context(trust_cert=certs.ca, cert=certs.client_cert if client_cert else None,
                                 key=certs.client_key if client_cert else None)
    return BrokerAdmin(broker.addr, timeout=5, ssl_context=context,
                       rpc_hook=AclClientRPCHook(SessionCredentials(OPERATOR_AK, OPERATOR_SK)))


def broker_conf(broker: Broker, certs: Certs) -> dict[str, str]:
    with as_admin(broker, certs) as a:
        conf: dict[str, str] = a.get_broker_config()
        return conf


def get(kube: Any) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        G, V, SECURED_NAMESPACE, P, SECURED_STORE)
    return obj


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def segments(broker: Broker) -> list[Path]:
    return sorted((broker.store / "commitlog").iterdir())


def fill_and_age(broker: Broker, certs: Certs) -> list[Path]:
    """Several 64 KiB CommitLog segments, sent over TLS with the application's account, all but the
    newest made 3 h old."""
    import os

    from rocketstore.client import Producer, RemotingClient

    remoting = RemotingClient(ssl_context=client_ssl_context(trust_cert=certs.ca),
                              rpc_hook=AclClientRPCHook(SessionCredentials(APP_AK, APP_SK)))
    with remoting, Producer(broker.namesrv, "secured-test", client=remoting) as producer:
        for i in range(40):
            producer.send("GuardedTopic", os.urandom(8 * 1024), keys=f"k{i}")
    files = settled_segments(broker.store / "commitlog", 4)
    old = time.time() - 3 * 3600
    for f in files[:-1]:
        os.utime(f, (old, old))
    return files


def test_operator_reaches_a_broker_with_acl_and_enforcing_tls(
        kube: Any, operator_process: Any, secured_broker: Broker, certs: Certs) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": SECURED_NAMESPACE}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", SECURED_NAMESPACE), 60)
    core.create_namespaced_secret(SECURED_NAMESPACE, {"metadata": {"name": "guarded-acl"},
                                                      "stringData": {"plain_acl.yml": ACL}})
    core.create_namespaced_secret(SECURED_NAMESPACE, {"metadata": {"name": "guarded-tls"}, "type": "kubernetes.io/tls",
                                                      "stringData": {"tls.crt": certs.server_cert.read_text(),
                                                                     "tls.key": certs.server_key.read_text(),
                                                                     "ca.crt": certs.ca.read_text()}})
    core.create_namespaced_secret(SECURED_NAMESPACE, {"metadata": {"name": "guarded-operator"},
                                                      "stringData": {"accessKey": OPERATOR_AK,
                                                                     "secretKey": OPERATOR_SK + "\n"}})
    files = fill_and_age(secured_broker, certs)
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(G, V, SECURED_NAMESPACE, P, {
        "apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": SECURED_STORE},
        "spec": {"brokers": 1, "scheduling": KWOK, "commitLog": {"segmentSize": "64Mi"},
                 "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
                 "retention": {"fileReservedTime": 1, "deleteWhen": _hour_far_away()},
                 "maintenance": {"deleteExpiredRequest": "before-credentials"},
                 "acl": {"secretName": "guarded-acl"},
                 "tls": {"secretName": "guarded-tls", "mode": "enforcing"}}})

    # 1. no operator credentials: TLS gets through (verified against ca.crt), the ACL refuses
    obj = wait_until("the denial in the Degraded condition", lambda: (o := get(kube)) and condition(
        o, "Degraded").get("reason") == "BrokerAccessDenied" and o, 60)
    message = condition(obj, "Degraded")["message"]
    assert "No accessKey is configured" in message and "spec.acl.operatorCredentials" in message, message
    assert obj["status"]["brokers"][0]["reachable"] is False
    assert broker_conf(secured_broker, certs)["fileReservedTime"] == "72"  # nothing pushed
    assert segments(secured_broker) == files  # nothing deleted

    # 2. the operator's credentials from their Secret (the trailing newline is stripped)
    custom.patch_namespaced_custom_object(G, V, SECURED_NAMESPACE, P, SECURED_STORE, {"spec": {
        "acl": {"operatorCredentials": {"secretName": "guarded-operator"}},
        "maintenance": {"deleteExpiredRequest": "with-credentials"}}})
    wait_until("retention pushed over TLS, signed", lambda: broker_conf(secured_broker, certs).get(
        "fileReservedTime") == "1", 60)
    obj = wait_until("the broker observed", lambda: (o := get(kube)) and o["status"]["brokers"][0].get(
        "reachable") and condition(o, "Degraded").get("status") == "False" and o, 60)
    observed = obj["status"]["brokers"][0]
    assert 0 <= observed["diskUsageRatio"] <= 1 and observed["commitLogMaxOffset"] > 0
    assert observed["appliedRetention"]["fileReservedTime"] == "1"
    # the store's first cleanup pass comes 60 s after its start (as in RocketMQ)
    after = wait_until("expired segments deleted", lambda: (s := segments(secured_broker)) and len(s) < len(files)
                       and s, 90)
    assert after[-1] == files[-1]
    last = get(kube)["status"]["brokers"][0]["lastManualDelete"]
    assert (last["token"], last["result"]) == ("with-credentials", "Requested")


def test_missing_operator_credentials_secret_is_a_condition(
        kube: Any, operator_process: Any, secured_broker: Broker, certs: Certs) -> None:
    custom = client.CustomObjectsApi(kube)
    custom.patch_namespaced_custom_object(G, V, SECURED_NAMESPACE, P, SECURED_STORE, {"spec": {
        "acl": {"operatorCredentials": {"secretName": "no-such-secret"}}}})
    obj = wait_until("the missing Secret named", lambda: (o := get(kube)) and condition(
        o, "Degraded").get("reason") == "SecretNotFound" and o, 60)
    message = condition(obj, "Degraded")["message"]
    assert "spec.acl.operatorCredentials.secretName" in message and "no-such-secret" in message, message
    assert operator_process["proc"].poll() is None
    custom.patch_namespaced_custom_object(G, V, SECURED_NAMESPACE, P, SECURED_STORE, {"spec": {
        "acl": {"operatorCredentials": {"secretName": "guarded-operator", "secretKeyKey": "password"}}}})
    obj = wait_until("the missing key named", lambda: (o := get(kube)) and condition(
        o, "Degraded").get("reason") == "SecretKeyMissing" and o, 60)
    assert "Secret guarded-operator has no key password" in condition(obj, "Degraded")["message"]


def test_operator_presents_the_secrets_certificate_when_brokers_require_one(
        kube: Any, operator_process: Any, secured_broker: Broker, certs: Certs) -> None:
    """clientAuth require: the broker (restarted with tls.server.need.client.auth=require) refuses a
    TLS client without a certificate; the operator, presenting the TLS Secret's certificate, still
    observes it and corrects the retention the restart reset."""
    custom = client.CustomObjectsApi(kube)
    custom.patch_namespaced_custom_object(G, V, SECURED_NAMESPACE, P, SECURED_STORE, {"spec": {
        "acl": {"operatorCredentials": {"secretName": "guarded-operator", "secretKeyKey": "secretKey"}},
        "tls": {"clientAuth": "require", "trustCertKey": "ca.crt"}}})
    secured_broker.stop()
    with secured_broker.conf.open("a") as conf:
        conf.write(f"tls.server.need.client.auth=require\ntls.server.trustCertPath={certs.ca}\n")
    secured_broker.start()
    with as_admin(secured_broker, certs, client_cert=False) as anonymous, pytest.raises(RemotingConnectError):
        anonymous.get_broker_config()
    # the restart put broker.conf's fileReservedTime=72 back (live updates are not written to the file)
    wait_until("retention pushed again, with the operator's client certificate",
               lambda: broker_conf(secured_broker, certs).get("fileReservedTime") == "1", 60)
    obj = wait_until("observed and not degraded", lambda: (o := get(kube)) and o["status"]["brokers"][0].get(
        "reachable") and condition(o, "Degraded").get("status") == "False" and o, 60)
    assert obj["status"]["brokers"][0]["diskUsageRatio"] >= 0
