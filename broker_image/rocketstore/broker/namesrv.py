"""The embedded name-server role: routes for this broker and its cluster peers.

RocketMQ clients are given a name-server address (``namesrvAddr``) and ask it where a topic
lives before talking to any broker. Instead of a separate name-server process to which brokers
register, each RocketStore broker answers those questions itself on a second remoting listener
(``namesrvListenPort``, 9876 by default), from its own topic table:

* ``GET_ROUTEINFO_BY_TOPIC`` (105): TopicRouteData for a topic this broker knows (``%RETRY%``
  and ``%DLQ%`` topics included once they exist); a queueData and a brokerData for this broker
  and for every broker of ``clusterPeers``. A peer is assumed to carry the same topic config
  as this broker (the operator configures the brokers of a cluster alike). An unknown topic is
  TOPIC_NOT_EXIST with the remark RocketMQ's name server sends; nothing is auto-created here
  (a producer then sends with defaultTopic TBW102, whose route exists while
  autoCreateTopicEnable is on, and the broker creates the topic on the first send).
* ``GET_BROKER_CLUSTER_INFO`` (106): ClusterInfo of this broker and its peers.
* ``GET_ALL_TOPIC_LIST_FROM_NAMESERVER`` (206), ``GET_TOPICS_BY_CLUSTER`` (224),
  ``GET_SYSTEM_TOPIC_LIST_FROM_NS`` (304): TopicList bodies.
* ``GET_KV_CONFIG`` (101) / ``GET_KVLIST_BY_NAMESPACE`` (219): there is no KV store, so
  QUERY_NOT_FOUND with RocketMQ's remarks (clients treat that as "not configured").

A broker whose ``brokerPermission`` lacks read or write publishes that permission for every
topic, as RocketMQ's registerBrokerAll does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.server import Connection, RemotingServer
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import TopicList
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    BrokerData,
    ClusterInfo,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    GetTopicsByClusterRequestHeader,
    QueueData,
    TopicRouteData,
)

log = logging.getLogger(__name__)

MASTER_ID = 0
#: FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL), appended to RocketMQ's TOPIC_NOT_EXIST remark.
APPLY_TOPIC_HINT = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NameServer:
    """Answers name-server requests from the broker's own tables."""

    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.server = RemotingServer(host, port, tls=broker.remoting.tls)  # RocketMQ's name server: same TLS
        self.server.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route_info)
        self.server.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        self.server.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._all_topics)
        self.server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self._topics_by_cluster)
        self.server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, self._system_topics)
        self.server.register(RequestCode.GET_KV_CONFIG, self._kv_config)
        self.server.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self._kv_list)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace_s: float = 10.0) -> None:
        await self.server.stop(grace_s)

    # -- the data ----------------------------------------------------------------------------------
    def broker_datas(self) -> list[BrokerData]:
        """This broker first, then the peers in ``clusterPeers`` order."""
        cfg = self.broker.broker_config
        datas = [BrokerData(cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                            broker_addrs={cfg.broker_id: self.broker.broker_addr})]
        for peer in cfg.cluster_peer_list():
            if peer.broker_name != cfg.broker_name:
                datas.append(BrokerData(cluster=cfg.broker_cluster_name, broker_name=peer.broker_name,
                                        broker_addrs={MASTER_ID: peer.addr}))
        return datas

    def _perm(self, topic: TopicConfig, own: bool) -> int:
        broker_perm = self.broker.broker_config.broker_permission
        if own and (not broker_perm & PERM_READ or not broker_perm & PERM_WRITE):
            return broker_perm
        return topic.perm

    def route(self, topic: str) -> TopicRouteData | None:
        config = self.broker.topic_config_manager.get(topic)
        if config is None:
            return None
        brokers = self.broker_datas()
        queues = [
            QueueData(broker_name=b.broker_name, read_queue_nums=config.read_queue_nums,
                      write_queue_nums=config.write_queue_nums, perm=self._perm(config, i == 0),
                      topic_sys_flag=config.topic_sys_flag)
            for i, b in enumerate(brokers)
        ]
        return TopicRouteData(queue_datas=queues, broker_datas=brokers, filter_server_table={})

    def cluster_info(self) -> ClusterInfo:
        brokers = self.broker_datas()
        return ClusterInfo(
            broker_addr_table={b.broker_name: b for b in brokers},
            cluster_addr_table={self.broker.broker_config.broker_cluster_name: [b.broker_name for b in brokers]},
        )

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
        return request.response(ResponseCode.SUCCESS, body=_topic_list(self.broker.topic_config_manager.table()))

    async def _topics_by_cluster(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        cluster = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields).cluster
        topics = self.broker.topic_config_manager.table() if cluster == self.broker.broker_config.broker_cluster_name \
            else []
        return request.response(ResponseCode.SUCCESS, body=_topic_list(topics))

    async def _system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # RocketMQ's getSystemTopicList: every cluster name and broker name, plus one broker address.
        brokers = self.broker_datas()
        names = [self.broker.broker_config.broker_cluster_name, *(b.broker_name for b in brokers)]
        return request.response(ResponseCode.SUCCESS, body=_topic_list(names, self.broker.broker_addr))

    async def _kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        return request.response(ResponseCode.QUERY_NOT_FOUND,
                                f"No config item, Namespace: {header.namespace} Key: {header.key}")

    async def _kv_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        namespace = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields).namespace
        return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace}")


def _topic_list(topics: Iterable[str], broker_addr: str | None = None) -> bytes:
    """A TopicList body of ``topics`` (sorted, once each)."""
    return TopicList(topic_list=sorted(set(topics)), broker_addr=broker_addr).encode()
