"""The real RocketMQ 5.x Python client (``rocketmq-python-client``, gRPC v2) against a broker process.

The client installs a top-level package ``rocketmq`` (as the C++-based 4.x client does) and
brings its own generated copy of the apache.rocketmq.v2 protocol, which must not meet ours in one
process; so it lives in a virtualenv of its own (tool_support.pip_tool_venv, cached under
``~/.cache/rocketstore/venvs``) and ``python5/py5_client.py`` drives it as a subprocess with a
scratch HOME (the client writes logs under ``$HOME/logs`` at import). The broker is a real
``rocketstore broker`` process (``grpc_broker`` and ``grpc_acl_broker`` in conftest.py, shared with
the Node.js client's test) with ``minInvisibleTimeMillsForRecv=1000`` so that redelivery after the
invisible time takes seconds, not RocketMQ's 10 s minimum.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import grpc5_accounts
import pytest
from broker_process import Broker
from grpc5_expect import assert_received_as_sent
from java_driver_support import require_java_driver
from java_rocketmq import ClientDriver
from polling import wait_until
from tool_support import DRIVERS_DIR, ScriptRun, pip_tool_venv, pip_tool_venv_dir, require_tool, run_tool_script

from rocketstore.client.admin import MQAdmin

pytestmark = pytest.mark.integration

CLIENT_PACKAGE = "rocketmq-python-client"
CLIENT_VERSION = "5.1.2"
SCRIPT = DRIVERS_DIR / "python5" / "py5_client.py"


@dataclass
class Py5Client:
    python: Path
    home: Path
    endpoint: str

    def run(self, *args: str | int, timeout: float = 60.0, check: bool = True) -> ScriptRun:
        """The driver's output; unless ``check`` is off, it must have succeeded."""
        run = run_tool_script(self.python, SCRIPT, args, home=self.home, timeout=timeout)
        if check:
            assert run.returncode == 0 and not run.of("error"), (run.of("error"), run.stderr[-3000:])
        return run

    def client_log(self) -> str:
        """What the client logged (it logs a refused call's status and details, and tells its caller less)."""
        path = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def produce(self, topic: str, count: int, *extra: str) -> ScriptRun:
        return self.run("produce", self.endpoint, topic, count, *extra)

    def consume(self, topic: str, group: str, expect: int, *extra: str | int) -> ScriptRun:
        return self.run("consume", self.endpoint, topic, group, "--expect", expect, *extra)


@pytest.fixture(scope="module")
def client_python() -> Path:
    try:
        return pip_tool_venv(CLIENT_PACKAGE, CLIENT_VERSION, "rocketmq")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        require_tool(CLIENT_PACKAGE, False, f"cannot install {CLIENT_VERSION} into "
                     f"{pip_tool_venv_dir(CLIENT_PACKAGE, CLIENT_VERSION)}: {exc}")
        raise


@pytest.fixture(scope="module")
def py5(client_python: Path, grpc_broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Py5Client:
    return Py5Client(client_python, tmp_path_factory.mktemp("py5-home"), grpc_broker.grpc_endpoint)


def test_the_protocol_matches_the_clients(py5: Py5Client) -> None:
    """Every message, field number, type and enum value of the client's protocol is ours too."""
    from google.protobuf import descriptor_pool

    from rocketstore.broker.grpc_v2 import messaging_pb2

    theirs = py5.run("facts").of("facts")[0]
    pool = descriptor_pool.Default()
    for name, fields in theirs["messages"].items():
        ours = pool.FindMessageTypeByName(name)
        assert sorted([f.number, f.name, f.type, f.is_repeated, f.has_presence,
                       f.message_type.full_name if f.message_type else
                       f.enum_type.full_name if f.enum_type else ""] for f in ours.fields) == fields, name
    for name, values in theirs["enums"].items():
        assert {v.name: v.number for v in pool.FindEnumTypeByName(name).values} == values, name
    service = messaging_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    for path, (request, response, client_streaming, server_streaming) in theirs["methods"].items():
        method = service.methods_by_name[path.rsplit("/", 1)[1]]
        assert [method.input_type.full_name, method.output_type.full_name, method.client_streaming,
                method.server_streaming] == [request, response, client_streaming, server_streaming], path


def test_producer_then_simple_consumer_reads_exactly_those_messages(py5: Py5Client, grpc_topic: str) -> None:
    sent = py5.produce(grpc_topic, 6, "--tag", "TagA", "--body-prefix", "props", "--prop", "color=red").of("sent")
    run = py5.consume(grpc_topic, "GroupProps", 6, "--mode", "ack", "--tag", "TagA")
    received = run.of("received")
    assert_received_as_sent(sent, received, prefix="props", tag="TagA", properties={"color": "red"})
    assert len(run.of("acked")) == 6
    # acked: never delivered again to this group
    assert py5.consume(grpc_topic, "GroupProps", 1, "--timeout", 3).of("received") == []


def test_nack_redelivers_with_attempt_2(py5: Py5Client, grpc_topic: str) -> None:
    sent = py5.produce(grpc_topic, 1, "--body-prefix", "nack").of("sent")
    received = py5.consume(grpc_topic, "GroupNack", 2, "--mode", "nack-first", "--timeout", 20).of("received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1),
                                                                   (sent[0]["message_id"], 2)]


def test_a_message_not_acked_comes_back_after_its_invisible_time(py5: Py5Client, grpc_topic: str) -> None:
    sent = py5.produce(grpc_topic, 1, "--body-prefix", "late").of("sent")
    received = py5.consume(grpc_topic, "GroupLate", 2, "--mode", "ignore-first", "--invisible", 2,
                           "--timeout", 20).of("received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1),
                                                                   (sent[0]["message_id"], 2)]
    assert received[1]["at"] - received[0]["at"] >= 1.9  # not before its invisible time (2 s)


def test_broker_killed_between_receive_and_ack_loses_nothing(py5: Py5Client, grpc_broker: Broker,
                                                            grpc_topic: str) -> None:
    """Received, half of them acked, then kill -9: the unacked ones come back with attempt 2, the
    acked ones never do."""
    sent = py5.produce(grpc_topic, 6, "--body-prefix", "crash").of("sent")
    first = py5.consume(grpc_topic, "GroupCrash", 6, "--mode", "ack-even", "--invisible", 2)
    assert sorted(r["message_id"] for r in first.of("received")) == sorted(s["message_id"] for s in sent)
    assert len(first.of("acked")) == 3
    grpc_broker.stop(signal.SIGKILL)
    grpc_broker.start()
    again = py5.consume(grpc_topic, "GroupCrash", 3, "--mode", "ack", "--timeout", 20).of("received")
    odd = sorted(s["message_id"] for s in sent if s["index"] % 2 == 1)
    assert sorted(r["message_id"] for r in again) == odd
    assert {r["attempt"] for r in again} == {2}
    assert py5.consume(grpc_topic, "GroupCrash", 1, "--timeout", 4).of("received") == []


def test_push_consumer_consumes_and_acks(py5: Py5Client, grpc_broker: Broker, grpc_topic: str) -> None:
    sent = py5.produce(grpc_topic, 5, "--body-prefix", "push").of("sent")
    received = py5.run("push", py5.endpoint, grpc_topic, "GroupPush", "--expect", 5).of("received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    assert {r["attempt"] for r in received} == {1}
    # its acks arrived: nothing of this group is left in flight (the client acks after its listener)
    wait_until("the push consumer's acks", lambda: _metric(grpc_broker, "rocketstore_pop_messages_in_flight") == 0,
               timeout=15)


def test_a_4x_and_a_5x_client_see_one_consistent_group(py5: Py5Client, grpc_broker: Broker, grpc_topic: str,
                                                       tmp_path: Path) -> None:
    """One topic, one group, both protocols: what the 5.x client acked the 4.x push consumer never
    gets (pop acks are the group's committed offsets), and what the 4.x consumer committed the 5.x
    client never gets (pop moves on to them); admin tools see the group caught up after each."""
    require_java_driver("the 4.x side of this test needs")
    java = ClientDriver(grpc_broker.namesrv, tmp_path / "java", poll_namesrv_ms=1000, heartbeat_ms=1000,
                        rebalance_interval_ms=1000)
    group = "GroupBothProtocols"

    def caught_up() -> bool:
        with MQAdmin(grpc_broker.namesrv) as admin:
            return admin.consumer_progress(group, grpc_topic).diff_total == 0

    java.produce(grpc_topic, 8, keys=True)
    by_5x = py5.consume(grpc_topic, group, 8, "--mode", "ack").of("received")
    assert sorted(r["body"] for r in by_5x) == sorted(f"body-{i}" for i in range(8))
    wait_until("the group caught up after the 5.x acks", caught_up, timeout=15)

    java.produce(grpc_topic, 6, keys=True, start=8)
    by_4x = java.push_consume(grpc_topic, group, 6, timeout_s=60).of("received")
    assert sorted(r["body"] for r in by_4x) == sorted(f"body-{i}" for i in range(8, 14))
    wait_until("the group caught up after the 4.x commits", caught_up, timeout=15)
    assert py5.consume(grpc_topic, group, 1, "--timeout", 4).of("received") == []

    sent = py5.produce(grpc_topic, 3, "--body-prefix", "after").of("sent")
    again = py5.consume(grpc_topic, group, 3, "--mode", "ack").of("received")
    assert sorted(r["message_id"] for r in again) == sorted(s["message_id"] for s in sent)


def _metric(broker: Broker, name: str) -> float:
    for line in broker.metrics().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


# -- aclEnable: the client's MQv2-HMAC-SHA1 signatures against the broker's plain ACL ---------------

def test_with_acl_a_signed_client_sends_and_receives(client_python: Path, grpc_acl_broker: Broker,
                                                     tmp_path: Path) -> None:
    py5 = Py5Client(client_python, tmp_path, grpc_acl_broker.grpc_endpoint)
    keys = ("--access-key", grpc5_accounts.WRITER[0], "--secret-key", grpc5_accounts.WRITER[1])
    sent = py5.produce(grpc5_accounts.TOPIC, 3, "--body-prefix", "acl", *keys).of("sent")
    run = py5.consume(grpc5_accounts.TOPIC, "GroupAcl", 3, "--mode", "ack", *keys)
    assert sorted(r["message_id"] for r in run.of("received")) == sorted(s["message_id"] for s in sent)
    assert len(run.of("acked")) == 3


def test_with_acl_a_wrong_secret_is_refused(client_python: Path, grpc_acl_broker: Broker, tmp_path: Path) -> None:
    py5 = Py5Client(client_python, tmp_path, grpc_acl_broker.grpc_endpoint)
    run = py5.run("produce", py5.endpoint, grpc5_accounts.TOPIC, 1, "--access-key", grpc5_accounts.WRITER[0],
                  "--secret-key", "not-the-secret", check=False, timeout=90)
    assert run.returncode != 0 and not run.of("sent"), run
    log = py5.client_log()
    assert "StatusCode.UNAUTHENTICATED" in log, log[-3000:]
    assert f"Check signature failed for accessKey={grpc5_accounts.WRITER[0]}" in log, log[-3000:]


def test_with_acl_an_account_without_pub_cannot_send(client_python: Path, grpc_acl_broker: Broker,
                                                     tmp_path: Path) -> None:
    """The reader account may read the topic, not write it: its route is served, its send refused."""
    py5 = Py5Client(client_python, tmp_path, grpc_acl_broker.grpc_endpoint)
    run = py5.run("produce", py5.endpoint, grpc5_accounts.TOPIC, 1, "--access-key", grpc5_accounts.READER[0],
                  "--secret-key", grpc5_accounts.READER[1], check=False, timeout=90)
    assert run.returncode != 0 and not run.of("sent"), run
    error = str(run.of("error"))
    assert "StatusCode.PERMISSION_DENIED" in error, run
    assert f"No default permission for topic:{grpc5_accounts.TOPIC}" in error, run
    assert f"update topic:{grpc5_accounts.TOPIC} route" in py5.client_log()
