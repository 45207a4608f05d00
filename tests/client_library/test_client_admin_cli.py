"""``rocketstore admin`` run as a real process against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from rocketstore.client import MessageQueue, Producer, PullConsumer, RemotingClient

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def admin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", "admin", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=60, check=False)


def ok_json(*args: str) -> Any:
    result = admin(*args, "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return json.loads(result.stdout)


@pytest.fixture
def seeded(cluster: Any, remoting: RemotingClient) -> dict[str, Any]:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    sent = [producer.send("CliTopic", f"m{i}".encode(), keys=f"key{i}", tags="t", queue_id=0) for i in range(3)]
    cluster.wait_dispatched()
    PullConsumer(cluster.namesrv_addr, "CliGroup", client=remoting).commit_offset(
        MessageQueue("CliTopic", "broker-a", 0), 1)
    return {"sent": sent}


def test_topic_verbs(cluster: Any, seeded: dict[str, Any]) -> None:
    n = cluster.namesrv_addr
    created = ok_json("-n", n, "updateTopic", "-t", "CliNew", "-b", cluster.broker_addr, "-r", "2", "-w", "2")
    assert created["brokers"] == [cluster.broker_addr]
    assert cluster.controller.topic_config_manager.get("CliNew").write_queue_nums == 2
    assert {"CliNew", "CliTopic"} <= set(ok_json("-n", n, "topicList")["topicList"])
    status = ok_json("-n", n, "topicStatus", "-t", "CliTopic")
    q0 = next(q for q in status["queues"] if q["queueId"] == 0)
    assert (q0["minOffset"], q0["maxOffset"]) == (0, 3)
    human = admin("-n", n, "topicStatus", "-t", "CliTopic")
    assert human.returncode == 0 and "#Max Offset" in human.stdout and "broker-a" in human.stdout


def test_consumer_progress(cluster: Any, seeded: dict[str, Any]) -> None:
    progress = ok_json("-n", cluster.namesrv_addr, "consumerProgress", "-g", "CliGroup")
    q0 = next(q for q in progress["queues"] if q["topic"] == "CliTopic" and q["queueId"] == 0)
    assert (q0["brokerOffset"], q0["consumerOffset"], q0["diff"]) == (3, 1, 2)
    human = admin("-n", cluster.namesrv_addr, "consumerProgress", "-g", "CliGroup")
    assert "Diff Total:" in human.stdout


def test_message_queries(cluster: Any, seeded: dict[str, Any]) -> None:
    n = cluster.namesrv_addr
    sent = seeded["sent"]
    (by_key,) = ok_json("-n", n, "queryMsgByKey", "-t", "CliTopic", "-k", "key1")
    assert by_key["uniqKey"] == sent[1].msg_id and by_key["keys"] == "key1"
    (by_id,) = ok_json("-n", n, "queryMsgById", "-i", sent[2].offset_msg_id)
    assert by_id["queueOffset"] == 2
    (by_uniq,) = ok_json("-n", n, "queryMsgById", "-i", sent[0].msg_id, "-t", "CliTopic")
    assert by_uniq["queueOffset"] == 0
    (by_offset,) = ok_json("-n", n, "queryMsgByOffset", "-t", "CliTopic", "-b", "broker-a", "-i", "0", "-o", "1")
    assert by_offset["uniqKey"] == sent[1].msg_id
    missing = admin("-n", n, "queryMsgByKey", "-t", "CliTopic", "-k", "nope")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "no message" in missing.stderr


def test_broker_config_verbs(cluster: Any) -> None:
    n = cluster.namesrv_addr
    config = ok_json("-n", n, "getBrokerConfig", "-b", cluster.broker_addr)
    assert config[cluster.broker_addr]["fileReservedTime"] == "72"
    ok_json("updateBrokerConfig", "-b", cluster.broker_addr, "-k", "fileReservedTime", "-v", "48")  # no -n needed
    assert cluster.controller.store_config.file_reserved_time == 48
    by_cluster = ok_json("-n", n, "getBrokerConfig", "-c", "DefaultCluster")
    assert by_cluster[cluster.broker_addr]["fileReservedTime"] == "48"
    assert ok_json("-n", n, "deleteExpiredCommitLog", "-c", "DefaultCluster")["success"] is True
    status = ok_json("brokerStatus", "-b", cluster.broker_addr)
    assert status["brokerVersionDesc"] == "V4_9_8"
    bad = admin("updateBrokerConfig", "-b", cluster.broker_addr, "-k", "fileReservedTime", "-v", "x")
    assert bad.returncode == 1 and "fileReservedTime" in bad.stderr and "Traceback" not in bad.stderr


def test_cluster_list(cluster: Any) -> None:
    (row,) = ok_json("-n", cluster.namesrv_addr, "clusterList")["brokers"]
    assert row == {"cluster": "DefaultCluster", "brokerName": "broker-a", "brokerId": 0,
                   "addr": cluster.broker_addr, "version": "V4_9_8"}
    env_run = admin("clusterList", env={"NAMESRV_ADDR": cluster.namesrv_addr})
    assert env_run.returncode == 0 and "broker-a" in env_run.stdout


def test_errors_are_one_line() -> None:
    dead = f"127.0.0.1:{free_port()}"
    refused = admin("-n", dead, "topicList")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and dead in refused.stderr and "Traceback" not in refused.stderr
    no_ns = admin("topicList")
    assert no_ns.returncode == 2 and "NAMESRV_ADDR" in no_ns.stderr
    usage = admin("-n", dead, "topicStatus")  # -t missing
    assert usage.returncode == 2


def test_unknown_topic_is_exit_1(cluster: Any) -> None:
    result = admin("-n", cluster.namesrv_addr, "topicStatus", "-t", "NoSuchTopic")
    assert result.returncode == 1
    assert "TOPIC_NOT_EXIST" in result.stderr and result.stderr.count("\n") == 1
