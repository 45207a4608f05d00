"""Plain ACL: the same Java 4.9.8 client scenarios against Apache RocketMQ's broker and ours.

Both brokers run with ``aclEnable=true`` and the same ``ROCKETMQ_HOME/conf/plain_acl.yml``; the
driver's acl-produce / acl-pull modes sign with Apache's ``AclClientRPCHook``. Each scenario must
end alike on both: sent or pulled, or refused with the same response code and the same remark up
to where RocketMQ appends its Java stack frame (``..., org.apache.rocketmq.acl.plain.
PlainPermissionManager.checkPerm(PlainPermissionManager.java:NNN)``). This is what shows that
RocketMQ 4.9 answers a refusal with code 1 (SYSTEM_ERROR) and an AclException remark, which
tests/compat/java4/test_java_acl.py then expects of our broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from acl4_accounts import AK, PLAIN_ACL, SK, WHITE_AK
from broker_process import plain_acl_broker
from java_rocketmq import AnchorError, ClientDriver, plain_acl_anchor

pytestmark = pytest.mark.integration

#: (name, mode, arguments): what each scenario runs
SCENARIOS: list[tuple[str, str, list[str | int]]] = [
    ("allowed send", "acl-produce", ["-t", "AclTopicA", "-c", 2, "--ak", AK, "--sk", SK]),
    ("allowed pull", "acl-pull", ["-t", "AclTopicA", "-g", "AclGroup", "--ak", AK, "--sk", SK]),
    ("topic without PUB", "acl-produce", ["-t", "AclTopicB", "-c", 1, "--ak", AK, "--sk", SK]),
    ("topic by default DENY", "acl-produce", ["-t", "AclUnlisted", "-c", 1, "--ak", AK, "--sk", SK]),
    ("group DENY", "acl-pull", ["-t", "AclTopicA", "-g", "AclDeniedGroup", "--ak", AK, "--sk", SK]),
    ("wrong secret", "acl-produce", ["-t", "AclTopicA", "-c", 1, "--ak", AK, "--sk", "not-the-secret"]),
    ("unknown key", "acl-produce", ["-t", "AclTopicA", "-c", 1, "--ak", "NoSuchKey", "--sk", SK]),
    ("no key", "acl-produce", ["-t", "AclTopicA", "-c", 1]),
    ("white address account", "acl-produce", ["-t", "AclWhite", "-c", 1, "--ak", WHITE_AK, "--sk", "wrong"]),
]


def outcome(result_lines: list[dict[str, Any]]) -> tuple[Any, ...]:
    """What a scenario came to: messages sent/pulled, or the refusal's code and remark head."""
    refused = [line for line in result_lines if line["kind"] == "refused"]
    if refused:
        remark = str(refused[0]["remark"])
        return ("refused", refused[0]["code"], remark)
    errors = [line for line in result_lines if line["kind"] == "error"]
    if errors:
        return ("error", errors[0].get("exception"))
    sent = [line for line in result_lines if line["kind"] in ("sent", "pulled")]
    return ("ok", len(sent) > 0)


def run_all(namesrv: str, workdir: Path) -> dict[str, tuple[Any, ...]]:
    driver = ClientDriver(namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000)
    return {name: outcome(driver.run(mode, *args, check=False).lines) for name, mode, args in SCENARIOS}


@pytest.fixture(scope="module")
def anchor_outcomes(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("acl-anchor")
    anchor = plain_acl_anchor(workdir, PLAIN_ACL)
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield run_all(anchor.namesrv_addr, workdir / "client")
    finally:
        anchor.stop()


@pytest.fixture(scope="module")
def our_outcomes(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("acl-ours")
    broker = plain_acl_broker(workdir, PLAIN_ACL)
    broker.start()
    try:
        yield run_all(broker.namesrv, workdir / "client")
    finally:
        assert broker.stop() == 0


@pytest.mark.parametrize("scenario", [name for name, _, _ in SCENARIOS])
def test_scenario_ends_as_on_rocketmq(scenario: str, anchor_outcomes: dict[str, Any],
                                      our_outcomes: dict[str, Any]) -> None:
    theirs, ours = anchor_outcomes[scenario], our_outcomes[scenario]
    if theirs[0] == "refused":
        assert ours[0] == "refused" and ours[1] == theirs[1], (ours, theirs)
        # RocketMQ's remark is ours followed by ", " and the Java frame that threw
        assert theirs[2] == ours[2] or theirs[2].startswith(ours[2] + ", "), (ours, theirs)
    else:
        assert ours == theirs
