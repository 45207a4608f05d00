"""/metrics after real sends and pulls over real sockets: per-topic and per-group totals, latency
histograms, the broker's identity, the process collector and the apache/rocketmq-exporter families.

Every scrape is parsed with prometheus_client's own text parser, as Prometheus would read it.
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rocketstore.broker.exporter_metrics import EXPORTER_FAMILIES
from rocketstore.common.message import BatchItem, encode_batch
from rocketstore.remoting.body import ConsumerData, HeartbeatData, KVTable, ProducerData, SubscriptionData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import PullSysFlag, SendMessageRequestHeader
from rocketstore.store.config import FlushDiskType
from rocketstore.store.stats import LATENCY_BOUNDS_MS, put_distribute_bucket

pytestmark = pytest.mark.integration

CLUSTER = "MetricsCluster"
BROKER = "broker-m"

#: The label names apache/rocketmq-exporter gives each family (RMQMetricsCollector.java: the
#: *_LABEL_NAMES lists passed to each GaugeMetricFamily), written down here from its source, not
#: from our code, so that a family we publish under an exporter name with other labels fails.
EXPORTER_LABELS: dict[str, tuple[str, ...]] = {
    "rocketmq_broker_tps": ("cluster", "brokerIP", "broker"),
    "rocketmq_broker_qps": ("cluster", "brokerIP", "broker"),
    "rocketmq_broker_commitlog_diff": ("cluster", "brokerIP", "broker"),
    "rocketmq_producer_tps": ("cluster", "broker", "topic"),
    "rocketmq_producer_message_size": ("cluster", "broker", "topic"),
    "rocketmq_producer_offset": ("cluster", "broker", "topic"),
    "rocketmq_topic_retry_offset": ("cluster", "broker", "topic"),
    "rocketmq_topic_dlq_offset": ("cluster", "broker", "group"),
    "rocketmq_producer_count": ("cluster", "broker", "group"),
    "rocketmq_consumer_tps": ("cluster", "broker", "topic", "group"),
    "rocketmq_consumer_message_size": ("cluster", "broker", "topic", "group"),
    "rocketmq_consumer_offset": ("cluster", "broker", "topic", "group"),
    "rocketmq_group_consume_tps": ("cluster", "broker", "topic", "group"),
    "rocketmq_send_back_nums": ("cluster", "broker", "topic", "group"),
    "rocketmq_group_get_latency_by_storetime": ("cluster", "broker", "topic", "group"),
    "rocketmq_group_diff": ("group", "topic", "countOfOnlineConsumers", "msgModel"),
    "rocketmq_group_retrydiff": ("group", "topic", "countOfOnlineConsumers", "msgModel"),
    "rocketmq_group_dlqdiff": ("group", "topic", "countOfOnlineConsumers", "msgModel"),
    "rocketmq_group_count": ("caddr", "localaddr", "group"),
    **{f"rocketmq_brokeruntime_{name}": ("cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version")
       for name in ("msg_put_total_today_now", "msg_gettotal_today_now", "putmessage_times_total",
                    "put_message_size_total", "put_message_average_size", "putmessage_entire_time_max",
                    "commitlog_maxoffset", "commitlog_minoffset", "commitlog_disk_ratio", "dispatch_behind_bytes",
                    "remain_howmanydata_toflush", "start_accept_sendrequest_time", "put_tps10", "put_tps60",
                    "put_tps600", "earliest_message_timestamp", "consumequeue_disk_ratio",
                    "commitlogdir_capacity_total", "commitlogdir_capacity_free", "getfound_tps10",
                    "getfound_tps60", "getfound_tps600", "getmiss_tps10", "getmiss_tps60", "getmiss_tps600",
                    "gettotal_tps10", "gettotal_tps60", "gettotal_tps600", "gettransfered_tps10",
                    "gettransfered_tps60", "gettransfered_tps600", "msg_puttotal_todaymorning",
                    "msg_puttotal_yesterdaymorning", "msg_gettotal_todaymorning",
                    "msg_gettotal_yesterdaymorning", "pmdt_0ms", "pmdt_0to10ms", "pmdt_10to50ms",
                    "pmdt_50to100ms", "pmdt_100to200ms", "pmdt_200to500ms", "pmdt_500to1s", "pmdt_1to2s",
                    "pmdt_2to3s", "pmdt_3to4s", "pmdt_4to5s", "pmdt_5to10s", "pmdt_10stomore")},
}

#: putMessageDistributeTime's bucket names (StoreStatsService.PUT_MESSAGE_ENTIRE_TIME_MAX_DESC) and the
#: exporter family each feeds (rocketmq-exporter's PutMessageDistributeTimeMap families), in order
PMDT: list[tuple[str, str]] = [
    ("[<=0ms]", "0ms"), ("[0~10ms]", "0to10ms"), ("[10~50ms]", "10to50ms"), ("[50~100ms]", "50to100ms"),
    ("[100~200ms]", "100to200ms"), ("[200~500ms]", "200to500ms"), ("[500ms~1s]", "500to1s"), ("[1~2s]", "1to2s"),
    ("[2~3s]", "2to3s"), ("[3~4s]", "3to4s"), ("[4~5s]", "4to5s"), ("[5~10s]", "5to10s"), ("[10s~]", "10stomore"),
]

#: runtime info's "10s 60s 600s" keys and the exporter family each window goes to (BrokerRuntimeStats'
#: loadTps and RMQMetricsCollector's brokerRuntime*Tps* families)
TPS_KEYS: dict[str, str] = {
    "putTps": "rocketmq_brokeruntime_put_tps",
    "getFoundTps": "rocketmq_brokeruntime_getfound_tps",
    "getMissTps": "rocketmq_brokeruntime_getmiss_tps",
    "getTotalTps": "rocketmq_brokeruntime_gettotal_tps",
    "getTransferedTps": "rocketmq_brokeruntime_gettransfered_tps",
}


def scrape(broker: BrokerHandle) -> list[Sample]:
    return [sample for family in text_string_to_metric_families(broker.metrics()) for sample in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    """The one sample called ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples if s.name == name and labels.items() <= s.labels.items()]
    assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
    return found[0]


def heartbeat(client: RawClient, client_id: str, group: str, topic: str, producer: str) -> None:
    data = HeartbeatData(
        client_id=client_id,
        consumer_data_set=[ConsumerData(
            group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=[SubscriptionData(topic=topic, sub_string="*", sub_version=1)])],
        producer_data_set=[ProducerData(group_name=producer)])
    assert client.call(RequestCode.HEART_BEAT, body=data.encode()).code == ResponseCode.SUCCESS


@pytest.fixture
def metered(broker_factory: Callable[..., BrokerHandle]) -> BrokerHandle:
    return broker_factory(broker_cluster_name=CLUSTER, broker_name=BROKER)


def test_send_and_pull_totals_and_histograms(metered: BrokerHandle) -> None:
    client = metered.client()
    for i in range(5):
        assert client.send_message("MetA", b"a" * (10 + i)).code == ResponseCode.SUCCESS
    for _ in range(3):
        assert client.send_message("MetB", b"b" * 100, queue_id=1).code == ResponseCode.SUCCESS
    refused = client.send_message("%DLQ%bad topic", b"x")  # an invalid name: refused, still a send handled
    assert refused.code != ResponseCode.SUCCESS
    client.wait_dispatched("MetA", 0, 5)
    client.wait_dispatched("MetB", 1, 3)

    everything = client.pull("MetA", 0, 0, group="CG1")
    part = client.pull("MetA", 0, 0, group="CG2", max_msgs=2)
    other = client.pull("MetB", 1, 0, group="CG1")
    miss = client.pull("MetA", 0, 5, group="CG1", sys_flag=0)  # nothing there: answered, no messages
    assert [r.code for r in (everything, part, other, miss)] == [ResponseCode.SUCCESS] * 3 + [
        ResponseCode.PULL_NOT_FOUND]
    assert len(decode_records(everything.body)) == 5 and len(decode_records(part.body)) == 2

    samples = scrape(metered)
    ours = {"cluster": CLUSTER, "broker": BROKER}
    assert value(samples, "rocketstore_topic_put_messages_total", topic="MetA", **ours) == 5
    assert value(samples, "rocketstore_topic_put_messages_total", topic="MetB", **ours) == 3
    # bytes are the stored records: what a pull of all of them returns, and the CommitLog's end
    assert value(samples, "rocketstore_topic_put_bytes_total", topic="MetA", **ours) == len(everything.body)
    assert value(samples, "rocketstore_topic_put_bytes_total", topic="MetB", **ours) == len(other.body)
    assert len(everything.body) + len(other.body) == value(samples, "rocketstore_commitlog_max_offset_bytes")

    assert value(samples, "rocketstore_group_get_messages_total", topic="MetA", group="CG1", **ours) == 5
    assert value(samples, "rocketstore_group_get_messages_total", topic="MetA", group="CG2", **ours) == 2
    assert value(samples, "rocketstore_group_get_messages_total", topic="MetB", group="CG1", **ours) == 3
    assert value(samples, "rocketstore_group_get_bytes_total", topic="MetA", group="CG2", **ours) == len(part.body)

    # every send and every answered pull is one observation; buckets are cumulative up to +Inf
    for name, count in (("rocketstore_send_latency_seconds", 9), ("rocketstore_pull_latency_seconds", 4)):
        assert value(samples, f"{name}_count", **ours) == count
        buckets = [s for s in samples if s.name == f"{name}_bucket"]
        assert [s.labels["le"] for s in buckets][-1] == "+Inf"
        counts = [s.value for s in buckets]
        assert counts == sorted(counts) and counts[-1] == count
        assert 0 < value(samples, f"{name}_sum", **ours) < 10

    info = [s for s in samples if s.name == "rocketstore_broker_info"]
    assert len(info) == 1 and info[0].value == 1
    assert info[0].labels == {"cluster": CLUSTER, "broker": BROKER, "broker_id": "0",
                              "broker_addr": metered.controller.broker_addr, "version": "V4_9_8"}

    # exporter families: per-second rates of what was just sent and pulled, offsets as sums
    exporter = {"cluster": CLUSTER, "broker": BROKER}
    assert 0 < value(samples, "rocketmq_producer_tps", topic="MetA", **exporter) <= 5
    assert value(samples, "rocketmq_producer_message_size", topic="MetA", **exporter) > 0
    assert 0 < value(samples, "rocketmq_consumer_tps", topic="MetA", group="CG2", **exporter) <= 2
    assert 0 < value(samples, "rocketmq_broker_tps", brokerIP=metered.controller.broker_addr, **exporter) <= 8
    assert 0 < value(samples, "rocketmq_broker_qps", **exporter) <= 10
    assert value(samples, "rocketmq_producer_offset", topic="MetA", **exporter) == 5
    assert value(samples, "rocketmq_producer_offset", topic="MetB", **exporter) == 3
    assert value(samples, "rocketmq_brokeruntime_msg_put_total_today_now", cluster=CLUSTER) == 8
    assert value(samples, "rocketmq_brokeruntime_msg_gettotal_today_now", cluster=CLUSTER) == 10
    total = value(samples, "rocketmq_brokeruntime_commitlogdir_capacity_total", cluster=CLUSTER)
    assert total > value(samples, "rocketmq_brokeruntime_commitlogdir_capacity_free", cluster=CLUSTER) > 0
    assert 0 < value(samples, "rocketmq_brokeruntime_consumequeue_disk_ratio", cluster=CLUSTER) < 1


def test_process_collector(metered: BrokerHandle) -> None:
    samples = scrape(metered)
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 1_000_000
    # the broker's own sockets and store files are open in this process
    assert value(samples, "process_open_fds") > 3
    assert value(samples, "process_max_fds") > 0
    assert value(samples, "process_start_time_seconds") <= time.time()


def test_group_diff_offsets_and_latency_by_store_time(metered: BrokerHandle) -> None:
    client = metered.client()
    first_sent = time.time() * 1000
    for _ in range(5):
        assert client.send_message("Lagging", b"m", queue_id=0).code == ResponseCode.SUCCESS
    client.wait_dispatched("Lagging", 0, 5)
    offsets = metered.controller.consumer_offset_manager
    metered.call_soon(lambda: offsets.commit_offset("Slow", "Lagging", 0, 2))
    metered.call_soon(lambda: offsets.commit_offset("Done", "Lagging", 0, 5))
    time.sleep(0.05)  # so that the oldest unconsumed message is measurably old
    samples = scrape(metered)
    at = {"cluster": CLUSTER, "broker": BROKER, "topic": "Lagging"}
    assert value(samples, "rocketmq_consumer_offset", group="Slow", **at) == 2
    assert value(samples, "rocketmq_group_diff", group="Slow", topic="Lagging") == 3
    assert value(samples, "rocketmq_group_diff", group="Done", topic="Lagging") == 0
    slow = next(s for s in samples if s.name == "rocketmq_group_diff" and s.labels["group"] == "Slow")
    assert slow.labels["countOfOnlineConsumers"] == "0" and slow.labels["msgModel"] == "1"
    lag_ms = value(samples, "rocketmq_group_get_latency_by_storetime", group="Slow", **at)
    assert 50 <= lag_ms <= time.time() * 1000 - first_sent + 1
    assert value(samples, "rocketmq_group_get_latency_by_storetime", group="Done", **at) == 0


def test_exporter_families_have_the_exporter_label_sets(metered: BrokerHandle) -> None:
    """Drive the broker so that every exporter family we publish has samples, then compare each
    sample's label names with the exporter's."""
    client = metered.client()
    heartbeat(client, "10.1.1.1@7", "LabelGroup", "Labelled", "LabelProducer")
    assert client.send_message("Labelled", b"x").code == ResponseCode.SUCCESS
    assert client.send_message("%RETRY%LabelGroup", b"r").code == ResponseCode.SUCCESS
    dlq = client.send_message("%RETRY%LabelGroup", b"d", reconsume_times=16)  # past retryMaxTimes: to the DLQ
    assert dlq.code == ResponseCode.SUCCESS
    client.wait_dispatched("Labelled", 0, 1)
    client.wait_dispatched("%RETRY%LabelGroup", 0, 1)
    client.wait_dispatched("%DLQ%LabelGroup", 0, 1)
    assert client.pull("Labelled", 0, 0, group="LabelGroup").code == ResponseCode.SUCCESS
    offsets = metered.controller.consumer_offset_manager
    metered.call_soon(lambda: offsets.commit_offset("LabelGroup", "Labelled", 0, 0))
    metered.call_soon(lambda: offsets.commit_offset("LabelGroup", "%RETRY%LabelGroup", 0, 0))

    families = {f.name: f for f in text_string_to_metric_families(metered.metrics())}
    published = {name for name in families if name.startswith("rocketmq_")}
    assert published == set(EXPORTER_FAMILIES)
    for name in sorted(published):
        assert name in EXPORTER_LABELS, f"{name} is not a rocketmq-exporter family"
        samples = families[name].samples
        if "_tps" in name or "_pmdt_" in name:
            # no sample until the window is covered: test_runtime_tps_and_day_snapshots,
            # test_put_distribute_time_in_runtime_info_and_exporter_families
            continue
        assert samples, f"{name} has no sample to check"
        for sample in samples:
            assert sorted(sample.labels) == sorted(EXPORTER_LABELS[name]), name
        assert families[name].type == "gauge", name  # the exporter publishes gauges only

    group_count = families["rocketmq_group_count"].samples
    assert [(s.labels["group"], s.labels["localaddr"], s.value) for s in group_count] == [
        ("LabelGroup", "10.1.1.1@7", 1.0)]
    dlq_offset = families["rocketmq_topic_dlq_offset"].samples
    assert [(s.labels["group"], s.value) for s in dlq_offset] == [("LabelGroup", 1.0)]
    producers = {s.labels["group"]: s.value for s in families["rocketmq_producer_count"].samples}
    assert producers["LabelProducer"] == 1
    # the exporter leaves retry and DLQ topics out of its rates (collectBrokerStatsTopic)
    assert client.pull("%RETRY%LabelGroup", 0, 0, group="LabelGroup").code == ResponseCode.SUCCESS
    families = {f.name: f for f in text_string_to_metric_families(metered.metrics())}
    assert {s.labels["topic"] for s in families["rocketmq_consumer_tps"].samples} == {"Labelled"}
    assert {s.labels["topic"] for s in families["rocketmq_producer_tps"].samples} == {"Labelled"}
    retry_diff = families["rocketmq_group_retrydiff"].samples
    assert [(s.labels["topic"], s.labels["countOfOnlineConsumers"], s.value) for s in retry_diff] == [
        ("%RETRY%LabelGroup", "1", 1.0)]


def test_sync_flush_and_batch_sends_are_counted_once_per_request(broker_factory: Callable[..., BrokerHandle]) -> None:
    """SYNC_FLUSH sends answer from a coroutine (after the group commit): still one observation
    each; a batch counts all its messages in one request."""
    broker = broker_factory(broker_cluster_name=CLUSTER, broker_name=BROKER, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    client = broker.client()
    for _ in range(2):
        assert client.send_message("Durable", b"d").code == ResponseCode.SUCCESS
    header = SendMessageRequestHeader(producer_group="PG", topic="Durable", default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, properties="", batch=True)
    batch = encode_batch([BatchItem(b"b%d" % i, 0, {}) for i in range(3)])
    assert client.call(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext_fields(), batch).code == ResponseCode.SUCCESS
    samples = scrape(broker)
    ours = {"cluster": CLUSTER, "broker": BROKER}
    assert value(samples, "rocketstore_topic_put_messages_total", topic="Durable", **ours) == 5
    assert value(samples, "rocketstore_send_latency_seconds_count", **ours) == 3
    assert value(samples, "rocketstore_topic_put_bytes_total", topic="Durable", **ours) == value(
        samples, "rocketstore_commitlog_max_offset_bytes")


def test_held_pull_latency_leaves_the_hold_out(metered: BrokerHandle) -> None:
    client = metered.client()
    assert client.send_message("Held", b"other queue", queue_id=1).code == ResponseCode.SUCCESS
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
        "consumerGroup": "Waiter", "topic": "Held", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": str(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION), "commitOffset": "0",
        "suspendTimeoutMillis": "5000", "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
    opaque = client.send(pull)
    metered.wait_held_pulls(1)
    time.sleep(1.5)  # under test: a hold this long is not in the latency, which stays under half of it
    assert metered.client().send_message("Held", b"wake", queue_id=0).code == ResponseCode.SUCCESS
    answer = client.receive(opaque)
    assert answer.code == ResponseCode.SUCCESS and len(decode_records(answer.body)) == 1
    samples = scrape(metered)
    ours = {"cluster": CLUSTER, "broker": BROKER}
    assert value(samples, "rocketstore_pull_latency_seconds_count", **ours) == 1
    assert value(samples, "rocketstore_pull_latency_seconds_sum", **ours) < 0.75  # the 1.5 s hold is not in it
    assert value(samples, "rocketstore_group_get_messages_total", topic="Held", group="Waiter", **ours) == 1


def test_online_group_without_offsets_counts_every_message_as_behind(metered: BrokerHandle) -> None:
    """RocketMQ's ConsumeStats takes an uncommitted queue's consumer offset as 0."""
    client = metered.client()
    for _ in range(2):
        assert client.send_message("Waiting", b"w", queue_id=0).code == ResponseCode.SUCCESS
    client.wait_dispatched("Waiting", 0, 2)
    heartbeat(client, "10.2.2.2@1", "Fresh", "Waiting", "FreshProducer")
    samples = scrape(metered)
    assert value(samples, "rocketmq_group_diff", group="Fresh", topic="Waiting", countOfOnlineConsumers="1",
                 msgModel="1") == 2
    assert value(samples, "rocketmq_consumer_offset", group="Fresh", topic="Waiting") == 0
    assert value(samples, "rocketmq_group_get_latency_by_storetime", group="Fresh", topic="Waiting") > 0


def runtime_info(client: RawClient) -> dict[str, str]:
    resp = client.call(RequestCode.GET_BROKER_RUNTIME_INFO)
    assert resp.code == ResponseCode.SUCCESS
    return KVTable.decode(resp.body).table


def test_runtime_tps_and_day_snapshots_match_runtime_info(broker_factory: Callable[..., BrokerHandle],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The exporter's brokeruntime TPS families (one per window of the "10s 60s 600s" texts), the
    morning snapshots and earliest_message_timestamp say what GET_BROKER_RUNTIME_INFO says."""
    # StoreStatsService samples once a second; 20 a second here, so the 10- and 60-sample windows
    # fill within seconds (the 600-sample one does not: it must stay without a sample)
    monkeypatch.setattr("rocketstore.broker.broker.SAMPLING_INTERVAL_S", 0.05)
    broker = broker_factory(broker_cluster_name=CLUSTER, broker_name=BROKER)
    client = broker.client()
    deadline = time.monotonic() + 30
    while runtime_info(client)["putTps"].split(" ")[1] == "":
        assert time.monotonic() < deadline, "the 60-sample window never filled"
        time.sleep(0.1)
    first = client.send_message("Rates", b"r")
    assert first.code == ResponseCode.SUCCESS
    for _ in range(19):
        assert client.send_message("Rates", b"r").code == ResponseCode.SUCCESS
    client.wait_dispatched("Rates", 0, 20)
    assert client.pull("Rates", 0, 0, group="RG").code == ResponseCode.SUCCESS
    assert client.pull("Rates", 0, 20, group="RG", sys_flag=0).code == ResponseCode.PULL_NOT_FOUND
    days = broker.controller.broker_stats

    def set_mornings() -> None:  # as if two midnights had passed (values told apart on purpose)
        days.put_total_today_morning, days.put_total_yesterday_morning = 11, 7
        days.get_total_today_morning, days.get_total_yesterday_morning = 13, 5
    broker.call_soon(set_mornings)

    # a scrape between two runtime infos that agree (samples move on every 50 ms) must agree with them
    for _ in range(50):
        before = runtime_info(client)
        families = {f.name: f for f in text_string_to_metric_families(broker.metrics())}
        after = runtime_info(client)
        # ... once a sample has taken in the sends and both pulls (each 60-sample rate then above 0)
        if all(before[key] == after[key] and float(before[key].split(" ")[1]) > 0 for key in TPS_KEYS):
            break
    else:
        pytest.fail("runtime info's rates never held still around a scrape")
    labelled = 0
    for key, prefix in TPS_KEYS.items():
        for window, text in zip((10, 60, 600), before[key].split(" "), strict=True):
            samples = families[f"{prefix}{window}"].samples
            if text == "":
                assert samples == [], f"{prefix}{window} published before its window was covered"
                continue
            assert [s.value for s in samples] == [pytest.approx(float(text))], f"{prefix}{window}"
            assert sorted(samples[0].labels) == sorted(EXPORTER_LABELS[samples[0].name])
            labelled += 1
    assert labelled >= 10  # the 10 and 60 windows of all five keys
    assert before["putTps"].split(" ")[2] == "" and before["getTotalTps"].split(" ")[2] == "0.0"

    def gauge(name: str) -> float:
        return float(families[f"rocketmq_brokeruntime_{name}"].samples[0].value)
    assert (gauge("msg_puttotal_todaymorning"), gauge("msg_puttotal_yesterdaymorning"),
            gauge("msg_gettotal_todaymorning"), gauge("msg_gettotal_yesterdaymorning")) == (
        float(before["msgPutTotalTodayMorning"]), float(before["msgPutTotalYesterdayMorning"]),
        float(before["msgGetTotalTodayMorning"]), float(before["msgGetTotalYesterdayMorning"])) == (11, 7, 13, 5)
    earliest = gauge("earliest_message_timestamp")
    assert earliest == float(before["earliestMessageTimeStamp"]) > 0
    assert abs(earliest - int(time.time() * 1000)) < 120_000  # the first send's store time


def test_put_distribute_time_in_runtime_info_and_exporter_families(metered: BrokerHandle) -> None:
    """putMessageDistributeTime is the last full minute's ("null" and no pmdt samples before one has
    passed, as on RocketMQ 4.9.8); after real puts and the minute's end, its counts ("[<=0ms]:N
    [0~10ms]:N ... ") sum to the puts, the exporter's rocketmq_brokeruntime_pmdt_* carry them, and
    putLatency99/putLatency999 are "%.2f" quantiles of the same minute."""
    client = metered.client()
    fresh = runtime_info(client)
    assert (fresh["putMessageDistributeTime"], fresh["putLatency99"], fresh["putLatency999"]) == (
        "null", "0.00", "0.00")
    assert [value for value in scrape(metered) if value.name.startswith("rocketmq_brokeruntime_pmdt_")] == []
    for i in range(25):
        assert client.send_message("Timed", f"m{i}".encode()).code == ResponseCode.SUCCESS
    client.wait_dispatched("Timed", 0, 25)
    assert client.pull("Timed", 0, 0, group="TimedGroup").code == ResponseCode.SUCCESS
    # the minute ends (the store's sampler rotates at the first sample a minute after the last rotation)
    metered.call_soon(lambda: metered.store.stats.sample(int(time.time() * 1000) + 61_000))
    info = runtime_info(client)
    text = info["putMessageDistributeTime"]
    assert text.endswith(" ") and [part.split(":")[0] for part in text.split()] == [label for label, _ in PMDT]
    counts = [int(part.split(":")[1]) for part in text.split()]
    assert sum(counts) == int(info["putMessageTimesTotal"]) == 25
    assert int(info["getMessageEntireTimeMax"]) >= 0 and info["dispatchMaxBuffer"] == "0"
    # the slowest put is in the highest bucket that counted one
    assert put_distribute_bucket(int(info["putMessageEntireTimeMax"])) == max(i for i, n in enumerate(counts) if n)
    p99, p999 = info["putLatency99"], info["putLatency999"]
    assert re.fullmatch(r"\d+\.\d\d", p99) and re.fullmatch(r"\d+\.\d\d", p999)
    # at most the upper bound of the latency bucket the slowest put fell in
    slowest = int(info["putMessageEntireTimeMax"])
    assert 0 < float(p99) <= float(p999) <= LATENCY_BOUNDS_MS[bisect.bisect_left(LATENCY_BOUNDS_MS, slowest)]
    samples = scrape(metered)
    published = [value(samples, f"rocketmq_brokeruntime_pmdt_{suffix}") for _, suffix in PMDT]
    assert published == counts and sum(published) > 0
