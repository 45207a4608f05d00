"""The real RocketMQ 5.x Node.js client (npm ``rocketmq-client-nodejs``, gRPC v2) against a broker process.

``node5/package.json`` pins the client and ``node5/package-lock.json`` everything under it;
tool_support.npm_tool_modules installs that lockfile with ``npm ci`` once into
``~/.cache/rocketstore/node5-client/<version>-<lockfile hash>/node_modules`` and reuses it, and
``node5/node5_client.js`` drives the client as a ``node`` subprocess (NODE_PATH at that folder,
a scratch HOME) printing JSON lines. The brokers are the ones the Python 5.x client's test uses
(``grpc_broker``, ``grpc_topic``, ``grpc_acl_broker`` in conftest.py). node and npm are required:
under CI (env ``CI`` set) a missing one fails these tests, otherwise they are skipped with the reason.

The package also ships the apache.rocketmq.v2 .proto files its generated code comes from; they are
compiled with grpcio-tools' protoc and compared with our own protocol.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import grpc5_accounts
import pytest
from broker_process import Broker
from google.protobuf.descriptor_pb2 import DescriptorProto, FileDescriptorProto, FileDescriptorSet
from grpc5_expect import assert_received_as_sent
from grpc_tools import protoc
from polling import wait_until
from tool_support import (
    DRIVERS_DIR,
    ScriptRun,
    npm_tool_modules,
    npm_tool_modules_dir,
    require_executable,
    require_tool,
    run_tool_script,
)

from rocketstore.broker.grpc_v2 import messaging_pb2
from rocketstore.client.admin import MQAdmin
from rocketstore.common.message import java_string_hash

pytestmark = pytest.mark.integration

CLIENT_PACKAGE = "rocketmq-client-nodejs"
PROJECT = DRIVERS_DIR / "node5"
SCRIPT = PROJECT / "node5_client.js"
CACHE_NAME = "node5-client"  # ~/.cache/rocketstore/node5-client
#: the client's package.json: "engines": {"node": ">=16.19.0"}
NODE_MINIMUM = (16, 19)


@dataclass
class Node5Client:
    node: str
    modules: Path
    home: Path
    endpoint: str

    def run(self, *args: str | int, credentials: tuple[str, str] | None = None, timeout: float = 60.0,
            check: bool = True) -> ScriptRun:
        """The driver's output; ``credentials`` (access key, secret key) sign its calls; unless
        ``check`` is off, it must have succeeded."""
        keys = ("--access-key", credentials[0], "--secret-key", credentials[1]) if credentials else ()
        run = run_tool_script(self.node, SCRIPT, [*args, *keys], home=self.home, timeout=timeout,
                              env={"NODE_PATH": str(self.modules)})
        if check:
            assert run.returncode == 0 and not run.of("error"), (run.of("error"), run.stderr[-3000:])
        return run

    def produce(self, topic: str, count: int, *extra: str | int, credentials: tuple[str, str] | None = None,
                check: bool = True, timeout: float = 60.0) -> ScriptRun:
        return self.run("produce", self.endpoint, topic, count, *extra, credentials=credentials, check=check,
                        timeout=timeout)

    def consume(self, topic: str, group: str, expect: int, *extra: str | int,
                credentials: tuple[str, str] | None = None) -> ScriptRun:
        return self.run("consume", self.endpoint, topic, group, "--expect", expect, *extra, credentials=credentials)


@pytest.fixture(scope="module")
def node_client() -> tuple[str, Path]:
    """The node executable and the installed client's node_modules (``npm ci``, cached)."""
    why = f"the {CLIENT_PACKAGE} tests run the client with Node.js and install it with npm"
    node = require_executable("node", why)
    npm = require_executable("npm", why)
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    found = re.match(r"v(\d+)\.(\d+)", version)
    require_tool(f"node >= {'.'.join(map(str, NODE_MINIMUM))}",
                 found is not None and (int(found[1]), int(found[2])) >= NODE_MINIMUM,
                 f"{CLIENT_PACKAGE} needs it; found {version.strip() or 'no version'}")
    begin = time.monotonic()
    try:
        modules = npm_tool_modules(CACHE_NAME, PROJECT, CLIENT_PACKAGE, npm)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        target = npm_tool_modules_dir(CACHE_NAME, PROJECT, CLIENT_PACKAGE)
        require_tool(CLIENT_PACKAGE, False, f"cannot npm ci into {target}: {exc}")
        raise
    print(f"\n{CLIENT_PACKAGE}: {modules} ready in {time.monotonic() - begin:.1f} s", file=sys.stderr)
    return node, modules


@pytest.fixture(scope="module")
def node5(node_client: tuple[str, Path], grpc_broker: Broker,
          tmp_path_factory: pytest.TempPathFactory) -> Node5Client:
    return Node5Client(*node_client, tmp_path_factory.mktemp("node5-home"), grpc_broker.grpc_endpoint)


def _protocol(files: list[FileDescriptorProto]) -> dict[str, object]:
    """Every message's fields, every enum's values and every method of apache.rocketmq.v2 in ``files``,
    keyed by full name: what a client and a server must agree on (not comments, not options)."""
    facts: dict[str, object] = {}

    def walk(prefix: str, message: DescriptorProto) -> None:
        facts[prefix + message.name] = sorted((f.number, f.name, f.type, f.label, f.type_name, f.proto3_optional)
                                              for f in message.field)
        for nested in message.nested_type:
            walk(f"{prefix}{message.name}.", nested)
        for enum in message.enum_type:
            facts[f"{prefix}{message.name}.{enum.name}"] = sorted((v.name, v.number) for v in enum.value)

    for file in files:
        if file.package != "apache.rocketmq.v2":
            continue
        for message in file.message_type:
            walk(f"{file.package}.", message)
        for enum in file.enum_type:
            facts[f"{file.package}.{enum.name}"] = sorted((v.name, v.number) for v in enum.value)
        for service in file.service:
            for method in service.method:
                facts[f"{file.package}.{service.name}/{method.name}"] = (
                    method.input_type, method.output_type, method.client_streaming, method.server_streaming)
    return facts


def test_the_protocol_matches_the_clients(node_client: tuple[str, Path], tmp_path: Path) -> None:
    """The .proto files the npm package ships (the client's generated code comes from them), compiled
    with grpcio-tools' protoc: each of their messages, fields, enums and methods is ours, equal."""
    proto_root = node_client[1] / CLIENT_PACKAGE / "proto"
    descriptor_set = tmp_path / "client.pb"
    assert protoc.main(["protoc", f"-I{proto_root}", f"-I{resources.files('grpc_tools') / '_proto'}",
                        f"--descriptor_set_out={descriptor_set}", "apache/rocketmq/v2/definition.proto",
                        "apache/rocketmq/v2/service.proto"]) == 0
    theirs = _protocol(list(FileDescriptorSet.FromString(descriptor_set.read_bytes()).file))
    ours_file = FileDescriptorProto()
    messaging_pb2.DESCRIPTOR.CopyToProto(ours_file)
    ours = _protocol([ours_file])
    assert len(theirs) > 90  # 66 messages, 14 enums, 17 methods in 1.0.8
    assert {name: ours.get(name) for name in theirs} == theirs


def test_producer_then_simple_consumer_reads_exactly_those_messages(node5: Node5Client, grpc_topic: str) -> None:
    sent = node5.produce(grpc_topic, 6, "--tag", "TagN", "--body-prefix", "props", "--prop", "color=red").of("sent")
    assert [s["index"] for s in sent] == list(range(6))
    run = node5.consume(grpc_topic, "NodeProps", 6, "--tag", "TagN")
    received = run.of("received")
    assert_received_as_sent(sent, received, prefix="props", tag="TagN", properties={"color": "red"})
    assert sorted(a["message_id"] for a in run.of("acked")) == sorted(s["message_id"] for s in sent)
    # acked: never delivered again to this group
    assert node5.consume(grpc_topic, "NodeProps", 1, "--timeout", 3).of("received") == []


def test_a_tag_filter_leaves_other_tags_out(node5: Node5Client, grpc_topic: str) -> None:
    node5.produce(grpc_topic, 2, "--tag", "TagOther", "--body-prefix", "other")
    wanted = node5.produce(grpc_topic, 2, "--tag", "TagWanted", "--body-prefix", "wanted").of("sent")
    # asks for one more than there is, so it runs to its timeout: long enough for a busy machine to
    # deliver the two wanted ones, and for a wrongly matched third to show
    received = node5.consume(grpc_topic, "NodeTags", 3, "--tag", "TagWanted", "--timeout", 10).of("received")
    assert sorted(r["body"] for r in received) == sorted(s["body"] for s in wanted)


def test_fifo_messages_of_a_group_share_one_queue_in_order(node5: Node5Client, grpc_broker: Broker,
                                                           grpc_topic: str) -> None:
    sent = node5.produce(grpc_topic, 6, "--group", "order-7", "--body-prefix", "fifo").of("sent")
    assert len(sent) == 6
    received = node5.consume(grpc_topic, "NodeFifo", 6).of("received")
    # one queue (picked by the broker from the group), read in the order sent
    assert [r["body"] for r in received] == [f"fifo-{i}" for i in range(6)]
    assert [r["queue_offset"] for r in received] == list(range(6))
    assert {r["message_group"] for r in received} == {"order-7"}
    with MQAdmin(grpc_broker.namesrv) as admin:
        stats = admin.broker(grpc_broker.addr).topic_stats(grpc_topic)
    assert {s.queue.queue_id: s.max_offset for s in stats if s.max_offset} == {java_string_hash("order-7") % 4: 6}


def test_a_delayed_message_arrives_at_its_delivery_time(node5: Node5Client, grpc_topic: str) -> None:
    sent = node5.produce(grpc_topic, 1, "--delay-ms", 3000, "--body-prefix", "late").of("sent")
    received = node5.consume(grpc_topic, "NodeDelay", 1, "--timeout", 20).of("received")
    assert [r["body"] for r in received] == ["late-0"]
    assert received[0]["at_ms"] >= sent[0]["at_ms"] + 3000 - 100  # not before it was due


def test_a_message_not_acked_comes_back_with_attempt_2(node5: Node5Client, grpc_topic: str) -> None:
    sent = node5.produce(grpc_topic, 1, "--body-prefix", "unacked").of("sent")
    run = node5.consume(grpc_topic, "NodeUnacked", 2, "--mode", "ignore-first", "--invisible-ms", 2000,
                        "--timeout", 20)
    received = run.of("received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1),
                                                                   (sent[0]["message_id"], 2)]
    assert received[1]["at_ms"] - received[0]["at_ms"] >= 1900  # not before its invisible time (2 s)
    assert [a["message_id"] for a in run.of("acked")] == [sent[0]["message_id"]]  # the second delivery
    assert node5.consume(grpc_topic, "NodeUnacked", 1, "--timeout", 4).of("received") == []


def test_push_consumer_retries_a_failure_and_acks(node5: Node5Client, grpc_topic: str) -> None:
    """A PushConsumer whose listener answers FAILURE to each first delivery and SUCCESS to the next.

    The client drops a message whose body digest it cannot verify, as corrupted, before its listener
    sees it, so the listener's calls show that the digest checks out. FAILURE: the client puts the
    message back (ChangeInvisibleDuration) and it comes back with attempt 2; the broker's Telemetry
    answer gives the proxy's customized back-off (10 s, 30 s, ...), which this client does not
    implement (1.0.8), so it puts it back at once. SUCCESS: acked, never delivered again. (Its
    shutdown waits for its long-polling receives, up to 20 s.)"""
    sent = node5.produce(grpc_topic, 3, "--body-prefix", "push").of("sent")
    received = node5.run("push", node5.endpoint, grpc_topic, "NodePush", "--expect", 6, "--mode", "fail-first",
                         "--timeout", 40).of("received")
    assert sorted((r["message_id"], r["attempt"]) for r in received) == sorted(
        (s["message_id"], attempt) for s in sent for attempt in (1, 2))
    assert sorted(r["body"] for r in received) == sorted(f"push-{i}" for i in range(3) for _ in (1, 2))
    assert node5.consume(grpc_topic, "NodePush", 1, "--timeout", 3).of("received") == []


# -- aclEnable: the client's MQv2-HMAC-SHA1 signatures (upper-case hex) against the broker's plain ACL ---

@pytest.fixture
def acl_node5(node_client: tuple[str, Path], grpc_acl_broker: Broker, tmp_path: Path) -> Node5Client:
    return Node5Client(*node_client, tmp_path, grpc_acl_broker.grpc_endpoint)


def test_with_acl_a_signed_client_sends_and_receives(acl_node5: Node5Client) -> None:
    sent = acl_node5.produce(grpc5_accounts.TOPIC, 3, "--body-prefix", "acl",
                             credentials=grpc5_accounts.WRITER).of("sent")
    run = acl_node5.consume(grpc5_accounts.TOPIC, "NodeAclGroup", 3, credentials=grpc5_accounts.WRITER)
    assert sorted(r["message_id"] for r in run.of("received")) == sorted(s["message_id"] for s in sent)
    assert len(run.of("acked")) == 3


def test_with_acl_a_wrong_secret_is_refused(acl_node5: Node5Client) -> None:
    run = acl_node5.produce(grpc5_accounts.TOPIC, 1, credentials=(grpc5_accounts.WRITER[0], "not-the-secret"),
                            check=False, timeout=90)
    assert run.returncode != 0 and not run.of("sent"), run
    # the client's startup fails on the route query (three tries); its log (stderr) has the status and the reason
    assert "Failed to fetch topic routes" in str(run.of("error")), run
    refusal = f"16 UNAUTHENTICATED: Check signature failed for accessKey={grpc5_accounts.WRITER[0]}"
    assert refusal in run.stderr, run.stderr[-3000:]


def test_with_acl_an_account_without_pub_cannot_send(acl_node5: Node5Client) -> None:
    """The reader account may read the topic, not write it: its route is served, and the settings
    of its producer (publishing the topic) on the Telemetry stream are refused, as RocketMQ's proxy
    checks them. The client keeps reopening the stream and its startup never returns (the driver
    gives up after 5 s); its log has each refusal."""
    run = acl_node5.produce(grpc5_accounts.TOPIC, 1, "--startup-timeout-ms", 5000, credentials=grpc5_accounts.READER,
                            check=False, timeout=90)
    assert run.returncode != 0 and not run.of("sent"), run
    assert "startup did not finish" in str(run.of("error")), run
    assert "Fetch topic route successfully" in run.stderr, run.stderr[-3000:]
    refusal = f"PERMISSION_DENIED: No default permission for topic:{grpc5_accounts.TOPIC}"
    assert refusal in run.stderr, run.stderr[-3000:]


def test_clients_that_exit_leave_no_error_in_the_broker_log(node5: Node5Client, grpc_broker: Broker,
                                                            grpc_topic: str) -> None:
    """The client ends its Telemetry stream and exits without waiting for the broker's end of it;
    the broker sees a cancelled call, which is no error of its own."""
    def telemetry_streams_ended() -> int:
        counts = re.findall(r'^rocketstore_grpc_requests_total\{[^}]*method="Telemetry"[^}]*\} (\S+)$',
                            grpc_broker.metrics(), re.MULTILINE)
        return sum(int(float(n)) for n in counts)

    ended = telemetry_streams_ended()
    node5.produce(grpc_topic, 1, "--body-prefix", "bye")
    node5.consume(grpc_topic, "NodeBye", 1)
    # a stream is counted when the broker has ended it: then its end is in the log, if it logged one
    wait_until("the broker ending both clients' Telemetry streams", lambda: telemetry_streams_ended() >= ended + 2,
               timeout=15, interval=0.1)
    log = grpc_broker.log_text()
    assert "Task exception was never retrieved" not in log and "Traceback" not in log, log[-3000:]
