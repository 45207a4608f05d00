"""Queue offsets of reads through brokers: the queues' bounds, where a read starts and ends, data loss.

A timestamp T maps to the first offset of the queue whose message was stored at or after T
(storeTimestamp >= T), which is Kafka's "earliest offset whose timestamp is greater than or
equal to" T: a read from T to U returns exactly the messages with T <= storeTimestamp < U. The
times are the broker's store times (column storeTimestamp, like Kafka's LogAppendTime), never
the producer's bornTimestamp. The broker's SEARCH_OFFSET_BY_TIMESTAMP answers something else
(RocketMQ 4.9.8 ConsumeQueue.getOffsetInQueueByTime, which our broker follows): it binary-searches
one consume-queue file, chosen by file modification time, for a message stored exactly at T
(any one of several stored in that millisecond) and otherwise returns the *nearer* of T's two
neighbours, the older one on a tie, so possibly a message stored before T; T before the first
message gives the first offset, T after the last message the last message's offset (not the
max offset), and a queue without a consume queue 0. So its answer is taken as a hint: the
driver pulls the messages at the hint and next to it (usually two PULL_MESSAGEs of one message
per queue settle it) and otherwise binary-searches ``[minOffset, maxOffset)`` by the pulled store
times. That relies on store times never decreasing along a queue, which holds because the broker
stamps them under its put lock, unless its clock is set back. T before the oldest message still
on the broker maps to the queue's min offset.

No matching offset (every message of the queue stored before T, or the queue is empty): for a
starting timestamp, strategy ``error`` fails the query with an OptionError naming the option,
the queue and T, and ``latest`` starts that queue at its max offset (it reads only what comes
later), as Kafka's strategies do; for an ending timestamp the queue ends at its max offset.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from rocketstore.client.admin import MQAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.remoting_client import MessageQueue, RemotingError
from rocketstore.pipeline.broker_options import (
    EARLIEST,
    LATEST,
    BoundSpec,
    BrokerOptions,
    ByTimestamp,
    OffsetSpec,
    queue_value,
    route_source,
)
from rocketstore.pipeline.options import OptionError

__all__ = [
    "DataLossError",
    "QueueBounds",
    "check_data_loss",
    "ending_offsets",
    "first_offset_at",
    "offsets_for_times",
    "queue_bounds",
    "resolve",
    "starting_offsets",
]

log = logging.getLogger(__name__)


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention deleted them) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """A queue's offsets on the broker now: [min_offset, max_offset) are readable."""

    queue: MessageQueue
    min_offset: int
    max_offset: int


def queue_bounds(options: BrokerOptions) -> dict[MessageQueue, QueueBounds]:
    """Min and max offsets of every queue of the options' topics (GET_TOPIC_STATS_INFO at each master)."""
    out: dict[MessageQueue, QueueBounds] = {}
    where = (f"the brokers {options.broker_address} (option brokerAddress)" if options.broker_address
             else f"name server {options.name_server}")
    with (route_source(options) as (client, source),
          MQAdmin(client=client, routes=source, timeout=options.timeout) as admin):
        for topic in options.topics:
            try:
                stats = admin.topic_status(topic)
            except RemotingError as exc:
                raise OptionError(f"option topics: topic {topic!r} is not known to {where}: {exc}") from exc
            for s in stats:
                out[s.queue] = QueueBounds(s.queue, s.min_offset, s.max_offset)
    return out


def _spec_offset(spec: str | OffsetSpec, mq: MessageQueue, default: int) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    value = queue_value(spec, mq)
    return default if value is None else value


def resolve(spec: str | OffsetSpec, bounds: QueueBounds, default: int) -> int:
    """A concrete offset of ``bounds.queue`` for a startingOffsets / endingOffsets spec."""
    offset = _spec_offset(spec, bounds.queue, default)
    if offset == EARLIEST:
        return bounds.min_offset
    if offset == LATEST:
        return bounds.max_offset
    return offset


def starting_offsets(options: BrokerOptions, bounds: Mapping[MessageQueue, QueueBounds]) -> dict[MessageQueue, int]:
    """Where a read starts in every queue of ``bounds`` (driver side; timestamps are searched on the brokers)."""
    return _resolve_all(options, options.starting, bounds, EARLIEST, LATEST if options.no_match_latest else None)


def ending_offsets(options: BrokerOptions, bounds: Mapping[MessageQueue, QueueBounds]) -> dict[MessageQueue, int]:
    """Where a batch read ends (exclusive) in every queue of ``bounds``; an ending timestamp without a
    matching offset ends at latest, as in spark-sql-kafka."""
    return _resolve_all(options, options.ending, bounds, LATEST, LATEST)


def _resolve_all(options: BrokerOptions, spec: BoundSpec, bounds: Mapping[MessageQueue, QueueBounds], default: int,
                 no_match: int | None) -> dict[MessageQueue, int]:
    """Concrete offsets for ``spec``: ``default`` for queues it does not name, ``no_match`` (None:
    raise) for a timestamp no message of its queue was stored at or after."""
    if not isinstance(spec, ByTimestamp):
        return {mq: resolve(spec, b, default) for mq, b in bounds.items()}
    wanted = {mq: ts for mq in bounds if (ts := spec.timestamp_of(mq)) is not None}
    found = offsets_for_times(options, {mq: (bounds[mq], ts) for mq, ts in wanted.items()})
    out: dict[MessageQueue, int] = {}
    for mq, b in bounds.items():
        offset = found[mq] if mq in wanted else default
        if offset is None:
            if no_match is None:
                held = "it is empty" if b.min_offset >= b.max_offset else (
                    f"all its messages (offsets [{b.min_offset}, {b.max_offset})) were stored before")
                raise OptionError(f"option {spec.option}: queue {mq} has no message stored at or after "
                                  f"{_when(wanted[mq])}: {held}. Set option startingOffsetsByTimestampStrategy=latest "
                                  "to start such queues at their latest offset")
            offset = no_match
        out[mq] = b.min_offset if offset == EARLIEST else b.max_offset if offset == LATEST else offset
    return out


def _when(timestamp: int) -> str:
    """Epoch ms for a message, with its UTC date when it has one (years 1..9999)."""
    try:
        return f"{timestamp} ({datetime.fromtimestamp(timestamp / 1000, UTC).isoformat(timespec='milliseconds')})"
    except (OverflowError, ValueError, OSError):
        return str(timestamp)


def offsets_for_times(options: BrokerOptions,
                      wanted: Mapping[MessageQueue, tuple[QueueBounds, int]]) -> dict[MessageQueue, int | None]:
    """Per queue, the first offset whose message was stored at or after the timestamp (None: no
    such message): SEARCH_OFFSET_BY_TIMESTAMP at the queue's master gives a hint that
    :func:`first_offset_at` checks with pulls (see this module's docstring)."""
    out: dict[MessageQueue, int | None] = {}
    with (route_source(options) as (client, source),
          MQAdmin(client=client, routes=source, timeout=options.timeout) as admin,
          PullConsumer(None, options.group, client=client, routes=source, timeout=options.timeout) as consumer):
        for mq in sorted(wanted):
            bounds, ts = wanted[mq]
            if bounds.min_offset >= bounds.max_offset:
                out[mq] = None  # empty: nothing to ask the broker
                continue
            out[mq] = first_offset_at(consumer, bounds, ts, admin.search_offset(mq, ts))
    return out


def first_offset_at(consumer: PullConsumer, bounds: QueueBounds, timestamp: int, hint: int) -> int | None:
    """The first offset in ``bounds`` whose message was stored at or after ``timestamp``, None if all
    are older.

    ``hint`` (the broker's answer) is normally that offset or the one before it, so the message at
    the hint and one neighbour settle it; the probes are the first steps of a binary search over
    ``[min_offset, max_offset)`` that goes on by pulled store times when the hint is off (several
    messages stored in the same millisecond, a consume-queue file whose mtime was changed).
    """
    lo, hi = bounds.min_offset, bounds.max_offset  # the answer lies in [lo, hi]; max_offset means none
    if lo >= hi:
        return None
    first = min(max(hint, lo), hi - 1)
    guesses = [first, first - 1, first + 1]
    while lo < hi:
        probe = guesses.pop(0) if guesses else (lo + hi) // 2
        if not lo <= probe < hi:
            continue
        if _store_time(consumer, bounds.queue, probe) >= timestamp:
            hi = probe
        else:
            lo = probe + 1
    return lo if lo < bounds.max_offset else None


def _store_time(consumer: PullConsumer, mq: MessageQueue, offset: int) -> int:
    """The store timestamp of the message at ``offset`` (one PULL_MESSAGE of one message)."""
    result = consumer.pull(mq, offset, max_nums=1)
    if result.status is not PullStatus.FOUND or not result.messages:
        raise DataLossError(f"queue {mq}: no message at offset {offset} while searching offsets by timestamp "
                            f"({result.status.name}; broker offsets [{result.min_offset}, {result.max_offset})): "
                            "retention may have deleted it since the query was planned; run it again")
    return result.messages[0].store_timestamp


def check_data_loss(options: BrokerOptions, mq: MessageQueue, start: int, min_offset: int) -> int:
    """``start`` if still readable; else raises (failOnDataLoss) or returns ``min_offset``."""
    if start >= min_offset:
        return start
    message = (f"queue {mq}: offsets [{start}, {min_offset}) are no longer on the broker (deleted by retention); "
               f"its minimum offset is {min_offset}")
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set option failOnDataLoss=false to skip them and read on.")
    log.warning("%s; skipped (failOnDataLoss=false)", message)
    return min_offset
