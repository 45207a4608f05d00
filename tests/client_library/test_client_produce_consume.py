"""Producer and PullConsumer against a real broker found through its embedded name server."""

from __future__ import annotations

import threading
import time
import zlib
from typing import Any

import pytest
from polling import wait_until

from rocketstore.client import (
    MessageQueue,
    OutgoingMessage,
    Producer,
    PullConsumer,
    PullStatus,
    RemotingClient,
    RemotingError,
    nearly_time_from_uniq_id,
)
from rocketstore.common.message import SysFlag, create_message_id, java_string_hash, properties_to_string
from rocketstore.remoting.body import GetConsumerListByGroupResponseBody
from rocketstore.remoting.codes import RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.headers import SendMessageRequestHeader

pytestmark = pytest.mark.integration


@pytest.fixture
def producer(cluster: Any, remoting: RemotingClient) -> Producer:
    return Producer(cluster.namesrv_addr, "PG", client=remoting)


@pytest.fixture
def consumer(cluster: Any, remoting: RemotingClient) -> PullConsumer:
    return PullConsumer(cluster.namesrv_addr, "CG", client=remoting)


def test_send_then_pull_back(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    sent = [producer.send("Orders", f"order-{i}".encode(), tags=f"tag{i % 2}", keys=[f"k{i}", "all"],
                          properties={"color": "blue"}, queue_id=2) for i in range(5)]
    assert [r.queue_offset for r in sent] == [0, 1, 2, 3, 4]
    assert all(r.queue_id == 2 and r.broker_name == "broker-a" and r.status == "SEND_OK" for r in sent)
    assert len({r.msg_id for r in sent}) == 5
    cluster.wait_dispatched()
    mq = MessageQueue("Orders", "broker-a", 2)
    assert mq in consumer.queues("Orders")
    result = consumer.pull(mq, 0)
    assert result.status is PullStatus.FOUND
    assert result.next_begin_offset == 5 and result.min_offset == 0 and result.max_offset == 5
    assert [m.body for m in result.messages] == [f"order-{i}".encode() for i in range(5)]
    assert [m.tags for m in result.messages] == ["tag0", "tag1", "tag0", "tag1", "tag0"]
    assert [m.keys for m in result.messages] == [f"k{i} all" for i in range(5)]
    assert all(m.properties["color"] == "blue" for m in result.messages)
    # the result's ids are the message's UNIQ_KEY and the broker's offset id
    for r, m in zip(sent, result.messages, strict=True):
        assert m.uniq_key == r.msg_id
        assert create_message_id(m.store_host, m.physical_offset) == r.offset_msg_id
        made = round(nearly_time_from_uniq_id(r.msg_id).timestamp() * 1000)
        assert 0 <= m.born_timestamp - made < 1000  # the id is made first, then the route looked up
    # from the middle, with a cap
    part = consumer.pull(mq, 3, max_nums=1)
    assert [m.body for m in part.messages] == [b"order-3"] and part.next_begin_offset == 4


def test_round_robin_over_writable_queues(cluster: Any, producer: Producer) -> None:
    results = [producer.send("Spread", b"x") for _ in range(8)]
    queues = [r.queue_id for r in results]
    # an unknown topic is created through TBW102 with the producer's 4 default queues
    assert sorted(set(queues)) == [0, 1, 2, 3]
    assert [queues.count(q) for q in range(4)] == [2, 2, 2, 2]
    assert cluster.controller.topic_config_manager.get("Spread").write_queue_nums == 4


def test_batch(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    result = producer.send_batch("Batched", [b"one", OutgoingMessage(b"two", tags="T", keys="key2"), b"three"],
                                 queue_id=1)
    assert len(result.msg_ids) == 3 and len(set(result.msg_ids)) == 3
    assert len(result.offset_msg_id.split(",")) == 3
    assert result.queue_offset == 0
    cluster.wait_dispatched()
    pulled = consumer.pull(MessageQueue("Batched", "broker-a", 1), 0)
    assert [m.body for m in pulled.messages] == [b"one", b"two", b"three"]
    assert [m.queue_offset for m in pulled.messages] == [0, 1, 2]
    assert [m.uniq_key for m in pulled.messages] == result.msg_ids
    assert pulled.messages[1].tags == "T" and pulled.messages[1].keys == "key2"


def test_oneway_send(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    uniq = producer.send_oneway("OneWay", b"fire-and-forget", queue_id=0, tags="ow")
    mq = MessageQueue("OneWay", "broker-a", 0)

    def pulled() -> list[Any]:
        try:
            return consumer.pull(mq, 0).messages
        except RemotingError:  # TOPIC_NOT_EXIST: the one-way send races this pull
            consumer._invalidate("OneWay")
            raise

    messages = wait_until("the one-way message pulled", pulled, timeout=10, interval=0.02)
    assert [(m.body, m.tags, m.uniq_key) for m in messages] == [(b"fire-and-forget", "ow", uniq)]


def test_pull_statuses(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    producer.send("Statuses", b"a", queue_id=0)
    cluster.wait_dispatched()
    mq = MessageQueue("Statuses", "broker-a", 0)
    at_end = consumer.pull(mq, 1)
    assert at_end.status is PullStatus.NO_NEW_MSG and at_end.messages == [] and at_end.next_begin_offset == 1
    far = consumer.pull(mq, 1000)
    assert far.status is PullStatus.OFFSET_ILLEGAL and far.max_offset == 1


def test_tags_are_checked_client_side(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    # "Aa" and "BB" have the same Java hashCode, so the broker's tag-code filter lets both through;
    # the client drops the one not subscribed, as PullAPIWrapper.processPullResult does.
    assert java_string_hash("Aa") == java_string_hash("BB")
    for tag in ("Aa", "BB", "Cc", "Aa"):
        producer.send("Tagged", tag.encode(), tags=tag, queue_id=0)
    cluster.wait_dispatched()
    result = consumer.pull(MessageQueue("Tagged", "broker-a", 0), 0, expression="Aa || Zz")
    assert result.status is PullStatus.FOUND
    assert [m.body for m in result.messages] == [b"Aa", b"Aa"]
    assert result.next_begin_offset == 4


def test_offsets_commit_and_fetch(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    producer.send("Offsets", b"a", queue_id=3)
    cluster.wait_dispatched()
    mq = MessageQueue("Offsets", "broker-a", 3)
    before = consumer.fetch_offset(mq)
    assert before in (-1, 0)  # -1: the broker has no offset for the group (QUERY_NOT_FOUND)
    consumer.commit_offset(mq, 1)
    assert consumer.fetch_offset(mq) == 1
    consumer.commit_offset(mq, 0, oneway=True)
    wait_until("the one-way commit applied", lambda: consumer.fetch_offset(mq) == 0, timeout=10, interval=0.02)
    other = PullConsumer(cluster.namesrv_addr, "OtherGroup", client=consumer.client)
    assert other.fetch_offset(mq) in (-1, 0)


def test_suspended_pull_is_woken_by_a_send(cluster: Any, producer: Producer, consumer: PullConsumer) -> None:
    producer.send("LongPoll", b"first", queue_id=0)
    cluster.wait_dispatched()
    mq = MessageQueue("LongPoll", "broker-a", 0)
    box: dict[str, Any] = {}

    def pull() -> None:
        started = time.monotonic()
        box["result"] = consumer.pull(mq, 1, suspend_timeout_ms=20_000)
        box["elapsed"] = time.monotonic() - started

    t = threading.Thread(target=pull)
    t.start()
    cluster.handle.wait_held_pulls(1)
    assert t.is_alive()  # held by the broker
    producer.send("LongPoll", b"second", queue_id=0)
    t.join(10)
    assert not t.is_alive()
    assert box["result"].status is PullStatus.FOUND
    assert [m.body for m in box["result"].messages] == [b"second"]
    assert box["elapsed"] < 10


def test_suspended_pull_returns_no_new_message_after_its_timeout(cluster: Any, producer: Producer,
                                                                  consumer: PullConsumer) -> None:
    producer.send("LongPollIdle", b"x", queue_id=0)
    cluster.wait_dispatched()  # else offset 1 is past the queue's end: OFFSET_ILLEGAL
    started = time.monotonic()
    result = consumer.pull(MessageQueue("LongPollIdle", "broker-a", 0), 1, suspend_timeout_ms=1000)
    assert result.status is PullStatus.NO_NEW_MSG
    assert 0.8 < time.monotonic() - started < 8


def test_compressed_body_from_a_java_producer_is_inflated(cluster: Any, remoting: RemotingClient,
                                                           consumer: PullConsumer) -> None:
    body = b"compress me " * 1000
    # what DefaultMQProducer sends for a body over 4 KiB: zlib data, COMPRESSED | zlib type bits
    header = SendMessageRequestHeader(
        producer_group="PG", topic="Zipped", default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
        sys_flag=SysFlag.COMPRESSED | (3 << 8), born_timestamp=int(time.time() * 1000), flag=0,
        properties=properties_to_string({"UNIQ_KEY": "X"}))
    remoting.call(cluster.broker_addr, RequestCode.SEND_MESSAGE_V2, header.to_v2_ext_fields(), zlib.compress(body),
                  serialize_type=SerializeType.JSON)
    cluster.wait_dispatched()
    (message,) = consumer.pull(MessageQueue("Zipped", "broker-a", 0), 0).messages
    assert message.body == body


def test_heartbeat_registers_and_unregister_removes(cluster: Any, producer: Producer, remoting: RemotingClient) -> None:
    producer.send("Hb", b"x")
    consumer = PullConsumer(cluster.namesrv_addr, "HbGroup", client=remoting)
    consumer.subscribe("Hb", "a || b")
    assert consumer.heartbeat() == 1
    response = remoting.call(cluster.broker_addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                             {"consumerGroup": "HbGroup"})
    assert GetConsumerListByGroupResponseBody.decode(response.body).consumer_id_list == [consumer.client_id]
    info = cluster.controller.consumer_manager.get("HbGroup")
    assert info is not None
    data = consumer.heartbeat_data().consumer_data_set[0]
    assert (data.consume_type, data.message_model) == ("CONSUME_ACTIVELY", "CLUSTERING")
    consumer.unregister()
    response = remoting.invoke(cluster.broker_addr, remoting.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                                                     {"consumerGroup": "HbGroup"}))
    assert response.code != 0  # no consumer left in the group


def test_start_sends_periodic_heartbeats(cluster: Any, producer: Producer) -> None:
    producer.send("HbPeriodic", b"x")
    with PullConsumer(cluster.namesrv_addr, "PeriodicGroup") as consumer:
        consumer.subscribe("HbPeriodic")
        consumer.start(heartbeat_interval=0.1)
        first = cluster.controller.consumer_manager.get("PeriodicGroup")
        assert first is not None
        registered_ms = first.last_update_ms
        wait_until("a later heartbeat", lambda: first.last_update_ms > registered_ms, timeout=10, interval=0.05)
    # close() unregistered the group
    assert cluster.controller.consumer_manager.get("PeriodicGroup") is None or \
        not cluster.controller.consumer_manager.get("PeriodicGroup").client_ids()


def test_route_is_refetched_after_a_failed_send(cluster: Any, remoting: RemotingClient) -> None:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting, retries=0)
    producer.send("Refresh", b"x")
    info = producer._routes["Refresh"]
    # a send that fails (queue id past the topic's queues: SYSTEM_ERROR) drops the cached route
    with pytest.raises(RemotingError) as failed:
        producer.send("Refresh", b"x", queue_id=99)
    assert failed.value.code == ResponseCode.SYSTEM_ERROR
    assert "Refresh" not in producer._routes
    producer.send("Refresh", b"y")
    assert producer._routes["Refresh"] is not info
