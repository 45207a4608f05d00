"""BrokerContext: what request processors, the name-server role and the HTTP side port may use
of the broker, and RequestProcessor, the one shape every processor has.

In RocketMQ processors hold the whole BrokerController. Here they get this narrower view, so
they depend on what they use rather than on the controller's module (which imports and
registers them: the processors sit below broker.py, never beside it). BrokerController
satisfies the protocol structurally; the attributes are documented on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Protocol

from prometheus_client.core import Metric

from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.auth.auth_pipeline import AuthPipeline
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.broker_stats import BrokerStats
from rocketstore.broker.client_manager import ConsumerManager, ProducerManager
from rocketstore.broker.config_persist_service import ConfigPersistService
from rocketstore.broker.configuration import Configuration
from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterManager
from rocketstore.broker.replicas_manager import ReplicasManager
from rocketstore.broker.server import Handler, RemotingServer
from rocketstore.broker.slave_synchronize import SlaveSynchronize
from rocketstore.broker.store_waits import StoreWaits
from rocketstore.broker.subscription_group_manager import SubscriptionGroupManager
from rocketstore.broker.topic_config_manager import TopicConfigManager
from rocketstore.broker.transaction.service import TransactionalMessageService
from rocketstore.common.message import HostAddress
from rocketstore.remoting.body import BrokerData
from rocketstore.store.broker_stats_manager import BrokerStatsManager
from rocketstore.store.config import StoreConfig
from rocketstore.store.config_manager import ConsumerOffsetManager
from rocketstore.store.message_store import DefaultMessageStore

#: (topic, queue id, max offset, messages arrived) — see BrokerController.message_arriving_listeners
MessageArrivingListener = Callable[[str, int, int, int], None]


class BrokerContext(Protocol):
    """The broker-wide state and operations shared by processors, name server and HTTP server."""

    broker_config: BrokerConfig
    store_config: StoreConfig
    store: DefaultMessageStore
    store_waits: StoreWaits
    store_host: HostAddress
    topic_config_manager: TopicConfigManager
    subscription_group_manager: SubscriptionGroupManager
    consumer_offset_manager: ConsumerOffsetManager
    slave_synchronize: SlaveSynchronize
    replicas_manager: ReplicasManager | None
    config_persist_service: ConfigPersistService
    configuration: Configuration
    consumer_manager: ConsumerManager
    producer_manager: ProducerManager
    consumer_filter_manager: ConsumerFilterManager
    transactional_message_service: TransactionalMessageService
    broker_stats_manager: BrokerStatsManager
    remoting: RemotingServer
    access_validator: PlainAccessValidator | None
    auth_pipeline: AuthPipeline | None
    message_arriving_listeners: list[MessageArrivingListener]
    shutdown_listeners: list[Callable[[], None]]
    start_time_ms: int
    broker_stats: BrokerStats
    ready: bool
    stopping: bool

    @property
    def broker_addr(self) -> str: ...

    @property
    def ha_server_addr(self) -> str:
        """brokerIP2:haListenPort, where this broker's slaves connect for replication."""
        ...

    @property
    def master_addr(self) -> str | None:
        """A slave's master (remoting address) as the name server last named it; None on a master."""

    def registered_groups(self) -> Mapping[str, BrokerData]:
        """brokerName -> live members of the brokers registered with the embedded name server ({}
        without one): the peers' live picture the gRPC route lists too."""
        ...

    def write_perm_wiped(self) -> Collection[str]:
        """The brokerNames whose write permission the embedded name server routes without
        (WIPE_WRITE_PERM_OF_BROKER; empty without one): the gRPC route drops it too."""
        ...

    def add_gauge(self, name: str, doc: str, read: Callable[[], float]) -> None: ...

    def add_counter(self, name: str, doc: str, read: Callable[[], float]) -> None: ...

    def add_metrics(self, collect: Callable[[], Iterable[Metric]]) -> None: ...


class RequestProcessor(Protocol):
    """A processor answers the request codes :meth:`handlers` maps (built from a BrokerContext
    when it needs the broker); BrokerController registers those handlers on its RemotingServer."""

    def handlers(self) -> Mapping[int, Handler]: ...
