"""The real RocketMQ 4.9.8 Java client (unmodified, through tests/support/drivers/java4) against our broker.

One ``rocketstore broker`` process serves the module (see conftest.py: its recording proxy shows
what the client sent). Every scenario runs twice, once per remoting header encoding the Java
client can speak: JSON (its default) and ROCKETMQ (``-Drocketmq.serialize.type=ROCKETMQ``,
binary headers). Topics and groups carry the encoding's name, so the two runs never meet.

What the client reports is checked against what was sent: bodies, keys, tags, queue ids, queue
offsets, offset message ids, and the consumer offsets the broker stores.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
from java_rocketmq import ClientDriver
from recording_broker import RocketStoreBroker, java_driver

from rocketstore.common.message import SysFlag
from rocketstore.remoting.body import LockBatchResponseBody
from rocketstore.remoting.codes import RequestCode, ResponseCode, SerializeType

pytestmark = pytest.mark.integration

COUNT = 40
TAGS = ("TagA", "TagB")
LARGE = 64 * 1024
ENCODINGS = {"JSON": SerializeType.JSON, "ROCKETMQ": SerializeType.ROCKETMQ}


@dataclass
class Java:
    """The Java driver for one header encoding; ``name(prefix)`` makes names unique to it."""

    driver: ClientDriver
    encoding: str
    broker: RocketStoreBroker

    def name(self, prefix: str) -> str:
        return f"{prefix}_{self.encoding}"


@pytest.fixture(scope="module", params=list(ENCODINGS))
def java(request: pytest.FixtureRequest, java_client_built: None, rocketstore_broker: RocketStoreBroker,
         tmp_path_factory: pytest.TempPathFactory) -> Java:
    encoding: str = request.param
    driver = java_driver(rocketstore_broker, tmp_path_factory.mktemp(f"java-{encoding}"),
                         serialize_type=None if encoding == "JSON" else encoding)
    return Java(driver, encoding, rocketstore_broker)


Sent = list[dict[str, Any]]


@pytest.fixture(scope="module")
def produced(java: Java) -> Iterator[dict[str, tuple[str, Sent]]]:
    """Every topic the tests consume, produced at once (JVM starts dominate; they overlap here).

    sync: COUNT messages with keys key-<i> and tags TagA/TagB; async, oneway, batch: COUNT with
    keys; large: 3 bodies of 64 KiB; retry, dlq, orderly: 5, 3 and 8 messages with keys; delayed:
    6 with keys and delay level 2 (5 s).
    """
    plan: dict[str, tuple[str, dict[str, Any]]] = {
        "sync": (java.name("Sync"), {"count": COUNT, "mode": "sync", "keys": True, "tags": TAGS}),
        "async": (java.name("Async"), {"count": COUNT, "mode": "async", "keys": True}),
        "oneway": (java.name("Oneway"), {"count": COUNT, "mode": "oneway", "keys": True}),
        "batch": (java.name("Batch"), {"count": COUNT, "mode": "batch", "keys": True}),
        "large": (java.name("Large"), {"count": 3, "size": LARGE}),
        "retry": (java.name("Retry"), {"count": 5, "keys": True}),
        "dlq": (java.name("Dlq"), {"count": 3, "keys": True}),
        "orderly": (java.name("Orderly"), {"count": 8}),
        "delayed": (java.name("Delayed"), {"count": 6, "keys": True, "delay_level": 2}),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:  # more JVMs than cores starve each other's timeouts
        futures = {what: pool.submit(java.driver.produce, topic, **kw) for what, (topic, kw) in plan.items()}
        results = {what: f.result() for what, f in futures.items()}
    out = {}
    for what, result in results.items():
        assert result.summary["failed"] == 0, (what, result.errors)
        out[what] = (plan[what][0], result.of("sent"))
    yield out


# -- helpers ----------------------------------------------------------------------------------------


def _decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int, int]:
    """An IPv4 offsetMsgId: 4 address bytes, 4 port bytes, 8 bytes of CommitLog offset."""
    raw = bytes.fromhex(offset_msg_id)
    assert len(raw) == 16, offset_msg_id
    return ".".join(str(b) for b in raw[:4]), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")


def _assert_dense_offsets(lines: Sent) -> None:
    """Per queue the queue offsets are exactly 0..n-1 (a fresh topic)."""
    per_queue: dict[int, list[int]] = defaultdict(list)
    for line in lines:
        per_queue[line["queueId"]].append(line["queueOffset"])
    for queue_id, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {queue_id}: {sorted(offsets)}"


def _assert_same_messages(sent: Sent, got: Sent, topic: str) -> None:
    """Every sent message is stored once and came back with its body, key, tag and send-time position.

    The same record may be handed out twice by the client (DefaultLitePullConsumer's seek can race
    its first pull; RocketMQ's contract is at-least-once), so what must be unique is the stored
    position of each message id: a message stored twice would sit at two queue offsets.
    """
    ids = [line["msgId"] for line in got]
    positions: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for line in got:
        positions[line["msgId"]].add((line["queueId"], line["queueOffset"]))
    assert not [i for i, p in positions.items() if len(p) > 1], "a message was stored twice"
    assert set(ids) == {line["msgId"] for line in sent}
    by_id = {line["msgId"]: line for line in sent}
    for line in got:
        s = by_id[line["msgId"]]
        assert (line["body"], line["keys"], line["tags"], line["topic"]) == (s["body"], s["key"], s["tag"], topic)
        assert (line["queueId"], line["queueOffset"], line["offsetMsgId"]) == (
            s["queueId"], s["queueOffset"], s["offsetMsgId"])
        assert line["reconsumeTimes"] == 0


def _per_queue_counts(sent: Sent) -> dict[int, int]:
    return dict(Counter(line["queueId"] for line in sent))


# -- producing --------------------------------------------------------------------------------------


def test_sync_send_results_name_our_broker_and_dense_positions(java: Java,
                                                               produced: dict[str, tuple[str, Sent]]) -> None:
    _, sent = produced["sync"]
    assert [line["status"] for line in sent] == ["SEND_OK"] * COUNT
    assert [(line["body"], line["key"], line["tag"]) for line in sent] == [
        (f"body-{i}", f"key-{i}", TAGS[i % 2]) for i in range(COUNT)]
    assert len({line["msgId"] for line in sent}) == COUNT
    assert {line["brokerName"] for line in sent} == {java.broker.name}
    assert len({line["queueId"] for line in sent}) == 4  # the client round-robins the 4 auto-created queues
    _assert_dense_offsets(sent)
    # offsetMsgId = the published store address + the CommitLog offset; one sync producer's
    # messages are written in order
    decoded = [_decode_offset_msg_id(line["offsetMsgId"]) for line in sent]
    assert {(host, port) for host, port, _ in decoded} == {("127.0.0.1", java.broker.port)}
    offsets = [commit_offset for _, _, commit_offset in decoded]
    assert offsets == sorted(set(offsets))


@pytest.mark.parametrize("mode", ["async", "oneway", "batch"])
def test_other_send_modes_store_every_message(mode: str, java: Java, produced: dict[str, tuple[str, Sent]],
                                              unique_name: Callable[[str], str]) -> None:
    topic, sent = produced[mode]
    assert sorted(line["body"] for line in sent) == sorted(f"body-{i}" for i in range(COUNT))
    assert len({line["msgId"] for line in sent}) == COUNT
    pulled = java.driver.pull_consume(topic, unique_name("ModePull"), COUNT).of("pulled")
    assert {line["msgId"]: (line["body"], line["keys"]) for line in pulled} == {
        line["msgId"]: (line["body"], line["key"]) for line in sent}
    if mode == "oneway":
        assert {line["status"] for line in sent} == {"ONEWAY"}
        _assert_dense_offsets(pulled)
        return
    assert {line["status"] for line in sent} == {"SEND_OK"}
    _assert_dense_offsets(sent)
    _assert_same_messages(sent, pulled, topic)
    if mode == "batch":
        # a batch of 32 and one of 8: each lands in one queue at consecutive offsets
        for batch in (sent[:32], sent[32:]):
            assert len({line["queueId"] for line in batch}) == 1
            offsets = [line["queueOffset"] for line in batch]
            assert offsets == list(range(offsets[0], offsets[0] + len(batch)))
        # and the client sent them as SEND_BATCH_MESSAGE
        batches = [f for f in java.broker.proxy.requests(RequestCode.SEND_BATCH_MESSAGE)
                   if f.cmd.ext_fields.get("b") == topic]
        assert len(batches) == 2


def test_headers_travel_in_the_chosen_encoding_and_come_back_in_it(java: Java,
                                                                  produced: dict[str, tuple[str, Sent]]) -> None:
    """The client sent SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (short header names) in the encoding
    under test, and every answer came back SUCCESS in that same encoding."""
    proxy = java.broker.proxy
    want = ENCODINGS[java.encoding]
    ours = {topic for topic, _ in produced.values()}
    sends = [f for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
             for f in proxy.requests(code) if f.cmd.ext_fields.get("b") in ours]
    assert not [f for f in proxy.requests(RequestCode.SEND_MESSAGE) if f.cmd.ext_fields.get("topic") in ours]
    # sync + async + oneway + 2 batches + large + retry + dlq + orderly (a send retry would add more)
    assert len(sends) >= 3 * COUNT + 2 + 3 + 5 + 3 + 8
    assert {f.cmd.serialize_type for f in sends} == {want}
    assert {f.cmd.ext_fields["a"] for f in sends} == {"client_driver_producer"}  # a = producerGroup
    oneway = [f for f in sends if f.cmd.is_oneway]
    assert len(oneway) == COUNT and {f.cmd.ext_fields["b"] for f in oneway} == {produced["oneway"][0]}
    for f in sends:
        if f.cmd.is_oneway:
            continue
        response = proxy.response_to(f)
        assert response is not None, f.cmd
        assert (response.code, response.serialize_type) == (ResponseCode.SUCCESS, want)
        assert {"msgId", "queueId", "queueOffset"} <= set(response.ext_fields)
    # everything else the producers said to the broker on those connections (heartbeats, the
    # UNREGISTER_CLIENT of shutdown...) used the same encoding, and so did every answer
    frames = proxy.on_connections({f.conn for f in sends})
    assert {f.cmd.serialize_type for f in frames} == {want}
    unregisters = [f for f in frames if f.outbound and f.cmd.code == RequestCode.UNREGISTER_CLIENT]
    assert len(unregisters) >= len(produced)  # every producer run says goodbye at shutdown
    assert all(proxy.response_to(f) is not None for f in unregisters)


# -- consuming --------------------------------------------------------------------------------------


def test_pull_consume_reads_everything_and_the_broker_keeps_the_offsets(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["sync"]
    group = unique_name("Pull")
    result = java.driver.pull_consume(topic, group, COUNT)
    _assert_same_messages(sent, result.of("pulled"), topic)
    per_queue = _per_queue_counts(sent)
    committed = {line["queueId"]: line for line in result.of("committed")}
    assert set(committed) == set(per_queue)
    for queue_id, n in per_queue.items():
        # committed one past the last message; the client read the same value back from the broker
        assert committed[queue_id]["offset"] == committed[queue_id]["brokerOffset"] == n
    assert java.broker.committed_offsets(group, topic) == per_queue


def test_push_consume_receives_everything_and_commits_on_shutdown(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["sync"]
    group = unique_name("Push")
    result = java.driver.push_consume(topic, group, COUNT)
    received = result.of("received")
    assert {line["status"] for line in received} == {"CONSUME_SUCCESS"}
    _assert_same_messages(sent, received, topic)
    assert result.summary["consumed"] == COUNT and result.summary["timedOut"] is False
    # DefaultMQPushConsumer.shutdown() persisted its offsets (one-way UPDATE_CONSUMER_OFFSET)
    java.broker.wait_committed_offsets(group, topic, _per_queue_counts(sent))
    # push consumers long-poll: PULL_MESSAGE with the SUSPEND flag and a suspend timeout
    pulls = [f.cmd for f in java.broker.proxy.requests(RequestCode.PULL_MESSAGE)
             if f.cmd.ext_fields.get("consumerGroup") == group]
    assert pulls and all(int(p.ext_fields["sysFlag"]) & 0x2 for p in pulls)
    assert {p.ext_fields["suspendTimeoutMillis"] for p in pulls} == {"15000"}


def test_push_consume_filters_by_tag(java: Java, produced: dict[str, tuple[str, Sent]],
                                     unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["sync"]
    tag_a = [line for line in sent if line["tag"] == "TagA"]
    result = java.driver.push_consume(topic, unique_name("Tag"), len(tag_a), tags="TagA", linger_ms=1000)
    _assert_same_messages(tag_a, result.of("received"), topic)


def test_query_by_key_by_client_msg_id_and_by_offset_msg_id(java: Java,
                                                            produced: dict[str, tuple[str, Sent]]) -> None:
    topic, sent = produced["sync"]
    target = sent[7]
    with ThreadPoolExecutor(max_workers=3) as pool:
        by_key_f = pool.submit(java.driver.query, topic, key="key-7")
        by_uniq_f = pool.submit(java.driver.query, topic, uniq_key=target["msgId"])
        by_offset_f = pool.submit(java.driver.query, topic, offset_msg_id=target["offsetMsgId"])
        by_key, by_uniq, by_offset = (f.result().of("found") for f in (by_key_f, by_uniq_f, by_offset_f))
    assert [(m["msgId"], m["body"], m["keys"], m["tags"], m["queueId"], m["queueOffset"]) for m in by_key] == [
        (target["msgId"], "body-7", "key-7", target["tag"], target["queueId"], target["queueOffset"])]
    assert [(m["msgId"], m["body"], m["offsetMsgId"]) for m in by_uniq] == [
        (target["msgId"], "body-7", target["offsetMsgId"])]
    assert [(m["msgId"], m["offsetMsgId"], m["body"]) for m in by_offset] == [
        (target["msgId"], target["offsetMsgId"], "body-7")]


def test_query_for_a_missing_key_finds_nothing(java: Java, produced: dict[str, tuple[str, Sent]]) -> None:
    topic, _ = produced["sync"]
    result = java.driver.query(topic, key="no-such-key", timeout_s=6, check=False)
    assert result.returncode == 1
    assert result.of("found") == [] and result.summary["found"] == 0


def test_failing_listener_gets_each_message_again_with_reconsume_times_1(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["retry"]
    group = unique_name("Retry")
    result = java.driver.push_consume(topic, group, len(sent), fail_times=1, retry_delay_level=1)
    deliveries: dict[str, Sent] = defaultdict(list)
    for line in result.of("received"):
        deliveries[line["msgId"]].append(line)
    by_id = {line["msgId"]: line for line in sent}
    assert set(deliveries) == set(by_id)
    for msg_id, seen in deliveries.items():
        assert [(d["delivery"], d["reconsumeTimes"], d["status"]) for d in seen] == [
            (1, 0, "RECONSUME_LATER"), (2, 1, "CONSUME_SUCCESS")]
        first, retry = seen
        # backed off: the retry waited its delay level (1 = 1 s) on the broker before it came back
        assert retry["storeTimestamp"] >= first["storeTimestamp"] + 1000, (first, retry)
        # the retry is a new record in %RETRY%<group>, shown under the original topic, same id/body/key
        assert (retry["topic"], retry["body"], retry["keys"]) == (topic, by_id[msg_id]["body"], by_id[msg_id]["key"])
        assert first["offsetMsgId"] == by_id[msg_id]["offsetMsgId"] != retry["offsetMsgId"]
    assert result.summary["deliveries"] == 2 * len(sent)
    send_backs = [f for f in java.broker.proxy.requests(RequestCode.CONSUMER_SEND_MSG_BACK)
                  if f.cmd.ext_fields.get("group") == group]
    assert len(send_backs) == len(sent)
    for f in send_backs:
        response = java.broker.proxy.response_to(f)
        assert response is not None and response.code == ResponseCode.SUCCESS, response


def test_delayed_messages_arrive_when_their_level_is_due(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["delayed"]
    result = java.driver.push_consume(topic, unique_name("Delayed"), len(sent))
    got = {line["msgId"]: line for line in result.of("received")}
    assert set(got) == {line["msgId"] for line in sent}
    for line in sent:
        msg = got[line["msgId"]]
        assert (msg["topic"], msg["body"], msg["keys"]) == (topic, line["body"], line["key"])
        # level 2 of the default table is 5 s: stored on the topic no earlier than that after the send
        assert msg["storeTimestamp"] >= msg["bornTimestamp"] + 5000, msg
        assert msg["storeTimestamp"] <= msg["bornTimestamp"] + 5000 + 2000, msg


def test_max_reconsume_moves_messages_to_the_dead_letter_queue(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["dlq"]
    group = unique_name("Dlq")
    # never succeeds; the first retry has reconsumeTimes 1 = the maximum, so its failure goes to %DLQ%
    result = java.driver.push_consume(topic, group, len(sent), fail_times=100, max_reconsume=1,
                                      retry_delay_level=1, timeout_s=6, check=False)
    assert result.returncode == 1 and result.summary["timedOut"] is True
    per_message = Counter((line["msgId"], line["reconsumeTimes"]) for line in result.of("received"))
    assert per_message == Counter({(line["msgId"], times): 1 for line in sent for times in (0, 1)})
    dlq = f"%DLQ%{group}"
    with ThreadPoolExecutor(max_workers=3) as pool:
        found = list(pool.map(lambda i: java.driver.query(dlq, key=f"key-{i}").of("found"), range(len(sent))))
    assert [[(m["msgId"], m["body"], m["topic"]) for m in f] for f in found] == [
        [(line["msgId"], line["body"], dlq)] for line in sent]


def test_orderly_consumer_locks_queues_and_keeps_their_order(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["orderly"]
    group = unique_name("Orderly")
    result = java.driver.push_consume(topic, group, len(sent), orderly=True, fail_times=1)
    per_queue: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for line in result.of("received"):
        per_queue[line["queueId"]].append((line["queueOffset"], line["reconsumeTimes"], line["status"]))
    counts = _per_queue_counts(sent)
    assert set(per_queue) == set(counts)
    for queue_id, seen in per_queue.items():
        # a failed message is retried in place (the client counts reconsumeTimes) before the queue moves on
        assert seen == [(offset, times, status) for offset in range(counts[queue_id])
                        for times, status in ((0, "RECONSUME_LATER"), (1, "CONSUME_SUCCESS"))], queue_id
    # the queues were locked through LOCK_BATCH_MQ and the broker granted them
    proxy = java.broker.proxy
    locks = [f for f in proxy.requests(RequestCode.LOCK_BATCH_MQ) if group.encode() in f.cmd.body]
    assert locks
    granted = {(mq.topic, mq.queue_id) for f in locks if (r := proxy.response_to(f)) is not None and r.code == 0
               for mq in LockBatchResponseBody.decode(r.body).lock_ok_mq_set}
    assert {(topic, queue_id) for queue_id in counts} <= granted


def test_large_bodies_travel_compressed_and_come_back_whole(
        java: Java, produced: dict[str, tuple[str, Sent]], unique_name: Callable[[str], str]) -> None:
    topic, sent = produced["large"]
    assert [len(line["body"]) for line in sent] == [LARGE] * 3
    pulled = java.driver.pull_consume(topic, unique_name("Large"), 3).of("pulled")
    assert {line["msgId"]: line["body"] for line in pulled} == {line["msgId"]: line["body"] for line in sent}
    # over 4 KiB the client zips the body and sets COMPRESSED in sysFlag (header field f)
    sends = [f.cmd for f in java.broker.proxy.requests(RequestCode.SEND_MESSAGE_V2) if f.cmd.ext_fields["b"] == topic]
    assert len(sends) == 3
    assert all(int(cmd.ext_fields["f"]) & SysFlag.COMPRESSED and len(cmd.body) < LARGE // 8 for cmd in sends)


def test_push_consumer_started_before_the_topic_exists_gets_live_messages(
        java_client_built: None, rocketstore_broker: RocketStoreBroker, tmp_path_factory: pytest.TempPathFactory,
        unique_name: Callable[[str], str]) -> None:
    """Long polling: the consumer's held pulls are answered as the messages arrive (JSON only)."""
    driver = java_driver(rocketstore_broker, tmp_path_factory.mktemp("java-live"))
    topic = unique_name("Live")
    consumer = driver.start_push_consume(topic, unique_name("LiveGroup"), 20, timeout_s=60)
    try:
        consumer.wait_started()  # it starts and finds no route; it heartbeats every second
        sent = driver.produce(topic, 20, keys=True, tags=TAGS).of("sent")
        result = consumer.wait(timeout=120)
    finally:
        consumer.kill()
    _assert_same_messages(sent, result.of("received"), topic)
