"""Fixtures the compatibility tests share, one folder per compatibility target below this one.

* ``java_client_built``: the RocketMQ 4.9.8 Java client driver (tests/support/drivers/java4, built by
  java_rocketmq.py) is built, once per session.
* ``rocketmq_anchor`` and ``anchor_client``: Apache RocketMQ's own name server and broker (4.9.7),
  one pair per test module, and the Java driver pointed at them (apache_broker/).
* ``rocketstore_broker`` (module scope): ``rocketstore broker`` as a child process behind a
  :class:`recording_broker.RecordingProxy`, for unmodified 4.x clients (java4/, cpp/, mqadmin/).
  The broker listens on 127.0.0.2 (``listenHost``) and publishes 127.0.0.1 with the same port in its
  routes; the proxy owns 127.0.0.1:port, forwards every byte both ways and decodes the frames it
  forwards, so a test can assert what a real client put on the wire and how the broker answered.
  Its name server (``namesrv``) is reached directly on 127.0.0.2. At teardown the broker must stop
  cleanly (exit 0) with no traceback in its log. A test module's ``ROCKETSTORE_BROKER_CONF``
  (broker.conf lines) adds to its configuration.
* ``grpc_broker``, ``grpc_topic`` and ``grpc_acl_broker``: the gRPC v2 brokers the 5.x client tests
  (python5/, node5/) share.
* ``unique_name``: topic and group names unique to a test.

``java`` and ``mvn`` (and, for the C++ client, ``pip`` with network access once) are required:
under CI (env ``CI`` set) a missing tool fails the tests; on a developer machine they are skipped
with the reason.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator

import grpc5_accounts
import java_rocketmq
import pytest
from broker_process import Broker, plain_acl_broker
from java_driver_support import require_java_driver
from java_rocketmq import AnchorError, BuildError, ClientDriver, RocketMQAnchor
from recording_broker import RocketStoreBroker

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


@pytest.fixture(scope="module")
def rocketstore_broker(tmp_path_factory: pytest.TempPathFactory,
                       request: pytest.FixtureRequest) -> Iterator[RocketStoreBroker]:
    """Our broker behind the recording proxy, for one test module (see the module docstring); a
    module's ``ROCKETSTORE_BROKER_CONF`` (broker.conf lines) is added to its configuration."""
    broker = RocketStoreBroker(tmp_path_factory.mktemp("rocketstore-broker"),
                               conf=getattr(request.module, "ROCKETSTORE_BROKER_CONF", ""))
    begin = time.monotonic()
    broker.start()
    print(f"\nour broker up in {time.monotonic() - begin:.1f} s: namesrv {broker.namesrv}, broker {broker.addr}",
          file=sys.stderr)
    yield broker
    code = broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert code == 0, f"broker exited {code}:\n{log[-6000:]}"
    assert "Traceback" not in log, f"the broker logged an exception:\n{log[log.index('Traceback') - 2000:][:8000]}"
    assert not broker.proxy.errors, broker.proxy.errors


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
