"""The JSON bodies broker, name server and clients exchange, as RocketMQ 4.9.8 names them.

RocketMQ keeps its ``RemotingSerializable`` payloads together in ``protocol/body/*`` (and a few,
like HeartbeatData and TopicRouteData, in ``protocol/heartbeat`` and ``protocol/route``); this is
that package: schemas only, every body type once. The broker encodes them and the client decodes
them (or the other way round), so both sides share one schema; the codec is
:class:`~rocketstore.remoting.body_codec.JsonBody`'s (fields sorted by name, nulls left out).
RegisterBrokerBody, whose compressed form is not JSON, is :mod:`rocketstore.remoting.register_broker_body`.

Client registration, queue locks and routes:

    HeartbeatData         HEART_BEAT                    a client's producer and consumer groups
    LockBatchRequestBody  LOCK_BATCH_MQ / UNLOCK_BATCH_MQ  the queues an orderly consumer locks
    GetConsumerListByGroupResponseBody GET_CONSUMER_LIST_BY_GROUP  the client ids of a group
    TopicRouteData        GET_ROUTEINFO_BY_TOPIC        a topic's queues and brokers
    ClusterInfo           GET_BROKER_CLUSTER_INFO       brokers by name, broker names by cluster

Admin bodies, which brokers answer and admin tools read:

    KVTable               GET_BROKER_RUNTIME_INFO       ``{"table":{"key":"value",...}}``
    TopicStatsTable       GET_TOPIC_STATS_INFO          per queue: min/max offset, last store time
    ConsumeStatsBody      GET_CONSUME_STATS             per queue: broker and consumer offset
    ConsumerConnectionBody GET_CONSUMER_CONNECTION_LIST a group's connections and subscriptions
    GroupList             QUERY_TOPIC_CONSUME_BY_WHO    ``{"groupList":[...]}``
    TopicList             the name server's topic lists ``{"brokerAddr":...,"topicList":[...]}``
    ProducerConnection    GET_PRODUCER_CONNECTION_LIST  a producer group's connections
    ResetOffsetBody       INVOKE_BROKER_TO_RESET_OFFSET / RESET_CONSUMER_CLIENT_OFFSET: offset per queue
    ResetOffsetBodyForC   the same for C++ clients: a list of MessageQueueForC
    GetConsumerStatusBody INVOKE_BROKER_TO_GET_CONSUMER_STATUS: offsets per client id
    ConsumeStatsList      GET_BROKER_CONSUME_STATS      ConsumeStats of every group, by group
    QueryConsumeTimeSpanBody QUERY_CONSUME_TIME_SPAN    per queue: first, last, consumed message times
    QueryCorrectionOffsetBody QUERY_CORRECTION_OFFSET   queue id -> offset
    BrokerStatsData       VIEW_BROKER_STATS_DATA        sum, tps, avgpt over a minute, an hour, a day
    HARuntimeInfo         GET_BROKER_HA_STATUS (5.x)    a master's slaves (acked offset, diff, in sync)
                                                        or a slave's HA client (master, max offset)

TopicStatsTable and ConsumeStats hold a ``Map<MessageQueue, ...>``, which fastjson writes with
the key *object* in key position, not a string:
``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"lastUpdateTimestamp":0,...}}}``.
That is not JSON, but it is what RocketMQ's admin tools parse, so it is what brokers send;
:func:`rocketstore.common.fastjson.parse_fastjson_object_keys` reads it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rocketstore.common.fastjson import parse_fastjson_object_keys
from rocketstore.remoting.body_codec import JsonBody
from rocketstore.remoting.wire_fields import wire

__all__ = [
    "BrokerData",
    "BrokerStatsData",
    "BrokerStatsItem",
    "ClusterInfo",
    "ConnectionData",
    "ConsumeStatsBody",
    "ConsumeStatsList",
    "ConsumerConnectionBody",
    "ConsumerData",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerStatusBody",
    "GroupList",
    "HAClientRuntimeInfo",
    "HAConnectionRuntimeInfo",
    "HARuntimeInfo",
    "HeartbeatData",
    "KVTable",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageQueueData",
    "MessageQueueForC",
    "OffsetWrapperData",
    "ProducerConnection",
    "ProducerData",
    "QueryConsumeTimeSpanBody",
    "QueryCorrectionOffsetBody",
    "QueueData",
    "QueueTimeSpan",
    "ResetOffsetBody",
    "ResetOffsetBodyForC",
    "SubscriptionData",
    "SyncStateSet",
    "TopicList",
    "TopicOffsetData",
    "TopicRouteData",
    "TopicStatsTable",
    "UnlockBatchRequestBody",
]


# -- client registration, queue locks and routes ---------------------------------------------------


@dataclasses.dataclass(kw_only=True, slots=True)
class ProducerData(JsonBody):
    group_name: str


@dataclasses.dataclass(kw_only=True, slots=True)
class SubscriptionData(JsonBody):
    topic: str
    sub_string: str
    class_filter_mode: bool = False
    tags_set: list[str] = dataclasses.field(default_factory=list)
    code_set: list[int] = dataclasses.field(default_factory=list)
    sub_version: int = 0
    expression_type: str = "TAG"


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumerData(JsonBody):
    group_name: str
    consume_type: str | None = None  # CONSUME_ACTIVELY (pull) or CONSUME_PASSIVELY (push)
    message_model: str | None = None  # CLUSTERING or BROADCASTING
    consume_from_where: str | None = None  # e.g. CONSUME_FROM_LAST_OFFSET
    subscription_data_set: list[SubscriptionData] = dataclasses.field(default_factory=list)
    unit_mode: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class HeartbeatData(JsonBody):
    client_id: str = dataclasses.field(metadata=wire("clientID"))
    producer_data_set: list[ProducerData] = dataclasses.field(default_factory=list)
    consumer_data_set: list[ConsumerData] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MessageQueueData(JsonBody):
    """RocketMQ's MessageQueue as it appears inside bodies (hashable: admin bodies key maps by it)."""

    topic: str
    broker_name: str
    queue_id: int


@dataclasses.dataclass(kw_only=True, slots=True)
class LockBatchRequestBody(JsonBody):
    consumer_group: str
    client_id: str
    mq_set: list[MessageQueueData] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class LockBatchResponseBody(JsonBody):
    lock_ok_mq_set: list[MessageQueueData] = dataclasses.field(default_factory=list, metadata=wire("lockOKMQSet"))


@dataclasses.dataclass(kw_only=True, slots=True)
class UnlockBatchRequestBody(JsonBody):
    consumer_group: str
    client_id: str
    mq_set: list[MessageQueueData] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerListByGroupResponseBody(JsonBody):
    consumer_id_list: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class QueueData(JsonBody):
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class BrokerData(JsonBody):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = dataclasses.field(default_factory=dict)  # broker id (0 = master) -> host:port


@dataclasses.dataclass(kw_only=True, slots=True)
class TopicRouteData(JsonBody):
    order_topic_conf: str | None = None
    queue_datas: list[QueueData] = dataclasses.field(default_factory=list)
    broker_datas: list[BrokerData] = dataclasses.field(default_factory=list)
    filter_server_table: dict[str, list[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True, slots=True)
class ClusterInfo(JsonBody):
    broker_addr_table: dict[str, BrokerData] = dataclasses.field(default_factory=dict)
    cluster_addr_table: dict[str, list[str]] = dataclasses.field(default_factory=dict)


# -- admin ------------------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True, slots=True)
class KVTable(JsonBody):
    table: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True, slots=True)
class TopicOffsetData(JsonBody):
    """TopicStatsTable's TopicOffset: one queue's offsets and its last message's store time."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class TopicStatsTable(JsonBody):
    offset_table: dict[MessageQueueData, TopicOffsetData] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse_text(cls, text: str) -> Any:
        return parse_fastjson_object_keys(text)


@dataclasses.dataclass(kw_only=True, slots=True)
class OffsetWrapperData(JsonBody):
    """ConsumeStats' OffsetWrapper: the broker's and the group's offset of one queue."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumeStatsBody(JsonBody):
    """RocketMQ's ConsumeStats."""

    consume_tps: float = 0.0
    offset_table: dict[MessageQueueData, OffsetWrapperData] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse_text(cls, text: str) -> Any:
        return parse_fastjson_object_keys(text)


@dataclasses.dataclass(kw_only=True, slots=True)
class ConnectionData(JsonBody):
    """RocketMQ's Connection: one client of a group."""

    client_id: str
    client_addr: str
    language: str  # LanguageCode name
    version: int


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumerConnectionBody(JsonBody):
    """RocketMQ's ConsumerConnection."""

    connection_set: list[ConnectionData] = dataclasses.field(default_factory=list)
    subscription_table: dict[str, SubscriptionData] = dataclasses.field(default_factory=dict)
    consume_type: str | None = None
    message_model: str | None = None
    consume_from_where: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class GroupList(JsonBody):
    group_list: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class TopicList(JsonBody):
    topic_list: list[str] = dataclasses.field(default_factory=list)
    broker_addr: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class ProducerConnection(JsonBody):
    connection_set: list[ConnectionData] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class ResetOffsetBody(JsonBody):
    offset_table: dict[MessageQueueData, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse_text(cls, text: str) -> Any:
        return parse_fastjson_object_keys(text)


@dataclasses.dataclass(kw_only=True, slots=True)
class MessageQueueForC(JsonBody):
    topic: str
    broker_name: str
    queue_id: int
    offset: int


@dataclasses.dataclass(kw_only=True, slots=True)
class ResetOffsetBodyForC(JsonBody):
    """What C++ clients are sent instead of ResetOffsetBody (they cannot parse object keys)."""

    offset_table: list[MessageQueueForC] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerStatusBody(JsonBody):
    """A client's answer (``messageQueueTable``) and the broker's collection of them by client
    id (``consumerTable``)."""

    message_queue_table: dict[MessageQueueData, int] = dataclasses.field(default_factory=dict)
    consumer_table: dict[str, dict[MessageQueueData, int]] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse_text(cls, text: str) -> Any:
        return parse_fastjson_object_keys(text)


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumeStatsList(JsonBody):
    """GET_BROKER_CONSUME_STATS: ``[{group: [ConsumeStats per topic]}, ...]`` and their total lag."""

    consume_stats_list: list[dict[str, list[ConsumeStatsBody]]] = dataclasses.field(default_factory=list)
    broker_addr: str | None = None
    total_diff: int = 0

    @classmethod
    def parse_text(cls, text: str) -> Any:
        return parse_fastjson_object_keys(text)


@dataclasses.dataclass(kw_only=True, slots=True)
class QueueTimeSpan(JsonBody):
    message_queue: MessageQueueData
    min_time_stamp: int = 0
    max_time_stamp: int = 0
    consume_time_stamp: int = 0
    delay_time: int = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryConsumeTimeSpanBody(JsonBody):
    consume_time_span_set: list[QueueTimeSpan] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryCorrectionOffsetBody(JsonBody):
    correction_offsets: dict[int, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True, slots=True)
class BrokerStatsItem(JsonBody):
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


@dataclasses.dataclass(kw_only=True, slots=True)
class BrokerStatsData(JsonBody):
    stats_minute: BrokerStatsItem = dataclasses.field(default_factory=BrokerStatsItem)
    stats_hour: BrokerStatsItem = dataclasses.field(default_factory=BrokerStatsItem)
    stats_day: BrokerStatsItem = dataclasses.field(default_factory=BrokerStatsItem)


@dataclasses.dataclass(kw_only=True, slots=True)
class HAConnectionRuntimeInfo(JsonBody):
    """One slave connection of a master: ``diff`` is the master's put position minus ``slaveAckOffset``."""

    addr: str = ""
    slave_ack_offset: int = 0
    diff: int = 0
    in_sync: bool = False
    transferred_byte_in_second: int = 0
    transfer_from_where: int = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class HAClientRuntimeInfo(JsonBody):
    """A slave's HA client (fastjson names the boolean ``isActivated`` field ``activated``)."""

    master_addr: str | None = None
    transferred_byte_in_second: int = 0
    max_offset: int = 0
    last_read_timestamp: int = 0
    last_write_timestamp: int = 0
    master_flush_offset: int = 0
    activated: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class HARuntimeInfo(JsonBody):
    master: bool = False
    master_commit_log_max_offset: int = 0
    in_sync_slave_nums: int = 0
    ha_connection_info: list[HAConnectionRuntimeInfo] = dataclasses.field(default_factory=list)
    ha_client_runtime_info: HAClientRuntimeInfo = dataclasses.field(default_factory=HAClientRuntimeInfo)


@dataclasses.dataclass(kw_only=True, slots=True)
class SyncStateSet(JsonBody):
    """RocketMQ 5's controller mode: a group's in-sync broker ids and the set's epoch
    (CONTROLLER_ALTER_SYNC_STATE_SET's request and answer, CONTROLLER_GET_REPLICA_INFO's and
    CONTROLLER_REGISTER_BROKER's answers, NOTIFY_BROKER_ROLE_CHANGED)."""

    sync_state_set: list[int] = dataclasses.field(default_factory=list)
    sync_state_set_epoch: int = 0
