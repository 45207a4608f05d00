"""The real RocketMQ 5.x Go client (``github.com/apache/rocketmq-clients/golang/v5``, from the Go module
proxy, gRPC v2) against a broker process: producer (normal with tag, keys and properties; FIFO with a
message group; delay with a delivery timestamp) and simple consumer (receive, ack, change invisible
duration), with and without ACL.

``go5/`` is a Go module (main.go, go.mod and go.sum pin the client) built once by
tool_support.go_tool_binary into ``~/.cache/rocketstore/go5-client/<version>-<hash of the sources>``;
each run is a subprocess printing JSON lines, with a scratch HOME (the driver keeps the client's log
file there). ``go`` is required: under CI (env ``CI`` set) a missing one fails these tests, otherwise
they are skipped with the reason.

The broker is a real ``rocketstore broker`` process (broker_process.Broker) with
``minInvisibleTimeMillsForRecv=1000`` so that redelivery after the invisible time takes seconds,
not RocketMQ's 10 s minimum, and ``tls.server.mode=enforcing``: this client always dials TLS
(trusting any certificate) and has no option for a plain connection, so its gRPC port must serve
TLS, as Apache RocketMQ's proxy does by default. The driver is the client as shipped: nothing of
its connection set-up is replaced. Topics are created over the (TLS) remoting port.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker_process import Broker, plain_acl_broker
from grpc5_expect import assert_received_as_sent
from tls_certs import Certs, make_certs
from tool_support import (
    DRIVERS_DIR,
    ScriptRun,
    go_tool_binary,
    go_tool_binary_path,
    require_executable,
    require_tool,
    run_tool,
)

from rocketstore.client import client_ssl_context
from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin
from rocketstore.common.message import java_string_hash

pytestmark = pytest.mark.integration

DRIVER_DIR = DRIVERS_DIR / "go5"
CLIENT_MODULE = "github.com/apache/rocketmq-clients/golang/v5"
#: the client version go.mod pins (go.sum pins its dependencies)
CLIENT_VERSION = re.search(rf"^\s*(?:require\s+)?{re.escape(CLIENT_MODULE)} (v\S+)",
                           (DRIVER_DIR / "go.mod").read_text(), re.MULTILINE).group(1)  # type: ignore[union-attr]
QUEUES = 4


@dataclass
class Go5Client:
    binary: Path
    home: Path
    endpoint: str
    credentials: tuple[str, str] | None = None

    def run(self, *args: str | int, timeout: float = 60.0, check: bool = True) -> ScriptRun:
        """The driver's output; unless ``check`` is off, it must have succeeded."""
        command, *flags = args
        if self.credentials is not None:
            flags += ["-access-key", self.credentials[0], "-secret-key", self.credentials[1]]
        run = run_tool([self.binary, command, "-endpoint", self.endpoint, *flags],
                       env={**os.environ, "HOME": str(self.home)}, timeout=timeout)
        if check:
            # the client's log says more than its error (a receive's stream error, for one, comes back
            # to the caller as DEADLINE_EXCEEDED)
            assert run.returncode == 0 and not run.of("error"), (run.of("error"), run.stderr[-3000:],
                                                                 self.client_log()[-3000:])
        return run

    def client_log(self) -> str:
        """What the client logged (a refused call's status is there, its caller is told less)."""
        path = self.home / "logs" / "rocketmqlogs" / "rocketmq_client_go.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def produce(self, topic: str, count: int, *extra: str | int, check: bool = True) -> ScriptRun:
        return self.run("produce", "-topic", topic, "-count", count, *extra, check=check)

    def consume(self, topic: str, group: str, expect: int, *extra: str | int) -> ScriptRun:
        return self.run("consume", "-topic", topic, "-group", group, "-expect", expect, *extra)


@pytest.fixture(scope="module")
def go5_binary() -> Path:
    go = require_executable("go", f"it builds the driver of the RocketMQ 5.x Go client {CLIENT_VERSION}")
    begin = time.monotonic()
    fresh = not go_tool_binary_path(DRIVER_DIR, "go5-client", CLIENT_VERSION).exists()
    try:
        binary = go_tool_binary(go, DRIVER_DIR, "go5-client", CLIENT_VERSION)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        require_tool(f"{CLIENT_MODULE}@{CLIENT_VERSION}", False, f"cannot build {DRIVER_DIR}: {exc}")
        raise
    print(f"\nRocketMQ 5.x Go client driver {CLIENT_VERSION}: "
          f"{f'built in {time.monotonic() - begin:.1f} s' if fresh else 'cached'} ({binary})", file=sys.stderr)
    return binary


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("go5-certs"))


def tls_conf(certs: Certs) -> str:
    """broker.conf lines of a gRPC (and remoting) port serving TLS only; no tls.properties is read."""
    return (f"tls.server.mode=enforcing\ntls.server.certPath={certs.server_cert}\n"
            f"tls.server.keyPath={certs.server_key}\ntls.config.file=/nonexistent/tls.properties\n")


def admin(broker: Broker, credentials: SessionCredentials | None = None) -> BrokerAdmin:
    """Admin requests over the broker's TLS remoting port."""
    return BrokerAdmin(broker.addr, ssl_context=client_ssl_context(),
                       rpc_hook=None if credentials is None else AclClientRPCHook(credentials))


@pytest.fixture(scope="module")
def broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    conf = "minInvisibleTimeMillsForRecv=1000\n" + tls_conf(certs)
    with Broker(tmp_path_factory.mktemp("grpc-go5"), conf).running() as b:
        yield b


@pytest.fixture
def go5(go5_binary: Path, broker: Broker, tmp_path: Path) -> Go5Client:
    return Go5Client(go5_binary, tmp_path, broker.grpc_endpoint)


@pytest.fixture
def topic(broker: Broker, request: pytest.FixtureRequest) -> str:
    """A topic of its own per test: a new group starts at the first message of each queue."""
    name = f"Go5_{request.node.name.removeprefix('test_')[:40]}"
    with admin(broker) as a:
        a.create_topic(name, QUEUES, QUEUES)
    return name


def test_producer_then_simple_consumer_reads_exactly_those_messages(go5: Go5Client, topic: str) -> None:
    other = go5.produce(topic, 2, "-tag", "TagB", "-body-prefix", "other").of("sent")
    sent = go5.produce(topic, 6, "-tag", "TagA", "-body-prefix", "props", "-prop", "color=red").of("sent")
    assert len(sent) == 6 and len(other) == 2
    run = go5.consume(topic, "Go5Props", 6, "-tag", "TagA")
    received = run.of("received")
    assert_received_as_sent(sent, received, prefix="props", tag="TagA", properties={"color": "red"})
    assert all(r["topic"] == topic and r["message_group"] is None for r in received)
    assert sorted(a["message_id"] for a in run.of("acked")) == sorted(s["message_id"] for s in sent)
    # acked: never delivered again to this group; TagB was never for it
    assert go5.consume(topic, "Go5Props", 1, "-tag", "TagA", "-timeout-ms", 4000).of("received") == []
    # another group reads the whole topic, TagB included
    everything = go5.consume(topic, "Go5All", 8).of("received")
    assert sorted(r["body"] for r in everything) == sorted(s["body"] for s in sent + other)


def test_fifo_messages_of_a_group_share_one_queue_in_order(go5: Go5Client, broker: Broker, topic: str) -> None:
    sent = go5.produce(topic, 6, "-body-prefix", "fifo", "-group", "order-7").of("sent")
    assert len(sent) == 6
    queue = java_string_hash("order-7") % QUEUES
    with admin(broker) as a:
        stats = a.topic_stats(topic)
    assert {s.queue.queue_id: s.max_offset for s in stats} == {q: 6 if q == queue else 0 for q in range(QUEUES)}
    received = go5.consume(topic, "Go5Fifo", 6).of("received")
    assert [r["body"] for r in received] == [f"fifo-{i}" for i in range(6)]
    assert [r["offset"] for r in received] == list(range(6))
    assert {r["message_group"] for r in received} == {"order-7"}


def test_a_delayed_message_arrives_not_before_its_delivery_time(go5: Go5Client, topic: str) -> None:
    sent = go5.produce(topic, 1, "-body-prefix", "late", "-delay-ms", 3000).of("sent")
    received = go5.consume(topic, "Go5Delay", 1, "-timeout-ms", 20000).of("received")
    assert [r["body"] for r in received] == ["late-0"]
    due = sent[0]["at_ms"] + 3000
    assert received[0]["delivery_ms"] == due  # the timestamp it was sent with, to the millisecond
    assert received[0]["at_ms"] >= due - 100  # not before it was due (100 ms for clock granularity)


def test_a_message_not_acked_comes_back_with_attempt_2(go5: Go5Client, topic: str) -> None:
    sent = go5.produce(topic, 1, "-body-prefix", "unacked").of("sent")
    run = go5.consume(topic, "Go5Unacked", 2, "-mode", "ignore-first", "-invisible-ms", 2000, "-timeout-ms", 20000)
    received = run.of("received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1),
                                                                   (sent[0]["message_id"], 2)]
    assert received[1]["at_ms"] - received[0]["at_ms"] >= 1900  # not before its invisible time (2 s)
    assert [a["message_id"] for a in run.of("acked")] == [sent[0]["message_id"]]
    assert go5.consume(topic, "Go5Unacked", 1, "-timeout-ms", 4000).of("received") == []


def test_change_invisible_duration_to_zero_redelivers_at_once(go5: Go5Client, topic: str) -> None:
    sent = go5.produce(topic, 1, "-body-prefix", "nack").of("sent")
    run = go5.consume(topic, "Go5Nack", 2, "-mode", "nack-first", "-invisible-ms", 30000, "-timeout-ms", 20000)
    received = run.of("received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1),
                                                                   (sent[0]["message_id"], 2)]
    assert len(run.of("nacked")) == 1
    assert received[1]["at_ms"] - received[0]["at_ms"] < 15000  # well before its 30 s invisible time


# -- aclEnable: the client's MQv2-HMAC-SHA1 signatures against the broker's plain ACL ---------------

ACL_FILE = """\
accounts:
- {accessKey: Go5Writer, secretKey: writer-secret, defaultTopicPerm: DENY, defaultGroupPerm: SUB,
   topicPerms: [Go5AclTopic=PUB|SUB]}
- {accessKey: Go5Reader, secretKey: reader-secret, defaultTopicPerm: DENY, defaultGroupPerm: SUB,
   topicPerms: [Go5AclTopic=SUB]}
- {accessKey: Go5Admin1, secretKey: admin-secret, admin: true}
"""


@pytest.fixture(scope="module")
def acl_broker(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker with aclEnable and the three accounts of ACL_FILE, and the topic Go5AclTopic."""
    b = plain_acl_broker(tmp_path_factory.mktemp("grpc-go5-acl"), ACL_FILE, tls_conf(certs))
    b.start()
    try:
        with admin(b, SessionCredentials("Go5Admin1", "admin-secret")) as a:
            a.create_topic("Go5AclTopic", QUEUES, QUEUES)
        yield b
    finally:
        b.stop()


def test_with_acl_a_signed_client_sends_and_receives(go5_binary: Path, acl_broker: Broker, tmp_path: Path) -> None:
    go5 = Go5Client(go5_binary, tmp_path, acl_broker.grpc_endpoint, ("Go5Writer", "writer-secret"))
    sent = go5.produce("Go5AclTopic", 3, "-body-prefix", "acl").of("sent")
    run = go5.consume("Go5AclTopic", "Go5AclGroup", 3)
    assert sorted(r["message_id"] for r in run.of("received")) == sorted(s["message_id"] for s in sent)
    assert len(run.of("acked")) == 3


@pytest.mark.parametrize(("credentials", "reason"), [
    (("Go5Writer", "not-the-secret"), "Check signature failed for accessKey=Go5Writer"),
    (("Go5Stranger", "any-secret"), "No acl config for Go5Stranger"),
    (("Go5Reader", "reader-secret"), "No default permission for topic:Go5AclTopic"),
], ids=["wrong-secret", "unknown-key", "no-pub"])
def test_with_acl_a_client_without_the_right_credentials_cannot_send(
        go5_binary: Path, acl_broker: Broker, tmp_path: Path, credentials: tuple[str, str], reason: str) -> None:
    go5 = Go5Client(go5_binary, tmp_path, acl_broker.grpc_endpoint, credentials)
    run = go5.produce("Go5AclTopic", 1, "-body-prefix", "refused", check=False)
    assert run.returncode != 0 and not run.of("sent") and run.of("error"), run
    assert reason in str(run.of("error")) + go5.client_log(), (run, go5.client_log()[-3000:])
