"""Producer: SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE over routes from the name server.

Like RocketMQ's DefaultMQProducer: the route of a topic is looked up on the name server (and,
for a topic the name server does not know, the route of ``TBW102`` so the broker creates the
topic on the first send), or from the brokers themselves when a
:class:`~rocketstore.client.remoting_client.BrokerRoutes` is given instead of a name server,
cached for :data:`ROUTE_TTL_S` and dropped on a failed send; queues are picked round-robin over
the writable queues, and a failed attempt is retried (twice by default) on a queue of another
broker when there is one. Every message gets a ``UNIQ_KEY`` property made
like MessageClientIDSetter's (:func:`create_uniq_id`), which is the ``msg_id`` of the result.

Sends go with the ROCKETMQ binary header. (The Java 4.9.8 client uses that only when started
with ``-Drocketmq.serialize.type=ROCKETMQ``; its default is the JSON header. Brokers accept both.)
"""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import os
import random
import struct
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rocketstore.client.remoting_client import (
    MessageQueue,
    RemotingClient,
    RemotingClientError,
    RemotingError,
    RemotingTimeout,
    RouteSource,
    local_ip,
    master_addr,
    route_source_for,
    writable_queues,
)
from rocketstore.common.message import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    BatchItem,
    encode_batch,
    properties_to_string,
)
from rocketstore.common.topic_validator import AUTO_CREATE_TOPIC_KEY_TOPIC
from rocketstore.remoting.body import QueueData, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader

__all__ = [
    "ROUTE_TTL_S",
    "OutgoingMessage",
    "Producer",
    "SendResult",
    "SendStatus",
    "create_uniq_id",
    "nearly_time_from_uniq_id",
]

ROUTE_TTL_S = 30.0
DEFAULT_TOPIC_QUEUE_NUMS = 4
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
#: Response codes after which DefaultMQProducer tries again (retryResponseCodes), plus the
#: transient ones our RemotingError marks retriable.
_RETRY_CODES = frozenset({
    ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SYSTEM_ERROR,
    ResponseCode.NO_PERMISSION, ResponseCode.NO_BUYER_ID, ResponseCode.NOT_IN_CURRENT_UNIT,
    ResponseCode.SYSTEM_BUSY,
})


# -- UNIQ_KEY ----------------------------------------------------------------------------------
#
# MessageClientIDSetter's layout, 16 bytes (28 with an IPv6 address) as upper-case hex:
#   ip (4 or 16) | pid & 0xFFFF (2) | class loader hash (4) | ms since the start of this month,
#   local time (4) | counter & 0xFFFF (2)
# The first three are fixed per process; Java's class loader identity hash becomes a random int.


def _month_start_ms(now_ms: int) -> tuple[int, int]:
    """Start of the local-time month containing ``now_ms`` and of the next one, in epoch ms."""
    local = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    nxt = start.replace(year=year, month=month)
    return int(start.timestamp() * 1000), int(nxt.timestamp() * 1000)


def _ip_bytes(ip: str) -> bytes:
    try:
        return ipaddress.ip_address(ip).packed
    except ValueError:
        return struct.pack(">q", time.time_ns() // 1_000_000)[4:]  # createFakeIP


class _UniqIdGenerator:
    def __init__(self, ip: str | None = None) -> None:
        fixed = _ip_bytes(ip or local_ip()) + struct.pack(">HI", os.getpid() & 0xFFFF, random.getrandbits(32))
        self.prefix = fixed.hex().upper()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._start = self._next_start = 0

    def create(self, now_ms: int | None = None) -> str:
        current = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        with self._lock:
            if current >= self._next_start or current < self._start - 1_000_000:
                self._start, self._next_start = _month_start_ms(current)
            diff = current - self._start
            if -1_000_000 < diff < 0:  # the clock stepped back a little (NTP)
                diff = 0
            count = next(self._counter) & 0xFFFF
        return self.prefix + f"{diff & 0xFFFFFFFF:08X}{count:04X}"


_GENERATOR = _UniqIdGenerator()


def create_uniq_id(now_ms: int | None = None) -> str:
    """A new client message id (MessageClientIDSetter.createUniqID); thread-safe."""
    return _GENERATOR.create(now_ms)


def nearly_time_from_uniq_id(msg_id: str, now_ms: int | None = None) -> datetime.datetime:
    """When the id was made, to the millisecond (MessageClientIDSetter.getNearlyTimeFromID): the
    offset is counted from the start of the current local month, or of the previous one when
    that would put it in the future. Returns a local naive datetime, as Java's Date prints."""
    raw = bytes.fromhex(msg_id)
    ip_length = 16 if len(raw) == 28 else 4
    (span,) = struct.unpack_from(">I", raw, ip_length + 2 + 4)
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    month_start, _ = _month_start_ms(now)
    if month_start + span >= now:
        local = datetime.datetime.fromtimestamp(month_start / 1000)
        year, month = (local.year - 1, 12) if local.month == 1 else (local.year, local.month - 1)
        month_start = int(local.replace(year=year, month=month).timestamp() * 1000)
    return datetime.datetime.fromtimestamp((month_start + span) / 1000)


# -- results -----------------------------------------------------------------------------------


class SendStatus:
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


_SEND_STATUS_BY_CODE: dict[int, str] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(frozen=True, slots=True)
class SendResult:
    """What the broker stored. For a batch, ``msg_id`` and ``offset_msg_id`` are the messages'
    ids joined by ',' (as RocketMQ's SendResult has them) and ``queue_offset`` is the first's."""

    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    broker_name: str
    topic: str = ""
    status: str = SendStatus.SEND_OK

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",")

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


@dataclass(slots=True)
class OutgoingMessage:
    """One message of a batch (or a send) with its own tags, keys and properties."""

    body: bytes
    tags: str | None = None
    keys: str | Sequence[str] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0


def _message_properties(tags: str | None, keys: str | Sequence[str] | None,
                        properties: Mapping[str, str] | None) -> dict[str, str]:
    props = dict(properties or {})
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = keys if isinstance(keys, str) else " ".join(keys)
    props.setdefault(PROPERTY_WAIT_STORE_MSG_OK, "true")
    props.setdefault(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, create_uniq_id())
    return props


# -- the producer ------------------------------------------------------------------------------


@dataclass(slots=True)
class _PublishInfo:
    route: TopicRouteData
    queues: list[MessageQueue]
    fetched_at: float
    via_default_topic: bool
    counter: itertools.count[int]


class Producer:
    """``Producer("ns1:9876;ns2:9876", "my-group").send("Orders", b"...", tags="created")``.

    Thread-safe. ``close()`` closes the connections unless a shared ``client`` was given.
    """

    def __init__(self, namesrv_addr: str | Sequence[str] | None, group: str, *, client: RemotingClient | None = None,
                 routes: RouteSource | None = None, send_timeout: float = 3.0, retries: int = 2,
                 route_ttl: float = ROUTE_TTL_S, default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> None:
        """Routes come from the name server(s) ``namesrv_addr``, or from ``routes`` when that is None
        (e.g. :class:`~rocketstore.client.remoting_client.BrokerRoutes`, to send to brokers without a name server)."""
        self.group = group
        self._own_client = client is None
        self.client = client or RemotingClient(timeout=send_timeout)
        self.route_source = route_source_for(namesrv_addr, routes, self.client, send_timeout)
        self.send_timeout = send_timeout
        self.retries = retries
        self.route_ttl = route_ttl
        self.default_topic_queue_nums = default_topic_queue_nums
        self._routes: dict[str, _PublishInfo] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- routes --------------------------------------------------------------------------------
    def _publish_info(self, topic: str) -> _PublishInfo:
        now = time.monotonic()
        info = self._routes.get(topic)
        if info is not None and now - info.fetched_at < self.route_ttl:
            return info
        via_default = False
        try:
            route = self.route_source.get_route(topic)
        except RemotingError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            # An unknown topic: send through TBW102's route; the broker creates the topic.
            route = self.route_source.get_route(AUTO_CREATE_TOPIC_KEY_TOPIC)
            route = TopicRouteData(
                order_topic_conf=route.order_topic_conf, broker_datas=route.broker_datas,
                filter_server_table=route.filter_server_table,
                queue_datas=[QueueData(broker_name=q.broker_name,
                                       read_queue_nums=min(self.default_topic_queue_nums, q.read_queue_nums),
                                       write_queue_nums=min(self.default_topic_queue_nums, q.read_queue_nums),
                                       perm=q.perm, topic_sys_flag=q.topic_sys_flag) for q in route.queue_datas],
            )
            via_default = True
        queues = writable_queues(topic, route)
        if not queues:
            raise RemotingError(ResponseCode.NO_PERMISSION, f"topic {topic} has no writable queue in its route")
        info = _PublishInfo(route, queues, now, via_default, itertools.count(random.randrange(len(queues))))
        with self._lock:
            self._routes[topic] = info
        return info

    def invalidate_route(self, topic: str) -> None:
        with self._lock:
            self._routes.pop(topic, None)

    def queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues sends are spread over."""
        return list(self._publish_info(topic).queues)

    def _select(self, info: _PublishInfo, last_broker: str | None) -> MessageQueue:
        with self._lock:
            start = next(info.counter)
        n = len(info.queues)
        if last_broker is not None:
            for i in range(n):
                mq = info.queues[(start + i) % n]
                if mq.broker_name != last_broker:
                    return mq
        return info.queues[start % n]

    # -- sending -------------------------------------------------------------------------------
    def send(self, topic: str, body: bytes, *, tags: str | None = None, keys: str | Sequence[str] | None = None,
             properties: Mapping[str, str] | None = None, queue_id: int | None = None, flag: int = 0,
             timeout: float | None = None) -> SendResult:
        """Send one message; ``queue_id`` pins the queue (of the first broker in the route)."""
        props = _message_properties(tags, keys, properties)
        return self._send(RequestCode.SEND_MESSAGE_V2, topic, body, props, flag, queue_id, False, timeout,
                          uniq=props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])

    def send_oneway(self, topic: str, body: bytes, *, tags: str | None = None,
                    keys: str | Sequence[str] | None = None, properties: Mapping[str, str] | None = None,
                    queue_id: int | None = None, flag: int = 0) -> str:
        """Send without waiting for the broker; returns the message's UNIQ_KEY."""
        props = _message_properties(tags, keys, properties)
        self._send(RequestCode.SEND_MESSAGE_V2, topic, body, props, flag, queue_id, True, None,
                   uniq=props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
        return props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX]

    def send_batch(self, topic: str, messages: Iterable[bytes | OutgoingMessage], *,
                   queue_id: int | None = None, timeout: float | None = None) -> SendResult:
        """Send several messages as one SEND_BATCH_MESSAGE; all land in one queue, in order."""
        items: list[BatchItem] = []
        uniq_ids: list[str] = []
        for message in messages:
            m = message if isinstance(message, OutgoingMessage) else OutgoingMessage(body=message)
            props = _message_properties(m.tags, m.keys, m.properties)
            uniq_ids.append(props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX])
            items.append(BatchItem(body=m.body, flag=m.flag, properties=props))
        if not items:
            raise ValueError("send_batch needs at least one message")
        # MessageBatch's own properties: only what the first message's waitStoreMsgOK implies.
        batch_props = {PROPERTY_WAIT_STORE_MSG_OK: items[0].properties.get(PROPERTY_WAIT_STORE_MSG_OK, "true")}
        return self._send(RequestCode.SEND_BATCH_MESSAGE, topic, encode_batch(items), batch_props, 0, queue_id,
                          False, timeout, uniq=",".join(uniq_ids), batch=True)

    def _send(self, code: int, topic: str, body: bytes, props: dict[str, str], flag: int, queue_id: int | None,
              oneway: bool, timeout: float | None, *, uniq: str, batch: bool = False) -> SendResult:
        budget = self.send_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        attempts = 1 if oneway else 1 + max(self.retries, 0)
        last_broker: str | None = None
        last_error: RemotingClientError | None = None
        for _ in range(attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            info = self._publish_info(topic)
            if queue_id is None:
                mq = self._select(info, last_broker)
            else:
                mq = MessageQueue(topic, info.queues[0].broker_name, queue_id)
            addr = master_addr(info.route, mq.broker_name)
            assert addr is not None  # writable_queues keeps only brokers with a master
            header = SendMessageRequestHeader(
                producer_group=self.group, topic=topic, default_topic=AUTO_CREATE_TOPIC_KEY_TOPIC,
                default_topic_queue_nums=self.default_topic_queue_nums, queue_id=mq.queue_id, sys_flag=0,
                born_timestamp=time.time_ns() // 1_000_000, flag=flag, properties=properties_to_string(props),
                reconsume_times=0, unit_mode=False, batch=batch, broker_name=mq.broker_name,
            )
            request = self.client.request(code, header.to_v2_ext_fields(), body, serialize_type=SerializeType.ROCKETMQ)
            try:
                if oneway:
                    self.client.invoke_oneway(addr, request)
                    return SendResult(uniq, "", mq.queue_id, -1, mq.broker_name, topic)
                response = self.client.invoke(addr, request, remaining)
            except RemotingClientError as exc:
                last_error, last_broker = exc, mq.broker_name
                self.invalidate_route(topic)
                continue
            status = _SEND_STATUS_BY_CODE.get(response.code)
            if status is None:
                error = RemotingError(response.code, response.remark, addr)
                if response.code not in _RETRY_CODES:
                    raise error
                last_error, last_broker = error, mq.broker_name
                self.invalidate_route(topic)
                continue
            rh = SendMessageResponseHeader.from_ext_fields(response.ext_fields)
            return SendResult(msg_id=uniq, offset_msg_id=rh.msg_id, queue_id=rh.queue_id,
                              queue_offset=rh.queue_offset, broker_name=mq.broker_name, topic=topic, status=status)
        if last_error is not None:
            raise last_error
        raise RemotingTimeout(f"topic {topic}", code, budget)
