"""Administration: what RocketMQ's mqadmin (MQAdminImpl / DefaultMQAdminExtImpl) asks brokers and
name servers, with the same request codes, headers and bodies as MQClientAPIImpl in 4.9.8.

* :class:`BrokerAdmin` talks to one broker by address (the operator knows its pods' addresses).
* :class:`MQAdmin` starts from the name server: routes and cluster info decide which brokers a
  command goes to, as mqadmin's sub-commands do, and it hands out :class:`BrokerAdmin` objects.

Bodies: broker config is Java properties text (``key=value\\n``, MixAll.properties2String);
runtime info, topic stats and consume stats are the protocol package's bodies
(:mod:`rocketstore.remoting.body`), which the broker encodes with; this module turns them into
the results below.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rocketstore.client.consumer import PullConsumer, PullResult, decode_messages
from rocketstore.client.remoting_client import (
    MessageQueue,
    NameServerClient,
    RemotingClient,
    RemotingClientError,
    RemotingError,
    RouteSource,
    RpcHook,
    any_addr,
    master_addr,
    route_source_for,
)
from rocketstore.common.fastjson import parse_fastjson, to_json
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.message import KEY_SEPARATOR, StoredMessage, decode_message_id
from rocketstore.common.mix_all import retry_topic
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC
from rocketstore.remoting.body import (
    ClusterInfo,
    ConnectionData,
    ConsumerConnectionBody,
    ConsumeStatsBody,
    ConsumeStatsList,
    HARuntimeInfo,
    KVTable,
    MessageQueueData,
    ProducerConnection,
    ResetOffsetBody,
    TopicRouteData,
    TopicStatsTable,
)
from rocketstore.remoting.body_codec import JsonBody
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import ProtocolError
from rocketstore.remoting.header_codec import Header
from rocketstore.remoting.headers import (
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    ElectMasterRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
)
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper

__all__ = [
    "BrokerAdmin",
    "ClientConnection",
    "ConsumeStats",
    "ConsumerConnection",
    "GroupConsumeStats",
    "MQAdmin",
    "OffsetWrapper",
    "TopicOffset",
]

TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
JAVA_LONG_MAX = 2**63 - 1
DEFAULT_QUERY_MAX_NUM = 64

B = TypeVar("B", bound=JsonBody)


def _decode(cls: type[B], body: bytes) -> B:
    """A body of the broker's answer; one that does not decode is a client error naming it."""
    try:
        return cls.decode(body)
    except ProtocolError as exc:
        raise RemotingClientError(str(exc)) from None


def _json_body(document: Mapping[str, Any]) -> bytes:
    return to_json(dict(document), False).encode("utf-8")


def _json_list(body: bytes) -> list[dict[str, Any]]:
    """A JSON array of objects (the list verbs answer an empty body for none)."""
    value = json.loads(body.decode("utf-8")) if body else []
    return [dict(item) for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _mq(data: MessageQueueData) -> MessageQueue:
    return MessageQueue(data.topic, data.broker_name, data.queue_id)


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue of a topic's stats (TopicStatsTable's TopicOffset)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue of a group's progress (ConsumeStats' OffsetWrapper)."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclass(slots=True)
class ConsumeStats:
    offsets: list[OffsetWrapper]
    consume_tps: float = 0.0

    @property
    def diff_total(self) -> int:
        return sum(o.diff for o in self.offsets)


@dataclass(frozen=True, slots=True)
class ClientConnection:
    """One client of a group (RocketMQ's Connection): what consumerConnection/producerConnection list."""

    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass(slots=True)
class ConsumerConnection:
    """A consumer group's connections and subscriptions (RocketMQ's ConsumerConnection)."""

    connections: list[ClientConnection]
    subscriptions: dict[str, str]  # topic -> sub expression
    consume_type: str | None
    message_model: str | None
    consume_from_where: str | None


@dataclass(frozen=True, slots=True)
class GroupConsumeStats:
    """One group's progress on one topic of GET_BROKER_CONSUME_STATS."""

    group: str
    stats: ConsumeStats


def _connections(data: Iterable[ConnectionData]) -> list[ClientConnection]:
    return sorted((ClientConnection(c.client_id, c.client_addr, c.language, c.version) for c in data),
                  key=lambda c: c.client_id)


# -- one broker --------------------------------------------------------------------------------


class BrokerAdmin:
    """Admin requests to the broker at ``addr`` (host:port of its remoting listener)."""

    def __init__(self, addr: str, *, client: RemotingClient | None = None, timeout: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None, rpc_hook: RpcHook | None = None) -> None:
        """``ssl_context`` / ``rpc_hook``: TLS and ACL signing for the client made here when none is given."""
        self.addr = addr
        self._own_client = client is None
        self.client = client or RemotingClient(timeout=timeout, ssl_context=ssl_context, rpc_hook=rpc_hook)
        self.timeout = timeout

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> BrokerAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, code: int, header: Header | Mapping[str, str] | None = None, body: bytes = b"",
              accept: Iterable[int] = (ResponseCode.SUCCESS,), timeout: float | None = None) -> Any:
        return self.client.call(self.addr, code, header, body, timeout=self.timeout if timeout is None else timeout,
                                accept=accept)

    def get_broker_config(self) -> dict[str, str]:
        """GET_BROKER_CONFIG: every key with its current value."""
        return parse_properties(self._call(RequestCode.GET_BROKER_CONFIG).body.decode(errors="replace"))

    def update_broker_config(self, props: Mapping[str, str]) -> None:
        """UPDATE_BROKER_CONFIG with ``key=value`` lines (applied live by the broker)."""
        text = "".join(f"{k}={v}\n" for k, v in props.items() if v is not None)
        if text:  # MQClientAPIImpl sends nothing for an empty set
            self._call(RequestCode.UPDATE_BROKER_CONFIG, body=text.encode())

    def get_runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the KVTable's ``table``."""
        body = self._call(RequestCode.GET_BROKER_RUNTIME_INFO).body
        return _decode(KVTable, body).table if body else {}

    def ha_status(self) -> HARuntimeInfo:
        """GET_BROKER_HA_STATUS (907, RocketMQ 5's haStatus): a master's slaves, or a slave's master."""
        return _decode(HARuntimeInfo, self._call(RequestCode.GET_BROKER_HA_STATUS).body)

    def hand_over_master(self, to: int | None = None, *, timeout: float = 30.0) -> str:
        """CONTROLLER_ELECT_MASTER (1002, mqadmin's electMaster) sent to a master elected by the
        Kubernetes Lease: it hands its mastership to an in-sync slave (``to``: that replica id)
        and stays up as a slave. Returns the broker's remark; :class:`RemotingError` with the
        broker's reason when it refuses. ``timeout`` covers the broker's wait for a slave to
        catch up (controllerLeaseHandOverTimeoutMills, 2 s by default) and the Lease write."""
        header = ElectMasterRequestHeader(broker_id=-1 if to is None else to, designate_elect=to is not None)
        return str(self._call(RequestCode.CONTROLLER_ELECT_MASTER, header, timeout=timeout).remark or "")

    def delete_expired_commit_log(self) -> bool:
        """DELETE_EXPIRED_COMMITLOG (329): ask the broker to run its expired-file cleanup now."""
        self._call(RequestCode.DELETE_EXPIRED_COMMITLOG)
        return True

    # -- RocketMQ 5.3 users and ACLs (request codes 3001-3010), as UserInfo / AclInfo JSON documents

    def list_users(self, name_filter: str | None = None) -> list[dict[str, Any]]:
        """AUTH_LIST_USER: every user (whose name contains ``name_filter``), passwords included."""
        return _json_list(self._call(RequestCode.AUTH_LIST_USER, {"filter": name_filter} if name_filter else None).body)

    def create_user(self, user_info: Mapping[str, Any]) -> None:
        """AUTH_CREATE_USER with a UserInfo (``username``, ``password``, ``userType``, ``userStatus``)."""
        self._call(RequestCode.AUTH_CREATE_USER, {"username": str(user_info["username"])}, _json_body(user_info))

    def update_user(self, user_info: Mapping[str, Any]) -> None:
        """AUTH_UPDATE_USER: the fields the UserInfo names change."""
        self._call(RequestCode.AUTH_UPDATE_USER, {"username": str(user_info["username"])}, _json_body(user_info))

    def delete_user(self, username: str) -> None:
        """AUTH_DELETE_USER: the user and its ACL (a missing user is success)."""
        self._call(RequestCode.AUTH_DELETE_USER, {"username": username})

    def list_acls(self, subject_filter: str | None = None) -> list[dict[str, Any]]:
        """AUTH_LIST_ACL: every ACL (whose subject contains ``subject_filter``)."""
        return _json_list(self._call(RequestCode.AUTH_LIST_ACL,
                                     {"subjectFilter": subject_filter} if subject_filter else None).body)

    def create_acl(self, acl_info: Mapping[str, Any]) -> None:
        """AUTH_CREATE_ACL with an AclInfo (``subject``, ``policies``): merged into the subject's ACL
        entry by entry (an entry of the same resource replaced)."""
        self._call(RequestCode.AUTH_CREATE_ACL, {"subject": str(acl_info["subject"])}, _json_body(acl_info))

    def delete_acl(self, subject: str, policy_type: str | None = None, resource: str | None = None) -> None:
        """AUTH_DELETE_ACL: one entry (``policy_type`` and ``resource``), or the subject's whole ACL."""
        header = {"subject": subject, **({"policyType": policy_type} if policy_type else {}),
                  **({"resource": resource} if resource else {})}
        self._call(RequestCode.AUTH_DELETE_ACL, header)

    def create_topic(self, topic: str, read_queues: int = 8, write_queues: int = 8, perm: int = 6, *,
                     order: bool = False, topic_filter_type: str = "SINGLE_TAG", topic_sys_flag: int = 0) -> None:
        """UPDATE_AND_CREATE_TOPIC (mqadmin updateTopic's defaults)."""
        header = CreateTopicRequestHeader(topic=topic, default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC,
                                          read_queue_nums=read_queues, write_queue_nums=write_queues, perm=perm,
                                          topic_filter_type=topic_filter_type, topic_sys_flag=topic_sys_flag,
                                          order=order)
        self._call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)

    def topic_configs(self) -> dict[str, TopicConfig]:
        """GET_ALL_TOPIC_CONFIG (21): the broker's topic table (a TopicConfigSerializeWrapper)."""
        body = self._call(RequestCode.GET_ALL_TOPIC_CONFIG).body
        return dict(TopicConfigSerializeWrapper.from_dict(parse_fastjson(body.decode())).topic_config_table)

    def create_topic_config(self, config: TopicConfig) -> None:
        """UPDATE_AND_CREATE_TOPIC with everything ``config`` says (a topic copied from another broker)."""
        self.create_topic(config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm,
                          order=config.order, topic_filter_type=config.topic_filter_type.name,
                          topic_sys_flag=config.topic_sys_flag)

    def topic_stats(self, topic: str) -> list[TopicOffset]:
        """GET_TOPIC_STATS_INFO: min/max offset and last update of each queue on this broker."""
        body = self._call(RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader(topic=topic)).body
        table = _decode(TopicStatsTable, body).offset_table
        out = [TopicOffset(_mq(mq), v.min_offset, v.max_offset, v.last_update_timestamp) for mq, v in table.items()]
        return sorted(out, key=lambda t: t.queue)

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """GET_CONSUME_STATS: the group's offsets against the broker's, per queue."""
        body = self._call(RequestCode.GET_CONSUME_STATS,
                          GetConsumeStatsRequestHeader(consumer_group=group, topic=topic)).body
        stats = _decode(ConsumeStatsBody, body)
        offsets = [OffsetWrapper(_mq(mq), v.broker_offset, v.consumer_offset, v.last_timestamp)
                   for mq, v in stats.offset_table.items()]
        return ConsumeStats(sorted(offsets, key=lambda o: o.queue), stats.consume_tps)

    def delete_topic(self, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER (215)."""
        self._call(RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader(topic=topic))

    def create_subscription_group(self, config: SubscriptionGroupConfig) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) with the SubscriptionGroupConfig as its body."""
        self._call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=to_json(config.to_dict(), False).encode())

    def delete_subscription_group(self, group: str, remove_offset: bool = False) -> None:
        """DELETE_SUBSCRIPTIONGROUP (207); with ``remove_offset`` the group's offsets go too."""
        self._call(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                   DeleteSubscriptionGroupRequestHeader(group_name=group, remove_offset=remove_offset))

    def consumer_connection(self, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (203); CONSUMER_NOT_ONLINE raises RemotingError."""
        body = self._call(RequestCode.GET_CONSUMER_CONNECTION_LIST,
                          GetConsumerConnectionListRequestHeader(consumer_group=group)).body
        data = _decode(ConsumerConnectionBody, body)
        return ConsumerConnection(_connections(data.connection_set),
                                  {t: sub.sub_string for t, sub in sorted(data.subscription_table.items())},
                                  data.consume_type, data.message_model, data.consume_from_where)

    def producer_connection(self, group: str) -> list[ClientConnection]:
        """GET_PRODUCER_CONNECTION_LIST (204)."""
        body = self._call(RequestCode.GET_PRODUCER_CONNECTION_LIST,
                          GetProducerConnectionListRequestHeader(producer_group=group)).body
        return _connections(_decode(ProducerConnection, body).connection_set)

    def reset_offset(self, topic: str, group: str, timestamp_ms: int, force: bool) -> dict[MessageQueue, int]:
        """INVOKE_BROKER_TO_RESET_OFFSET (222): the broker pushes the offsets to the group's live
        consumers and answers them; CONSUMER_NOT_ONLINE raises RemotingError."""
        header = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=timestamp_ms, is_force=force)
        body = self._call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header).body
        return {_mq(mq): offset for mq, offset in _decode(ResetOffsetBody, body).offset_table.items()}

    def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET (15), as a tool commits a group's offset."""
        self._call(RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset))

    def broker_consume_stats(self, order_only: bool = False) -> tuple[list[GroupConsumeStats], int]:
        """GET_BROKER_CONSUME_STATS (317): every group's progress per topic, and the total lag."""
        body = self._call(RequestCode.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(is_order=order_only)).body
        data = _decode(ConsumeStatsList, body)
        out = []
        for entry in data.consume_stats_list:
            for group, per_topic in entry.items():
                for stats in per_topic:
                    offsets = [OffsetWrapper(_mq(mq), v.broker_offset, v.consumer_offset, v.last_timestamp)
                               for mq, v in stats.offset_table.items()]
                    out.append(GroupConsumeStats(group, ConsumeStats(sorted(offsets, key=lambda o: o.queue),
                                                                     stats.consume_tps)))
        return out, data.total_diff

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP: the broker's queue offset for store time ``timestamp_ms``.

        The broker's answer, as RocketMQ 4.9.8's ConsumeQueue.getOffsetInQueueByTime gives it: a
        binary search over the consume-queue file picked by modification time, landing on a
        message whose store time equals ``timestamp_ms`` (any of several equal ones), else on the
        *nearer* of the two neighbours (the earlier one on a tie), so the message there may be
        older than ``timestamp_ms``; before the first message it is the queue's first offset,
        after the last message the last message's offset (not the max offset), and 0 for a queue
        the broker has no consume queue for. Callers that need "the first message stored at or
        after" check the neighbours (rocketstore.pipeline.broker_offsets does).
        """
        header = SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms,
                                           broker_name=mq.broker_name)
        response = self._call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header)
        return SearchOffsetResponseHeader.from_ext_fields(response.ext_fields).offset

    def view_message(self, phy_offset: int) -> StoredMessage:
        """VIEW_MESSAGE_BY_ID: the message at CommitLog offset ``phy_offset``."""
        body = self._call(RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=phy_offset)).body
        messages = decode_messages(body)
        if not messages:
            raise RemotingError(ResponseCode.QUERY_NOT_FOUND, f"no message at offset {phy_offset}", self.addr)
        return messages[0]

    def query_message(self, topic: str, key: str, *, max_num: int = DEFAULT_QUERY_MAX_NUM, begin: int = 0,
                      end: int = JAVA_LONG_MAX, unique_key: bool = False) -> list[StoredMessage]:
        """QUERY_MESSAGE by index key; QUERY_NOT_FOUND is an empty list. The index matches by hash,
        so the messages are checked here as MQAdminImpl.queryMessage does."""
        header = QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin,
                                           end_timestamp=end, unique_key_query=unique_key)
        response = self._call(RequestCode.QUERY_MESSAGE, header,
                              accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND or not response.body:
            return []
        messages = [m for m in decode_messages(response.body) if m.topic == topic]
        if unique_key:
            return [m for m in messages if m.uniq_key == key]
        return [m for m in messages if m.keys is not None and key in m.keys.split(KEY_SEPARATOR)]


# -- through the name server -------------------------------------------------------------------

T = TypeVar("T")


class MQAdmin:
    """mqadmin's verbs, starting from the name server(s).

    With ``routes`` (e.g. :class:`~rocketstore.client.remoting_client.BrokerRoutes`) instead of a
    name server address, the verbs that go by a topic's route work on the brokers that route
    names; those that ask the name server itself (topic and cluster lists, and what needs them)
    raise.
    """

    def __init__(self, namesrv_addr: str | Sequence[str] | None = None, *, client: RemotingClient | None = None,
                 routes: RouteSource | None = None, timeout: float = 5.0) -> None:
        self._own_client = client is None
        self.client = client or RemotingClient(timeout=timeout)
        self.route_source = route_source_for(namesrv_addr, routes, self.client, timeout)
        self.namesrv = self.route_source if isinstance(self.route_source, NameServerClient) else None
        self.timeout = timeout

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> MQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def broker(self, addr: str) -> BrokerAdmin:
        """A BrokerAdmin sharing this admin's connections."""
        return BrokerAdmin(addr, client=self.client, timeout=self.timeout)

    # -- name server ---------------------------------------------------------------------------
    def _name_server(self, verb: str) -> NameServerClient:
        if self.namesrv is None:
            raise RemotingClientError(f"{verb} asks a name server; this admin has none (routes from "
                                      f"{self.route_source!r})")
        return self.namesrv

    def topic_list(self) -> list[str]:
        return self._name_server("topic_list").topic_list()

    def cluster_list(self) -> ClusterInfo:
        return self._name_server("cluster_list").cluster_info()

    def route(self, topic: str) -> TopicRouteData:
        return self.route_source.get_route(topic)

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        """Master addresses of ``cluster`` (every cluster when None)."""
        info = self.cluster_list()
        names = info.cluster_addr_table.get(cluster, []) if cluster else list(info.broker_addr_table)
        addrs = []
        for name in names:
            data = info.broker_addr_table.get(name)
            if data is not None and 0 in data.broker_addrs:
                addrs.append(data.broker_addrs[0])
        return sorted(addrs)

    def _route_masters(self, route: TopicRouteData) -> list[tuple[str, str]]:
        out = []
        for data in sorted(route.broker_datas, key=lambda d: d.broker_name):
            addr = master_addr(route, data.broker_name)
            if addr is not None:
                out.append((data.broker_name, addr))
        return out

    # -- topics --------------------------------------------------------------------------------
    def create_topic(self, topic: str, read_queues: int = 8, write_queues: int = 8, perm: int = 6, *,
                     broker_addr: str | None = None, cluster: str | None = None, order: bool = False) -> list[str]:
        """updateTopic on one broker (``broker_addr``) or on every master of ``cluster`` (every
        master known to the name server when neither is given); returns the addresses."""
        addrs = [broker_addr] if broker_addr else self.master_addrs(cluster)
        if not addrs:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"no master broker found for cluster {cluster}")
        for addr in addrs:
            self.broker(addr).create_topic(topic, read_queues, write_queues, perm, order=order)
        return addrs

    def topic_status(self, topic: str) -> list[TopicOffset]:
        """topicStatus: GET_TOPIC_STATS_INFO at every master of the topic's route."""
        out: list[TopicOffset] = []
        for _, addr in self._route_masters(self.route(topic)):
            out.extend(self.broker(addr).topic_stats(topic))
        return sorted(out, key=lambda t: t.queue)

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP at the master of ``mq``'s broker, as MQAdminImpl.searchOffset
        sends it (the route is fresh from the name server); see :meth:`BrokerAdmin.search_offset`
        for what the offset means."""
        addr = master_addr(self.route(mq.topic), mq.broker_name)
        if addr is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"broker {mq.broker_name} has no master in the route "
                                f"of topic {mq.topic}")
        return self.broker(addr).search_offset(mq, timestamp_ms)

    # -- consumers -----------------------------------------------------------------------------
    def consumer_progress(self, group: str, topic: str | None = None) -> ConsumeStats:
        """consumerProgress: GET_CONSUME_STATS at every master of the group's retry-topic route
        (as mqadmin asks), or of every broker when that topic has no route yet."""
        try:
            addrs = [addr for _, addr in self._route_masters(self.route(retry_topic(group)))]
        except RemotingError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            addrs = self.master_addrs()
        merged = ConsumeStats([])
        for addr in addrs:
            stats = self.broker(addr).consume_stats(group, topic)
            merged.offsets.extend(stats.offsets)
            merged.consume_tps += stats.consume_tps
        merged.offsets.sort(key=lambda o: o.queue)
        return merged

    def consumer_connection(self, group: str) -> ConsumerConnection:
        """consumerConnection: GET_CONSUMER_CONNECTION_LIST at the masters of the group's retry
        topic (as mqadmin asks), merged; RemotingError when no broker has the group online."""
        merged: ConsumerConnection | None = None
        errors: list[RemotingError] = []
        for _, addr in self._route_masters(self.route(retry_topic(group))):
            try:
                found = self.broker(addr).consumer_connection(group)
            except RemotingError as exc:
                errors.append(exc)
                continue
            if merged is None:
                merged = found
            else:
                merged.connections = sorted({*merged.connections, *found.connections}, key=lambda c: c.client_id)
                merged.subscriptions.update(found.subscriptions)
        if merged is None:
            raise errors[0] if errors else RemotingError(ResponseCode.CONSUMER_NOT_ONLINE,
                                                         f"the consumer group[{group}] not online")
        return merged

    def producer_connection(self, group: str, topic: str) -> list[ClientConnection]:
        """producerConnection: GET_PRODUCER_CONNECTION_LIST at the masters of ``topic``'s route."""
        found: set[ClientConnection] = set()
        for _, addr in self._route_masters(self.route(topic)):
            found.update(self.broker(addr).producer_connection(group))
        return sorted(found, key=lambda c: c.client_id)

    def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int, force: bool = True
                             ) -> dict[MessageQueue, int]:
        """resetOffsetByTime: INVOKE_BROKER_TO_RESET_OFFSET at each master of the topic, which
        pushes the offsets to the live consumers. A broker answering CONSUMER_NOT_ONLINE gets the
        offsets committed directly instead, as mqadmin's fallback (resetOffsetByTimestampOld)
        does: each queue's offset at ``timestamp_ms``, where ``force`` or where it is behind."""
        out: dict[MessageQueue, int] = {}
        for _, addr in self._route_masters(self.route(topic)):
            broker = self.broker(addr)
            try:
                out.update(broker.reset_offset(topic, group, timestamp_ms, force))
                continue
            except RemotingError as exc:
                if exc.code != ResponseCode.CONSUMER_NOT_ONLINE:
                    raise
            for wrapper in broker.consume_stats(group, topic).offsets:
                offset = broker.search_offset(wrapper.queue, timestamp_ms)
                if force or offset <= wrapper.consumer_offset:
                    broker.update_consumer_offset(group, wrapper.queue, offset)
                    out[wrapper.queue] = offset
                else:
                    out[wrapper.queue] = wrapper.consumer_offset
        return dict(sorted(out.items()))

    def delete_topic(self, topic: str, cluster: str) -> list[str]:
        """deleteTopic: DELETE_TOPIC_IN_BROKER at every master of ``cluster``, then
        DELETE_TOPIC_IN_NAMESRV at the name server; returns the broker addresses."""
        addrs = self.master_addrs(cluster)
        if not addrs:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"no master broker found for cluster {cluster}")
        for addr in addrs:
            self.broker(addr).delete_topic(topic)
        self._name_server("delete_topic").call(RequestCode.DELETE_TOPIC_IN_NAMESRV,
                                               DeleteTopicFromNamesrvRequestHeader(topic=topic))
        return addrs

    def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """wipeWritePerm: WIPE_WRITE_PERM_OF_BROKER (205) at every name server of this admin, as
        mqadmin sends it to each of ``-n``; each name server's wipeTopicCount."""
        out = {}
        for addr in self._name_server("wipe_write_perm").addrs:
            response = self.client.call(addr, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
                                        WipeWritePermOfBrokerRequestHeader(broker_name=broker_name),
                                        timeout=self.timeout)
            out[addr] = WipeWritePermOfBrokerResponseHeader.from_ext_fields(response.ext_fields).wipe_topic_count
        return out

    def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """addWritePerm: ADD_WRITE_PERM_OF_BROKER (327) at every name server; each one's addTopicCount."""
        out = {}
        for addr in self._name_server("add_write_perm").addrs:
            response = self.client.call(addr, RequestCode.ADD_WRITE_PERM_OF_BROKER,
                                        AddWritePermOfBrokerRequestHeader(broker_name=broker_name),
                                        timeout=self.timeout)
            out[addr] = AddWritePermOfBrokerResponseHeader.from_ext_fields(response.ext_fields).add_topic_count
        return out

    # -- messages ------------------------------------------------------------------------------
    def _each_master(self, topic: str, fn: Callable[[BrokerAdmin], list[T]]) -> list[T]:
        out: list[T] = []
        for _, addr in self._route_masters(self.route(topic)):
            out.extend(fn(self.broker(addr)))
        return out

    def query_msg_by_key(self, topic: str, key: str, max_num: int = DEFAULT_QUERY_MAX_NUM) -> list[StoredMessage]:
        """queryMsgByKey: QUERY_MESSAGE at every master of the topic."""
        return self._each_master(topic, lambda b: b.query_message(topic, key, max_num=max_num))

    def query_msg_by_unique_key(self, topic: str, uniq_key: str) -> list[StoredMessage]:
        """A message by its client id (UNIQ_KEY), which needs the topic."""
        return self._each_master(topic, lambda b: b.query_message(topic, uniq_key, max_num=32, unique_key=True))

    def query_msg_by_id(self, msg_id: str) -> StoredMessage:
        """queryMsgById for an offset message id: VIEW_MESSAGE_BY_ID at the address it encodes."""
        try:
            host, offset = decode_message_id(msg_id)
        except ValueError as exc:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, str(exc)) from None
        return self.broker(str(host)).view_message(offset)

    def query_msg_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> StoredMessage | None:
        """queryMsgByOffset: pull one message at ``offset`` as TOOLS_CONSUMER; None if there is none."""
        result = self.pull(MessageQueue(topic, broker_name, queue_id), offset, 1)
        return result.messages[0] if result.messages else None

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32) -> PullResult:
        consumer = PullConsumer(None, TOOLS_CONSUMER_GROUP, client=self.client, routes=self.route_source,
                                timeout=self.timeout)
        route = self.route(mq.topic)
        if any_addr(route, mq.broker_name) is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"broker {mq.broker_name} is not in the route of "
                                f"topic {mq.topic}")
        return consumer.pull(mq, offset, max_nums)
