"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): producers' puts.

Code 10 carries the long header names (Go and C++ clients), 310/320 the one-letter names of
SendMessageRequestHeaderV2 (Java); both decode to one :class:`SendMessageRequestHeader`. As
in RocketMQ's SendMessageProcessor, the header's ``batch`` flag (not the request code) decides
whether the body is one message or a batch body (:func:`rocketstore.common.message.decode_batch`).

Checks, in RocketMQ's order (AbstractSendMessageProcessor.msgCheck): the broker's write
permission for order topics, topic name validity (SYSTEM_ERROR), topics no client may send to
(NO_PERMISSION), the topic's config — auto-created from ``defaultTopic`` through
:meth:`TopicConfigManager.topic_config_for_send`, a ``%RETRY%`` topic created on first use, else
TOPIC_NOT_EXIST — and ``queueId < max(writeQueueNums, readQueueNums)`` (SYSTEM_ERROR). A negative
queueId picks a random writable queue. A message sent to ``%RETRY%{group}`` whose
reconsumeTimes reached the group's maximum goes to ``%DLQ%{group}`` instead (handleRetryAndDLQ).

The stored message is what RocketMQ 4.9.8 stores: the header's properties plus
``CLUSTER=<brokerClusterName>``, without ``WAIT=true`` (``WAIT=false`` is kept: it is how this
store learns not to wait for a sync flush). A prepared transactional message (``TRAN_MSG=true``)
is stored as a half message (:func:`rocketstore.broker.transaction.bridge.half_message`), or
refused with NO_PERMISSION when ``rejectTransactionMessage`` is set; END_TRANSACTION
(processor/end_transaction.py) later commits or rolls it back.

Threading: with ASYNC_FLUSH a put is an encode plus a copy into the mapped segment under the
put lock (tens of microseconds), so it runs directly on the event loop, inline in the read that
brought the request (the handler returns the response itself, no task: see
:mod:`rocketstore.broker.server`); handing it to a thread would cost more than the put. A send
waits, and the handler returns a coroutine instead, in two cases only: with SYNC_FLUSH the put
is appended on the loop too, and the coroutine waits for the group-commit service to report the
record durable (a future its flush thread completes, as RocketMQ 4.x's broker does: no thread
per waiting put, so any number of puts share one fsync); and while dispatch trails the
CommitLog by more than ``maxDispatchLagBytes``, the send waits on the loop for it to catch up
first (:meth:`SendMessageProcessor._let_dispatch_catch_up`).

PutMessageStatus maps to response codes exactly as SendMessageProcessor.handlePutMessageResult
does in 4.9.8 (notably OS_PAGECACHE_BUSY is SYSTEM_ERROR there, not SYSTEM_BUSY; SYSTEM_BUSY is
what RocketMQ's remoting layer answers before a request reaches the processor, which we do
too when the page cache is busy, so clients back off the same way).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Coroutine, Mapping
from typing import Any, Final, NamedTuple

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.server import Connection, Handler, Reply
from rocketstore.broker.transaction.bridge import half_message
from rocketstore.common.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    HostAddress,
    Message,
    SysFlag,
    create_message_id,
    decode_batch,
    properties_to_string,
    string_to_properties,
)
from rocketstore.common.mix_all import RETRY_GROUP_TOPIC_PREFIX, dlq_topic
from rocketstore.common.native import NATIVE
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.common.topic_validator import NOT_ALLOWED_SEND_TOPICS, TOPIC_MAX_LENGTH, validate_topic
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import RPC_TYPE_RESPONSE, RemotingCommand, language_name
from rocketstore.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader
from rocketstore.store.clean import disk_partition_used_ratio
from rocketstore.store.commit_log import (
    MessageBatch,
    PlainPut,
    PlainSendEncoder,
    PlainSendRequest,
    PutMessageResult,
)
from rocketstore.store.config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.timer_message_store import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
)

log = logging.getLogger(__name__)

DLQ_NUMS_PER_GROUP = 1

PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"

# MQVersion.Version.V3_4_9.ordinal(): from this client version on the header's
# maxReconsumeTimes overrides the group's retryMaxTimes.
VERSION_V3_4_9 = 121

_RANDOM = random.Random()

#: Properties that make a send more than an append (a delay level, a timer, a half message, a
#: cluster of the client's own): a send carrying one takes the reference path (see
#: :meth:`SendMessageProcessor.handle_group`).
NOT_PLAIN_PROPERTIES: Final = (
    PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TRANSACTION_PREPARED, PROPERTY_CLUSTER, PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_OUT_MS, PROPERTY_TIMER_DEL_UNIQKEY,
)


#: The request codes a send may take the plain path for (:meth:`SendMessageProcessor.handle_group`).
PLAIN_SEND_CODES: Final = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})

#: In a send's properties text: the producer asks not to wait for the flush or a slave (its
#: ``WAIT`` property false), which the plain path leaves to the reference path. Any property
#: whose text merely contains this goes there too, at no risk.
_WAIT_FALSE: Final = f"{PROPERTY_WAIT_STORE_MSG_OK}{NAME_VALUE_SEPARATOR}false"


def random_queue_id(queue_nums: int) -> int:
    """RocketMQ's ``nextInt(99999999) % n``: a uniformly random queue (0 when n <= 0)."""
    return _RANDOM.randrange(queue_nums) if queue_nums > 0 else 0


NOT_MASTER: Final = (ResponseCode.SERVICE_NOT_AVAILABLE,
                     "service not available now: this broker is not the master of its group (controller mode: no "
                     "role yet, a slave, or a master past its write deadline)")
"""The answer of a controller-mode broker that may not acknowledge writes: as a slave's put."""


def decode_send_header(request: RemotingCommand) -> SendMessageRequestHeader:
    if request.code == RequestCode.SEND_MESSAGE:
        return SendMessageRequestHeader.from_ext_fields(request.ext_fields)
    return SendMessageRequestHeader.from_v2_ext_fields(request.ext_fields)


def disk_usage_remark(broker: BrokerContext) -> str:
    """RocketMQ's diskUtil(): used ratio of the CommitLog, consume queue and index partitions."""
    cfg = broker.store_config
    ratios = [disk_partition_used_ratio(str(path)) for path in
              (cfg.commit_log_dir(), cfg.consume_queue_dir(), cfg.index_dir())]
    ratios = [r if r >= 0 else disk_partition_used_ratio(str(cfg.root_dir())) for r in ratios]
    return "CL: {:5.2f} CQ: {:5.2f} INDEX: {:5.2f}".format(*ratios)


def put_status_response(broker: BrokerContext, status: PutMessageStatus) -> tuple[int, str | None]:
    """(response code, remark) for a put outcome, as handlePutMessageResult decides them."""
    if status is PutMessageStatus.PUT_OK:
        return ResponseCode.SUCCESS, None
    if status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
        return ResponseCode.FLUSH_DISK_TIMEOUT, None
    if status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT:
        return ResponseCode.FLUSH_SLAVE_TIMEOUT, None
    if status is PutMessageStatus.SLAVE_NOT_AVAILABLE:
        return ResponseCode.SLAVE_NOT_AVAILABLE, None
    if status is PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH:
        return ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough"
    if status is PutMessageStatus.CREATE_MAPPED_FILE_FAILED:
        return ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."
    if status in (PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED):
        return ResponseCode.MESSAGE_ILLEGAL, (
            "the message is illegal, maybe msg body or properties length not matched. msg body length limit "
            f"{broker.store_config.max_message_size}B, msg properties length limit 32KB."
        )
    if status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
        store = broker.store
        if store.disk_full:
            why = "the disk is full"
        elif store.shutdown_flag:
            why = "the store is shut down"
        elif not store.writeable:
            why = "the store is not writeable (consume queue or index write error)"
        else:
            why = "this broker is a slave"
        return ResponseCode.SERVICE_NOT_AVAILABLE, (
            "service not available now. It may be caused by one of the following reasons: the broker's disk is "
            f"full [{disk_usage_remark(broker)}], messages are put to the slave, message store has been shut "
            f"down, etc. (here: {why})"
        )
    if status is PutMessageStatus.OS_PAGECACHE_BUSY:
        return ResponseCode.SYSTEM_ERROR, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"
    if status is PutMessageStatus.UNKNOWN_ERROR:
        return ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"
    if status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL:
        return ResponseCode.MESSAGE_ILLEGAL, (
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{broker.store_config.timer_max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger "
            "than the current time")
    if status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE:
        return ResponseCode.SYSTEM_ERROR, (
            f"accurate timer message is not enabled, timerWheelEnable is "
            f"{'true' if broker.store_config.timer_wheel_enable else 'false'}")
    return ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR DEFAULT"


def put_waits(store_config: StoreConfig, properties: Mapping[str, str]) -> tuple[bool, bool]:
    """(flush, replica): what a put with these properties waits for before it is answered.

    SYNC_FLUSH waits for the group commit, SYNC_MASTER for a slave to report past the record;
    ``WAIT=false`` waits for neither (RocketMQ's isWaitStoreMsgOK), ASYNC_* never wait.
    """
    if properties.get(PROPERTY_WAIT_STORE_MSG_OK) == "false":
        return False, False
    return (store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            store_config.broker_role is BrokerRole.SYNC_MASTER)


async def wait_until_stored(broker: BrokerContext, result: PutMessageResult, *, flush: bool,
                            replica: bool) -> PutMessageResult:
    """``result`` once the put is durable (``flush``) and on a slave (``replica``), with its status
    as :meth:`StoreWaits.add` decides it: for callers that wait in a coroutine anyway (a send that
    is not plain, an end-transaction's commit)."""
    append = result.append
    if append is None:
        return result
    future: asyncio.Future[PutMessageStatus] = asyncio.get_running_loop().create_future()
    if not broker.store_waits.add(result.status, append.wrote_offset + append.wrote_bytes, flush=flush,
                                  replica=replica, done=lambda status: _resolve(future, status)):
        return result
    status = await future
    return result if status is result.status else PutMessageResult(status, append)


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    """Resolve ``future`` unless its waiter gave up (was cancelled) meanwhile."""
    if not future.done():
        future.set_result(value)


class SendOkResponse(RemotingCommand):
    """A plain send's SEND_OK response whose frame the native put already encoded
    (:meth:`SendMessageProcessor.handle_group`): :meth:`encode` hands that frame over as it is.

    The other fields are the ones the frame was encoded from, for whoever looks at the response
    before it goes out (as a pull's ``EncodedResponse``); being read rarely, the header's fields
    are made into a map only when read (each read makes a new one), and the object is made
    without the dataclass's keyword ``__init__``: both cost more per send than the rest of the
    response's making.
    """

    __slots__ = ("_put", "frame")

    frame: bytes

    def __init__(self, request: RemotingCommand, put: PlainPut, queue_id: int, region: str, trace: str) -> None:
        # every field of RemotingCommand set positionally, ext_fields (a property here) excepted
        self.code = ResponseCode.SUCCESS
        self.opaque = request.opaque
        self.flag = RPC_TYPE_RESPONSE
        self.remark = None
        self.body = b""
        self.language = request.language
        self.version = request.version
        self.serialize_type = SerializeType.JSON
        self.frame = put.frame
        self._put = (put, queue_id, region, trace)

    @property
    def put(self) -> PlainPut:
        """The put the frame answers."""
        return self._put[0]

    @property
    def ext_fields(self) -> dict[str, str]:  # type: ignore[override]  # read-only: the frame is made
        put, queue_id, region, trace = self._put
        return {PROPERTY_MSG_REGION: region, PROPERTY_TRACE_SWITCH: trace, "msgId": put.msg_id,
                "queueId": str(queue_id), "queueOffset": str(put.queue_offset)}

    def encode(self) -> bytes:
        return self.frame


#: What the plain path keeps of a topic: the TopicConfig it decided on, the sysFlag bits its sends
#: get (None: sends to it are not plain) and the bound of its queue ids.
_PlainTopic = tuple[TopicConfig, int | None, int]


class _PlainPass(NamedTuple):
    """What the plain path knows of the broker for one pass's sends (:meth:`SendMessageProcessor._plain_pass`)."""

    encoder: PlainSendEncoder
    #: SYNC_FLUSH: a put is answered once durable
    flush: bool
    #: SYNC_MASTER: a put is answered once on a slave
    replica: bool

    @property
    def waits(self) -> bool:
        return self.flush or self.replica


class _PlainWait(NamedTuple):
    """A stored plain send waiting for its flush or slave: where it stands in its group's
    replies, its request, its SEND_OK response, its topic and its put."""

    slot: int
    request: RemotingCommand
    ok: SendOkResponse
    topic: str
    put: PlainPut


class SendOutcome(NamedTuple):
    """What a send came to before a protocol shapes the answer: RocketMQ's response code and remark,
    the put's result once it got that far, and the topic and queue it went to (the DLQ for a retry
    message past its maximum). The remoting port answers it as a RemotingCommand
    (:meth:`SendMessageProcessor.respond`), the gRPC port as a SendResultEntry, neither through the
    other's encoding."""

    code: int
    remark: str | None
    result: PutMessageResult | None = None
    topic: str = ""
    queue_id: int = 0
    batch: bool = False


#: a send's outcome, or a coroutine when the send must wait (back-pressure, SYNC_FLUSH)
Sending = SendOutcome | Coroutine[Any, Any, SendOutcome]


class SendMessageProcessor:
    """The send path; one instance per broker, registered for codes 10, 310 and 320."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.stats = broker.broker_stats_manager
        #: the native plain-send encoder and the broker settings it was made with (rebuilt when they change)
        self._plain_encoder: PlainSendEncoder | None = None
        self._plain_settings: tuple[str, str, bool, HostAddress] | None = None
        #: per topic, the TopicConfig a plain send to it was last decided on, its sysFlag bits
        #: (None when sends to it are not plain) and the queue ids' bound (the config object
        #: changes whenever the topic does)
        self._plain_topics: dict[str, _PlainTopic] = {}
        #: what :meth:`serve_plain_frames` passes the native call: per topic its sysFlag bits and
        #: queue ids' bound, or None when sends to it are not plain; made for the topic table's
        #: version in ``_served_version`` (every change of the table makes a new one)
        self._served_topics: dict[str, tuple[int, int] | None] = {}
        self._served_version: object = None

    def handlers(self) -> Mapping[int, Handler]:
        return {code: self.handle for code in
                (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)}

    # -- checks ------------------------------------------------------------------------------
    def _response_fields(self) -> dict[str, str]:
        cfg = self.broker.broker_config
        return {PROPERTY_MSG_REGION: cfg.region_id, PROPERTY_TRACE_SWITCH: "true" if cfg.trace_on else "false"}

    def _fail(self, request: RemotingCommand, code: int, remark: str | None) -> RemotingCommand:
        return request.response(code, remark, self._response_fields())

    def _check(self, peer: str, header: SendMessageRequestHeader) -> TopicConfig | SendOutcome:
        """msgCheck: the topic's config, or the refusal to send."""
        broker = self.broker
        topic = header.topic
        existing = broker.topic_config_manager.get(topic)
        if not broker.broker_config.broker_permission & PERM_WRITE and existing is not None and existing.order:
            return SendOutcome(ResponseCode.NO_PERMISSION,
                               f"the broker[{broker.store_host.host}] sending message is forbidden")
        invalid = validate_topic(topic)
        if invalid is not None:
            return SendOutcome(ResponseCode.SYSTEM_ERROR, invalid)
        if topic in NOT_ALLOWED_SEND_TOPICS:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        topic_config = existing
        if topic_config is None:
            sys_flag = 0
            if header.unit_mode:  # TopicSysFlag: unit 0x1, unit-sub 0x2
                sys_flag = 0x2 if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else 0x1
            log.warning("topic %s does not exist, producer %s", topic, peer)
            topics = broker.topic_config_manager
            topic_config = topics.topic_config_for_send(topic, header.default_topic, header.default_topic_queue_nums,
                                                        sys_flag)
            if topic_config is None and topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                topic_config = topics.create_topic_in_send_back(topic, 1, PERM_WRITE | PERM_READ, sys_flag)
            if topic_config is None:
                return SendOutcome(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        id_valid = max(topic_config.write_queue_nums, topic_config.read_queue_nums)
        if header.queue_id >= id_valid:
            return SendOutcome(ResponseCode.SYSTEM_ERROR,
                               f"request queueId[{header.queue_id}] is illegal, {topic_config} Producer: {peer}")
        return topic_config

    def _retry_or_dlq(
        self, header: SendMessageRequestHeader, topic_config: TopicConfig, queue_id: int, version: int
    ) -> tuple[str, int, TopicConfig] | SendOutcome:
        """handleRetryAndDLQ: a retry message past its group's maximum goes to the DLQ topic."""
        topic = header.topic
        if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return topic, queue_id, topic_config
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        group_config = self.broker.subscription_group_manager.find_subscription_group_config(group)
        if group_config is None:
            return SendOutcome(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_reconsume = group_config.retry_max_times
        if version >= VERSION_V3_4_9 and header.max_reconsume_times is not None:
            max_reconsume = header.max_reconsume_times
        if (header.reconsume_times or 0) < max_reconsume:
            return topic, queue_id, topic_config
        dlq = dlq_topic(group)
        dlq_config = self.broker.topic_config_manager.create_topic_in_send_back(dlq, DLQ_NUMS_PER_GROUP,
                                                                                PERM_WRITE | PERM_READ, 0)
        return dlq, random_queue_id(DLQ_NUMS_PER_GROUP), dlq_config

    # -- put ---------------------------------------------------------------------------------
    def _dispatch_lagging(self) -> bool:
        """Whether dispatch trails the CommitLog by more than maxDispatchLagBytes (0: no limit)."""
        limit = self.broker.broker_config.max_dispatch_lag_bytes
        return limit > 0 and self.broker.store.dispatch_behind_bytes > limit

    async def _let_dispatch_catch_up(self) -> None:
        """Wait while dispatch trails the CommitLog by more than maxDispatchLagBytes (see broker_config).

        No polling: the dispatch thread runs a one-shot lag waiter once it is back within the
        limit, and the waiter hands that to the loop (one thread-safe call, only while a send
        waits). Waiting on the loop releases the interpreter lock to the dispatch thread. Other
        sends may push dispatch back over the limit before this one runs again, so it re-checks
        and waits again. The wait is capped at waitTimeMillsInSendQueue, so a dispatcher that is
        stuck (and logging why) slows sends down instead of stopping them.
        """
        cfg = self.broker.broker_config
        limit = cfg.max_dispatch_lag_bytes
        store = self.broker.store
        if limit <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.wait_time_mills_in_send_queue / 1000
        within = asyncio.Event()

        def wake() -> None:  # runs in the dispatch thread
            loop.call_soon_threadsafe(within.set)

        # add_lag_waiter registers before it checks, so progress after the check always wakes us
        while store.add_dispatch_lag_waiter(limit, wake):
            try:
                async with asyncio.timeout_at(deadline):
                    await within.wait()
            except TimeoutError:
                return
            finally:
                store.remove_dispatch_lag_waiter(wake)
            within.clear()

    def handle(self, conn: Connection, request: RemotingCommand) -> Reply:
        """The send's response; when it must wait, a future of it (a plain send waiting for its
        flush or slave) or a coroutine (back-pressure, the reference path's waits)."""
        if NATIVE is not None and request.code in PLAIN_SEND_CODES:
            return self.handle_group(conn, [request])[0]
        return self._reference(conn, request)

    def _reference(self, conn: Connection, request: RemotingCommand) -> Reply:
        """The send through the reference path (:meth:`send`)."""
        sent = self.send(decode_send_header(request), request.body, conn.peer_host, conn.peer, request.version)
        if isinstance(sent, SendOutcome):
            return self.respond(request, sent)
        return self._respond_when_sent(request, sent)

    def handle_group(self, conn: Connection, requests: list[RemotingCommand]) -> list[Reply]:
        """Sends read off ``conn`` one after the other (RemotingServer.register_group; :meth:`handle`
        passes one), answered in order: the plain ones among them in one native call each, made
        under one taking of the CommitLog's lock (:meth:`DefaultMessageStore.put_plain_sends`), the
        others through the reference path (:meth:`send`), each where it stands in the order.

        Plain is a SEND_MESSAGE_V2, or a SEND_BATCH_MESSAGE whose header says batch (JSON header),
        from an IPv4 producer to an existing topic that is not a retry topic, to a given queue,
        with no property that delays, times, prepares or re-routes it
        (:data:`NOT_PLAIN_PROPERTIES`), on a master that takes sends now. The decisions stay here
        and in the store, on state cached per topic; the native ``PlainSend`` checks the header
        fields and the properties as bytes (a batch's body split there too), encodes and stamps
        the record(s) into the mapped CommitLog and encodes the SEND_OK frame, which is what the
        reference path would store and answer, byte for byte (tests/broker/test_send_plain.py).
        A send it finds not plain (a malformed batch body included: the reference answers its
        error) ends the group's put there, storing nothing of it, and takes the reference path.

        On a SYNC_FLUSH or SYNC_MASTER store the put is the same (a send that says ``WAIT=false``
        excepted), and the answers futures that :class:`StoreWaits` resolves once the flush and
        the slave are past the group's last put or their deadlines pass, with one wait for the
        group: the connection writes them then, together with the other answers due.
        """
        plain = self._plain_pass()
        born_host = conn.peer_host.to_bytes()
        topics: dict[str, _PlainTopic] = {}
        replies: list[Reply] = []
        i, n = 0, len(requests)
        while i < n:
            run: list[RemotingCommand] = []
            sends: list[PlainSendRequest] = []
            if plain is not None:
                for request in requests[i:]:
                    send = self._plain_request(request, plain, born_host, topics)
                    if send is None:
                        break
                    run.append(request)
                    sends.append(send)
            if sends and plain is not None:
                try:
                    puts = self.broker.store.put_plain_sends(sends, caller_waits=plain.waits)
                except Exception as exc:  # nothing of the group was stored (CommitLog.put_plain_sends)
                    replies.extend(conn.error_response(request, exc) for request in run)
                    i += len(run)
                    continue
                replies.extend(self._plain_replies(conn, run, sends, puts, plain))
                i += len(puts)
                if len(puts) == len(sends):
                    continue
            replies.append(conn.call_protected(requests[i], self._reference))
            i += 1
        return replies

    def _plain_pass(self) -> _PlainPass | None:
        """What the plain path needs to know of the broker for this pass's sends, or None when
        it takes none of them: the broker takes no sends now (not writable, not yet accepting, a
        controller-mode master past its write deadline), dispatch trails the log by more than
        maxDispatchLagBytes, or the store host is IPv6."""
        broker = self.broker
        cfg = broker.broker_config
        start_accept = cfg.start_accept_send_request_time_stamp
        manager = broker.replicas_manager
        if (not cfg.broker_permission & PERM_WRITE or (start_accept and time.time() * 1000 < start_accept)
                or self._dispatch_lagging() or (manager is not None and not manager.may_acknowledge())):
            return None
        encoder = self._plain_encoder_now()
        if encoder is None:
            return None
        store_config = broker.store_config
        return _PlainPass(encoder, store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
                          store_config.broker_role is BrokerRole.SYNC_MASTER)

    def _plain_request(self, request: RemotingCommand, plain: _PlainPass, born_host: bytes,
                       topics: dict[str, _PlainTopic]) -> PlainSendRequest | None:
        """``request`` as the store's plain put takes it, or None when it is not plain by what is
        known before the native call (see :meth:`handle_group`). ``topics``: the topics' cached
        state as looked up once for the group's pass."""
        code = request.code
        if code == RequestCode.SEND_MESSAGE_V2:
            put = plain.encoder.put
        elif code == RequestCode.SEND_BATCH_MESSAGE:
            put = plain.encoder.put_batch
        else:
            return None
        fields = request.ext_fields
        topic = fields.get("b")
        queue_text = fields.get("e")
        if (topic is None or queue_text is None or request.serialize_type is not SerializeType.JSON
                or not (queue_text.isascii() and queue_text.isdigit())):
            return None
        cached = topics.get(topic)
        if cached is None:
            cached = self._plain_topic(topic)
            if cached is None:
                return None
            topics[topic] = cached
        _, sys_flag_bits, queue_limit = cached
        queue_id = int(queue_text)
        if sys_flag_bits is None or queue_id >= queue_limit:
            return None
        if plain.waits and _WAIT_FALSE in fields.get("i", ""):
            return None
        return (put, fields, request.body, topic, queue_id, sys_flag_bits, born_host, language_name(request.language),
                request.opaque, request.version)

    def _plain_topic(self, topic: str) -> _PlainTopic | None:
        """What the plain path keeps of ``topic`` (decided again when its TopicConfig changed), or
        None when the topic does not exist."""
        config = self.broker.topic_config_manager.get(topic)
        if config is None:
            return None
        cached = self._plain_topics.get(topic)
        if cached is None or cached[0] is not config:
            cached = self._plain_topics[topic] = (config, self._plain_sys_flag_bits(topic, config),
                                                  max(config.write_queue_nums, config.read_queue_nums))
        return cached

    def serve_plain_frames(self, conn: Connection, data: bytes, max_frame: int) -> tuple[int, list[bytes]]:
        """Serve the plain SEND_MESSAGE_V2 requests at the head of ``data`` (whole remoting frames
        as ``conn`` read them, before they become commands: RemotingServer.serve_frames) in one
        native call: (bytes served, their SEND_OK frames). The frames from the first one it does
        not serve on take the connection's usual path, :meth:`handle_group` included.

        It serves what :meth:`handle_group` would put through the native ``PlainSend.put`` and
        answer at once: the same decisions, made here on the same cached per-topic state before
        the call (the broker takes sends, dispatch keeps up, the topic exists and its sends are
        plain, the queue id is in bound), a store whose puts wait for nothing
        (:meth:`DefaultMessageStore.serve_plain_frames`), and no Python object per send: the
        header is decoded, checked and the record stored and answered natively
        (``PlainSend::serve_frames``), byte for byte what the usual path stores and answers
        (tests/broker/test_send_served.py). A topic the call meets first is decided on here and
        the call made again for the rest. The broker calls it for a read whose first frame is a
        JSON-headed SEND_MESSAGE_V2 (``server.serve_by_code``).
        """
        plain = self._plain_pass()
        if plain is None or plain.waits or not self._may_acknowledge():
            return 0, []
        version = self.broker.topic_config_manager.data_version
        if version is not self._served_version:
            self._served_topics, self._served_version = {}, version
        topics = self._served_topics
        store = self.broker.store
        born_host = conn.peer_host.to_bytes()
        consumed, responses = 0, []
        while True:
            try:
                served = store.serve_plain_frames(plain.encoder, data, consumed, max_frame, topics, born_host)
            except Exception:  # that call stored nothing: the usual path answers its frames
                log.exception("serving plain sends from %s failed; they take the usual path", conn.peer)
                break
            if served.consumed:
                consumed += served.consumed
                responses.append(served.responses)
                count = 0
                for topic, sends, size in served.runs:
                    self.stats.inc_topic_put(topic, sends, size, sends)
                    count += sends
                self.stats.send_latency.observe(served.elapsed_s, count)
            unknown = served.unknown_topic
            if unknown is None or unknown in topics:
                break
            cached = self._plain_topic(unknown)
            topics[unknown] = None if cached is None or cached[1] is None else (cached[1], cached[2])
        return consumed, responses

    def _plain_replies(self, conn: Connection, run: list[RemotingCommand], sends: list[PlainSendRequest],
                       puts: list[PlainPut], plain: _PlainPass) -> list[Reply]:
        """The replies to the first ``len(puts)`` requests of ``run``, stored as ``puts`` (one put:
        one latency for all): their answers, or on a SYNC_FLUSH or SYNC_MASTER store futures of
        them, one wait per status (PUT_OK, or SLAVE_NOT_AVAILABLE for a put made while no slave
        was OK) up to the last put with it."""
        cfg = self.broker.broker_config
        region, trace = cfg.region_id, "true" if cfg.trace_on else "false"
        by_status: dict[PutMessageStatus, list[_PlainWait]] = {}
        for slot, (request, send, put) in enumerate(zip(run, sends, puts, strict=False)):
            wait = _PlainWait(slot, request, SendOkResponse(request, put, send[4], region, trace), send[3], put)
            same = by_status.get(put.status)
            if same is None:
                by_status[put.status] = [wait]
            else:
                same.append(wait)
        replies: list[Reply] = [None] * len(puts)
        if plain.waits:  # the clock and the loop only for answers that wait
            start = time.perf_counter()
            loop = asyncio.get_running_loop()
        for status, waits in by_status.items():
            if plain.waits:
                last = waits[-1].put
                answers: list[asyncio.Future[RemotingCommand]] = [loop.create_future() for _ in waits]
                if self.broker.store_waits.add(status, last.wrote_offset + last.wrote_bytes, flush=plain.flush,
                                               replica=plain.replica,
                                               done=functools.partial(self._answer_waits, conn, waits, answers, start)):
                    for wait, answer in zip(waits, answers, strict=True):
                        replies[wait.slot] = answer
                    continue
                # nothing to wait for: answered now, the futures dropped unseen
            self.stats.send_latency.observe(puts[0].elapsed_s, len(waits))
            for wait, reply in zip(waits, self._plain_answers(waits, status), strict=True):
                replies[wait.slot] = reply
        return replies

    def _answer_waits(self, conn: Connection, waits: list[_PlainWait], answers: list[asyncio.Future[RemotingCommand]],
                      start: float, status: PutMessageStatus) -> None:
        """StoreWaits' call once a group's puts of one status are past their waits: each answered
        at once (Connection.answer_all), unless the broker stopped and cancelled its future."""
        self.stats.send_latency.observe(waits[0].put.elapsed_s + time.perf_counter() - start, len(waits))
        live = [(wait, answer) for wait, answer in zip(waits, answers, strict=True) if not answer.done()]
        if live:
            responses = self._plain_answers([wait for wait, _ in live], status)
            conn.answer_all([(wait.request, answer, response)
                             for (wait, answer), response in zip(live, responses, strict=True)])

    def _plain_answers(self, waits: list[_PlainWait], status: PutMessageStatus) -> list[RemotingCommand]:
        """Stored plain sends' answers once their waits are over, as :meth:`_outcome` and
        :meth:`respond` make them: NOT_MASTER from a controller-mode broker that lost its
        mastership meanwhile; else each ``ok`` as its put encoded it, or its fields under the code
        of ``status`` (a timeout, SLAVE_NOT_AVAILABLE). The sends are counted per topic, in runs
        of one topic (one count for the usual group)."""
        if not self._may_acknowledge():
            return [self.respond(wait.request, SendOutcome(*NOT_MASTER)) for wait in waits]
        topic, requests, msg_num, size = waits[0].topic, 0, 0, 0
        for wait in waits:
            if wait.topic != topic:
                self.stats.inc_topic_put(topic, msg_num, size, requests)
                topic, requests, msg_num, size = wait.topic, 0, 0, 0
            requests += 1
            msg_num += wait.put.msg_num
            size += wait.put.wrote_bytes
        self.stats.inc_topic_put(topic, msg_num, size, requests)
        if status is PutMessageStatus.PUT_OK:
            return [wait.ok for wait in waits]
        code, remark = put_status_response(self.broker, status)
        return [wait.request.response(code, remark, wait.ok.ext_fields) for wait in waits]

    def _plain_sys_flag_bits(self, topic: str, config: TopicConfig) -> int | None:
        """What msgCheck and handleRetryAndDLQ decide of a topic once: the sysFlag bits its sends
        get (MULTI_TAGS), or None when sends to it are not plain (an invalid or forbidden name, a
        retry topic, whose sends may go to the DLQ)."""
        if (validate_topic(topic) is not None or topic in NOT_ALLOWED_SEND_TOPICS
                or topic.startswith(RETRY_GROUP_TOPIC_PREFIX)):
            return None
        return SysFlag.MULTI_TAGS if config.topic_filter_type is TopicFilterType.MULTI_TAG else 0

    def _plain_encoder_now(self) -> PlainSendEncoder | None:
        """The native encoder for the broker's current cluster name, region, trace switch and
        store host (made again when one changes); None for an IPv6 store host."""
        cfg = self.broker.broker_config
        settings = (cfg.broker_cluster_name, cfg.region_id, cfg.trace_on, self.broker.store_host)
        if settings != self._plain_settings:
            assert NATIVE is not None
            store_host = self.broker.store_host
            self._plain_encoder = None if store_host.is_v6 else NATIVE.PlainSend(
                cfg.broker_cluster_name, store_host.to_bytes(), list(NOT_PLAIN_PROPERTIES), cfg.region_id,
                cfg.trace_on, list(LanguageCode.__members__))
            self._plain_settings = settings
        return self._plain_encoder

    async def _respond_when_sent(self, request: RemotingCommand,
                                 sending: Coroutine[Any, Any, SendOutcome]) -> RemotingCommand:
        return self.respond(request, await sending)

    def send(self, header: SendMessageRequestHeader, body: bytes, born_host: HostAddress, peer: str,
             version: int, properties: dict[str, str] | None = None) -> Sending:
        """One send as a producer (a 4.x one, or a 5.x one through the gRPC port) asked for it with
        ``header`` and ``body``; its latency, waits included, goes to the send histogram when its
        outcome is known.

        ``properties`` are the header's properties as a map, from a caller that has them so (the
        gRPC port builds a map: writing it into the header's text only to parse it back cost a
        tenth of its send); the send owns the map from then on.
        """
        start = time.perf_counter()
        sent = self._send(header, body, born_host, peer, version, properties)
        if isinstance(sent, SendOutcome):
            self.stats.send_latency.observe(time.perf_counter() - start)
            return sent
        return self._timed(sent, start)

    async def _timed(self, waiting: Coroutine[Any, Any, SendOutcome], start: float) -> SendOutcome:
        outcome = await waiting
        self.stats.send_latency.observe(time.perf_counter() - start)
        return outcome

    def _send(self, header: SendMessageRequestHeader, body: bytes, born_host: HostAddress, peer: str,
              version: int, properties: dict[str, str] | None) -> Sending:
        store = self.broker.store
        if store.is_os_page_cache_busy():
            # NettyRemotingAbstract asks processor.rejectRequest() before running it
            return SendOutcome(ResponseCode.SYSTEM_BUSY, "[REJECTREQUEST]system busy, start flow control for a while")
        start_accept = self.broker.broker_config.start_accept_send_request_time_stamp
        if time.time() * 1000 < start_accept:
            return SendOutcome(ResponseCode.SYSTEM_ERROR, f"broker unable to service, until {start_accept}")
        if self._dispatch_lagging():
            return self._put_after_catch_up(header, body, born_host, peer, version, properties)
        return self._put(header, body, born_host, peer, version, properties)

    async def _put_after_catch_up(self, header: SendMessageRequestHeader, body: bytes, born_host: HostAddress,
                                  peer: str, version: int, properties: dict[str, str] | None) -> SendOutcome:
        await self._let_dispatch_catch_up()
        sent = self._put(header, body, born_host, peer, version, properties)
        return sent if isinstance(sent, SendOutcome) else await sent

    async def _outcome_when_stored(self, result: PutMessageResult, topic: str, queue_id: int, *,
                                   batch: bool, flush: bool, replica: bool) -> SendOutcome:
        """SYNC_FLUSH / SYNC_MASTER: the outcome once the put is durable and on a slave, or
        FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT (the put itself stays, as in RocketMQ):
        :func:`wait_until_stored`."""
        stored = await wait_until_stored(self.broker, result, flush=flush, replica=replica)
        return self._outcome(stored, topic, queue_id, batch=batch)

    def _may_acknowledge(self) -> bool:
        """Controller mode: whether this broker is still master within its write deadline
        (ReplicasManager.may_acknowledge); always outside controller mode."""
        manager = self.broker.replicas_manager
        return manager is None or manager.may_acknowledge()

    def _put(self, header: SendMessageRequestHeader, body: bytes, born_host: HostAddress, peer: str,
             version: int, properties: dict[str, str] | None) -> Sending:
        """The checks and the put: the outcome, or a coroutine when the put waits for its flush."""
        store = self.broker.store
        if not self._may_acknowledge():
            return SendOutcome(*NOT_MASTER)
        checked = self._check(peer, header)
        if isinstance(checked, SendOutcome):
            return checked
        topic_config = checked
        queue_id = header.queue_id if header.queue_id >= 0 else random_queue_id(topic_config.write_queue_nums)
        sys_flag = header.sys_flag
        cluster = self.broker.broker_config.broker_cluster_name
        if header.batch:
            if len(header.topic) > TOPIC_MAX_LENGTH:
                return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, f"message topic length too long {len(header.topic)}")
            if topic_config.topic_filter_type is TopicFilterType.MULTI_TAG:
                sys_flag |= SysFlag.MULTI_TAGS
            try:
                items = decode_batch(body)
            except ValueError as exc:
                return SendOutcome(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {exc}")
            batch_props = string_to_properties(header.properties or "")
            batch_props[PROPERTY_CLUSTER] = cluster
            batch = MessageBatch(
                topic=header.topic, queue_id=queue_id,
                items=[(item.body, item.flag, properties_to_string(item.properties)) for item in items],
                properties=batch_props, sys_flag=sys_flag, born_timestamp=header.born_timestamp,
                born_host=born_host, store_host=self.broker.store_host, reconsume_times=header.reconsume_times or 0,
            )
            flush, replica = put_waits(self.broker.store_config, batch_props)
            stored = store.put_messages(batch, wait_flush=False)  # the waits are on the loop, below
            if flush or replica:
                return self._outcome_when_stored(stored, header.topic, queue_id, batch=True, flush=flush,
                                                 replica=replica)
            return self._outcome(stored, header.topic, queue_id, batch=True)

        routed = self._retry_or_dlq(header, topic_config, queue_id, version)
        if isinstance(routed, SendOutcome):
            return routed
        topic, queue_id, routed_config = routed
        if routed_config.topic_filter_type is TopicFilterType.MULTI_TAG:
            sys_flag |= SysFlag.MULTI_TAGS
        if properties is None:
            properties = string_to_properties(header.properties or "")
        prepared = properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"  # Boolean.parseBoolean
        if prepared and self.broker.broker_config.reject_transaction_message:
            return SendOutcome(ResponseCode.NO_PERMISSION, f"the broker[{self.broker.broker_config.broker_ip1}] "
                               "sending transaction message is forbidden")
        properties[PROPERTY_CLUSTER] = cluster
        if properties.get(PROPERTY_WAIT_STORE_MSG_OK) == "true" and not prepared:
            # 4.9.8 does not store the default; a half message keeps it, as parseHalfMessageInner
            # rebuilds the properties string after the send path has put WAIT back
            del properties[PROPERTY_WAIT_STORE_MSG_OK]
        msg = Message(
            topic=topic, body=body, queue_id=queue_id, flag=header.flag, properties=properties,
            sys_flag=sys_flag, born_timestamp=header.born_timestamp, born_host=born_host,
            store_host=self.broker.store_host, reconsume_times=header.reconsume_times or 0,
        )
        if prepared:  # the response still names the real queue, as RocketMQ's does
            msg = half_message(msg)
        flush, replica = put_waits(self.broker.store_config, properties)
        result = store.put_message(msg, wait_flush=False)  # the waits are on the loop, below
        if prepared and result.ok:
            self.broker.transactional_message_service.metrics.half_messages += 1
        if flush or replica:
            return self._outcome_when_stored(result, topic, queue_id, batch=False, flush=flush, replica=replica)
        return self._outcome(result, topic, queue_id, batch=False)

    def _outcome(self, result: PutMessageResult, topic: str, queue_id: int, *, batch: bool) -> SendOutcome:
        if result.ok and not self._may_acknowledge():
            return SendOutcome(*NOT_MASTER)
        code, remark = put_status_response(self.broker, result.status)
        append = result.append
        if result.ok and append is not None:
            # RocketMQ counts a stored put (flush or slave timeouts included) under the topic it
            # was stored in: the DLQ topic for a retry message past its maximum
            self.stats.inc_topic_put(topic, append.msg_num, append.wrote_bytes)
        return SendOutcome(code, remark, result, topic, queue_id, batch)

    def respond(self, request: RemotingCommand, outcome: SendOutcome) -> RemotingCommand:
        """``outcome`` as RocketMQ's send response to ``request``: with the broker's region and trace
        switch and, when stored, the message id, queue and queue offset."""
        if outcome.code == ResponseCode.SYSTEM_BUSY:
            # the remoting layer's refusal (rejectRequest): no processor fields, as in RocketMQ
            return request.response(outcome.code, outcome.remark)
        fields = self._response_fields()
        result = outcome.result
        append = None if result is None else result.append
        if result is not None and result.ok and append is not None:
            msg_id = self._batch_msg_ids(result) if outcome.batch else append.msg_id
            fields.update(SendMessageResponseHeader(
                msg_id=msg_id, queue_id=outcome.queue_id, queue_offset=append.logics_offset).to_ext_fields())
        return request.response(outcome.code, outcome.remark, fields)

    def _batch_msg_ids(self, result: PutMessageResult) -> str:
        """Comma-joined offset ids of every record of a batch, as RocketMQ's batch append builds them.

        The records are consecutive in one segment; each one's size is read back from its
        first four bytes.
        """
        append = result.append
        assert append is not None
        ids = []
        pos = append.wrote_offset
        for _ in range(append.msg_num):
            ids.append(create_message_id(append.store_host, pos))
            head = self.broker.store.select_one_message_by_offset(pos, 4)
            if head is None:
                break
            pos += int.from_bytes(head, "big", signed=True)
        return ",".join(ids)

