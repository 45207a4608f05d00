"""Apache RocketMQ's own ``mqadmin`` (rocketmq-tools 4.9.7) against our broker and its name server.

mqadmin exits 0 even when a command fails (MQAdminStartup prints the exception), so every test
asserts on what the verb printed. Each verb here is served by request codes of
processor/admin.py and namesrv.py; the tool is run from Maven Central's jars (tests/clients/mqadmin.py).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_support import RocketStoreBroker, java_driver
from java_rocketmq import BuildError, ToolMissing, find_tools
from mqadmin import MQAdminResult, build_mqadmin, run_mqadmin
from tool_support import require_tool


@pytest.fixture(scope="module")
def mqadmin_built() -> None:
    try:
        find_tools()
    except ToolMissing as e:
        require_tool(e.tool, False, "mqadmin tests run Apache's rocketmq-tools on Java 17, fetched with Maven")
    try:
        build_mqadmin()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)


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
    time.sleep(1.5)  # at least one TPS sample beyond the first
    out = mqadmin(rocketstore_broker, "brokerStatus", "-b", rocketstore_broker.addr).stdout
    table = dict(re.findall(r"^(\S+)\s*:\s*(.*)$", out, re.MULTILINE))
    for key in ("putTps", "getFoundTps", "getMissTps", "getTransferedTps", "getTotalTps", "sendThreadPoolQueueSize",
                "pullThreadPoolQueueSize", "earliestMessageTimeStamp", "commitLogDiskRatio",
                "pageCacheLockTimeMills", "dispatchBehindBytes", "msgPutTotalTodayMorning", "runtime",
                "consumeQueueDiskRatio", "commitLogDirCapacity", "brokerVersionDesc", "bootTimestamp"):
        assert key in table, f"{key} missing from brokerStatus:\n{out}"
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert table["sendThreadPoolQueueCapacity"] == "10000"
    assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", table["runtime"])
