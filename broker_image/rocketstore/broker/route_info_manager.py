"""RouteInfoManager: the routes of brokers that registered with the embedded name server.

RocketMQ's name server knows brokers only through REGISTER_BROKER: each registration carries the
broker's cluster, name, id, address and topic table, and refreshes its liveness. This module keeps
the same tables as RocketMQ 4.9.8's RouteInfoManager, for brokers (Apache's or another
RocketStore's) that register with this broker's name-server role:

* ``topic_queue_table``  topic -> brokerName -> QueueData (from the master's topic table; a
  registration adds and updates queue data, it never removes a topic: RocketMQ's name server
  forgets a topic only when its broker goes away or an admin deletes it);
* ``broker_addr_table``  brokerName -> BrokerData (cluster, brokerId -> address);
* ``cluster_addr_table`` cluster -> brokerNames;
* ``broker_live_table``  address -> last registration time, DataVersion, connection;
* ``filter_server_table`` address -> filter servers.

``write_perm_wiped`` holds the brokerNames whose write permission an admin wiped
(WIPE_WRITE_PERM_OF_BROKER, ``mqadmin wipeWritePerm``) and has not added back
(ADD_WRITE_PERM_OF_BROKER); the name server routes their queue data without PERM_WRITE, so
producers send to the other brokers. RocketMQ's name server clears the bit in the queue data it
holds, so the broker's next registration with a changed topic table (or its first after a
restart or an expiry) brings the write permission back, unless the broker's own
``brokerPermission`` was lowered too; and adding it back sets every queue data read-write,
whatever the topic's own permission. Here the wipe belongs to the brokerName, over whatever it
registers, until added back, and adding back routes the permissions the broker registered. It
lives in memory, as RocketMQ's does: a name server that restarts has forgotten it.

A master's topic table is applied when its DataVersion differs from the one last registered or
when the address is new, as RocketMQ does. A broker is forgotten when it unregisters
(UNREGISTER_BROKER), when the connection it registered over closes, or when it has not
registered for :data:`BROKER_CHANNEL_EXPIRED_TIME_MS` (two minutes; :meth:`scan_not_active_broker`
runs every 10 s). Forgetting the last address of a brokerName removes it from its cluster and
its queue data from every topic, and a topic with no queue data left disappears.

Pure bookkeeping: no I/O. Every method runs on the broker's event loop (the name-server handlers
are inline), so no lock is needed. Connections are opaque keys (the handler's Connection).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from rocketstore.client.remoting_client import MASTER_ID
from rocketstore.common.data_version import DataVersion
from rocketstore.remoting.body import BrokerData, QueueData
from rocketstore.remoting.headers import RegisterBrokerResponseHeader
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper

log = logging.getLogger(__name__)

#: RouteInfoManager.BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long is dropped.
BROKER_CHANNEL_EXPIRED_TIME_MS: Final = 1000 * 60 * 2


@dataclass
class BrokerLiveInfo:
    last_update_timestamp: int
    data_version: DataVersion
    connection: object
    ha_server_addr: str


@dataclass
class RouteInfoManager:
    topic_queue_table: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr_table: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr_table: dict[str, set[str]] = field(default_factory=dict)
    broker_live_table: dict[str, BrokerLiveInfo] = field(default_factory=dict)
    filter_server_table: dict[str, list[str]] = field(default_factory=dict)
    write_perm_wiped: set[str] = field(default_factory=set)

    # -- registration --------------------------------------------------------------------------
    def register_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int,
                        ha_server_addr: str, wrapper: TopicConfigSerializeWrapper, filter_server_list: list[str],
                        connection: object, now_ms: int) -> RegisterBrokerResponseHeader:
        """The answer for the registering broker: a slave learns its master's addresses."""
        self.cluster_addr_table.setdefault(cluster_name, set()).add(broker_name)
        broker_data = self.broker_addr_table.get(broker_name)
        register_first = broker_data is None
        if broker_data is None:
            broker_data = BrokerData(cluster=cluster_name, broker_name=broker_name, broker_addrs={})
            self.broker_addr_table[broker_name] = broker_data
        # a slave turned master: the same address must not stay listed under its old id
        for other_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr and other_id != broker_id:
                del broker_data.broker_addrs[other_id]
        old_addr = broker_data.broker_addrs.get(broker_id)
        broker_data.broker_addrs[broker_id] = broker_addr
        register_first = register_first or old_addr is None

        if broker_id == MASTER_ID and (self.is_broker_topic_config_changed(broker_addr, wrapper.data_version)
                                       or register_first):
            for config in wrapper.topic_config_table.values():
                queue = QueueData(broker_name=broker_name, read_queue_nums=config.read_queue_nums,
                                  write_queue_nums=config.write_queue_nums, perm=config.perm,
                                  topic_sys_flag=config.topic_sys_flag)
                self.topic_queue_table.setdefault(config.topic_name, {})[broker_name] = queue

        previous = self.broker_live_table.get(broker_addr)
        self.broker_live_table[broker_addr] = BrokerLiveInfo(now_ms, wrapper.data_version, connection, ha_server_addr)
        if previous is None:
            log.info("new broker registered: %s (%s of cluster %s, id %d)", broker_addr, broker_name, cluster_name,
                     broker_id)
        if filter_server_list:
            self.filter_server_table[broker_addr] = list(filter_server_list)
        else:
            self.filter_server_table.pop(broker_addr, None)

        if broker_id != MASTER_ID:
            master = broker_data.broker_addrs.get(MASTER_ID)
            live = self.broker_live_table.get(master) if master is not None else None
            if live is not None:
                return RegisterBrokerResponseHeader(ha_server_addr=live.ha_server_addr, master_addr=master)
        return RegisterBrokerResponseHeader()

    def is_broker_topic_config_changed(self, broker_addr: str, version: DataVersion) -> bool:
        live = self.broker_live_table.get(broker_addr)
        return live is None or live.data_version != version

    def query_broker_topic_config(self, broker_addr: str) -> DataVersion | None:
        live = self.broker_live_table.get(broker_addr)
        return None if live is None else live.data_version

    def update_broker_info_update_timestamp(self, broker_addr: str, now_ms: int) -> None:
        live = self.broker_live_table.get(broker_addr)
        if live is not None:
            live.last_update_timestamp = now_ms

    # -- write permission --------------------------------------------------------------------
    def wipe_write_perm_of_broker(self, broker_name: str) -> None:
        """WIPE_WRITE_PERM_OF_BROKER: the broker's queue data are routed without PERM_WRITE until
        :meth:`add_write_perm_of_broker` (the name server masks them when it answers a route)."""
        self.write_perm_wiped.add(broker_name)

    def add_write_perm_of_broker(self, broker_name: str) -> None:
        """ADD_WRITE_PERM_OF_BROKER: the broker's queue data are routed as it registered them again."""
        self.write_perm_wiped.discard(broker_name)

    # -- forgetting ----------------------------------------------------------------------------
    def unregister_broker(self, cluster_name: str, broker_addr: str, broker_name: str, broker_id: int) -> None:
        removed = self.broker_live_table.pop(broker_addr, None)
        log.info("unregister broker %s (%s of cluster %s): %s", broker_addr, broker_name, cluster_name,
                 "was live" if removed is not None else "was not registered")
        self.filter_server_table.pop(broker_addr, None)
        broker_data = self.broker_addr_table.get(broker_name)
        if broker_data is None:
            return
        # by address, not by id (RocketMQ 5's unregisterBroker): a master that hands over and
        # stops unregisters as brokerId 0 after its successor may have registered as 0
        for listed_id, addr in list(broker_data.broker_addrs.items()):
            if addr == broker_addr:
                del broker_data.broker_addrs[listed_id]
        if broker_data.broker_addrs:
            return
        del self.broker_addr_table[broker_name]
        names = self.cluster_addr_table.get(cluster_name)
        if names is not None:
            names.discard(broker_name)
            if not names:
                del self.cluster_addr_table[cluster_name]
        self._remove_topics_of(broker_name)

    def delete_topic(self, topic: str, cluster_name: str | None = None) -> None:
        """RouteInfoManager.deleteTopic: drop the topic's queue data of the brokers of ``cluster_name``
        (the topic goes when none is left), or of every broker when no cluster is named."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return
        if cluster_name:
            for broker_name in self.cluster_addr_table.get(cluster_name, set()):
                if queues.pop(broker_name, None) is not None:
                    log.info("deleteTopic: topic %s removed from broker %s", topic, broker_name)
            if queues:
                return
        del self.topic_queue_table[topic]
        log.info("deleteTopic: topic %s has no queue data left", topic)

    def scan_not_active_broker(self, now_ms: int) -> list[object]:
        """Forget brokers that have not registered for two minutes; their connections, to close."""
        expired = [(addr, live) for addr, live in self.broker_live_table.items()
                   if live.last_update_timestamp + BROKER_CHANNEL_EXPIRED_TIME_MS < now_ms]
        for addr, _ in expired:
            log.warning("broker %s expired: no registration for %d ms", addr, BROKER_CHANNEL_EXPIRED_TIME_MS)
            del self.broker_live_table[addr]
            self._forget_addr(addr)
        return [live.connection for _, live in expired]

    def on_connection_closed(self, connection: object) -> None:
        """The connection a broker registered over closed: forget that broker at once."""
        for addr, live in list(self.broker_live_table.items()):
            if live.connection is connection:
                log.info("connection of broker %s closed: its routes are removed", addr)
                del self.broker_live_table[addr]
                self._forget_addr(addr)

    def _forget_addr(self, broker_addr: str) -> None:
        """RouteInfoManager.onChannelDestroy for one address."""
        self.filter_server_table.pop(broker_addr, None)
        for broker_name, broker_data in list(self.broker_addr_table.items()):
            ids = [i for i, addr in broker_data.broker_addrs.items() if addr == broker_addr]
            if not ids:
                continue
            del broker_data.broker_addrs[ids[0]]
            if not broker_data.broker_addrs:
                del self.broker_addr_table[broker_name]
                for cluster, names in list(self.cluster_addr_table.items()):
                    if broker_name in names:
                        names.discard(broker_name)
                        if not names:
                            del self.cluster_addr_table[cluster]
                        break
                self._remove_topics_of(broker_name)
            return

    def _remove_topics_of(self, broker_name: str) -> None:
        for topic, queues in list(self.topic_queue_table.items()):
            queues.pop(broker_name, None)
            if not queues:
                del self.topic_queue_table[topic]

    # -- reading -------------------------------------------------------------------------------
    def pickup_topic_route(self, topic: str) -> tuple[list[QueueData], list[BrokerData],
                                                      dict[str, list[str]]] | None:
        """The topic's queue data, the brokers holding them and their filter servers; None when
        no registered broker has the topic (or none of its brokers is known)."""
        queues = self.topic_queue_table.get(topic)
        if not queues:
            return None
        brokers: list[BrokerData] = []
        filter_servers: dict[str, list[str]] = {}
        for broker_name in queues:
            data = self.broker_addr_table.get(broker_name)
            if data is None:
                continue
            brokers.append(BrokerData(cluster=data.cluster, broker_name=data.broker_name,
                                      broker_addrs=dict(data.broker_addrs)))
            for addr in data.broker_addrs.values():
                if addr in self.filter_server_table:
                    filter_servers[addr] = list(self.filter_server_table[addr])
        if not brokers:
            return None
        return list(queues.values()), brokers, filter_servers

    def topics_with_sys_flag(self, wanted: Callable[[int], bool]) -> set[str]:
        """Topics whose (first) queue data has a TopicSysFlag ``wanted`` accepts, as
        RouteInfoManager.topicQueueTableIter looks at one queue data per topic."""
        return {topic for topic, queues in self.topic_queue_table.items()
                if queues and wanted(next(iter(queues.values())).topic_sys_flag)}

    def topics_of_cluster(self, cluster: str) -> set[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return {topic for topic, queues in self.topic_queue_table.items() if names & queues.keys()}
