"""The admin bodies of rocketstore.remoting.body: the exact fastjson text brokers write (what
RocketMQ's admin tools parse, MessageQueue objects in key position included) and the decode back."""

from __future__ import annotations

import pytest

from rocketstore.common.fastjson import parse_fastjson_object_keys
from rocketstore.remoting.body import (
    ConnectionData,
    ConsumerConnectionBody,
    ConsumeStatsBody,
    GroupList,
    KVTable,
    MessageQueueData,
    OffsetWrapperData,
    SubscriptionData,
    TopicList,
    TopicOffsetData,
    TopicStatsTable,
)
from rocketstore.remoting.command import ProtocolError


def test_parse_fastjson_object_and_number_keys() -> None:
    text = '{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"t"}:{"maxOffset":3}},"ids":{0:"a"},"x":[1, 2.5]}'
    parsed = parse_fastjson_object_keys(text)
    ((key, value),) = parsed["offsetTable"].items()
    assert dict(key) == {"brokerName": "b", "queueId": 1, "topic": "t"} and value == {"maxOffset": 3}
    assert parsed["ids"] == {0: "a"} and parsed["x"] == [1, 2.5]
    with pytest.raises(ValueError):
        parse_fastjson_object_keys('{"a":1')


def test_topic_stats_table_text_and_round_trip() -> None:
    mq0 = MessageQueueData(topic="t", broker_name="b", queue_id=0)
    mq1 = MessageQueueData(topic="t{:}", broker_name="b", queue_id=1)  # JSON punctuation in a key's string
    table = TopicStatsTable(offset_table={
        mq0: TopicOffsetData(min_offset=0, max_offset=3, last_update_timestamp=1700000000000),
        mq1: TopicOffsetData(min_offset=2, max_offset=5, last_update_timestamp=0),
    })
    text = table.encode()
    assert text == (b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:'
                    b'{"lastUpdateTimestamp":1700000000000,"maxOffset":3,"minOffset":0},'
                    b'{"brokerName":"b","queueId":1,"topic":"t{:}"}:'
                    b'{"lastUpdateTimestamp":0,"maxOffset":5,"minOffset":2}}}')
    assert TopicStatsTable.decode(text) == table
    assert TopicStatsTable.decode(b'{"offsetTable":{}}') == TopicStatsTable()


def test_consume_stats_text_and_round_trip() -> None:
    mq = MessageQueueData(topic="Work", broker_name="broker-a", queue_id=0)
    stats = ConsumeStatsBody(offset_table={mq: OffsetWrapperData(broker_offset=5, consumer_offset=2,
                                                                  last_timestamp=7)})
    text = stats.encode()
    assert text == (b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Work"}:'
                    b'{"brokerOffset":5,"consumerOffset":2,"lastTimestamp":7}}}')
    assert ConsumeStatsBody.decode(text) == stats
    # RocketMQ's brokers send a real TPS; an integer one reads as well
    assert ConsumeStatsBody.decode(b'{"consumeTps":3,"offsetTable":{}}').consume_tps == 3.0


def test_object_key_of_the_wrong_shape_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="key"):
        TopicStatsTable.decode(b'{"offsetTable":{{"topic":"t"}:{"maxOffset":1}}}')


def test_consumer_connection_text() -> None:
    sub = SubscriptionData(topic="Work", sub_string="*", sub_version=1)
    body = ConsumerConnectionBody(
        connection_set=[ConnectionData(client_id="10.0.0.9@x", client_addr="127.0.0.1:5", language="JAVA",
                                       version=409)],
        subscription_table={"Work": sub}, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING")
    assert body.encode() == (
        b'{"connectionSet":[{"clientAddr":"127.0.0.1:5","clientId":"10.0.0.9@x","language":"JAVA","version":409}],'
        b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","subscriptionTable":{"Work":'
        + sub.encode() + b"}}")
    assert ConsumerConnectionBody.decode(body.encode()) == body


def test_small_bodies_text() -> None:
    assert KVTable(table={"b": "1", "a": "x"}).encode() == b'{"table":{"b":"1","a":"x"}}'
    assert GroupList(group_list=["CG"]).encode() == b'{"groupList":["CG"]}'
    assert TopicList(topic_list=["T"]).encode() == b'{"topicList":["T"]}'
    assert TopicList(topic_list=["C"], broker_addr="h:1").encode() == b'{"brokerAddr":"h:1","topicList":["C"]}'
