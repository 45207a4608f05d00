"""RocketMQ 5.3 authentication and authorization on the gRPC port: the same scenario
(tests/support/auth5_scenario.py, :func:`run_grpc_scenario`) against Apache RocketMQ 5.3.3 (its proxy
in local mode, which serves gRPC with the broker in its JVM) and against our broker.

Both get the same broker.conf auth keys and users and ACLs made with Apache 5.3.3's mqadmin on the
remoting port (Apache's proxy its AuthConfig in rmq-proxy.json, reading the broker's users and
ACLs); the real RocketMQ 5.x Java client (rocketmq-client-java) signs with a user's name and
password. Every step must end alike: the messages sent and received by an allowed user, and for a
wrong secret, no credentials, an unknown user, a topic without Pub, a group without Sub and a Deny
entry, every refusal the client reports (status code and message).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth5_scenario import ALICE, AUTH_KEYS, CLUSTER, GRPC_OTHER_TOPIC, GRPC_TOPIC, PROXY_AUTH_CONFIG, run_grpc_scenario
from broker_process import Broker
from java5_driver import require_java5_driver
from java_driver_support import require_maven_build
from java_rocketmq import AnchorError, ProxyAnchor, build_proxy_anchor
from mqadmin5 import build_mqadmin5

pytestmark = pytest.mark.integration

UNAUTHORIZED = "UNAUTHORIZED"


@pytest.fixture(scope="module")
def java() -> str:
    require_maven_build(build_mqadmin5, "the auth tests run Apache's rocketmq-tools 5.3.3 on Java 17")
    return require_java5_driver()


@pytest.fixture(scope="module")
def anchor_outcomes(java: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_maven_build(build_proxy_anchor, "the comparison runs Apache RocketMQ 5.3.3's proxy, fetched with Maven")
    workdir = tmp_path_factory.mktemp("grpc-auth-anchor")
    anchor = ProxyAnchor(workdir, broker_config=dict(AUTH_KEYS), proxy_config=dict(PROXY_AUTH_CONFIG),
                         cluster=CLUSTER)
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield run_grpc_scenario(anchor.broker_addr, anchor.grpc_endpoint, java, workdir / "client")
    finally:
        anchor.stop()


@pytest.fixture(scope="module")
def our_outcomes(java: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    workdir: Path = tmp_path_factory.mktemp("grpc-auth-ours")
    broker = Broker(workdir, "".join(f"{key}={value}\n" for key, value in AUTH_KEYS.items()))
    with broker.running():
        yield run_grpc_scenario(broker.addr, broker.grpc_endpoint, java, workdir / "client")
    assert "Traceback" not in broker.log_text(), broker.log_text()[-6000:]


def test_the_allowed_user_is_served_and_every_other_refused(our_outcomes: dict[str, Any]) -> None:
    """What the comparison below holds both brokers to (so that two brokers refusing everything alike
    could not pass it)."""
    denied = f"User:{ALICE} has no permission to access {{}} from 127.0.0.1, {{}}"
    assert our_outcomes["send with Pub"] == ("sent", 2)
    assert our_outcomes["receive with Sub"] == ("received", 2)
    assert (UNAUTHORIZED, denied.format(f"Topic:{GRPC_OTHER_TOPIC}", "no matched policies.")) in \
        our_outcomes["send without Pub"][1]
    assert (UNAUTHORIZED, denied.format("Group:NotAliceGroup", "no matched policies.")) in \
        our_outcomes["receive without the group's Sub"][1]
    assert our_outcomes["wrong secret"] == ("refused", [(UNAUTHORIZED, "check signature failed.")])
    assert our_outcomes["no credentials"] == ("refused", [(UNAUTHORIZED, "username cannot be null.")])
    assert our_outcomes["unknown user"] == ("refused", [(UNAUTHORIZED, "User:mallory is not found.")])
    assert (UNAUTHORIZED, denied.format(f"Topic:{GRPC_TOPIC}", "the decision is deny.")) in \
        our_outcomes["send after Deny"][1]


def test_every_step_ends_as_on_rocketmq(anchor_outcomes: dict[str, Any], our_outcomes: dict[str, Any]) -> None:
    assert our_outcomes == anchor_outcomes
