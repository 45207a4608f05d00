"""PULL_MESSAGE (11): consumers read a queue, with long polling.

Follows RocketMQ 4.9.8's PullMessageProcessor:

1. refusals: broker not readable / group consumption disabled / topic not readable
   (NO_PERMISSION), unknown group (SUBSCRIPTION_GROUP_NOT_EXIST; groups are auto-created when
   ``autoCreateSubscriptionGroup``), unknown topic (TOPIC_NOT_EXIST), queueId outside
   ``0..readQueueNums-1`` (SYSTEM_ERROR);
2. the subscription: with the SUBSCRIPTION sysFlag bit, the request's own expression
   (``*`` or ``TagA || TagB``, or a SQL92 selector with expressionType SQL92, compiled here:
   SUBSCRIPTION_PARSE_FAILED when it does not); otherwise the one the group registered by
   heartbeat, when the broker's client manager has it (push consumers send no expression; a
   registered SQL92 expression that does not compile answers FILTER_DATA_NOT_EXIST), else the
   request's expression or ``*`` — RocketMQ would answer SUBSCRIPTION_NOT_EXIST there, but a
   consumer that pulls before its first heartbeat is better served by matching everything, since
   clients re-check tags themselves. A SQL92 pull with nothing registered is answered
   SUBSCRIPTION_NOT_EXIST (matching everything would deliver what the selector excludes: clients
   do not re-check SQL), and one whose subVersion is newer than the registered selector's gets
   SUBSCRIPTION_NOT_LATEST (the consumer changed its selector and its heartbeat has not come yet).
   SQL92 subscriptions are refused (SYSTEM_ERROR "The broker does not
   support consumer to filter message by SQL92") unless ``enablePropertyFilter``, after the
   parse checks, in RocketMQ's order. A SQL92 subscription's filter evaluates every message's
   properties (see :mod:`rocketstore.broker.filter`); with ``filterSupportRetry`` a pull of
   ``%RETRY%group`` also applies the group's SQL92 filter of each message's original topic;
3. the store read, mapped to a response code per GetMessageStatus:

   ========================================  =========================================
   FOUND                                     SUCCESS, body = the raw records back to back
   NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING  PULL_RETRY_IMMEDIATELY
   OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE    PULL_NOT_FOUND (held when SUSPEND is set)
   NO_MATCHED_LOGIC_QUEUE, NO_MESSAGE_IN_QUEUE  PULL_OFFSET_MOVED if the request offset is not
                                             0, else PULL_NOT_FOUND
   OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL   PULL_OFFSET_MOVED
   ========================================  =========================================

   The remark is the status name; the header carries nextBeginOffset, minOffset, maxOffset
   and suggestWhichBrokerId (0, the master, unless ``slaveReadEnable``);
4. with the COMMIT_OFFSET bit the request's commitOffset is stored for the group (first run
   only, never on a slave), even when the pull is then held.

A held pull (see :mod:`rocketstore.broker.processor.long_polling`) waits at most its
``suspendTimeoutMillis`` (capped at :data:`MAX_SUSPEND_MS`; ``shortPollingTimeMills`` when
``longPollingEnable`` is false) and is then re-run once without holding, and answered.

Store reads run on the event loop: a pull copies at most ``maxTransferBytesOnMessageInMemory``
(256 KiB by default) out of the mapped segments, tens of microseconds, less than a thread
hand-off. A tag subscription (``*``, ``TagA || TagB``) with a JSON header, the usual pull, is read
and answered in one pass (:mod:`rocketstore.store.pull_transfer`): the store walks the queue,
filters by tag hash and copies the records from the mapped CommitLog straight into the encoded
SUCCESS frame, which goes to the transport as it is (:class:`EncodedResponse`); SQL92 and
retry-topic filters, binary headers and a slave that may not serve reads take the general path,
whose records are gathered one by one and the frame encoded afterwards. Every decision around the
read (the checks, the response code, long polling, offset commits, statistics) is made here
either way. A pull that is not held is answered inline, in the read that brought it; only a held
pull becomes a task (the handler returns a coroutine, see :mod:`rocketstore.broker.server`).

With the native extension, the pulls a connection's read starts with are served before they
become commands (:meth:`PullMessageProcessor.serve_pull_frames`): decoded natively and answered
from the same store read, on decisions made here once per group, topic and subscription; the
first pull that would not be answered SUCCESS at once from a tag subscription, and the rest of
the read, take the path above.
RocketMQ's OFFSET_MOVED_EVENT system messages are not written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Final, NamedTuple

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterData
from rocketstore.broker.filter.expression_message_filter import (
    ExpressionForRetryMessageFilter,
    ExpressionMessageFilter,
)
from rocketstore.broker.processor.long_polling import PullRequestHoldService
from rocketstore.broker.server import COALESCE_MAX_BYTES, Connection, Handler, Reply
from rocketstore.common.filter import is_tag_type
from rocketstore.common.mix_all import RETRY_GROUP_TOPIC_PREFIX
from rocketstore.common.native import NATIVE
from rocketstore.common.perm_name import PERM_READ
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import RPC_TYPE_RESPONSE, RemotingCommand, language_name
from rocketstore.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag
from rocketstore.store.config import BrokerRole
from rocketstore.store.message_store import GetMessageResult, MessageFilter, TagFilter
from rocketstore.store.pull_transfer import PullFrame
from rocketstore.store.status import GetMessageStatus

log = logging.getLogger(__name__)

#: PullSysFlag's bits as plain ints: ``int & IntFlag`` makes a new IntFlag, three times a pull
_COMMIT_OFFSET: Final = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND: Final = int(PullSysFlag.SUSPEND)
_SUBSCRIPTION: Final = int(PullSysFlag.SUBSCRIPTION)

#: the response bytes :meth:`PullMessageProcessor.serve_pull_frames` makes of one read at most: the
#: rest of the read takes the usual path, which stops taking requests while the client does not read
SERVED_BYTES_PER_READ: Final = COALESCE_MAX_BYTES
#: the most decisions :meth:`PullMessageProcessor.serve_pull_frames` keeps (a key per group, topic and
#: subscription): past it they are made afresh, so that clients inventing subscriptions cannot grow it
MAX_SERVED_KEYS: Final = 4096

# The push consumer's BROKER_SUSPEND_MAX_TIME_MILLIS; no client of ours asks for longer holds.
MAX_SUSPEND_MS = 15_000
MASTER_ID = 0


_CODE_BY_STATUS = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def response_code_for(status: GetMessageStatus, request_offset: int) -> ResponseCode:
    """The PULL_MESSAGE response code for a store outcome (PullMessageProcessor's switch)."""
    if status in (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE):
        return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
    return _CODE_BY_STATUS[status]


class PlainPull(NamedTuple):
    """The decision :meth:`PullMessageProcessor.serve_pull_frames` serves a key's pulls on: the
    topic's readQueueNums, the subscription's tag hash codes (None for all) and the broker ids
    a SUCCESS response suggests."""

    read_queue_nums: int
    tag_codes: tuple[int, ...] | None
    suggest_when_slow: int
    suggest_otherwise: int


class PullMessageProcessor:
    """The pull path and its long polling.

    The hold service is woken by the broker's message-arrival listeners, drops the pulls of a
    closed connection and lets every held pull go first thing at shutdown; the processor
    subscribes it to those three events when it is built, and publishes how many pulls it holds
    (observable state for tests and dashboards: is a pull held yet?).
    """

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        self.stats = broker.broker_stats_manager
        self.hold_service = hold = PullRequestHoldService(broker.store)
        broker.message_arriving_listeners.append(hold.notify_message_arriving)
        broker.remoting.on_disconnect.append(hold.on_disconnect)
        broker.shutdown_listeners.append(hold.close)
        broker.add_gauge("rocketstore_held_pull_requests", "Long-polling pulls held, waiting for messages",
                         lambda: hold.held_count)
        stats = broker.consumer_filter_manager.stats
        broker.add_counter("rocketstore_filter_evaluations", "Messages evaluated against SQL92 subscriptions",
                           lambda: stats.evaluations)
        broker.add_counter("rocketstore_filter_matches", "Messages a SQL92 subscription selected",
                           lambda: stats.matched)
        #: the native pull server and the decisions it serves on, made for the versions of the
        #: tables and settings they depend on (see :meth:`serve_pull_frames`)
        self._serve = None if NATIVE is None else NATIVE.PullServe(list(LanguageCode.__members__))
        self._served: dict[tuple[str, str, bool, str | None, str | None], PlainPull | None] = {}
        self._served_for: tuple[object, ...] = ()
        broker.add_counter("rocketstore_filter_errors",
                           "SQL92 evaluations that failed (the message is not delivered), e.g. a non-numeric "
                           "property compared with a number", lambda: stats.errors)

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.PULL_MESSAGE: self.handle}

    def handle(self, conn: Connection, request: RemotingCommand) -> Reply:
        """The answer at once (inline on the loop), or a coroutine that holds the pull first.

        The pull histogram gets the broker's work on each answered pull: a held pull's two runs
        added up, the hold itself left out (it lasts as long as the consumer asked, by design).
        """
        start = time.perf_counter()
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        outcome = self.process(conn, request, header, allow_suspend=True)
        if isinstance(outcome, RemotingCommand):
            self.stats.pull_latency.observe(time.perf_counter() - start)
            return outcome
        message_filter, timeout_ms = outcome
        return self._hold(conn, request, header, message_filter, timeout_ms, time.perf_counter() - start)

    async def _hold(self, conn: Connection, request: RemotingCommand, header: PullMessageRequestHeader,
                    message_filter: MessageFilter, timeout_ms: int, first_run_s: float) -> RemotingCommand | None:
        answer = await self.hold_service.wait_for_message(
            conn, header.topic, header.queue_id, header.queue_offset, message_filter, timeout_ms)
        if not answer:
            return None  # the connection is gone
        start = time.perf_counter()
        rerun = self.process(conn, request, header, allow_suspend=False)
        assert isinstance(rerun, RemotingCommand)
        self.stats.pull_latency.observe(first_run_s + time.perf_counter() - start)
        return rerun

    def serve_pull_frames(self, conn: Connection, data: bytes, max_frame: int) -> tuple[int, list[bytes]]:
        """Serve the PULL_MESSAGE requests at the head of ``data`` (whole remoting frames as
        ``conn`` read them, before they become commands: RemotingServer.serve_frames) natively:
        (bytes served, their SUCCESS frames). The frames from the first one it does not serve on
        take the usual path.

        It serves what :meth:`process` would answer SUCCESS at once from a tag subscription, on a
        master that takes reads: ``PullServe::serve_frames`` (native/src/pull_serve.rs) decodes
        each frame and reads its header, and looks up its decision by (group, topic, whether the
        request carries its own subscription, the subscription, its type), which
        :meth:`_plain_pull` makes here, from the same tables and settings as :meth:`process`,
        once per key and again whenever those change; the store read is
        :meth:`DefaultMessageStore.found_frame`, the one :meth:`process` makes. A pull that finds
        nothing (long polling), a refusal, a SQL92 or retry filter end the serving at that frame,
        untouched, and so do :data:`SERVED_BYTES_PER_READ` bytes of answers. Offsets are
        committed and statistics kept as :meth:`process` does, after the call
        (tests/broker/test_pull_served.py holds the two paths identical).
        """
        broker = self.broker
        cfg = broker.broker_config
        serve = self._serve
        if (serve is None or not cfg.broker_permission & PERM_READ
                or broker.store_config.broker_role is BrokerRole.SLAVE):
            return 0, []
        begin = time.perf_counter()
        depends = (broker.topic_config_manager.data_version, broker.subscription_group_manager.data_version,
                   broker.consumer_manager.subscriptions_version, cfg.slave_read_enable, cfg.filter_support_retry)
        if depends != self._served_for or len(self._served) > MAX_SERVED_KEYS:
            self._served, self._served_for = {}, depends
        decided, read = self._served, broker.store.found_frame
        consumed, made, frames, pulls = 0, 0, [], []
        while True:
            try:
                served, more_frames, more_pulls, unknown = serve.serve_frames(
                    data, consumed, max_frame, decided, read, SERVED_BYTES_PER_READ - made)
            except Exception:  # nothing of that call is answered: the usual path takes its frames
                log.exception("serving pulls from %s failed; they take the usual path", conn.peer)
                break
            consumed += served
            frames += more_frames
            pulls += more_pulls
            made += sum(len(frame) for frame in more_frames)
            if unknown is None or unknown in decided or made >= SERVED_BYTES_PER_READ:
                break
            decided[unknown] = self._plain_pull(*unknown)
        if pulls:
            stats, offsets = self.stats, broker.consumer_offset_manager
            for group, topic, queue_id, count, size, commit in pulls:
                if commit is not None:
                    offsets.commit_offset(group, topic, queue_id, commit)
                stats.inc_group_get(topic, group, count, size)
                # the body was made by the read: nothing is left to time after it (see process)
                stats.inc_group_get_latency(group, topic, queue_id, 0)
            stats.pull_latency.observe((time.perf_counter() - begin) / len(pulls), len(pulls))
        return consumed, frames

    def _plain_pull(self, group: str, topic: str, flagged: bool, expression: str | None,
                    expression_type: str | None) -> PlainPull | None:
        """What :meth:`serve_pull_frames` serves such pulls with, None when :meth:`process`
        would not answer them SUCCESS from a tag subscription at once: the group's and topic's
        refusals, a subscription that is not a tag expression (the request's own when
        ``flagged``, else the one the group registered, else the request's), retry filters."""
        broker = self.broker
        cfg = broker.broker_config
        config = broker.subscription_group_manager.find_subscription_group_config(group)
        if config is None or not config.consume_enable:
            return None
        topic_config = broker.topic_config_manager.get(topic)
        if topic_config is None or not topic_config.perm & PERM_READ:
            return None
        if not flagged:
            registered = broker.consumer_manager.find_subscription_data(group, topic)
            if registered is not None:
                expression, expression_type = registered.sub_string, registered.expression_type or "TAG"
        if not is_tag_type(expression_type) or (cfg.filter_support_retry
                                                and topic.startswith(RETRY_GROUP_TOPIC_PREFIX)):
            return None
        tags = TagFilter(expression)
        if cfg.slave_read_enable:
            suggest_when_slow, suggest_otherwise = config.which_broker_when_consume_slowly, config.broker_id
        else:
            suggest_when_slow = suggest_otherwise = MASTER_ID
        return PlainPull(topic_config.read_queue_nums, None if tags.subscribe_all else tuple(tags.code_set),
                         suggest_when_slow, suggest_otherwise)

    def _subscription(
        self, request: RemotingCommand, header: PullMessageRequestHeader
    ) -> MessageFilter | RemotingCommand:
        broker = self.broker
        filters = broker.consumer_filter_manager
        expression = header.subscription
        expression_type = header.expression_type or "TAG"
        filter_data = None
        if header.sys_flag & _SUBSCRIPTION:
            if not is_tag_type(expression_type):
                built = filters.build(header.topic, header.consumer_group, expression, expression_type)
                if not isinstance(built, ConsumerFilterData):
                    return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                            "parse the consumer's subscription failed")
                filter_data = built
        else:
            registered = broker.consumer_manager.find_subscription_data(header.consumer_group, header.topic)
            if registered is not None:
                expression, expression_type = registered.sub_string, registered.expression_type or "TAG"
                if not is_tag_type(expression_type):
                    if registered.sub_version < header.sub_version:
                        return request.response(ResponseCode.SUBSCRIPTION_NOT_LATEST,
                                                "the consumer's subscription not latest")
                    filter_data = filters.get(header.topic, header.consumer_group)
                    if filter_data is None:
                        return request.response(
                            ResponseCode.FILTER_DATA_NOT_EXIST,
                            "The broker's consumer filter data is not exist!Your expression may be wrong!")
            elif not is_tag_type(expression_type):
                return request.response(ResponseCode.SUBSCRIPTION_NOT_EXIST,
                                        "the consumer's subscription not exist")
        if not is_tag_type(expression_type) and not broker.broker_config.enable_property_filter:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The broker does not support consumer to filter message by {expression_type}")
        if filter_data is not None:
            return ExpressionMessageFilter(filter_data, filters.stats)
        if broker.broker_config.filter_support_retry and header.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return ExpressionForRetryMessageFilter(TagFilter(expression), header.consumer_group, filters)
        return TagFilter(expression)

    def process(
        self, conn: Connection, request: RemotingCommand, header: PullMessageRequestHeader, *, allow_suspend: bool
    ) -> RemotingCommand | tuple[MessageFilter, int]:
        """One run of the pull: a response, or (filter, timeout) when the pull should be held."""
        broker = self.broker
        cfg = broker.broker_config
        if not cfg.broker_permission & PERM_READ:
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the broker[{broker.store_host.host}] pulling message is forbidden")
        group = broker.subscription_group_manager.find_subscription_group_config(header.consumer_group)
        if group is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"subscription group [{header.consumer_group}] does not exist")
        if not group.consume_enable:
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"subscription group no permission, {header.consumer_group}")
        topic_config = broker.topic_config_manager.get(header.topic)
        if topic_config is None:
            return request.response(ResponseCode.TOPIC_NOT_EXIST,
                                    f"topic[{header.topic}] not exist, apply first please!")
        if not topic_config.perm & PERM_READ:
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the topic[{header.topic}] pulling message is forbidden")
        if not 0 <= header.queue_id < topic_config.read_queue_nums:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic_config.read_queue_nums}] consumer:[{conn.peer}]")
        message_filter = self._subscription(request, header)
        if isinstance(message_filter, RemotingCommand):
            return message_filter

        is_slave = broker.store_config.broker_role is BrokerRole.SLAVE
        if cfg.slave_read_enable:
            suggest_when_slow, suggest_otherwise = group.which_broker_when_consume_slowly, group.broker_id
        else:
            suggest_when_slow = suggest_otherwise = MASTER_ID
        frame: bytes | None = None
        if (type(message_filter) is TagFilter and request.serialize_type is SerializeType.JSON
                and not (is_slave and not cfg.slave_read_enable)):
            # the common case in one pass: walk, tag filter and the SUCCESS frame (store.pull_transfer)
            result, message_count, frame = broker.store.get_message_frame(
                header.consumer_group, header.topic, header.queue_id, header.queue_offset, header.max_msg_nums,
                message_filter, PullFrame(request.opaque, language_name(request.language), request.version,
                                          suggest_when_slow, suggest_otherwise))
        else:
            result = broker.store.get_message(header.consumer_group, header.topic, header.queue_id,
                                              header.queue_offset, header.max_msg_nums, message_filter)
            message_count = result.message_count
        code = response_code_for(result.status, header.queue_offset)
        if is_slave and not cfg.slave_read_enable:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        if code is ResponseCode.PULL_OFFSET_MOVED and is_slave and not broker.store_config.offset_check_in_slave:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        suggest = suggest_when_slow if result.suggest_pulling_from_slave else suggest_otherwise

        if allow_suspend and header.sys_flag & _COMMIT_OFFSET and not is_slave:
            broker.consumer_offset_manager.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                                         header.commit_offset)
        if code is ResponseCode.PULL_NOT_FOUND and allow_suspend and header.sys_flag & _SUSPEND:
            timeout = header.suspend_timeout_millis if cfg.long_polling_enable else cfg.short_polling_time_mills
            return message_filter, min(timeout, MAX_SUSPEND_MS)
        if code != ResponseCode.SUCCESS:
            return self._response(request, code, result, suggest)
        # GROUP_GET_NUMS / GROUP_GET_SIZE / BROKER_GET_NUMS, and GROUP_GET_LATENCY: the body's making
        self.stats.inc_group_get(header.topic, header.consumer_group, message_count, result.buffer_total_size)
        begin = time.perf_counter()
        if frame is None:
            response = self._response(request, code, result, suggest)
        else:
            response = EncodedResponse(request, code, result, suggest, frame)
        self.stats.inc_group_get_latency(header.consumer_group, header.topic, header.queue_id,
                                         int((time.perf_counter() - begin) * 1000))
        return response

    @staticmethod
    def response_fields(result: GetMessageResult, suggest: int) -> dict[str, str]:
        """A response's header fields (:class:`PullMessageResponseHeader`)."""
        return PullMessageResponseHeader(
            suggest_which_broker_id=suggest, next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset, max_offset=result.max_offset,
        ).to_ext_fields()

    @classmethod
    def _response(cls, request: RemotingCommand, code: int, result: GetMessageResult, suggest: int) -> RemotingCommand:
        body = b"".join(result.messages) if code == ResponseCode.SUCCESS else b""
        return request.response(code, result.status.value, cls.response_fields(result, suggest), body)


class EncodedResponse(RemotingCommand):
    """A pull's SUCCESS response whose frame the store already encoded, records and all
    (:meth:`DefaultMessageStore.get_message_frame`): :meth:`encode` hands that frame over as it is.

    Like RocketMQ's response under ``transferMsgByHeap=false``, whose body stays null while its
    ManyMessageTransfer writes the header and the records: ``body`` is empty, the records are
    only in ``frame``. The other fields are the ones the frame was encoded from, for whoever
    looks at the response before it goes out; as for a send's ``SendOkResponse``, the header's
    fields are made into a map only when read, and the object is made without the dataclass's
    keyword ``__init__``: both cost more per pull than the rest of the response's making.
    """

    __slots__ = ("_fields", "frame")

    frame: bytes

    def __init__(self, request: RemotingCommand, code: int, result: GetMessageResult, suggest: int,
                 frame: bytes) -> None:
        # every field of RemotingCommand set positionally, ext_fields (a property here) excepted
        self.code = code
        self.opaque = request.opaque
        self.flag = RPC_TYPE_RESPONSE
        self.remark = result.status.value
        self.body = b""
        self.language = request.language
        self.version = request.version
        self.serialize_type = request.serialize_type
        self.frame = frame
        self._fields = (result, suggest)

    @property
    def ext_fields(self) -> dict[str, str]:  # type: ignore[override]  # read-only: the frame is made
        return PullMessageProcessor.response_fields(*self._fields)

    def encode(self) -> bytes:
        return self.frame
