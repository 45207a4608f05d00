"""RocketMQ 4.9's plain ACL with the real RocketMQ 4.9.8 Java client (``AclClientRPCHook``).

One broker with ``aclEnable=true`` reads ``ROCKETMQ_HOME/conf/plain_acl.yml``; the driver's
acl-produce / acl-pull modes (tests/support/drivers/java4/.../AclModes.java) sign every request with
Apache's hook. A refused request reaches the Java client as RocketMQ 4.9.8 answers it:
``MQBrokerException`` with code 1 (SYSTEM_ERROR) and the remark
``org.apache.rocketmq.acl.common.AclException: <reason>``. The broker runs without the e2e
recording proxy: the ACL sees the client's own address (127.0.0.1), which the white-address
tests rely on. Apache's ``mqadmin`` (rocketmq-tools 4.9.7) signs with the account of its
``conf/tools.yml``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from acl4_accounts import ADMIN_AK, ADMIN_SK, AK, PLAIN_ACL, SK, WHITE_AK
from broker_process import Broker, plain_acl_broker
from java_rocketmq import ClientDriver, DriverResult
from mqadmin import build_mqadmin, run_mqadmin
from polling import wait_until

from rocketstore.remoting.codes import RequestCode

pytestmark = pytest.mark.integration

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory, java_client_built: None) -> Iterator[Broker]:
    tmp = tmp_path_factory.mktemp("acl-broker")
    broker = plain_acl_broker(tmp, PLAIN_ACL)
    broker.start()
    yield broker
    code = broker.stop()
    log = broker.log_text()
    assert code == 0, f"broker exited {code}:\n{log[-6000:]}"
    assert "Traceback" not in log, log[-6000:]


@pytest.fixture
def driver(acl_broker: Broker, tmp_path: Path) -> ClientDriver:
    return ClientDriver(acl_broker.namesrv, tmp_path, poll_namesrv_ms=1000, heartbeat_ms=1000)


def acl_file(broker: Broker) -> Path:
    return broker.tmp / "conf" / "plain_acl.yml"


def refusal(result: DriverResult) -> str:
    refused = result.of("refused")
    assert refused, f"nothing was refused: {result.lines}"
    assert refused[0]["code"] == 1, refused[0]
    remark = str(refused[0]["remark"])
    assert remark.startswith(ACL_EXCEPTION), remark
    return remark[len(ACL_EXCEPTION):]


def test_allowed_account_produces_and_pulls(driver: ClientDriver, unique_name: Callable[[str], str]) -> None:
    sent = driver.run("acl-produce", "-t", "AclTopicA", "-c", 3, "--ak", AK, "--sk", SK)
    assert sent.summary["sent"] == 3
    pulled = driver.run("acl-pull", "-t", "AclTopicA", "-g", unique_name("AclGroup"), "--ak", AK, "--sk", SK)
    assert {"body-0", "body-1", "body-2"} <= {line["body"] for line in pulled.of("pulled")}


def test_binary_headers_are_signed_alike(acl_broker: Broker, tmp_path: Path) -> None:
    """With ``rocketmq.serialize.type=ROCKETMQ`` the same ext fields travel in the binary header."""
    driver = ClientDriver(acl_broker.namesrv, tmp_path, serialize_type="ROCKETMQ", poll_namesrv_ms=1000,
                          heartbeat_ms=1000)
    assert driver.run("acl-produce", "-t", "AclTopicA", "-c", 1, "--ak", AK, "--sk", SK).summary["sent"] == 1
    result = driver.run("acl-produce", "-t", "AclTopicA", "-c", 1, "--ak", AK, "--sk", "not-the-secret", check=False)
    assert refusal(result) == f"Check signature failed for accessKey={AK}"


def test_denied_topic_and_group(driver: ClientDriver) -> None:
    result = driver.run("acl-produce", "-t", "AclTopicB", "-c", 1, "--ak", AK, "--sk", SK, check=False)
    assert result.returncode != 0 and not result.of("sent")
    assert refusal(result) == "No default permission for topic:AclTopicB"
    # defaultTopicPerm DENY covers every topic not listed
    result = driver.run("acl-produce", "-t", "AclUnlisted", "-c", 1, "--ak", AK, "--sk", SK, check=False)
    assert refusal(result) == "No default permission for topic:AclUnlisted"
    result = driver.run("acl-pull", "-t", "AclTopicA", "-g", "AclDeniedGroup", "--ak", AK, "--sk", SK, check=False)
    assert refusal(result) == "No default permission for group:AclDeniedGroup"


def test_wrong_secret_and_unknown_or_missing_key(driver: ClientDriver) -> None:
    result = driver.run("acl-produce", "-t", "AclTopicA", "-c", 1, "--ak", AK, "--sk", "not-the-secret", check=False)
    assert refusal(result) == f"Check signature failed for accessKey={AK}"
    result = driver.run("acl-produce", "-t", "AclTopicA", "-c", 1, "--ak", "NoSuchKey", "--sk", SK, check=False)
    assert refusal(result) == "No acl config for NoSuchKey"
    result = driver.run("acl-produce", "-t", "AclTopicA", "-c", 1, check=False)  # no hook at all
    assert refusal(result) == "No accessKey is configured"


def test_white_remote_address_account_needs_no_signature(driver: ClientDriver) -> None:
    """127.0.0.* matches the client: RocketMQ lets the account through without checking its secret
    or its permissions (defaultTopicPerm DENY)."""
    result = driver.run("acl-produce", "-t", "AclWhiteTopic", "-c", 2, "--ak", WHITE_AK, "--sk", "wrong-secret")
    assert result.summary["sent"] == 2


def test_admin_account_owns_every_topic(driver: ClientDriver) -> None:
    result = driver.run("acl-produce", "-t", "AclAdminTopic", "-c", 1, "--ak", ADMIN_AK, "--sk", ADMIN_SK)
    assert result.summary["sent"] == 1


def wait_reloads(broker: Broker, at_least: int, timeout: float = 15.0) -> None:
    def reloads() -> float:
        found = re.search(r"^rocketstore_acl_reloads_total (\S+)$", broker.metrics(), re.MULTILINE)
        assert found is not None, "rocketstore_acl_reloads_total missing from /metrics"
        return float(found.group(1))

    wait_until(f"{at_least} ACL file reloads", lambda: reloads() >= at_least, timeout=timeout, interval=0.2)


def test_changed_file_is_reloaded_while_the_broker_runs(acl_broker: Broker, driver: ClientDriver) -> None:
    before = re.search(r"^rocketstore_acl_reloads_total (\S+)$", acl_broker.metrics(), re.MULTILINE)
    assert before is not None
    reloads = float(before.group(1))
    path = acl_file(acl_broker)
    original = path.read_text()
    try:
        # AclTopicB becomes PUB for the account, and the global white list now covers this host
        path.write_text(original.replace("AclTopicB=SUB", "AclTopicB=PUB").replace("10.10.103.*", "10.10.104.*"))
        wait_reloads(acl_broker, int(reloads) + 1)
        assert driver.run("acl-produce", "-t", "AclTopicB", "-c", 1, "--ak", AK, "--sk", SK).summary["sent"] == 1
        path.write_text(original.replace("10.10.103.*", "127.0.0.1"))
        wait_reloads(acl_broker, int(reloads) + 2)
        # a globally white-listed address needs no credentials at all
        assert driver.run("acl-produce", "-t", "AclUnlisted", "-c", 1).summary["sent"] == 1
        # a file that does not parse leaves the last good ACL in force
        path.write_text("accounts: [ {accessKey: short, secretKey: x} ]\n")
        wait_until("the broken ACL file tried",
                   lambda: "rocketstore_acl_reload_failures_total 1.0" in acl_broker.metrics(), timeout=15)
        assert driver.run("acl-produce", "-t", "AclUnlisted", "-c", 1).summary["sent"] == 1
    finally:
        path.write_text(original)
    wait_reloads(acl_broker, int(reloads) + 3)
    result = driver.run("acl-produce", "-t", "AclTopicB", "-c", 1, "--ak", AK, "--sk", SK, check=False)
    assert refusal(result) == "No default permission for topic:AclTopicB"


# -- Apache's mqadmin (rocketmq-tools 4.9.7) with credentials ------------------------------------------


def mqadmin(broker: Broker, home: Path, *args: str) -> str:
    """``mqadmin ARGS`` with ROCKETMQ_HOME=home, whose conf/tools.yml (if any) holds its credentials
    (MQAdminStartup signs with AclUtils.getAclRPCHook(home + "/conf/tools.yml")); stdout + stderr."""
    build_mqadmin()
    result = run_mqadmin(broker.namesrv, *args, tools_home=home)
    return result.stdout + result.stderr


def tools_home(tmp_path: Path, name: str, credentials: tuple[str, str] | None) -> Path:
    home = tmp_path / name
    (home / "conf").mkdir(parents=True)
    # MQAdminStartup configures logback from home/conf/logback_tools.xml and fails without it
    (home / "conf" / "logback_tools.xml").write_text("<configuration><root level=\"OFF\"/></configuration>\n")
    if credentials is not None:
        (home / "conf" / "tools.yml").write_text(f"accessKey: {credentials[0]}\nsecretKey: \"{credentials[1]}\"\n")
    return home


def test_mqadmin_with_credentials(acl_broker: Broker, tmp_path: Path) -> None:
    """updateTopic (UPDATE_AND_CREATE_TOPIC, an admin-only code) works with the admin account's
    tools.yml, and is refused, with RocketMQ's remark, for an ordinary account and without one."""
    admin = tools_home(tmp_path, "admin", (ADMIN_AK, ADMIN_SK))
    out = mqadmin(acl_broker, admin, "updateTopic", "-b", acl_broker.addr, "-t", "AclAdminCreated")
    assert "create topic to " in out and "success" in out, out
    out = mqadmin(acl_broker, admin, "topicRoute", "-t", "AclAdminCreated")
    assert '"brokerName":"broker-a"' in out.replace(" ", "").replace("\n", ""), out

    ordinary = tools_home(tmp_path, "ordinary", (AK, SK))
    out = mqadmin(acl_broker, ordinary, "updateTopic", "-b", acl_broker.addr, "-t", "AclNotCreated")
    code = int(RequestCode.UPDATE_AND_CREATE_TOPIC)
    assert f"{ACL_EXCEPTION}Need admin permission for request code={code}, but accessKey={AK} is not" in out, out

    nobody = tools_home(tmp_path, "nobody", None)
    out = mqadmin(acl_broker, nobody, "updateTopic", "-b", acl_broker.addr, "-t", "AclNotCreated")
    assert f"{ACL_EXCEPTION}No accessKey is configured" in out, out


def test_mqadmin_acl_verbs_edit_the_file(acl_broker: Broker, driver: ClientDriver, tmp_path: Path) -> None:
    """updateAclConfig, deleteAccessConfig, updateGlobalWhiteAddr and clusterAclConfigVersion (request
    codes 50-53) as Apache's mqadmin prints them; each edit is in the file and in force at once."""
    path = acl_file(acl_broker)
    original = path.read_text()
    admin = tools_home(tmp_path, "admin", (ADMIN_AK, ADMIN_SK))
    addr = acl_broker.addr
    try:
        out = mqadmin(acl_broker, admin, "clusterAclConfigVersion", "-b", addr)
        assert "get broker's plain access config version success." in out, out
        assert re.search(rf"TestCluster\s+broker-a\s+{re.escape(addr)}\s+{re.escape(str(path))}\s+0\s", out), out

        out = mqadmin(acl_broker, admin, "updateAclConfig", "-b", addr, "-a", "newAccount1", "-s", "newSecret1",
                      "-i", "DENY", "-t", "AclNewTopic=PUB")
        assert f"create or update plain access config to {addr} success." in out, out
        assert "newAccount1" in path.read_text() and "AclNewTopic=PUB" in path.read_text()
        sent = driver.run("acl-produce", "-t", "AclNewTopic", "-c", 1, "--ak", "newAccount1", "--sk", "newSecret1")
        assert sent.summary["sent"] == 1
        out = mqadmin(acl_broker, admin, "clusterAclConfigVersion", "-b", addr)
        assert re.search(rf"{re.escape(str(path))}\s+1\s", out), out

        out = mqadmin(acl_broker, admin, "updateAclConfig", "-b", addr, "-a", "newAccount1", "-s", "newSecret1",
                      "-t", "AclNewTopic=BOGUS")
        assert "The expected permissions are 'SUB' or 'PUB'" in out, out

        out = mqadmin(acl_broker, admin, "deleteAccessConfig", "-b", addr, "-a", "newAccount1")
        assert f"delete plain access config account from {addr} success." in out, out
        assert "newAccount1" not in path.read_text()
        refused = driver.run("acl-produce", "-t", "AclNewTopic", "-c", 1, "--ak", "newAccount1", "--sk", "newSecret1",
                             check=False)
        assert refusal(refused) == "No acl config for newAccount1"

        # -p is needed: RocketMQ 4.9.8's header requires aclFileFullPath (@CFNotNull), and so does ours
        out = mqadmin(acl_broker, admin, "updateGlobalWhiteAddr", "-b", addr, "-g", "10.9.9.*")
        assert "header field 'aclFileFullPath' is missing" in out, out
        out = mqadmin(acl_broker, admin, "updateGlobalWhiteAddr", "-b", addr, "-g", "127.0.0.1,10.9.9.*",
                      "-p", str(path))
        assert f"update global white remote addresses to {addr} success." in out, out
        assert driver.run("acl-produce", "-t", "AclUnlisted", "-c", 1).summary["sent"] == 1  # no credentials
    finally:
        path.write_text(original)
    deadline = time.monotonic() + 15
    while driver.run("acl-produce", "-t", "AclUnlisted", "-c", 1, check=False).of("sent"):
        assert time.monotonic() < deadline, "the restored file was not reloaded"
        time.sleep(0.5)
