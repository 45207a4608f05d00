"""TransactionalMessageServiceImpl: the check pass over the half queue, as RocketMQ 4.9.8 runs it.

A pass walks the half queue from group ``CID_RMQ_SYS_TRANS``'s offset. Op records (read 32 at a
time from the op queue's offset) say which half messages are done: their queue offsets, skipped.
A half message that is not done and older than ``transactionTimeOut`` (or its
``CHECK_IMMUNITY_TIME_IN_SECONDS``) is appended again to the half queue with its check count
raised (``TRANSACTION_CHECK_TIMES``), and the copy is what the producer is asked about; one
checked ``transactionCheckMax`` times is moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` instead, and so
is one older than ``fileReservedTime``. The pass stops at the first message too young to check
or stored after the pass began (the copies it appended itself), then stores the half offset past
what it handled and the op offset past the contiguous op records it used up.

Everything a pass needs is in the store and the offsets, so after a restart (even kill -9) the
next pass picks up where the persisted offsets say; a pass that repeats work after a crash only
checks a message again, which the producer answers again.

A pass blocks on the store: :class:`~rocketstore.broker.transaction.check_service` runs it in a
worker thread. Check requests themselves are sent on the loop (see check_listener.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rocketstore.broker.transaction.bridge import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    REMOVE_TAG,
    PullResult,
    TransactionalMessageBridge,
    renew_half_message,
)
from rocketstore.client.consumer import PullStatus
from rocketstore.common.clock import now_ms
from rocketstore.common.message import StoredMessage
from rocketstore.common.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC
from rocketstore.store.status import PutMessageStatus

log = logging.getLogger(__name__)

#: A pass gives up on a queue after this long (RocketMQ's MAX_PROCESS_TIME_LIMIT).
MAX_PROCESS_TIME_LIMIT_MS = 60_000
#: Unreadable half offsets skipped in a row before the pass ends (MAX_RETRY_COUNT_WHEN_HALF_NULL).
MAX_RETRY_COUNT_WHEN_HALF_NULL = 1
#: Op records read at a time.
OP_PULL_NUMS = 32


class CheckListener(Protocol):
    """What a pass does with a message to check and with one checked too often."""

    def resolve_half_msg(self, msg: StoredMessage) -> None: ...

    def resolve_discard_msg(self, msg: StoredMessage) -> None: ...


@dataclass(slots=True)
class TransactionMetrics:
    """Counts for /metrics since the broker started (ints: one writer each, the GIL orders them)."""

    half_messages: int = 0
    commits: int = 0
    rollbacks: int = 0
    checks: int = 0
    discarded: int = 0


def _to_int(text: str) -> int:
    """Java's getLong/getInt here: -1 when the text is not a number."""
    try:
        return int(text)
    except ValueError:
        log.error("not a number: %r", text)
        return -1


def calculate_op_offset(done: list[int], old_offset: int) -> int:
    """The op offset past the records used up: ``old_offset`` advanced over the contiguous run of
    ``done`` op offsets that starts there."""
    new_offset = old_offset
    for offset in sorted(done):
        if offset != new_offset:
            break
        new_offset += 1
    return new_offset


def immunity_time_ms(text: str, transaction_timeout_ms: int) -> int:
    """CHECK_IMMUNITY_TIME_IN_SECONDS in ms; -1 (or unreadable) means transactionTimeOut."""
    seconds = _to_int(text)
    return transaction_timeout_ms if seconds == -1 else seconds * 1000


class TransactionalMessageService:
    """The check pass and the counters; ``bridge`` is its store access."""

    def __init__(self, bridge: TransactionalMessageBridge, file_reserved_time_h: Callable[[], int]) -> None:
        self.bridge = bridge
        self.metrics = TransactionMetrics()
        self._file_reserved_time_h = file_reserved_time_h  # read at use: live-updatable
        #: set at shutdown: a pass running in its thread stops at its next message
        self.stopped = False

    # -- the pass ----------------------------------------------------------------------------
    def check(self, transaction_timeout_ms: int, transaction_check_max: int, listener: CheckListener) -> None:
        """One pass over every half queue (blocking)."""
        for queue_id in self.bridge.half_queue_ids():
            try:
                self._check_queue(queue_id, transaction_timeout_ms, transaction_check_max, listener)
            except Exception:
                log.exception("transaction check of %s-%d failed", RMQ_SYS_TRANS_HALF_TOPIC, queue_id)

    def _check_queue(self, queue_id: int, timeout_ms: int, check_max: int, listener: CheckListener) -> None:
        bridge = self.bridge
        start = now_ms()
        half_offset = bridge.fetch_consume_offset(RMQ_SYS_TRANS_HALF_TOPIC, queue_id)
        op_offset = bridge.fetch_consume_offset(RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id)
        log.debug("transaction check of queue %d from half offset %d, op offset %d", queue_id, half_offset, op_offset)
        if half_offset < 0 or op_offset < 0:
            log.error("transaction check: illegal offsets half %d op %d of queue %d, skipped",
                      half_offset, op_offset, queue_id)
            return
        done_op: list[int] = []
        remove: dict[int, int] = {}  # half queue offset -> op queue offset of the record ending it
        op_pull = self._fill_op_remove_map(remove, queue_id, op_offset, half_offset, done_op)
        null_count = 1
        new_offset = i = half_offset
        while not self.stopped:
            if now_ms() - start > MAX_PROCESS_TIME_LIMIT_MS:
                log.info("transaction check of queue %d reached %d ms", queue_id, MAX_PROCESS_TIME_LIMIT_MS)
                break
            if i in remove:
                done_op.append(remove.pop(i))
            else:
                got = bridge.get_messages(RMQ_SYS_TRANS_HALF_TOPIC, queue_id, i, 1)
                msg = got.messages[0] if got.messages else None
                if msg is None:
                    null_count += 1
                    if null_count - 1 > MAX_RETRY_COUNT_WHEN_HALF_NULL or got.status is PullStatus.NO_NEW_MSG:
                        break
                    log.info("transaction check: half offset %d of queue %d unreadable (%s), going on at %d",
                             i, queue_id, got.status.name, got.next_begin_offset)
                    i = new_offset = got.next_begin_offset
                    continue
                if self._need_discard(msg, check_max) or self._need_skip(msg):
                    listener.resolve_discard_msg(msg)
                    new_offset = i = i + 1
                    continue
                if msg.store_timestamp >= start:
                    break  # stored during this pass (our own put-backs): the next pass
                age = now_ms() - msg.born_timestamp
                immunity = timeout_ms
                immunity_text = msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
                if immunity_text is not None:
                    immunity = immunity_time_ms(immunity_text, timeout_ms)
                    if age < immunity and self._check_prepare_queue_offset(remove, done_op, msg):
                        new_offset = i = i + 1
                        continue
                elif 0 <= age < immunity:
                    break  # too young; so are the ones after it
                op_msgs = op_pull.messages
                need_check = ((op_msgs is None and age > immunity)
                              or (op_msgs is not None and op_msgs[-1].born_timestamp - start > timeout_ms)
                              or age <= -1)
                if not need_check:
                    # op records may still end it: read the next batch and look again
                    op_pull = self._fill_op_remove_map(remove, queue_id, op_pull.next_begin_offset, half_offset,
                                                       done_op)
                    continue
                if not self._put_back(msg):
                    continue
                listener.resolve_half_msg(msg)
            new_offset = i = i + 1
        if new_offset != half_offset:
            bridge.update_consume_offset(RMQ_SYS_TRANS_HALF_TOPIC, queue_id, new_offset)
        new_op_offset = calculate_op_offset(done_op, op_offset)
        if new_op_offset != op_offset:
            bridge.update_consume_offset(RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id, new_op_offset)

    def _fill_op_remove_map(self, remove: dict[int, int], queue_id: int, op_offset: int, min_half_offset: int,
                            done_op: list[int]) -> PullResult:
        """Read op records from ``op_offset``: those ending half messages before the pass's start
        offset are used up (``done_op``), the others go to ``remove``."""
        pull = self.bridge.get_messages(RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id, op_offset, OP_PULL_NUMS)
        if pull.status in (PullStatus.OFFSET_ILLEGAL, PullStatus.NO_MATCHED_MSG):
            log.debug("op offset %d of queue %d is %s; moving to %d", op_offset, queue_id, pull.status.name,
                      pull.next_begin_offset)
            self.bridge.update_consume_offset(RMQ_SYS_TRANS_OP_HALF_TOPIC, queue_id, pull.next_begin_offset)
            return pull
        for op in pull.messages or ():
            half_queue_offset = _to_int(op.body.decode("utf-8", "replace"))
            if op.tags != REMOVE_TAG:
                log.error("op record with tag %r at op offset %d ignored", op.tags, op.queue_offset)
            elif half_queue_offset < min_half_offset:
                done_op.append(op.queue_offset)
            else:
                remove[half_queue_offset] = op.queue_offset
        return pull

    def _need_discard(self, msg: StoredMessage, check_max: int) -> bool:
        """Whether ``msg`` was checked ``check_max`` times; else count this check in its properties."""
        text = msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES)
        check_times = 1
        if text is not None:
            check_times = _to_int(text)
            if check_times >= check_max:
                return True
            check_times += 1
        msg.properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(check_times)
        return False

    def _need_skip(self, msg: StoredMessage) -> bool:
        """Whether ``msg`` is older than the CommitLog keeps files (fileReservedTime)."""
        if now_ms() - msg.born_timestamp > self._file_reserved_time_h() * 3600 * 1000:
            log.info("half message %s is older than fileReservedTime: discarded", msg.uniq_key)
            return True
        return False

    def _check_prepare_queue_offset(self, remove: dict[int, int], done_op: list[int], msg: StoredMessage) -> bool:
        """A message still in its immunity time: True (skip it) when an op record ends the copy it
        was made from, or once it is appended again to wait out its immunity further on."""
        text = msg.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
        if text is not None:
            prepared_offset = _to_int(text)
            if prepared_offset == -1:
                return False
            if prepared_offset in remove:
                done_op.append(remove.pop(prepared_offset))
                return True
        result = self.bridge.put_message(renew_half_message(msg, immunity=True))
        return result.status is PutMessageStatus.PUT_OK

    def _put_back(self, msg: StoredMessage) -> bool:
        """Append ``msg`` to the half queue again; ``msg`` then describes the copy (putBackHalfMsgQueue)."""
        result = self.bridge.put_message(renew_half_message(msg))
        if result.status is not PutMessageStatus.PUT_OK or result.append is None:
            log.error("putting half message %s back failed: %s", msg.uniq_key, result.status.name)
            return False
        msg.queue_offset = result.append.logics_offset
        msg.physical_offset = result.append.wrote_offset
        return True
