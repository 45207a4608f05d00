"""The Java client driver against Apache RocketMQ's own name server and broker.

These tests prove the driver (tests/support/drivers/java4) right before it is pointed at our broker: every
mode runs against RocketMQ 4.9.7's real NamesrvStartup + BrokerStartup (one pair for the module)
with the real rocketmq-client 4.9.8, and what the driver reports is checked for consistency
across modes (what was sent is what push, pull and query return, at the reported positions).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from java_rocketmq import ClientDriver, RocketMQAnchor

pytestmark = pytest.mark.integration

COUNT = 50
TAGS = ("TagA", "TagB")


def _by_id(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["msgId"]: line for line in lines}


def _assert_dense_offsets(lines: list[dict[str, Any]]) -> None:
    """Per queue, the reported queue offsets are exactly 0..n-1 (a fresh topic)."""
    per_queue: dict[int, list[int]] = defaultdict(list)
    for line in lines:
        per_queue[line["queueId"]].append(line["queueOffset"])
    for queue_id, offsets in per_queue.items():
        assert sorted(offsets) == list(range(len(offsets))), f"queue {queue_id}: {sorted(offsets)}"


def _decode_offset_msg_id(offset_msg_id: str) -> tuple[str, int, int]:
    """An offsetMsgId of an IPv4 store host: 4 address bytes, 4 port bytes, 8 commit log offset bytes."""
    raw = bytes.fromhex(offset_msg_id)
    assert len(raw) == 16, offset_msg_id
    return ".".join(str(b) for b in raw[:4]), int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:], "big")


def _assert_same_messages(sent: list[dict[str, Any]], got: list[dict[str, Any]], topic: str) -> None:
    """Every sent message came back once, with its body, key, tag and the position reported at send."""
    ids = [line["msgId"] for line in got]
    assert Counter(ids).most_common(1)[0][1] == 1, "a message was delivered twice"
    assert set(ids) == {line["msgId"] for line in sent}
    sent_by_id = _by_id(sent)
    for line in got:
        s = sent_by_id[line["msgId"]]
        assert (line["body"], line["keys"], line["tags"], line["topic"]) == (s["body"], s["key"], s["tag"], topic)
        assert (line["queueId"], line["queueOffset"]) == (s["queueId"], s["queueOffset"])
        assert line["offsetMsgId"] == s["offsetMsgId"]
        assert line["reconsumeTimes"] == 0


@pytest.fixture(scope="module")
def sync_topic(anchor_client: ClientDriver) -> tuple[str, list[dict[str, Any]]]:
    """50 messages sent synchronously with keys key-<i> and tags TagA/TagB to a fresh topic."""
    topic = "DriverSyncTopic"
    result = anchor_client.produce(topic, COUNT, mode="sync", keys=True, tags=TAGS)
    assert result.summary == {"kind": "summary", "mode": "sync", "count": COUNT, "failed": 0}
    return topic, result.of("sent")


def test_sync_produce_reports_every_send(sync_topic: tuple[str, list[dict[str, Any]]],
                                         rocketmq_anchor: RocketMQAnchor) -> None:
    _, sent = sync_topic
    assert len(sent) == COUNT
    assert {line["status"] for line in sent} == {"SEND_OK"}
    assert [line["body"] for line in sent] == [f"body-{i}" for i in range(COUNT)]
    assert [line["key"] for line in sent] == [f"key-{i}" for i in range(COUNT)]
    assert [line["tag"] for line in sent] == [TAGS[i % 2] for i in range(COUNT)]
    assert len({line["msgId"] for line in sent}) == COUNT
    assert {line["brokerName"] for line in sent} == {rocketmq_anchor.broker_name}
    _assert_dense_offsets(sent)
    # offsetMsgId names the broker's store address and the message's commit log offset; one
    # producer sending synchronously writes them in order.
    decoded = [_decode_offset_msg_id(line["offsetMsgId"]) for line in sent]
    assert {(host, port) for host, port, _ in decoded} == {("127.0.0.1", rocketmq_anchor.broker_port)}
    offsets = [commit_offset for _, _, commit_offset in decoded]
    assert offsets == sorted(offsets) and len(set(offsets)) == COUNT and offsets[0] == 0


def test_push_consume_receives_every_message(sync_topic: tuple[str, list[dict[str, Any]]],
                                             anchor_client: ClientDriver) -> None:
    topic, sent = sync_topic
    result = anchor_client.push_consume(topic, "DriverPushGroup", COUNT, timeout_s=60)
    received = result.of("received")
    assert {line["status"] for line in received} == {"CONSUME_SUCCESS"}
    _assert_same_messages(sent, received, topic)
    assert result.summary["consumed"] == COUNT and result.summary["timedOut"] is False


def test_push_consume_filters_by_tag(sync_topic: tuple[str, list[dict[str, Any]]],
                                     anchor_client: ClientDriver) -> None:
    topic, sent = sync_topic
    tag_a = [line for line in sent if line["tag"] == "TagA"]
    result = anchor_client.push_consume(topic, "DriverTagGroup", len(tag_a), tags="TagA", linger_ms=1000)
    _assert_same_messages(tag_a, result.of("received"), topic)


def test_pull_consume_reads_every_queue_and_commits(sync_topic: tuple[str, list[dict[str, Any]]],
                                                    anchor_client: ClientDriver) -> None:
    topic, sent = sync_topic
    result = anchor_client.pull_consume(topic, "DriverPullGroup", COUNT)
    _assert_same_messages(sent, result.of("pulled"), topic)
    per_queue = Counter(line["queueId"] for line in sent)
    committed = {line["queueId"]: line for line in result.of("committed")}
    assert set(committed) == set(per_queue)
    for queue_id, n in per_queue.items():
        # The broker returns the offset the consumer committed: one past the last message.
        assert committed[queue_id]["offset"] == committed[queue_id]["brokerOffset"] == n


def test_query_by_key_uniq_key_and_offset_msg_id(sync_topic: tuple[str, list[dict[str, Any]]],
                                                 anchor_client: ClientDriver) -> None:
    topic, sent = sync_topic
    target = sent[7]
    by_key = anchor_client.query(topic, key="key-7").of("found")
    assert [(m["msgId"], m["body"], m["keys"], m["tags"]) for m in by_key] == [
        (target["msgId"], "body-7", "key-7", target["tag"])]
    assert (by_key[0]["queueId"], by_key[0]["queueOffset"]) == (target["queueId"], target["queueOffset"])
    by_uniq = anchor_client.query(topic, uniq_key=target["msgId"]).of("found")
    assert [(m["msgId"], m["body"]) for m in by_uniq] == [(target["msgId"], "body-7")]
    by_offset_id = anchor_client.query(topic, offset_msg_id=target["offsetMsgId"]).of("found")
    assert [(m["msgId"], m["offsetMsgId"], m["body"]) for m in by_offset_id] == [
        (target["msgId"], target["offsetMsgId"], "body-7")]


def test_query_for_a_missing_key_fails(sync_topic: tuple[str, list[dict[str, Any]]],
                                       anchor_client: ClientDriver) -> None:
    topic, _ = sync_topic
    result = anchor_client.query(topic, key="no-such-key", timeout_s=7, check=False)
    assert result.returncode == 1
    assert result.of("found") == [] and result.summary["found"] == 0


@pytest.mark.parametrize("mode", ["async", "oneway", "batch"])
def test_other_send_modes_store_every_message(mode: str, anchor_client: ClientDriver,
                                              unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Mode")
    count = 40  # batch: one list of 32 and one of 8
    result = anchor_client.produce(topic, count, mode=mode, keys=True)
    assert result.summary["failed"] == 0
    sent = result.of("sent")
    assert sorted(line["body"] for line in sent) == sorted(f"body-{i}" for i in range(count))
    assert len({line["msgId"] for line in sent}) == count
    pulled = anchor_client.pull_consume(topic, unique_name("ModePull"), count).of("pulled")
    assert {line["msgId"]: line["body"] for line in pulled} == {line["msgId"]: line["body"] for line in sent}
    if mode == "oneway":
        assert {line["status"] for line in sent} == {"ONEWAY"}
        return
    assert {line["status"] for line in sent} == {"SEND_OK"}
    _assert_dense_offsets(sent)
    _assert_same_messages(sent, pulled, topic)  # includes the positions the driver computed
    if mode == "batch":
        # A batch goes to one queue, in order.
        first, second = sent[:32], sent[32:]
        for batch in (first, second):
            assert len({line["queueId"] for line in batch}) == 1
            offsets = [line["queueOffset"] for line in batch]
            assert offsets == list(range(offsets[0], offsets[0] + len(batch)))


def test_large_bodies_travel_compressed_and_come_back_whole(anchor_client: ClientDriver,
                                                            unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Large")
    # Over 4 KiB the client zips the body and flags the message COMPRESSED; the consumer unzips it.
    sent = anchor_client.produce(topic, 3, size=64 * 1024).of("sent")
    assert [len(line["body"]) for line in sent] == [64 * 1024] * 3
    pulled = anchor_client.pull_consume(topic, unique_name("LargePull"), 3).of("pulled")
    assert {line["msgId"]: line["body"] for line in pulled} == {line["msgId"]: line["body"] for line in sent}


def test_push_consumer_started_first_gets_live_messages(anchor_client: ClientDriver,
                                                        unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Live")
    consumer = anchor_client.start_push_consume(topic, unique_name("LiveGroup"), 20, timeout_s=60)
    try:
        consumer.wait_started()  # the topic does not exist yet
        sent = anchor_client.produce(topic, 20, keys=True, tags=TAGS).of("sent")
        result = consumer.wait(timeout=120)
    finally:
        consumer.kill()
    _assert_same_messages(sent, result.of("received"), topic)


def test_fail_times_leads_to_redelivery(anchor_client: ClientDriver, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Retry")
    sent = anchor_client.produce(topic, 5, keys=True).of("sent")
    # Delay level 1 (1 s) instead of the broker's default 3 + reconsumeTimes (10 s).
    result = anchor_client.push_consume(topic, unique_name("RetryGroup"), 5, fail_times=1, retry_delay_level=1,
                                        timeout_s=60)
    deliveries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in result.of("received"):
        deliveries[line["msgId"]].append(line)
    assert set(deliveries) == {line["msgId"] for line in sent}
    sent_by_id = _by_id(sent)
    for msg_id, seen in deliveries.items():
        assert [(d["delivery"], d["reconsumeTimes"], d["status"]) for d in seen] == [
            (1, 0, "RECONSUME_LATER"), (2, 1, "CONSUME_SUCCESS")]
        # The retry is a new message in %RETRY%<group>; the client shows it under the original
        # topic with the same client msgId, body and key, at a new commit log position.
        first, retry = seen
        assert retry["topic"] == topic and retry["body"] == sent_by_id[msg_id]["body"]
        assert retry["keys"] == sent_by_id[msg_id]["key"]
        assert first["offsetMsgId"] == sent_by_id[msg_id]["offsetMsgId"] != retry["offsetMsgId"]
    assert result.summary["deliveries"] == 10


def test_max_reconsume_sends_to_dead_letter_queue(anchor_client: ClientDriver,
                                                  unique_name: Callable[[str], str]) -> None:
    topic, group = unique_name("Dlq"), unique_name("DlqGroup")
    sent = anchor_client.produce(topic, 3, keys=True).of("sent")
    # Never succeeds; after the first retry (reconsumeTimes 1 = max) the broker moves it to %DLQ%group.
    result = anchor_client.push_consume(topic, group, 3, fail_times=100, max_reconsume=1, retry_delay_level=1,
                                        timeout_s=8, check=False)
    assert result.returncode == 1 and result.summary["timedOut"] is True
    per_message = Counter((line["msgId"], line["reconsumeTimes"]) for line in result.of("received"))
    assert per_message == Counter({(line["msgId"], times): 1 for line in sent for times in (0, 1)})
    found = anchor_client.query(f"%DLQ%{group}", key="key-1").of("found")
    assert [(m["msgId"], m["body"]) for m in found] == [(sent[1]["msgId"], "body-1")]


def test_orderly_consume_keeps_queue_order_and_retries_locally(anchor_client: ClientDriver,
                                                               unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Orderly")
    sent = anchor_client.produce(topic, 8).of("sent")
    result = anchor_client.push_consume(topic, unique_name("OrderlyGroup"), 8, orderly=True, fail_times=1,
                                        timeout_s=60)
    received = result.of("received")
    per_queue: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
    for line in received:
        per_queue[line["queueId"]].append((line["queueOffset"], line["reconsumeTimes"], line["status"]))
    expected_queues = {line["queueId"] for line in sent}
    assert set(per_queue) == expected_queues
    for queue_id, seen in per_queue.items():
        n = sum(1 for line in sent if line["queueId"] == queue_id)
        # Orderly: a failed message is retried in place (reconsumeTimes counted by the client)
        # before the queue moves on; each message fails once, then succeeds.
        assert seen == [(offset, times, status) for offset in range(n)
                        for times, status in ((0, "RECONSUME_LATER"), (1, "CONSUME_SUCCESS"))], queue_id


def test_bench_produce_and_consume_report_sane_numbers(anchor_client: ClientDriver,
                                                       unique_name: Callable[[str], str]) -> None:
    topic = unique_name("Bench")
    produced = anchor_client.bench_produce(topic, threads=4, size=256, seconds=2)
    assert produced["failed"] == 0 and produced["sent"] > 50
    assert produced["tps"] == pytest.approx(produced["sent"] / produced["seconds"])
    assert 0 < produced["p50_ms"] <= produced["p99_ms"] <= produced["max_ms"]
    total = produced["sent"] + 1  # plus the untimed warm-up send
    consumed = anchor_client.bench_consume(topic, unique_name("BenchGroup"), seconds=30, stop_after=total)
    assert consumed["consumed"] == total
    assert consumed["tps"] > 0 and consumed["seconds"] < 30


def test_bench_produce_warmup_is_sent_but_not_timed(anchor_client: ClientDriver,
                                                    unique_name: Callable[[str], str]) -> None:
    """``--warmup``: the senders run untimed first in the same JVM (the benchmarks' warm client
    JIT); the summary covers the timed part only, and the warm-up's messages are stored too."""
    topic = unique_name("BenchWarm")
    t0 = time.monotonic()
    produced = anchor_client.bench_produce(topic, threads=2, size=256, seconds=1, warmup=2)
    assert time.monotonic() - t0 > 3  # warm-up and timed part both ran
    assert produced["failed"] == 0 and produced["sent"] > 10
    assert produced["seconds"] < 2  # the timed part alone
    # beyond the timed sends and the first untimed send, the warm-up's sends are stored: at least one
    at_least = produced["sent"] + 2
    consumed = anchor_client.bench_consume(topic, unique_name("BenchWarmGroup"), seconds=30, stop_after=at_least)
    assert consumed["consumed"] >= at_least
