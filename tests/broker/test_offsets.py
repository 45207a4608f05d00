"""Consumer offsets (14, 15, 43) and queue offsets (29-32) against a real broker."""

from __future__ import annotations

import json
import time

import pytest
from inprocess_broker import BrokerHandle, RawClient

from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


def _q(topic: str, queue_id: int = 0, **extra: str) -> dict[str, str]:
    return {"topic": topic, "queueId": str(queue_id), **extra}


def _fill(broker: BrokerHandle, client: RawClient, topic: str, n: int) -> None:
    for i in range(n):
        assert client.send_message(topic, f"m{i}".encode()).code == ResponseCode.SUCCESS
    broker.wait_dispatched()


def test_update_then_query_and_persist_across_restart(broker_factory, tmp_path) -> None:
    root = tmp_path / "store"
    broker = broker_factory(root)
    client = broker.client()
    _fill(broker, client, "TopicOff", 3)
    client.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, _q("TopicOff", consumerGroup="CG", commitOffset="2"))
    acked = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, _q("TopicOff", 1, consumerGroup="CG", commitOffset="0"))
    assert acked.code == ResponseCode.SUCCESS  # after the one-way on the same connection
    resp = client.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("TopicOff", consumerGroup="CG"))
    assert (resp.code, resp.ext_fields) == (ResponseCode.SUCCESS, {"offset": "2"})

    all_offsets = client.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert json.loads(all_offsets.body)["offsetTable"]["TopicOff@CG"] == {"0": 2, "1": 0}

    broker.stop()
    saved = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["TopicOff@CG"] == {"0": 2, "1": 0}
    again = broker_factory(root)
    resp = again.client().call(RequestCode.QUERY_CONSUMER_OFFSET, _q("TopicOff", consumerGroup="CG"))
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "2")


def test_query_without_committed_offset(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicNew", 2)
    # a new group on a queue that still starts at 0, its first message in memory: start at 0
    resp = client.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("TopicNew", consumerGroup="Fresh"))
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    # a queue never written behaves the same (min offset <= 0, nothing in disk)
    resp = client.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("TopicNew", 3, consumerGroup="Fresh"))
    assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")


def test_query_not_found_when_first_message_is_in_disk(broker_factory) -> None:
    # accessMessageInMemoryMaxRatio=0: every message behind the CommitLog head counts as "in disk",
    # so RocketMQ answers QUERY_NOT_FOUND and the client applies consumeFromWhere
    broker = broker_factory(access_message_in_memory_max_ratio=0)
    client = broker.client()
    _fill(broker, client, "TopicDisk", 2)
    resp = client.call(RequestCode.QUERY_CONSUMER_OFFSET, _q("TopicDisk", consumerGroup="Fresh"))
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert "Not found" in (resp.remark or "")


def test_queue_offsets_and_times(broker: BrokerHandle, client: RawClient) -> None:
    before = int(time.time() * 1000) - 1
    _fill(broker, client, "TopicQ", 3)
    max_off = client.call(RequestCode.GET_MAX_OFFSET, _q("TopicQ"))
    min_off = client.call(RequestCode.GET_MIN_OFFSET, _q("TopicQ"))
    assert (max_off.code, max_off.ext_fields) == (ResponseCode.SUCCESS, {"offset": "3"})
    assert (min_off.code, min_off.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
    # a queue never written: RocketMQ answers 0 for both
    assert client.call(RequestCode.GET_MAX_OFFSET, _q("TopicQ", 2)).ext_fields["offset"] == "0"
    assert client.call(RequestCode.GET_MIN_OFFSET, _q("TopicQ", 2)).ext_fields["offset"] == "0"
    earliest = client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, _q("TopicQ"))
    stored_at = int(earliest.ext_fields["timestamp"])
    assert earliest.code == ResponseCode.SUCCESS and before <= stored_at <= int(time.time() * 1000)
    by_time = client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, _q("TopicQ", timestamp=str(before)))
    assert (by_time.code, by_time.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
    future = client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, _q("TopicQ", timestamp=str(stored_at + 3_600_000)))
    assert future.ext_fields["offset"] == "2"  # RocketMQ's search lands on the last message, not past it


def test_all_offsets_of_a_broker_without_offsets_is_an_empty_table(client: RawClient) -> None:
    # 4.9.7's getAllConsumerOffset answers encode()'s text, never empty: SlaveSynchronize of a
    # master no consumer has committed to yet succeeds
    resp = client.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert resp.code == ResponseCode.SUCCESS
    assert json.loads(resp.body) == {"offsetTable": {}}
