"""The client's opt-in security against a REAL broker process with ``aclEnable`` and
``tls.server.mode=enforcing``: requests signed by :class:`AclClientRPCHook` are served, a wrong
secret or no credentials are refused with RocketMQ's remarks, plain TCP is refused by the enforcing
port, and TLS verifies the broker's certificate against the CA given (or, as RocketMQ's client
does by default, not at all). ``rocketstore admin`` does the same with its flags and environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import ROOT, Broker
from tls_certs import Certs, enforcing_tls_conf, make_certs

from rocketstore.client import (
    AclClientRPCHook,
    BrokerAdmin,
    RemotingConnectError,
    RemotingError,
    SessionCredentials,
    client_ssl_context,
)
from rocketstore.client.acl_hook import ACCESS_KEY_ENV, SECRET_KEY_ENV
from rocketstore.remoting.acl_signer import sign_request
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

ADMIN_AK, ADMIN_SK = "opsAdmin", "ops-admin-secret"
USER_AK, USER_SK = "opsUser", "ops-user-secret"
EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
ACL = f"""accounts:
- accessKey: {ADMIN_AK}
  secretKey: {ADMIN_SK}
  admin: true
- accessKey: {USER_AK}
  secretKey: {USER_SK}
  defaultTopicPerm: SUB
  defaultGroupPerm: SUB
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Broker]:
    work = tmp_path_factory.mktemp("secure-broker")
    (work / "plain_acl.yml").write_text(ACL)
    broker = Broker(work, f"aclEnable=true\nrocketmq.acl.plain.file={work / 'plain_acl.yml'}\n"
                    + enforcing_tls_conf(certs))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def admin(broker: Broker, certs: Certs, credentials: SessionCredentials | None, **tls: Any) -> BrokerAdmin:
    context = client_ssl_context(**(tls or {"trust_cert": certs.ca}))
    return BrokerAdmin(broker.addr, timeout=5, ssl_context=context,
                       rpc_hook=None if credentials is None else AclClientRPCHook(credentials))


def test_sign_request_is_the_java_hooks_signature() -> None:
    # the first vector of tests/broker/test_acl_decision.py, printed by RocketMQ 4.9.8's AclClientRPCHook
    fields = {"a": "b", "topic": "T"}
    sign_request(fields, b"hello", "RocketMQ", "12345678")
    assert fields == {"a": "b", "topic": "T", "AccessKey": "RocketMQ", "Signature": "CAHoIphdbvuxSfZX/mJnBZmeUps="}


def test_signed_requests_over_tls_are_served(secure_broker: Broker, certs: Certs) -> None:
    with admin(secure_broker, certs, SessionCredentials(ADMIN_AK, ADMIN_SK)) as a:
        assert a.get_broker_config()["aclEnable"] == "true"
        a.update_broker_config({"fileReservedTime": "49"})  # admin-only code
        assert a.get_broker_config()["fileReservedTime"] == "49"
        assert "commitLogDiskRatio" in a.get_runtime_info()
    # RocketMQ's client default: encrypt without verifying the certificate
    with admin(secure_broker, certs, SessionCredentials(ADMIN_AK, ADMIN_SK), trust_cert=None) as a:
        assert a.get_broker_config()["brokerName"] == "broker-a"


def test_wrong_secret_missing_credentials_and_non_admin_are_denied(secure_broker: Broker, certs: Certs) -> None:
    with admin(secure_broker, certs, SessionCredentials(ADMIN_AK, "not-the-secret")) as a, \
            pytest.raises(RemotingError) as wrong:
        a.get_broker_config()
    assert wrong.value.remark == EXCEPTION + f"Check signature failed for accessKey={ADMIN_AK}"
    with admin(secure_broker, certs, None) as a, pytest.raises(RemotingError) as unsigned:
        a.get_broker_config()
    assert (unsigned.value.code, unsigned.value.remark) == (ResponseCode.SYSTEM_ERROR,
                                                            EXCEPTION + "No accessKey is configured")
    with admin(secure_broker, certs, SessionCredentials(USER_AK, USER_SK)) as a, \
            pytest.raises(RemotingError) as not_admin:
        a.update_broker_config({"fileReservedTime": "50"})
    assert not_admin.value.remark.startswith(EXCEPTION + "Need admin permission for request code=25")
    assert not_admin.value.remark.endswith(f"accessKey={USER_AK} is not")


def test_enforcing_port_refuses_plain_and_unverifiable_tls(secure_broker: Broker, certs: Certs) -> None:
    with BrokerAdmin(secure_broker.addr, timeout=3, rpc_hook=AclClientRPCHook(
            SessionCredentials(ADMIN_AK, ADMIN_SK))) as plain, pytest.raises(RemotingConnectError):
        plain.get_broker_config()
    with admin(secure_broker, certs, SessionCredentials(ADMIN_AK, ADMIN_SK), trust_cert=certs.other_ca) as a, \
            pytest.raises(RemotingConnectError, match=r"TLS handshake failed.*certificate verify failed"):
        a.get_broker_config()


def test_tls_client_carries_many_concurrent_requests(secure_broker: Broker, certs: Certs) -> None:
    """One TLS connection written by many threads while its reader thread decrypts the answers."""
    from concurrent.futures import ThreadPoolExecutor

    with admin(secure_broker, certs, SessionCredentials(ADMIN_AK, ADMIN_SK)) as a, ThreadPoolExecutor(8) as pool:
        configs = list(pool.map(lambda _: a.get_broker_config()["brokerName"], range(200)))
    assert configs == ["broker-a"] * 200


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in (ACCESS_KEY_ENV, SECRET_KEY_ENV)}
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "admin", *args], cwd=ROOT,
                          env={**full_env, **(env or {})}, capture_output=True, text=True, timeout=60)


def test_admin_cli_flags_and_environment(secure_broker: Broker, certs: Certs, tmp_path: Path) -> None:
    flags = cli("getBrokerConfig", "-b", secure_broker.addr, "--json", "--tls-ca", str(certs.ca),
                "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK)
    assert flags.returncode == 0, flags.stderr
    assert '"aclEnable": "true"' in flags.stdout
    assert "--secret-key puts the secret on the command line" in flags.stderr  # ps shows it
    secret_file = tmp_path / "secret"
    secret_file.write_text(f"{ADMIN_SK}\n")
    from_file = cli("getBrokerConfig", "-b", secure_broker.addr, "--json", "--tls-ca", str(certs.ca),
                    "--access-key", ADMIN_AK, "--secret-key-file", str(secret_file))
    assert from_file.returncode == 0 and from_file.stderr == "", from_file.stderr
    assert '"aclEnable": "true"' in from_file.stdout
    missing = cli("getBrokerConfig", "-b", secure_broker.addr, "--access-key", ADMIN_AK,
                  "--secret-key-file", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "--secret-key-file" in missing.stderr and "No such file" in missing.stderr
    env = cli("--tls", "getBrokerConfig", "-b", secure_broker.addr, "--json",
              env={ACCESS_KEY_ENV: ADMIN_AK, SECRET_KEY_ENV: ADMIN_SK})
    assert env.returncode == 0, env.stderr
    denied = cli("getBrokerConfig", "-b", secure_broker.addr, "--tls", "--access-key", ADMIN_AK,
                 "--secret-key", "wrong")
    assert denied.returncode == 1 and "Check signature failed" in denied.stderr
    half = cli("getBrokerConfig", "-b", secure_broker.addr, "--access-key", ADMIN_AK)
    assert half.returncode == 2 and "secret key" in half.stderr
    plain = cli("getBrokerConfig", "-b", secure_broker.addr, "--access-key", ADMIN_AK, "--secret-key", ADMIN_SK,
                "--timeout", "3")
    assert plain.returncode == 2
