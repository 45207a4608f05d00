"""Admin requests over real sockets: broker config get/update (live), runtime info, manual CommitLog
deletion, topics, subscription groups, topic and consume stats in fastjson's MessageQueue-keyed form."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.client import BrokerAdmin, RemotingError
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.message import Message
from rocketstore.remoting.body import (
    ConsumeStatsBody,
    HeartbeatData,
    MessageQueueData,
    OffsetWrapperData,
    TopicOffsetData,
    TopicStatsTable,
)
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import CreateTopicRequestHeader, ElectMasterRequestHeader


def _mq(topic: str, queue_id: int) -> MessageQueueData:
    return MessageQueueData(topic=topic, broker_name="broker-a", queue_id=queue_id)


# -- over sockets --------------------------------------------------------------------------------


def _put(broker: BrokerHandle, topic: str, queue_id: int, count: int) -> None:
    for i in range(count):
        result = broker.store.put_message(Message(topic=topic, body=f"m{i}".encode(), queue_id=queue_id,
                                                  born_timestamp=int(time.time() * 1000)))
        assert result.ok
    broker.wait_dispatched()


@pytest.mark.integration
def test_get_broker_config_lists_both_halves(client: RawClient) -> None:
    resp = client.call(RequestCode.GET_BROKER_CONFIG)
    assert resp.code == ResponseCode.SUCCESS
    props = parse_properties(resp.body.decode())
    assert props["brokerName"] == "broker-a"
    assert props["brokerClusterName"] == "DefaultCluster"
    assert props["fileReservedTime"] == "72"
    assert props["deleteWhen"] == "04"
    assert json.loads(resp.ext_fields["version"])["counter"] == 0


@pytest.mark.integration
def test_update_broker_config_changes_store_config_live(broker: BrokerHandle, client: RawClient) -> None:
    body = b"fileReservedTime=1\ndiskMaxUsedSpaceRatio=60\nautoCreateSubscriptionGroup=false\n"
    assert client.call(RequestCode.UPDATE_BROKER_CONFIG, body=body).code == ResponseCode.SUCCESS
    assert broker.store.config.file_reserved_time == 1  # the store reads this very object
    assert broker.controller.store_config.disk_max_used_space_ratio == 60
    assert broker.controller.broker_config.auto_create_subscription_group is False
    resp = client.call(RequestCode.GET_BROKER_CONFIG)
    props = parse_properties(resp.body.decode())
    assert (props["fileReservedTime"], props["autoCreateSubscriptionGroup"]) == ("1", "false")
    assert json.loads(resp.ext_fields["version"])["counter"] == 1


@pytest.mark.integration
def test_update_broker_config_refuses_bad_input_and_changes_nothing(broker: BrokerHandle, client: RawClient) -> None:
    bad_value = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=5\ndeleteWhen=noon\n")
    assert bad_value.code == ResponseCode.SYSTEM_ERROR
    assert "deleteWhen" in (bad_value.remark or "")
    unknown = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"fileReservedTime=5\nfileReservedTyme=5\n")
    assert unknown.code == ResponseCode.SYSTEM_ERROR
    assert "fileReservedTyme" in (unknown.remark or "")
    black = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"configBlackList=x\n")
    assert black.code == ResponseCode.NO_PERMISSION
    assert broker.controller.store_config.file_reserved_time == 72
    assert broker.controller.store_config.delete_when == "04"


@pytest.mark.integration
def test_runtime_info(broker: BrokerHandle, client: RawClient) -> None:
    _put(broker, "Stats", 0, 3)
    resp = client.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert resp.code == ResponseCode.SUCCESS
    table = json.loads(resp.body)["table"]
    assert table["putMessageTimesTotal"] == "3"
    assert int(table["commitLogMaxOffset"]) > 0
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert table["brokerVersion"] == "409"
    assert table["dispatchBehindBytes"] == "0"
    assert table["commitLogDirCapacity"].startswith("Total : ")


@pytest.mark.integration
def test_delete_expired_commitlog_arms_manual_deletion(broker: BrokerHandle, client: RawClient) -> None:
    service = broker.store.clean_commit_log_service
    assert service.manual_delete_file_several_times == 0
    assert client.call(RequestCode.DELETE_EXPIRED_COMMITLOG).code == ResponseCode.SUCCESS
    assert service.manual_delete_file_several_times == 20


def _create_topic(client: RawClient, topic: str, queues: int = 4, perm: int = 6) -> int:
    header = CreateTopicRequestHeader(topic=topic, default_topic="TBW102", read_queue_nums=queues,
                                      write_queue_nums=queues, perm=perm, topic_filter_type="SINGLE_TAG",
                                      topic_sys_flag=0, order=False)
    return client.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext_fields()).code


@pytest.mark.integration
def test_topic_create_list_delete(broker: BrokerHandle, client: RawClient) -> None:
    assert _create_topic(client, "Orders", 3) == ResponseCode.SUCCESS
    table = json.loads(client.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)
    assert table["topicConfigTable"]["Orders"]["writeQueueNums"] == 3
    assert table["topicConfigTable"]["Orders"]["perm"] == 6
    assert table["dataVersion"]["counter"] > 0
    # names RocketMQ refuses
    assert _create_topic(client, "bad topic") == ResponseCode.SYSTEM_ERROR
    assert _create_topic(client, "TBW102") == ResponseCode.SYSTEM_ERROR
    assert _create_topic(client, "broker-a") == ResponseCode.SYSTEM_ERROR  # the broker-name topic
    assert client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Orders"}).code == ResponseCode.SUCCESS
    table = json.loads(client.call(RequestCode.GET_ALL_TOPIC_CONFIG).body)
    assert "Orders" not in table["topicConfigTable"]
    assert client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}).code == ResponseCode.SYSTEM_ERROR


@pytest.mark.integration
def test_subscription_groups(broker: BrokerHandle, client: RawClient) -> None:
    config = {"groupName": "G1", "retryMaxTimes": 3, "retryQueueNums": 2, "consumeEnable": True}
    resp = client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode())
    assert resp.code == ResponseCode.SUCCESS
    table = json.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)["subscriptionGroupTable"]
    assert (table["G1"]["retryMaxTimes"], table["G1"]["retryQueueNums"]) == (3, 2)
    assert "TOOLS_CONSUMER" in table
    broker.call_soon(lambda: broker.controller.consumer_offset_manager.commit_offset("G1", "T", 0, 5))
    resp = client.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G1", "removeOffset": "true"})
    assert resp.code == ResponseCode.SUCCESS
    assert broker.controller.subscription_group_manager.get("G1") is None
    assert broker.controller.consumer_offset_manager.query_offset("G1", "T", 0) == -1
    bad = client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"not json")
    assert bad.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.integration
def test_topic_stats(broker: BrokerHandle, client: RawClient) -> None:
    assert _create_topic(client, "Stats", 2) == ResponseCode.SUCCESS
    before = int(time.time() * 1000)
    _put(broker, "Stats", 1, 4)
    resp = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Stats"})
    assert resp.code == ResponseCode.SUCCESS
    assert resp.body.startswith(b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Stats"}:'
                                b'{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0},')
    table = TopicStatsTable.decode(resp.body).offset_table
    assert table[_mq("Stats", 0)] == TopicOffsetData(min_offset=0, max_offset=0, last_update_timestamp=0)
    q1 = table[_mq("Stats", 1)]
    assert (q1.min_offset, q1.max_offset) == (0, 4)
    assert q1.last_update_timestamp >= before - 1000
    missing = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.integration
def test_consume_stats_connection_list_and_consumers_by_topic(broker: BrokerHandle, client: RawClient) -> None:
    assert _create_topic(client, "Work", 2) == ResponseCode.SUCCESS
    _put(broker, "Work", 0, 5)
    broker.call_soon(lambda: broker.controller.consumer_offset_manager.commit_offset("CG", "Work", 0, 2))
    resp = client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG", "topic": "Work"})
    assert resp.code == ResponseCode.SUCCESS
    text = resp.body.decode()
    assert text.startswith('{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"Work"}:')
    assert text.endswith(',{"brokerName":"broker-a","queueId":1,"topic":"Work"}:'
                         '{"brokerOffset":0,"consumerOffset":0,"lastTimestamp":0}}}')
    table = ConsumeStatsBody.decode(resp.body).offset_table
    q0 = table[_mq("Work", 0)]
    assert (q0.broker_offset, q0.consumer_offset) == (5, 2)
    assert q0.last_timestamp > 0
    assert table[_mq("Work", 1)] == OffsetWrapperData(broker_offset=0, consumer_offset=0, last_timestamp=0)
    # without a topic: every topic the group has offsets for
    all_topics = ConsumeStatsBody.decode(client.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "CG"}).body)
    assert set(all_topics.offset_table) == set(table)

    assert client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                       {"consumerGroup": "CG"}).code == ResponseCode.CONSUMER_NOT_ONLINE
    heartbeat = {"clientID": "10.0.0.9@x", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "Work", "subString": "*", "subVersion": 1}]}]}
    HeartbeatData.decode(json.dumps(heartbeat))  # the shape is what the real client sends
    assert client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()).code == ResponseCode.SUCCESS
    conn = json.loads(client.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "CG"}).body)
    assert [c["clientId"] for c in conn["connectionSet"]] == ["10.0.0.9@x"]
    assert conn["messageModel"] == "CLUSTERING"
    assert conn["subscriptionTable"]["Work"]["subString"] == "*"
    who = json.loads(client.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "Work"}).body)
    assert who == {"groupList": ["CG"]}


@pytest.mark.integration
def test_deleted_topic_created_again_starts_empty(broker: BrokerHandle, client: RawClient) -> None:
    """DELETE_TOPIC_IN_BROKER destroys the topic's consume queues and drops its consumer offsets
    (cleanUnusedTopic for that topic): created again, the topic has no old messages and its queue
    offsets start at 0, while another topic keeps its messages and offsets."""
    for topic in ("Reborn", "Bystander"):
        assert _create_topic(client, topic, 2) == ResponseCode.SUCCESS
    for queue_id in (0, 1):
        for i in range(3):
            assert client.send_message("Reborn", f"old{i}".encode(), queue_id=queue_id).code == ResponseCode.SUCCESS
        client.wait_dispatched("Reborn", queue_id, 3)
    for i in range(2):
        assert client.send_message("Bystander", f"kept{i}".encode()).code == ResponseCode.SUCCESS
    client.wait_dispatched("Bystander", 0, 2)

    def commit(topic: str, offset: int) -> None:
        fields = {"consumerGroup": "G", "topic": topic, "queueId": "0", "commitOffset": str(offset)}
        assert client.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields).code == ResponseCode.SUCCESS

    def committed(topic: str) -> RemotingCommand:
        resp: RemotingCommand = client.call(RequestCode.QUERY_CONSUMER_OFFSET,
                                            {"consumerGroup": "G", "topic": topic, "queueId": "0"})
        return resp

    commit("Reborn", 2)
    commit("Bystander", 1)
    queue_dir = Path(broker.store.consume_queue_dir)
    assert (queue_dir / "Reborn" / "0").is_dir()

    assert client.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Reborn"}).code == ResponseCode.SUCCESS
    assert not (queue_dir / "Reborn").exists()  # gone from disk: a restart does not load it back
    gone = committed("Reborn")  # no committed offset: 0 for a queue starting at 0 (RocketMQ's answer)
    assert gone.code == ResponseCode.QUERY_NOT_FOUND or gone.ext_fields["offset"] == "0"
    assert "Reborn@G" not in broker.controller.consumer_offset_manager.encode()

    assert _create_topic(client, "Reborn", 2) == ResponseCode.SUCCESS
    for queue_id in (0, 1):
        max_offset = client.call(RequestCode.GET_MAX_OFFSET, {"topic": "Reborn", "queueId": str(queue_id)})
        assert max_offset.ext_fields["offset"] == "0"
        assert client.pull("Reborn", queue_id, 0, group="G", sys_flag=0).code != ResponseCode.SUCCESS
    sent = client.send_message("Reborn", b"new", queue_id=1)
    assert sent.code == ResponseCode.SUCCESS and sent.ext_fields["queueOffset"] == "0"
    client.wait_dispatched("Reborn", 1, 1)
    pulled = client.pull("Reborn", 1, 0, group="G")
    assert [r.body for r in decode_records(pulled.body)] == [b"new"]

    # the other topic: messages and offsets untouched
    kept = client.pull("Bystander", 0, 0, group="G")
    assert [r.body for r in decode_records(kept.body)] == [b"kept0", b"kept1"]
    assert committed("Bystander").ext_fields["offset"] == "1"


def test_a_master_hand_over_is_refused_by_a_broker_without_a_lease(broker: BrokerHandle) -> None:
    """CONTROLLER_ELECT_MASTER to a broker that is no Lease replica (here a plain master): only a
    Lease-mode master hands over (tests/operator/test_lease_failover.py), and the answer says why."""
    with BrokerAdmin(f"127.0.0.1:{broker.port}") as admin, pytest.raises(RemotingError) as refused:
        admin.hand_over_master()
    assert refused.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "controllerLeaseEnable=true" in refused.value.remark
    with BrokerAdmin(f"127.0.0.1:{broker.port}") as admin, pytest.raises(RemotingError) as refused:
        admin.client.call(admin.addr, RequestCode.CONTROLLER_ELECT_MASTER,
                          ElectMasterRequestHeader(broker_name="another-group"))
    assert refused.value.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert "not another-group" in refused.value.remark
