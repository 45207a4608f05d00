"""Batch and streaming reads through brokers: input partitions of queue offset ranges, pulled on executors.

A batch read plans ``[start, end)`` of every queue of the topics (:mod:`.broker_offsets`),
split into partitions of at most ``maxRecordsPerPartition`` offsets, each read by one task
with PULL_MESSAGE over a connection of its own. The streaming source
(:class:`BrokerStream`) does the same per micro-batch between checkpointed offsets, at most
``maxOffsetsPerTrigger`` of them over all queues.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.remoting_client import MessageQueue
from rocketstore.common.message import PROPERTY_MAX_OFFSET, PROPERTY_MIN_OFFSET
from rocketstore.pipeline.broker_offsets import (
    DataLossError,
    check_data_loss,
    ending_offsets,
    queue_bounds,
    starting_offsets,
)
from rocketstore.pipeline.broker_options import BrokerOptions, format_offsets, offsets_from_json, route_source
from rocketstore.pipeline.reader import _Columns

__all__ = ["BrokerRangePartition", "BrokerStream", "plan_ranges", "rate_limit", "read_range", "split_ranges"]


@dataclass(frozen=True)
class BrokerRangePartition(InputPartition):
    """Queue offsets [start, end) of one queue, read with PULL_MESSAGE."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __repr__(self) -> str:
        return f"BrokerRangePartition({self.topic}@{self.broker_name}#{self.queue_id} [{self.start}, {self.end}))"


def split_ranges(options: BrokerOptions, ranges: Mapping[MessageQueue, tuple[int, int]],
                 partition_type: type[BrokerRangePartition] = BrokerRangePartition) -> list[BrokerRangePartition]:
    """Input partitions of at most maxRecordsPerPartition offsets each."""
    step = options.max_records_per_partition
    out: list[BrokerRangePartition] = []
    for mq in sorted(ranges):
        start, end = ranges[mq]
        for lo in range(start, end, step):
            out.append(partition_type(mq.topic, mq.broker_name, mq.queue_id, lo, min(lo + step, end)))
    return out


def plan_ranges(options: BrokerOptions) -> list[BrokerRangePartition]:
    """A batch read's partitions (driver side)."""
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    all_bounds = queue_bounds(options)
    starts, ends = starting_offsets(options, all_bounds), ending_offsets(options, all_bounds)
    for mq, bounds in all_bounds.items():
        start = starts[mq]
        end = min(ends[mq], bounds.max_offset)
        if start >= end:
            continue
        start = check_data_loss(options, mq, start, bounds.min_offset)
        if start < end:
            ranges[mq] = (start, end)
    return split_ranges(options, ranges)


def read_range(options: BrokerOptions, partition: BrokerRangePartition,
               batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """Executor side: pull [start, end) of one queue with a connection of its own; Arrow batches out.

    Rows carry the same columns as the offline read (the pull's MIN_OFFSET / MAX_OFFSET
    properties, which the client adds, are removed).
    """
    mq = partition.queue
    offset, end = partition.start, partition.end
    cols = _Columns()
    with (route_source(options) as (client, source),
          PullConsumer(None, options.group, client=client, routes=source, timeout=options.timeout) as consumer):
        while offset < end:
            before = offset
            result = consumer.pull(mq, offset, max_nums=min(options.pull_batch_size, end - offset))
            if result.status is PullStatus.OFFSET_ILLEGAL or (
                    result.status is not PullStatus.FOUND and offset < result.min_offset):
                moved = check_data_loss(options, mq, offset, max(result.min_offset, result.next_begin_offset))
                if moved <= offset:  # the offset is not behind the minimum: beyond the maximum
                    raise DataLossError(f"queue {mq}: offset {offset} is beyond the broker's maximum "
                                        f"{result.max_offset} (the queue was reset or the broker replaced)")
                offset = moved
                continue
            if result.status is PullStatus.NO_MATCHED_MSG:
                offset = max(result.next_begin_offset, offset + 1)
                continue
            if result.status is PullStatus.NO_NEW_MSG:
                raise DataLossError(f"queue {mq}: no message at offset {offset}, expected up to {end} "
                                    f"(broker max offset {result.max_offset})")
            for m in result.messages:
                if m.queue_offset < offset:
                    continue
                if m.queue_offset >= end:
                    break
                if m.queue_offset > offset:
                    check_data_loss(options, mq, offset, m.queue_offset)
                m.properties.pop(PROPERTY_MIN_OFFSET, None)
                m.properties.pop(PROPERTY_MAX_OFFSET, None)
                cols.add(m)
                offset = m.queue_offset + 1
                if len(cols) >= batch_rows:
                    yield cols.to_batch()
                    cols = _Columns()
            offset = max(offset, min(result.next_begin_offset, end))
            if offset == before:
                raise DataLossError(f"queue {mq}: the broker found no message at offset {offset} and did not move on")
    if len(cols):
        yield cols.to_batch()


def rate_limit(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int],
               max_rows: int) -> dict[MessageQueue, int]:
    """``end`` cut so that at most ``max_rows`` offsets lie between ``start`` and it, shared out in
    proportion to each queue's backlog (the remainder one by one in queue order): deterministic."""
    backlog = {mq: max(end[mq] - start.get(mq, end[mq]), 0) for mq in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    share = {mq: max_rows * n // total for mq, n in backlog.items()}
    left = max_rows - sum(share.values())
    for mq in sorted(backlog):
        if left <= 0:
            break
        if share[mq] < backlog[mq]:
            share[mq] += 1
            left -= 1
    return {mq: start[mq] + share[mq] if mq in start else end[mq] for mq in end}


class BrokerStream:
    """The driver side of the streaming source, without Spark's classes (see source.BrokerStreamReader).

    Offsets are ``{topic: {"brokerName/queueId": next offset to read}}``; a micro-batch reads
    [start, end) of every queue. A queue that appears after the query started (the topic got
    more queues) is read from its earliest offset.
    """

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.target: dict[MessageQueue, int] | None = None

    def initial_offset(self) -> dict[str, dict[str, int]]:
        return format_offsets(starting_offsets(self.options, queue_bounds(self.options)))

    def prepare_available_now(self) -> None:
        self.target = {mq: b.max_offset for mq, b in queue_bounds(self.options).items()}

    def latest_offset(self, start: Mapping[str, Mapping[str, int]] | None,
                      max_rows: int | None) -> dict[str, dict[str, int]]:
        bounds = queue_bounds(self.options)
        latest = {mq: b.max_offset for mq, b in bounds.items()}
        if self.target is not None:  # availableNow: nothing past what was there when the query started
            target = self.target
            latest = {mq: min(b.max_offset, target.get(mq, b.min_offset)) for mq, b in bounds.items()}
        if start is not None:
            begin = offsets_from_json(start)
            for mq in latest:
                first = begin.get(mq, bounds[mq].min_offset)
                latest[mq] = max(latest[mq], first)  # never behind the start (a queue reset reads nothing)
            for mq, o in begin.items():
                latest.setdefault(mq, o)  # a queue that left the route keeps its offset
            if max_rows is not None:
                latest = rate_limit({mq: begin.get(mq, bounds[mq].min_offset if mq in bounds else latest[mq])
                                     for mq in latest}, latest, max_rows)
        return format_offsets(latest)

    def partitions(self, start: Mapping[str, Mapping[str, int]],
                   end: Mapping[str, Mapping[str, int]]) -> list[BrokerRangePartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        bounds = queue_bounds(self.options)
        ranges: dict[MessageQueue, tuple[int, int]] = {}
        for mq, hi in stop.items():
            b = bounds.get(mq)
            lo = begin.get(mq, b.min_offset if b is not None else hi)
            if lo >= hi:
                continue
            if b is not None:
                lo = check_data_loss(self.options, mq, lo, b.min_offset)
            if lo < hi:
                ranges[mq] = (lo, hi)
        return split_ranges(self.options, ranges)
