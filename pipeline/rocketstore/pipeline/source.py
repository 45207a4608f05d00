"""The ``rocketstore`` PySpark data source: batch reads of a store directory, offline.

Usage (PySpark >= 4.2; the executors must be able to ``import pipeline``, e.g. PYTHONPATH or
``--py-files``, and read the store directory)::

    from rocketstore.pipeline.source import RocketStoreDataSource
    spark.dataSource.register(RocketStoreDataSource)

    df = (spark.read.format("rocketstore")
          .option("brokerConf", "/etc/rocketmq/broker.conf")          # optional: segment sizes
          .option("topics", "orders,payments")                         # optional
          .option("startTime", "2024-05-01T00:00:00Z")                 # optional, or epoch ms
          .load("/data/rocketmq/store"))

No broker runs and nothing in the directory changes: files are opened read-only, no lock
is taken. Partitions:

* without ``topics``: one per CommitLog segment (every topic, physical order);
* with ``topics``: one per consume-queue range of ``entriesPerPartition`` entries of each
  queue of those topics (records fetched from the CommitLog by offset).

Columns are RocketMQ's MessageExt (see :data:`pipeline.reader.SPARK_SCHEMA_DDL`): topic,
queueId, queueOffset, commitLogOffset, storeSize, bodyCRC, flag, sysFlag, bornTimestamp,
bornHost, storeTimestamp, storeHost, reconsumeTimes, tags, keys, uniqKey, properties (map),
body (binary). ``read()`` yields ``pyarrow.RecordBatch``es (PySpark 4 passes them to the JVM
as they are), never Python rows. All options are in :mod:`pipeline.options`.

With the option ``nameServer`` (or ``nameServerAddr``), or ``brokerAddress`` (the brokers' own
``host:port``, no name server asked), the same format reads through brokers instead
(``topic``/``topics``, ``startingOffsets`` / ``endingOffsets`` per queue as spark-sql-kafka takes
them, or by store timestamp with ``startingTimestamp`` and its kin; one partition per
``maxRecordsPerPartition`` offsets of a queue), and ``df.write.format("rocketstore")`` and
``df.writeStream.format("rocketstore")`` send rows as messages: see :mod:`rocketstore.pipeline.broker_sink`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from rocketstore.pipeline.broker_options import BrokerOptions, is_broker_read
from rocketstore.pipeline.broker_read import BrokerRangePartition, BrokerStream, plan_ranges, read_range
from rocketstore.pipeline.broker_sink import SentMessages, check_sink_schema, write_batches
from rocketstore.pipeline.options import OptionError, ReadOptions
from rocketstore.pipeline.reader import (
    SPARK_SCHEMA_DDL,
    CorruptStoreError,
    ScanStats,
    read_queue_range,
    read_segment,
)
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.store.store_view import SegmentFile, commit_log_segments, consume_queue_dirs, numbered_files

__all__ = [
    "BrokerReader",
    "BrokerStreamReader",
    "BrokerStreamWriter",
    "BrokerWriter",
    "QueueRangePartition",
    "RocketStoreDataSource",
    "RocketStoreReader",
    "SegmentPartition",
    "StoreNotFoundError",
    "plan_partitions",
]

log = logging.getLogger(__name__)


class StoreNotFoundError(OptionError):
    """The ``path`` is missing or is not a store directory."""


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    """One CommitLog segment."""

    segment: SegmentFile

    def __repr__(self) -> str:
        return f"SegmentPartition({os.path.basename(self.segment.path)})"


@dataclass(frozen=True)
class QueueRangePartition(InputPartition):
    """Logical offsets [start_index, end_index) of one consume queue; ``segments`` to fetch records from."""

    topic: str
    queue_id: int
    start_index: int
    end_index: int
    segments: tuple[SegmentFile, ...]
    #: bytes per consume-queue file, as found on disk (a store written with other sizes still reads)
    file_size: int

    def __repr__(self) -> str:
        return f"QueueRangePartition({self.topic}-{self.queue_id} [{self.start_index}, {self.end_index}))"


def _require_store(options: ReadOptions) -> None:
    root = options.store_dir
    if not os.path.exists(root):
        raise StoreNotFoundError(f"store directory {root} does not exist")
    if not os.path.isdir(root):
        raise StoreNotFoundError(f"{root} is not a directory")
    if not any(os.path.isdir(d) for d in options.commit_log_dirs):
        dirs = ", ".join(options.commit_log_dirs)
        raise StoreNotFoundError(f"{root} is not a store directory: no CommitLog directory ({dirs})")


def plan_partitions(options: ReadOptions) -> list[SegmentPartition] | list[QueueRangePartition]:
    """The input partitions of a read (driver side): checks the store and the segment files."""
    _require_store(options)
    segments = commit_log_segments(options.commit_log_dirs)
    expected = options.commit_log_file_size
    sizes = {s.size for s in segments if s.size}
    for seg in segments:
        if seg.size and seg.size != expected and len(sizes) > 1:
            raise CorruptStoreError(f"CommitLog segment {seg.path} is {seg.size} bytes, expected {expected} "
                                    "(mappedFileSizeCommitLog; pass the store's broker.conf as brokerConf)")
    if not options.topics:
        return [
            SegmentPartition(seg) for seg in segments
            if seg.size and (options.end_offset is None or seg.from_offset < options.end_offset)
            and (options.start_offset is None or seg.from_offset + seg.size > options.start_offset)
        ]
    partitions: list[QueueRangePartition] = []
    queues = consume_queue_dirs(options.consume_queue_dir)
    for topic in options.topics:
        topic_dir = os.path.join(options.consume_queue_dir, topic)
        if not os.path.isdir(topic_dir):
            present = sorted(os.listdir(options.consume_queue_dir)) if os.path.isdir(options.consume_queue_dir) else []
            raise OptionError(f"option topics: {topic!r} has no consume queue in {options.consume_queue_dir} "
                              f"(topics there: {', '.join(present) or 'none'})")
        for queue in (q for q in queues if q.topic == topic):
            files = numbered_files(queue.path)
            if not files:
                continue
            file_size = files[0].size
            if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE or any(f.number % file_size for f in files):
                file_size = options.consume_queue_file_size
            first = files[0].number // CQ_STORE_UNIT_SIZE
            end = (files[-1].number + file_size) // CQ_STORE_UNIT_SIZE
            step = options.entries_per_partition
            for lo in range(first, end, step):
                partitions.append(QueueRangePartition(topic, queue.queue_id, lo, min(lo + step, end),
                                                      tuple(segments), file_size))
    return partitions


def _planned_nothing(partition: InputPartition) -> bool:
    """PySpark runs one placeholder ``InputPartition(None)`` when a reader plans no partitions
    (nothing in the requested range): it reads as no rows."""
    return type(partition) is InputPartition and partition.value is None


class RocketStoreReader(DataSourceReader):
    """Plans partitions on the driver; ``read`` runs on the executors and yields Arrow batches."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return plan_partitions(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if _planned_nothing(partition):
            return
        stats = ScanStats()
        if isinstance(partition, SegmentPartition):
            yield from read_segment(self.options, partition.segment, stats)
        elif isinstance(partition, QueueRangePartition):
            yield from read_queue_range(self.options, partition.topic, partition.queue_id, partition.start_index,
                                        partition.end_index, list(partition.segments), stats,
                                        file_size=partition.file_size)
        else:
            raise TypeError(f"not a rocketstore partition: {partition!r}")
        log.info("rocketstore: %r done: %d rows, %d bytes in %.2f s", partition, stats.rows, stats.record_bytes,
                 stats.seconds)


class BrokerReader(DataSourceReader):
    """A batch read through brokers: ranges planned from the queues' offsets on the driver,
    pulled by the executors (each partition with its own connection)."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return plan_ranges(self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if _planned_nothing(partition):
            return
        if not isinstance(partition, BrokerRangePartition):
            raise TypeError(f"not a rocketstore broker partition: {partition!r}")
        yield from read_range(self.options, partition)


class BrokerWriter(DataSourceArrowWriter):
    """The batch sink: each task sends its rows (Arrow batches in) with a producer of its own."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("rocketstore sink: %d messages sent by %d tasks", _sent(messages), len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.error("rocketstore sink: job aborted; %d messages of finished tasks were already sent "
                  "(the sink is at-least-once)", _sent(messages))


def _sent(messages: list[WriterCommitMessage | None]) -> int:
    """Messages sent by the tasks that finished (a failed task's message is None)."""
    return sum(sum(m.counts.values()) for m in messages if isinstance(m, SentMessages))


class BrokerStreamWriter(DataSourceStreamArrowWriter):
    """The Structured Streaming sink: each micro-batch's tasks send their rows as the batch sink's
    do. Nothing is committed anywhere but in Spark's checkpoint, so a micro-batch that runs again
    (failed, or sent but not committed before a stop) sends again: at-least-once."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        counts: dict[str, int] = {}
        for m in messages:
            if isinstance(m, SentMessages):
                for topic, n in m.counts.items():
                    counts[topic] = counts.get(topic, 0) + n
        log.info("rocketstore stream sink: micro-batch %d: %d messages sent by %d tasks %s", batchId,
                 sum(counts.values()), len(messages), counts)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.error("rocketstore stream sink: micro-batch %d ABORTED, but %d messages of its finished tasks are "
                  "already on the brokers and stay there; when the query runs the micro-batch again they are "
                  "sent again (the sink is at-least-once: consumers must tolerate duplicates)", batchId,
                  _sent(messages))


class BrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The Structured Streaming source: per-queue offsets (``{topic: {"brokerName/queueId": offset}}``)
    are the checkpointed source offsets, so a restarted query resumes after its last committed
    batch; ``commit()`` is not relied on (it lags a batch)."""

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.stream = BrokerStream(options)

    def initialOffset(self) -> dict[str, dict[str, int]]:
        return self.stream.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, dict[str, int]] | None = None,
                     limit: ReadLimit | None = None) -> dict[str, dict[str, int]]:
        # parameters with defaults: Spark < 4.2 calls latestOffset() without them
        max_rows = self.options.max_offsets_per_trigger if limit is None else None
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        return self.stream.latest_offset(start, max_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self.stream.prepare_available_now()

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> Sequence[InputPartition]:
        return self.stream.partitions(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BrokerRangePartition):
            raise TypeError(f"not a rocketstore broker partition: {partition!r}")
        yield from read_range(self.options, partition)

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the broker


class RocketStoreDataSource(DataSource):
    """Format ``rocketstore``: see the module docstring for options and partitioning."""

    @classmethod
    def name(cls) -> str:
        return "rocketstore"

    def schema(self) -> str:
        return SPARK_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_broker_read(self.options):
            return BrokerReader(BrokerOptions.parse(self.options))
        options = ReadOptions.parse(self.options)
        _require_store(options)
        return RocketStoreReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not is_broker_read(self.options):
            raise OptionError("a streaming read of format rocketstore goes through brokers: option nameServer "
                              "(or brokerAddress) is required")
        return BrokerStreamReader(BrokerOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BrokerWriter(self._sink_options(self.options, schema, overwrite, ".mode('append')"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Spark asks for overwrite (truncate) in output mode complete, and hands the sink the query's
        # checkpointLocation among its options: Spark's, not ours to check
        options = {k: v for k, v in self.options.items() if k.lower() != "checkpointlocation"}
        return BrokerStreamWriter(self._sink_options(options, schema, overwrite, ".outputMode('append')"))

    @staticmethod
    def _sink_options(given: Mapping[str, str], schema: StructType, overwrite: bool, append_call: str) -> BrokerOptions:
        """The checked options of a batch or streaming write; ``append_call`` is what the user should write."""
        if not is_broker_read(given):
            raise OptionError("writing format rocketstore sends messages through a broker: option nameServer "
                              "(or brokerAddress) is required (a store directory is never written)")
        if overwrite:
            raise OptionError(f"format rocketstore appends messages (sent messages cannot be taken back): use "
                              f"{append_call}")
        options = BrokerOptions.parse(given, write=True)
        check_sink_schema(schema, options)
        return options
