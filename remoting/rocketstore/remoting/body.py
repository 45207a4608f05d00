"""The admin bodies brokers answer and admin tools read, as RocketMQ 4.9.8 names them.

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

The broker encodes them and the client decodes them, so both sides share one schema; the
codec is :class:`~rocketstore.remoting.headers.JsonBody`'s (fields sorted by name, nulls left out).

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
from rocketstore.remoting.headers import JsonBody, MessageQueueData, SubscriptionData

__all__ = [
    "BrokerStatsData",
    "BrokerStatsItem",
    "ConnectionData",
    "ConsumeStatsBody",
    "ConsumeStatsList",
    "ConsumerConnectionBody",
    "GetConsumerStatusBody",
    "GroupList",
    "KVTable",
    "MessageQueueForC",
    "OffsetWrapperData",
    "ProducerConnection",
    "QueryConsumeTimeSpanBody",
    "QueryCorrectionOffsetBody",
    "QueueTimeSpan",
    "ResetOffsetBody",
    "ResetOffsetBodyForC",
    "TopicList",
    "TopicOffsetData",
    "TopicStatsTable",
]

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
