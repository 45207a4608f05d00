"""Fixtures for tests that drive a broker with the real RocketMQ Java client (see java_rocketmq.py),
and the gRPC v2 brokers the 5.x client tests (Python, Node.js) share: ``grpc_broker``,
``grpc_topic`` and ``grpc_acl_broker``.

``java`` and ``mvn`` are required: under CI (env ``CI`` set) a missing tool fails the tests; on a
developer machine they are skipped with the reason.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# java_rocketmq.py and grpc5_accounts.py live beside this file (tests/ is not a package): make them
# importable as top-level modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc5_accounts
import java_rocketmq
from broker_process import Broker, plain_acl_broker
from java_driver_support import require_java_driver
from java_rocketmq import AnchorError, BuildError, ClientDriver, RocketMQAnchor

from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin, MQAdmin


@pytest.fixture(scope="session")
def java_client_built() -> None:
    """java and mvn are present and the client driver is built (once per session)."""
    require_java_driver("the Java client tests")


@pytest.fixture(scope="module")
def rocketmq_anchor(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQAnchor]:
    """Apache RocketMQ's own name server and broker (4.9.7), one pair per test module."""
    try:
        took = java_rocketmq.build_anchor()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    if took is not None:
        print(f"\nRocketMQ anchor classpath copied by mvn in {took:.1f} s", file=sys.stderr)
    anchor = RocketMQAnchor(tmp_path_factory.mktemp("rocketmq-anchor"))
    begin = time.monotonic()
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\nRocketMQ anchor up in {time.monotonic() - begin:.1f} s {anchor.boot_seconds}: "
          f"namesrv {anchor.namesrv_addr}, broker {anchor.broker_addr}", file=sys.stderr)
    yield anchor
    begin = time.monotonic()
    codes = anchor.stop()
    print(f"\nRocketMQ anchor stopped in {time.monotonic() - begin:.1f} s, exit codes {codes}", file=sys.stderr)


@pytest.fixture(scope="module")
def anchor_client(rocketmq_anchor: RocketMQAnchor, tmp_path_factory: pytest.TempPathFactory) -> ClientDriver:
    """The Java client driver pointed at the anchor's name server; routes refresh, heartbeats and
    rebalances every second instead of every 30, 30 and 20 s (see ClientDriver)."""
    return ClientDriver(rocketmq_anchor.namesrv_addr, tmp_path_factory.mktemp("java-client"),
                        poll_namesrv_ms=1000, heartbeat_ms=1000, rebalance_interval_ms=1000)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name(prefix)``: a topic or group name unique to this test (RocketMQ allows [%|a-zA-Z0-9_-])."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:80]
    stamp = f"{os.getpid()}_{time.monotonic_ns() % 10**9}"

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{stamp}"

    return make


@pytest.fixture(scope="module")
def grpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker process for 5.x clients, one per test module, with ``minInvisibleTimeMillsForRecv=1000``
    so that redelivery after the invisible time takes seconds, not RocketMQ's 10 s minimum."""
    with Broker(tmp_path_factory.mktemp("grpc-broker"), "minInvisibleTimeMillsForRecv=1000\n").running() as b:
        yield b


@pytest.fixture
def grpc_topic(grpc_broker: Broker, request: pytest.FixtureRequest) -> str:
    """A topic of four queues of its own on ``grpc_broker``: a new group starts at the first message
    of each queue, so messages of other tests must not be there."""
    name = f"Grpc_{request.node.name.removeprefix('test_')[:40]}"
    with MQAdmin(grpc_broker.namesrv) as admin:
        admin.create_topic(name, 4, 4)
    return name


@pytest.fixture(scope="module")
def grpc_acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker with aclEnable, the accounts of grpc5_accounts and its topic (two queues)."""
    topic, (writer, writer_sk), (reader, reader_sk), (admin, admin_sk) = (
        grpc5_accounts.TOPIC, grpc5_accounts.WRITER, grpc5_accounts.READER, grpc5_accounts.ADMIN)
    b = plain_acl_broker(tmp_path_factory.mktemp("grpc-acl-broker"), (
        "accounts:\n"
        f"- {{accessKey: {writer}, secretKey: {writer_sk}, defaultTopicPerm: DENY, defaultGroupPerm: SUB,"
        f" topicPerms: [{topic}=PUB|SUB]}}\n"
        f"- {{accessKey: {reader}, secretKey: {reader_sk}, defaultTopicPerm: DENY, defaultGroupPerm: SUB,"
        f" topicPerms: [{topic}=SUB]}}\n"
        f"- {{accessKey: {admin}, secretKey: {admin_sk}, admin: true}}\n"))
    b.start()
    try:
        with BrokerAdmin(b.addr, rpc_hook=AclClientRPCHook(SessionCredentials(admin, admin_sk))) as client:
            client.create_topic(topic, 2, 2)
        yield b
    finally:
        b.stop()
