"""Apache RocketMQ's own ``mqadmin`` (rocketmq-tools 4.9.7) against our broker and its name server.

mqadmin exits 0 even when a command fails (MQAdminStartup prints the exception), so every test
asserts on what the verb printed. Each verb here is served by request codes of
processor/admin.py and namesrv.py; the tool is run from Maven Central's jars (tests/support/mqadmin.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from java_driver_support import require_maven_build
from java_rocketmq import BackgroundRun, DriverResult
from mqadmin import MQAdminResult, build_mqadmin, run_mqadmin
from polling import wait_until
from recording_broker import RocketStoreBroker, java_driver

from rocketstore.client.remoting_client import RemotingClient
from rocketstore.remoting.body import HeartbeatData, ProducerData
from rocketstore.remoting.codes import RequestCode


@pytest.fixture(scope="module")
def mqadmin_built() -> None:
    require_maven_build(build_mqadmin, "mqadmin tests run Apache's rocketmq-tools on Java 17, fetched with Maven")


def mqadmin(broker: RocketStoreBroker, verb: str, *args: str) -> MQAdminResult:
    result = run_mqadmin(broker.namesrv, verb, *args)
    assert "Exception" not in result.stdout + result.stderr, f"mqadmin {verb} failed:\n{result.stdout}\n{result.stderr}"
    return result


def test_cluster_list_shows_broker_with_runtime_columns(rocketstore_broker: RocketStoreBroker,
                                                        mqadmin_built: None) -> None:
    out = mqadmin(rocketstore_broker, "clusterList").lines()
    assert out[0].split() == ["#Cluster", "Name", "#Broker", "Name", "#BID", "#Addr", "#Version",
                              "#InTPS(LOAD)", "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE"]
    row = out[1].split()
    # cluster, broker name, id, address, version, in TPS(queue, wait), out TPS, PCWait, hours, disk ratio
    assert row[:5] == ["E2ECluster", "e2e-broker", "0", rocketstore_broker.addr, "V4_9_8"]
    assert re.fullmatch(r"\d+\.\d\d\(0,0ms\)", row[5]) and re.fullmatch(r"\d+\.\d\d\(0,0ms\)", row[6]), row
    assert row[7] == "0"
    ratio = float(row[9])
    assert 0.0 < ratio < 1.0  # commitLogDiskRatio: the partition's used share


def test_cluster_list_more_stats_counts_puts(rocketstore_broker: RocketStoreBroker, mqadmin_built: None,
                                            java_client_built: None, unique_name: Callable[[str], str],
                                            tmp_path: Path) -> None:
    topic = unique_name("T")
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic)
    java_driver(rocketstore_broker, tmp_path).produce(topic, 7)
    row = mqadmin(rocketstore_broker, "clusterList", "-m").lines()[1].split()
    # #InTotalYest #OutTotalYest #InTotalToday #OutTotalToday: nothing yesterday, 7+ puts today
    assert row[:2] == ["E2ECluster", "e2e-broker"]
    assert row[2:4] == ["0", "0"]
    assert int(row[4]) >= 7


def test_broker_status_prints_runtime_keys(rocketstore_broker: RocketStoreBroker, mqadmin_built: None) -> None:
    def status() -> tuple[str, dict[str, str]]:
        out = mqadmin(rocketstore_broker, "brokerStatus", "-b", rocketstore_broker.addr).stdout
        return out, dict(re.findall(r"^(\S+)[ \t]*:[ \t]*(.*)$", out, re.MULTILINE))

    # the TPS keys have values once the broker took a sample beyond its first (one a second)
    out, table = wait_until("TPS values in brokerStatus", lambda: (got := status())[1].get("putTps") and got)
    for key in ("putTps", "getFoundTps", "getMissTps", "getTransferedTps", "getTotalTps", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "earliestMessageTimeStamp", "commitLogDiskRatio",
                "pageCacheLockTimeMills", "dispatchBehindBytes", "msgPutTotalTodayMorning", "runtime",
                "consumeQueueDiskRatio", "commitLogDirCapacity", "brokerVersionDesc", "bootTimestamp",
                "putMessageAverageSize"):
        assert key in table, f"{key} missing from brokerStatus:\n{out}"
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert table["sendThreadPoolQueueCapacity"] == "10000"
    assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", table["runtime"])


#: (topic, group, the consumer's run, the producer's result, a time just before producing)
LiveConsumer = tuple[str, str, BackgroundRun, DriverResult, int]
#: the live consumer's topic has this many queues
LIVE_QUEUES = 2


def _received(run: BackgroundRun) -> list[dict[str, Any]]:
    return [line for line in run.lines_so_far() if line.get("kind") == "received"]


@pytest.fixture(scope="module")
def live_consumer(rocketstore_broker: RocketStoreBroker, mqadmin_built: None, java_client_built: None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveConsumer]:
    """A topic (LIVE_QUEUES queues) with 6 messages and a Java push consumer of a group that
    consumed them, committed its offsets of every queue and stays up (a LiveConsumer)."""
    workdir = tmp_path_factory.mktemp("live-consumer")
    topic, group = f"TLive_{time.monotonic_ns()}", f"GroupLive_{time.monotonic_ns()}"
    queues = str(LIVE_QUEUES)
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic, "-r", queues, "-w", queues)
    before = int(time.time() * 1000) - 1000
    driver = java_driver(rocketstore_broker, workdir)
    produced = driver.produce(topic, 6)
    run = driver.start_push_consume(topic, group, 6, linger_ms=900_000, timeout_s=960, check=False)
    try:
        wait_until("the consumer to take all 6 messages", lambda: len(_received(run)) >= 6)
        wait_until("the consumer to commit its offsets", lambda: _caught_up(rocketstore_broker, topic, group))
        yield topic, group, run, produced, before
    finally:
        run.kill()


def _client_id(broker: RocketStoreBroker, group: str) -> str:
    out = mqadmin(broker, "consumerConnection", "-g", group).lines()
    assert out[0].split() == ["#ClientId", "#ClientAddr", "#Language", "#Version"], out
    return out[1].split()[0]


def test_consumer_status_gets_running_info_through_broker(rocketstore_broker: RocketStoreBroker,
                                                          live_consumer: LiveConsumer) -> None:
    """consumerStatus: GET_CONSUMER_RUNNING_INFO (307) forwarded to the consumer, its answer back."""
    topic, group, _, _, _ = live_consumer
    client_id = _client_id(rocketstore_broker, group)
    out = mqadmin(rocketstore_broker, "consumerStatus", "-g", group).stdout
    assert re.search(rf"^1\s+{re.escape(client_id)}\s+V4_9_8\s+\S+", out, re.MULTILINE), out
    assert "Same subscription in the same group of consumer" in out
    assert "Rebalance OK" in out
    detail = mqadmin(rocketstore_broker, "consumerStatus", "-g", group, "-i", client_id).stdout
    # the client's own ConsumerRunningInfo: its properties and its subscription of the topic
    assert "#Consumer Subscription#" in detail and topic in detail, detail
    assert "CONSUME_PASSIVELY" in detail


def test_broker_consume_stats_lists_group_queues(rocketstore_broker: RocketStoreBroker,
                                                 live_consumer: LiveConsumer) -> None:
    topic, group, _, _, _ = live_consumer
    rows = _broker_consume_rows(rocketstore_broker, topic)
    # #Topic #Group #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime(date time)
    assert sorted(row[3] for row in rows) == ["0", "1"]
    assert all(row[1] == group and row[2] == "e2e-broker" for row in rows)
    assert sum(int(row[4]) for row in rows) == 6
    assert [row[4] for row in rows] == [row[5] for row in rows]


def _caught_up(broker: RocketStoreBroker, topic: str, group: str) -> bool:
    """Whether the group committed offsets of every queue of the topic, at the queues' ends (the
    consumer commits each queue's offset on its own: a look between two commits shows one queue)."""
    rows = [row for row in _broker_consume_rows(broker, topic) if row[1] == group]
    return len(rows) == LIVE_QUEUES and all(row[6] == "0" for row in rows)


def _broker_consume_rows(broker: RocketStoreBroker, topic: str) -> list[list[str]]:
    out = mqadmin(broker, "brokerConsumeStats", "-b", broker.addr).lines()
    assert out[0].split()[:2] == ["#Topic", "#Group"], out
    assert out[-1].startswith("Diff Total:"), out
    return [line.split() for line in out[1:-1] if line.split()[0] == topic]


def test_reset_offset_by_time_pushes_to_live_consumer(rocketstore_broker: RocketStoreBroker,
                                                      live_consumer: LiveConsumer) -> None:
    """resetOffsetByTime: INVOKE_BROKER_TO_RESET_OFFSET (222); the broker pushes
    RESET_CONSUMER_CLIENT_OFFSET (220) to the consumer, which consumes the 6 messages again."""
    topic, group, run, _, before = live_consumer
    had = len(_received(run))
    out = mqadmin(rocketstore_broker, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before),
                  "-f", "true").lines()
    assert out[0].startswith(f"rollback consumer offset by specified group[{group}], topic[{topic}], force[true]")
    assert out[1].split() == ["#brokerName", "#queueId", "#offset"]
    assert sorted(tuple(line.split()) for line in out[2:]) == [("e2e-broker", "0", "0"), ("e2e-broker", "1", "0")]
    wait_until("the consumer to consume the 6 messages again", lambda: len(_received(run)) >= had + 6)
    again = _received(run)[had:]
    assert {line["delivery"] for line in again} == {2}


def test_clone_group_offset(rocketstore_broker: RocketStoreBroker,
                            live_consumer: LiveConsumer) -> None:
    topic, group, _, _, _ = live_consumer
    # a reset by an earlier test makes the consumer consume again and commit within 5 s: clone a
    # source offset that no longer moves
    wait_until("the consumer to commit its offsets", lambda: _caught_up(rocketstore_broker, topic, group))
    dest = f"{group}_clone"
    mqadmin(rocketstore_broker, "updateSubGroup", "-c", "E2ECluster", "-g", dest)
    out = mqadmin(rocketstore_broker, "cloneGroupOffset", "-s", group, "-d", dest, "-t", topic).stdout
    assert f"clone group offset success. srcGroup[{group}], destGroup=[{dest}], topic[{topic}]" in out
    rows = {(row[1], row[3]): row[5] for row in _broker_consume_rows(rocketstore_broker, topic)}
    assert rows[(dest, "0")] == rows[(group, "0")] and rows[(dest, "1")] == rows[(group, "1")]


def test_query_msg_by_id_consumes_directly(rocketstore_broker: RocketStoreBroker,
                                           live_consumer: LiveConsumer) -> None:
    """queryMsgById -g -d: CONSUME_MESSAGE_DIRECTLY (309) with the message read from the CommitLog,
    forwarded to the consumer, whose listener consumes it once more."""
    _, group, run, produced, _ = live_consumer
    client_id = _client_id(rocketstore_broker, group)
    sent = produced.of("sent")[0]
    had = len(_received(run))
    out = mqadmin(rocketstore_broker, "queryMsgById", "-i", sent["offsetMsgId"], "-g", group, "-d",
                  client_id).stdout
    assert "consumeResult=CR_SUCCESS" in out, out
    wait_until("the direct delivery", lambda: any(line["msgId"] == sent["msgId"] for line in _received(run)[had:]))


def test_producer_connection(rocketstore_broker: RocketStoreBroker, mqadmin_built: None) -> None:
    """producerConnection: GET_PRODUCER_CONNECTION_LIST (204) lists a producer's heartbeat connection."""
    group = f"PG_{time.monotonic_ns()}"
    with RemotingClient() as client:
        beat = HeartbeatData(client_id="127.0.0.1@admin-test", producer_data_set=[ProducerData(group_name=group)])
        client.call(rocketstore_broker.addr, RequestCode.HEART_BEAT, None, beat.encode())
        out = mqadmin(rocketstore_broker, "producerConnection", "-g", group, "-t", "TBW102").lines()
    assert len(out) == 1, out
    assert re.fullmatch(r"0001\s+127\.0\.0\.1@admin-test\s+127\.0\.0\.1:\d+\s+PYTHON\s+V\S+", out[0].strip()), out
    missing = run_mqadmin(rocketstore_broker.namesrv, "producerConnection", "-g", "NoSuchGroup", "-t", "TBW102")
    assert "the producer group[NoSuchGroup] not exist" in missing.stdout + missing.stderr


# -- name server verbs ----------------------------------------------------------------------------


def test_kv_config_verbs_persist_kv_config_json(rocketstore_broker: RocketStoreBroker, mqadmin_built: None) -> None:
    """updateKvConfig / deleteKvConfig: PUT_KV_CONFIG (100) / DELETE_KV_CONFIG (102), written to
    kvConfig.json in RocketMQ's form; updateOrderConf reads an item back with GET_KV_CONFIG (101)."""
    namespace = f"NS_{time.monotonic_ns()}"
    out = mqadmin(rocketstore_broker, "updateKvConfig", "-s", namespace, "-k", "k1", "-v", "v1").stdout
    assert "create or update kv config to namespace success." in out, out
    kv_file = rocketstore_broker.store / "config" / "kvConfig.json"
    assert f'"{namespace}":{{"k1":"v1"}}' in kv_file.read_text()
    mqadmin(rocketstore_broker, "deleteKvConfig", "-s", namespace, "-k", "k1")
    assert f'"{namespace}":{{}}' in kv_file.read_text()

    topic = f"TOrder_{time.monotonic_ns()}"
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic)
    mqadmin(rocketstore_broker, "updateOrderConf", "-t", topic, "-v", "e2e-broker:4", "-m", "put")
    got = mqadmin(rocketstore_broker, "updateOrderConf", "-t", topic, "-m", "get").stdout
    assert f"get orderConf success. topic=[{topic}], orderConf=[e2e-broker:4]" in got, got
    missing = run_mqadmin(rocketstore_broker.namesrv, "updateOrderConf", "-t", f"{topic}_none", "-m", "get")
    assert f"No config item, Namespace: ORDER_TOPIC_CONFIG Key: {topic}_none" in missing.stdout + missing.stderr


def test_namesrv_config_verbs(rocketstore_broker: RocketStoreBroker, mqadmin_built: None) -> None:
    """getNamesrvConfig / updateNamesrvConfig (319 / 318); orderMessageEnable puts the topic's
    ORDER_TOPIC_CONFIG item into its route, as RocketMQ's name server does."""
    def config() -> dict[str, str]:
        out = mqadmin(rocketstore_broker, "getNamesrvConfig").stdout
        assert f"============{rocketstore_broker.namesrv}============" in out, out
        return dict(re.findall(r"^(\S+)\s+=\s+(.*?)\s*$", out, re.MULTILINE))

    assert config()["orderMessageEnable"] == "false"
    topic = f"TOrderRoute_{time.monotonic_ns()}"
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic)
    mqadmin(rocketstore_broker, "updateOrderConf", "-t", topic, "-v", "e2e-broker:8", "-m", "put")
    assert "orderTopicConf" not in mqadmin(rocketstore_broker, "topicRoute", "-t", topic).stdout
    mqadmin(rocketstore_broker, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    try:
        assert config()["orderMessageEnable"] == "true"
        assert '"orderTopicConf":"e2e-broker:8"' in mqadmin(rocketstore_broker, "topicRoute", "-t", topic).stdout
    finally:
        mqadmin(rocketstore_broker, "updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")
    refused = run_mqadmin(rocketstore_broker.namesrv, "updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x")
    assert "CODE: 16  DESC: Can not update config in black list." in refused.stdout + refused.stderr
    assert config()["kvConfigPath"] == str(rocketstore_broker.store / "config" / "kvConfig.json")


def test_delete_topic_from_broker_and_name_server(rocketstore_broker: RocketStoreBroker, mqadmin_built: None) -> None:
    """deleteTopic: DELETE_TOPIC_IN_BROKER (215), then DELETE_TOPIC_IN_NAMESRV (216); the route is gone."""
    topic = f"TDel_{time.monotonic_ns()}"
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic)
    assert topic in mqadmin(rocketstore_broker, "topicList").lines()
    out = mqadmin(rocketstore_broker, "deleteTopic", "-c", "E2ECluster", "-t", topic).lines()
    assert out == [f"delete topic [{topic}] from cluster [E2ECluster] success.",
                   f"delete topic [{topic}] from NameServer success."]
    assert topic not in mqadmin(rocketstore_broker, "topicList").lines()
    gone = run_mqadmin(rocketstore_broker.namesrv, "topicRoute", "-t", topic)
    assert f"No topic route info in name server for the topic: {topic}" in gone.stdout + gone.stderr


def test_stats_all_shows_put_and_get_rates(rocketstore_broker: RocketStoreBroker, mqadmin_built: None,
                                           java_client_built: None, tmp_path: Path) -> None:
    """statsAll: VIEW_BROKER_STATS_DATA (315) for TOPIC_PUT_NUMS and GROUP_GET_NUMS, whose minute
    window (snapshots every 10 s) gives the TPS and, before the hour and day windows have a
    snapshot, the 24-hour counts."""
    topic, group = f"TStats_{time.monotonic_ns()}", f"GStats_{time.monotonic_ns()}"
    mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic, "-r", "1", "-w", "1")
    driver = java_driver(rocketstore_broker, tmp_path)
    driver.produce(topic, 4)
    driver.pull_consume(topic, group, 4)

    def statistics() -> list[str]:
        return mqadmin(rocketstore_broker, "statsAll", "-t", topic).lines()

    def tps_shown() -> bool:  # once a minute-window snapshot after the puts and gets was taken
        rows = [line.split() for line in statistics()[1:]]
        return len(rows) == 1 and len(rows[0]) > 4 and float(rows[0][3]) > 0 and float(rows[0][4]) > 0

    wait_until("a minute-window snapshot after the puts and gets", tps_shown, timeout=40, interval=1)
    out = statistics()
    assert out[0].split() == ["#Topic", "#Consumer", "Group", "#Accumulation", "#InTPS", "#OutTPS",
                              "#InMsg24Hour", "#OutMsg24Hour"]
    (row,) = [line.split() for line in out[1:]]
    assert row[:2] == [topic, group]
    in_tps, out_tps = float(row[3]), float(row[4])
    assert in_tps > 0 and out_tps > 0
    # 4 put; at least 4 served (the lite pull consumer may fetch a message more than once)
    assert row[5] == "4" and int(row[6]) >= 4


def test_consumer_progress_shows_client_per_queue(rocketstore_broker: RocketStoreBroker,
                                                  live_consumer: LiveConsumer) -> None:
    """consumerProgress -s true: GET_CONSUME_STATS (208), then each consumer's running info (307,
    forwarded by the broker) to show which client holds each queue; Consume TPS from the group's
    minute get rate."""
    topic, group, _, _, _ = live_consumer
    out = mqadmin(rocketstore_broker, "consumerProgress", "-g", group, "-s", "true").stdout
    rows = [line.split() for line in out.splitlines() if line.startswith(topic)]
    assert sorted(row[2] for row in rows) == ["0", "1"], out
    # #Topic #Broker Name #QID #Broker Offset #Consumer Offset #Client IP #Diff #LastTime
    assert all(re.fullmatch(r"\d+\.\d+\.\d+\.\d+", row[5]) for row in rows), out
    assert re.search(r"^Consume TPS: \d+\.\d\d$", out, re.MULTILINE)


def test_wipe_write_perm_moves_a_java_producer_to_the_other_broker(
        rocketstore_broker: RocketStoreBroker, mqadmin_built: None, java_client_built: None,
        unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """wipeWritePerm / addWritePerm (205 / 327) at our name server, with a second broker registered
    there: a Java 4.9.7 producer's sends leave the wiped broker for the other one; the wipe holds
    over the wiped broker's next registration with a changed topic table (where RocketMQ's name
    server would make it writable again), and addWritePerm brings the sends back."""
    topic = unique_name("TWipe")
    (tmp_path / "peer").mkdir()
    peer = Broker(tmp_path / "peer", "brokerClusterName=E2ECluster\nbrokerName=e2e-peer\n"
                  f"namesrvAddr={rocketstore_broker.namesrv}\n")
    with peer.running():
        wait_until("the peer registered", lambda: "e2e-peer" in mqadmin(rocketstore_broker, "clusterList").stdout)
        mqadmin(rocketstore_broker, "updateTopic", "-c", "E2ECluster", "-t", topic, "-r", "2", "-w", "2")
        driver = java_driver(rocketstore_broker, tmp_path)

        def sent_to() -> set[str]:
            return {line["brokerName"] for line in driver.produce(topic, 12).of("sent")}

        wait_until("sends to both brokers", lambda: sent_to() == {"e2e-broker", "e2e-peer"}, timeout=20)
        out = mqadmin(rocketstore_broker, "wipeWritePerm", "-b", "e2e-peer").lines()
        (line,) = [x for x in out if x.startswith("wipe write perm")]
        match = re.fullmatch(rf"wipe write perm of broker\[e2e-peer\] in name server\[{rocketstore_broker.namesrv}\] "
                             r"OK, (\d+)", line)
        assert match and int(match.group(1)) > 0, out
        assert sent_to() == {"e2e-broker"}
        # a changed topic table registered by the wiped broker keeps it wiped here
        new_topic = unique_name("TNew")
        mqadmin(rocketstore_broker, "updateTopic", "-b", peer.addr, "-t", new_topic)
        wait_until("the peer registered its new topic",
                   lambda: new_topic in mqadmin(rocketstore_broker, "topicList").lines())
        assert sent_to() == {"e2e-broker"}
        out = mqadmin(rocketstore_broker, "addWritePerm", "-b", "e2e-peer").lines()
        assert any(re.fullmatch(r"add write perm of broker\[e2e-peer\] in name server\[.*\] OK, \d+", x)
                   for x in out), out
        assert sent_to() == {"e2e-broker", "e2e-peer"}
