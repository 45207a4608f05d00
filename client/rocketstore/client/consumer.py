"""PullConsumer: PULL_MESSAGE, consumer offsets and heartbeats, like DefaultMQPullConsumer.

The application picks queues and offsets itself::

    with PullConsumer("127.0.0.1:9876", "my-group") as consumer:
        for mq in consumer.queues("Orders"):
            offset = max(consumer.fetch_offset(mq), 0)
            result = consumer.pull(mq, offset, expression="created || paid")
            ...
            consumer.commit_offset(mq, result.next_begin_offset)

Every pull carries its subscription (``SUBSCRIPTION`` sysFlag with the tag expression), so the
broker needs no prior heartbeat to filter; :meth:`PullConsumer.heartbeat` (and the periodic one
started by :meth:`PullConsumer.start`) registers the group with every broker of the subscribed
topics as CONSUME_ACTIVELY / CLUSTERING, which is what makes it visible to admin tools.

The broker filters by tag hash code only; as PullAPIWrapper.processPullResult does, messages
whose tag is not in the expression are dropped here (hash collisions). Bodies compressed by a
Java producer (sysFlag COMPRESSED, zlib) are inflated.

Pulls go where the broker's last answer for the queue suggested (``suggestWhichBrokerId``: a
slave while the consumer is far behind and the group allows slave reads), else to the master, or
to a slave while the route lists no master (the master is down). Offsets go to the master, or to a
slave while there is none, as the Java client's findBrokerAddressInAdmin picks.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from rocketstore.client.remoting_client import (
    MessageQueue,
    RemotingClient,
    RemotingClientError,
    RemotingError,
    RouteSource,
    any_addr,
    check,
    local_ip,
    readable_queues,
    route_source_for,
)
from rocketstore.common.clock import now_ms
from rocketstore.common.message import (
    PROPERTY_MAX_OFFSET,
    PROPERTY_MIN_OFFSET,
    BlankRecord,
    CorruptRecord,
    StoredMessage,
    SysFlag,
    decode_record,
    java_string_hash,
)
from rocketstore.common.mix_all import MASTER_ID
from rocketstore.remoting.body import ConsumerData, HeartbeatData, SubscriptionData, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

__all__ = ["PullConsumer", "PullResult", "PullStatus", "decode_messages", "subscription_data"]

HEARTBEAT_INTERVAL_S = 30.0
SUB_ALL = "*"
#: PullAPIWrapper's sysFlag bits beyond PullSysFlag's: none; the compression type sits in sysFlag
#: bits 8-10 of a message (MessageSysFlag.COMPRESSION_TYPE_COMPARATOR); 0 and 3 mean zlib.
_COMPRESSION_TYPE_MASK = 0x7 << 8
_ZLIB_TYPES = (0, 3)


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    #: the broker id the broker suggests pulling this queue from next (0 the master; a slave's id
    #: when the consumer is far behind and the group allows slave reads)
    suggest_which_broker_id: int = MASTER_ID


def subscription_data(topic: str, expression: str | None) -> SubscriptionData:
    """FilterAPI.buildSubscriptionData for a TAG expression: ``*`` or ``a || b``."""
    if not expression or not expression.strip() or expression.strip() == SUB_ALL:
        return SubscriptionData(topic=topic, sub_string=SUB_ALL, sub_version=now_ms())
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(topic=topic, sub_string=expression, tags_set=tags,
                            code_set=[java_string_hash(t) for t in tags], sub_version=now_ms())


def decode_messages(body: bytes) -> list[StoredMessage]:
    """The records of a PULL_MESSAGE / QUERY_MESSAGE / VIEW_MESSAGE_BY_ID body, back to back.

    No CRC check (RocketMQ's client decoder makes none); compressed bodies are inflated.
    """
    messages: list[StoredMessage] = []
    pos = 0
    while pos < len(body):
        record = decode_record(body, pos, check_crc=False)
        if isinstance(record, CorruptRecord):
            raise RemotingClientError(f"undecodable message in the response body: {record.reason}")
        if isinstance(record, BlankRecord):
            raise RemotingClientError(f"unexpected end-of-segment record in the response body at {pos}")
        if record.sys_flag & SysFlag.COMPRESSED:
            if (record.sys_flag & _COMPRESSION_TYPE_MASK) >> 8 not in _ZLIB_TYPES:
                raise RemotingClientError(f"message at queue offset {record.queue_offset} is compressed with "
                                          f"an unsupported type (sysFlag {record.sys_flag:#x})")
            record.body = zlib.decompress(record.body)
        messages.append(record)
        pos += record.total_size
    return messages


def client_id() -> str:
    """``ip@pid#nanotime``: ClientConfig.buildMQClientId with the PID-derived instance name."""
    return f"{local_ip()}@{os.getpid()}#{time.monotonic_ns()}"


class PullConsumer:
    """Pull from chosen queues at chosen offsets; thread-safe."""

    def __init__(self, namesrv_addr: str | Sequence[str] | None, group: str, *, client: RemotingClient | None = None,
                 routes: RouteSource | None = None, timeout: float = 10.0, route_ttl: float = 30.0) -> None:
        """Routes come from the name server(s) ``namesrv_addr``, or from ``routes`` when that is None
        (e.g. :class:`~rocketstore.client.remoting_client.BrokerRoutes`, to read brokers without a name server)."""
        self.group = group
        self.client_id = client_id()
        self._own_client = client is None
        self.client = client or RemotingClient(timeout=timeout)
        self.route_source = route_source_for(namesrv_addr, routes, self.client, timeout)
        self.timeout = timeout
        self.route_ttl = route_ttl
        self._routes: dict[str, tuple[TopicRouteData, float]] = {}
        self._subscriptions: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self._registered: set[str] = set()
        #: the broker id each queue's last pull answer suggested (the Java client's pullFromWhichNodeTable)
        self._pull_from: dict[MessageQueue, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, heartbeat_interval: float = HEARTBEAT_INTERVAL_S) -> None:
        """Send a heartbeat now and every ``heartbeat_interval`` seconds until close()."""
        self.heartbeat()
        if self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, args=(heartbeat_interval,),
                                                      name=f"heartbeat-{self.group}", daemon=True)
            self._heartbeat_thread.start()

    def _heartbeat_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            # the next round tries again; a broker that is down is not this loop's failure
            with contextlib.suppress(RemotingClientError):
                self.heartbeat()

    def close(self) -> None:
        """Stop heartbeats, unregister from the brokers, close connections (if ours)."""
        self._stop.set()
        if self._registered:
            with contextlib.suppress(RemotingClientError):
                self.unregister()
        if self._own_client:
            self.client.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- routes --------------------------------------------------------------------------------
    def route(self, topic: str, *, refresh: bool = False) -> TopicRouteData:
        now = time.monotonic()
        cached = self._routes.get(topic)
        if cached is not None and not refresh and now - cached[1] < self.route_ttl:
            return cached[0]
        route = self.route_source.get_route(topic)
        with self._lock:
            self._routes[topic] = (route, now)
        return route

    def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (and the topic becomes subscribed with ``*``)."""
        with self._lock:
            self._subscriptions.setdefault(topic, SUB_ALL)
        return readable_queues(topic, self.route(topic))

    def subscribe(self, topic: str, expression: str = SUB_ALL) -> None:
        """What the heartbeat reports for ``topic``."""
        with self._lock:
            self._subscriptions[topic] = expression

    def broker_addr(self, mq: MessageQueue) -> str:
        addr = any_addr(self.route(mq.topic), mq.broker_name)
        if addr is None:
            addr = any_addr(self.route(mq.topic, refresh=True), mq.broker_name)
        if addr is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"broker {mq.broker_name} is not in the route of "
                                f"topic {mq.topic}")
        return addr

    def pull_addr(self, mq: MessageQueue) -> str:
        """Where the next pull of ``mq`` goes: the broker its last answer suggested (a slave, when
        the consumer fell far behind), if the route lists it, else as :meth:`broker_addr`: the
        master, or a slave while the master is gone (findBrokerAddressInSubscribe)."""
        suggested = self._pull_from.get(mq, MASTER_ID)
        if suggested != MASTER_ID:
            for data in self.route(mq.topic).broker_datas:
                if data.broker_name == mq.broker_name and suggested in data.broker_addrs:
                    return data.broker_addrs[suggested]
        return self.broker_addr(mq)

    def _invalidate(self, topic: str) -> None:
        with self._lock:
            self._routes.pop(topic, None)

    # -- pulling -------------------------------------------------------------------------------
    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32, expression: str = SUB_ALL,
             suspend_timeout_ms: int | None = None, timeout: float | None = None) -> PullResult:
        """One PULL_MESSAGE. With ``suspend_timeout_ms`` the broker holds the request until a
        message arrives or that time passes (long polling); the wait for the response is
        extended accordingly."""
        sub = subscription_data(mq.topic, expression)
        sys_flag = PullSysFlag.SUBSCRIPTION
        if suspend_timeout_ms:
            sys_flag |= PullSysFlag.SUSPEND
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=int(sys_flag), commit_offset=0,
            suspend_timeout_millis=suspend_timeout_ms or 0, subscription=sub.sub_string,
            sub_version=sub.sub_version, expression_type="TAG", broker_name=mq.broker_name,
        )
        wait = self.timeout if timeout is None else timeout
        if suspend_timeout_ms:
            wait = max(wait, suspend_timeout_ms / 1000 + 5.0)
        addr = self.pull_addr(mq)
        try:
            response = self.client.call(addr, RequestCode.PULL_MESSAGE, header, timeout=wait, accept=_STATUS_BY_CODE)
        except RemotingClientError:
            self._invalidate(mq.topic)
            with self._lock:
                self._pull_from.pop(mq, None)
            raise
        status = _STATUS_BY_CODE[ResponseCode(response.code)]
        rh = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
        with self._lock:
            self._pull_from[mq] = rh.suggest_which_broker_id
        messages: list[StoredMessage] = []
        if status is PullStatus.FOUND and response.body:
            messages = decode_messages(response.body)
            if sub.tags_set:
                wanted = set(sub.tags_set)
                messages = [m for m in messages if m.tags is not None and m.tags in wanted]
            for m in messages:
                m.properties[PROPERTY_MIN_OFFSET] = str(rh.min_offset)
                m.properties[PROPERTY_MAX_OFFSET] = str(rh.max_offset)
        return PullResult(status, rh.next_begin_offset, rh.min_offset, rh.max_offset, messages,
                          rh.suggest_which_broker_id)

    # -- offsets -------------------------------------------------------------------------------
    def fetch_offset(self, mq: MessageQueue) -> int:
        """The group's committed offset of ``mq``; -1 when the broker has none (QUERY_NOT_FOUND),
        as RemoteBrokerOffsetStore.readOffset answers."""
        header = QueryConsumerOffsetRequestHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                                                  broker_name=mq.broker_name)
        response = self.client.call(self.broker_addr(mq), RequestCode.QUERY_CONSUMER_OFFSET, header,
                                    timeout=self.timeout, accept=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        return QueryConsumerOffsetResponseHeader.from_ext_fields(response.ext_fields).offset

    def commit_offset(self, mq: MessageQueue, offset: int, *, oneway: bool = False) -> None:
        """UPDATE_CONSUMER_OFFSET (one-way like the Java client's periodic persist, if asked)."""
        header = UpdateConsumerOffsetRequestHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                                                   commit_offset=offset, broker_name=mq.broker_name)
        addr = self.broker_addr(mq)
        if oneway:
            self.client.invoke_oneway(addr, self.client.request(RequestCode.UPDATE_CONSUMER_OFFSET, header))
        else:
            self.client.call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header, timeout=self.timeout)

    # -- registration --------------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        with self._lock:
            subs = [subscription_data(topic, expr) for topic, expr in sorted(self._subscriptions.items())]
        consumer = ConsumerData(group_name=self.group, consume_type="CONSUME_ACTIVELY", message_model="CLUSTERING",
                                consume_from_where="CONSUME_FROM_LAST_OFFSET", subscription_data_set=subs,
                                unit_mode=False)
        return HeartbeatData(client_id=self.client_id, consumer_data_set=[consumer])

    def _broker_addrs(self) -> set[str]:
        with self._lock:
            topics = list(self._subscriptions)
        addrs: set[str] = set()
        for topic in topics:
            route = self.route(topic)
            for data in route.broker_datas:
                addrs.update(data.broker_addrs.values())
        return addrs

    def heartbeat(self) -> int:
        """HEART_BEAT to every broker of the subscribed topics; returns how many accepted it."""
        body = self.heartbeat_data().encode()
        sent = 0
        last: RemotingClientError | None = None
        for addr in sorted(self._broker_addrs()):
            try:
                self.client.call(addr, RequestCode.HEART_BEAT, None, body, timeout=self.timeout)
            except RemotingClientError as exc:
                last = exc
                continue
            with self._lock:
                self._registered.add(addr)
            sent += 1
        if last is not None and sent == 0:
            raise last
        return sent

    def unregister(self) -> None:
        """UNREGISTER_CLIENT for this group at every broker a heartbeat reached."""
        self._stop.set()
        header = UnregisterClientRequestHeader(client_id=self.client_id, consumer_group=self.group)
        with self._lock:
            addrs, self._registered = sorted(self._registered), set()
        for addr in addrs:
            response = self.client.invoke(addr, self.client.request(RequestCode.UNREGISTER_CLIENT, header),
                                          self.timeout)
            check(response, addr)
