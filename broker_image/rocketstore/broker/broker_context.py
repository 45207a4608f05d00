"""BrokerContext: what request processors, the name-server role and the HTTP side port may use
of the broker, and RequestProcessor, the one shape every processor has.

In RocketMQ processors hold the whole BrokerController. Here they get this narrower view, so
they depend on what they use rather than on the controller's module (which imports and
registers them: the processors sit below broker.py, never beside it). BrokerController
satisfies the protocol structurally; the attributes are documented on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import Metric

from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.broker_stats import BrokerStats
from rocketstore.broker.client_manager import ConsumerManager, ProducerManager
from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterManager
from rocketstore.broker.server import Handler, RemotingServer
from rocketstore.broker.transaction.service import TransactionalMessageService
from rocketstore.common.data_version import DataVersion
from rocketstore.common.message import HostAddress
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig
from rocketstore.store.broker_stats_manager import BrokerStatsManager
from rocketstore.store.config import StoreConfig
from rocketstore.store.config_manager import (
    ConfigManager,
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from rocketstore.store.message_store import DefaultMessageStore

#: (topic, queue id, max offset, messages arrived) — see BrokerController.message_arriving_listeners
MessageArrivingListener = Callable[[str, int, int, int], None]


class BrokerContext(Protocol):
    """The broker-wide state and operations shared by processors, name server and HTTP server."""

    broker_config: BrokerConfig
    store_config: StoreConfig
    store: DefaultMessageStore
    store_host: HostAddress
    topic_config_manager: TopicConfigManager
    subscription_group_manager: SubscriptionGroupManager
    consumer_offset_manager: ConsumerOffsetManager
    consumer_manager: ConsumerManager
    producer_manager: ProducerManager
    consumer_filter_manager: ConsumerFilterManager
    transactional_message_service: TransactionalMessageService
    broker_stats_manager: BrokerStatsManager
    remoting: RemotingServer
    access_validator: PlainAccessValidator | None
    message_arriving_listeners: list[MessageArrivingListener]
    shutdown_listeners: list[Callable[[], None]]
    config_version: DataVersion
    start_time_ms: int
    broker_stats: BrokerStats
    ready: bool
    stopping: bool

    @property
    def broker_addr(self) -> str: ...

    def topic_config_for_send(self, topic: str, default_topic: str, default_queue_nums: int,
                              sys_flag: int) -> TopicConfig | None: ...

    def create_topic_in_send_back(self, topic: str, queue_nums: int, perm: int, sys_flag: int) -> TopicConfig: ...

    def subscription_group(self, group: str) -> SubscriptionGroupConfig | None: ...

    def is_system_topic(self, topic: str) -> bool: ...

    def tables_changed(self, *managers: ConfigManager) -> None: ...

    def all_config_properties(self) -> dict[str, str]: ...

    def update_config(self, props: Mapping[str, str]) -> dict[str, str]: ...

    def add_gauge(self, name: str, doc: str, read: Callable[[], float]) -> None: ...

    def add_counter(self, name: str, doc: str, read: Callable[[], float]) -> None: ...

    def add_metrics(self, collect: Callable[[], Iterable[Metric]]) -> None: ...


class RequestProcessor(Protocol):
    """A processor answers the request codes :meth:`handlers` maps (built from a BrokerContext
    when it needs the broker); BrokerController registers those handlers on its RemotingServer."""

    def handlers(self) -> Mapping[int, Handler]: ...
