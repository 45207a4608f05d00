"""Pure parts of the gRPC v2 endpoint: message conversion, queue permissions, the settings a
Telemetry command is answered with."""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from rocketstore.broker.grpc_v2 import message_convert
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2.message_convert import BadMessage
from rocketstore.broker.grpc_v2.service import queue_permission, settings_answer
from rocketstore.common.message import HostAddress, StoredMessage, SysFlag, java_string_hash
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig


def _sent(**system: Any) -> pb.Message:  # SystemProperties fields of every type
    message = pb.Message(topic=pb.Resource(name="T"), body=b"x", user_properties={"color": "red"},
                         system_properties=pb.SystemProperties(message_id="MID", **system))
    return message


def test_system_properties_are_stored_under_rocketmqs_keys() -> None:
    message = _sent(tag="TagA", keys=["k1", "k2"], message_group="g", trace_context="tc")
    message.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_123)
    assert message_convert.store_properties(message) == {
        "color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "MID", "__SHARDINGKEY": "g",
        "TIMER_DELIVER_MS": "1700000000123", "TRACE_CONTEXT": "tc"}


@pytest.mark.parametrize(("system", "user", "code"), [
    ({"tag": "a|b"}, {}, pb.ILLEGAL_MESSAGE_TAG),
    ({"tag": " "}, {}, pb.ILLEGAL_MESSAGE_TAG),
    ({"keys": ["ok", " "]}, {}, pb.ILLEGAL_MESSAGE_KEY),
    ({"message_group": ""}, {}, pb.ILLEGAL_MESSAGE_GROUP),
    ({}, {"KEYS": "x"}, pb.ILLEGAL_MESSAGE_PROPERTY_KEY),
])
def test_bad_messages_name_their_v2_code(system: dict[str, object], user: dict[str, str], code: int) -> None:
    message = _sent(**system)
    message.user_properties.update(user)
    with pytest.raises(BadMessage) as error:
        message_convert.store_properties(message)
    assert error.value.code == code


def _stored(properties: dict[str, str], body: bytes, sys_flag: int = 0) -> StoredMessage:
    return StoredMessage(total_size=0, magic=0, body_crc=0, queue_id=2, flag=0, queue_offset=7,
                         physical_offset=100, sys_flag=sys_flag, born_timestamp=1_000,
                         born_host=HostAddress("10.0.0.9", 1),
                         store_timestamp=2_000, store_host=HostAddress("10.0.0.1", 10911), reconsume_times=0,
                         prepared_transaction_offset=0, body=body, topic="T", properties=properties)


def test_a_received_message_carries_what_was_sent_and_its_delivery() -> None:
    stored = _stored({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "MID", "color": "red", "CLUSTER": "c"},
                     zlib.compress(b"hello"), SysFlag.COMPRESSED)
    message = message_convert.received_message(stored, receipt_handle="h", attempt=3, invisible_ms=1500,
                                               store_host="10.0.0.1:10911")
    system = message.system_properties
    assert message.body == b"hello"  # a 4.x producer's deflated body is sent plain
    assert system.body_encoding == pb.IDENTITY
    assert system.body_digest == pb.Digest(type=pb.MD5, checksum="5D41402ABC4B2A76B9719D911017C592")
    assert dict(message.user_properties) == {"color": "red"}
    assert (system.tag, list(system.keys), system.message_id) == ("TagA", ["k1", "k2"], "MID")
    assert (system.receipt_handle, system.delivery_attempt, system.queue_id, system.queue_offset) == ("h", 3, 2, 7)
    assert system.invisible_duration.ToMilliseconds() == 1500
    assert system.message_type == pb.NORMAL


def test_fifo_queue_is_the_java_hash_modulo_queues_never_negative() -> None:
    negative = next(g for g in (f"group-{i}" for i in range(1000)) if java_string_hash(g) < 0)
    assert 0 <= message_convert.fifo_queue(negative, 3) == java_string_hash(negative) % 3 < 3  # Math.floorMod
    assert message_convert.fifo_queue("g", 0) == 0


def test_queue_permission_combines_queue_counts_topic_and_broker() -> None:
    config = TopicConfig("T", read_queue_nums=2, write_queue_nums=4, perm=PERM_READ | PERM_WRITE)
    rw = PERM_READ | PERM_WRITE
    assert [queue_permission(q, config, rw) for q in range(4)] == [pb.READ_WRITE, pb.READ_WRITE, pb.WRITE, pb.WRITE]
    assert queue_permission(0, config, PERM_READ) == pb.READ
    assert queue_permission(3, config, PERM_READ) == pb.NONE


def test_settings_answer_completes_what_a_client_needs() -> None:
    producer = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    answer = settings_answer(producer, max_body_size=4 << 20, retry_max_times=16, delay_levels=[1000, 5000, 10000])
    assert answer.publishing.max_body_size == 4 << 20 and answer.publishing.validate_message_type
    assert [t.name for t in answer.publishing.topics] == ["T"]
    consumer = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name="G")))
    answer = settings_answer(consumer, max_body_size=1, retry_max_times=3, delay_levels=[1000, 5000, 10000, 30000])
    sub = answer.subscription
    assert sub.HasField("fifo") and sub.receive_batch_size == 32 and sub.long_polling_timeout.ToSeconds() == 20
    assert answer.backoff_policy.max_attempts == 4
    assert [d.ToMilliseconds() for d in answer.backoff_policy.customized_backoff.next] == [10000, 30000]
