"""The metric families apache/rocketmq-exporter publishes, computed by the broker itself.

The exporter (a Spring application polling brokers with mqadmin calls) is what RocketMQ's
Grafana dashboards read: ``rocketmq_broker_tps``, ``rocketmq_producer_tps``,
``rocketmq_group_diff``, ... Publishing the families whose meaning this broker can reproduce,
under the exporter's names and with the exporter's label names, lets such a dashboard show this
broker when Prometheus scrapes ``/metrics`` directly, with no exporter in between. All are gauges,
as in the exporter (rates are per-second over the last minute, BrokerStatsManager's minute stats);
:data:`EXPORTER_FAMILIES` lists every family published here with its labels.

What each one means (the exporter's MetricsCollectTask and RMQMetricsCollector, 0.0.3-SNAPSHOT):

* ``rocketmq_broker_tps`` / ``rocketmq_broker_qps``: messages put / pulled per second (BROKER_PUT_NUMS,
  BROKER_GET_NUMS); ``brokerIP`` is the broker's address ``ip:port``, as the name server lists it;
* ``rocketmq_producer_tps`` / ``rocketmq_producer_message_size``: messages / bytes put per second by
  topic (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE); retry and DLQ topics are left out, as the exporter does;
* ``rocketmq_consumer_tps`` / ``rocketmq_consumer_message_size``: messages / bytes pulled per second by
  topic and group (GROUP_GET_NUMS, GROUP_GET_SIZE), retry and DLQ topics left out likewise;
* ``rocketmq_producer_offset``: the sum of the topic's consume-queue max offsets on this broker;
  ``rocketmq_topic_retry_offset`` the same for ``%RETRY%`` topics, ``rocketmq_topic_dlq_offset`` for
  ``%DLQ%`` topics, labelled by the group (the topic without its prefix);
* ``rocketmq_consumer_offset``: the sum of a group's committed offsets of a topic's queues, for the
  (topic, group) pairs with committed offsets or an online subscription (queryTopicConsumeByWho);
* ``rocketmq_group_diff`` / ``rocketmq_group_retrydiff``: ConsumeStats.computeTotalDiff, the sum over
  every read queue of the topic of max offset minus committed offset (0 when never committed),
  for clustering groups (``msgModel`` "1", MessageModel.CLUSTERING's ordinal; broadcasting groups
  keep their offsets on the clients and are left out) with ``countOfOnlineConsumers``;
* ``rocketmq_group_get_latency_by_storetime``: milliseconds between now and the store time of the
  first message a group has not consumed, the largest over the topic's queues (0 when caught up);
* ``rocketmq_group_count``: a group's online consumers, labelled with their addresses and client ids
  joined by commas; ``rocketmq_producer_count``: a producer group's online producers;
* ``rocketmq_brokeruntime_*``: broker runtime values (GET_BROKER_RUNTIME_INFO's keys) that this
  broker keeps, labelled as the exporter labels them (``des`` the version name, ``boottime`` the
  boot timestamp in ms, ``brokerHost`` empty as the exporter leaves it). Among them the runtime
  TPS triples, which the exporter splits into one family per window (``putTps`` "10s 60s 600s" into
  ``put_tps10`` / ``put_tps60`` / ``put_tps600``; likewise ``getfound_``, ``getmiss_``,
  ``gettotal_``, ``gettransfered_tps*``), from StoreStatsService's one-second samples; a window
  the samples do not cover yet (RocketMQ prints an empty field) has no sample here. Also the
  ``msg_puttotal_*`` / ``msg_gettotal_*`` ``todaymorning`` / ``yesterdaymorning`` day snapshots
  (BrokerStats) and ``earliest_message_timestamp`` (-1 while the CommitLog is empty). The put time
  distribution ``rocketmq_brokeruntime_pmdt_0ms`` ... ``_10stomore``: the last full minute's puts
  per bucket of runtime info's ``putMessageDistributeTime`` (the store's own put time, from the
  CommitLog append to its result, as StoreStatsService measures it); no sample during the first
  minute, while runtime info says "null".

Not published (no same-meaning value here): the client-side families (``rocketmq_client_*``,
which the exporter asks each consumer for), thread-pool queue figures (there are no thread pools
in front of the processors) and
``rocketmq_group_dlqdiff`` (which the exporter never fills: it skips DLQ topics).
``rocketmq_message_accumulation`` is no metric: it is the title of the exporter dashboard's panel
computing producer offset minus consumer offset.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.mq_version import BROKER_VERSION, BROKER_VERSION_DESC
from rocketstore.common.mix_all import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rocketstore.store.broker_stats_manager import StatsItem
from rocketstore.store.clean import disk_partition_used_ratio
from rocketstore.store.stats import PUT_DISTRIBUTE_BUCKETS, TPS_WINDOWS

_BROKER: Final = ("cluster", "brokerIP", "broker")
_TOPIC: Final = ("cluster", "broker", "topic")
_GROUP: Final = ("cluster", "broker", "topic", "group")
_DIFF: Final = ("group", "topic", "countOfOnlineConsumers", "msgModel")
_RUNTIME: Final = ("cluster", "brokerIP", "brokerHost", "des", "boottime", "broker_version")

#: MessageModel.CLUSTERING.ordinal(), the exporter's ``msgModel`` label
CLUSTERING_ORDINAL: Final = "1"

#: name -> label names of every family this module publishes (the exporter's label sets)
EXPORTER_FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    "rocketmq_broker_tps": _BROKER,
    "rocketmq_broker_qps": _BROKER,
    "rocketmq_producer_tps": _TOPIC,
    "rocketmq_producer_message_size": _TOPIC,
    "rocketmq_consumer_tps": _GROUP,
    "rocketmq_consumer_message_size": _GROUP,
    "rocketmq_producer_offset": _TOPIC,
    "rocketmq_topic_retry_offset": _TOPIC,
    "rocketmq_topic_dlq_offset": ("cluster", "broker", "group"),
    "rocketmq_consumer_offset": _GROUP,
    "rocketmq_group_diff": _DIFF,
    "rocketmq_group_retrydiff": _DIFF,
    "rocketmq_group_get_latency_by_storetime": _GROUP,
    "rocketmq_group_count": ("caddr", "localaddr", "group"),
    "rocketmq_producer_count": ("cluster", "broker", "group"),
    "rocketmq_brokeruntime_msg_put_total_today_now": _RUNTIME,
    "rocketmq_brokeruntime_msg_gettotal_today_now": _RUNTIME,
    "rocketmq_brokeruntime_putmessage_times_total": _RUNTIME,
    "rocketmq_brokeruntime_put_message_size_total": _RUNTIME,
    "rocketmq_brokeruntime_put_message_average_size": _RUNTIME,
    "rocketmq_brokeruntime_putmessage_entire_time_max": _RUNTIME,
    "rocketmq_brokeruntime_commitlog_maxoffset": _RUNTIME,
    "rocketmq_brokeruntime_commitlog_minoffset": _RUNTIME,
    "rocketmq_brokeruntime_commitlog_disk_ratio": _RUNTIME,
    "rocketmq_brokeruntime_consumequeue_disk_ratio": _RUNTIME,
    "rocketmq_brokeruntime_commitlogdir_capacity_total": _RUNTIME,
    "rocketmq_brokeruntime_commitlogdir_capacity_free": _RUNTIME,
    "rocketmq_brokeruntime_dispatch_behind_bytes": _RUNTIME,
    "rocketmq_brokeruntime_remain_howmanydata_toflush": _RUNTIME,
    "rocketmq_brokeruntime_start_accept_sendrequest_time": _RUNTIME,
    "rocketmq_brokeruntime_msg_puttotal_todaymorning": _RUNTIME,
    "rocketmq_brokeruntime_msg_puttotal_yesterdaymorning": _RUNTIME,
    "rocketmq_brokeruntime_msg_gettotal_todaymorning": _RUNTIME,
    "rocketmq_brokeruntime_msg_gettotal_yesterdaymorning": _RUNTIME,
    "rocketmq_brokeruntime_earliest_message_timestamp": _RUNTIME,
}

#: runtime info's TPS keys -> the exporter's family prefix; one family per window of TPS_WINDOWS
TPS_FAMILIES: Final = {
    "putTps": "rocketmq_brokeruntime_put_tps",
    "getFoundTps": "rocketmq_brokeruntime_getfound_tps",
    "getMissTps": "rocketmq_brokeruntime_getmiss_tps",
    "getTotalTps": "rocketmq_brokeruntime_gettotal_tps",
    "getTransferedTps": "rocketmq_brokeruntime_gettransfered_tps",
}
EXPORTER_FAMILIES.update({f"{prefix}{window}": _RUNTIME for prefix in TPS_FAMILIES.values() for window in TPS_WINDOWS})
#: the exporter's put time distribution families, in the order of PUT_DISTRIBUTE_BUCKETS
PMDT_FAMILIES: Final = tuple(f"rocketmq_brokeruntime_pmdt_{suffix}" for suffix in (
    "0ms", "0to10ms", "10to50ms", "50to100ms", "100to200ms", "200to500ms", "500to1s", "1to2s", "2to3s", "3to4s",
    "4to5s", "5to10s", "10stomore"))
assert len(PMDT_FAMILIES) == len(PUT_DISTRIBUTE_BUCKETS)
EXPORTER_FAMILIES.update({family: _RUNTIME for family in PMDT_FAMILIES})


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=EXPORTER_FAMILIES[name])


def _is_plain(topic: str) -> bool:
    return not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def exporter_metrics(broker: BrokerContext) -> Iterator[Metric]:
    """Every family of :data:`EXPORTER_FAMILIES`, read now (on the broker's loop)."""
    yield from _rate_metrics(broker, time.monotonic())
    if broker.ready:  # the store's tables are only complete once recovered
        yield from _offset_metrics(broker)
        yield from _runtime_metrics(broker)
    yield from _client_metrics(broker)


def _rate_metrics(broker: BrokerContext, now: float) -> Iterator[Metric]:
    cfg = broker.broker_config
    cluster, name = cfg.broker_cluster_name, cfg.broker_name
    stats = broker.broker_stats_manager
    for family, doc, item in (("rocketmq_broker_tps", "Messages put per second (last minute)", stats.broker_put_nums),
                              ("rocketmq_broker_qps", "Messages pulled per second (last minute)",
                               stats.broker_get_nums)):
        gauge = _gauge(family, doc)
        gauge.add_metric([cluster, broker.broker_addr, name], item.per_second(now))
        yield gauge
    topic_tables: tuple[tuple[str, str, dict[str, StatsItem]], ...] = (
        ("rocketmq_producer_tps", "Messages put per second by topic (last minute)", stats.topic_put_nums),
        ("rocketmq_producer_message_size", "Bytes put per second by topic (last minute)", stats.topic_put_size))
    for family, doc, table in topic_tables:
        gauge = _gauge(family, doc)
        for topic, item in sorted(table.items()):
            if _is_plain(topic):
                gauge.add_metric([cluster, name, topic], item.per_second(now))
        yield gauge
    group_tables: tuple[tuple[str, str, dict[tuple[str, str], StatsItem]], ...] = (
        ("rocketmq_consumer_tps", "Messages pulled per second by topic and group (last minute)",
         stats.group_get_nums),
        ("rocketmq_consumer_message_size", "Bytes pulled per second by topic and group (last minute)",
         stats.group_get_size))
    for family, doc, group_table in group_tables:
        gauge = _gauge(family, doc)
        for (topic, group), item in sorted(group_table.items()):
            if _is_plain(topic):
                gauge.add_metric([cluster, name, topic, group], item.per_second(now))
        yield gauge


def _offset_metrics(broker: BrokerContext) -> Iterator[Metric]:
    cfg = broker.broker_config
    cluster, name = cfg.broker_cluster_name, cfg.broker_name
    store = broker.store
    max_offsets = store.max_offsets_by_queue()
    topic_sums: dict[str, int] = defaultdict(int)
    for (topic, _), max_offset in max_offsets.items():
        topic_sums[topic] += max_offset
    produced = _gauge("rocketmq_producer_offset", "Sum of the topic's queue max offsets on this broker")
    retry = _gauge("rocketmq_topic_retry_offset", "Sum of the retry topic's queue max offsets on this broker")
    dlq = _gauge("rocketmq_topic_dlq_offset", "Sum of the group's DLQ queue max offsets on this broker")
    for topic, total in sorted(topic_sums.items()):
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            retry.add_metric([cluster, name, topic], total)
        elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            dlq.add_metric([cluster, name, topic[len(DLQ_GROUP_TOPIC_PREFIX):]], total)
        else:
            produced.add_metric([cluster, name, topic], total)
    yield from (produced, retry, dlq)

    consumed = _gauge("rocketmq_consumer_offset", "Sum of the group's committed offsets of the topic's queues")
    diff = _gauge("rocketmq_group_diff", "Messages a clustering group has not consumed yet (ConsumeStats diff)")
    retry_diff = _gauge("rocketmq_group_retrydiff", "Messages of the group's retry topic not consumed yet")
    latency = _gauge("rocketmq_group_get_latency_by_storetime",
                     "Milliseconds since the store time of the oldest message the group has not consumed")
    now_ms = int(time.time() * 1000)
    # the pairs queryTopicConsumeByWho answers: committed offsets, and online subscriptions
    committed: dict[tuple[str, str], dict[int, int]] = {}
    for key, offsets in broker.consumer_offset_manager.offset_table().items():
        topic, _, group = key.partition("@")
        committed[(topic, group)] = offsets
    for group, online in broker.consumer_manager.groups.items():
        for topic in online.subscriptions:
            committed.setdefault((topic, group), {})
    for (topic, group), offsets in sorted(committed.items()):
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            continue  # the exporter skips DLQ topics
        consumed.add_metric([cluster, name, topic, group], sum(max(o, 0) for o in offsets.values()))
        info = broker.consumer_manager.get(group)
        if info is not None and info.message_model == "BROADCASTING":
            continue
        topic_config = broker.topic_config_manager.get(topic)
        queue_ids = range(topic_config.read_queue_nums) if topic_config is not None else sorted(offsets)
        behind = 0
        lag_ms = 0
        for queue_id in queue_ids:
            broker_offset = max(store.get_max_offset_in_queue(topic, queue_id), 0)
            consumer_offset = max(offsets.get(queue_id, 0), 0)
            behind += broker_offset - consumer_offset
            if consumer_offset < broker_offset:
                # an offset whose messages were cleaned up: the oldest one left (the exporter's
                # OFFSET_ILLEGAL case)
                oldest = max(consumer_offset, store.get_min_offset_in_queue(topic, queue_id))
                stored_at = store.get_message_store_timestamp(topic, queue_id, oldest)
                if stored_at > 0:
                    lag_ms = max(lag_ms, now_ms - stored_at)
        online_count = str(len(info.channels)) if info is not None else "0"
        (retry_diff if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else diff).add_metric(
            [group, topic, online_count, CLUSTERING_ORDINAL], behind)
        latency.add_metric([cluster, name, topic, group], lag_ms)
    yield from (consumed, diff, retry_diff, latency)


def _partition_bytes(path: str) -> tuple[int, int]:
    """(total, free) bytes of the partition holding ``path``, as Java's File.getTotalSpace /
    getFreeSpace (free counts blocks reserved for root); (0, 0) when it cannot be examined."""
    try:
        st = os.statvfs(path)
    except OSError:
        return 0, 0
    return st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize


def _runtime_metrics(broker: BrokerContext) -> Iterator[Metric]:
    cfg = broker.broker_config
    store = broker.store
    stats = store.stats
    store_cfg = broker.store_config
    commit_log_dir = str(store_cfg.commit_log_dir())
    if not os.path.isdir(commit_log_dir):
        commit_log_dir = str(store_cfg.root_dir())
    capacity_total, capacity_free = _partition_bytes(commit_log_dir)
    consume_queue_dir = str(store_cfg.consume_queue_dir())
    if not os.path.isdir(consume_queue_dir):
        consume_queue_dir = str(store_cfg.root_dir())
    labels = [cfg.broker_cluster_name, broker.broker_addr, "", BROKER_VERSION_DESC, str(broker.start_time_ms),
              str(BROKER_VERSION)]
    puts = stats.put_message_times_total
    days = broker.broker_stats
    for family, value in (
        ("rocketmq_brokeruntime_msg_put_total_today_now", puts),  # BrokerStats: the store's put total
        ("rocketmq_brokeruntime_msg_gettotal_today_now", stats.get_message_transferred_msg_count),
        ("rocketmq_brokeruntime_putmessage_times_total", puts),
        ("rocketmq_brokeruntime_put_message_size_total", stats.put_message_size_total),
        ("rocketmq_brokeruntime_put_message_average_size", stats.put_message_size_total / puts if puts else 0.0),
        ("rocketmq_brokeruntime_putmessage_entire_time_max", stats.put_max_ms),
        ("rocketmq_brokeruntime_commitlog_maxoffset", store.max_phy_offset),
        ("rocketmq_brokeruntime_commitlog_minoffset", store.min_phy_offset),
        ("rocketmq_brokeruntime_commitlog_disk_ratio", store.disk_usage_ratio()),
        ("rocketmq_brokeruntime_consumequeue_disk_ratio", disk_partition_used_ratio(consume_queue_dir)),
        # runtime info's commitLogDirCapacity "Total : 9.8 GiB, Free : 4.1 GiB.", which the exporter
        # turns back into bytes; exact here
        ("rocketmq_brokeruntime_commitlogdir_capacity_total", capacity_total),
        ("rocketmq_brokeruntime_commitlogdir_capacity_free", capacity_free),
        ("rocketmq_brokeruntime_dispatch_behind_bytes", store.dispatch_behind_bytes),
        ("rocketmq_brokeruntime_remain_howmanydata_toflush", store.commit_log.remain_to_flush()),
        ("rocketmq_brokeruntime_start_accept_sendrequest_time", cfg.start_accept_send_request_time_stamp),
        ("rocketmq_brokeruntime_msg_puttotal_todaymorning", days.put_total_today_morning),
        ("rocketmq_brokeruntime_msg_puttotal_yesterdaymorning", days.put_total_yesterday_morning),
        ("rocketmq_brokeruntime_msg_gettotal_todaymorning", days.get_total_today_morning),
        ("rocketmq_brokeruntime_msg_gettotal_yesterdaymorning", days.get_total_yesterday_morning),
        ("rocketmq_brokeruntime_earliest_message_timestamp", store.get_earliest_message_time_in_store()),
    ):
        gauge = _gauge(family, family.removeprefix("rocketmq_brokeruntime_"))
        gauge.add_metric(labels, value)
        yield gauge
    last_minute = stats.last_put_distribute_time
    for index, (family, (_, label)) in enumerate(zip(PMDT_FAMILIES, PUT_DISTRIBUTE_BUCKETS, strict=True)):
        gauge = _gauge(family, f"puts of the last minute whose store time was {label.strip('[]')} "
                               "(putMessageDistributeTime)")
        if last_minute is not None:
            gauge.add_metric(labels, last_minute[index])
        yield gauge
    for key, windows in stats.tps_windows().items():
        for window, rate in zip(TPS_WINDOWS, windows, strict=True):
            family = f"{TPS_FAMILIES[key]}{window}"
            gauge = _gauge(family, f"{key} over the last {window} s (messages or requests per second)")
            if rate is not None:
                gauge.add_metric(labels, rate)
            yield gauge


def _client_metrics(broker: BrokerContext) -> Iterator[Metric]:
    cfg = broker.broker_config
    consumers = _gauge("rocketmq_group_count", "Online consumers of the group")
    for group, info in sorted(broker.consumer_manager.groups.items()):
        channels = list(info.channels.values())
        consumers.add_metric([",".join(c.connection.peer for c in channels),
                              ",".join(c.client_id for c in channels), group], len(channels))
    yield consumers
    producers = _gauge("rocketmq_producer_count", "Online producers of the group")
    for group, members in sorted(broker.producer_manager.groups.items()):
        producers.add_metric([cfg.broker_cluster_name, cfg.broker_name, group], len(members))
    yield producers
