"""BrokerController: one broker process — the store, its config tables and the request processors.

    start()  start the HTTP side port (health answers during recovery), load the config tables,
             open and recover the store and start it (in a thread: recovery can take seconds),
             register processors, listen (remoting, then the name-server role), start the
             periodic tasks, report ready, then register with the name servers
    stop()   run the shutdown listeners (long polling lets go), stop the name-server role and
             remoting (stop accepting, let in-flight requests finish within a grace period),
             persist offsets and tables, shut the store down (flush, checkpoint, remove ``abort``)

The controller builds the broker's parts and starts and stops them in the order above; each part
does one job, in a module named after its RocketMQ counterpart:

    topic_config_manager.py        the topic table and its rules (system topics, auto-creation,
                                   order topics, the table as registered)
    subscription_group_manager.py  the consumer groups and their auto-creation
    config_persist_service.py      when those tables and the consumer offsets are read and written
    configuration.py               the live configuration (GET/UPDATE_BROKER_CONFIG)
    register_broker_service.py     registration with the name servers of ``namesrvAddr``: it starts
                                   once the broker serves, before start() returns, and stop()
                                   unregisters after the listeners close; a slave learns its
                                   master's HA and remoting addresses from the answers
    slave_synchronize.py           a SLAVE's periodic copy of its master's tables

What stays here is the wiring, the periodic housekeeping tasks, the /metrics registration the
parts and processors call, and the hand-off of dispatch news (the store's thread) to the loop:
the controller creates the store with that callback and owns the loop it hands over to.

Processors live in ``rocketstore.broker.processor``, one RequestProcessor class per module, whose
``handlers()`` :meth:`BrokerController.register_processors` registers by request code. They, the
name-server role and the HTTP side port see the controller as a ``BrokerContext``
(broker_context.py): the attributes and methods documented here, nothing of this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Final

from prometheus_client.core import Metric

from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.acl.plain_permission_manager import acl_files, default_acl_file, read_yaml
from rocketstore.broker.acl.remote_address_strategy import AclConfigError
from rocketstore.broker.auth.acl import AuthError
from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.auth_migrator import migrate
from rocketstore.broker.auth.auth_pipeline import AuthPipeline
from rocketstore.broker.broker_config import BrokerConfig, apply_broker_startup_rules
from rocketstore.broker.broker_context import MessageArrivingListener, RequestProcessor
from rocketstore.broker.broker_outer_api import RegisterBrokerResult
from rocketstore.broker.broker_stats import BrokerStats
from rocketstore.broker.client_manager import CHANNEL_EXPIRED_TIMEOUT_MS, ConsumerManager, ProducerManager
from rocketstore.broker.config_persist_service import ConfigPersistService
from rocketstore.broker.configuration import Configuration
from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterManager
from rocketstore.broker.grpc_v2.server import GrpcServer
from rocketstore.broker.ha_metrics import ha_families
from rocketstore.broker.http_server import HttpServer
from rocketstore.broker.master_elector import MasterElector
from rocketstore.broker.namesrv import NameServer
from rocketstore.broker.processor.acl_config import AclConfigProcessor
from rocketstore.broker.processor.admin import AdminBrokerProcessor
from rocketstore.broker.processor.auth_admin import AuthAdminProcessor
from rocketstore.broker.processor.client import ClientManageProcessor
from rocketstore.broker.processor.consumer_offset import ConsumerOffsetProcessor
from rocketstore.broker.processor.end_transaction import EndTransactionProcessor
from rocketstore.broker.processor.lock import LockBatchProcessor
from rocketstore.broker.processor.pull import PullMessageProcessor
from rocketstore.broker.processor.query import QueryMessageProcessor
from rocketstore.broker.processor.reply import ReplyMessageProcessor
from rocketstore.broker.processor.send import PLAIN_SEND_CODES, SendMessageProcessor
from rocketstore.broker.processor.send_back import ConsumerSendMsgBackProcessor
from rocketstore.broker.register_broker_service import RegisterBrokerService
from rocketstore.broker.remoting_front import make_front
from rocketstore.broker.replicas_manager import ReplicasManager
from rocketstore.broker.server import Connection, RemotingServer, loop_name, serve_by_code
from rocketstore.broker.slave_synchronize import SlaveSynchronize
from rocketstore.broker.store_waits import StoreWaits
from rocketstore.broker.subscription_group_manager import SubscriptionGroupManager
from rocketstore.broker.tls_system_config import broker_tls_settings
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.broker.transaction.bridge import TransactionalMessageBridge
from rocketstore.broker.transaction.check_listener import TransactionalMessageCheckListener
from rocketstore.broker.transaction.check_service import run_check_service
from rocketstore.broker.transaction.service import TransactionalMessageService
from rocketstore.common import native
from rocketstore.common.clock import now_ms
from rocketstore.common.message import HostAddress
from rocketstore.common.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from rocketstore.remoting.body import BrokerData
from rocketstore.remoting.codes import RequestCode
from rocketstore.store.broker_stats_manager import SAMPLE_INTERVAL_S, BrokerStatsManager
from rocketstore.store.config import BrokerRole, ConfigError, StoreConfig
from rocketstore.store.config_manager import ConfigManager, ConsumerOffsetManager
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.stats import SAMPLING_INTERVAL_S

log = logging.getLogger(__name__)

#: How often expired client channels are scanned for (RocketMQ's ClientHousekeepingService).
HOUSEKEEPING_INTERVAL_S: Final = 10.0


class BrokerController:
    """Owns every broker-wide object; processors receive it as their ``BrokerContext``.

    Attributes processors may use:
      ``broker_config`` / ``store_config``   the parsed broker.conf (read at use: live-updatable)
      ``store``                               the DefaultMessageStore (blocking calls)
      ``store_host``                          HostAddress stamped as storeHost on every put (its
                                              port is the real listening port once started)
      ``topic_config_manager``                topics.json and the topic rules (topic_config_manager.py):
                                              ``topic_config_for_send``, ``create_topic_in_send_back``,
                                              ``is_system_topic``
      ``subscription_group_manager``          the groups (``find_subscription_group_config``)
      ``consumer_offset_manager``             committed consume offsets
      ``slave_synchronize``                   a SLAVE's copy of its master's tables, and the offsets
                                              committed to it that go back to the master
                                              (slave_synchronize.py)
      ``config_persist_service``              ``tables_changed(manager)`` after changing a table
      ``configuration``                       ``all_config_properties()``, ``update(props)``, its
                                              ``data_version`` (configuration.py)
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

      ``start_time_ms``                       when serving began
      ``ready`` / ``stopping``, ``broker_addr``, ``master_addr`` (a slave's master), ``ha_server_addr``

    Methods processors may use: :meth:`add_gauge`, :meth:`add_counter`, :meth:`add_metrics`.
    """

    def __init__(self, broker_config: BrokerConfig, store_config: StoreConfig,
                 auth_config: AuthConfig | None = None, elector: MasterElector | None = None) -> None:
        apply_broker_startup_rules(broker_config, store_config)  # ConfigError for a slave without a brokerId
        self.broker_config = broker_config
        self.store_config = store_config
        #: RocketMQ 5.3's authentication and authorization (auth/), read at start only
        self.auth_config = auth_config or AuthConfig()
        if self.auth_config.enabled and broker_config.acl_enable:
            raise ConfigError("aclEnable", "true", "refused: the plain ACL (1.0) and RocketMQ 5 authentication/"
                              "authorization (authenticationEnabled, authorizationEnabled) are exclusive; "
                              "RocketMQ 5.3 has only the latter")
        self.configuration = Configuration(broker_config, store_config)
        self.loop: asyncio.AbstractEventLoop | None = None
        # -- config tables: the managers report their changes to the persist service
        self.config_persist_service = ConfigPersistService(lambda: self.loop)
        config_dir = store_config.config_dir()
        changed = self.config_persist_service.tables_changed
        self.topic_config_manager = TopicConfigManager(config_dir, broker_config, changed)
        self.subscription_group_manager = SubscriptionGroupManager(config_dir, broker_config, changed)
        self.consumer_offset_manager = ConsumerOffsetManager(config_dir)
        #: read at start, written at shutdown (independent files: the order does not matter)
        self._config_tables: tuple[ConfigManager, ...] = (
            self.topic_config_manager, self.subscription_group_manager, self.consumer_offset_manager)
        self.store_host = HostAddress(broker_config.broker_ip1 or _local_ip(), broker_config.listen_port)
        self.remoting = RemotingServer(broker_config.listen_host, broker_config.listen_port,
                                       tls=broker_tls_settings(broker_config), limits=broker_config,
                                       front=make_front if broker_config.remoting_native_front else None)
        #: the ACL check of every request, when aclEnable is set (acl/plain_access_validator.py)
        self.access_validator: PlainAccessValidator | None = None
        #: users and ACLs (auth/auth_metadata_manager.py), served to mqadmin whether or not auth is on
        self.auth_metadata_manager = AuthMetadataManager(config_dir)
        #: the authentication/authorization check of every request (remoting and gRPC), when either switch is on
        self.auth_pipeline: AuthPipeline | None = None
        self.message_arriving_listeners: list[MessageArrivingListener] = []
        # dispatch-thread arrivals not yet handed to the loop: (topic, queue id) -> (max offset, count)
        self._arrived: dict[tuple[str, int], tuple[int, int]] = {}
        self._arrived_lock = threading.Lock()
        self._arrivals_scheduled = False
        self.shutdown_listeners: list[Callable[[], None]] = []
        self.store = DefaultMessageStore(store_config, on_message_arriving=self._on_message_arriving)
        #: the puts answered once durable or on a slave (SYNC_FLUSH, SYNC_MASTER)
        self.store_waits = StoreWaits(self.store, store_config)
        self.store_waits.on_settled = self.remoting.flush_answers
        self.consumer_manager = ConsumerManager(lambda: self.broker_config.notify_consumer_ids_changed_enable)
        self.consumer_filter_manager = ConsumerFilterManager(self.consumer_manager)
        self.producer_manager = ProducerManager()
        self.broker_stats_manager = BrokerStatsManager(time.monotonic(), broker_config.broker_cluster_name)
        bridge = TransactionalMessageBridge(self.store, self.consumer_offset_manager,
                                            self.topic_config_manager.create_topic_in_send_back,
                                            lambda: self.store_host)
        self.transactional_message_service = TransactionalMessageService(
            bridge, lambda: self.store_config.file_reserved_time)
        self._transaction_check_listener = TransactionalMessageCheckListener(
            self.transactional_message_service, self.producer_manager, lambda: self.loop)
        self.remoting.on_disconnect.append(self._on_disconnect)
        self.namesrv: NameServer | None = None
        # -- registration with the name servers of namesrvAddr
        self.register_broker_service = RegisterBrokerService(
            broker_config, self.topic_config_manager, lambda: self.broker_addr, self.add_counter,
            ha_server_addr=lambda: self.ha_server_addr, on_registered=self._on_registered)
        #: a slave's copy of its master's tables (slave_synchronize.py); runs on a SLAVE only
        self.slave_synchronize = SlaveSynchronize(
            broker_config, self.topic_config_manager, self.subscription_group_manager,
            self.consumer_offset_manager, self.store.schedule_message_service.offsets, self.config_persist_service,
            lambda: self.broker_addr)
        #: RocketMQ's updateMasterHAServerAddrPeriodically: a slave without haMasterAddress follows
        #: the haServerAddr of the name server's registration answers
        self._ha_master_from_namesrv = (store_config.broker_role is BrokerRole.SLAVE
                                        and len(store_config.ha_master_address or "") < 6)
        #: controller mode's role changes (replicas_manager.py); None without enableControllerMode.
        #: ``elector`` is the group's source of truth (None: roles come by NOTIFY_BROKER_ROLE_CHANGED)
        self.replicas_manager: ReplicasManager | None = None
        if broker_config.enable_controller_mode:
            self._ha_master_from_namesrv = False
            self.store.use_controller_mode(broker_config.broker_id)
            self.replicas_manager = ReplicasManager(broker_config, self.store, elector,
                                                    register=self.register_broker_service.role_changed,
                                                    on_role_changed=self._on_role_changed)
        elif elector is not None:
            raise ConfigError("enableControllerMode", "false", "a master elector needs enableControllerMode=true")
        self.config_persist_service.change_listeners.append(self.register_broker_service.topics_changed)
        self.configuration.update_listeners.append(self.register_broker_service.config_updated)
        #: the gRPC v2 endpoint of RocketMQ 5.x clients (grpcListenPort; None when it is 0)
        self.grpc: GrpcServer | None = None
        if broker_config.grpc_listen_port > 0:
            self.grpc = GrpcServer(self, broker_config.listen_host, broker_config.grpc_listen_port)
        self.http: HttpServer | None = None
        if broker_config.http_listen_port > 0:  # before start: processors add gauges when registered
            self.http = HttpServer(self, broker_config.listen_host, broker_config.http_listen_port)
        self.channel_expired_timeout_ms = CHANNEL_EXPIRED_TIMEOUT_MS
        self.housekeeping_interval_s = HOUSEKEEPING_INTERVAL_S
        self.start_time_ms = now_ms()
        #: True once the store is recovered, dispatch has caught up and the listeners are open
        self.ready = False
        self.stopping = False
        self._stopped = False
        self._tasks: list[asyncio.Task[None]] = []
        #: the tasks of the current role: the transaction check (master), SlaveSynchronize (slave)
        self._role_tasks: list[asyncio.Task[None]] = []
        self.broker_stats = BrokerStats()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Bring the broker up; raises (with everything it opened closed again) if it cannot."""
        self.loop = asyncio.get_running_loop()
        # what decides the CPU cost of every message, so that a log (and /metrics) says it
        log.info("hot path: %s (%s); event loop: %s", native.IMPLEMENTATION, native.REASON, loop_name(self.loop))
        # broker.conf keys accepted but not implemented: said once, each with what happens instead
        for warning in self.configuration.unimplemented_warnings():
            log.warning("%s", warning)
        try:
            if self.http is not None:
                await self.http.start()
            await asyncio.to_thread(self.config_persist_service.load, self._config_tables)
            await asyncio.to_thread(self.store.load)
            self.store.ha_service.attach_loop(self.loop)
            await asyncio.to_thread(self.store.start)
            self.register_processors()
            await self._start_acl()
            await self._start_auth()
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
        self._tasks.append(self.loop.create_task(self.config_persist_service.flush_offsets_loop(
            self.consumer_offset_manager, lambda: self.broker_config.flush_consumer_offset_interval),
            name="flush-consumer-offsets"))
        self._tasks.append(self.loop.create_task(self._housekeeping_loop(), name="client-housekeeping"))
        self._tasks.append(self.loop.create_task(self._stats_sampling_loop(), name="stats-sampling"))
        if self.store_config.broker_role is not BrokerRole.SLAVE:  # RocketMQ checks on the master only
            self._role_tasks.append(self.loop.create_task(
                run_check_service(self.broker_config, self.transactional_message_service,
                                  self._transaction_check_listener), name="transaction-check"))
        self._tasks.append(self.loop.create_task(self._broker_stats_manager_sampling_loop(),
                                                 name="broker-stats-manager-sampling"))
        if self.store_config.broker_role is BrokerRole.SLAVE:
            self._role_tasks.append(self.loop.create_task(self.slave_synchronize.run(), name="slave-synchronize"))
        self.start_time_ms = now_ms()
        self.broker_config.start_accept_send_request_time_stamp = self.start_time_ms
        self.ready = True
        await self.register_broker_service.start()
        if self.replicas_manager is not None:
            await self.replicas_manager.start()
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
        if self.replicas_manager is not None:  # a master hands its mastership over first
            await self.replicas_manager.stop()
        # then its clients hear at once that it goes: answered, never left to their send timeout
        await self.remoting.go_away()
        for listener in self.shutdown_listeners:
            try:
                listener()
            except Exception:
                log.exception("shutdown listener failed")
        tasks = self._tasks + self._role_tasks
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._role_tasks.clear()
        await self.register_broker_service.stop_registering()
        # routes stop naming this broker before the grace waits, not after them
        await self.register_broker_service.unregister()
        # The embedded name server and the gRPC port go before the grace waits: a client's route
        # poll on a name server connection it keeps to this pod (through a Service) would be
        # answered from this broker's own view, naming it as its group's master until it exits,
        # and a 5.x client's channel would stay here the same way. Closed, both reconnect, through
        # the Service, to a pod that stays, whose routes name the group's new master.
        if self.namesrv is not None:
            await self.namesrv.stop(grace_s)
        if self.grpc is not None:
            await self.grpc.stop(grace_s)
        if self.broker_config.enable_shutdown_gracefully and self.broker_config.shutdown_wait_time_seconds > 0:
            # NettyServerConfig's graceful shutdown: clients' routes move off this broker (their
            # next route poll) while it still answers, rather than after its address is gone
            log.info("broker %s: answering SERVICE_NOT_AVAILABLE for %d s before it closes "
                     "(shutdownWaitTimeSeconds)", self.broker_config.broker_name,
                     self.broker_config.shutdown_wait_time_seconds)
            await asyncio.sleep(self.broker_config.shutdown_wait_time_seconds)
        await self.remoting.stop(grace_s)
        await self.config_persist_service.persist_all(self._config_tables)
        await asyncio.to_thread(self.store.shutdown)
        if self.http is not None:
            await self.http.stop()
        log.info("broker %s stopped", self.broker_config.broker_name)

    def register_processors(self) -> None:
        """Build every request processor and register its handlers by request code."""
        processors: list[RequestProcessor] = [
            ClientManageProcessor(self),
            AdminBrokerProcessor(self),
            (send := SendMessageProcessor(self)),
            (pull := PullMessageProcessor(self)),
            ConsumerOffsetProcessor(self),
            QueryMessageProcessor(self),
            ConsumerSendMsgBackProcessor(self),
            EndTransactionProcessor(self),
            LockBatchProcessor(),
            ReplyMessageProcessor(self),
            AclConfigProcessor(self, lambda: self.access_validator),
            AuthAdminProcessor(self.auth_metadata_manager),
        ]
        for processor in processors:
            for code, handler in processor.handlers().items():
                self.remoting.register(code, handler)
        if native.NATIVE is not None:
            # the plain sends of one read share one put (SendMessageProcessor.handle_group); the
            # plain sends or the pulls at its head are served before becoming commands
            # (SendMessageProcessor.serve_plain_frames, PullMessageProcessor.serve_pull_frames)
            self.remoting.register_group(PLAIN_SEND_CODES, send.handle_group)
            self.remoting.serve_frames = serve_by_code(
                {int(RequestCode.SEND_MESSAGE_V2): send.serve_plain_frames,
                 int(RequestCode.PULL_MESSAGE): pull.serve_pull_frames}, native.NATIVE.leading_json_code)
        self._add_transaction_metrics()
        self._add_connection_limit_metrics()
        ha = self.store.ha_service
        self.add_metrics(lambda: ha_families(self.store_config.broker_role, ha.slaves(), ha.client_state()))
        sync = self.slave_synchronize
        self.add_counter("rocketstore_slave_synchronize_passes", "SlaveSynchronize passes over the master's tables "
                         "(a slave's, every 10 s while its master is known)", lambda: sync.syncs)
        self.add_counter("rocketstore_slave_synchronize_failures", "SlaveSynchronize requests to the master that "
                         "failed", lambda: sync.failures)
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

    async def _start_auth(self) -> None:
        """Load the users and ACLs (an unreadable file stops the start), migrate the plain ACL's
        accounts when asked; with either switch on, create the configured first users and check
        every request (AuthPipeline)."""
        manager = self.auth_metadata_manager
        await asyncio.to_thread(manager.load)
        config = self.auth_config
        if config.migrate_auth_from_v1_enabled:  # as Apache's BrokerController, whether or not auth is on
            home = Path(self.broker_config.rocketmq_home or self.store_config.store_path_root_dir)
            files = acl_files(home, default_acl_file(home, self.broker_config.acl_plain_file))
            try:
                documents = [(str(path), await asyncio.to_thread(read_yaml, path)) for path in files]
            except AclConfigError as exc:
                raise ConfigError("migrateAuthFromV1Enabled", "true", str(exc)) from exc
            migrated = await asyncio.to_thread(migrate, manager, documents)
            log.info("migrateAuthFromV1Enabled: %d plain ACL accounts made users (%s)", migrated,
                     ", ".join(str(path) for path in files) or "no ACL file")
        if not config.enabled:
            return
        try:
            await asyncio.to_thread(manager.init_users, config.init_authentication_user,
                                    config.inner_client_authentication_credentials)
        except AuthError as exc:
            raise ConfigError("initAuthenticationUser", "***", str(exc)) from exc
        pipeline = AuthPipeline(config, manager, self.broker_config.broker_cluster_name)
        self.auth_pipeline = pipeline
        self.remoting.before_request = pipeline.check
        log.info("RocketMQ 5 auth on (authentication %s, authorization %s): %d users, %d ACLs",
                 config.authentication_enabled, config.authorization_enabled,
                 len(manager.list_users(None)), len(manager.list_acls(None, None)))
        for name, doc, read in (
            ("auth_allowed_requests", "Requests authentication and authorization let through",
             lambda: pipeline.allowed),
            ("auth_denied_requests", "Requests authentication or authorization refused", lambda: pipeline.denied),
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

    def _add_connection_limit_metrics(self) -> None:
        """Connections the remoting limits closed (server.py), the broker's and the name server's ports together."""
        def servers() -> list[RemotingServer]:
            return [self.remoting] + ([self.namesrv.server] if self.namesrv is not None else [])

        self.add_counter("rocketstore_remoting_refused_connections",
                         "Remoting connections closed as they arrived: remotingMaxConnections were open",
                         lambda: sum(s.refused_connections for s in servers()))
        self.add_counter("rocketstore_remoting_idle_closed_connections",
                         "Remoting connections closed after serverChannelMaxIdleTimeSeconds without I/O",
                         lambda: sum(s.idle_closed_connections for s in servers()))

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
        self.add_gauge("rocketstore_transaction_half_messages_pending",
                       "Half messages the transaction check has not found resolved yet (on this broker only)",
                       self._half_pending)

    def _half_pending(self) -> int:
        """:meth:`TransactionalMessageBridge.half_pending` over the half topic's queues: those the
        check walks, or queue 0, where every half message is put, before the first check pass
        has created the topic's config."""
        config = self.topic_config_manager.get(RMQ_SYS_TRANS_HALF_TOPIC)
        return self.transactional_message_service.bridge.half_pending(
            range(1 if config is None else config.read_queue_nums))

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

    # -- periodic tasks ------------------------------------------------------------------------
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

    # -- replication ---------------------------------------------------------------------------
    def _on_registered(self, result: RegisterBrokerResult) -> None:
        """doRegisterBrokerAll's use of the answer: a slave learns where its master is (in
        controller mode from its role assignment; the answer only corrects the HA address)."""
        if self.replicas_manager is not None:
            self.replicas_manager.registered(result.master_addr, result.ha_server_addr)
            return
        if self._ha_master_from_namesrv and result.ha_server_addr:
            self.store.update_ha_master_address(result.ha_server_addr)
        self.slave_synchronize.set_master_addr(result.master_addr)

    def _on_role_changed(self, master: bool, master_addr: str | None) -> None:
        """Controller mode (changeSpecialServiceStatus, handleSlaveSynchronize): a master checks
        transactions; a slave copies the tables of ``master_addr`` (SlaveSynchronize keeps running
        on every role of a controller-mode broker, idle while it knows no master)."""
        assert self.loop is not None
        self.slave_synchronize.set_master_addr(master_addr)
        running = [task for task in self._role_tasks if task.get_name() == "transaction-check" and not task.done()]
        if master and not running:
            self._role_tasks.append(self.loop.create_task(
                run_check_service(self.broker_config, self.transactional_message_service,
                                  self._transaction_check_listener), name="transaction-check"))
        elif not master:
            for task in running:
                task.cancel()
                self._role_tasks.remove(task)

    @property
    def ha_server_addr(self) -> str:
        """brokerIP2:haListenPort, the haServerAddr registered (slaves of this broker connect there):
        the port the store's HA service really listens on once started."""
        port = self.store.ha_service.listen_port or self.store_config.ha_listen_port
        return f"{self.broker_config.broker_ip2}:{port}"

    @property
    def master_addr(self) -> str | None:
        """A slave's master (remoting address) as the name server last named it; None on a master."""
        return self.slave_synchronize.master_addr

    @property
    def broker_addr(self) -> str:
        """host:port clients connect to, as published in routes."""
        return f"{self.store_host.host}:{self.remoting.port}"

    def registered_groups(self) -> Mapping[str, BrokerData]:
        return self.namesrv.routes.broker_addr_table if self.namesrv is not None else {}

    def write_perm_wiped(self) -> Collection[str]:
        return self.namesrv.routes.write_perm_wiped if self.namesrv is not None else frozenset()


def _local_ip() -> str:
    """The address other hosts reach us on when brokerIP1 is not set: what our host name resolves
    to (a pod's own IP in Kubernetes), else loopback."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
