"""The real RocketMQ 5.x Java client (``org.apache.rocketmq:rocketmq-client-java``, Maven Central, gRPC
v2) against a broker process: producer (normal with tag, keys and properties; FIFO with a message
group; delay with a delivery timestamp; transactional: commit, rollback, and the broker's check of
an unresolved transaction answered by the producer's checker), simple consumer and push consumer.

``java5/`` is a Maven project (Client5Driver.java) built once and run by tests/support/java5_driver.py;
each run is a ``java`` subprocess printing JSON lines. java and mvn are required: under CI (env ``CI``
set) a missing one fails these tests, otherwise they are skipped with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker, plain_acl_broker
from java5_driver import client_log, drive, of, require_java5_driver

from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin, MQAdmin
from rocketstore.common.message import java_string_hash

pytestmark = pytest.mark.integration

QUEUES = 4
#: the module's broker checks half messages older than a second every three seconds (RocketMQ: 6 s /
#: 60 s), so a test sees its unresolved transaction checked within seconds, and a loaded machine has
#: seconds to carry the checker's answer back before the next pass would ask again
FAST_TRANSACTION_CHECKS = "transactionTimeOut=1000\ntransactionCheckInterval=3000\n"
#: a push consumer's messages are invisible 3 s, renewed by 3 s when less than 2 s are left
#: (RocketMQ's proxy: 60 s, 60 s, 10 s), so a listener busy for longer shows the renewal
FAST_AUTO_RENEW = "defaultInvisibleTimeMills=3000\nrenewSliceTimeMillis=3000\nrenewAheadTimeMillis=2000\n"


@pytest.fixture(scope="module")
def java() -> str:
    return require_java5_driver()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("grpc-java5"), FAST_TRANSACTION_CHECKS + FAST_AUTO_RENEW)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic(broker: Broker, request: pytest.FixtureRequest) -> str:
    """A topic of its own per test: a new group starts at the first message of each queue."""
    name = f"J5_{request.node.name.removeprefix('test_')[:40]}"
    with MQAdmin(broker.namesrv) as admin:
        admin.create_topic(name, QUEUES, QUEUES)
    return name


def test_producer_and_simple_consumer(java: str, broker: Broker, topic: str, tmp_path: Path) -> None:
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 5, "plain"), "sent")
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Plain", 5, 30), "received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    for r in received:
        index = r["properties"]["index"]
        assert (r["body"], r["tag"], r["keys"], r["attempt"]) == (f"plain-{index}", "TagJ", [f"plain-key-{index}"], 1)
        assert r["properties"] == {"index": index}
    assert of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Plain", 1, 3), "received") == []


def test_fifo_messages_of_a_group_share_one_queue_in_order(java: str, broker: Broker, topic: str,
                                                           tmp_path: Path) -> None:
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 6, "fifo", "fifo", "order-7"), "sent")
    assert len(sent) == 6
    queue = java_string_hash("order-7") % QUEUES
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Fifo", 6, 30), "received")
    # all in one queue, so one consumer reads them in the order sent (pop does not yet hold a group's
    # next message back until the previous one is acked: that is FIFO consumption, not done)
    assert [r["body"] for r in received] == [f"fifo-{i}" for i in range(6)]
    assert {r["message_group"] for r in received} == {"order-7"}
    with MQAdmin(broker.namesrv) as admin:
        stats = admin.broker(broker.addr).topic_stats(topic)
    assert [s.max_offset for s in stats if s.queue.queue_id == queue] == [6]


def test_a_delayed_message_arrives_at_its_delivery_time(java: str, broker: Broker, topic: str,
                                                        tmp_path: Path) -> None:
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 1, "late", "delay", 3000), "sent")
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Delay", 1, 20), "received")
    assert [r["body"] for r in received] == ["late-0"]
    # not before it was due: the timestamp the message carries, not the send's return (a first send,
    # which looks up the route, can take longer than the tolerance on a busy machine)
    assert sent[0]["deliver_at_ms"] - 3000 <= sent[0]["at_ms"]  # stamped as the send began
    assert received[0]["at_ms"] >= sent[0]["deliver_at_ms"] - 100


def metric(broker: Broker, name: str) -> float:
    """A sample without labels from the broker's /metrics page."""
    for line in broker.metrics().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not on /metrics")


def test_transactions_commit_delivers_rollback_never(java: str, broker: Broker, topic: str, tmp_path: Path) -> None:
    before = {name: metric(broker, f"rocketstore_transaction_{name}_total")
              for name in ("half_messages", "commits", "rollbacks")}
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "transact", topic, 0, "commit", "rollback", "commit"), "sent")
    assert [s["ending"] for s in sent] == ["commit", "rollback", "commit"]
    # a consumer asks for one more than can come: the rolled-back message must not arrive
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Txn", 3, 8), "received")
    committed = {s["message_id"] for s in sent if s["ending"] == "commit"}
    assert sorted(r["message_id"] for r in received) == sorted(committed)
    assert sorted(r["body"] for r in received) == ["txn-0-commit", "txn-2-commit"]
    assert all(r["properties"]["index"] in ("0", "2") and r["attempt"] == 1 for r in received)
    # the broker's transaction counters count gRPC transactions as they count 4.x ones
    after = {name: metric(broker, f"rocketstore_transaction_{name}_total") for name in before}
    assert {name: after[name] - before[name] for name in before} == {"half_messages": 3, "commits": 2,
                                                                    "rollbacks": 1}


def test_an_unresolved_transaction_is_checked_and_the_checkers_answer_applied(
        java: str, broker: Broker, topic: str, tmp_path: Path) -> None:
    """Two transactions left open: the broker's check pass finds them and asks the producer over its
    Telemetry stream (RecoverOrphanedTransactionCommand); the checker commits one, rolls back the other."""
    checks_before = metric(broker, "rocketstore_transaction_checks_total")
    lines = drive(java, broker.grpc_endpoint, tmp_path, "transact", topic, 30, "open-commit", "open-rollback",
                  timeout=90)
    sent = {s["ending"]: s for s in of(lines, "sent")}
    checked = of(lines, "checked")
    assert of(lines, "done")[0]["unchecked"] == [], lines
    assert {c["message_id"]: c["answer"] for c in checked} == {
        sent["open-commit"]["message_id"]: "commit", sent["open-rollback"]["message_id"]: "rollback"}
    # the checker sees each message as it was sent
    assert {(c["body"], c["tag"], tuple(c["keys"]), c["properties"]["index"]) for c in checked} == {
        ("txn-0-open-commit", "TagT", ("txn-key-0",), "0"), ("txn-1-open-rollback", "TagT", ("txn-key-1",), "1")}
    assert metric(broker, "rocketstore_transaction_checks_total") >= checks_before + 2
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5TxnCheck", 2, 8), "received")
    assert [r["body"] for r in received] == ["txn-0-open-commit"]


def test_push_consumer_consumes_every_message(java: str, broker: Broker, topic: str, tmp_path: Path) -> None:
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 8, "push"), "sent")
    lines = drive(java, broker.grpc_endpoint, tmp_path, "push", topic, "J5Push", 8, 30)
    received = of(lines, "received")
    assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
    assert {r["attempt"] for r in received} == {1}
    # all were acked: the group gets nothing more
    assert of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5Push", 1, 3), "received") == []


def test_push_consumer_failure_is_delivered_again_with_a_higher_attempt(java: str, broker: Broker, topic: str,
                                                                        tmp_path: Path) -> None:
    """The listener answers FAILURE to each first delivery: the client sets the message's invisible
    time to its retry policy's first backoff (ChangeInvisibleDuration), and it comes back as attempt 2."""
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 2, "again"), "sent")
    received = of(drive(java, broker.grpc_endpoint, tmp_path, "push", topic, "J5PushRetry", 4, 60, "true", timeout=90),
                  "received")
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in received:
        by_id.setdefault(r["message_id"], []).append(r)
    assert sorted(by_id) == sorted(s["message_id"] for s in sent)
    for deliveries in by_id.values():
        assert [(d["attempt"], d["result"]) for d in deliveries] == [(1, "FAILURE"), (2, "SUCCESS")]
        assert deliveries[1]["at_ms"] - deliveries[0]["at_ms"] >= 9_000  # the first backoff: 10 s
    assert of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5PushRetry", 1, 3), "received") == []


def test_push_consumer_busy_past_the_invisible_time_gets_each_message_once(java: str, broker: Broker, topic: str,
                                                                         tmp_path: Path) -> None:
    """The listener takes 8 s per message, the message is invisible 3 s: the broker renews it while
    the client consumes (auto renew), so it is not delivered again, and the client's ack with the
    handle it received (renewed since) consumes it."""
    sent = of(drive(java, broker.grpc_endpoint, tmp_path, "produce", topic, 1, "busy"), "sent")
    lines = drive(java, broker.grpc_endpoint, tmp_path, "push", topic, "J5PushBusy", 2, 14, "false", 8000, timeout=90)
    received = of(lines, "received")
    assert [(r["message_id"], r["attempt"]) for r in received] == [(sent[0]["message_id"], 1)]
    assert of(drive(java, broker.grpc_endpoint, tmp_path, "consume", topic, "J5PushBusy", 1, 5), "received") == []


def test_with_acl_signed_calls_are_checked(java: str, tmp_path_factory: pytest.TempPathFactory,
                                           tmp_path: Path) -> None:
    """aclEnable: the Java client's signatures (upper-case hex) verify for an account with the
    permission; a wrong secret and an account without PUB on the topic cannot send."""
    b = plain_acl_broker(tmp_path_factory.mktemp("grpc-java5-acl"),
        "accounts:\n"
        "- {accessKey: J5Writer, secretKey: writer-secret, defaultTopicPerm: DENY, defaultGroupPerm: SUB,"
        " topicPerms: [J5AclTopic=PUB|SUB]}\n"
        "- {accessKey: J5Reader, secretKey: reader-secret, defaultTopicPerm: DENY, topicPerms: [J5AclTopic=SUB]}\n"
        "- {accessKey: J5Admin1, secretKey: admin-secret, admin: true}\n")
    b.start()
    try:
        with BrokerAdmin(b.addr, rpc_hook=AclClientRPCHook(SessionCredentials("J5Admin1", "admin-secret"))) as admin:
            admin.create_topic("J5AclTopic", QUEUES, QUEUES)
        writer = ("J5Writer", "writer-secret")
        endpoint = b.grpc_endpoint
        sent = of(drive(java, endpoint, tmp_path, "produce", "J5AclTopic", 3, "acl", credentials=writer), "sent")
        received = of(drive(java, endpoint, tmp_path, "consume", "J5AclTopic", "J5AclGroup", 3, 30, credentials=writer),
                      "received")
        assert sorted(r["message_id"] for r in received) == sorted(s["message_id"] for s in sent)
        for wrong, reason in ((("J5Writer", "not-the-secret"), "Check signature failed for accessKey=J5Writer"),
                              (("J5Reader", "reader-secret"), "No default permission for topic:J5AclTopic")):
            lines = drive(java, endpoint, tmp_path, "produce", "J5AclTopic", 1, "refused", credentials=wrong,
                          check=False)
            assert not of(lines, "sent") and of(lines, "error"), lines
            # the client tells its caller only that it failed to start; its log has the status
            log = client_log(tmp_path).read_text(errors="replace")
            assert reason in log, log[-3000:]
            client_log(tmp_path).unlink()
    finally:
        b.stop()

