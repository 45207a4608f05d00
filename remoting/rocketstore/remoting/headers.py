"""The typed request and response headers (a command's ``extFields``), as RocketMQ 4.9.8 names them.

RocketMQ keeps its ``CommandCustomHeader`` classes together in ``protocol/header/*``; this is
that package: schemas only, one dataclass per header, each field under its Java name. How they
turn into ``extFields`` and back is :mod:`rocketstore.remoting.header_codec`'s job, and the JSON
bodies some commands carry are :mod:`rocketstore.remoting.body`'s.

A field's Python type is its Java type: ``str``, ``bool``, :data:`Int32` (Integer) or
:data:`Int64` (Long); ``X | None`` is a nullable wrapper, and a field without a default is
required (``@CFNotNull``). :func:`~rocketstore.remoting.wire_fields.wire` names a field whose
Java name is not the camelCase of the attribute (``bname``).
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Mapping
from typing import ClassVar, Self

from rocketstore.remoting.header_codec import Header, Int32, Int64
from rocketstore.remoting.wire_fields import wire

__all__ = [
    "AddWritePermOfBrokerRequestHeader",
    "AddWritePermOfBrokerResponseHeader",
    "AlterSyncStateSetRequestHeader",
    "ApplyBrokerIdRequestHeader",
    "BrokerHeartbeatRequestHeader",
    "CheckTransactionStateRequestHeader",
    "CloneGroupOffsetRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateAccessConfigRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteAccessConfigRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "ElectMasterRequestHeader",
    "ElectMasterResponseHeader",
    "EndTransactionRequestHeader",
    "GetBrokerAclConfigResponseHeader",
    "GetBrokerConfigResponseHeader",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVConfigResponseHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMetaDataResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetNextBrokerIdRequestHeader",
    "GetNextBrokerIdResponseHeader",
    "GetProducerConnectionListRequestHeader",
    "GetReplicaInfoRequestHeader",
    "GetReplicaInfoResponseHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "NotifyBrokerRoleChangedRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
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
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "RegisterBrokerToControllerRequestHeader",
    "RegisterBrokerToControllerResponseHeader",
    "ReplyMessageRequestHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnRegisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UpdateGlobalWhiteAddrsConfigRequestHeader",
    "ViewBrokerStatsDataRequestHeader",
    "ViewMessageRequestHeader",
    "WipeWritePermOfBrokerRequestHeader",
    "WipeWritePermOfBrokerResponseHeader",
]


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
class WipeWritePermOfBrokerRequestHeader(Header):
    LABEL: ClassVar[str] = "WIPE_WRITE_PERM_OF_BROKER"
    broker_name: str


@dataclasses.dataclass(kw_only=True, slots=True)
class WipeWritePermOfBrokerResponseHeader(Header):
    LABEL: ClassVar[str] = "WIPE_WRITE_PERM_OF_BROKER response"
    wipe_topic_count: Int32


@dataclasses.dataclass(kw_only=True, slots=True)
class AddWritePermOfBrokerRequestHeader(Header):
    LABEL: ClassVar[str] = "ADD_WRITE_PERM_OF_BROKER"
    broker_name: str


@dataclasses.dataclass(kw_only=True, slots=True)
class AddWritePermOfBrokerResponseHeader(Header):
    LABEL: ClassVar[str] = "ADD_WRITE_PERM_OF_BROKER response"
    add_topic_count: Int32


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


@dataclasses.dataclass(kw_only=True, slots=True)
class NotifyBrokerRoleChangedRequestHeader(Header):
    """RocketMQ 5's controller to a broker: the group's master and epochs (the body is the
    SyncStateSet as JSON, ``{"syncStateSet":[ids],"syncStateSetEpoch":n}``)."""

    LABEL: ClassVar[str] = "NOTIFY_BROKER_ROLE_CHANGED"
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None
    master_broker_id: Int64 | None = None


# -- RocketMQ 5's broker <-> controller protocol (broker/controller_elector.py) ----------------------
# Every answer that carries a SyncStateSet carries it as the JSON body of remoting.body.SyncStateSet.


@dataclasses.dataclass(kw_only=True, slots=True)
class GetMetaDataResponseHeader(Header):
    """CONTROLLER_GET_METADATA_INFO's answer (no request header): which controller leads."""

    LABEL: ClassVar[str] = "CONTROLLER_GET_METADATA_INFO response"
    group: str | None = None
    controller_leader_id: str | None = None
    controller_leader_address: str | None = None
    is_leader: bool = False
    peers: str | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class GetNextBrokerIdRequestHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_GET_NEXT_BROKER_ID"
    cluster_name: str
    broker_name: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetNextBrokerIdResponseHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_GET_NEXT_BROKER_ID response"
    cluster_name: str | None = None
    broker_name: str | None = None
    next_broker_id: Int64 | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class ApplyBrokerIdRequestHeader(Header):
    """Claims ``appliedBrokerId``; ``registerCheckCode`` (``address;millis``, kept in the
    brokerIdentity-temp file) lets the same broker claim it again after a crash."""

    LABEL: ClassVar[str] = "CONTROLLER_APPLY_BROKER_ID"
    cluster_name: str
    broker_name: str
    applied_broker_id: Int64
    register_check_code: str


@dataclasses.dataclass(kw_only=True, slots=True)
class RegisterBrokerToControllerRequestHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_REGISTER_BROKER"
    cluster_name: str
    broker_name: str
    broker_id: Int64
    broker_address: str
    invoke_time: Int64 = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class RegisterBrokerToControllerResponseHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_REGISTER_BROKER response"
    cluster_name: str | None = None
    broker_name: str | None = None
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class BrokerHeartbeatRequestHeader(Header):
    """BROKER_HEARTBEAT (one-way): what the controller elects by (epoch, max offset, confirm
    offset, election priority) and how long it waits before it deems this broker dead."""

    LABEL: ClassVar[str] = "BROKER_HEARTBEAT"
    cluster_name: str
    broker_addr: str
    broker_name: str
    broker_id: Int64 | None = None
    epoch: Int32 | None = None
    max_offset: Int64 | None = None
    confirm_offset: Int64 | None = None
    heartbeat_timeout_mills: Int64 | None = None
    election_priority: Int32 | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class GetReplicaInfoRequestHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_GET_REPLICA_INFO"
    broker_name: str


@dataclasses.dataclass(kw_only=True, slots=True)
class GetReplicaInfoResponseHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_GET_REPLICA_INFO response"
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class ElectMasterRequestHeader(Header):
    """CONTROLLER_ELECT_MASTER as a broker sends it (ElectMasterRequestHeader.ofBrokerTrigger)."""

    LABEL: ClassVar[str] = "CONTROLLER_ELECT_MASTER"
    cluster_name: str = ""
    broker_name: str = ""
    broker_id: Int64 = -1
    designate_elect: bool = False
    invoke_time: Int64 = 0


@dataclasses.dataclass(kw_only=True, slots=True)
class ElectMasterResponseHeader(Header):
    LABEL: ClassVar[str] = "CONTROLLER_ELECT_MASTER response"
    master_broker_id: Int64 | None = None
    master_address: str | None = None
    master_epoch: Int32 | None = None
    sync_state_set_epoch: Int32 | None = None


@dataclasses.dataclass(kw_only=True, slots=True)
class AlterSyncStateSetRequestHeader(Header):
    """The master asks to record a new SyncStateSet (the body: the set and the epoch it starts from)."""

    LABEL: ClassVar[str] = "CONTROLLER_ALTER_SYNC_STATE_SET"
    broker_name: str
    master_broker_id: Int64
    master_epoch: Int32
    invoke_time: Int64 = 0
