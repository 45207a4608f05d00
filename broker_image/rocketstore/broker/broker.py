"""BrokerController: one broker process — the store, its config tables and the request processors.

    start()  start the HTTP side port (health answers during recovery), load the config tables,
             open and recover the store and start it (in a thread: recovery can take seconds),
             register processors, listen (remoting, then the name-server role), start the
             periodic tasks, and only then report ready
    stop()   run the shutdown listeners (long polling lets go), stop the name-server role and
             remoting (stop accepting, let in-flight requests finish within a grace period),
             persist offsets and tables, shut the store down (flush, checkpoint, remove ``abort``)

With ``namesrvAddr`` set, start() also registers the broker with those name servers before it
reports ready, and a task re-registers it every ``registerNameServerPeriod`` (clamped to 10-60 s,
first after 10 s, as RocketMQ schedules it; with ``forceRegister=false`` only when a name server
lacks the current topic table) and, one way, whenever the topic table changes; stop() unregisters
it after the listeners close (broker_outer_api.py says what is sent).

Processors live in ``rocketstore.broker.processor``, one RequestProcessor class per module, whose
``handlers()`` :meth:`BrokerController.register_processors` registers by request code. They, the
name-server role and the HTTP side port see the controller as a ``BrokerContext``
(broker_context.py): the attributes and methods documented here, nothing of this module.

Config tables. ``topics.json`` and ``subscriptionGroup.json`` are written whenever they change
(in a worker thread, coalesced), ``consumerOffset.json`` every ``flushConsumerOffsetInterval``
(5 s), and all three at shutdown. System topics and groups are created before the files are
loaded, so a file's own definition of one wins, as in RocketMQ.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Final

from prometheus_client.core import Metric

from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.broker_config import BrokerConfig, split_properties
from rocketstore.broker.broker_context import MessageArrivingListener, RequestProcessor
from rocketstore.broker.broker_outer_api import BrokerIdentity, BrokerOuterAPI
from rocketstore.broker.broker_stats import BrokerStats
from rocketstore.broker.client_manager import CHANNEL_EXPIRED_TIMEOUT_MS, ConsumerManager, ProducerManager
from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterManager
from rocketstore.broker.grpc_v2.server import GrpcServer
from rocketstore.broker.http_server import HttpServer
from rocketstore.broker.namesrv import NameServer
from rocketstore.broker.processor.acl_config import AclConfigProcessor
from rocketstore.broker.processor.admin import AdminBrokerProcessor
from rocketstore.broker.processor.client import ClientManageProcessor
from rocketstore.broker.processor.consumer_offset import ConsumerOffsetProcessor
from rocketstore.broker.processor.end_transaction import EndTransactionProcessor
from rocketstore.broker.processor.lock import LockBatchProcessor
from rocketstore.broker.processor.pull import PullMessageProcessor
from rocketstore.broker.processor.query import QueryMessageProcessor
from rocketstore.broker.processor.reply import ReplyMessageProcessor
from rocketstore.broker.processor.send import SendMessageProcessor
from rocketstore.broker.processor.send_back import ConsumerSendMsgBackProcessor
from rocketstore.broker.server import Connection, RemotingServer, loop_name
from rocketstore.broker.tls_system_config import broker_tls_settings
from rocketstore.broker.top_addressing import fetch_ns_addr, ws_addr
from rocketstore.broker.transaction.bridge import TransactionalMessageBridge
from rocketstore.broker.transaction.check_listener import TransactionalMessageCheckListener
from rocketstore.broker.transaction.check_service import run_check_service
from rocketstore.broker.transaction.service import TransactionalMessageService
from rocketstore.broker.unimplemented_config import unimplemented_settings
from rocketstore.client.remoting_client import split_namesrv_addr
from rocketstore.common import native
from rocketstore.common.clock import now_ms
from rocketstore.common.data_version import DataVersion
from rocketstore.common.message import HostAddress
from rocketstore.common.mix_all import CID_RMQ_SYS_PREFIX, REPLY_TOPIC_POSTFIX
from rocketstore.common.perm_name import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import (
    AUTO_CREATE_TOPIC_KEY_TOPIC,
    RMQ_SYS_BENCHMARK_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_SELF_TEST_TOPIC,
    SCHEDULE_TOPIC_QUEUE_NUM,
    is_system_topic,
)
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper
from rocketstore.store.broker_stats_manager import SAMPLE_INTERVAL_S, BrokerStatsManager
from rocketstore.store.config import BrokerRole, ConfigError, StoreConfig
from rocketstore.store.config_manager import (
    ConfigManager,
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.stats import SAMPLING_INTERVAL_S

log = logging.getLogger(__name__)

#: Consumer groups every broker has (SubscriptionGroupManager.init).
SYSTEM_GROUPS: Final = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY",
                        "CID_ONSAPI_PULL", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER")

#: How often expired client channels are scanned for (RocketMQ's ClientHousekeepingService).
HOUSEKEEPING_INTERVAL_S: Final = 10.0
#: BrokerController.start's schedule of registerBrokerAll: first after 10 s, then every
#: registerNameServerPeriod clamped to [10 s, 60 s].
REGISTER_INITIAL_DELAY_S: Final = 10.0
REGISTER_PERIOD_MIN_MS: Final = 10_000
REGISTER_PERIOD_MAX_MS: Final = 60_000
#: BrokerController's schedule of updateNameServerAddressList: namesrvAddr is read again every two
#: minutes (first after 10 s), so a live update of it takes effect without a restart.
NAMESRV_ADDR_REFRESH_DELAY_S: Final = 10.0
NAMESRV_ADDR_REFRESH_INTERVAL_S: Final = 120.0
#: What the broker sends as haServerAddr: it runs no HA server, so it names none (the field is
#: mandatory; a name server hands it only to slaves of this brokerName, and there are none).
NO_HA_SERVER_ADDR: Final = ""


class BrokerController:
    """Owns every broker-wide object; processors receive it as their ``BrokerContext``.

    Attributes processors may use:
      ``broker_config`` / ``store_config``   the parsed broker.conf (read at use: live-updatable)
      ``store``                               the DefaultMessageStore (blocking calls)
      ``store_host``                          HostAddress stamped as storeHost on every put (its
                                              port is the real listening port once started)
      ``topic_config_manager``, ``subscription_group_manager``, ``consumer_offset_manager``
      ``consumer_manager`` / ``producer_manager``  online client groups (client_manager.py), e.g.
                                              ``consumer_manager.find_subscription_data(group, topic)``
      ``consumer_filter_manager``             compiled SQL92 subscriptions (filter/consumer_filter_manager.py)
      ``transactional_message_service``       half/op records, the check pass and its counters
                                              (transaction/); its pass runs every
                                              ``transactionCheckInterval`` as a broker task
      ``remoting``                            the RemotingServer (its connections, ``on_disconnect``)
      ``grpc``                                the gRPC v2 endpoint (grpc_v2/server.py), None when off
      ``loop``                                the asyncio loop the broker runs on
      ``message_arriving_listeners``          callbacks (topic, queue_id, max_offset, arrived) run on
                                              the loop when dispatch makes messages visible;
                                              ``arrived`` messages of that queue, up to
                                              ``max_offset``, since its last call
      ``shutdown_listeners``                  callables run on the loop first thing in ``stop()``
                                              (e.g. release held long-polling requests)
      ``broker_stats_manager``                per-topic puts, per-group gets, send/pull latencies
                                              (added up by the send and pull processors on the
                                              loop, sampled every 10 s for per-minute rates)

      ``config_version``, ``start_time_ms``   the configuration's DataVersion; when serving began
      ``ready`` / ``stopping``, ``broker_addr``

    Methods processors may use: :meth:`topic_config_for_send`, :meth:`create_topic_in_send_back`,
    :meth:`subscription_group`, :meth:`is_system_topic`, :meth:`tables_changed`,
    :meth:`all_config_properties`, :meth:`update_config`, :meth:`add_gauge`, :meth:`add_counter`.
    """

    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig) -> None:
        self.broker_config = broker_config
        self.store_config = store_config
        config_dir = store_config.config_dir()
        self.topic_config_manager = TopicConfigManager(config_dir)
        self.subscription_group_manager = SubscriptionGroupManager(config_dir)
        self.consumer_offset_manager = ConsumerOffsetManager(config_dir)
        self.store_host = HostAddress(broker_config.broker_ip1 or _local_ip(), broker_config.listen_port)
        self.remoting = RemotingServer(broker_config.listen_host, broker_config.listen_port,
                                       tls=broker_tls_settings(broker_config))
        #: the ACL check of every request, when aclEnable is set (acl/plain_access_validator.py)
        self.access_validator: PlainAccessValidator | None = None
        self.message_arriving_listeners: list[MessageArrivingListener] = []
        # dispatch-thread arrivals not yet handed to the loop: (topic, queue id) -> (max offset, count)
        self._arrived: dict[tuple[str, int], tuple[int, int]] = {}
        self._arrived_lock = threading.Lock()
        self._arrivals_scheduled = False
        self.shutdown_listeners: list[Callable[[], None]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.store = DefaultMessageStore(store_config, on_message_arriving=self._on_message_arriving)
        self.consumer_manager = ConsumerManager(lambda: self.broker_config.notify_consumer_ids_changed_enable)
        self.consumer_filter_manager = ConsumerFilterManager(self.consumer_manager)
        self.producer_manager = ProducerManager()
        self.broker_stats_manager = BrokerStatsManager(time.monotonic(), broker_config.broker_cluster_name)
        bridge = TransactionalMessageBridge(self.store, self.consumer_offset_manager, self.create_topic_in_send_back,
                                            lambda: self.store_host)
        self.transactional_message_service = TransactionalMessageService(
            bridge, lambda: self.store_config.file_reserved_time)
        self._transaction_check_listener = TransactionalMessageCheckListener(
            self.transactional_message_service, self.producer_manager, lambda: self.loop)
        self.remoting.on_disconnect.append(self._on_disconnect)
        self.namesrv: NameServer | None = None
        #: the name servers of namesrvAddr this broker registers with (None without namesrvAddr)
        self.broker_outer_api: BrokerOuterAPI | None = None
        self._topics_changed = asyncio.Event()
        self._one_shot_tasks: set[asyncio.Task[None]] = set()
        #: the gRPC v2 endpoint of RocketMQ 5.x clients (grpcListenPort; None when it is 0)
        self.grpc: GrpcServer | None = None
        if broker_config.grpc_listen_port > 0:
            self.grpc = GrpcServer(self, broker_config.listen_host, broker_config.grpc_listen_port)
        self.http: HttpServer | None = None
        if broker_config.http_listen_port > 0:  # before start: processors add gauges when registered
            self.http = HttpServer(self, broker_config.listen_host, broker_config.http_listen_port)
        #: the configuration's version, bumped by every live update (GET_BROKER_CONFIG's header)
        self.config_version = DataVersion()
        self.channel_expired_timeout_ms = CHANNEL_EXPIRED_TIMEOUT_MS
        self.housekeeping_interval_s = HOUSEKEEPING_INTERVAL_S
        self.start_time_ms = now_ms()
        #: True once the store is recovered, dispatch has caught up and the listeners are open
        self.ready = False
        self.stopping = False
        self._stopped = False
        self._topic_lock = threading.Lock()  # topic creation may be called from worker threads
        self._extra_system_topics: set[str] = set()
        self._dirty: set[ConfigManager] = set()
        self._dirty_lock = threading.Lock()
        self._persist_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.broker_stats = BrokerStats()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Bring the broker up; raises (with everything it opened closed again) if it cannot."""
        self.loop = asyncio.get_running_loop()
        # what decides the CPU cost of every message, so that a log (and /metrics) says it
        log.info("hot path: %s (%s); event loop: %s", native.IMPLEMENTATION, native.REASON, loop_name(self.loop))
        # broker.conf keys accepted but not implemented: said once, each with what happens instead
        for setting in unimplemented_settings(self.all_config_properties(), _default_properties()):
            log.warning("%s", setting.message())
        try:
            if self.http is not None:
                await self.http.start()
            await asyncio.to_thread(self._load_tables)
            await asyncio.to_thread(self.store.load)
            await asyncio.to_thread(self.store.start)
            self.register_processors()
            await self._start_acl()
            await self.remoting.start()
            self.store_host = HostAddress(self.store_host.host, self.remoting.port)
            if self.grpc is not None:
                await self.grpc.start()
            if self.broker_config.namesrv_listen_port > 0:
                self.namesrv = NameServer(self, self.broker_config.listen_host, self.broker_config.namesrv_listen_port)
                await self.namesrv.start()
        except BaseException:
            await self._close_partial_start()
            raise
        self._tasks.append(self.loop.create_task(self._flush_offsets_loop(), name="flush-consumer-offsets"))
        self._tasks.append(self.loop.create_task(self._housekeeping_loop(), name="client-housekeeping"))
        self._tasks.append(self.loop.create_task(self._stats_sampling_loop(), name="stats-sampling"))
        if self.store_config.broker_role is not BrokerRole.SLAVE:  # RocketMQ checks on the master only
            self._tasks.append(self.loop.create_task(
                run_check_service(self.broker_config, self.transactional_message_service,
                                  self._transaction_check_listener), name="transaction-check"))
        self._tasks.append(self.loop.create_task(self._broker_stats_manager_sampling_loop(),
                                                 name="broker-stats-manager-sampling"))
        self.start_time_ms = now_ms()
        self.broker_config.start_accept_send_request_time_stamp = self.start_time_ms
        self.ready = True
        if self.broker_config.namesrv_addr:
            await self._start_registration(self.broker_config.namesrv_addr)
        elif self.broker_config.fetch_namesrv_addr_by_address_server:
            self._tasks.append(self.loop.create_task(self._address_server_loop(), name="fetch-namesrv-addr"))
        log.info("broker %s of cluster %s serving on %s", self.broker_config.broker_name,
                 self.broker_config.broker_cluster_name, self.broker_addr)

    async def _close_partial_start(self) -> None:
        with contextlib.suppress(Exception):
            if self.namesrv is not None:
                await self.namesrv.stop(0)
            if self.grpc is not None:
                await self.grpc.stop(0)
            await self.remoting.stop(0)
        with contextlib.suppress(Exception):
            # stops what start() started; after a bare load() it only releases the directory lock
            await asyncio.to_thread(self.store.shutdown)
        if self.http is not None:
            with contextlib.suppress(Exception):
                await self.http.stop()

    async def stop(self, grace_s: float = 10.0) -> None:
        """Graceful stop; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self.stopping = True
        self.ready = False
        self.transactional_message_service.stopped = True  # a check pass in its thread ends early
        for listener in self.shutdown_listeners:
            try:
                listener()
            except Exception:
                log.exception("shutdown listener failed")
        tasks = [*self._tasks, *self._one_shot_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.namesrv is not None:
            await self.namesrv.stop(grace_s)
        if self.grpc is not None:
            await self.grpc.stop(grace_s)
        await self.remoting.stop(grace_s)
        if self.broker_outer_api is not None:
            await self.broker_outer_api.unregister_broker_all(self._identity())
            self.broker_outer_api.close()
        if self._persist_task is not None:
            with contextlib.suppress(Exception):
                await self._persist_task
        await asyncio.to_thread(self._persist_all)
        await asyncio.to_thread(self.store.shutdown)
        if self.http is not None:
            await self.http.stop()
        log.info("broker %s stopped", self.broker_config.broker_name)

    def register_processors(self) -> None:
        """Build every request processor and register its handlers by request code."""
        processors: list[RequestProcessor] = [
            ClientManageProcessor(self),
            AdminBrokerProcessor(self),
            SendMessageProcessor(self),
            PullMessageProcessor(self),
            ConsumerOffsetProcessor(self),
            QueryMessageProcessor(self),
            ConsumerSendMsgBackProcessor(self),
            EndTransactionProcessor(self),
            LockBatchProcessor(),
            ReplyMessageProcessor(self),
            AclConfigProcessor(self, lambda: self.access_validator),
        ]
        for processor in processors:
            for code, handler in processor.handlers().items():
                self.remoting.register(code, handler)
        self._add_transaction_metrics()
        if self.remoting.tls is not None and self.remoting.tls.enabled:
            self._add_tls_metrics()

    async def _start_acl(self) -> None:
        """With ``aclEnable``: load the ACL files (a bad one stops the start), check every request,
        reload the files when they change. Home: ``rocketmqHome``, else the store's root directory."""
        if not self.broker_config.acl_enable:
            return
        home = Path(self.broker_config.rocketmq_home or self.store_config.store_path_root_dir)
        validator = PlainAccessValidator(home, self.broker_config.acl_plain_file)
        await asyncio.to_thread(validator.manager.load)
        self.access_validator = validator
        self.remoting.before_request = validator.check
        self._tasks.append(asyncio.get_running_loop().create_task(validator.watch(), name="acl-watch"))
        manager = validator.manager
        for name, doc, read in (
            ("acl_allowed_requests", "Requests the ACL let through", lambda: validator.allowed),
            ("acl_denied_requests", "Requests the ACL refused", lambda: validator.denied),
            ("acl_reloads", "ACL file reloads after a change", lambda: manager.reloads),
            ("acl_reload_failures", "ACL file changes that did not parse (the old ACL stayed)",
             lambda: manager.reload_failures),
        ):
            self.add_counter(f"rocketstore_{name}", doc, read)

    def _add_tls_metrics(self) -> None:
        """Connections of the broker's and the name server's ports together (both serve TLS)."""
        def servers() -> list[RemotingServer]:
            return [self.remoting] + ([self.namesrv.server] if self.namesrv is not None else [])

        for name, doc, read in (
            ("tls_connections", "Remoting connections served with TLS",
             lambda: sum(s.tls_connections for s in servers())),
            ("plain_connections", "Remoting connections served in plain text on a TLS port",
             lambda: sum(s.plain_connections for s in servers())),
            ("tls_refused_plain_connections", "Plain connections closed by tls.server.mode=enforcing",
             lambda: sum(s.refused_plain_connections for s in servers())),
            ("tls_certificate_reloads", "TLS certificate files reloaded after a change (per port)",
             lambda: sum(s.tls_certificate_reloads for s in servers())),
            ("tls_certificate_reload_failures",
             "TLS certificate file changes that did not load (the previous certificate stayed; per port)",
             lambda: sum(s.tls_certificate_reload_failures for s in servers())),
        ):
            self.add_counter(f"rocketstore_{name}", doc, read)

    def _add_transaction_metrics(self) -> None:
        metrics = self.transactional_message_service.metrics
        for name, doc, read in (
            ("transaction_half_messages", "Transactional half messages stored", lambda: metrics.half_messages),
            ("transaction_commits", "Half messages committed to their topic", lambda: metrics.commits),
            ("transaction_rollbacks", "Half messages rolled back", lambda: metrics.rollbacks),
            ("transaction_checks", "CHECK_TRANSACTION_STATE requests sent to producers", lambda: metrics.checks),
            ("transaction_discarded", "Half messages moved to TRANS_CHECK_MAX_TIME_TOPIC after the last check",
             lambda: metrics.discarded),
        ):
            self.add_counter(f"rocketstore_{name}", doc, read)

    def add_gauge(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """Publish ``read()`` as a /metrics gauge (for state a processor owns); a no-op without
        an HTTP port."""
        if self.http is not None:
            self.http.add_gauge(name, doc, read)

    def add_counter(self, name: str, doc: str, read: Callable[[], float]) -> None:
        """Publish ``read()`` (a running total) as a /metrics counter; a no-op without an HTTP port."""
        if self.http is not None:
            self.http.add_counter(name, doc, read)

    def add_metrics(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Publish the metric families ``collect()`` yields at each scrape (labelled ones a processor
        keeps); a no-op without an HTTP port."""
        if self.http is not None:
            self.http.add_metrics(collect)

    # -- config tables -------------------------------------------------------------------------
    def _load_tables(self) -> None:
        self._create_system_topics()
        for name in SYSTEM_GROUPS:
            self.subscription_group_manager.put(SubscriptionGroupConfig(group_name=name))
        self.topic_config_manager.load()
        self.subscription_group_manager.load()
        self.consumer_offset_manager.load()

    def _create_system_topics(self) -> None:
        """The topics RocketMQ's TopicConfigManager creates in its constructor."""
        cfg = self.broker_config
        rw = PERM_READ | PERM_WRITE
        put = self.topic_config_manager.put
        put(TopicConfig(RMQ_SYS_SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1))
        if cfg.auto_create_topic_enable:
            put(TopicConfig(AUTO_CREATE_TOPIC_KEY_TOPIC, read_queue_nums=cfg.default_topic_queue_nums,
                            write_queue_nums=cfg.default_topic_queue_nums, perm=PERM_INHERIT | rw))
        put(TopicConfig(RMQ_SYS_BENCHMARK_TOPIC, read_queue_nums=1024, write_queue_nums=1024))
        put(TopicConfig(cfg.broker_cluster_name, perm=PERM_INHERIT | (rw if cfg.cluster_topic_enable else 0)))
        put(TopicConfig(cfg.broker_name, read_queue_nums=1, write_queue_nums=1,
                        perm=PERM_INHERIT | (rw if cfg.broker_topic_enable else 0)))
        put(TopicConfig(RMQ_SYS_OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1))
        put(TopicConfig(RMQ_SYS_SCHEDULE_TOPIC, read_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM,
                        write_queue_nums=SCHEDULE_TOPIC_QUEUE_NUM))
        if cfg.trace_topic_enable:
            put(TopicConfig(cfg.msg_trace_topic_name, read_queue_nums=1, write_queue_nums=1))
            self._extra_system_topics.add(cfg.msg_trace_topic_name)
        reply = f"{cfg.broker_cluster_name}_{REPLY_TOPIC_POSTFIX}"
        put(TopicConfig(reply, read_queue_nums=1, write_queue_nums=1))
        self._extra_system_topics.update({cfg.broker_cluster_name, cfg.broker_name, reply})

    def is_system_topic(self, topic: str) -> bool:
        """TopicValidator.isSystemTopic, including this broker's cluster/broker-name topics."""
        return is_system_topic(topic) or topic in self._extra_system_topics

    def tables_changed(self, *managers: ConfigManager) -> None:
        """Note that tables changed; they are written soon in a worker thread (thread-safe)."""
        with self._dirty_lock:
            self._dirty.update(managers)
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._schedule_persist)
            if self.broker_outer_api is not None and self.topic_config_manager in managers:
                loop.call_soon_threadsafe(self._topics_changed.set)

    def _schedule_persist(self) -> None:
        if self._persist_task is None or self._persist_task.done():
            assert self.loop is not None
            self._persist_task = self.loop.create_task(self._persist_dirty())

    async def _persist_dirty(self) -> None:
        while True:
            with self._dirty_lock:
                dirty = list(self._dirty)
                self._dirty.clear()
            if not dirty:
                return
            for manager in dirty:
                try:
                    await asyncio.to_thread(manager.persist)
                except OSError:
                    log.exception("writing %s failed; retrying with the next change or at shutdown", manager.path)

    def _persist_all(self) -> None:
        with self._dirty_lock:
            self._dirty.clear()
        for manager in (self.consumer_offset_manager, self.topic_config_manager, self.subscription_group_manager):
            try:
                manager.persist()
            except OSError:
                log.exception("writing %s failed", manager.path)

    def topic_config_for_send(self, topic: str, default_topic: str, default_queue_nums: int,
                              sys_flag: int) -> TopicConfig | None:
        """The topic's config, auto-created from ``default_topic`` (TBW102) when that is allowed.

        RocketMQ's createTopicInSendMessageMethod: the new topic takes min(client's
        defaultTopicQueueNums, default topic's write queues) queues, the default topic's
        permissions without INHERIT and its filter type; it is created only when the default
        topic exists and has PERM_INHERIT (TBW102 never does while autoCreateTopicEnable is off).
        """
        with self._topic_lock:
            existing = self.topic_config_manager.get(topic)
            if existing is not None:
                return existing
            default = self.topic_config_manager.get(default_topic)
            if default is None:
                log.warning("cannot create topic %s: default topic %s does not exist", topic, default_topic)
                return None
            perm = default.perm
            if default_topic == AUTO_CREATE_TOPIC_KEY_TOPIC and not self.broker_config.auto_create_topic_enable:
                perm = PERM_READ | PERM_WRITE
            if not perm & PERM_INHERIT:
                log.warning("cannot create topic %s: default topic %s has no inherit permission (%d)",
                            topic, default_topic, perm)
                return None
            queue_nums = max(min(default_queue_nums, default.write_queue_nums), 0)
            created = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums,
                                  perm=perm & ~PERM_INHERIT, topic_filter_type=default.topic_filter_type,
                                  topic_sys_flag=sys_flag)
            self.topic_config_manager.put(created)
        log.info("created topic %s from %s: %s", topic, default_topic, created)
        self.tables_changed(self.topic_config_manager)
        return created

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int) -> TopicConfig:
        """The topic's config, created as given if missing (retry and DLQ topics)."""
        with self._topic_lock:
            existing = self.topic_config_manager.get(topic)
            if existing is not None:
                return existing
            created = TopicConfig(topic, read_queue_nums=queue_nums, write_queue_nums=queue_nums, perm=perm,
                                  topic_sys_flag=sys_flag)
            self.topic_config_manager.put(created)
        log.info("created topic %s", created)
        self.tables_changed(self.topic_config_manager)
        return created

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config; created with defaults when autoCreateSubscriptionGroup is on (or for
        a ``CID_RMQ_SYS_`` group), else None."""
        config = self.subscription_group_manager.get(group)
        if config is not None:
            return config
        if not (self.broker_config.auto_create_subscription_group or group.startswith(CID_RMQ_SYS_PREFIX)):
            return None
        with self._topic_lock:
            config = self.subscription_group_manager.get(group)
            if config is not None:
                return config
            config = SubscriptionGroupConfig(group_name=group)
            self.subscription_group_manager.put(config)
        log.info("auto-created subscription group %s", group)
        self.tables_changed(self.subscription_group_manager)
        return config

    # -- configuration -------------------------------------------------------------------------
    def all_config_properties(self) -> dict[str, str]:
        """Every broker and store key with its current value (GET_BROKER_CONFIG's body)."""
        props = self.broker_config.to_properties()
        props.update(self.store_config.to_properties())
        return props

    def update_config(self, props: Mapping[str, str]) -> dict[str, str]:
        """Apply broker.conf keys live, all or nothing; returns the keys whose value changed.

        Store keys go through ``StoreConfig.update``, broker keys to ``BrokerConfig``; an
        unknown key or a bad value raises ConfigError and changes nothing. Nothing is written
        back to broker.conf (RocketMQ does; see broker_config.py). Keys read only at start-up
        (ports, paths) are stored but take effect at the next start, as in RocketMQ. A key set to a
        value this broker does not implement (unimplemented_config.py) raises ConfigError saying
        what the broker does instead: RocketMQ would accept it, but answering success would be a
        success that does something else.
        """
        store_part, broker_part, unknown = split_properties(props)
        if unknown:
            key, raw = next(iter(unknown.items()))
            raise ConfigError(key, raw, "not a broker or message store config key")
        broker_values = self.broker_config.parse_update(broker_part)
        asked = BrokerConfig.from_properties(broker_part)[0].to_properties()
        asked.update(StoreConfig.from_properties(store_part)[0].to_properties())
        refused = unimplemented_settings({key: asked[key] for key in props if key in asked}, _default_properties())
        if refused:
            raise ConfigError(refused[0].key, props[refused[0].key], f"not implemented: {refused[0].instead}")
        changed = self.store_config.update(store_part)  # parses everything before assigning anything
        changed.update(self.broker_config.apply(broker_values))
        if changed:
            self.config_version = self.config_version.next()
            log.info("configuration updated: %s", changed)
        if "brokerPermission" in props and self.broker_outer_api is not None and self.loop is not None:
            # RocketMQ re-registers at once, with a new data version, so routes carry the new permission
            self.topic_config_manager.next_version()
            task = self.loop.create_task(self._register_guarded(check_order_config=False, oneway=False, force=True))
            self._one_shot_tasks.add(task)
            task.add_done_callback(self._one_shot_tasks.discard)
        return changed

    # -- periodic tasks ------------------------------------------------------------------------
    async def _flush_offsets_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self.broker_config.flush_consumer_offset_interval, 100) / 1000)
            try:
                await asyncio.to_thread(self.consumer_offset_manager.persist)
            except OSError:
                log.exception("writing consumer offsets failed; retrying at the next interval")

    async def _stats_sampling_loop(self) -> None:
        """StoreStatsService's one-second snapshots (the TPS of runtime info) and BrokerStats'
        record at local midnight."""
        stats = self.store.stats
        while True:
            stats.sample(now_ms())
            self.broker_stats.maybe_record(datetime.date.today(), stats.put_message_times_total,
                                           stats.get_message_transferred_msg_count)
            await asyncio.sleep(SAMPLING_INTERVAL_S)

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.housekeeping_interval_s)
            self.scan_expired_clients()

    async def _broker_stats_manager_sampling_loop(self) -> None:
        """BrokerStatsManager's ten-second snapshots (the per-minute rates /metrics publishes)."""
        while True:
            await asyncio.sleep(SAMPLE_INTERVAL_S)
            self.broker_stats_manager.sample(time.monotonic())

    def scan_expired_clients(self) -> None:
        """Drop clients silent past the channel expiry and close their connections."""
        timeout = self.channel_expired_timeout_ms
        for conn in {*self.consumer_manager.scan_expired(timeout), *self.producer_manager.scan_expired(timeout)}:
            conn.close()

    def _on_disconnect(self, conn: Connection) -> None:
        self.consumer_manager.connection_closed(conn)
        self.producer_manager.connection_closed(conn)

    # -- registration with the name servers of namesrvAddr -------------------------------------
    async def _start_registration(self, namesrv_addr: str, *, guarded: bool = False) -> None:
        """First registration (forced, awaited: clients may find the broker once start returns;
        ``guarded``: a failure is logged, not raised), then the registration task."""
        api = self.broker_outer_api = BrokerOuterAPI(namesrv_addr)
        self.add_counter("rocketstore_broker_registrations", "REGISTER_BROKER requests sent to namesrvAddr that "
                         "succeeded", lambda: api.registrations)
        self.add_counter("rocketstore_broker_registration_failures", "REGISTER_BROKER requests to namesrvAddr that "
                         "failed or were not answered in time", lambda: api.registration_failures)
        if guarded:
            await self._register_guarded(check_order_config=True, oneway=False, force=True)
        else:
            await self.register_broker_all(check_order_config=True, oneway=False, force=True)
        assert self.loop is not None
        self._tasks.append(self.loop.create_task(self._register_loop(), name="register-broker"))
        self._tasks.append(self.loop.create_task(self._refresh_namesrv_addr_loop(), name="update-namesrv-addr"))

    async def _refresh_namesrv_addr_loop(self) -> None:
        await asyncio.sleep(NAMESRV_ADDR_REFRESH_DELAY_S)
        while True:
            api = self.broker_outer_api
            addr = self.broker_config.namesrv_addr
            if api is not None and addr:
                try:
                    api.update_name_server_address_list(addr)
                except ValueError as exc:
                    log.warning("namesrvAddr=%s is not usable, keeping %s: %s", addr, ";".join(api.addrs), exc)
            await asyncio.sleep(NAMESRV_ADDR_REFRESH_INTERVAL_S)

    async def _address_server_loop(self) -> None:
        """fetchNamesrvAddrByAddressServer: the address server's list, 10 s after start and every
        2 min (BrokerOuterAPI.fetchNameServerAddr); registration starts with the first list."""
        cfg = self.broker_config
        url = ws_addr(cfg.namesrv_domain, cfg.namesrv_domain_subgroup)
        log.info("name server addresses from the address server %s", url)
        await asyncio.sleep(NAMESRV_ADDR_REFRESH_DELAY_S)
        while True:
            fetched = await asyncio.to_thread(fetch_ns_addr, url)
            try:
                if fetched:
                    split_namesrv_addr(fetched)  # a malformed list is refused before anything uses it
            except ValueError as exc:
                log.warning("address server %s answered an unusable list %r: %s", url, fetched, exc)
            else:
                api = self.broker_outer_api
                if fetched and api is None:
                    log.info("name server address from %s: %s", url, fetched)
                    await self._start_registration(fetched, guarded=True)
                elif fetched and api is not None:
                    api.update_name_server_address_list(fetched)
            await asyncio.sleep(NAMESRV_ADDR_REFRESH_INTERVAL_S)

    async def _register_loop(self) -> None:
        """Periodic registrations, and a one-way registration soon after each topic-table change."""
        next_periodic = time.monotonic() + REGISTER_INITIAL_DELAY_S
        while True:
            try:
                await asyncio.wait_for(self._topics_changed.wait(), max(next_periodic - time.monotonic(), 0))
            except TimeoutError:
                period = min(max(self.broker_config.register_name_server_period, REGISTER_PERIOD_MIN_MS),
                             REGISTER_PERIOD_MAX_MS)
                next_periodic = time.monotonic() + period / 1000
                await self._register_guarded(check_order_config=True, oneway=False,
                                             force=self.broker_config.force_register)
            else:
                self._topics_changed.clear()
                await self._register_guarded(check_order_config=False, oneway=True, force=True)

    async def _register_guarded(self, *, check_order_config: bool, oneway: bool, force: bool) -> None:
        try:
            await self.register_broker_all(check_order_config=check_order_config, oneway=oneway, force=force)
        except Exception:
            log.exception("registering with the name servers failed; trying again at the next period")

    async def register_broker_all(self, *, check_order_config: bool, oneway: bool, force: bool) -> None:
        """BrokerController.registerBrokerAll: this broker's topic table to every name server of
        namesrvAddr; with ``check_order_config`` the first answer's order-topic table is applied."""
        api = self.broker_outer_api
        assert api is not None
        cfg = self.broker_config
        wrapper = self.topic_config_wrapper()
        timeout_s = max(cfg.register_broker_timeout_mills, 1) / 1000
        if not force and not await api.need_register(self._identity(), wrapper.data_version, timeout_s):
            return
        results = await api.register_broker_all(self._identity(), NO_HA_SERVER_ADDR, wrapper, oneway=oneway,
                                                timeout_s=timeout_s, compressed=cfg.compressed_register)
        if check_order_config and results and results[0].kv_table is not None:
            changed = order_topic_changes(self.topic_config_manager.table(), set(results[0].kv_table))
            for config in changed:
                log.info("update order topic config, topic=%s, order=%s", config.topic_name, config.order)
                self.topic_config_manager.put(config)
            if changed:
                self.tables_changed(self.topic_config_manager)

    def topic_config_wrapper(self) -> TopicConfigSerializeWrapper:
        """The topic table as registered: a broker without read or write permission publishes that
        permission for every topic (as a fresh TopicConfig of the topic's queue numbers)."""
        manager = self.topic_config_manager
        version, table = manager.data_version, manager.table()
        broker_perm = self.broker_config.broker_permission
        if not broker_perm & PERM_READ or not broker_perm & PERM_WRITE:
            table = {name: TopicConfig(name, read_queue_nums=c.read_queue_nums, write_queue_nums=c.write_queue_nums,
                                       perm=broker_perm) for name, c in table.items()}
        return TopicConfigSerializeWrapper(table, version)

    def _identity(self) -> BrokerIdentity:
        cfg = self.broker_config
        return BrokerIdentity(cfg.broker_cluster_name, self.broker_addr, cfg.broker_name, cfg.broker_id)

    # -- dispatch notifications ----------------------------------------------------------------
    def _on_message_arriving(self, topic: str, queue_id: int, next_offset: int, count: int) -> None:
        """Called in the dispatch thread; hands the news to the loop (long polling wakes there).

        Arrivals are collected per queue and handed over in one loop callback: a callback per
        dispatch pass, not per message, so the loop's wake-up pipe is written at most once per
        pass. The callback is scheduled after the ConsumeQueue entries are written, so a pull
        held on the loop before it runs is still woken.
        """
        loop = self.loop
        if loop is None or not self.message_arriving_listeners or loop.is_closed():
            return
        key = (topic, queue_id)
        with self._arrived_lock:
            previous = self._arrived.get(key)
            self._arrived[key] = (next_offset, count if previous is None else previous[1] + count)
            if self._arrivals_scheduled:
                return
            self._arrivals_scheduled = True
        loop.call_soon_threadsafe(self._notify_arriving)

    def _notify_arriving(self) -> None:
        with self._arrived_lock:
            arrived, self._arrived = self._arrived, {}
            self._arrivals_scheduled = False
        for (topic, queue_id), (max_offset, count) in arrived.items():
            for listener in self.message_arriving_listeners:
                listener(topic, queue_id, max_offset, count)

    @property
    def broker_addr(self) -> str:
        """host:port clients connect to, as published in routes."""
        return f"{self.store_host.host}:{self.remoting.port}"


def order_topic_changes(table: Mapping[str, TopicConfig], order_topics: set[str]) -> list[TopicConfig]:
    """TopicConfigManager.updateOrderTopicConfig: the topics whose ``order`` flag must change so that
    exactly the topics a name server lists as ordered (its ORDER_TOPIC_CONFIG KV table) are."""
    return [dataclasses.replace(config, order=name in order_topics) for name, config in table.items()
            if config.order != (name in order_topics)]


def _default_properties() -> dict[str, str]:
    """Every broker and store key at RocketMQ's default, as text (what "not set" means)."""
    defaults = BrokerConfig().to_properties()
    defaults.update(StoreConfig().to_properties())
    return defaults


def _local_ip() -> str:
    """The address other hosts reach us on when brokerIP1 is not set: what our host name resolves
    to (a pod's own IP in Kubernetes), else loopback."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
