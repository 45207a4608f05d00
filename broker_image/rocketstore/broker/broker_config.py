"""Broker configuration: RocketMQ 4.9.8's ``BrokerConfig`` as a dataclass, plus RocketStore's own keys.

One broker.conf configures the whole process, as in RocketMQ: :func:`load_config` hands the keys
:class:`store.config.StoreConfig` knows to it and every other key to :class:`BrokerConfig`. Keys
neither knows (Netty tuning such as ``serverWorkerThreads``, keys of newer RocketMQ versions) are
logged once and ignored, which is what RocketMQ does with them, except security keys (RocketMQ 5's
authentication and authorization, TLS on the broker's own connections): one of those set stops
the start with an error naming it, since ignoring it would leave the broker open
(:mod:`rocketstore.broker.unimplemented_config`). Values are parsed by the same
converters as the store's half (``store.config.config_converters``): Java int/long ranges, Java
booleans, and an error naming the key for a value RocketMQ would silently drop.

Every RocketMQ 4.9.8 ``BrokerConfig`` field is here, with its default and its key spelled the way
RocketMQ's setters spell it (``brokerIP1``, ``namesrvAddr``...), so ``GET_BROKER_CONFIG`` prints the
keys an operator knows. Many of them (thread pool sizes, commercial counters, HA) have no
effect in RocketStore: the broker is one asyncio loop plus the store's threads, with no
replication. :mod:`rocketstore.broker.unimplemented_config` lists those keys; one set away from
its default is named in a warning at start and refused by a live update. ``storeReplyMessageEnable``
(default true) decides whether replies (SEND_REPLY_MESSAGE) are also stored in the reply topic.
The transaction keys take effect: ``rejectTransactionMessage``, ``transactionTimeOut``,
``transactionCheckMax`` and ``transactionCheckInterval`` (see ``rocketstore.broker.transaction``).

``listenPort`` belongs to RocketMQ's ``NettyServerConfig``; the broker's startup sets it to 10911,
which is its default here. So does ``serverChannelMaxIdleTimeSeconds`` (default 120): a remoting
connection (broker or name-server port) that neither read nor wrote for that long, and has no
request in progress (a long-polling pull, say), is closed; 0 or less keeps idle connections.
``enableShutdownGracefully`` (default false) and ``shutdownWaitTimeSeconds`` (default 30) are
NettyServerConfig's too: on a stop, once this broker has handed its mastership over (if it had one),
stopped taking connections, started answering every request SERVICE_NOT_AVAILABLE and unregistered
from its name servers, it waits that long before it closes its connections and exits, so that
clients' routes move to other brokers while this one still answers (a client whose route names a
broker that is gone, its address with it, waits for its connect timeout instead).

RocketStore extensions (not RocketMQ keys; a RocketMQ broker ignores them in a shared broker.conf):

``listenHost``         address the remoting, name-server and HTTP listeners bind (default 0.0.0.0)
``namesrvListenPort``  port of the embedded name-server role (default 9876, RocketMQ's name server
                       port); 0 or a negative value disables the role
``httpListenPort``     port of the HTTP side listener with ``/metrics``, ``/healthz`` and ``/readyz``
                       (default 10925: next to the broker's 10909/10911/10912, used by nothing in
                       RocketMQ); 0 or a negative value disables it
``metricsPerQueueEnable`` publish the per-queue ``/metrics`` series, ``rocketstore_queue_max_offset``
                       (one per consume queue) and ``rocketstore_consumer_lag`` (one per group and
                       queue of a topic it committed on), default true. A large cluster turns it
                       off: those two are most of a scrape (queues x groups series per broker),
                       while ``rocketstore_topic_max_offset`` and ``rocketstore_group_lag`` (their
                       sums per topic, and per group and topic) stay. Read at each scrape, so a
                       live update takes effect at the next one
``clusterPeers``       comma-separated ``brokerName@host:port`` of the other brokers of this
                       cluster (their remoting addresses). The name-server role lists them in
                       every route and in the cluster info, so clients spread queues over all of
                       them: this is how a cluster scales out. Each peer is assumed to carry the
                       same topic configuration as this broker (the operator configures them
                       alike); a client that meets a topic a peer lacks gets that peer's answer.
                       Once a peer's group has registered here (``namesrvPeers``), its live
                       members replace its entry (see ``rocketstore.broker.peer_routes``)
``namesrvPeers``       ``host:port;host:port`` of the embedded name servers of the other brokers
                       of this store, masters and slaves (the list may name this broker's own: a
                       name server keeps no registration of its own broker). This broker
                       registers with each of them as with ``namesrvAddr`` (the same period; the
                       answers are not used), so every embedded name server knows which members
                       of every group are alive. Read at each registration: a live update
                       (scale-up) takes effect without a restart, and at once
``maxDispatchLagBytes`` how far (bytes of CommitLog) dispatch may trail the last append before a
                       send waits for it, up to ``waitTimeMillsInSendQueue``, before being
                       stored (default 1 MiB; 0 turns it off). Dispatch (ConsumeQueue and
                       IndexFile entries, which make a message visible to consumers) runs on its
                       own thread but shares CPython's interpreter lock with the send path; under a
                       flat-out send load it fell seconds behind, so acknowledged messages stayed
                       invisible that long. The wait hands it the lock and bounds that gap.
``grpcListenPort``     port of the gRPC v2 endpoint RocketMQ 5.x clients talk to (default 8081, the
                       port of RocketMQ's proxy, which this broker is for its own queues; see
                       ``rocketstore.broker.grpc_v2``). 0 turns it off: a broker serving only 4.x
                       clients, or a second broker on a host whose 8081 is taken. Other values
                       must be a port number (1-65535), checked at start
``grpcAdvertisedPortOffset`` when not 0, the gRPC port routes give for a broker (this one, its
                       master, each peer) is that broker's remoting port plus this offset, not
                       ``grpcListenPort``: behind the operator's per-broker Services (external
                       access) each broker's gRPC port is published on a port of its own, at the
                       same distance from its remoting port for every broker (``grpcBasePort -
                       basePort``). Default 0: every broker on ``grpcListenPort``, the port it
                       listens on (0 has no other meaning: one Service cannot publish the remoting
                       and gRPC ports on the same number). The published port must be a port
                       number, checked at start
``grpcNativeFront``    serve the gRPC port with the Rust HTTP/2 front end (``native/src/grpc_front.rs``,
                       ``rocketstore.broker.grpc_v2.native_front``) instead of grpcio, when the native
                       extension is loaded and TLS is off (TLS stays on grpcio). Default true;
                       false keeps grpcio
``remotingNativeFront`` serve the remoting port (``listenPort``) with the Rust remoting front
                       (``native/src/remoting_front.rs``, ``rocketstore.broker.remoting_front``):
                       one thread per core the process may use (its affinity capped by its CPU
                       quota: ``rocketstore.broker.cpu_budget``) reads, splits and decodes requests and
                       writes responses off the interpreter lock; handlers stay in Python. Only
                       when the native extension is loaded and TLS is off (TLS stays on asyncio).
                       Default false: on 1 and 2 cores the asyncio server serves more sends per
                       second (docs/performance.md, "Measured")
``minInvisibleTimeMillsForRecv``, ``maxInvisibleTimeMills``  the range of invisible durations a
                       gRPC ReceiveMessage may ask for (defaults 10 s and 12 h, as RocketMQ's
                       proxy: its rmq-proxy.json keys of the same names)
``defaultInvisibleTimeMills``, ``renewAheadTimeMillis``, ``renewSliceTimeMillis``, ``renewMaxTimeMillis``
                       auto renew of a gRPC receive that asks for it (push consumers): invisible
                       time of such a receive, and how soon before it ends, by how much and for
                       how long the broker renews it (defaults 60 s, 10 s, 60 s, 3 h, as
                       RocketMQ's proxy; see ``rocketstore.broker.grpc_v2.auto_renew``)
``grpcClientIdleTimeMills`` a gRPC connection with no call open this long is sent a GOAWAY and
                       closed (default 120 s, RocketMQ's proxy key of the same name); 0 or less
                       keeps idle connections
``remotingMaxConnections``, ``grpcMaxConnections``  connections each remoting listener (the broker
                       port, the name-server port) and the gRPC port hold at once (default 10,000
                       each); more are closed as they arrive, counted on /metrics. A bound on what
                       a connection storm can make the broker hold; RocketMQ has no such key
``grpcMaxConcurrentCallsPerConnection`` HTTP/2 streams a gRPC client may have open on one
                       connection (default 1,000; clients queue calls past it). These, and
                       ``grpcClientIdleTimeMills``, are read when the gRPC port opens
``controllerLeaseEnable`` automatic failover on Kubernetes: the group's master is whoever holds its
                       ``coordination.k8s.io/v1`` Lease (``<brokerClusterName>.<brokerName>``), as in
                       RocketMQ 5's controller mode with the Lease as the controller (default false;
                       see docs/failover.md and ``rocketstore.broker.lease_elector``)
``controllerLeaseNamespace`` the Lease's namespace (default empty: the pod's, from ``POD_NAMESPACE``
                       or the service account)
``controllerLeaseKubeconfig`` a kubeconfig to reach the API server with (default empty: the pod's
                       service account)
``controllerLeaseDurationMills``, ``controllerLeaseRenewIntervalMills``, ``controllerLeaseMarginMills``
                       D, R and m of the failover design: how long a master's renewal must stand
                       unchanged before a slave takes over, how often the master renews, and how much
                       earlier than D a master that cannot renew stops acknowledging writes
                       (defaults 3000, 1000, 150; R below D, m below D - R). These are read at start
``controllerLeaseHandOverTimeoutMills`` how long a master stepping down (SIGTERM, a planned
                       restart) waits for an in-sync slave to hold its whole log before it releases
                       the Lease (default 2000; read at start)

RocketMQ system properties (``-D`` options of a RocketMQ JVM) RocketStore takes as broker.conf keys:

``rocketmq.acl.plain.file``  the default ACL file, relative to ``rocketmqHome`` unless absolute
                       (default ``conf/plain_acl.yml``); read when ``aclEnable=true``
                       (see ``rocketstore.broker.acl``)
``tls.server.mode``, ``tls.server.certPath``, ``tls.server.keyPath``, ``tls.server.trustCertPath``,
``tls.server.need.client.auth``, ``tls.config.file``  TLS on the remoting and name-server ports
                       (see ``rocketstore.broker.tls_system_config``)
``rocketmq.namesrv.domain``, ``rocketmq.namesrv.domain.subgroup``  the address server asked for the
                       name-server list when ``fetchNamesrvAddrByAddressServer=true`` and
                       ``namesrvAddr`` is unset (see ``rocketstore.broker.top_addressing``)

These, and ``aclEnable``, are read at start.

Live updates (``UPDATE_BROKER_CONFIG``) change the in-memory objects only. RocketMQ also rewrites
broker.conf with the merged configuration; RocketStore does not touch the operator's file, so a
live change lasts until the next restart.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Final

from rocketstore.broker.auth.auth_config import AUTH_CONFIG_KEYS
from rocketstore.broker.unimplemented_config import refusal, refused_settings
from rocketstore.client.remoting_client import split_namesrv_addr
from rocketstore.common.mix_all import MASTER_ID
from rocketstore.store.config import FIELD_BY_KEY as STORE_FIELD_BY_KEY
from rocketstore.store.config import (
    BrokerRole,
    ConfigError,
    StoreConfig,
    assign_changed,
    config_converters,
    config_to_properties,
    convert_known,
    load_broker_conf,
)

__all__ = [
    "BROKER_FIELD_BY_KEY",
    "BROKER_KEY_BY_FIELD",
    "BrokerConfig",
    "ClusterPeer",
    "apply_broker_startup_rules",
    "load_config",
    "load_config_file",
    "local_address",
    "split_properties",
]

log = logging.getLogger(__name__)

_CPUS: Final = os.cpu_count() or 1


def local_address() -> str:
    """What our host name resolves to (a pod's own IP in Kubernetes), else loopback.

    RocketMQ's default for brokerIP1 is the first non-loopback address of the host.
    """
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _local_host_name() -> str:
    # RocketMQ: InetAddress.getLocalHost().getHostName(), "DEFAULT_BROKER" when that fails.
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


def _key(name: str) -> dict[str, str]:
    """Metadata for a field whose key is not the camelCase of its name."""
    return {"key": name}


@dataclass(frozen=True, slots=True)
class ClusterPeer:
    """Another broker of this cluster, as listed in ``clusterPeers``."""

    broker_name: str
    addr: str  # host:port of its remoting listener


@dataclass(kw_only=True, slots=True)
class BrokerConfig:
    """RocketMQ 4.9.8 ``BrokerConfig`` (same order, same defaults) and RocketStore's extensions.

    Readers read attributes at the point of use, so a live update takes effect where it can.
    """

    rocketmq_home: str | None = field(default_factory=lambda: os.environ.get("ROCKETMQ_HOME"))
    namesrv_addr: str | None = field(default_factory=lambda: os.environ.get("NAMESRV_ADDR"))
    broker_ip1: str = field(default_factory=local_address, metadata=_key("brokerIP1"))
    broker_ip2: str = field(default_factory=local_address, metadata=_key("brokerIP2"))
    broker_name: str = field(default_factory=_local_host_name)
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0  # MixAll.MASTER_ID; Java long
    broker_permission: int = 0x4 | 0x2  # PERM_READ | PERM_WRITE
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    message_store_plug_in: str = ""
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    trace_topic_enable: bool = False
    send_message_thread_pool_nums: int = min(_CPUS, 4)
    put_message_future_thread_pool_nums: int = min(_CPUS, 4)
    pull_message_thread_pool_nums: int = 16 + _CPUS * 2
    process_reply_message_thread_pool_nums: int = 16 + _CPUS * 2
    query_message_thread_pool_nums: int = 8 + _CPUS
    admin_broker_thread_pool_nums: int = 16
    client_manage_thread_pool_nums: int = 32
    consumer_manage_thread_pool_nums: int = 32
    heartbeat_thread_pool_nums: int = min(32, _CPUS)
    end_transaction_thread_pool_nums: int = max(8 + _CPUS * 2, min(_CPUS, 4) * 4)
    flush_consumer_offset_interval: int = 1000 * 5
    flush_consumer_offset_history_interval: int = 1000 * 60
    reject_transaction_message: bool = False
    fetch_namesrv_addr_by_address_server: bool = False
    send_thread_pool_queue_capacity: int = 10000
    put_thread_pool_queue_capacity: int = 10000
    pull_thread_pool_queue_capacity: int = 100000
    reply_thread_pool_queue_capacity: int = 10000
    query_thread_pool_queue_capacity: int = 20000
    client_manager_thread_pool_queue_capacity: int = 1000000
    consumer_manager_thread_pool_queue_capacity: int = 1000000
    heartbeat_thread_pool_queue_capacity: int = 50000
    end_transaction_pool_queue_capacity: int = 100000
    filter_server_nums: int = 0
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000  # Java long
    notify_consumer_ids_changed_enable: bool = True
    high_speed_mode: bool = False
    commercial_enable: bool = True
    commercial_timer_count: int = 1
    commercial_trans_count: int = 1
    commercial_big_count: int = 1
    commercial_base_count: int = 1
    transfer_msg_by_heap: bool = True
    max_delay_time: int = 40
    region_id: str = "DefaultRegion"
    register_broker_timeout_mills: int = 6000
    slave_read_enable: bool = False
    disable_consume_if_consumer_read_slowly: bool = False
    consumer_fallbehind_threshold: int = 1024 * 1024 * 1024 * 16  # Java long
    broker_fast_failure_enable: bool = True
    wait_time_mills_in_send_queue: int = 200  # Java long
    wait_time_mills_in_pull_queue: int = 5 * 1000  # Java long
    wait_time_mills_in_heartbeat_queue: int = 31 * 1000  # Java long
    wait_time_mills_in_transaction_queue: int = 3 * 1000  # Java long
    start_accept_send_request_time_stamp: int = 0  # Java long
    trace_on: bool = True
    enable_calc_filter_bit_map: bool = False
    expect_consumer_num_use_filter: int = 32
    max_error_rate_of_bloom_filter: int = 20
    filter_data_clean_time_span: int = 24 * 3600 * 1000  # Java long
    filter_support_retry: bool = False
    enable_property_filter: bool = False
    compressed_register: bool = False
    force_register: bool = True
    register_name_server_period: int = 1000 * 30
    transaction_time_out: int = 6 * 1000  # Java long
    transaction_check_max: int = 15
    transaction_check_interval: int = 60 * 1000  # Java long
    acl_enable: bool = False
    store_reply_message_enable: bool = True
    enable_detail_stat: bool = True
    auto_delete_unused_stats: bool = False
    isolate_log_enable: bool = False
    config_black_list: str = "configBlackList;brokerConfigPath"
    # RocketMQ 5's controller mode (failover: replicas_manager.py)
    enable_controller_mode: bool = False
    check_sync_state_set_period: int = 5 * 1000  # Java long
    # Apache's controller off Kubernetes (controller_elector.py)
    controller_addr: str = ""
    fetch_controller_addr_by_dns_lookup: bool = False
    controller_heart_beat_timeout_mills: int = 10 * 1000  # Java long
    broker_heartbeat_interval: int = 1000
    send_heartbeat_timeout_millis: int = 1000
    sync_broker_metadata_period: int = 5 * 1000  # Java long
    broker_election_priority: int = 2**31 - 1
    # NettyServerConfig.listenPort, as BrokerStartup sets it, its idle timeout and its graceful shutdown.
    listen_port: int = 10911
    server_channel_max_idle_time_seconds: int = 120
    enable_shutdown_gracefully: bool = False
    shutdown_wait_time_seconds: int = 30
    # -- RocketStore extensions (see the module docstring) --
    listen_host: str = "0.0.0.0"
    namesrv_listen_port: int = 9876
    http_listen_port: int = 10925
    metrics_per_queue_enable: bool = True
    cluster_peers: str = ""
    namesrv_peers: str = ""
    max_dispatch_lag_bytes: int = 1024 * 1024
    grpc_listen_port: int = 8081
    grpc_advertised_port_offset: int = 0
    grpc_native_front: bool = True
    remoting_native_front: bool = False
    min_invisible_time_mills_for_recv: int = 10_000  # Java long
    max_invisible_time_mills: int = 12 * 3600 * 1000  # Java long
    default_invisible_time_mills: int = 60_000  # Java long
    renew_ahead_time_millis: int = 10_000  # Java long
    renew_slice_time_millis: int = 60_000  # Java long
    renew_max_time_millis: int = 3 * 3600 * 1000  # Java long
    grpc_client_idle_time_mills: int = 120_000  # Java long
    remoting_max_connections: int = 10_000
    grpc_max_connections: int = 10_000
    grpc_max_concurrent_calls_per_connection: int = 1_000
    # automatic failover on Kubernetes (lease_elector.py)
    controller_lease_enable: bool = False
    controller_lease_namespace: str = ""
    controller_lease_kubeconfig: str = ""
    controller_lease_duration_mills: int = 3_000  # Java long
    controller_lease_renew_interval_mills: int = 1_000  # Java long
    controller_lease_margin_mills: int = 150  # Java long
    #: how long a stepping-down master waits for an in-sync slave to hold its whole log
    controller_lease_hand_over_timeout_mills: int = 2_000  # Java long
    # -- RocketMQ JVM system properties, taken from broker.conf (acl/, tls_system_config.py) --
    acl_plain_file: str | None = field(default=None, metadata=_key("rocketmq.acl.plain.file"))
    tls_server_mode: str = field(default="disabled", metadata=_key("tls.server.mode"))
    tls_server_cert_path: str | None = field(default=None, metadata=_key("tls.server.certPath"))
    tls_server_key_path: str | None = field(default=None, metadata=_key("tls.server.keyPath"))
    tls_server_trust_cert_path: str | None = field(default=None, metadata=_key("tls.server.trustCertPath"))
    tls_server_need_client_auth: str = field(default="none", metadata=_key("tls.server.need.client.auth"))
    tls_config_file: str = field(default="/etc/rocketmq/tls.properties", metadata=_key("tls.config.file"))
    # the address server of fetchNamesrvAddrByAddressServer (top_addressing.py)
    namesrv_domain: str = field(default="jmenv.tbsite.net", metadata=_key("rocketmq.namesrv.domain"))
    namesrv_domain_subgroup: str = field(default="nsaddr", metadata=_key("rocketmq.namesrv.domain.subgroup"))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> tuple[BrokerConfig, dict[str, str]]:
        """Build from broker.conf properties; returns the config and the keys it does not know."""
        values, unknown = _convert_known(props)
        config = cls()
        for name, value in values.items():
            setattr(config, name, value)
        config.cluster_peer_list()  # a malformed clusterPeers fails at start-up, naming the key
        _check_grpc_settings(config)
        _check_namesrv_addr(config.namesrv_addr)  # so do a malformed namesrvAddr and namesrvPeers
        _check_namesrv_addr(config.namesrv_peers, "namesrvPeers")
        return config, unknown

    def parse_update(self, props: Mapping[str, str]) -> dict[str, object]:
        """Parse (without applying) camelCase properties: field name -> new value.

        Raises ConfigError for an unknown key or a bad value, so the caller can validate every
        half of an update before applying any.
        """
        values, unknown = _convert_known(props)
        if unknown:
            key, raw = next(iter(unknown.items()))
            raise ConfigError(key, raw, "not a broker or message store config key")
        if "cluster_peers" in values:
            _parse_peers(str(values["cluster_peers"]))
        for name in _POSITIVE_LIVE:
            value = values.get(name)
            if isinstance(value, int) and value <= 0:
                raise ConfigError(BROKER_KEY_BY_FIELD[name], str(value), "must be positive")
        for name in ("namesrv_addr", "namesrv_peers"):
            value = values.get(name)
            _check_namesrv_addr(value if isinstance(value, str) else None, BROKER_KEY_BY_FIELD[name])
        return values

    def apply(self, values: Mapping[str, object]) -> dict[str, str]:
        """Assign values from :meth:`parse_update`; returns the changed keys with their new text."""
        return assign_changed(self, values, BROKER_KEY_BY_FIELD)

    def to_properties(self) -> dict[str, str]:
        """Every set field as camelCase key/value text; None fields left out, as RocketMQ does."""
        return config_to_properties(self, BROKER_KEY_BY_FIELD)

    def cluster_peer_list(self) -> list[ClusterPeer]:
        return _parse_peers(self.cluster_peers)

    def config_black_list_keys(self) -> set[str]:
        """Keys ``UPDATE_BROKER_CONFIG`` refuses (RocketMQ's configBlackList, ';'-separated)."""
        return {k.strip() for k in self.config_black_list.split(";") if k.strip()}


def _check_grpc_settings(config: BrokerConfig) -> None:
    """grpcListenPort is a port number or 0 (off); the invisible-time range is not empty; the
    connection caps and the calls per connection are positive (0 would refuse every client)."""
    if not 0 <= config.grpc_listen_port <= 65535:
        raise ConfigError("grpcListenPort", str(config.grpc_listen_port),
                          "must be a port number (1-65535), or 0 to turn the gRPC endpoint off")
    offset = config.grpc_advertised_port_offset
    if offset and not 0 < config.listen_port + offset <= 65535:
        raise ConfigError("grpcAdvertisedPortOffset", str(offset),
                          f"listenPort ({config.listen_port}) plus it must be a port number (1-65535)")
    if not 0 < config.min_invisible_time_mills_for_recv <= config.max_invisible_time_mills:
        raise ConfigError("minInvisibleTimeMillsForRecv", str(config.min_invisible_time_mills_for_recv),
                          f"must be positive and at most maxInvisibleTimeMills ({config.max_invisible_time_mills})")
    for key, value in (("defaultInvisibleTimeMills", config.default_invisible_time_mills),
                       ("renewSliceTimeMillis", config.renew_slice_time_millis),
                       ("remotingMaxConnections", config.remoting_max_connections),
                       ("grpcMaxConnections", config.grpc_max_connections),
                       ("grpcMaxConcurrentCallsPerConnection", config.grpc_max_concurrent_calls_per_connection)):
        if value <= 0:
            raise ConfigError(key, str(value), "must be positive")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


BROKER_KEY_BY_FIELD: Final[Mapping[str, str]] = MappingProxyType(
    {f.name: str(f.metadata.get("key") or _camel(f.name)) for f in fields(BrokerConfig)}
)
BROKER_FIELD_BY_KEY: Final[Mapping[str, str]] = MappingProxyType({k: n for n, k in BROKER_KEY_BY_FIELD.items()})

#: read by the remoting listeners at each connection, so a live update reaches them: checked there too
_POSITIVE_LIVE: Final = ("remoting_max_connections",)

_LONG_FIELDS: Final = frozenset({
    "broker_id", "short_polling_time_mills", "consumer_fallbehind_threshold", "wait_time_mills_in_send_queue",
    "wait_time_mills_in_pull_queue", "wait_time_mills_in_heartbeat_queue", "wait_time_mills_in_transaction_queue",
    "start_accept_send_request_time_stamp", "filter_data_clean_time_span", "transaction_time_out",
    "transaction_check_interval", "min_invisible_time_mills_for_recv", "max_invisible_time_mills",
    "default_invisible_time_mills", "renew_ahead_time_millis", "renew_slice_time_millis", "renew_max_time_millis",
    "grpc_client_idle_time_mills",
})
_CONVERTERS: Final[Mapping[str, Callable[[str, str], object]]] = config_converters(BrokerConfig, _LONG_FIELDS)

if set(BROKER_FIELD_BY_KEY) & set(STORE_FIELD_BY_KEY):
    raise RuntimeError(f"keys in both configs: {set(BROKER_FIELD_BY_KEY) & set(STORE_FIELD_BY_KEY)}")


def _convert_known(props: Mapping[str, str]) -> tuple[dict[str, object], dict[str, str]]:
    return convert_known(props, BROKER_FIELD_BY_KEY, _CONVERTERS)


def _check_namesrv_addr(text: str | None, key: str = "namesrvAddr") -> None:
    """namesrvAddr (or namesrvPeers, ``key``) is blank (no registration) or ``host:port;host:port``;
    ConfigError otherwise."""
    if text and text.strip():
        try:
            split_namesrv_addr(text)
        except ValueError as exc:
            raise ConfigError(key, text, str(exc)) from None


def _parse_peers(text: str) -> list[ClusterPeer]:
    peers: list[ClusterPeer] = []
    for item in text.split(","):
        entry = item.strip()
        if not entry:
            continue
        name, sep, addr = entry.partition("@")
        host, colon, port = addr.strip().rpartition(":")
        if not sep or not name.strip() or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError("clusterPeers", text, f"entry {entry!r} is not brokerName@host:port")
        peers.append(ClusterPeer(name.strip(), addr.strip()))
    return peers


def apply_broker_startup_rules(broker_config: BrokerConfig, store_config: StoreConfig) -> None:
    """What RocketMQ's BrokerStartup decides after reading broker.conf, before the broker starts.

    * a master (ASYNC_MASTER, SYNC_MASTER) is brokerId 0 whatever broker.conf says, so that name
      servers list it as the group's master;
    * a SLAVE needs a brokerId above 0 (ConfigError otherwise: it would register as the master);
    * with ``enableControllerMode`` brokerId is the replica id (> 0; granted by the controller of
      ``controllerAddr`` when that is set) and the broker starts as a
      SLAVE following no one, whatever brokerRole says, until its source of truth gives it a role;
    * ``controllerLeaseEnable`` (the Kubernetes Lease as the group's source of truth) needs
      ``enableControllerMode``, no ``controllerAddr`` and a listenPort above 0 (ConfigError);
    * haListenPort is always listenPort + 1: BrokerStartup overwrites any configured value, so
      slaves of a RocketMQ master and of ours find the HA port at the same place. A listenPort
      of 0 (any free port, a RocketStore convenience for tests) gives haListenPort 0 too: the HA
      service then listens on any free port, and registration publishes the one it got.

    Idempotent: the command line calls it once its own overrides (``--listen-port``) are in.
    """
    if broker_config.controller_lease_enable:
        # the Lease elector is one source of truth of a group; Apache's controller is the other
        if not broker_config.enable_controller_mode:
            raise ConfigError("controllerLeaseEnable", "true", "needs enableControllerMode=true")
        if broker_config.controller_addr:
            raise ConfigError("controllerLeaseEnable", "true", "cannot be used with controllerAddr "
                              "(one source of truth per group: the Lease or Apache's controller)")
        if broker_config.listen_port <= 0:
            raise ConfigError("listenPort", str(broker_config.listen_port), "controllerLeaseEnable=true publishes "
                              "this broker's address in the Lease before it serves: give a port")
    if broker_config.enable_controller_mode:
        # controller mode: brokerId is the replica's stable id, the role comes from the source of
        # truth (replicas_manager.py); until then the replica takes no writes. With controllerAddr
        # Apache's controller grants the id (controller_elector.allocate_broker_id) before the broker is built.
        if broker_config.fetch_controller_addr_by_dns_lookup:
            raise ConfigError("fetchControllerAddrByDnsLookup", "true", "not implemented: list the controllers in "
                              "controllerAddr (host:port;host:port)")
        if broker_config.broker_id <= 0 and not broker_config.controller_addr:
            raise ConfigError("brokerId", str(broker_config.broker_id),
                              "enableControllerMode=true needs this replica's id in brokerId (> 0)")
        store_config.broker_role = BrokerRole.SLAVE
    elif store_config.broker_role is BrokerRole.SLAVE:
        if broker_config.broker_id <= 0:
            raise ConfigError("brokerId", str(broker_config.broker_id), "Slave's brokerId must be > 0")
    else:
        broker_config.broker_id = MASTER_ID
    store_config.ha_listen_port = broker_config.listen_port + 1 if broker_config.listen_port > 0 else 0


def split_properties(props: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Split properties into (store keys, broker keys, unknown keys)."""
    store: dict[str, str] = {}
    broker: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for key, value in props.items():
        if key in STORE_FIELD_BY_KEY:
            store[key] = value
        elif key in BROKER_FIELD_BY_KEY:
            broker[key] = value
        else:
            unknown[key] = value
    return store, broker, unknown


def load_config(props: Mapping[str, str]) -> tuple[BrokerConfig, StoreConfig]:
    """Both configs from broker.conf properties; unknown keys are logged once and ignored, a
    security key this broker does not implement raises ConfigError naming it."""
    store_config, rest = StoreConfig.from_properties(props)
    return _broker_half(rest), store_config


def load_config_file(path: str | os.PathLike[str]) -> tuple[BrokerConfig, StoreConfig]:
    """Read a broker.conf (ISO-8859-1, as ``Properties.load`` reads it) into both configs."""
    store_config, rest = load_broker_conf(path)
    return _broker_half(rest), store_config


def _broker_half(rest: Mapping[str, str]) -> BrokerConfig:
    refused = refused_settings(rest)  # security keys this broker lacks: no start (unimplemented_config.py)
    if refused:
        raise refusal(refused)
    broker_config, unknown = BrokerConfig.from_properties(rest)
    unknown = {key: value for key, value in unknown.items() if key not in AUTH_CONFIG_KEYS}  # auth/auth_config.py's
    if unknown:
        log.warning("ignoring broker.conf keys RocketStore does not use: %s", ", ".join(sorted(unknown)))
    return broker_config
