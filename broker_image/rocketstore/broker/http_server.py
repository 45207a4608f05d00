"""HTTP side port (``httpListenPort``): ``/metrics``, ``/healthz``, ``/readyz``.

    /healthz   200 while the process serves HTTP at all (liveness: a wedged loop stops answering)
    /readyz    200 once the store is recovered, start-up dispatch has caught up and the remoting
               listeners are open; 503 before that (recovery can take a while) and while stopping
    /metrics   Prometheus text format (prometheus-client), values read at scrape time

Why a small asyncio server on the broker's loop rather than prometheus_client's own HTTP
thread: the broker's client tables (consumer groups, connections) are loop-owned and read
without locks, so scraping on the loop sees consistent values; ``/healthz`` answered by the loop
proves the loop is alive, which a separate thread cannot; and nothing extra runs while nobody
scrapes. Metric families are produced by a custom collector in a private registry (no global
state, several brokers per process in tests). Each request is one short GET; the server speaks
just enough HTTP/1.1 for probes and Prometheus (one request per connection).

What one connection can make it hold is bounded (docs/security.md, "Limits"): a request head of
at most :data:`_MAX_REQUEST_HEAD` bytes (a longer one is answered 431), read within
:data:`_READ_TIMEOUT_S`; an answer the client does not read within :data:`_WRITE_TIMEOUT_S` is
dropped with its connection (a /metrics page of many topics and groups runs to megabytes). There
is no connection cap: a hostile client filling it would fail the kubelet's liveness probe, which
restarts the broker.

Metrics (all prefixed ``rocketstore_``):

    put_messages_total, put_bytes_total, put_failures_total          counters (rate() = TPS)
    get_found_total, get_miss_total, get_messages_total              counters
    commitlog_min_offset_bytes, commitlog_max_offset_bytes           gauges
    dispatch_behind_bytes, disk_usage_ratio, disk_full               gauges
    deleted_files_total{cause}                                       counter (store cleanup)
    queue_max_offset{topic,queue_id}                                 gauge, per consume queue
    consumer_lag{group,topic,queue_id}                               gauge: max offset - committed
                                                                     (these two only with
                                                                     metricsPerQueueEnable, the default)
    topic_max_offset{cluster,broker,topic}                           gauges: their sums per topic, and
    group_lag{cluster,broker,topic,group}                             per group and topic (always)
    consumer_groups_online, client_connections, ready                gauges
    hot_path_info{implementation,event_loop}                         info (always 1): "native" or
                                                                     "python" (rocketstore.common.native),
                                                                     "uvloop" or "asyncio"
    held_pull_requests                                               gauge: long-polling pulls held now
                                                                     (added by processor/long_polling.py)
    delayed_messages_pending{level}, delayed_messages_delivered_total{level}
                                                                     gauge, counter (schedule service)
    delayed_messages_skipped_as_delivered_total, delayed_messages_dropped_total   counters
    timer_messages_pending, timer_messages_delivered_total,          gauge, counters (timer store)
    timer_messages_skipped_as_delivered_total, timer_messages_dropped_total
    transaction_half_messages_total, transaction_commits_total,       counters (transaction service)
    transaction_rollbacks_total, transaction_checks_total,
    transaction_discarded_total
    transaction_half_messages_pending                                gauge: half messages the check has
                                                                     not found resolved yet
    broker_info{cluster,broker,broker_id,broker_addr,version}       info (always 1): which broker this is
    topic_put_messages_total{cluster,broker,topic}                   counters (BrokerStatsManager:
    topic_put_bytes_total{cluster,broker,topic}                       stored sends, by topic)
    group_get_messages_total{cluster,broker,topic,group}             counters (messages / bytes pulls
    group_get_bytes_total{cluster,broker,topic,group}                 returned, by topic and group)
    send_latency_seconds{cluster,broker}                             histograms: send handling (waits
    pull_latency_seconds{cluster,broker}                              included), pull handling (hold left out)

plus ``process_*`` (prometheus_client's ProcessCollector: CPU seconds, resident and virtual memory,
open and maximum file descriptors, start time) and the apache/rocketmq-exporter families listed in
:mod:`rocketstore.broker.exporter_metrics` (``rocketmq_broker_tps``, ``rocketmq_group_diff``, ...).

Labels: the broker-wide ``rocketstore_*`` series above the info line carry none (one broker per
scrape target; their names and shape stay as alerts and tests know them); ``rocketstore_broker_info``
names the cluster and broker of the target, for ``* on(instance) group_left(cluster, broker)``
joins. Series that are per topic or per group, the latency histograms and the exporter families
carry ``cluster`` and ``broker`` themselves, as the exporter's do: those are the ones a dashboard
filters and sums across brokers (``sum by (topic)``), and a Grafana variable
(``label_values(..., cluster)``) needs the label on the series it reads, without a join.
"""


from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.exporter_metrics import exporter_metrics
from rocketstore.broker.mq_version import BROKER_VERSION_DESC
from rocketstore.broker.server import loop_name
from rocketstore.common import native
from rocketstore.store.broker_stats_manager import LatencyHistogram
from rocketstore.store.schedule_message_service import ScheduleMessageService
from rocketstore.store.timer_message_store import TimerMessageStore

log = logging.getLogger(__name__)

_MAX_REQUEST_HEAD = 8192
_READ_TIMEOUT_S = 10.0
_WRITE_TIMEOUT_S = 10.0


class BrokerCollector(Collector):
    """Reads the broker's and store's state when Prometheus scrapes."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.gauges: list[tuple[str, str, Callable[[], float]]] = []  # added by processors (add_gauge)
        self.counters: list[tuple[str, str, Callable[[], float]]] = []  # added by processors (add_counter)
        self.families: list[Callable[[], Iterable[Metric]]] = []  # added by processors (add_metrics)

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        stats = store.stats
        counters = (
            ("put_messages", "Messages stored", stats.put_message_times_total),
            ("put_bytes", "Bytes of messages stored", stats.put_message_size_total),
            ("put_failures", "Put requests the store refused or failed", stats.put_message_failed_times),
            ("get_found", "Pulls that found messages", stats.get_message_times_total_found),
            ("get_miss", "Pulls that found nothing", stats.get_message_times_total_miss),
            ("get_messages", "Messages returned by pulls", stats.get_message_transferred_msg_count),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(f"rocketstore_{name}", doc, value=value)
        yield GaugeMetricFamily("rocketstore_ready", "1 when the broker serves clients", value=int(broker.ready))
        # scrapes are answered on the broker's own loop, so the running loop is the broker's
        yield InfoMetricFamily("rocketstore_hot_path", "Which implementation runs the per-message work",
                               value={"implementation": native.IMPLEMENTATION,
                                      "event_loop": loop_name(asyncio.get_running_loop())})
        if broker.ready:
            yield from self._store_metrics()
        yield GaugeMetricFamily("rocketstore_client_connections", "Open remoting connections",
                                value=len(broker.remoting.connections))
        yield GaugeMetricFamily("rocketstore_consumer_groups_online", "Consumer groups with a live member",
                                value=len(broker.consumer_manager.groups))
        for name, doc, read in self.gauges:
            yield GaugeMetricFamily(name, doc, value=read())
        for name, doc, read in self.counters:
            yield CounterMetricFamily(name, doc, value=read())
        for collect in self.families:
            yield from collect()
        yield from self._broker_stats_metrics()
        yield from exporter_metrics(broker)

    def _broker_stats_metrics(self) -> Iterator[Metric]:
        """Which broker this is, and what BrokerStatsManager added up, with cluster and broker labels."""
        broker = self.broker
        cfg = broker.broker_config
        cluster, name = cfg.broker_cluster_name, cfg.broker_name
        yield InfoMetricFamily("rocketstore_broker", "The cluster and broker this target is (join on instance)",
                               value={"cluster": cluster, "broker": name, "broker_id": str(cfg.broker_id),
                                      "broker_addr": broker.broker_addr, "version": BROKER_VERSION_DESC})
        stats = broker.broker_stats_manager
        topic_families = (
            ("rocketstore_topic_put_messages", "Messages stored by send requests, by topic", stats.topic_put_nums),
            ("rocketstore_topic_put_bytes", "Bytes stored by send requests, by topic", stats.topic_put_size))
        for family, doc, table in topic_families:
            counter = CounterMetricFamily(family, doc, labels=["cluster", "broker", "topic"])
            for topic, item in sorted(table.items()):
                counter.add_metric([cluster, name, topic], item.value)
            yield counter
        group_families = (
            ("rocketstore_group_get_messages", "Messages returned by pulls, by topic and consumer group",
             stats.group_get_nums),
            ("rocketstore_group_get_bytes", "Bytes returned by pulls, by topic and consumer group",
             stats.group_get_size))
        for family, doc, group_table in group_families:
            counter = CounterMetricFamily(family, doc, labels=["cluster", "broker", "topic", "group"])
            for (topic, group), item in sorted(group_table.items()):
                counter.add_metric([cluster, name, topic, group], item.value)
            yield counter
        yield _histogram("rocketstore_send_latency_seconds",
                         "Send request handling, from the request to its response (flush and back-pressure waits "
                         "included)", stats.send_latency, [cluster, name])
        yield _histogram("rocketstore_pull_latency_seconds",
                         "Pull request handling, a long-polling hold left out", stats.pull_latency, [cluster, name])

    def _store_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        store = broker.store
        yield GaugeMetricFamily("rocketstore_commitlog_min_offset_bytes", "First CommitLog offset still stored",
                                value=store.min_phy_offset)
        yield GaugeMetricFamily("rocketstore_commitlog_max_offset_bytes", "CommitLog end offset",
                                value=store.max_phy_offset)
        yield GaugeMetricFamily("rocketstore_dispatch_behind_bytes", "CommitLog bytes not yet in consume queues",
                                value=store.dispatch_behind_bytes)
        yield GaugeMetricFamily("rocketstore_disk_usage_ratio", "Used fraction of the CommitLog's disk",
                                value=store.disk_usage_ratio())
        yield GaugeMetricFamily("rocketstore_disk_full", "1 when the store refuses writes for lack of disk",
                                value=int(store.disk_full))
        deleted = CounterMetricFamily("rocketstore_deleted_files", "Store files deleted, by cause", labels=["cause"])
        # the stats service is the store's public counter view (RocketMQ's getStoreStatsService)
        for cause, count in sorted(store.stats.deleted_files_by_cause.items()):
            deleted.add_metric([cause], count)
        yield deleted
        yield from self._queue_metrics()
        yield from _schedule_metrics(store.schedule_message_service)
        yield from _timer_metrics(store.timer_message_store)

    def _queue_metrics(self) -> Iterator[Metric]:
        """Max offsets and consumer lag: per topic (and group) always, per queue while
        ``metricsPerQueueEnable`` is on (read here, so a live update applies at the next scrape).

        The per-queue families are queues x groups series per broker, most of a large cluster's
        scrape; the sums keep lag visible (and alertable) without them."""
        broker = self.broker
        store = broker.store
        cfg = broker.broker_config
        cluster, name = cfg.broker_cluster_name, cfg.broker_name
        per_queue = cfg.metrics_per_queue_enable
        max_offsets = GaugeMetricFamily("rocketstore_queue_max_offset", "Next message offset of a consume queue",
                                        labels=["topic", "queue_id"])
        topic_sums: dict[str, int] = defaultdict(int)
        for (topic, queue_id), max_offset in sorted(store.max_offsets_by_queue().items()):
            topic_sums[topic] += max_offset
            if per_queue:
                max_offsets.add_metric([topic, str(queue_id)], max_offset)
        lag = GaugeMetricFamily("rocketstore_consumer_lag", "Messages a group has not committed yet",
                                labels=["group", "topic", "queue_id"])
        lag_sums: dict[tuple[str, str], int] = {}  # a group caught up on every queue has its series, at 0
        for key, offsets in sorted(broker.consumer_offset_manager.offset_table().items()):
            topic, _, group = key.partition("@")
            total = 0
            for queue_id, committed in sorted(offsets.items()):
                behind = max(store.get_max_offset_in_queue(topic, queue_id) - committed, 0)
                total += behind
                if per_queue:
                    lag.add_metric([group, topic, str(queue_id)], behind)
            lag_sums[(topic, group)] = total
        if per_queue:
            yield max_offsets
            yield lag
        topic_max = GaugeMetricFamily("rocketstore_topic_max_offset",
                                      "Sum of the next message offsets of the topic's consume queues on this broker",
                                      labels=["cluster", "broker", "topic"])
        for topic, total in sorted(topic_sums.items()):
            topic_max.add_metric([cluster, name, topic], total)
        yield topic_max
        group_lag = GaugeMetricFamily("rocketstore_group_lag",
                                      "Messages a group has not committed yet, summed over the topic's queues it "
                                      "committed on",
                                      labels=["cluster", "broker", "topic", "group"])
        for (topic, group), total in sorted(lag_sums.items()):
            group_lag.add_metric([cluster, name, topic, group], total)
        yield group_lag


def _histogram(name: str, doc: str, histogram: LatencyHistogram, labels: list[str]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=["cluster", "broker"])
    family.add_metric(labels, histogram.cumulative(), histogram.sum)
    return family


def _timer_metrics(timers: TimerMessageStore) -> Iterator[Metric]:
    """Timed messages (RocketMQ 5's TIMER_* properties): waiting, delivered, set aside."""
    yield GaugeMetricFamily("rocketstore_timer_messages_pending", "Timed messages stored and not yet delivered",
                            value=timers.pending())
    yield CounterMetricFamily("rocketstore_timer_messages_delivered",
                              "Timed messages put on their real topic since start", value=timers.stats.delivered)
    yield CounterMetricFamily("rocketstore_timer_messages_skipped_as_delivered",
                              "Timers start-up found already delivered before a crash (not delivered again)",
                              value=timers.stats.skipped_already_delivered)
    yield CounterMetricFamily("rocketstore_timer_messages_dropped",
                              "Timer records that could not be delivered (cleaned up, no TIMER_OUT_MS or REAL_TOPIC)",
                              value=timers.stats.dropped)


def _schedule_metrics(service: ScheduleMessageService) -> Iterator[Metric]:
    """Delayed messages: waiting and delivered per level, and what start-up or delivery set aside."""
    pending = GaugeMetricFamily("rocketstore_delayed_messages_pending",
                                "Delayed messages stored and not yet delivered, by delay level", labels=["level"])
    for level, count in sorted(service.pending().items()):
        pending.add_metric([str(level)], count)
    yield pending
    delivered = CounterMetricFamily("rocketstore_delayed_messages_delivered",
                                    "Delayed messages put on their real topic since start, by delay level",
                                    labels=["level"])
    for level, count in sorted(service.stats.delivered.items()):
        delivered.add_metric([str(level)], count)
    yield delivered
    yield CounterMetricFamily("rocketstore_delayed_messages_skipped_as_delivered",
                              "Due messages start-up found already delivered before a crash (not delivered again)",
                              value=service.stats.skipped_already_delivered)
    yield CounterMetricFamily("rocketstore_delayed_messages_dropped",
                              "Delayed records that could not be delivered (no record, no REAL_TOPIC/REAL_QID)",
                              value=service.stats.dropped)


class HttpServer:
    """The side listener; ``port`` is the bound port after :meth:`start`."""

    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = BrokerCollector(broker)
        self.registry.register(self._collector)
        # CPU, memory, file descriptors of this process (read from /proc at scrape time)
        ProcessCollector(registry=self.registry)
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    def add_gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """Publish ``read()`` as gauge ``name``, read on the loop at each scrape: for state a processor
        owns (this server starts before the processors register)."""
        self._collector.gauges.append((name, doc, read))

    def add_counter(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """Publish ``read()``, a running total a processor keeps, as counter ``name`` (exposed as
        ``name_total``)."""
        self._collector.counters.append((name, doc, read))

    def add_metrics(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Publish the families ``collect()`` yields, read on the loop at each scrape (for labelled
        metrics a processor keeps)."""
        self._collector.families.append(collect)

    async def start(self) -> None:
        # the reader's limit bounds the head it buffers (readuntil fails past it)
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=_MAX_REQUEST_HEAD)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            status, content_type, body = await self._respond(reader)
            head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n")
            writer.write(head.encode("latin-1") + body)
            await asyncio.wait_for(writer.drain(), _WRITE_TIMEOUT_S)
        except TimeoutError:
            writer.transport.abort()  # a graceful close would wait for the unread answer
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _respond(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            return "431 Request Header Fields Too Large", "text/plain", b"request head too large\n"
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request line\n"
        method, target, _ = parts
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        path = target.split("?", 1)[0]
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            if self.broker.ready:
                return "200 OK", "text/plain", b"ready\n"
            why = b"stopping\n" if self.broker.stopping else b"starting: store recovery or dispatch catch-up\n"
            return "503 Service Unavailable", "text/plain", why
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE_LATEST, generate_latest(self.registry)
        return "404 Not Found", "text/plain", b"not found\n"
