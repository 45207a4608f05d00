"""PULL_MESSAGE statuses, subscriptions, offset commits and long polling against a real broker."""

from __future__ import annotations

import threading
import time

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.broker.processor.pull import response_code_for
from rocketstore.common.message import BatchItem, encode_batch
from rocketstore.remoting.body import ConsumerData, HeartbeatData, SubscriptionData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import PullSysFlag, SendMessageRequestHeader
from rocketstore.store.status import GetMessageStatus

SUSPEND_SUB = int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)


def test_status_to_code_table() -> None:
    """PullMessageProcessor's switch, including the offset-0 special case of empty queues."""
    assert response_code_for(GetMessageStatus.FOUND, 5) == ResponseCode.SUCCESS
    assert response_code_for(GetMessageStatus.NO_MATCHED_MESSAGE, 5) == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert response_code_for(GetMessageStatus.MESSAGE_WAS_REMOVING, 5) == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert response_code_for(GetMessageStatus.OFFSET_FOUND_NULL, 5) == ResponseCode.PULL_NOT_FOUND
    assert response_code_for(GetMessageStatus.OFFSET_OVERFLOW_ONE, 5) == ResponseCode.PULL_NOT_FOUND
    assert response_code_for(GetMessageStatus.OFFSET_OVERFLOW_BADLY, 5) == ResponseCode.PULL_OFFSET_MOVED
    assert response_code_for(GetMessageStatus.OFFSET_TOO_SMALL, 5) == ResponseCode.PULL_OFFSET_MOVED
    for status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        assert response_code_for(status, 0) == ResponseCode.PULL_NOT_FOUND
        assert response_code_for(status, 3) == ResponseCode.PULL_OFFSET_MOVED


def _fill(broker: BrokerHandle, client: RawClient, topic: str, tags: list[str]) -> None:
    for i, tag in enumerate(tags):
        assert client.send_message(topic, f"m{i}".encode(), properties={"TAGS": tag}).code == ResponseCode.SUCCESS
    broker.wait_dispatched()


@pytest.mark.integration
def test_found_and_offset_statuses(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicPull", ["a", "b", "a"])
    found = client.pull("TopicPull", 0, 1, max_msgs=1)
    assert (found.code, found.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert [m.body for m in decode_records(found.body)] == [b"m1"]
    assert found.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "2", "minOffset": "0",
                                "maxOffset": "3"}
    at_end = client.pull("TopicPull", 0, 3)
    assert (at_end.code, at_end.remark, at_end.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", "3")
    assert at_end.body == b""
    past = client.pull("TopicPull", 0, 10)
    assert (past.code, past.remark, past.ext_fields["nextBeginOffset"]) == (
        ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", "3")
    # queue 1 of the topic has never been written: offset 0 is "not found", anything else moved
    empty = client.pull("TopicPull", 1, 0)
    assert (empty.code, empty.remark) == (ResponseCode.PULL_NOT_FOUND, "NO_MATCHED_LOGIC_QUEUE")
    moved = client.pull("TopicPull", 1, 7)
    assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")


@pytest.mark.integration
def test_refusals(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicRefuse", ["a"])
    assert client.pull("NoSuchTopic", 0, 0).code == ResponseCode.TOPIC_NOT_EXIST
    bad_queue = client.pull("TopicRefuse", 4, 0)
    assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[4] is illegal" in (bad_queue.remark or "")
    sql = client.call(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "CG", "topic": "TopicRefuse", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "a > 1",
        "subVersion": "0", "expressionType": "SQL92"})
    assert sql.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (sql.remark or "")


@pytest.mark.integration
def test_tag_subscription_filters_and_no_match_retries(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicTags", ["a", "b", "c", "b"])
    resp = client.pull("TopicTags", 0, 0, subscription="b || c")
    assert [m.body for m in decode_records(resp.body)] == [b"m1", b"m2", b"m3"]
    none = client.pull("TopicTags", 0, 0, subscription="zzz")
    assert (none.code, none.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")
    assert none.ext_fields["nextBeginOffset"] == "4"  # the filtered entries are skipped


@pytest.mark.integration
def test_heartbeat_subscription_used_without_subscription_flag(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicHb", ["a", "b"])
    heartbeat = HeartbeatData(client_id="cid-1", consumer_data_set=[ConsumerData(
        group_name="CGHb", consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        subscription_data_set=[SubscriptionData(topic="TopicHb", sub_string="b", tags_set=["b"])])])
    assert client.call(RequestCode.HEART_BEAT, body=heartbeat.encode()).code == ResponseCode.SUCCESS
    # sysFlag without SUBSCRIPTION, as a push consumer sends it: the heartbeat's "b" applies
    resp = client.pull("TopicHb", 0, 0, group="CGHb", sys_flag=0, subscription="")
    assert [m.body for m in decode_records(resp.body)] == [b"m1"]
    # a group nobody announced falls back to the request's expression
    other = client.pull("TopicHb", 0, 0, group="CGOther", sys_flag=0, subscription="a")
    assert [m.body for m in decode_records(other.body)] == [b"m0"]


@pytest.mark.integration
def test_commit_offset_flag_commits(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicCommit", ["a", "a"])
    flag = int(PullSysFlag.COMMIT_OFFSET | PullSysFlag.SUBSCRIPTION)
    client.pull("TopicCommit", 0, 0, group="CGc", sys_flag=flag, commit_offset=1)
    assert broker.controller.consumer_offset_manager.query_offset("CGc", "TopicCommit", 0) == 1
    client.pull("TopicCommit", 0, 0, group="CGc", sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=2)
    assert broker.controller.consumer_offset_manager.query_offset("CGc", "TopicCommit", 0) == 1


@pytest.mark.integration
def test_long_polling_wakes_on_arrival(broker: BrokerHandle) -> None:
    consumer, producer = broker.client(), broker.client()
    _fill(broker, producer, "TopicLp", ["a"])
    opaque = consumer.send(_pull_cmd("TopicLp", 1, suspend_ms=10_000))
    broker.wait_held_pulls(1)  # held: no answer while nothing arrives
    sent_at = time.monotonic()
    assert producer.send_message("TopicLp", b"wake", properties={"TAGS": "a"}).code == ResponseCode.SUCCESS
    resp = consumer.receive(opaque, timeout=5)
    latency = time.monotonic() - sent_at
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(resp.body)] == [b"wake"]
    assert latency < 1.0, f"woken after {latency:.3f} s"
    broker.wait_held_pulls(0)  # answered pulls are no longer counted


@pytest.mark.integration
def test_long_polling_times_out_with_not_found(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicLpTimeout", ["a"])
    began = time.monotonic()
    resp = client.pull("TopicLpTimeout", 0, 1, sys_flag=SUSPEND_SUB, suspend_ms=600)
    elapsed = time.monotonic() - began
    assert (resp.code, resp.remark) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE")
    assert 0.55 <= elapsed < 2.0, elapsed


@pytest.mark.integration
def test_long_polling_ignores_messages_the_filter_rejects(broker: BrokerHandle) -> None:
    consumer, producer = broker.client(), broker.client()
    _fill(broker, producer, "TopicLpTag", ["a"])
    began = time.monotonic()
    opaque = consumer.send(_pull_cmd("TopicLpTag", 1, suspend_ms=800, subscription="wanted"))
    broker.wait_held_pulls(1)
    producer.send_message("TopicLpTag", b"other", properties={"TAGS": "unwanted"})
    resp = consumer.receive(opaque, timeout=5)
    # not woken by the unwanted tag: answered at the timeout by the re-run, which skips it
    assert time.monotonic() - began >= 0.75
    assert (resp.code, resp.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "2")


@pytest.mark.integration
def test_long_polling_wakes_on_a_batch_whose_last_message_the_filter_rejects(broker: BrokerHandle) -> None:
    """Arrivals reach the loop together (one hand-over for many dispatched messages): the pull must
    not be judged by the last message's tag alone."""
    consumer, producer = broker.client(), broker.client()
    _fill(broker, producer, "TopicLpBatch", ["a"])
    opaque = consumer.send(_pull_cmd("TopicLpBatch", 1, suspend_ms=10_000, subscription="wanted"))
    broker.wait_held_pulls(1)
    items = [BatchItem(b"hit", 0, {"TAGS": "wanted"}), *(BatchItem(b"miss", 0, {"TAGS": "other"}) for _ in range(30))]
    header = SendMessageRequestHeader(producer_group="PG", topic="TopicLpBatch", default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, properties="", batch=True)
    sent_at = time.monotonic()
    resp = producer.call(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext_fields(), encode_batch(items))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    answer = consumer.receive(opaque, timeout=5)
    assert time.monotonic() - sent_at < 1.0, "the held pull waited although a wanted message arrived"
    assert answer.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(answer.body)] == [b"hit"]


@pytest.mark.integration
def test_long_polling_without_suspend_flag_answers_at_once(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicNoSuspend", ["a"])
    began = time.monotonic()
    resp = client.pull("TopicNoSuspend", 0, 1, sys_flag=int(PullSysFlag.SUBSCRIPTION), suspend_ms=5000)
    assert resp.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - began < 1.0


@pytest.mark.integration
def test_many_held_pulls_each_get_their_message(broker: BrokerHandle) -> None:
    producer = broker.client()
    _fill(broker, producer, "TopicLpMany", ["a"])
    consumers = [broker.client() for _ in range(3)]
    opaques = [c.send(_pull_cmd("TopicLpMany", 1, suspend_ms=10_000)) for c in consumers]
    broker.wait_held_pulls(3)
    producer.send_message("TopicLpMany", b"all", properties={"TAGS": "a"})
    for c, opaque in zip(consumers, opaques, strict=True):
        resp = c.receive(opaque, timeout=3)
        assert [m.body for m in decode_records(resp.body)] == [b"all"]


@pytest.mark.integration
def test_shutdown_releases_held_pulls(broker: BrokerHandle, client: RawClient) -> None:
    _fill(broker, client, "TopicLpStop", ["a"])
    opaque = client.send(_pull_cmd("TopicLpStop", 1, suspend_ms=15_000))
    broker.wait_held_pulls(1)
    began = time.monotonic()
    stopper = threading.Thread(target=lambda: broker.run(broker.controller.stop(grace_s=2.0)))
    stopper.start()
    resp = client.receive(opaque, timeout=5)
    stopper.join(10)
    assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert time.monotonic() - began < 2.0  # not the 15 s hold, nor the 2 s grace period


def _pull_cmd(topic: str, offset: int, *, suspend_ms: int, subscription: str = "*"):
    from rocketstore.remoting.command import RemotingCommand

    return RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": "CGLp", "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": str(SUSPEND_SUB), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
        "subscription": subscription, "subVersion": "0", "expressionType": "TAG"})
