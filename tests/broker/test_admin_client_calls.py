"""Admin request codes over real sockets, in their wire forms: the ones the broker answers by
calling its consumers (INVOKE_BROKER_TO_RESET_OFFSET 222 -> RESET_CONSUMER_CLIENT_OFFSET 220,
INVOKE_BROKER_TO_GET_CONSUMER_STATUS 223 -> GET_CONSUMER_STATUS_FROM_CLIENT 221,
GET_CONSUMER_RUNNING_INFO 307 forwarded) and the offset/time queries (GET_ALL_DELAY_OFFSET 45,
QUERY_CONSUME_TIME_SPAN 303, QUERY_CORRECTION_OFFSET 305, GET_BROKER_CONSUME_STATS 317,
CLONE_GROUP_OFFSET 314, VIEW_BROKER_STATS_DATA 315). A "consumer" here is a raw connection
that sent a consumer heartbeat and answers what the broker asks it."""

from __future__ import annotations

import json
import threading
import time
from collections import deque

import pytest
from inprocess_broker import BrokerHandle, RawClient

from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.message import PROPERTY_DELAY_TIME_LEVEL, Message, decode_message_id
from rocketstore.remoting.body import (
    BrokerStatsData,
    ConsumerData,
    ConsumeStatsBody,
    ConsumeStatsList,
    GetConsumerStatusBody,
    HeartbeatData,
    KVTable,
    MessageQueueData,
    QueryConsumeTimeSpanBody,
    QueryCorrectionOffsetBody,
    ResetOffsetBody,
    ResetOffsetBodyForC,
    SubscriptionData,
)
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.store.broker_stats_manager import (
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStatsManager,
    StatsSnapshot,
)
from rocketstore.store.stats import (
    PUT_DISTRIBUTE_BUCKETS,
    StoreStatsService,
    java_format_2f,
    put_distribute_bucket,
    put_latency_px,
    tps_triple,
)

TOPIC = "TAdmin"
GROUP = "GAdmin"


def _mq(queue_id: int, topic: str = TOPIC) -> MessageQueueData:
    return MessageQueueData(topic=topic, broker_name="broker-a", queue_id=queue_id)


def _put(broker: BrokerHandle, topic: str, queue_id: int, count: int) -> list[int]:
    """Store ``count`` messages; their store timestamps."""
    stamps = []
    for i in range(count):
        result = broker.store.put_message(Message(topic=topic, body=f"m{i}".encode(), queue_id=queue_id,
                                                  born_timestamp=int(time.time() * 1000)))
        assert result.ok
        time.sleep(0.005)  # distinct store times
    broker.wait_dispatched()
    for offset in range(count):
        stamps.append(broker.store.get_message_store_timestamp(topic, queue_id, offset))
    return stamps


def _create_topic(client: RawClient, topic: str = TOPIC, queues: int = 2) -> None:
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
              "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    assert client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields).code == ResponseCode.SUCCESS


def _commit(client: RawClient, group: str, queue_id: int, offset: int, topic: str = TOPIC) -> None:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields).code == ResponseCode.SUCCESS


def _join_as_consumer(client: RawClient, client_id: str, group: str = GROUP) -> None:
    beat = HeartbeatData(client_id=client_id, consumer_data_set=[ConsumerData(
        group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        subscription_data_set=[SubscriptionData(topic=TOPIC, sub_string="*")])])
    assert client.call(RequestCode.HEART_BEAT, body=beat.encode()).code == ResponseCode.SUCCESS


def _next_request(client: RawClient, code: int, timeout: float = 10.0) -> RemotingCommand:
    """The next request of ``code`` the broker sends on this connection (responses are kept)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"the broker sent no request {code} within {timeout} s"
        client.sock.settimeout(left)
        data = client.sock.recv(1 << 16)
        assert data, "broker closed the connection"
        found = None
        for cmd in client.decoder.feed(data):
            if not cmd.is_response and cmd.code == code and found is None:
                found = cmd
            elif cmd.is_response:
                client.pending[cmd.opaque] = cmd
        if found is not None:
            return found


def test_reset_offset_pushes_offsets_to_each_consumer(broker: BrokerHandle) -> None:
    admin, consumer = broker.client(), broker.client()
    _create_topic(admin)
    stamps = _put(broker, TOPIC, 0, 4)
    _put(broker, TOPIC, 1, 2)
    _commit(admin, GROUP, 0, 4)
    _commit(admin, GROUP, 1, 2)
    fields = {"topic": TOPIC, "group": GROUP, "timestamp": str(stamps[2]), "isForce": "false"}
    offline = admin.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert offline.remark == (f"Consumer not online, so can not reset offset, Group: {GROUP} Topic: {TOPIC} "
                              f"Timestamp: {stamps[2]}")

    _join_as_consumer(consumer, "10.0.0.1@c1")
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # queue 0 goes back to the message stored at stamps[2]; queue 1's messages were all stored
    # later, so it goes back to its first message
    expected = {_mq(0): 2, _mq(1): 0}
    assert ResetOffsetBody.decode(resp.body).offset_table == expected
    pushed = _next_request(consumer, RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
    assert pushed.is_oneway
    assert pushed.ext_fields["topic"] == TOPIC and pushed.ext_fields["group"] == GROUP
    assert pushed.ext_fields["timestamp"] == str(stamps[2])
    assert ResetOffsetBody.decode(pushed.body).offset_table == expected
    # the broker does not commit: the consumer does, once it adopted the offsets
    query = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0"}
    assert admin.call(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "4"

    # forced, to the queues' ends (-1); a C++ tool gets the list form
    forced = RemotingCommand(code=RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, language=LanguageCode.CPP,
                             ext_fields={**fields, "timestamp": "-1", "isForce": "true"})
    resp = admin.receive(admin.send(forced))
    assert resp.code == ResponseCode.SUCCESS
    assert ResetOffsetBody.decode(resp.body).offset_table == {_mq(0): 4, _mq(1): 2}
    pushed = _next_request(consumer, RequestCode.RESET_CONSUMER_CLIENT_OFFSET)
    as_c = ResetOffsetBodyForC.decode(pushed.body)
    assert sorted((q.queue_id, q.offset) for q in as_c.offset_table) == [(0, 4), (1, 2)]
    assert "rocketstore_admin_offset_resets_total 2" in broker.metrics()


def test_reset_offset_errors(broker: BrokerHandle) -> None:
    admin = broker.client()
    _create_topic(admin)
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                      {"topic": "NoSuchTopic", "group": GROUP, "timestamp": "0", "isForce": "true"})
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert resp.remark == "[reset-offset] reset offset failed, no topic in this broker. topic=NoSuchTopic"
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                      {"topic": TOPIC, "group": "NeverConsumed", "timestamp": "0", "isForce": "true"})
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "THe consumer group <NeverConsumed> not exist")
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": GROUP})
    assert resp.code != ResponseCode.SUCCESS and "timestamp" in (resp.remark or "")


def test_consumer_status_asks_each_consumer(broker: BrokerHandle) -> None:
    admin, consumer = broker.client(), broker.client()
    _create_topic(admin)
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": GROUP})
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR,
                                        f"No Any Consumer online in the consumer group: [{GROUP}]")
    _join_as_consumer(consumer, "10.0.0.2@c2")
    answer: dict[str, RemotingCommand] = {}

    def act_as_consumer() -> None:
        ask = _next_request(consumer, RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT)
        answer["ask"] = ask
        body = GetConsumerStatusBody(message_queue_table={_mq(0): 7, _mq(1): 3})
        consumer.sock.sendall(ask.response(ResponseCode.SUCCESS, body=body.encode()).encode())

    helper = threading.Thread(target=act_as_consumer)
    helper.start()
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"topic": TOPIC, "group": GROUP})
    helper.join(10)
    assert answer["ask"].ext_fields == {"topic": TOPIC, "group": GROUP}
    assert resp.code == ResponseCode.SUCCESS
    assert GetConsumerStatusBody.decode(resp.body).consumer_table == {"10.0.0.2@c2": {_mq(0): 7, _mq(1): 3}}
    # a client id no consumer has: nobody is asked
    resp = admin.call(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                      {"topic": TOPIC, "group": GROUP, "clientAddr": "other"})
    assert GetConsumerStatusBody.decode(resp.body).consumer_table == {}


def test_running_info_forwarded_or_not_online(broker: BrokerHandle) -> None:
    admin, consumer = broker.client(), broker.client()
    fields = {"consumerGroup": GROUP, "clientId": "10.0.0.3@c3", "jstackEnable": "false"}
    resp = admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, f"The Consumer <{GROUP}> <10.0.0.3@c3> not online")
    _join_as_consumer(consumer, "10.0.0.3@c3")

    def act_as_consumer() -> None:
        ask = _next_request(consumer, RequestCode.GET_CONSUMER_RUNNING_INFO)
        assert ask.ext_fields == fields
        consumer.sock.sendall(ask.response(ResponseCode.SUCCESS, body=b'{"properties":{"x":"1"}}').encode())

    helper = threading.Thread(target=act_as_consumer)
    helper.start()
    resp = admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
    helper.join(10)
    assert (resp.code, resp.body) == (ResponseCode.SUCCESS, b'{"properties":{"x":"1"}}')
    assert "rocketstore_admin_client_call_requests_total 2" in broker.metrics()  # answered or not


def test_time_span_correction_and_delay_offsets(broker: BrokerHandle) -> None:
    admin = broker.client()
    _create_topic(admin)
    stamps = _put(broker, TOPIC, 0, 3)
    _commit(admin, GROUP, 0, 1)
    _commit(admin, "G2", 0, 2)

    resp = admin.call(RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": TOPIC, "group": GROUP})
    spans = {s.message_queue.queue_id: s for s in QueryConsumeTimeSpanBody.decode(resp.body).consume_time_span_set}
    assert set(spans) == {0, 1}
    span = spans[0]
    assert (span.min_time_stamp, span.max_time_stamp, span.consume_time_stamp) == (stamps[0], stamps[2], stamps[0])
    assert span.delay_time >= time.time() * 1000 - stamps[1] - 1000  # the next message waits since it was stored
    missing = admin.call(RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": "Nope", "group": GROUP})
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist")

    fields = {"topic": TOPIC, "compareGroup": "G2", "filterGroups": "G2"}
    body = QueryCorrectionOffsetBody.decode(admin.call(RequestCode.QUERY_CORRECTION_OFFSET, fields).body)
    assert body.correction_offsets == {0: 1}  # GROUP's 1 is the lowest and G2 (2) is past it
    fields = {"topic": TOPIC, "compareGroup": GROUP, "filterGroups": GROUP}
    body = QueryCorrectionOffsetBody.decode(admin.call(RequestCode.QUERY_CORRECTION_OFFSET, fields).body)
    assert body.correction_offsets == {0: 2**63 - 1}  # GROUP (1) is behind G2's 2: nothing to correct

    delay = admin.call(RequestCode.GET_ALL_DELAY_OFFSET)
    assert delay.code == ResponseCode.SUCCESS
    assert "offsetTable" in parse_fastjson(delay.body.decode())
    assert delay.body.decode() == broker.store.schedule_message_service.offsets.encode()


def test_broker_consume_stats_and_clone(broker: BrokerHandle) -> None:
    admin = broker.client()
    _create_topic(admin)
    _put(broker, TOPIC, 0, 3)
    _commit(admin, GROUP, 0, 1)
    group_config = {"groupName": GROUP, "consumeEnable": True}
    assert admin.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                      body=json.dumps(group_config).encode()).code == ResponseCode.SUCCESS
    fields = {"srcGroup": GROUP, "destGroup": "GClone", "topic": TOPIC, "offline": "false"}
    assert admin.call(RequestCode.CLONE_GROUP_OFFSET, fields).code == ResponseCode.SUCCESS
    query = {"consumerGroup": "GClone", "topic": TOPIC, "queueId": "0"}
    assert admin.call(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "1"

    resp = admin.call(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "false"})
    stats = ConsumeStatsList.decode(resp.body)
    assert stats.broker_addr == f"127.0.0.1:{broker.port}"
    mine = [entry[GROUP] for entry in stats.consume_stats_list if GROUP in entry]
    assert len(mine) == 1 and len(mine[0]) == 1
    table = mine[0][0].offset_table
    assert (table[_mq(0)].broker_offset, table[_mq(0)].consumer_offset) == (3, 1)
    assert stats.total_diff == 2
    ordered = ConsumeStatsList.decode(admin.call(RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": "true"}).body)
    assert all(not topics for entry in ordered.consume_stats_list for topics in entry.values())


def test_broker_stats_windows() -> None:
    """StatsItem's windows: last minus first snapshot of the last minute (every 10 s), hour (every
    10 min) and day (every hour); the BROKER_* statistics are keyed by the cluster."""
    manager = BrokerStatsManager(0.0, "C")
    manager.inc_topic_put("T", 10, 100)  # one send of 10 messages
    manager.sample(10.0)
    minute, hour, day = manager.stats(TOPIC_PUT_NUMS, "T") or ()
    # (0 s, 0, 0) -> (10 s, 1 call, 10 messages): 10 messages in 10 s, 10 per call
    assert (minute.sum, minute.tps, minute.avgpt) == (10, 1.0, 10.0)
    assert (hour.sum, day.sum) == (0, 0)  # no 10-minute or hourly snapshot yet
    manager.inc_topic_put("T", 30, 300)
    manager.sample(600.0)
    assert manager.stats(TOPIC_PUT_NUMS, "T")[1] == StatsSnapshot(sum=40, tps=40 / 600, avgpt=20.0)  # type: ignore[index]
    for second in range(610, 700, 10):  # the minute window keeps its last 7 snapshots
        manager.inc_topic_put("T", 1, 10)
        manager.sample(float(second))
    assert manager.stats(TOPIC_PUT_NUMS, "T")[0].sum == 6  # type: ignore[index]
    assert manager.stats(TOPIC_PUT_SIZE, "T")[0].sum == 60  # type: ignore[index]
    assert manager.stats(TOPIC_PUT_NUMS, "other") is None
    assert manager.stats(BROKER_PUT_NUMS, "C") is not None and manager.stats(BROKER_PUT_NUMS, "D") is None
    manager.inc_group_get("T", "G", 4, 40)
    manager.sample(710.0)
    assert manager.stats(GROUP_GET_NUMS, "T@G")[0].sum == 4  # type: ignore[index]
    assert manager.stats(GROUP_GET_NUMS, "TG") is None


def test_view_broker_stats_data(broker: BrokerHandle) -> None:
    admin = broker.client()
    _create_topic(admin)
    offsets = []
    for i in range(5):
        sent = admin.send_message(TOPIC, f"m{i}".encode(), queue_id=0)
        assert sent.code == ResponseCode.SUCCESS
        offsets.append(decode_message_id(sent.ext_fields["msgId"])[1])
    broker.wait_dispatched()
    assert admin.pull(TOPIC, 0, 0, group=GROUP).code == ResponseCode.SUCCESS
    for offset in offsets[:2]:  # the group hands two messages back (SNDBCK_PUT_NUMS by the original topic)
        back = admin.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(offset), "group": GROUP,
                                                               "delayLevel": "0", "originTopic": TOPIC})
        assert back.code == ResponseCode.SUCCESS, back.remark
    # the next snapshot of every window (the broker's own sampler takes the minute's within 10 s)
    broker.call_soon(lambda: broker.controller.broker_stats_manager.sample(time.monotonic() + 3601))
    fields = {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC}
    data = BrokerStatsData.decode(admin.call(RequestCode.VIEW_BROKER_STATS_DATA, fields).body)
    assert (data.stats_minute.sum, data.stats_hour.sum, data.stats_day.sum) == (5, 5, 5)
    assert data.stats_minute.avgpt == 1.0
    fields = {"statsName": "GROUP_GET_NUMS", "statsKey": f"{TOPIC}@{GROUP}"}
    data = BrokerStatsData.decode(admin.call(RequestCode.VIEW_BROKER_STATS_DATA, fields).body)
    assert data.stats_minute.sum == 5
    _commit(admin, GROUP, 0, 5)
    fields = {"statsName": "BROKER_PUT_NUMS", "statsKey": broker.controller.broker_config.broker_cluster_name}
    assert BrokerStatsData.decode(admin.call(RequestCode.VIEW_BROKER_STATS_DATA, fields).body).stats_minute.sum >= 5
    # consume stats carry the group's get rate over the minute window (tpsGroupGetNums)
    consume = ConsumeStatsBody.decode(admin.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": GROUP}).body)
    assert consume.consume_tps == data.stats_minute.tps > 0
    fields = {"statsName": "SNDBCK_PUT_NUMS", "statsKey": f"{TOPIC}@{GROUP}"}
    data = BrokerStatsData.decode(admin.call(RequestCode.VIEW_BROKER_STATS_DATA, fields).body)
    assert (data.stats_minute.sum, data.stats_day.sum) == (2, 2)
    # GROUP_GET_LATENCY: one found pull on queue 0, its milliseconds (0 for a few small messages)
    fields = {"statsName": "GROUP_GET_LATENCY", "statsKey": f"0@{TOPIC}@{GROUP}"}
    latency = admin.call(RequestCode.VIEW_BROKER_STATS_DATA, fields)
    assert latency.code == ResponseCode.SUCCESS, latency.remark
    assert BrokerStatsData.decode(latency.body).stats_minute.sum >= 0
    assert broker.controller.broker_stats_manager.group_get_latency[(0, TOPIC, GROUP)].times == 1
    for name, key in (("SNDBCK_PUT_NUMS", "x"), ("GROUP_GET_LATENCY", f"1@{TOPIC}@{GROUP}"),
                      ("GROUP_GET_LATENCY", f"{TOPIC}@{GROUP}"), ("GROUP_GET_FROM_DISK_NUMS", f"0@{TOPIC}@{GROUP}")):
        missing = admin.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
        assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")


def test_tps_triples_follow_store_stats_service() -> None:
    """"10s 60s 600s" rates from one-second snapshots; "" for a window not yet covered, except
    getTotalTps, which RocketMQ prints as 0.0 then."""
    stats = StoreStatsService()
    for second in range(12):
        stats.put_message_times_total = 5 * second  # 5 puts a second
        stats.get_message_times_total_found = second
        stats.sample(second * 1000)
    info = stats.runtime_info()
    assert info["putTps"] == "5.0  "
    assert info["getFoundTps"] == "1.0  "
    assert info["getTotalTps"] == "1.0 0.0 0.0"
    assert tps_triple(deque([(0, 0)])) == "  "


def test_runtime_info_has_every_key_mqadmin_reads(broker: BrokerHandle) -> None:
    admin = broker.client()
    _create_topic(admin)
    stamps = _put(broker, TOPIC, 0, 2)
    table = KVTable.decode(admin.call(RequestCode.GET_BROKER_RUNTIME_INFO).body).table
    for key in ("putTps", "getFoundTps", "getMissTps", "getTransferedTps", "getTotalTps", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "sendThreadPoolQueueHeadWaitTimeMills",
                "pullThreadPoolQueueHeadWaitTimeMills", "queryThreadPoolQueueSize", "EndTransactionQueueSize",
                "pageCacheLockTimeMills", "commitLogDiskRatio", "consumeQueueDiskRatio", "dispatchBehindBytes",
                "msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning", "msgGetTotalYesterdayMorning",
                "msgGetTotalTodayMorning", "putMessageAverageSize", "remainTransientStoreBufferNumbs", "runtime"):
        assert key in table, key
    assert table["earliestMessageTimeStamp"] == str(stamps[0])
    assert table["msgPutTotalTodayNow"] == "2"
    assert float(table["putMessageAverageSize"]) > 0
    assert [k for k in table if k.startswith("commitLogDiskRatio_")]
    assert not [k for k in table if k.startswith("scheduleMessageOffset_")]  # nothing delayed yet
    delayed = Message(topic=TOPIC, body=b"later", queue_id=0, born_timestamp=int(time.time() * 1000),
                      properties={PROPERTY_DELAY_TIME_LEVEL: "1"})
    assert broker.store.put_message(delayed).ok
    deadline = time.monotonic() + 10
    while True:  # "delivered offset,queue max offset" of delay level 1, once the 1 s delay passed
        table = KVTable.decode(admin.call(RequestCode.GET_BROKER_RUNTIME_INFO).body).table
        if table.get("scheduleMessageOffset_1") == "1,1":
            break
        assert time.monotonic() < deadline, table.get("scheduleMessageOffset_1")
        time.sleep(0.2)


@pytest.mark.parametrize(("elapsed_ms", "label"), [
    (0, "[<=0ms]"), (1, "[0~10ms]"), (9, "[0~10ms]"), (10, "[10~50ms]"), (499, "[200~500ms]"),
    (500, "[500ms~1s]"), (999, "[500ms~1s]"), (1000, "[1~2s]"), (9999, "[5~10s]"), (10000, "[10s~]"),
    (10**9, "[10s~]"),
])
def test_put_distribute_buckets_follow_store_stats_service(elapsed_ms: int, label: str) -> None:
    """StoreStatsService.setPutMessageEntireTimeMax's bucket bounds (<=0, <10, <50, ... <10000, else)."""
    assert PUT_DISTRIBUTE_BUCKETS[put_distribute_bucket(elapsed_ms)][1] == label


def test_put_latency_quantiles_follow_find_put_message_entire_time_px() -> None:
    """The interpolation of StoreStatsService.findPutMessageEntireTimePX over its buckets (1 ms wide
    up to 20 ms, 2 ms up to 50, ...), and Java's "%.2f" (half up)."""
    counts = [0] * 76
    assert put_latency_px(counts, 0.99) == 0.0 and java_format_2f(0.0) == "0.00"
    counts[0] = 8  # eight puts of at most 1 ms: index int(7.92) = 7 of 8 in (0, 1]
    assert put_latency_px(counts, 0.99) == 0.875 and java_format_2f(0.875) == "0.88"
    counts[0], counts[20] = 90, 10  # 90 within 1 ms, 10 in (20, 22]: the 99th is 9 of 10 into it
    assert put_latency_px(counts, 0.99) == pytest.approx(21.8)
    assert java_format_2f(0.125) == "0.13" and java_format_2f(2.675) == "2.68"
