"""``rocketstore admin`` verbs for topics' routes and deletion, subscription groups, client
connections, offset resets and a broker's consume stats, run as a real process against a real
broker with its name server; human and ``--json`` output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore.client import MessageQueue, Producer, PullConsumer, RemotingClient
from rocketstore.remoting.body import ConsumerData, HeartbeatData, ProducerData, SubscriptionData
from rocketstore.remoting.codes import RequestCode

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def admin(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "admin", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def ok_json(*args: str) -> Any:
    result = admin(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _heartbeat(remoting: RemotingClient, addr: str, client_id: str, *, consumer_group: str | None = None,
               producer_group: str | None = None, topic: str = "GTopic") -> None:
    beat = HeartbeatData(client_id=client_id)
    if producer_group:
        beat.producer_data_set.append(ProducerData(group_name=producer_group))
    if consumer_group:
        beat.consumer_data_set.append(ConsumerData(
            group_name=consumer_group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            subscription_data_set=[SubscriptionData(topic=topic, sub_string="tagA || tagB")]))
    remoting.call(addr, RequestCode.HEART_BEAT, None, beat.encode())


def test_topic_route_and_delete_topic(cluster: Any) -> None:
    n = cluster.namesrv_addr
    ok_json("-n", n, "updateTopic", "-t", "GDel", "-c", "DefaultCluster", "-r", "3", "-w", "3")
    route = ok_json("-n", n, "topicRoute", "-t", "GDel")
    assert route["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 3, "topicSysFlag": 0,
                                    "writeQueueNums": 3}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": cluster.broker_addr}
    human = admin("-n", n, "topicRoute", "-t", "GDel")
    assert human.returncode == 0 and '"readQueueNums": 3' in human.stdout
    deleted = admin("-n", n, "deleteTopic", "-t", "GDel", "-c", "DefaultCluster")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.splitlines() == ["delete topic [GDel] from cluster [DefaultCluster] success.",
                                           "delete topic [GDel] from NameServer success."]
    assert cluster.controller.topic_config_manager.get("GDel") is None
    gone = admin("-n", n, "topicRoute", "-t", "GDel")
    assert gone.returncode == 1 and "No topic route info in name server for the topic: GDel" in gone.stderr


def test_sub_group_verbs(cluster: Any, remoting: RemotingClient) -> None:
    n, b = cluster.namesrv_addr, cluster.broker_addr
    made = ok_json("-n", n, "updateSubGroup", "-g", "GSub", "-c", "DefaultCluster", "-r", "3", "-d", "false")
    assert made["brokers"] == [b]
    config = cluster.controller.subscription_group_manager.get("GSub")
    assert (config.retry_max_times, config.consume_broadcast_enable) == (3, False)
    assert not config.consume_message_orderly
    fifo = ok_json("-n", n, "updateSubGroup", "-g", "GFifo", "-b", b, "-o", "true")
    assert fifo["subscriptionGroupConfig"]["consumeMessageOrderly"] is True
    assert cluster.controller.subscription_group_manager.get("GFifo").consume_message_orderly
    bad = admin("-n", n, "updateSubGroup", "-g", "GSub", "-b", b, "-s", "yes")
    assert bad.returncode == 2 and "expected true or false" in bad.stderr
    PullConsumer(n, "GSub", client=remoting).commit_offset(MessageQueue("TBW102", "broker-a", 0), 1)
    human = admin("-n", n, "deleteSubGroup", "-g", "GSub", "-b", b, "-r", "true")
    assert human.returncode == 0 and f"delete subscription group [GSub] from broker [{b}] success." in human.stdout
    assert cluster.controller.subscription_group_manager.get("GSub") is None
    assert cluster.controller.consumer_offset_manager.query_offset("GSub", "TBW102", 0) == -1


def test_connection_verbs(cluster: Any, remoting: RemotingClient) -> None:
    n, b = cluster.namesrv_addr, cluster.broker_addr
    ok_json("-n", n, "updateTopic", "-t", "GTopic", "-b", b)
    _heartbeat(remoting, b, "10.1.1.1@c", consumer_group="GCon")
    _heartbeat(remoting, b, "10.1.1.2@p", producer_group="GProd")
    found = ok_json("-n", n, "consumerConnection", "-g", "GCon")
    assert [c["clientId"] for c in found["connections"]] == ["10.1.1.1@c"]
    assert found["connections"][0]["language"] == "PYTHON"
    assert found["subscriptions"] == {"GTopic": "tagA || tagB"}
    assert (found["consumeType"], found["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
    human = admin("-n", n, "consumerConnection", "-g", "GCon").stdout
    assert "10.1.1.1@c" in human and "Below is subscription:" in human and "MessageModel: CLUSTERING" in human
    offline = admin("-n", n, "consumerConnection", "-g", "GNobody")
    assert offline.returncode == 1 and "GNobody" in offline.stderr
    producers = ok_json("-n", n, "producerConnection", "-g", "GProd", "-t", "GTopic")
    assert [c["clientId"] for c in producers["connections"]] == ["10.1.1.2@p"]
    assert "10.1.1.2@p" in admin("-n", n, "producerConnection", "-g", "GProd", "-t", "GTopic").stdout
    missing = admin("-n", n, "producerConnection", "-g", "GNoProd", "-t", "GTopic")
    assert missing.returncode == 1 and "the producer group[GNoProd] not exist" in missing.stderr


def test_reset_offset_by_time_and_broker_consume_stats(cluster: Any, remoting: RemotingClient) -> None:
    n, b = cluster.namesrv_addr, cluster.broker_addr
    ok_json("-n", n, "updateTopic", "-t", "GTopic", "-b", b, "-r", "1", "-w", "1")
    producer = Producer(n, "PG", client=remoting)
    for i in range(3):
        producer.send("GTopic", f"m{i}".encode(), queue_id=0)
    cluster.wait_dispatched()
    mq = MessageQueue("GTopic", "broker-a", 0)
    PullConsumer(n, "GReset", client=remoting).commit_offset(mq, 3)
    ok_json("-n", n, "updateSubGroup", "-g", "GReset", "-b", b)

    # nobody online: the offsets are committed by the tool (mqadmin's fallback)
    reset = ok_json("-n", n, "resetOffsetByTime", "-g", "GReset", "-t", "GTopic", "-s", "0")
    assert reset["queues"] == [{"brokerName": "broker-a", "queueId": 0, "offset": 0}]
    assert cluster.controller.consumer_offset_manager.query_offset("GReset", "GTopic", 0) == 0

    stats = ok_json("-n", n, "brokerConsumeStats", "-b", b)
    row = next(r for r in stats["queues"] if r["group"] == "GReset")
    assert (row["topic"], row["brokerOffset"], row["consumerOffset"], row["diff"]) == ("GTopic", 3, 0, 3)
    assert stats["diffTotal"] >= 3
    human = admin("-n", n, "brokerConsumeStats", "-b", b).stdout
    assert "#Consumer Offset" in human and "GReset" in human and "Diff Total:" in human

    # a consumer online: the broker answers the offsets and pushes them to it (not committed here)
    _heartbeat(remoting, b, "10.1.1.3@c", consumer_group="GReset")
    text = admin("-n", n, "resetOffsetByTime", "-g", "GReset", "-t", "GTopic", "-s", "now")
    assert text.returncode == 0, text.stderr
    assert "rollback consumer offset by specified group[GReset], topic[GTopic], force[true]" in text.stdout
    # RocketMQ's getOffsetInQueueByTime: past the last message it is that message's offset, 2
    assert text.stdout.splitlines()[-1].split() == ["broker-a", "0", "2"]
    assert cluster.controller.consumer_offset_manager.query_offset("GReset", "GTopic", 0) == 0
    bad = admin("-n", n, "resetOffsetByTime", "-g", "GReset", "-t", "GTopic", "-s", "yesterday")
    assert bad.returncode == 2 and "yyyy-MM-dd#HH:mm:ss:SSS" in bad.stderr
    when = time.strftime("%Y-%m-%d#%H:%M:%S:000", time.localtime(time.time() + 3600))
    assert ok_json("-n", n, "resetOffsetByTime", "-g", "GReset", "-t", "GTopic", "-s", when)["queues"][0]["offset"] == 2
