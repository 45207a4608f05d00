"""RocketMQ 5.3's authentication and authorization against our broker, driven by Apache's own tools:
rocketmq-tools 5.3.3's mqadmin manages users and ACLs (createUser, listUser, createAcl, listAcl,
deleteUser), and the RocketMQ 4.9.8 Java client signing with ``AclClientRPCHook`` is allowed on a
topic its ACL grants Pub on and refused (NO_PERMISSION, Apache 5.3.3's remark) on one it does not.

The broker is ``rocketstore broker -c broker.conf`` with Apache's keys (authenticationEnabled,
authorizationEnabled, the default provider classes, initAuthenticationUser) and grpcListenPort=0
(the gRPC port does not check auth yet, so the broker refuses to open it with auth on). mqadmin
signs with the first (Super) user, from its ``conf/tools.yml``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from java_rocketmq import BuildError, ClientDriver, ToolMissing, find_tools
from mqadmin5 import build_mqadmin5, run_mqadmin5, tools_home
from tool_support import require_tool

pytestmark = pytest.mark.integration

ROOT, ROOT_SECRET = "rocketmq2", "root-secret-1"
AUTH_CONF = f"""authenticationEnabled=true
authorizationEnabled=true
authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={{"username":"{ROOT}","password":"{ROOT_SECRET}"}}
grpcListenPort=0
"""


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory: pytest.TempPathFactory, java_client_built: None) -> Iterator[Broker]:
    try:
        find_tools()
    except ToolMissing as e:
        require_tool(e.tool, False, "the auth tests run Apache's rocketmq-tools 5.3.3 on Java 17, fetched with Maven")
    try:
        build_mqadmin5()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    broker = Broker(tmp_path_factory.mktemp("auth-broker"), AUTH_CONF)
    with broker.running():
        yield broker
    log = broker.log_text()
    assert "Traceback" not in log, log[-6000:]


def mqadmin(broker: Broker, home: Path, verb: str, *args: str) -> list[str]:
    result = run_mqadmin5(home, verb, "-b", broker.addr, *args)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Exception" not in output, f"mqadmin {verb} failed:\n{output}"
    return result.lines()


def test_mqadmin_manages_users_and_acls_and_the_java_client_obeys(auth_broker: Broker, tmp_path: Path) -> None:
    root = tools_home(tmp_path / "root-home", ROOT, ROOT_SECRET)
    assert mqadmin(auth_broker, root, "createUser", "-u", "alice", "-p", "alice-secret-1") == [
        f"create user to {auth_broker.addr} success."]
    users = {line.split()[0]: line.split() for line in mqadmin(auth_broker, root, "listUser")[1:]}
    assert users["alice"][1:] == ["alice-secret-1", "Normal", "enable"]
    assert users[ROOT][2] == "Super"
    mqadmin(auth_broker, root, "createAcl", "-s", "User:alice", "-r", "Topic:AuthOrders", "-a", "Pub",
            "-d", "Allow")
    acls = [line.split() for line in mqadmin(auth_broker, root, "listAcl")[1:]]
    # no -i: no source IPs, printed "null" as Apache's broker's answer prints
    assert acls == [["User:alice", "Custom", "Topic:AuthOrders", "[Pub]", "null", "Allow"]]

    driver = ClientDriver(auth_broker.namesrv, tmp_path, poll_namesrv_ms=1000, heartbeat_ms=1000)
    sent = driver.run("acl-produce", "-t", "AuthOrders", "-c", 2, "--ak", "alice", "--sk", "alice-secret-1")
    assert sent.summary["sent"] == 2
    denied = driver.run("acl-produce", "-t", "AuthPayments", "-c", 1, "--ak", "alice", "--sk", "alice-secret-1",
                        check=False)
    refused = denied.of("refused")
    assert refused and refused[0]["code"] == 16, denied.lines
    assert refused[0]["remark"] == ("User:alice has no permission to access Topic:AuthPayments from 127.0.0.1, "
                                    "no matched policies."), refused[0]
    wrong = driver.run("acl-produce", "-t", "AuthOrders", "-c", 1, "--ak", "alice", "--sk", "not-her-secret",
                       check=False)
    assert wrong.of("refused")[0]["remark"] == "check signature failed.", wrong.lines
    # a Normal user cannot administer users; deleting alice refuses her client
    alice = tools_home(tmp_path / "alice-home", "alice", "alice-secret-1")
    refused_admin = run_mqadmin5(alice, "listUser", "-b", auth_broker.addr)
    assert "no permission to access Cluster:" in refused_admin.stdout + refused_admin.stderr
    assert mqadmin(auth_broker, root, "deleteUser", "-u", "alice") == [f"delete user to {auth_broker.addr} success."]
    gone = driver.run("acl-produce", "-t", "AuthOrders", "-c", 1, "--ak", "alice", "--sk", "alice-secret-1",
                      check=False)
    assert gone.of("refused")[0]["remark"] == "User:alice is not found.", gone.lines
