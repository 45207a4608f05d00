"""Typed request/response headers (a command's ``extFields``) and JSON bodies, as RocketMQ 4.9.8 names them.

Headers are dataclasses whose fields carry their wire names; one generic codec turns
``extFields`` (strings only) into typed values and back, the way RocketMQ's
``RemotingCommand.decodeCommandCustomHeader`` / ``makeCustomHeaderToNet`` do:

* integers parse like Java's ``Integer.parseInt`` / ``Long.parseLong`` (ASCII digits, optional
  sign, range checked against the Java type: :data:`Int32` or :data:`Int64`);
* booleans like ``Boolean.parseBoolean`` ("true" in any case is true, anything else false);
* a field without a default is required (``@CFNotNull`` in Java); an absent optional field keeps
  its default (``None`` for Java's nullable wrappers); ``None`` values are left out on encode.

Unlike Java, which logs and skips a field that does not parse, a bad value raises
:class:`~remoting.command.MalformedRequestError` naming the header and the field.

Bodies (:class:`JsonBody` subclasses) are RocketMQ's ``RemotingSerializable`` payloads, fastjson
text. Decoding is as lenient as fastjson about what real clients send (the C++ client sends
``subVersion`` as a string; absent fields take their defaults; unknown fields are ignored);
encoding writes fastjson's shape: fields sorted by name, nulls left out, and integer map keys
unquoted (``"brokerAddrs":{0:"host:port"}``), which the Java, C++ and Go clients all parse (the
Go client splits that map's text on ',' and ':' itself, so the output has no blanks).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Self, get_args, get_origin, get_type_hints

from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_number import JAVA_RANGES, SIGNS, parse_java_int
from rocketstore.common.native import NATIVE
from rocketstore.remoting.command import MalformedRequestError

__all__ = [
    "BrokerData",
    "CloneGroupOffsetRequestHeader",
    "ClusterInfo",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerData",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "GetBrokerConfigResponseHeader",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerListByGroupResponseBody",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "Header",
    "HeartbeatData",
    "Int32",
    "Int64",
    "JsonBody",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageQueueData",
    "NotifyConsumerIdsChangedRequestHeader",
    "ProducerData",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "PutKVConfigRequestHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryCorrectionOffsetHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "QueueData",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "SubscriptionData",
    "TopicRouteData",
    "UnRegisterBrokerRequestHeader",
    "UnlockBatchRequestBody",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewBrokerStatsDataRequestHeader",
    "ViewMessageRequestHeader",
    "wire",
]

# Java's Integer and Long; the codec range-checks against them.
Int32 = Annotated[int, "i32"]
Int64 = Annotated[int, "i64"]
_RANGES = JAVA_RANGES
_SIGNS = SIGNS
_WIRE = "wire"


def wire(name: str) -> dict[str, str]:
    """Field metadata for a wire name that is not the camelCase of the attribute name."""
    return {_WIRE: name}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _wire_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get(_WIRE) or _camel(f.name))


def _unwrap_optional(hint: Any) -> tuple[Any, bool]:
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


# -- headers -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _HeaderField:
    attr: str
    wire: str
    kind: str  # "str", "bool", "i32" or "i64"
    required: bool


_HEADER_FIELDS: dict[type, tuple[_HeaderField, ...]] = {}


def _header_fields(cls: type) -> tuple[_HeaderField, ...]:
    cached = _HEADER_FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        hint, _ = _unwrap_optional(hints[f.name])
        if get_origin(hint) is Annotated:
            kind = str(hint.__metadata__[0])
        elif hint is str:
            kind = "str"
        elif hint is bool:
            kind = "bool"
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: header fields are str, bool, Int32 or Int64, not {hint!r}")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append(_HeaderField(f.name, _wire_name(f), kind, required))
    _HEADER_FIELDS[cls] = result = tuple(specs)
    return result


# What Header._decode walks per field: (attr, wire name, kind, required, low, high), with
# kind 0 = str, 1 = bool, 2 = integer in low..high. Built once per (header class, name map).
_DecodeStep = tuple[str, str, int, bool, int, int]
_KIND_STR, _KIND_BOOL, _KIND_INT = 0, 1, 2
_DECODE_PLANS: dict[tuple[type, int], tuple[Mapping[str, str] | None, tuple[_DecodeStep, ...]]] = {}


def _decode_plan(cls: type, names: Mapping[str, str] | None) -> tuple[_DecodeStep, ...]:
    """The field steps of ``cls`` under ``names`` (None: the wire names), cached.

    Keyed by the identity of ``names`` (the name maps are module constants, so the cache stays
    tiny); the entry keeps the map itself, so its id cannot be reused by another object while
    cached, and the identity check below guards the lookup anyway.
    """
    key = (cls, id(names))
    cached = _DECODE_PLANS.get(key)
    if cached is not None and cached[0] is names:
        return cached[1]
    steps = []
    for spec in _header_fields(cls):
        name = spec.wire if names is None else names[spec.attr]
        if spec.kind == "str":
            steps.append((spec.attr, name, _KIND_STR, spec.required, 0, 0))
        elif spec.kind == "bool":
            steps.append((spec.attr, name, _KIND_BOOL, spec.required, 0, 0))
        else:
            low, high = _RANGES[spec.kind]
            steps.append((spec.attr, name, _KIND_INT, spec.required, low, high))
    plan = tuple(steps)
    _DECODE_PLANS[key] = (names, plan)
    return plan


def decode_fields_python(fields: Mapping[str, str], plan: tuple[_DecodeStep, ...], label: str) -> dict[str, Any]:
    """The field values a decode plan reads from ``fields``; raises naming the first bad field.

    The reference decoder. It runs for every request (14 fields for a send), so the per-field
    work is a cached plan and Java's integer syntax is checked inline (as parse_java_int does).
    """
    values: dict[str, Any] = {}
    get = fields.get
    for attr, name, kind, required, low, high in plan:
        raw = get(name)
        if raw is None:
            if required:
                raise MalformedRequestError(f"{label} header field {name!r} is missing")
            continue
        if not isinstance(raw, str):
            raise MalformedRequestError(f"{label} header field {name!r} must be a string, got {raw!r}")
        if kind == _KIND_STR:
            values[attr] = raw
        elif kind == _KIND_BOOL:
            values[attr] = raw.lower() == "true"
        else:
            digits = raw[1:] if raw[:1] in _SIGNS else raw
            if digits.isascii() and digits.isdigit() and low <= (number := int(raw)) <= high:
                values[attr] = number
            else:
                what = "an integer" if high == _RANGES["i32"][1] else "a long integer"
                raise MalformedRequestError(f"{label} header field {name!r} must be {what}, got {raw!r}")
    return values


def _decode_fields_native(fields: Mapping[str, str], plan: tuple[_DecodeStep, ...], label: str) -> dict[str, Any]:
    """The Rust plan executor for headers that decode cleanly; Python for the rest (and its errors)."""
    assert NATIVE is not None
    values: dict[str, Any] | None = NATIVE.decode_header_fields(fields, plan)
    return decode_fields_python(fields, plan, label) if values is None else values


_decode_fields = _decode_fields_native if NATIVE is not None else decode_fields_python


class Header:
    """Base of the typed headers: decode from and encode to ``extFields``."""

    __slots__ = ()
    #: What error messages call this header, e.g. "PULL_MESSAGE" or "PULL_MESSAGE response".
    LABEL: ClassVar[str] = ""

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        return cls._decode(fields, None, cls.LABEL)

    def to_ext_fields(self) -> dict[str, str]:
        return self._encode(None)

    @classmethod
    def _decode(cls, fields: Mapping[str, str], names: Mapping[str, str] | None, label: str) -> Self:
        return cls(**_decode_fields(fields, _decode_plan(cls, names), label))

    def _encode(self, names: Mapping[str, str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in _header_fields(type(self)):
            value = getattr(self, spec.attr)
            if value is None:
                continue
            name = spec.wire if names is None else names[spec.attr]
            out[name] = _java_bool(value) if isinstance(value, bool) else str(value)
        return out




@dataclasses.dataclass(kw_only=True, slots=True)
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) with long names; SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) with a..n."""

    LABEL: ClassVar[str] = "SEND_MESSAGE"
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int32
    queue_id: Int32
    sys_flag: Int32
    born_timestamp: Int64
    flag: Int32
    properties: str | None = None
    reconsume_times: Int32 | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: Int32 | None = None
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))

    @classmethod
    def from_v2_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        return cls._decode(fields, _SEND_V2_NAMES, "SEND_MESSAGE_V2")

    def to_v2_ext_fields(self) -> dict[str, str]:
        return self._encode(_SEND_V2_NAMES)


# SendMessageRequestHeaderV2's one-letter names (createSendMessageRequestHeaderV1 in 4.9.8).
_SEND_V2_NAMES: Mapping[str, str] = types.MappingProxyType({
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
    "broker_name": "n",
})


@dataclasses.dataclass(kw_only=True, slots=True)
class SendMessageResponseHeader(Header):
    LABEL: ClassVar[str] = "SEND_MESSAGE response"
    msg_id: str
    queue_id: Int32
    queue_offset: Int64
    transaction_id: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326): the reply's send header plus where and when it was stored.

    ``born_host`` / ``store_host`` are ``address:port`` text (no brackets around an IPv6 address,
    as Java's ``getHostAddress()`` prints it)."""

    LABEL: ClassVar[str] = "PUSH_REPLY_MESSAGE_TO_CLIENT"
    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int32
    queue_id: Int32
    sys_flag: Int32
    born_timestamp: Int64
    flag: Int32
    properties: str | None = None
    reconsume_times: Int32 | None = None
    unit_mode: bool = False
    born_host: str
    store_host: str
    store_timestamp: Int64


class PullSysFlag(enum.IntFlag):
    """PullMessageRequestHeader.sysFlag bits (PullSysFlag.java)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10


@dataclasses.dataclass(kw_only=True, slots=True)
class PullMessageRequestHeader(Header):
    LABEL: ClassVar[str] = "PULL_MESSAGE"
    consumer_group: str
    topic: str
    queue_id: Int32
    queue_offset: Int64
    max_msg_nums: Int32
    sys_flag: Int32
    commit_offset: Int64
    suspend_timeout_millis: Int64
    subscription: str | None = None
    sub_version: Int64
    expression_type: str | None = None
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class PullMessageResponseHeader(Header):
    LABEL: ClassVar[str] = "PULL_MESSAGE response"
    suggest_which_broker_id: Int64
    next_begin_offset: Int64
    min_offset: Int64
    max_offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryConsumerOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "QUERY_CONSUMER_OFFSET"
    consumer_group: str
    topic: str
    queue_id: Int32
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryConsumerOffsetResponseHeader(Header):
    LABEL: ClassVar[str] = "QUERY_CONSUMER_OFFSET response"
    offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class UpdateConsumerOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "UPDATE_CONSUMER_OFFSET"
    consumer_group: str
    topic: str
    queue_id: Int32
    commit_offset: Int64
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class GetMaxOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_MAX_OFFSET"
    topic: str
    queue_id: Int32
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class GetMaxOffsetResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_MAX_OFFSET response"
    offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class GetMinOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_MIN_OFFSET"
    topic: str
    queue_id: Int32
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class GetMinOffsetResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_MIN_OFFSET response"
    offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class SearchOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "SEARCH_OFFSET_BY_TIMESTAMP"
    topic: str
    queue_id: Int32
    timestamp: Int64
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class SearchOffsetResponseHeader(Header):
    LABEL: ClassVar[str] = "SEARCH_OFFSET_BY_TIMESTAMP response"
    offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class GetEarliestMsgStoretimeRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_EARLIEST_MSG_STORETIME"
    topic: str
    queue_id: Int32
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class GetEarliestMsgStoretimeResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_EARLIEST_MSG_STORETIME response"
    timestamp: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class ViewMessageRequestHeader(Header):
    LABEL: ClassVar[str] = "VIEW_MESSAGE_BY_ID"
    offset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryMessageRequestHeader(Header):
    LABEL: ClassVar[str] = "QUERY_MESSAGE"
    topic: str
    key: str
    max_num: Int32
    begin_timestamp: Int64
    end_timestamp: Int64
    #: MixAll.UNIQUE_MSG_QUERY_FLAG, which the client adds to the header's fields: ``key`` is a
    #: message's unique key, so the broker answers up to its defaultQueryMaxNum messages
    unique_key_query: bool | None = dataclasses.field(default=None, metadata=wire("_UNIQUE_KEY_QUERY"))


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryMessageResponseHeader(Header):
    LABEL: ClassVar[str] = "QUERY_MESSAGE response"
    index_last_update_timestamp: Int64
    index_last_update_phyoffset: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumerSendMsgBackRequestHeader(Header):
    LABEL: ClassVar[str] = "CONSUMER_SEND_MSG_BACK"
    offset: Int64
    group: str
    delay_level: Int32
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int32 | None = None
    broker_name: str | None = dataclasses.field(default=None, metadata=wire("bname"))


@dataclasses.dataclass(kw_only=True, slots=True)
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37): a producer's commit or rollback of the half message at
    ``commit_log_offset`` (``from_transaction_check`` when it answers a CHECK_TRANSACTION_STATE)."""

    LABEL: ClassVar[str] = "END_TRANSACTION"
    producer_group: str
    tran_state_table_offset: Int64
    commit_log_offset: Int64
    commit_or_rollback: Int32  # MessageSysFlag TRANSACTION_NOT/COMMIT/ROLLBACK_TYPE
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39), broker to producer: what became of this half message?"""

    LABEL: ClassVar[str] = "CHECK_TRANSACTION_STATE"
    tran_state_table_offset: Int64
    commit_log_offset: Int64
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerListByGroupRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_CONSUMER_LIST_BY_GROUP"
    consumer_group: str


@dataclasses.dataclass(kw_only=True, slots=True)
class UnregisterClientRequestHeader(Header):
    LABEL: ClassVar[str] = "UNREGISTER_CLIENT"
    client_id: str = dataclasses.field(metadata=wire("clientID"))
    producer_group: str | None = None
    consumer_group: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class NotifyConsumerIdsChangedRequestHeader(Header):
    LABEL: ClassVar[str] = "NOTIFY_CONSUMER_IDS_CHANGED"
    consumer_group: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetRouteInfoRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_ROUTEINFO_BY_TOPIC"
    topic: str
    accept_standard_json_only: bool | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class CreateTopicRequestHeader(Header):
    LABEL: ClassVar[str] = "UPDATE_AND_CREATE_TOPIC"
    topic: str
    default_topic: str
    read_queue_nums: Int32
    write_queue_nums: Int32
    perm: Int32
    topic_filter_type: str
    topic_sys_flag: Int32 | None = None
    order: bool


@dataclasses.dataclass(kw_only=True, slots=True)
class DeleteTopicRequestHeader(Header):
    LABEL: ClassVar[str] = "DELETE_TOPIC_IN_BROKER"
    topic: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetBrokerConfigResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_BROKER_CONFIG response"
    version: str  # the configuration's DataVersion as JSON


@dataclasses.dataclass(kw_only=True, slots=True)
class GetTopicStatsInfoRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_TOPIC_STATS_INFO"
    topic: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumeStatsRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_CONSUME_STATS"
    consumer_group: str
    topic: str | None = None  # None or blank: every topic the group has offsets for


@dataclasses.dataclass(kw_only=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(Header):
    LABEL: ClassVar[str] = "DELETE_SUBSCRIPTIONGROUP"
    group_name: str
    remove_offset: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerConnectionListRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_CONSUMER_CONNECTION_LIST"
    consumer_group: str


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryTopicConsumeByWhoRequestHeader(Header):
    LABEL: ClassVar[str] = "QUERY_TOPIC_CONSUME_BY_WHO"
    topic: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetTopicsByClusterRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_TOPICS_BY_CLUSTER"
    cluster: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetKVConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_KV_CONFIG"
    namespace: str
    key: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetKVListByNamespaceRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_KVLIST_BY_NAMESPACE"
    namespace: str


@dataclasses.dataclass(kw_only=True, slots=True)
class RegisterBrokerRequestHeader(Header):
    """A broker announcing itself to a name server; the body is a RegisterBrokerBody, zlib-packed
    when ``compressed``, whose CRC32 (UtilAll.crc32, 0 = unchecked) is ``bodyCrc32``."""

    LABEL: ClassVar[str] = "REGISTER_BROKER"
    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: Int64
    compressed: bool = False
    body_crc32: Int32 = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class RegisterBrokerResponseHeader(Header):
    """What a name server tells a registering slave about its master (nothing for a master)."""

    LABEL: ClassVar[str] = "REGISTER_BROKER response"
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class UnRegisterBrokerRequestHeader(Header):
    LABEL: ClassVar[str] = "UNREGISTER_BROKER"
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryDataVersionRequestHeader(Header):
    """A broker with forceRegister=false asking whether the name server holds its current topic
    table (the body is the broker's DataVersion)."""

    LABEL: ClassVar[str] = "QUERY_DATA_VERSION"
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Int64


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryDataVersionResponseHeader(Header):
    LABEL: ClassVar[str] = "QUERY_DATA_VERSION response"
    changed: bool


@dataclasses.dataclass(kw_only=True, slots=True)
class ResetOffsetRequestHeader(Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) from a tool, and RESET_CONSUMER_CLIENT_OFFSET (220)
    from the broker to each consumer of the group; ``timestamp`` -1 means the queues' ends."""

    LABEL: ClassVar[str] = "INVOKE_BROKER_TO_RESET_OFFSET"
    topic: str
    group: str
    timestamp: Int64
    is_force: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerStatusRequestHeader(Header):
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) and GET_CONSUMER_STATUS_FROM_CLIENT (221)."""

    LABEL: ClassVar[str] = "INVOKE_BROKER_TO_GET_CONSUMER_STATUS"
    topic: str
    group: str
    client_addr: str | None = None  # a client id: only that consumer is asked


@dataclasses.dataclass(kw_only=True, slots=True)
class GetProducerConnectionListRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_PRODUCER_CONNECTION_LIST"
    producer_group: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumerRunningInfoRequestHeader(Header):
    LABEL: ClassVar[str] = "GET_CONSUMER_RUNNING_INFO"
    consumer_group: str
    client_id: str
    jstack_enable: bool | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class ConsumeMessageDirectlyResultRequestHeader(Header):
    LABEL: ClassVar[str] = "CONSUME_MESSAGE_DIRECTLY"
    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    broker_name: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    LABEL: ClassVar[str] = "GET_BROKER_CONSUME_STATS"
    is_order: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class CloneGroupOffsetRequestHeader(Header):
    LABEL: ClassVar[str] = "CLONE_GROUP_OFFSET"
    src_group: str
    dest_group: str
    topic: str | None = None  # None or blank: every topic the source group has offsets for
    offline: bool = False


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryConsumeTimeSpanRequestHeader(Header):
    LABEL: ClassVar[str] = "QUERY_CONSUME_TIME_SPAN"
    topic: str
    group: str


@dataclasses.dataclass(kw_only=True, slots=True)
class QueryCorrectionOffsetHeader(Header):
    LABEL: ClassVar[str] = "QUERY_CORRECTION_OFFSET"
    filter_groups: str | None = None  # comma-separated groups left out of the minimum
    compare_group: str
    topic: str


@dataclasses.dataclass(kw_only=True, slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    LABEL: ClassVar[str] = "VIEW_BROKER_STATS_DATA"
    stats_name: str
    stats_key: str


@dataclasses.dataclass(kw_only=True, slots=True)
class DeleteTopicFromNamesrvRequestHeader(Header):
    LABEL: ClassVar[str] = "DELETE_TOPIC_IN_NAMESRV"
    topic: str
    cluster_name: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class PutKVConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "PUT_KV_CONFIG"
    namespace: str
    key: str
    value: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetKVConfigResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_KV_CONFIG response"
    value: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class DeleteKVConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "DELETE_KV_CONFIG"
    namespace: str
    key: str


# -- JSON bodies -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _BodyField:
    attr: str
    wire: str
    hint: Any
    required: bool


_BODY_FIELDS: dict[type, tuple[_BodyField, ...]] = {}


def _body_fields(cls: type) -> tuple[_BodyField, ...]:
    cached = _BODY_FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = get_type_hints(cls)
    _BODY_FIELDS[cls] = result = tuple(
        _BodyField(
            f.name, _wire_name(f), hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )
    return result


def _bad(path: str, what: str, value: Any) -> MalformedRequestError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MalformedRequestError(f"{path} must be {what}, got {shown}")


def _int_from_json(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):  # fastjson reads "123" into an int field; the C++ client relies on it
        number = parse_java_int(value, "i64")
        if number is not None:
            return number
    raise _bad(path, "an integer", value)


def _str_from_json(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise _bad(path, "a string", value)


def _bool_from_json(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _bad(path, "a boolean", value)


def _float_from_json(value: Any, path: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _bad(path, "a number", value)


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    int: _int_from_json, str: _str_from_json, bool: _bool_from_json, float: _float_from_json,
}


def _from_json(hint: Any, value: Any, path: str) -> Any:
    hint, optional = _unwrap_optional(hint)
    if value is None and optional:
        return None
    scalar = _SCALARS.get(hint)
    if scalar is not None:
        return scalar(value, path)
    origin = get_origin(hint)
    if origin is list:
        (item,) = get_args(hint)
        if not isinstance(value, list):
            raise _bad(path, "an array", value)
        return [_from_json(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_type, item = get_args(hint)
        if not isinstance(value, dict):
            raise _bad(path, "an object", value)
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key: Any
            if key_type is int:
                key = _int_from_json(k, f"{path} key")
            elif isinstance(key_type, type) and issubclass(key_type, JsonBody):
                # an object in key position (fastjson's Map<MessageQueue, V>), which
                # rocketstore.remoting.body's parser hands over as a tuple of its (name, value) pairs
                key = key_type.from_json_value(dict(k) if isinstance(k, tuple) else k, f"{path} key")
            else:
                key = k
            out[key] = _from_json(item, v, f"{path}[{k!r}]")
        return out
    if isinstance(hint, type) and issubclass(hint, JsonBody):
        return hint.from_json_value(value, path)
    raise TypeError(f"no JSON mapping for {hint!r}")


def _dump(value: Any) -> str:
    """fastjson's compact text: bean fields sorted by name, nulls left out, int map keys bare."""
    if isinstance(value, JsonBody):
        items = sorted(
            ((spec.wire, getattr(value, spec.attr)) for spec in _body_fields(type(value))
             if getattr(value, spec.attr) is not None),
            key=lambda item: item[0],
        )
        return "{" + ",".join(f"{_dump(k)}:{_dump(v)}" for k, v in items) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(
            f"{k if isinstance(k, int) and not isinstance(k, bool) else _dump(k)}:{_dump(v)}"
            for k, v in value.items()
        ) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


class JsonBody:
    """Base of the JSON payloads: ``decode(bytes)`` and ``encode() -> bytes`` in fastjson's form.

    A body with objects in key position (fastjson's ``Map<MessageQueue, V>``) overrides
    :meth:`parse_text` with a parser that accepts them; the default one is faster and covers
    every other body.
    """

    __slots__ = ()

    @classmethod
    def parse_text(cls, text: str) -> Any:
        """The body's text as parsed JSON."""
        return parse_fastjson(text)

    @classmethod
    def decode(cls, data: bytes | str) -> Self:
        name = cls.__name__
        try:
            text = data.decode() if isinstance(data, bytes | bytearray | memoryview) else data
        except UnicodeDecodeError as exc:
            raise MalformedRequestError(f"{name} body is not UTF-8: {exc}") from None
        try:
            value = cls.parse_text(text)
        except (ValueError, RecursionError) as exc:
            raise MalformedRequestError(f"{name} body does not parse as JSON: {exc}") from None
        return cls.from_json_value(value, name)

    @classmethod
    def from_json_value(cls, value: Any, path: str | None = None) -> Self:
        """Build from parsed JSON (what :func:`json.loads` returns); ``path`` names it in errors."""
        path = path or cls.__name__
        if not isinstance(value, dict):
            raise _bad(path, "an object", value)
        values: dict[str, Any] = {}
        for spec in _body_fields(cls):
            raw = value.get(spec.wire)
            if raw is None:
                if spec.required:
                    raise MalformedRequestError(f"{path}.{spec.wire} is missing")
                continue
            values[spec.attr] = _from_json(spec.hint, raw, f"{path}.{spec.wire}")
        return cls(**values)

    def to_json(self) -> str:
        return _dump(self)

    def encode(self) -> bytes:
        return _dump(self).encode()




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


# -- plain ACL administration (RequestCode 50-53) ------------------------------------------------


@dataclasses.dataclass(kw_only=True, slots=True)
class CreateAccessConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "UPDATE_AND_CREATE_ACL_CONFIG"
    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None  # comma-separated NAME=PERM
    group_perms: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class DeleteAccessConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "DELETE_ACL_CONFIG"
    access_key: str


@dataclasses.dataclass(kw_only=True, slots=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader(Header):
    LABEL: ClassVar[str] = "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG"
    global_white_addrs: str  # comma-separated patterns
    acl_file_full_path: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetBrokerAclConfigResponseHeader(Header):
    LABEL: ClassVar[str] = "GET_BROKER_CLUSTER_ACL_INFO response"
    version: str
    all_acl_file_version: str | None = None
    broker_name: str
    broker_addr: str
    cluster_name: str
