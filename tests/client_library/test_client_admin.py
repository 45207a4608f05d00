"""BrokerAdmin and MQAdmin against a real broker: config, runtime info, cleanup, topics,
consumer progress, message queries and the cluster list."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from rocketstore.client import BrokerAdmin, MessageQueue, MQAdmin, Producer, PullConsumer, RemotingClient, RemotingError
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(cluster: Any, remoting: RemotingClient) -> MQAdmin:
    return MQAdmin(cluster.namesrv_addr, client=remoting)


@pytest.fixture
def broker_admin(cluster: Any, remoting: RemotingClient) -> BrokerAdmin:
    return BrokerAdmin(cluster.broker_addr, client=remoting)


def test_broker_config_get_and_live_update(cluster: Any, broker_admin: BrokerAdmin) -> None:
    config = broker_admin.get_broker_config()
    assert config["brokerName"] == "broker-a"
    assert config["fileReservedTime"] == "72"
    assert "mappedFileSizeCommitLog" in config and "brokerClusterName" in config
    broker_admin.update_broker_config({"fileReservedTime": "1", "deleteWhen": "04"})
    assert cluster.controller.store_config.file_reserved_time == 1  # the running store sees it
    after = broker_admin.get_broker_config()
    assert after["fileReservedTime"] == "1" and after["deleteWhen"] == "04"


def test_bad_config_update_is_refused(cluster: Any, broker_admin: BrokerAdmin) -> None:
    with pytest.raises(RemotingError) as info:
        broker_admin.update_broker_config({"fileReservedTime": "soon"})
    assert info.value.code != ResponseCode.SUCCESS
    assert "fileReservedTime" in info.value.remark
    assert cluster.controller.store_config.file_reserved_time == 72


def test_runtime_info(cluster: Any, broker_admin: BrokerAdmin, remoting: RemotingClient) -> None:
    Producer(cluster.namesrv_addr, "PG", client=remoting).send("Rt", b"12345")
    info = broker_admin.get_runtime_info()
    assert info["brokerVersionDesc"] == "V4_9_8"
    assert int(info["commitLogMaxOffset"]) > 0
    assert int(info["putMessageTimesTotal"]) >= 1


def test_delete_expired_commit_log(broker_admin: BrokerAdmin) -> None:
    assert broker_admin.delete_expired_commit_log() is True


def test_topic_create_list_status(cluster: Any, admin: MQAdmin, remoting: RemotingClient) -> None:
    addrs = admin.create_topic("Created", read_queues=3, write_queues=2, perm=6)
    assert addrs == [cluster.broker_addr]
    config = cluster.controller.topic_config_manager.get("Created")
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (3, 2, 6)
    assert "Created" in admin.topic_list()
    route = admin.route("Created")
    assert route.queue_datas[0].write_queue_nums == 2
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    for _ in range(3):
        producer.send("Created", b"x", queue_id=1)
    cluster.wait_dispatched()
    status = {s.queue.queue_id: s for s in admin.topic_status("Created")}
    assert set(status) >= {0, 1}
    assert (status[1].min_offset, status[1].max_offset) == (0, 3)
    assert status[1].last_update_timestamp > 0
    assert status[0].max_offset == 0


def test_create_topic_on_cluster_and_on_one_broker(cluster: Any, admin: MQAdmin) -> None:
    assert admin.create_topic("ByCluster", cluster="DefaultCluster") == [cluster.broker_addr]
    assert admin.create_topic("ByAddr", broker_addr=cluster.broker_addr) == [cluster.broker_addr]
    assert cluster.controller.topic_config_manager.get("ByCluster").read_queue_nums == 8
    with pytest.raises(RemotingError):
        admin.create_topic("NoCluster", cluster="NoSuchCluster")


def test_consumer_progress_after_a_commit(cluster: Any, admin: MQAdmin, remoting: RemotingClient) -> None:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    for _ in range(5):
        producer.send("Progress", b"x", queue_id=0)
    cluster.wait_dispatched()
    consumer = PullConsumer(cluster.namesrv_addr, "ProgressGroup", client=remoting)
    consumer.commit_offset(MessageQueue("Progress", "broker-a", 0), 2)
    stats = admin.consumer_progress("ProgressGroup")
    by_queue = {o.queue: o for o in stats.offsets}
    q0 = by_queue[MessageQueue("Progress", "broker-a", 0)]
    assert (q0.broker_offset, q0.consumer_offset, q0.diff) == (5, 2, 3)
    assert stats.diff_total >= 3
    only = admin.consumer_progress("ProgressGroup", topic="Progress")
    assert {o.queue.topic for o in only.offsets} == {"Progress"}


def test_query_by_key_id_and_offset(cluster: Any, admin: MQAdmin, remoting: RemotingClient) -> None:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    first = producer.send("Query", b"alpha", keys=["order-1", "shared"], queue_id=0)
    second = producer.send("Query", b"beta", keys="shared", queue_id=0)
    cluster.wait_dispatched()
    assert [m.body for m in admin.query_msg_by_key("Query", "order-1")] == [b"alpha"]
    assert sorted(m.body for m in admin.query_msg_by_key("Query", "shared")) == [b"alpha", b"beta"]
    assert admin.query_msg_by_key("Query", "missing") == []
    by_id = admin.query_msg_by_id(second.offset_msg_id)
    assert by_id.body == b"beta" and by_id.uniq_key == second.msg_id
    assert [m.body for m in admin.query_msg_by_unique_key("Query", first.msg_id)] == [b"alpha"]
    at = admin.query_msg_by_offset("Query", "broker-a", 0, 1)
    assert at is not None and at.body == b"beta"
    assert admin.query_msg_by_offset("Query", "broker-a", 0, 2) is None
    with pytest.raises(RemotingError):
        admin.query_msg_by_id("not-an-id")


def test_search_offset_by_timestamp(cluster: Any, admin: MQAdmin, remoting: RemotingClient) -> None:
    """What SEARCH_OFFSET_BY_TIMESTAMP answers (RocketMQ's getOffsetInQueueByTime): the message stored at
    the time, else the nearer neighbour (older on a tie), the first offset before the first message and
    the last message's offset (not the max offset) after the last one."""
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    for i in range(4):
        producer.send("ByTime", f"m{i}".encode(), queue_id=0)
        time.sleep(0.03)
    cluster.wait_dispatched()
    mq = MessageQueue("ByTime", "broker-a", 0)
    messages = PullConsumer(cluster.namesrv_addr, "CG", client=remoting).pull(mq, 0, 32).messages
    ts = [m.store_timestamp for m in messages]
    assert len(ts) == 4 and all(b - a >= 20 for a, b in itertools.pairwise(ts))
    cases = {
        ts[0] - 60_000: 0,  # before the first message
        ts[1]: 1,  # exactly a message's store time
        ts[1] + 2: 1,  # just after message 1: the nearer neighbour is 1 (Kafka would say 2)
        ts[2] - 2: 2,  # just before message 2: the nearer neighbour is 2
        ts[3] + 60_000: 3,  # after the last message: the last offset, not the max offset 4
    }
    assert {t: admin.search_offset(mq, t) for t in cases} == cases
    # one broker by address answers the same
    assert BrokerAdmin(cluster.broker_addr, client=remoting).search_offset(mq, ts[2]) == 2
    # a queue the broker holds nothing for
    assert admin.search_offset(MessageQueue("ByTime", "broker-a", 1), ts[0]) == 0
    with pytest.raises(RemotingError, match="no master"):
        admin.search_offset(MessageQueue("ByTime", "broker-x", 0), ts[0])


def test_cluster_list(cluster: Any, admin: MQAdmin) -> None:
    info = admin.cluster_list()
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: cluster.broker_addr}
    assert admin.master_addrs() == [cluster.broker_addr]
