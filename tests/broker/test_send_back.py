"""CONSUMER_SEND_MSG_BACK: retry topic with back-off, reconsume counting and the dead-letter queue."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.broker.processor.send_back import build_send_back_message
from rocketstore.common.message import HostAddress, StoredMessage, create_message_id, decode_message_id
from rocketstore.remoting.codes import RequestCode, ResponseCode


def _send_back(client: RawClient, offset: int, *, group: str = "CG", delay: int = 0,
               max_reconsume: int | None = None) -> object:
    fields = {"offset": str(offset), "group": group, "delayLevel": str(delay), "originTopic": "TopicSB"}
    if max_reconsume is not None:
        fields["maxReconsumeTimes"] = str(max_reconsume)
    return client.call(RequestCode.CONSUMER_SEND_MSG_BACK, fields)


def _only(client: RawClient, topic: str, offset: int = 0, *, wait_s: float = 0.0) -> StoredMessage:
    """The one message at ``offset`` of queue 0, waiting up to ``wait_s`` for it to arrive."""
    deadline = time.monotonic() + wait_s
    while True:
        resp = client.pull(topic, 0, offset, group="CGread")
        if resp.code == ResponseCode.SUCCESS or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    assert resp.code == ResponseCode.SUCCESS, (topic, resp.code, resp.remark)
    msgs = decode_records(resp.body)
    assert len(msgs) == 1
    return msgs[0]


#: level 3 (the first automatic retry) waits 1 s, level 4 2 s; higher levels clamp to 4
BACK_OFF_LEVELS = "1s 1s 1s 2s"


@pytest.mark.integration
def test_send_back_to_retry_then_dlq(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(message_delay_level=BACK_OFF_LEVELS)
    client = broker.client()
    props = {"TAGS": "t", "KEYS": "k", "UNIQ_KEY": "U1"}
    sent = client.send_message("TopicSB", b"payload", properties=props, flag=5)
    original_id = sent.ext_fields["msgId"]
    _, offset = decode_message_id(original_id)
    broker.wait_dispatched()

    assert _send_back(client, offset, max_reconsume=2).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    retry_config = broker.controller.topic_config_manager.get("%RETRY%CG")
    assert retry_config is not None and retry_config.write_queue_nums == 1  # the group's retryQueueNums
    # backed off: held on the schedule topic, queue level-1, for level 3 + reconsumeTimes 0
    held = client.pull("SCHEDULE_TOPIC_XXXX", 2, 0, group="CGread")
    assert held.code == ResponseCode.SUCCESS, (held.code, held.remark)
    [scheduled] = decode_records(held.body)
    assert scheduled.queue_id == 2 and scheduled.properties["DELAY"] == "3"
    assert (scheduled.properties["REAL_TOPIC"], scheduled.properties["REAL_QID"]) == ("%RETRY%CG", "0")
    assert broker.store.get_tags_code("SCHEDULE_TOPIC_XXXX", 2, 0) == scheduled.store_timestamp + 1000
    retry = _only(client, "%RETRY%CG", wait_s=5)
    assert retry.store_timestamp >= scheduled.store_timestamp + 1000  # not before it was due
    assert retry.body == b"payload" and retry.flag == 5 and retry.reconsume_times == 1
    assert retry.properties["RETRY_TOPIC"] == "TopicSB"
    assert retry.properties["ORIGIN_MESSAGE_ID"] == original_id
    assert retry.properties["UNIQ_KEY"] == "U1" and retry.properties["TAGS"] == "t"
    assert retry.properties["WAIT"] == "false" and retry.properties["DELAY"] == "3"  # RocketMQ keeps it
    assert (retry.properties["REAL_TOPIC"], retry.properties["REAL_QID"]) == ("%RETRY%CG", "0")

    # second failure: the retry record goes back again, a level later, still pointing at the first message
    assert _send_back(client, retry.physical_offset, max_reconsume=2).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert client.pull("SCHEDULE_TOPIC_XXXX", 3, 0, group="CGread").code == ResponseCode.SUCCESS
    retry2 = _only(client, "%RETRY%CG", 1, wait_s=6)
    assert retry2.reconsume_times == 2 and retry2.properties["ORIGIN_MESSAGE_ID"] == original_id
    assert retry2.properties["RETRY_TOPIC"] == "TopicSB" and retry2.properties["DELAY"] == "4"
    assert retry2.store_timestamp - retry.store_timestamp >= 2000

    # reconsumeTimes (2) reached maxReconsumeTimes (2): dead letter
    assert _send_back(client, retry2.physical_offset, max_reconsume=2).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    dead = _only(client, "%DLQ%CG")
    assert dead.body == b"payload" and dead.reconsume_times == 3
    assert dead.properties["DELAY"] == "0" and dead.properties["ORIGIN_MESSAGE_ID"] == original_id
    assert client.pull("%RETRY%CG", 0, 2, group="CGread").code == ResponseCode.PULL_NOT_FOUND


@pytest.mark.integration
def test_group_retry_max_times_and_negative_delay(broker: BrokerHandle, client: RawClient) -> None:
    sent = client.send_message("TopicSB", b"x")
    _, offset = decode_message_id(sent.ext_fields["msgId"])
    broker.wait_dispatched()
    # no maxReconsumeTimes in the header: the group's retryMaxTimes (16) applies; 0 < 16 -> retry
    assert _send_back(client, offset, group="G2", delay=1).code == ResponseCode.SUCCESS
    # a negative delay level sends it straight to the DLQ
    assert _send_back(client, offset, group="G3", delay=-1).code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert _only(client, "%RETRY%G2", wait_s=5).reconsume_times == 1  # level 1: 1 s
    assert _only(client, "%DLQ%G3").reconsume_times == 1
    assert broker.controller.topic_config_manager.get("%RETRY%G3") is not None  # created before the DLQ check


@pytest.mark.integration
def test_unknown_offset_is_system_error(client: RawClient) -> None:
    resp = _send_back(client, 123_456)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "look message by offset failed, 123456"


def test_build_keeps_first_origin_id_and_retry_topic() -> None:
    host = HostAddress("10.0.0.1", 10911)
    original = StoredMessage(
        total_size=0, magic=0, body_crc=0, queue_id=0, flag=3, queue_offset=0, physical_offset=4096, sys_flag=0,
        born_timestamp=11, born_host=HostAddress("10.0.0.2", 5555), store_timestamp=12, store_host=host,
        reconsume_times=4, prepared_transaction_offset=0, body=b"b", topic="%RETRY%G",
        properties={"RETRY_TOPIC": "Orig", "ORIGIN_MESSAGE_ID": "FIRST", "DELAY": "7"},
    )
    msg = build_send_back_message(original, "%RETRY%G", 0, to_dlq=False, delay_level=7)
    assert msg.properties["ORIGIN_MESSAGE_ID"] == "FIRST" and msg.properties["RETRY_TOPIC"] == "Orig"
    assert msg.properties["DELAY"] == "7" and msg.reconsume_times == 5
    assert (msg.born_host, msg.store_host, msg.born_timestamp, msg.flag) == (original.born_host, host, 11, 3)
    blank_origin = dataclasses.replace(original, topic="Plain", properties={"ORIGIN_MESSAGE_ID": " "})
    dlq = build_send_back_message(blank_origin, "%DLQ%G", 0, to_dlq=True, delay_level=7)
    assert dlq.properties["ORIGIN_MESSAGE_ID"] == create_message_id(host, 4096)
    assert dlq.properties["RETRY_TOPIC"] == "Plain" and dlq.properties["DELAY"] == "0"
