"""What a pop receive hands out, decided on plain values: redelivery, dead-lettering, FIFO holds.

:class:`~rocketstore.broker.grpc_v2.pop_service.PopService` reads the store and the pop log and
writes pop-log records; the rules it follows live here, as functions of the values it read, so
they can be tested (and read) without a broker, a store or a log file. RocketMQ spreads the same
rules over its pop processor, its revive service (a message past its retries goes to the DLQ)
and ConsumerOrderInfoManager (an orderly queue gives nothing while its earlier messages are out).

* :class:`DeliveryPolicy`: how often a group's message is delivered, and whether the group is FIFO.
* :func:`redelivery_candidates`: given a message that came due, which in-flight messages of its
  queue go out with it (FIFO: all of them, in offset order, or none while any is still invisible).
* :func:`redelivery`: what becomes of one of them: gone from the store, to the DLQ, or out again.
* :func:`fifo_holds_new`, :func:`queue_order` and :func:`take_new_messages`: which queues new
  messages come from, and what one store read of a queue turns into (records and deliveries).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from rocketstore.broker.grpc_v2.pop_log import Cursor, InFlight, Invisible, Record
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.store.status import GetMessageStatus

#: the retries of a group without a subscription group config (SubscriptionGroupConfig's default)
DEFAULT_RETRY_MAX_TIMES: Final = 16

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """A group's delivery rules, from its subscription group config."""

    #: deliveries of a message before one more coming due sends it to the DLQ instead
    max_attempts: int
    #: ``consumeMessageOrderly``: each queue is handed out in order (see :func:`redelivery_candidates`)
    fifo: bool

    @classmethod
    def of(cls, config: SubscriptionGroupConfig | None) -> DeliveryPolicy:
        """``retryMaxTimes + 1`` attempts (the first delivery and its retries, as the client's retry
        policy is told); FIFO when the group consumes orderly."""
        retries = config.retry_max_times if config is not None else DEFAULT_RETRY_MAX_TIMES
        return cls(max_attempts=retries + 1, fifo=config is not None and config.consume_message_orderly)


def redelivery_candidates(policy: DeliveryPolicy, queue_id: int, offset: int, held: InFlight,
                          queue_in_flight: Mapping[int, InFlight], taken: set[tuple[int, int]],
                          now_ms: int) -> list[tuple[int, InFlight]] | None:
    """The in-flight messages ``(offset, entry)`` that go out again now that ``offset`` of
    ``queue_id`` came due; None when its FIFO queue waits.

    A FIFO queue is handed out in order: while any of its messages in flight is still invisible,
    none of them goes out again (None: the caller puts the due one back for later); once all are
    due, they all go out together in offset order, except those ``taken`` by this receive already.
    Any other group's due message goes out alone.
    """
    if not policy.fifo:
        return [(offset, held)]
    if any(other.visible_at_ms > now_ms for other in queue_in_flight.values()):
        return None
    return [(o, h) for o, h in sorted(queue_in_flight.items()) if (queue_id, o) not in taken]


class Redelivery(enum.Enum):
    """What becomes of a message in flight that goes out again."""

    #: the store no longer has it (its CommitLog file was deleted): acked, nothing to deliver
    GONE = enum.auto()
    #: it was delivered ``max_attempts`` times already: moved to the group's dead-letter queue
    DEAD_LETTER = enum.auto()
    #: delivered again, attempt + 1
    AGAIN = enum.auto()


def redelivery(found: bool, attempt: int, policy: DeliveryPolicy) -> Redelivery:
    """The fate of a message delivered ``attempt`` times that came due (``found``: the store still
    has it). No message is ever delivered more than ``policy.max_attempts`` times."""
    if not found:
        return Redelivery.GONE
    if attempt >= policy.max_attempts:
        return Redelivery.DEAD_LETTER
    return Redelivery.AGAIN


def fifo_holds_new(policy: DeliveryPolicy, queue_in_flight: Mapping[int, InFlight] | None) -> bool:
    """Whether a queue gives no new message: a FIFO queue hands out nothing after its messages in
    flight until they are acked."""
    return policy.fifo and bool(queue_in_flight)


def queue_order(first: int, queue_nums: int) -> list[int]:
    """The queues a receive reads new messages from, starting at ``first`` (which the caller rotates
    between receives, so no queue starves when a batch fills up early)."""
    return [(first + i) % queue_nums for i in range(queue_nums)]


@dataclass(slots=True)
class NewMessages(Generic[M]):
    """What one store read of a queue turns into."""

    #: to append to the pop log, in this order
    records: list[Record] = field(default_factory=list)
    #: the messages handed out, each with its record (first attempt, invisible until the record says)
    deliveries: list[tuple[Invisible, M]] = field(default_factory=list)
    #: whether the group's committed offset of the queue may have moved
    touched: bool = False


def take_new_messages(group: str, topic: str, queue_id: int, logged_cursor: int | None, cursor: int,
                      status: GetMessageStatus, next_begin_offset: int, found: Sequence[tuple[int, M | None]],
                      visible_at_ms: int) -> NewMessages[M]:
    """The records and deliveries of a read of the queue from ``cursor``.

    ``logged_cursor`` is the pop log's cursor of the queue (None: none yet), ``cursor`` where the
    read started (the log's, or the group's committed offset when that is further on: see
    ``PopService._cursor``); ``status`` and ``next_begin_offset`` are the store's answer and
    ``found`` its messages as (queue offset, message), None for a record that is not a message
    (skipped, as the store's filter skips). The queue's cursor ends at the furthest of ``cursor``,
    ``next_begin_offset`` and the last delivery + 1, never back, except when the queue ends before
    ``cursor`` (OFFSET_OVERFLOW_BADLY: a topic deleted and created again), where it moves back to
    the queue's end.
    """
    out: NewMessages[M] = NewMessages()
    if logged_cursor != cursor:  # a new group, or one moved on
        out.records.append(Cursor(group, topic, queue_id, cursor))
    if status is GetMessageStatus.OFFSET_OVERFLOW_BADLY:
        out.records.append(Cursor(group, topic, queue_id, next_begin_offset))
        out.touched = True
        return out
    moved_to = cursor
    if status is GetMessageStatus.FOUND:
        for offset, message in found:
            if message is None:
                continue
            record = Invisible(group, topic, queue_id, offset, visible_at_ms, 1)
            out.records.append(record)
            out.deliveries.append((record, message))
            moved_to = max(moved_to, offset + 1)
    if next_begin_offset > moved_to:  # filtered away, or a queue trimmed past the cursor
        out.records.append(Cursor(group, topic, queue_id, next_begin_offset))
    out.touched = next_begin_offset > cursor or status is GetMessageStatus.FOUND
    return out
