"""Typed headers and JSON bodies: RocketMQ 4.9.8's wire names, Java's parsing rules, fastjson's shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.common.fastjson import parse_fastjson
from rocketstore.remoting.body import (
    BrokerData,
    ClusterInfo,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    ProducerData,
    QueueData,
    SubscriptionData,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from rocketstore.remoting.command import ProtocolError
from rocketstore.remoting.header_codec import Header
from rocketstore.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    EndTransactionRequestHeader,
    GetBrokerConfigResponseHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    GetTopicStatsInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    QueryTopicConsumeByWhoRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

# Each header class with a full set of wire fields, spelled as the Java class spells them.
WIRE_EXAMPLES: list[tuple[type[Header], dict[str, str]]] = [
    (SendMessageRequestHeader, {
        "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "queueId": "2",
        "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": "KEYS\x01k\x02",
        "reconsumeTimes": "1", "unitMode": "false", "batch": "true", "maxReconsumeTimes": "16", "bname": "broker-a"}),
    (SendMessageResponseHeader, {"msgId": "0A000001000027BF0000000000000000", "queueId": "1", "queueOffset": "9",
                                 "transactionId": "tx"}),
    (PullMessageRequestHeader, {
        "consumerGroup": "CG", "topic": "T", "queueId": "0", "queueOffset": "5", "maxMsgNums": "32", "sysFlag": "3",
        "commitOffset": "4", "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "17",
        "expressionType": "TAG", "bname": "broker-a"}),
    (PullMessageResponseHeader, {"suggestWhichBrokerId": "0", "nextBeginOffset": "10", "minOffset": "0",
                                 "maxOffset": "12"}),
    (QueryConsumerOffsetRequestHeader, {"consumerGroup": "CG", "topic": "T", "queueId": "3"}),
    (QueryConsumerOffsetResponseHeader, {"offset": "-1"}),
    (UpdateConsumerOffsetRequestHeader, {"consumerGroup": "CG", "topic": "T", "queueId": "3", "commitOffset": "8"}),
    (GetMaxOffsetRequestHeader, {"topic": "T", "queueId": "1"}),
    (GetMaxOffsetResponseHeader, {"offset": "100"}),
    (GetMinOffsetRequestHeader, {"topic": "T", "queueId": "1"}),
    (GetMinOffsetResponseHeader, {"offset": "0"}),
    (SearchOffsetRequestHeader, {"topic": "T", "queueId": "1", "timestamp": "1700000000000"}),
    (SearchOffsetResponseHeader, {"offset": "42"}),
    (GetEarliestMsgStoretimeRequestHeader, {"topic": "T", "queueId": "1"}),
    (GetEarliestMsgStoretimeResponseHeader, {"timestamp": "1700000000000"}),
    (ViewMessageRequestHeader, {"offset": "1234"}),
    (QueryMessageRequestHeader, {"topic": "T", "key": "K", "maxNum": "32", "beginTimestamp": "0",
                                 "endTimestamp": "9223372036854775807", "_UNIQUE_KEY_QUERY": "true"}),
    (QueryMessageResponseHeader, {"indexLastUpdateTimestamp": "1", "indexLastUpdatePhyoffset": "2"}),
    (ConsumerSendMsgBackRequestHeader, {"offset": "77", "group": "CG", "delayLevel": "0", "originMsgId": "ID",
                                        "originTopic": "T", "unitMode": "false", "maxReconsumeTimes": "16"}),
    (GetConsumerListByGroupRequestHeader, {"consumerGroup": "CG"}),
    (UnregisterClientRequestHeader, {"clientID": "10.0.0.1@123", "producerGroup": "PG", "consumerGroup": "CG"}),
    (NotifyConsumerIdsChangedRequestHeader, {"consumerGroup": "CG"}),
    (GetRouteInfoRequestHeader, {"topic": "T", "acceptStandardJsonOnly": "true"}),
    (CreateTopicRequestHeader, {"topic": "T", "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8",
                                "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}),
    (DeleteTopicRequestHeader, {"topic": "T"}),
    (GetBrokerConfigResponseHeader, {"version": '{"counter":1,"timestamp":1700000000000}'}),
    (GetTopicStatsInfoRequestHeader, {"topic": "T"}),
    (GetConsumeStatsRequestHeader, {"consumerGroup": "CG", "topic": "T"}),
    (DeleteSubscriptionGroupRequestHeader, {"groupName": "CG", "removeOffset": "true"}),
    (GetConsumerConnectionListRequestHeader, {"consumerGroup": "CG"}),
    (QueryTopicConsumeByWhoRequestHeader, {"topic": "T"}),
    (GetTopicsByClusterRequestHeader, {"cluster": "C"}),
    (GetKVConfigRequestHeader, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}),
    (GetKVListByNamespaceRequestHeader, {"namespace": "ORDER_TOPIC_CONFIG"}),
    (EndTransactionRequestHeader, {"producerGroup": "PG", "tranStateTableOffset": "3", "commitLogOffset": "1024",
                                   "commitOrRollback": "8", "msgId": "AC11", "fromTransactionCheck": "true",
                                   "transactionId": "AC11"}),
    (CheckTransactionStateRequestHeader, {"tranStateTableOffset": "3", "commitLogOffset": "1024", "msgId": "AC11",
                                          "transactionId": "AC11", "offsetMsgId": "7F00"}),
]


@pytest.mark.parametrize(("cls", "fields"), WIRE_EXAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_wire_names_round_trip(cls: type[Header], fields: dict[str, str]) -> None:
    header = cls.from_ext_fields(fields)
    assert header.to_ext_fields() == fields
    assert type(header).from_ext_fields(header.to_ext_fields()) == header


# Fields Java leaves nullable (no @CFNotNull); every other field of WIRE_EXAMPLES is required.
OPTIONAL: dict[type[Header], set[str]] = {
    SendMessageRequestHeader: {"properties", "reconsumeTimes", "unitMode", "batch", "maxReconsumeTimes", "bname"},
    SendMessageResponseHeader: {"transactionId"},
    PullMessageRequestHeader: {"subscription", "expressionType", "bname"},
    ConsumerSendMsgBackRequestHeader: {"originMsgId", "originTopic", "unitMode", "maxReconsumeTimes"},
    UnregisterClientRequestHeader: {"producerGroup", "consumerGroup"},
    GetRouteInfoRequestHeader: {"acceptStandardJsonOnly"},
    CreateTopicRequestHeader: {"topicSysFlag"},
    QueryMessageRequestHeader: {"_UNIQUE_KEY_QUERY"},
    GetConsumeStatsRequestHeader: {"topic"},
    DeleteSubscriptionGroupRequestHeader: {"removeOffset"},
    EndTransactionRequestHeader: {"fromTransactionCheck", "transactionId"},
    CheckTransactionStateRequestHeader: {"msgId", "transactionId", "offsetMsgId"},
}


@pytest.mark.parametrize(("cls", "fields"), WIRE_EXAMPLES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_required_field_is_checked(cls: type[Header], fields: dict[str, str]) -> None:
    for name in fields:
        partial = {k: v for k, v in fields.items() if k != name}
        if name in OPTIONAL.get(cls, set()):
            header = cls.from_ext_fields(partial)
            # absent: a null wrapper is not sent again, a primitive boolean comes back as false
            assert header.to_ext_fields().get(name) in (None, "false")
        else:
            with pytest.raises(ProtocolError) as err:
                cls.from_ext_fields(partial)
            assert str(err.value) == f"{cls.LABEL} header field '{name}' is missing"


def test_typed_values() -> None:
    pull = PullMessageRequestHeader.from_ext_fields(dict(WIRE_EXAMPLES[2][1]))
    assert pull.queue_id == 0 and pull.queue_offset == 5 and pull.suspend_timeout_millis == 15000
    assert pull.broker_name == "broker-a" and pull.subscription == "*"
    flags = PullSysFlag(pull.sys_flag)
    assert PullSysFlag.COMMIT_OFFSET in flags and PullSysFlag.SUSPEND in flags and PullSysFlag.SUBSCRIPTION not in flags
    assert [int(f) for f in PullSysFlag] == [1, 2, 4, 8, 16]


def test_optional_fields_absent_are_defaults_and_not_encoded() -> None:
    send = SendMessageRequestHeader.from_ext_fields({
        "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0"})
    assert (send.properties, send.reconsume_times, send.max_reconsume_times, send.broker_name) == (None,) * 4
    assert send.unit_mode is False and send.batch is False
    # Java writes primitive booleans always and null wrappers never.
    assert send.to_ext_fields() == {
        "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "1", "flag": "0", "unitMode": "false", "batch": "false"}


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("TRUE", True), ("True", True), ("false", False), ("yes", False), ("1", False), ("", False),
])
def test_booleans_parse_like_java(text: str, expected: bool) -> None:
    assert GetRouteInfoRequestHeader.from_ext_fields({"topic": "T", "acceptStandardJsonOnly": text}) \
        .accept_standard_json_only is expected


@pytest.mark.parametrize(("text", "value"), [("+7", 7), ("-0", 0), ("007", 7), ("2147483647", 2**31 - 1),
                                             ("-2147483648", -(2**31))])
def test_integers_parse_like_integer_parse_int(text: str, value: int) -> None:
    assert GetMaxOffsetRequestHeader.from_ext_fields({"topic": "T", "queueId": text}).queue_id == value


@pytest.mark.parametrize("text", ["x", "", " 1", "1 ", "1_0", "1.0", "0x10", "2147483648", "-2147483649", "١٢"])
def test_bad_integers_name_the_header_and_field(text: str) -> None:
    with pytest.raises(ProtocolError) as err:
        PullMessageRequestHeader.from_ext_fields({**WIRE_EXAMPLES[2][1], "queueId": text})
    assert str(err.value) == f"PULL_MESSAGE header field 'queueId' must be an integer, got {text!r}"


def test_long_fields_take_the_long_range() -> None:
    big = str(2**63 - 1)
    assert ViewMessageRequestHeader.from_ext_fields({"offset": big}).offset == 2**63 - 1
    with pytest.raises(ProtocolError, match="'offset' must be a long integer"):
        ViewMessageRequestHeader.from_ext_fields({"offset": str(2**63)})


# -- SEND_MESSAGE_V2 -------------------------------------------------------------------------------

V1_TO_V2 = {
    "producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
    "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
    "maxReconsumeTimes": "l", "batch": "m", "bname": "n",
}


def test_v1_v2_mapping_matches_create_send_message_request_header_v1() -> None:
    v1 = dict(WIRE_EXAMPLES[0][1])
    v2 = {V1_TO_V2[k]: v for k, v in v1.items()}
    header = SendMessageRequestHeader.from_v2_ext_fields(v2)
    assert header == SendMessageRequestHeader.from_ext_fields(v1)
    assert header.to_v2_ext_fields() == v2
    assert header.to_ext_fields() == v1


def test_v2_required_and_optional_fields() -> None:
    v2 = {V1_TO_V2[k]: v for k, v in WIRE_EXAMPLES[0][1].items()}
    for short in "abcdefgh":
        with pytest.raises(ProtocolError, match=f"SEND_MESSAGE_V2 header field '{short}' is missing"):
            SendMessageRequestHeader.from_v2_ext_fields({k: v for k, v in v2.items() if k != short})
    minimal = SendMessageRequestHeader.from_v2_ext_fields({k: v2[k] for k in "abcdefgh"})
    assert minimal.properties is None and minimal.broker_name is None and minimal.batch is False
    with pytest.raises(ProtocolError, match="SEND_MESSAGE_V2 header field 'g' must be a long integer, got 'soon'"):
        SendMessageRequestHeader.from_v2_ext_fields({**v2, "g": "soon"})


send_headers = st.builds(
    SendMessageRequestHeader,
    producer_group=st.text(), topic=st.text(), default_topic=st.text(),
    default_topic_queue_nums=st.integers(-(2**31), 2**31 - 1), queue_id=st.integers(-(2**31), 2**31 - 1),
    sys_flag=st.integers(0, 2**31 - 1), born_timestamp=st.integers(-(2**63), 2**63 - 1),
    flag=st.integers(-(2**31), 2**31 - 1), properties=st.none() | st.text(),
    reconsume_times=st.none() | st.integers(0, 100), unit_mode=st.booleans(), batch=st.booleans(),
    max_reconsume_times=st.none() | st.integers(-1, 100), broker_name=st.none() | st.text(),
)


@given(send_headers)
def test_send_header_round_trips_both_spellings(header: SendMessageRequestHeader) -> None:
    assert SendMessageRequestHeader.from_ext_fields(header.to_ext_fields()) == header
    assert SendMessageRequestHeader.from_v2_ext_fields(header.to_v2_ext_fields()) == header
    v1 = header.to_ext_fields()
    assert {V1_TO_V2[k]: v for k, v in v1.items()} == header.to_v2_ext_fields()


# -- JSON bodies -----------------------------------------------------------------------------------


def sample_route() -> TopicRouteData:
    return TopicRouteData(
        queue_datas=[QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)],
        broker_datas=[BrokerData(cluster="DefaultCluster", broker_name="broker-a",
                                 broker_addrs={0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})],
    )


def test_topic_route_data_encodes_like_fastjson() -> None:
    assert sample_route().encode() == (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
        b'"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
    )


def test_topic_route_data_parses_back_with_integer_keys() -> None:
    data = sample_route().encode()
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)  # bare integer keys: not standard JSON, exactly like RocketMQ's namesrv
    parsed = parse_fastjson(data.decode())
    assert parsed["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    decoded = TopicRouteData.decode(data)
    assert decoded == sample_route()
    assert decoded.broker_datas[0].broker_addrs[0] == "10.0.0.1:10911"
    assert all(isinstance(k, int) for k in decoded.broker_datas[0].broker_addrs)


def test_topic_route_data_reads_standard_json_too() -> None:
    """What a 4.9.8 namesrv answers clients of 4.9.4 and later: quoted keys."""
    text = ('{"brokerDatas":[{"brokerAddrs":{"0":"h:1"},"brokerName":"b","cluster":"c"}],'
            '"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,'
            '"topicSysFlag":0,"writeQueueNums":1}],"orderTopicConf":"b:1"}')
    route = TopicRouteData.decode(text.encode())
    assert route.broker_datas[0].broker_addrs == {0: "h:1"} and route.order_topic_conf == "b:1"


def test_go_clients_split_of_broker_addrs_works_on_our_output() -> None:
    """rocketmq-client-go (2.x) slices brokerAddrs' text on ',' and the first ':' and strips quotes."""
    text = sample_route().encode().decode()
    start = text.index('"brokerAddrs":') + len('"brokerAddrs":')
    addrs = text[start : text.index("}", start) + 1]
    pairs = {}
    for item in addrs[1:-1].split(","):
        i = item.index(":")
        pairs[int(item[:i])] = item[i + 1 :].replace('"', "")
    assert pairs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}


def test_cluster_info_round_trip() -> None:
    info = ClusterInfo(
        broker_addr_table={"broker-a": BrokerData(cluster="C", broker_name="broker-a", broker_addrs={0: "h:1"})},
        cluster_addr_table={"C": ["broker-a"]},
    )
    data = info.encode()
    assert data == (b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1"},"brokerName":"broker-a",'
                    b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}')
    assert ClusterInfo.decode(data) == info


JAVA_HEARTBEAT = (
    '{"clientID":"10.0.0.5@4242#123","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
    '"consumeType":"CONSUME_PASSIVELY","groupName":"CG","messageModel":"CLUSTERING","subscriptionDataSet":'
    '[{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"a || b",'
    '"subVersion":1700000000000,"tagsSet":["a","b"],"topic":"T"}],"unitMode":false}],'
    '"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
)


def test_heartbeat_as_java_sends_it() -> None:
    hb = HeartbeatData.decode(JAVA_HEARTBEAT.encode())
    assert hb.client_id == "10.0.0.5@4242#123"
    assert hb.producer_data_set == [ProducerData(group_name="CLIENT_INNER_PRODUCER")]
    (consumer,) = hb.consumer_data_set
    assert (consumer.group_name, consumer.consume_type, consumer.message_model, consumer.consume_from_where) == (
        "CG", "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    (sub,) = consumer.subscription_data_set
    assert sub == SubscriptionData(topic="T", sub_string="a || b", tags_set=["a", "b"], code_set=[2598919, 2598920],
                                   sub_version=1700000000000, expression_type="TAG")
    assert hb.encode().decode() == JAVA_HEARTBEAT  # same fields, same order as fastjson


def test_heartbeat_as_the_cpp_client_sends_it() -> None:
    """jsoncpp output: subVersion as a string, no unitMode/classFilterMode/expressionType, no empty sets."""
    text = ('{"clientID":"c","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
            '"consumeType":"CONSUME_ACTIVELY","groupName":"G","messageModel":"BROADCASTING",'
            '"subscriptionDataSet":[{"subString":"*","subVersion":"1700000000001","topic":"T"}]}]}\n')
    hb = HeartbeatData.decode(text.encode())
    sub = hb.consumer_data_set[0].subscription_data_set[0]
    assert sub.sub_version == 1700000000001 and sub.expression_type == "TAG" and sub.tags_set == []
    assert hb.producer_data_set == [] and hb.consumer_data_set[0].unit_mode is False


def test_lock_bodies() -> None:
    mq = MessageQueueData(topic="T", broker_name="broker-a", queue_id=3)
    req = LockBatchRequestBody(consumer_group="CG", client_id="c1", mq_set=[mq])
    assert req.encode() == b'{"clientId":"c1","consumerGroup":"CG","mqSet":[{"brokerName":"broker-a","queueId":3,' \
                           b'"topic":"T"}]}'
    assert LockBatchRequestBody.decode(req.encode()) == req
    unlock = UnlockBatchRequestBody.decode(req.encode())
    assert unlock.mq_set == [mq]
    resp = LockBatchResponseBody(lock_ok_mq_set=[mq])
    assert resp.encode().startswith(b'{"lockOKMQSet":[')
    assert LockBatchResponseBody.decode(resp.encode()) == resp


def test_consumer_list_body() -> None:
    body = GetConsumerListByGroupResponseBody(consumer_id_list=["a", "b"])
    assert body.encode() == b'{"consumerIdList":["a","b"]}'
    assert GetConsumerListByGroupResponseBody.decode(b"{}").consumer_id_list == []


@pytest.mark.parametrize(("data", "message"), [
    (b"\xff", "HeartbeatData body is not UTF-8"),
    (b"{", "HeartbeatData body does not parse"),
    (b"[" * 50_000 + b"]" * 50_000, "HeartbeatData body does not parse"),
    (b"[]", "HeartbeatData must be an object"),
    (b"{}", "HeartbeatData.clientID is missing"),
    (b'{"clientID":7}', None),  # fastjson turns a number into a String field's text
    (b'{"clientID":[]}', "HeartbeatData.clientID must be a string"),
    (b'{"clientID":"c","consumerDataSet":{}}', "HeartbeatData.consumerDataSet must be an array"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"t","subString":"*",'
     b'"subVersion":"soon"}]}]}', r"HeartbeatData.consumerDataSet\[0\].subscriptionDataSet\[0\].subVersion must be"),
    (b'{"clientID":"c","consumerDataSet":[{"groupName":"g","unitMode":"maybe"}]}', "unitMode must be a boolean"),
])
def test_bad_bodies(data: bytes, message: str | None) -> None:
    if message is None:
        assert HeartbeatData.decode(data).client_id == "7"
        return
    with pytest.raises(ProtocolError, match=message):
        HeartbeatData.decode(data)


def test_broker_addrs_key_must_be_an_integer() -> None:
    with pytest.raises(ProtocolError, match="brokerAddrs key must be an integer"):
        TopicRouteData.decode(b'{"brokerDatas":[{"cluster":"c","brokerName":"b","brokerAddrs":{"x":"h:1"}}]}')


json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["clientID", "groupName", "consumerDataSet", "producerDataSet", "subscriptionDataSet",
                         "topic", "subString", "subVersion", "tagsSet", "codeSet", "unitMode", "x"]),
        inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_fuzz_bodies_raise_only_protocol_error(value: Any) -> None:
    for cls in (HeartbeatData, TopicRouteData, ClusterInfo, LockBatchRequestBody):
        try:
            decoded = cls.decode(json.dumps(value).encode())
        except ProtocolError:
            continue
        assert type(decoded).decode(decoded.encode()) == decoded


def test_consumer_data_defaults() -> None:
    data = ConsumerData(group_name="g")
    assert data.encode() == b'{"groupName":"g","subscriptionDataSet":[],"unitMode":false}'
