"""Pop consumption for gRPC clients: receive (long polling), ack, change invisible duration.

A receive of group G on topic T first hands out G's messages of T whose invisible time has
passed (delivery attempt + 1), then new messages from each queue's cursor, rotating the first
queue between calls so no queue starves. It reads whatever queue the client named in its request
from all queues of the topic, as RocketMQ's proxy pops from every queue of the broker. Every
change goes through the pop log (pop_log.py) before the client learns of it. The rules below (what
goes out again, what goes to the DLQ, what a FIFO queue holds back, what a store read moves) are
pure functions in pop_policy.py; this module reads the store and the log for them and writes
their records.

Where a group starts: at its committed consumer offset when it has one (a group that consumed
with a 4.x client continues where it stopped), else at the queue's first message, so messages
sent before a new simple consumer's first receive are not skipped. The pop state moves the
group's committed offset in ConsumerOffsetManager along (to the oldest message still in flight,
else the cursor), so admin tools and 4.x consumers of the group see the progress.

Maximum delivery attempts: a message of group G delivered ``retryMaxTimes + 1`` times (G's
subscription group config, 16 by default: the attempts the client's retry policy is told) that
comes due once more is not delivered again but moved to ``%DLQ%G``, through the broker's
CONSUMER_SEND_MSG_BACK path (``forward`` below), as a 4.x consumer's message past its retries
is; ForwardMessageToDeadLetterQueue moves one there at a client's request. A move that fails is
retried after :data:`DLQ_RETRY_MS`.

FIFO groups (``consumeMessageOrderly``, as in RocketMQ 5.x): messages of one message group share
a queue (the send path hashes the group to it), so a queue is handed out in order: while any of the
group's messages of a queue is in flight and not due, that queue gives nothing, neither a new
message nor a redelivery of a later one; when they come due, they are delivered again together,
in offset order. A message past its last attempt goes to the DLQ and the queue moves on.

Long polling: a receive that finds nothing waits, up to its polling time, for a message to arrive
on the topic (the broker's message-arriving listeners), for one of the group's messages in flight
to become visible again, or for an invisible time to change. All of it runs on the broker's event
loop; store reads are the same short reads the remoting pull path makes inline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.grpc_v2 import receipt_handle
from rocketstore.broker.grpc_v2.pop_log import Ack, Cursor, InFlight, Invisible, PopLog, QueueKey, Record
from rocketstore.broker.grpc_v2.pop_policy import (
    DeliveryPolicy,
    Redelivery,
    fifo_holds_new,
    queue_order,
    redelivery,
    redelivery_candidates,
    take_new_messages,
)
from rocketstore.broker.grpc_v2.receipt_handle import ReceiptHandle
from rocketstore.common.clock import now_ms
from rocketstore.common.message import StoredMessage, decode_record
from rocketstore.store.message_store import MessageFilter
from rocketstore.store.status import GetMessageStatus

log = logging.getLogger(__name__)

#: most messages one receive returns (RocketMQ's proxy caps a batch at 32 as well)
MAX_BATCH: Final = 32
#: how long a message whose move to the dead-letter queue failed waits before the next try
DLQ_RETRY_MS: Final = 10_000

#: moves a message of a group to its dead-letter queue; returns None, or why it could not
DeadLetterForwarder = Callable[[str, StoredMessage], "str | None"]


class InvalidHandle(ValueError):
    """A receipt handle that names no delivery the broker holds (answered INVALID_RECEIPT_HANDLE)."""


@dataclass(frozen=True, slots=True)
class Received:
    message: StoredMessage
    handle: ReceiptHandle
    attempt: int


class PopService:
    """Pop state of every group (through its :class:`PopLog`) and the receives waiting for messages."""

    def __init__(self, broker: BrokerContext, pop_log: PopLog, forward: DeadLetterForwarder) -> None:
        self.broker = broker
        self.log = pop_log
        self.forward = forward
        #: messages moved to a dead-letter queue (for /metrics)
        self.dead_lettered = 0
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._rotation: dict[tuple[str, str], int] = {}
        #: (group, topic, attempt id) -> what that receive took (see :meth:`receive`)
        self._attempts: dict[tuple[str, str, str], list[Received]] = {}
        self._closed = False
        #: deliveries of a message after its first (for /metrics)
        self.redeliveries = 0

    def open(self) -> None:
        """Replay the pop log and hold it against the store (blocking: call it in a thread, after the
        store recovered and before any message is sent)."""
        self.log.open()
        self.log.append(self._behind_the_store())

    def _behind_the_store(self) -> list[Record]:
        """Records that move back every cursor past the end of its queue: the store lost its tail
        (a power loss can take what was not flushed, while the pop log's sync came later). New
        messages take those offsets again and must not be skipped as if received; what was in
        flight there is gone."""
        records: list[Record] = []
        store = self.broker.store
        for (group, topic, queue_id), cursor in list(self.log.state.cursors.items()):
            end = store.get_max_offset_in_queue(topic, queue_id)
            if cursor <= end:
                continue
            log.warning("pop: %s queue %d ends at %d, before %s's cursor %d (the store lost its tail); the cursor "
                        "moves back", topic, queue_id, end, group, cursor)
            lost = [offset for offset in self.log.state.in_flight.get((group, topic, queue_id), {}) if offset >= end]
            records += [Ack(group, topic, queue_id, offset) for offset in lost]
            records.append(Cursor(group, topic, queue_id, end))
        return records

    def attach(self) -> None:
        """Listen for arriving messages (on the loop, once open)."""
        self.broker.message_arriving_listeners.append(self._on_arrival)

    @property
    def waiting_count(self) -> int:
        """Receives and offset-based pulls waiting in long polling now (for /metrics)."""
        return sum(len(waiters) for waiters in self._waiters.values())

    def close_waiters(self) -> None:
        """Release every waiting receive (it answers with what it has); no receive waits after this."""
        self._closed = True
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def close(self) -> None:
        """Close the log (blocking: fsyncs), once nothing calls in any more."""
        self.log.close()

    # -- receive -------------------------------------------------------------------------------
    async def receive(self, group: str, topic: str, message_filter: MessageFilter, batch: int, invisible_ms: int,
                      wait_s: float, attempt_id: str = "") -> list[Received]:
        """Up to ``batch`` messages, waiting up to ``wait_s`` for the first one.

        ``attempt_id`` names a client's receive across its retries: a retry (the answer was lost,
        e.g. the call timed out on the way back) gets the messages the first attempt took, while
        they are still held for it, instead of nothing until their invisible time passes.
        """
        if attempt_id:
            earlier = self._earlier_attempt(group, topic, attempt_id)
            if earlier:
                return earlier
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            picked = self._pick(group, topic, message_filter, min(batch, MAX_BATCH), invisible_ms)
            remaining = deadline - loop.time()
            if picked or remaining <= 0 or self._closed:
                if picked and attempt_id:
                    self._remember_attempt(group, topic, attempt_id, picked)
                return picked
            earliest = self.log.state.earliest_visible(group, topic)
            if earliest is not None:
                remaining = min(remaining, max((earliest - now_ms()) / 1000, 0.001))
            await self.wait_for_news(topic, remaining)

    async def wait_for_news(self, topic: str, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for a message to arrive on ``topic`` or an invisible time of it to
        change (the long polling of receives, and of offset-based pulls)."""
        if self._closed:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(topic, set())
        waiters.add(waiter)
        try:
            await asyncio.wait([waiter], timeout=timeout_s)
        finally:
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(topic, None)

    def _pick(self, group: str, topic: str, message_filter: MessageFilter, batch: int,
              invisible_ms: int) -> list[Received]:
        """Up to ``batch`` messages: first those whose invisible time passed, then new ones. What to
        hand out is :mod:`~rocketstore.broker.grpc_v2.pop_policy`'s decision; this reads the store for
        it and logs the records in one append."""
        now = now_ms()
        visible_at = now + invisible_ms
        policy = DeliveryPolicy.of(self.broker.subscription_group_manager.find_subscription_group_config(group))
        records: list[Record] = []
        picked: list[Received] = []
        touched: set[int] = set()
        self._redeliver(group, topic, policy, batch, now, visible_at, records, picked, touched)
        self._take_new(group, topic, policy, message_filter, batch, visible_at, records, picked, touched)
        self.log.append(records)
        for queue_id in touched:
            self._commit_offset(group, topic, queue_id)
        return picked

    def _redeliver(self, group: str, topic: str, policy: DeliveryPolicy, batch: int, now: int, visible_at: int,
                   records: list[Record], picked: list[Received], touched: set[int]) -> None:
        """Messages whose invisible time passed, the earliest first: delivered again, attempt + 1 (or
        dead-lettered). The records apply when the pick ends, so ``taken`` keeps an entry from being
        handed out twice in one pick."""
        store = self.broker.store
        state = self.log.state
        taken: set[tuple[int, int]] = set()
        waiting: list[tuple[int, int]] = []  # due messages of FIFO queues that wait for the rest
        while len(picked) < batch:
            due = state.pop_due(group, topic, now)
            if due is None:
                break
            queue_id, offset, held = due
            if (queue_id, offset) in taken:
                continue
            candidates = redelivery_candidates(policy, queue_id, offset, held,
                                               state.in_flight[(group, topic, queue_id)], taken, now)
            if candidates is None:  # a FIFO queue waits until every message handed out before is acked or due
                waiting.append((queue_id, offset))
                continue
            for offset, held in candidates:
                if len(picked) >= batch:
                    state.rearm(group, topic, queue_id, offset)  # the rest of a FIFO queue, next time
                    break
                taken.add((queue_id, offset))
                touched.add(queue_id)
                message = decode_message(store.get_message_record(topic, queue_id, offset))
                fate = redelivery(message is not None, held.attempt, policy)
                if fate is Redelivery.GONE:
                    log.warning("pop: %s of %s queue %d offset %d is gone from the store; dropped",
                                group, topic, queue_id, offset)
                    records.append(Ack(group, topic, queue_id, offset))
                    continue
                assert message is not None
                if fate is Redelivery.DEAD_LETTER:
                    records.append(self._dead_letter(group, message, queue_id, offset, held.attempt, now))
                    continue
                record = Invisible(group, topic, queue_id, offset, visible_at, held.attempt + 1)
                records.append(record)
                picked.append(_received(record, message))
                self.redeliveries += 1
        for queue_id, offset in waiting:
            state.rearm(group, topic, queue_id, offset)

    def _take_new(self, group: str, topic: str, policy: DeliveryPolicy, message_filter: MessageFilter, batch: int,
                  visible_at: int, records: list[Record], picked: list[Received], touched: set[int]) -> None:
        """New messages from each queue's cursor, the first queue rotating between receives."""
        store = self.broker.store
        state = self.log.state
        config = self.broker.topic_config_manager.get(topic)
        queue_nums = config.read_queue_nums if config is not None else 0
        first = self._rotation.get((group, topic), 0)
        self._rotation[(group, topic)] = first + 1
        for queue_id in queue_order(first, queue_nums):
            if len(picked) >= batch:
                break
            key = (group, topic, queue_id)
            if fifo_holds_new(policy, state.in_flight.get(key)):
                continue
            cursor = self._cursor(key)
            result = store.get_message(group, topic, queue_id, cursor, batch - len(picked), message_filter)
            if result.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY:
                # the queue ends before the cursor although it did not at start (open() checks): a
                # topic deleted and created again. Read on from its end
                log.warning("pop: %s queue %d ends at %d, before %s's cursor %d; the cursor moves back",
                            topic, queue_id, result.next_begin_offset, group, cursor)
            found = ([(offset, decode_message(raw))
                      for raw, offset in zip(result.messages, result.message_queue_offsets, strict=True)]
                     if result.status is GetMessageStatus.FOUND else [])
            new = take_new_messages(group, topic, queue_id, state.cursors.get(key), cursor, result.status,
                                    result.next_begin_offset, found, visible_at)
            records += new.records
            picked += [_received(record, message) for record, message in new.deliveries]
            if new.touched:
                touched.add(queue_id)

    def _remember_attempt(self, group: str, topic: str, attempt_id: str, picked: list[Received]) -> None:
        now = now_ms()
        self._attempts = {key: held for key, held in self._attempts.items()  # forget the expired ones
                          if any(r.handle.visible_at_ms > now for r in held)}
        self._attempts[(group, topic, attempt_id)] = picked

    def _earlier_attempt(self, group: str, topic: str, attempt_id: str) -> list[Received]:
        """What the receive ``attempt_id`` took, if every message of it is still held for that
        delivery (none acked, changed or delivered again since); else nothing."""
        picked = self._attempts.get((group, topic, attempt_id), [])
        in_flight = self.log.state.in_flight
        now = now_ms()
        for item in picked:
            held = in_flight.get((group, topic, item.handle.queue_id), {}).get(item.handle.offset)
            if held is None or held.visible_at_ms != item.handle.visible_at_ms or held.visible_at_ms <= now:
                return []
        return picked

    def _cursor(self, key: QueueKey) -> int:
        """Where the group's next new message of the queue is: the pop cursor, moved on to the group's
        committed offset when that is further (pop itself commits at most its cursor, so a further
        one was committed by someone else: a 4.x consumer of the group, an UpdateOffset, an admin
        tool; their consumption counts)."""
        group, topic, queue_id = key
        committed = self.broker.consumer_offset_manager.query_offset(group, topic, queue_id)
        cursor = self.log.state.cursors.get(key)
        if cursor is not None:
            return max(cursor, committed)
        return committed if committed >= 0 else self.broker.store.get_min_offset_in_queue(topic, queue_id)

    def _commit_offset(self, group: str, topic: str, queue_id: int) -> None:
        """The group's committed offset: its oldest message in flight, else its cursor."""
        key = (group, topic, queue_id)
        offset = self.log.state.oldest_in_flight(key)
        if offset is None:
            offset = self.log.state.cursors.get(key)
        if offset is not None:
            self.broker.consumer_offset_manager.commit_offset(group, topic, queue_id, offset)

    def _dead_letter(self, group: str, message: StoredMessage, queue_id: int, offset: int, attempt: int,
                     now: int) -> Record:
        """Move the message to the group's DLQ: the record that acks it, or, when the move failed, the
        one that retries it later."""
        error = self.forward(group, message)
        if error is None:
            self.dead_lettered += 1
            return Ack(group, message.topic, queue_id, offset)
        log.warning("pop: moving %s queue %d offset %d of %s to its dead-letter queue failed (retrying in %d ms): "
                    "%s", message.topic, queue_id, offset, group, DLQ_RETRY_MS, error)
        return Invisible(group, message.topic, queue_id, offset, now + DLQ_RETRY_MS, attempt)

    def forward_to_dead_letter_queue(self, group: str, topic: str, handle: ReceiptHandle) -> str | None:
        """ForwardMessageToDeadLetterQueue: the message of ``handle`` goes to the DLQ now; None, or why
        not (InvalidHandle for a handle that names no delivery held)."""
        held = self._held(group, topic, handle)
        message = decode_message(self.broker.store.get_message_record(topic, handle.queue_id, handle.offset))
        if message is None:
            return f"the message at queue {handle.queue_id} offset {handle.offset} is gone from the store"
        record = self._dead_letter(group, message, handle.queue_id, handle.offset, held.attempt, now_ms())
        self.log.append([record])
        self._commit_offset(group, topic, handle.queue_id)
        return None if isinstance(record, Ack) else "the move failed; it is retried"

    def _held(self, group: str, topic: str, handle: ReceiptHandle) -> InFlight:
        held = self.log.state.in_flight.get((group, topic, handle.queue_id), {}).get(handle.offset)
        if held is None:
            raise InvalidHandle("no such message in flight: acked already, or never received by this group")
        if held.visible_at_ms != handle.visible_at_ms:
            raise InvalidHandle("the receipt handle has expired: the message was delivered again since")
        return held

    # -- ack and change ------------------------------------------------------------------------
    def ack(self, group: str, topic: str, handle: ReceiptHandle) -> None:
        """Consume the message of ``handle``; acking it again is fine (a client's retry), acking it
        with the handle of an earlier delivery is not (InvalidHandle)."""
        key = (group, topic, handle.queue_id)
        held = self.log.state.in_flight.get(key, {}).get(handle.offset)
        if held is None:
            return
        if held.visible_at_ms != handle.visible_at_ms:
            raise InvalidHandle("the receipt handle has expired: the message was delivered again since")
        self.log.append([Ack(group, topic, handle.queue_id, handle.offset)])
        self._commit_offset(group, topic, handle.queue_id)

    def change_invisible(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        """Make the message invisible for ``invisible_ms`` from now (0: visible at once, a nack);
        returns the handle of the changed delivery (the old one no longer matches)."""
        held = self._held(group, topic, handle)
        visible_at = now_ms() + invisible_ms
        if visible_at == held.visible_at_ms:  # the new handle must differ from the old one
            visible_at += 1
        self.log.append([Invisible(group, topic, handle.queue_id, handle.offset, visible_at, held.attempt)])
        self._wake(topic)  # a waiting receive recomputes when to look again
        return ReceiptHandle(handle.queue_id, handle.offset, visible_at)

    # -- wake-ups ------------------------------------------------------------------------------
    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, arrived: int) -> None:
        self._wake(topic)

    def _wake(self, topic: str) -> None:
        for waiter in self._waiters.get(topic, ()):
            if not waiter.done():
                waiter.set_result(None)


def _received(record: Invisible, message: StoredMessage) -> Received:
    """A message handed out, as the record that logs its delivery describes it."""
    return Received(message, ReceiptHandle(record.queue_id, record.offset, record.visible_at_ms), record.attempt)


def decode_message(raw: bytes | None) -> StoredMessage | None:
    """A raw store record as a message (None for no record, or one that is not a message)."""
    if raw is None:
        return None
    record = decode_record(raw)
    return record if isinstance(record, StoredMessage) else None


def parse_handle(text: str) -> ReceiptHandle:
    """A client's receipt handle; InvalidHandle when it is not one this broker issued."""
    try:
        return receipt_handle.decode(text)
    except ValueError as exc:
        raise InvalidHandle(str(exc)) from None
