"""The embedded name-server role: routes for this broker and its cluster peers.

RocketMQ clients are given a name-server address (``namesrvAddr``) and ask it where a topic
lives before talking to any broker. Instead of a separate name-server process to which brokers
register, each RocketStore broker answers those questions itself on a second remoting listener
(``namesrvListenPort``, 9876 by default), from its own topic table:

* ``GET_ROUTEINFO_BY_TOPIC`` (105): TopicRouteData for a topic this broker knows (``%RETRY%``
  and ``%DLQ%`` topics included once they exist); a queueData and a brokerData for this broker
  and for every broker of ``clusterPeers`` (as registered here, see below). A peer that has not
  registered its topic table here is assumed to carry the same topic config as this broker (the
  operator configures the brokers of a cluster alike). An unknown topic is
  TOPIC_NOT_EXIST with the remark RocketMQ's name server sends; nothing is auto-created here
  (a producer then sends with defaultTopic TBW102, whose route exists while
  autoCreateTopicEnable is on, and the broker creates the topic on the first send).
* ``GET_BROKER_CLUSTER_INFO`` (106): ClusterInfo of this broker and its peers.
* ``GET_ALL_TOPIC_LIST_FROM_NAMESERVER`` (206), ``GET_TOPICS_BY_CLUSTER`` (224),
  ``GET_SYSTEM_TOPIC_LIST_FROM_NS`` (304): TopicList bodies.
* ``PUT_KV_CONFIG`` (100), ``GET_KV_CONFIG`` (101), ``DELETE_KV_CONFIG`` (102),
  ``GET_KVLIST_BY_NAMESPACE`` (219): the KV config of :mod:`rocketstore.broker.kv_config_manager`
  (kvConfig.json in the store's config directory); a missing item or namespace is QUERY_NOT_FOUND
  with RocketMQ's remarks.
* ``DELETE_TOPIC_IN_NAMESRV`` (216): drops the topic from the routes of the registered brokers (of
  the header's ``clusterName`` when given, of all otherwise), as RouteInfoManager.deleteTopic does;
  a registered broker that still holds the topic brings it back with its next changed table. This
  broker's own routes are its topic table, so there is no separate route to drop: after
  DELETE_TOPIC_IN_BROKER (what ``mqadmin deleteTopic`` sends first) the topic has no route here.
* ``WIPE_WRITE_PERM_OF_BROKER`` (205) / ``ADD_WRITE_PERM_OF_BROKER`` (327), what ``mqadmin
  wipeWritePerm`` / ``addWritePerm`` send to every name server of ``-n``: the brokerName's queue
  data lose PERM_WRITE in every route this name server answers (this broker's own, a peer's as
  registered or assumed, a registered broker's; the gRPC route of grpc_v2/service.py too) until it
  is added back, and producers send to the other brokers once they refresh the route (every 30 s
  by default). The answer counts the topics
  routed to that brokerName here (wipeTopicCount / addTopicCount); a brokerName this name server
  does not route to counts 0 and is not remembered, as RocketMQ's no-op. Unlike RocketMQ's, the
  wipe survives the broker's registrations (:class:`RouteInfoManager`); like it, not a restart of
  this name server, so a drain re-sends it (the operator does, every pass). Adding back routes
  each topic with its own permission again (RocketMQ's sets every one read-write).
* ``GET_NAMESRV_CONFIG`` (319) / ``UPDATE_NAMESRV_CONFIG`` (318): the NamesrvConfig keys that
  mean something here, as properties text. ``orderMessageEnable`` puts the ``ORDER_TOPIC_CONFIG``
  KV item of a topic into its route (``orderTopicConf``), as RocketMQ's name server does;
  ``productEnvName`` and ``clusterTest`` are kept and reported only. Keys of ``configBlackList``
  are refused with NO_PERMISSION; other unknown keys are ignored, as RocketMQ's
  Configuration.update ignores them. An update that changes something is written, as RocketMQ's
  Configuration.persist writes its ``configStorePath``, to ``namesrv.properties`` in the store's
  config directory (replaced durably, the previous version kept as ``.bak``, as the other config
  files), and read back when the name server starts, so updates survive a restart. RocketMQ keeps
  that file in ``~/namesrv/`` and reads it only when started with ``-c``; here it sits with the
  store, which is what a pod keeps, and is always read. A file that cannot be used (nor its
  backup) stops the start with an error naming it.
* ``GET_UNIT_TOPIC_LIST`` (311), ``GET_HAS_UNIT_SUB_TOPIC_LIST`` (312),
  ``GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST`` (313): topics by their unit flags (TopicSysFlag), this
  broker's and the registered brokers'.

A broker whose ``brokerPermission`` lacks read or write publishes that permission for every
topic, as RocketMQ's registerBrokerAll does.

Other brokers may register here as they would with RocketMQ's name server (an Apache broker
started with ``namesrvAddr`` pointing at this port, or another RocketStore broker):

* ``REGISTER_BROKER`` (103): RegisterBrokerBody, JSON or compressed, checked against the
  header's ``bodyCrc32`` ("crc32 not match" otherwise); kept in a RouteInfoManager
  (route_info_manager.py) and answered with RegisterBrokerResponseHeader and, when the KV
  namespace ``ORDER_TOPIC_CONFIG`` exists, that namespace as a KVTable body (the broker takes its
  order-topic settings from it, as from RocketMQ's name server);
* ``UNREGISTER_BROKER`` (104) and ``QUERY_DATA_VERSION`` (322, brokers with forceRegister=false);
* a registered broker is dropped when its connection closes or after two minutes without a
  registration (scanned every 10 s, as NamesrvController schedules scanNotActiveBroker).

Every answer above then covers both: this broker and its peers from its own tables, and the
registered brokers from theirs, so one client sees a mixed cluster through this port. Where a
registered broker has this broker's brokerName, it is listed as a member of this broker's group;
where it has a peer's, the peer's group is listed with its registered (live) members instead of
its ``clusterPeers`` entry: the brokers of a store register with each other's name servers
(``namesrvPeers``), so a group whose master is down is listed with its slaves alone
(:mod:`rocketstore.broker.peer_routes`). A registration of this broker itself (a ``namesrvPeers``
list naming every pod) is answered and not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Iterable

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.kv_config_manager import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rocketstore.broker.peer_routes import live_groups, merge_topic_route
from rocketstore.broker.route_info_manager import RouteInfoManager
from rocketstore.broker.server import Connection, Handler, RemotingServer
from rocketstore.common.clock import now_ms
from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_properties import format_properties, parse_properties
from rocketstore.common.message import body_crc
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import BrokerData, ClusterInfo, KVTable, QueueData, TopicList, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import MalformedRequestError, RemotingCommand
from rocketstore.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from rocketstore.remoting.register_broker_body import RegisterBrokerBody, TopicConfigSerializeWrapper
from rocketstore.store.config_manager import read_config_file, write_config_file

log = logging.getLogger(__name__)

MASTER_ID = 0
#: where UPDATE_NAMESRV_CONFIG's changes are kept, in the store's config directory
NAMESRV_CONFIG_FILE = "namesrv.properties"
#: FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to RocketMQ's TOPIC_NOT_EXIST remark.
APPLY_TOPIC_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
#: NamesrvController's scanNotActiveBroker schedule: first after 5 s, then every 10 s.
SCAN_NOT_ACTIVE_DELAY_S = 5.0
SCAN_NOT_ACTIVE_INTERVAL_S = 10.0
#: TopicSysFlag's unit bits
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


@dataclasses.dataclass(slots=True)
class NamesrvConfig:
    """The NamesrvConfig keys an operator can read and set on the embedded name server."""

    order_message_enable: bool = False
    product_env_name: str = "center"
    cluster_test: bool = False
    config_black_list: str = "configBlackList;configStorePath;kvConfigPath"

    def black_list(self) -> set[str]:
        return {key.strip() for key in self.config_black_list.split(";") if key.strip()}

    def persisted(self) -> dict[str, str]:
        """The keys UPDATE_NAMESRV_CONFIG can change, as written to namesrv.properties."""
        return {"clusterTest": str(self.cluster_test).lower(),
                "orderMessageEnable": str(self.order_message_enable).lower(),
                "productEnvName": self.product_env_name}

    def update(self, props: dict[str, str]) -> dict[str, str]:
        """Apply the known keys (all or nothing); returns what changed. ValueError for a bad value."""
        values: dict[str, object] = {}
        for key, raw in props.items():
            if key in ("orderMessageEnable", "clusterTest"):
                if raw.strip().lower() not in ("true", "false"):
                    raise ValueError(f"{key} must be true or false, got {raw!r}")
                values[key] = raw.strip().lower() == "true"
            elif key == "productEnvName":
                values[key] = raw
        for key, value in values.items():
            setattr(self, {"orderMessageEnable": "order_message_enable", "clusterTest": "cluster_test",
                           "productEnvName": "product_env_name"}[key], value)
        return {key: props[key] for key in values}


class NameServer:
    """Answers name-server requests from the broker's own tables and those of the brokers registered here."""

    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.kv_config = KVConfigManager(broker.store_config.config_dir())
        self.config = NamesrvConfig()
        self.config_path = broker.store_config.config_dir() / NAMESRV_CONFIG_FILE
        # RocketMQ's name server: same TLS, idle timeout and connection cap
        self.server = RemotingServer(host, port, tls=broker.remoting.tls, limits=broker.remoting.limits)
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route_info)
        self.server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        self.server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._all_topics)
        self.server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self._topics_by_cluster)
        self.server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, self._system_topics)
        self.server.register(RequestCode.GET_KV_CONFIG, self._kv_config)
        self.server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self._kv_list)
        self.server.register(RequestCode.REGISTER_BROKER, self._register_broker)
        self.server.register(RequestCode.UNREGISTER_BROKER, self._unregister_broker)
        self.server.register(RequestCode.QUERY_DATA_VERSION, self._query_data_version)
        self.routes = RouteInfoManager()
        self.server.on_disconnect.append(self.routes.on_connection_closed)
        self.register_requests = 0
        self._scan_task: asyncio.Task[None] | None = None
        broker.add_gauge("rocketstore_namesrv_registered_brokers",
                         "Broker addresses registered with the embedded name server",
                         lambda: len(self.routes.broker_live_table))
        broker.add_counter("rocketstore_namesrv_register_requests",
                           "REGISTER_BROKER requests the embedded name server accepted",
                           lambda: self.register_requests)
        self.server.register(RequestCode.PUT_KV_CONFIG, self._put_kv_config)
        self.server.register(RequestCode.DELETE_KV_CONFIG, self._delete_kv_config)
        self.server.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self._delete_topic)
        self.server.register(RequestCode.GET_NAMESRV_CONFIG, self._get_config)
        self.server.register(RequestCode.UPDATE_NAMESRV_CONFIG, self._update_config)
        self.server.register(RequestCode.WIPE_WRITE_PERM_OF_BROKER, self._wipe_write_perm)
        self.server.register(RequestCode.ADD_WRITE_PERM_OF_BROKER, self._add_write_perm)
        self.server.register(RequestCode.GET_UNIT_TOPIC_LIST, self._unit_topics(
            lambda flag: bool(flag & FLAG_UNIT)))
        self.server.register(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, self._unit_topics(
            lambda flag: bool(flag & FLAG_UNIT_SUB)))
        self.server.register(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, self._unit_topics(
            lambda flag: bool(flag & FLAG_UNIT_SUB) and not flag & FLAG_UNIT))

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await asyncio.to_thread(self.kv_config.load)
        await asyncio.to_thread(read_config_file, self.config_path, self._load_config)
        await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan-brokers")

    async def stop(self, grace_s: float = 10.0) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scan_task
        await self.server.stop(grace_s)

    async def _scan_loop(self) -> None:
        await asyncio.sleep(SCAN_NOT_ACTIVE_DELAY_S)
        while True:
            for conn in self.routes.scan_not_active_broker(now_ms()):
                if isinstance(conn, Connection):
                    conn.close()
            await asyncio.sleep(SCAN_NOT_ACTIVE_INTERVAL_S)

    # -- the data ----------------------------------------------------------------------------------
    def own_broker_datas(self) -> list[BrokerData]:
        """This broker first, with the rest of its group (slaves registered here under its brokerName),
        then the peers in ``clusterPeers`` order, each as registered here once it has (its live
        members), as configured before (:func:`rocketstore.broker.peer_routes.live_groups`)."""
        cfg = self.broker.broker_config
        group = self.routes.broker_addr_table.get(cfg.broker_name)
        addrs = {**(group.broker_addrs if group is not None else {}), cfg.broker_id: self.broker.broker_addr}
        master = self.broker.master_addr
        if cfg.broker_id != MASTER_ID and master and self.broker.store.ha_service.client_state().connected:
            # a slave's name server names its master while the master is demonstrably alive (its HA
            # stream is connected): producers then find the master whichever name server answered,
            # and with the master down consumers are routed to this slave alone
            addrs.setdefault(MASTER_ID, master)
        own = BrokerData(cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                         broker_addrs=dict(sorted(addrs.items())))
        return live_groups(own, cfg.cluster_peer_list(), self.routes.broker_addr_table)

    def broker_datas(self) -> list[BrokerData]:
        """Our own brokers, then the registered ones (by name) whose names are not ours."""
        datas = self.own_broker_datas()
        names = {b.broker_name for b in datas}
        datas += [b for name, b in sorted(self.routes.broker_addr_table.items()) if name not in names]
        return datas

    def _perm(self, topic: TopicConfig, own: bool) -> int:
        broker_perm = self.broker.broker_config.broker_permission
        if own and (not broker_perm & PERM_READ or not broker_perm & PERM_WRITE):
            return broker_perm
        return topic.perm

    def route(self, topic: str) -> TopicRouteData | None:
        config = self.broker.topic_config_manager.get(topic)
        own = self.own_broker_datas()
        assumed = {} if config is None else {
            b.broker_name: QueueData(broker_name=b.broker_name, read_queue_nums=config.read_queue_nums,
                                     write_queue_nums=config.write_queue_nums, perm=self._perm(config, i == 0),
                                     topic_sys_flag=config.topic_sys_flag)
            for i, b in enumerate(own)}
        registered = self.routes.pickup_topic_route(topic)
        queues, brokers, filter_servers = registered if registered is not None else ([], [], {})
        route = TopicRouteData(filter_server_table=filter_servers)
        route.queue_datas, route.broker_datas = merge_topic_route(own, assumed, queues, brokers)
        wiped = self.routes.write_perm_wiped
        route.queue_datas = [dataclasses.replace(q, perm=q.perm & ~PERM_WRITE) if q.broker_name in wiped else q
                             for q in route.queue_datas]
        if not route.queue_datas:
            return None
        if self.config.order_message_enable:
            route.order_topic_conf = self.kv_config.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        return route

    def cluster_info(self) -> ClusterInfo:
        own = self.own_broker_datas()
        clusters: dict[str, list[str]] = {self.broker.broker_config.broker_cluster_name: [b.broker_name for b in own]}
        ours = set(clusters[self.broker.broker_config.broker_cluster_name])
        for cluster, names in sorted(self.routes.cluster_addr_table.items()):
            if names - ours:
                clusters.setdefault(cluster, []).extend(sorted(names - ours))
        return ClusterInfo(broker_addr_table={b.broker_name: b for b in self.broker_datas()},
                           cluster_addr_table=clusters)

    # -- handlers ----------------------------------------------------------------------------------
    async def _route_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        route = self.route(header.topic)
        if route is None:
            return request.response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}{APPLY_TOPIC_HINT}")
        return request.response(ResponseCode.SUCCESS, body=route.encode())

    async def _cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=self.cluster_info().encode())

    async def _all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        topics = [*self.broker.topic_config_manager.table(), *self.routes.topic_queue_table]
        return request.response(ResponseCode.SUCCESS, body=_topic_list(topics))

    async def _topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        cluster = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields).cluster
        topics = set(self.broker.topic_config_manager.table()) \
            if cluster == self.broker.broker_config.broker_cluster_name else set()
        return request.response(ResponseCode.SUCCESS, body=_topic_list(topics | self.routes.topics_of_cluster(cluster)))

    async def _system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # RocketMQ's getSystemTopicList: every cluster name and broker name, plus one broker address.
        brokers = self.broker_datas()
        names = [self.broker.broker_config.broker_cluster_name, *self.routes.cluster_addr_table,
                 *(b.broker_name for b in brokers)]
        return request.response(ResponseCode.SUCCESS, body=_topic_list(names, self.broker.broker_addr))

    async def _kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        value = self.kv_config.get(header.namespace, header.key)
        if value is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND,
                                    f"No config item, Namespace: {header.namespace} Key: {header.key}")
        return request.response(ResponseCode.SUCCESS, ext_fields=GetKVConfigResponseHeader(value=value).to_ext_fields())

    async def _kv_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields).namespace
        items = self.kv_config.namespace(namespace)
        if items is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")
        return request.response(ResponseCode.SUCCESS, body=KVTable(table=items).encode())

    async def _put_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        log.info("PUT_KV_CONFIG from %s: %s %s=%s", conn.peer, header.namespace, header.key, header.value)
        self.kv_config.put(header.namespace, header.key, header.value)
        await asyncio.to_thread(self.kv_config.persist)
        return request.response(ResponseCode.SUCCESS)

    async def _delete_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        log.info("DELETE_KV_CONFIG from %s: %s %s", conn.peer, header.namespace, header.key)
        self.kv_config.delete(header.namespace, header.key)
        await asyncio.to_thread(self.kv_config.persist)
        return request.response(ResponseCode.SUCCESS)

    async def _delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        log.info("DELETE_TOPIC_IN_NAMESRV from %s: %s (cluster %s)", conn.peer, header.topic, header.cluster_name)
        self.routes.delete_topic(header.topic, header.cluster_name)
        return request.response(ResponseCode.SUCCESS)

    def routed_topic_count(self, broker_name: str) -> int:
        """How many topics this name server routes to ``broker_name``: every topic of this broker's
        table when it is one of the groups listed from it (itself, its ``clusterPeers``: their
        queue data is assumed alike where not registered), plus those registered for it."""
        listed = any(b.broker_name == broker_name for b in self.own_broker_datas())
        topics = set(self.broker.topic_config_manager.table()) if listed else set()
        topics |= {t for t, queues in self.routes.topic_queue_table.items() if broker_name in queues}
        return len(topics)

    async def _wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_name = WipeWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields).broker_name
        count = self.routed_topic_count(broker_name)
        if count:
            self.routes.wipe_write_perm_of_broker(broker_name)
        log.info("WIPE_WRITE_PERM_OF_BROKER from %s: %s, %d topics", conn.peer, broker_name, count)
        return request.response(ResponseCode.SUCCESS, ext_fields=WipeWritePermOfBrokerResponseHeader(
            wipe_topic_count=count).to_ext_fields())

    async def _add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker_name = AddWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields).broker_name
        self.routes.add_write_perm_of_broker(broker_name)
        count = self.routed_topic_count(broker_name)
        log.info("ADD_WRITE_PERM_OF_BROKER from %s: %s, %d topics", conn.peer, broker_name, count)
        return request.response(ResponseCode.SUCCESS, ext_fields=AddWritePermOfBrokerResponseHeader(
            add_topic_count=count).to_ext_fields())

    def config_properties(self) -> dict[str, str]:
        """GET_NAMESRV_CONFIG's keys and values."""
        cfg = self.config
        return {
            "clusterTest": str(cfg.cluster_test).lower(),
            "configBlackList": cfg.config_black_list,
            "configStorePath": str(self.config_path),
            "kvConfigPath": str(self.kv_config.path),
            "listenPort": str(self.port),
            "orderMessageEnable": str(cfg.order_message_enable).lower(),
            "productEnvName": cfg.product_env_name,
        }

    async def _get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = "".join(f"{key}={value}\n" for key, value in self.config_properties().items())
        return request.response(ResponseCode.SUCCESS, body=body.encode("utf-8"))

    async def _update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        if not request.body:
            return request.response(ResponseCode.SUCCESS)
        try:
            props = parse_properties(request.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {exc}")
        if set(props) & self.config.black_list():
            return request.response(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        try:
            changed = self.config.update(props)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        ignored = sorted(set(props) - set(changed))
        log.info("UPDATE_NAMESRV_CONFIG from %s: %s%s", conn.peer, changed,
                 f" (unknown keys ignored: {ignored})" if ignored else "")
        if changed:
            try:
                await asyncio.to_thread(write_config_file, self.config_path,
                                        format_properties(self.config.persisted()), _parses)
            except OSError as exc:
                log.error("UPDATE_NAMESRV_CONFIG: applied but not written to %s: %s", self.config_path, exc)
                return request.response(ResponseCode.SYSTEM_ERROR,
                                        f"applied, but not persisted to {self.config_path}: {exc}")
        return request.response(ResponseCode.SUCCESS)

    def _load_config(self, text: str) -> None:
        """namesrv.properties at start (ValueError for a file that cannot be used)."""
        changed = self.config.update(parse_properties(text))
        log.info("name server config from %s: %s", self.config_path, changed)

    def _unit_topics(self, wanted: Callable[[int], bool]) -> Handler:
        """A handler answering the TopicList of the topics whose sys flag ``wanted`` accepts."""

        def handler(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            topics = [c.topic_name for c in self.broker.topic_config_manager.table().values()
                      if wanted(c.topic_sys_flag)]
            return request.response(ResponseCode.SUCCESS,
                                    body=_topic_list([*topics, *self.routes.topics_with_sys_flag(wanted)]))
        return handler


    # -- brokers registering here ------------------------------------------------------------------
    async def _register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """DefaultRequestProcessor.registerBrokerWithFilterServer (every broker since 3.0.11 sends that form)."""
        header = RegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        if header.body_crc32 != 0 and body_crc(request.body) != header.body_crc32:
            log.warning("REGISTER_BROKER from %s: crc32 not match", conn.peer)
            return request.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if request.body:
            body = RegisterBrokerBody.decode(request.body, header.compressed)
        else:
            body = RegisterBrokerBody(TopicConfigSerializeWrapper(data_version=DataVersion(0, 0)))
        cfg = self.broker.broker_config
        if (header.broker_name, header.broker_id, header.broker_addr) == (
                cfg.broker_name, cfg.broker_id, self.broker.broker_addr):
            # this very broker, through a namesrvPeers list that names every pod of the store: its
            # routes here come from its own tables (a registered copy of its topic table would
            # keep a deleted topic routed), so nothing is kept
            return request.response(ResponseCode.SUCCESS, ext_fields=RegisterBrokerResponseHeader().to_ext_fields())
        response = self.routes.register_broker(
            header.cluster_name, header.broker_addr, header.broker_name, header.broker_id, header.ha_server_addr,
            body.topic_config_serialize_wrapper, body.filter_server_list, conn, now_ms())
        if header.broker_name == cfg.broker_name and header.broker_id != MASTER_ID and cfg.broker_id == MASTER_ID:
            # a slave of this very broker: this broker never registers with its own name server,
            # so the answer naming the master's addresses comes from here
            response = RegisterBrokerResponseHeader(ha_server_addr=self.broker.ha_server_addr,
                                                    master_addr=self.broker.broker_addr)
        self.register_requests += 1
        order_topics = self.kv_config.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.response(ResponseCode.SUCCESS, ext_fields=response.to_ext_fields(),
                                body=KVTable(table=order_topics).encode() if order_topics is not None else b"")

    async def _unregister_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UnRegisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        self.routes.unregister_broker(header.cluster_name, header.broker_addr, header.broker_name, header.broker_id)
        return request.response(ResponseCode.SUCCESS)

    async def _query_data_version(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_ext_fields(request.ext_fields)
        try:
            version = DataVersion.from_dict(parse_fastjson(request.body.decode()))
        except (UnicodeDecodeError, ValueError) as exc:
            raise MalformedRequestError(f"QUERY_DATA_VERSION body is not a DataVersion: {exc}") from None
        changed = self.routes.is_broker_topic_config_changed(header.broker_addr, version)
        if not changed:
            self.routes.update_broker_info_update_timestamp(header.broker_addr, now_ms())
        held = self.routes.query_broker_topic_config(header.broker_addr)
        body = json.dumps(held.to_dict(), separators=(",", ":")).encode() if held is not None else b""
        return request.response(ResponseCode.SUCCESS, body=body,
                                ext_fields=QueryDataVersionResponseHeader(changed=changed).to_ext_fields())


def _parses(data: bytes) -> bool:
    """Whether a namesrv.properties found on disk is worth keeping as the backup."""
    try:
        parse_properties(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def _topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """A TopicList body of ``topics`` (sorted, once each)."""
    return TopicList(topic_list=sorted(set(topics)), broker_addr=broker_addr).encode()
