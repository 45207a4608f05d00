"""Store files to Arrow record batches: the executor side of the ``rocketstore`` source.

Pure pyarrow, no Spark: the data source, the jobs and the benchmark call these functions.
The store's files are listed, mapped and decoded through the engine's read-only view
(:mod:`rocketstore.store.store_view`: segments, ConsumeQueue entries, records at an offset with
:func:`rocketstore.common.message.decode_record`); this module only turns decoded records into
columns.

Two ways to read, each yielding batches of :data:`ARROW_SCHEMA`:

* :func:`read_segment`: one CommitLog segment in physical order, from its first record to
  the end-of-segment blank record (or to the first zero header: nothing written after it).
* :func:`read_queue_range`: a range of logical offsets of one consume queue, each entry's
  record looked up in the CommitLog (a topic read touches only its own records).

Column names and meanings are RocketMQ's MessageExt; timestamps are UTC instants.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from rocketstore.common.message import (
    SYS_FLAG_POS,
    BlankRecord,
    HostAddress,
    StoredMessage,
    decode_record,
    store_timestamp_pos,
)
from rocketstore.pipeline.columnar import decode_run, walk_run
from rocketstore.pipeline.options import ReadOptions
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, PRE_BLANK_ENTRY
from rocketstore.store.store_view import CommitLogView, SegmentFile, iter_consume_queue_entries, map_read_only

__all__ = [
    "ARROW_SCHEMA",
    "SPARK_SCHEMA_DDL",
    "CorruptStoreError",
    "ScanStats",
    "read_queue_range",
    "read_segment",
]

log = logging.getLogger(__name__)

#: the DataFrame schema (Spark DDL), RocketMQ's MessageExt field names
SPARK_SCHEMA_DDL = (
    "topic STRING, queueId INT, queueOffset BIGINT, commitLogOffset BIGINT, storeSize INT, bodyCRC INT, "
    "flag INT, sysFlag INT, bornTimestamp TIMESTAMP, bornHost STRING, storeTimestamp TIMESTAMP, "
    "storeHost STRING, reconsumeTimes INT, tags STRING, keys STRING, uniqKey STRING, "
    "properties MAP<STRING, STRING>, body BINARY"
)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
#: the Arrow schema of every batch: exactly what Spark derives from SPARK_SCHEMA_DDL (it checks)
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queueId", pa.int32()), ("queueOffset", pa.int64()),
    ("commitLogOffset", pa.int64()), ("storeSize", pa.int32()), ("bodyCRC", pa.int32()),
    ("flag", pa.int32()), ("sysFlag", pa.int32()), ("bornTimestamp", _TIMESTAMP), ("bornHost", pa.string()),
    ("storeTimestamp", _TIMESTAMP), ("storeHost", pa.string()), ("reconsumeTimes", pa.int32()),
    ("tags", pa.string()), ("keys", pa.string()), ("uniqKey", pa.string()), ("properties", _MAP),
    ("body", pa.binary()),
])

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ZERO_HEADER = bytes(8)


class CorruptStoreError(Exception):
    """Bytes of the store that cannot be read as what they should be; names the file and position."""


@dataclass(slots=True)
class ScanStats:
    """What one partition read: for progress lines and the benchmark."""

    rows: int = 0
    record_bytes: int = 0
    seconds: float = 0.0


class _Columns:
    """Column lists for one batch; ``add`` is the per-record hot path."""

    def __init__(self) -> None:
        self.topic: list[str] = []
        self.queue_id: list[int] = []
        self.queue_offset: list[int] = []
        self.offset: list[int] = []
        self.size: list[int] = []
        self.crc: list[int] = []
        self.flag: list[int] = []
        self.sys_flag: list[int] = []
        self.born_ts: list[int] = []
        self.born_host: list[str] = []
        self.store_ts: list[int] = []
        self.store_host: list[str] = []
        self.reconsume: list[int] = []
        self.tags: list[str | None] = []
        self.keys: list[str | None] = []
        self.uniq: list[str | None] = []
        self.prop_offsets: list[int] = [0]
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.body: list[bytes] = []
        self.record_bytes = 0
        self._hosts: dict[HostAddress, str] = {}

    def __len__(self) -> int:
        return len(self.offset)

    def host(self, address: HostAddress) -> str:
        text = self._hosts.get(address)
        if text is None:
            text = self._hosts[address] = str(address)
        return text

    def add(self, m: StoredMessage) -> None:
        self.topic.append(m.topic)
        self.queue_id.append(m.queue_id)
        self.queue_offset.append(m.queue_offset)
        self.offset.append(m.physical_offset)
        self.size.append(m.total_size)
        self.crc.append(m.body_crc)
        self.flag.append(m.flag)
        self.sys_flag.append(m.sys_flag)
        self.born_ts.append(m.born_timestamp * 1000)
        self.born_host.append(self.host(m.born_host))
        self.store_ts.append(m.store_timestamp * 1000)
        self.store_host.append(self.host(m.store_host))
        self.reconsume.append(m.reconsume_times)
        props = m.properties
        get = props.get
        self.tags.append(get("TAGS"))
        self.keys.append(get("KEYS"))
        self.uniq.append(get("UNIQ_KEY"))
        if props:
            self.prop_keys.extend(props)
            self.prop_values.extend(props.values())
        self.prop_offsets.append(len(self.prop_keys))
        self.body.append(m.body)
        self.record_bytes += m.total_size

    def to_batch(self) -> pa.RecordBatch:
        properties = pa.MapArray.from_arrays(
            pa.array(self.prop_offsets, pa.int32()), pa.array(self.prop_keys, pa.string()),
            pa.array(self.prop_values, pa.string()), type=_MAP,
        )
        return pa.RecordBatch.from_arrays([
            pa.array(self.topic, pa.string()), pa.array(self.queue_id, pa.int32()),
            pa.array(self.queue_offset, pa.int64()), pa.array(self.offset, pa.int64()),
            pa.array(self.size, pa.int32()), pa.array(self.crc, pa.int32()), pa.array(self.flag, pa.int32()),
            pa.array(self.sys_flag, pa.int32()), pa.array(self.born_ts, _TIMESTAMP),
            pa.array(self.born_host, pa.string()), pa.array(self.store_ts, _TIMESTAMP),
            pa.array(self.store_host, pa.string()), pa.array(self.reconsume, pa.int32()),
            pa.array(self.tags, pa.string()), pa.array(self.keys, pa.string()), pa.array(self.uniq, pa.string()),
            properties, pa.array(self.body, pa.binary()),
        ], schema=ARROW_SCHEMA)


def _gone(path: str) -> CorruptStoreError:
    return CorruptStoreError(f"{path}: file disappeared while reading (deleted by retention?)")


def read_segment(
    options: ReadOptions, segment: SegmentFile, stats: ScanStats | None = None, *, fast: bool = True
) -> Iterator[pa.RecordBatch]:
    """The records of one segment matching the options' offset and time bounds, as Arrow batches.

    Reading stops at the end-of-segment blank record or at a zero header (nothing written
    past it). A record that cannot be decoded raises :class:`CorruptStoreError` naming the
    segment and position, or with ``corruptRecords=skip`` ends the segment with a warning.

    The segment is memory-mapped read-only, as RocketMQ maps it, so records are decoded where
    the page cache holds them (no copy into a read buffer). Runs of records go through the
    vectorised decoder (:mod:`pipeline.columnar`) and, when it declines a run or ``fast`` is
    False, through the engine's ``decode_record`` one record at a time. Both give the same rows.
    """
    started = time.monotonic()
    stats = stats if stats is not None else ScanStats()
    start, end = options.start_offset, options.end_offset
    lo = 0 if start is None else max(start - segment.from_offset, 0)
    try:
        buf = map_read_only(segment.path)
    except FileNotFoundError:
        raise _gone(segment.path) from None
    if buf is None:
        return
    try:
        limit = len(buf) if end is None else min(len(buf), max(end - segment.from_offset, 0))
        pos, why = 0, "other"
        while fast and len(buf) < 2**31:  # binary views address the segment with int32 offsets
            positions: list[int] = []
            pos, why = walk_run(buf, pos, limit, options.batch_size, positions)
            if lo and positions and positions[0] < lo:
                positions = [q for q in positions if q >= lo]
            if positions:
                yield from _emit(options, segment, buf, positions, stats)
            if why != "full":
                break
        if why == "other" and pos < limit:
            yield from _read_reference(options, segment, buf, pos, lo, limit, stats)
    finally:
        _close(buf)
    stats.seconds += time.monotonic() - started


def _close(buf: mmap.mmap) -> None:
    # BufferError: a view of the map is still referenced (a generator closed mid-run); the map is
    # released with that view, and closing it now would leave the view dangling
    with contextlib.suppress(BufferError):
        buf.close()


def _emit(
    options: ReadOptions, segment: SegmentFile, buf: mmap.mmap, positions: list[int], stats: ScanStats
) -> Iterator[pa.RecordBatch]:
    decoded = decode_run(buf, positions, segment.from_offset, options.start_time, options.end_time, ARROW_SCHEMA)
    if decoded is not None:
        batch, record_bytes = decoded
        if batch.num_rows:
            stats.rows += batch.num_rows
            stats.record_bytes += record_bytes
            yield batch
        return
    cols = _Columns()
    for q in positions:  # the reference decoder names whatever made the fast path decline
        result = decode_record(buf, q, check_crc=False)
        if not isinstance(result, StoredMessage):
            _corrupt(options, segment, q, result)
            break
        if options.store_time_matches(result.store_timestamp):
            cols.add(result)
    if len(cols):
        stats.rows += len(cols)
        stats.record_bytes += cols.record_bytes
        yield cols.to_batch()


def _corrupt(options: ReadOptions, segment: SegmentFile, pos: int, result: object) -> None:
    message = (f"CommitLog segment {segment.path} position {pos} (offset {segment.from_offset + pos}): "
               f"{getattr(result, 'reason', result)}")
    if not options.skip_corrupt:
        raise CorruptStoreError(message + " (option corruptRecords=skip reads on past it)")
    log.warning("%s; skipping the rest of the segment", message)


def _read_reference(
    options: ReadOptions, segment: SegmentFile, buf: mmap.mmap, pos: int, lo: int, limit: int, stats: ScanStats
) -> Iterator[pa.RecordBatch]:
    """Record by record with ``decode_record`` from ``pos`` (v2 records, blank records, damage)."""
    t_lo, t_hi = options.start_time, options.end_time
    time_filter = t_lo is not None or t_hi is not None
    limit = min(limit, len(buf))
    cols = _Columns()
    while pos < limit:
        if pos + 8 > len(buf) or buf[pos : pos + 8] == _ZERO_HEADER:
            break
        wanted = pos >= lo
        if wanted and time_filter and pos + SYS_FLAG_POS + 4 <= len(buf):
            (sys_flag,) = _I32.unpack_from(buf, pos + SYS_FLAG_POS)
            ts_pos = pos + store_timestamp_pos(sys_flag)
            if ts_pos + 8 <= len(buf):
                (ts,) = _I64.unpack_from(buf, ts_pos)
                wanted = (t_lo is None or ts >= t_lo) and (t_hi is None or ts < t_hi)
        result = decode_record(buf, pos, check_crc=False, read_body=wanted)
        if type(result) is StoredMessage:
            if wanted:
                cols.add(result)
                if len(cols) >= options.batch_size:
                    stats.rows += len(cols)
                    stats.record_bytes += cols.record_bytes
                    yield cols.to_batch()
                    cols = _Columns()
            pos += result.total_size
            continue
        if not isinstance(result, BlankRecord):
            _corrupt(options, segment, pos, result)
        break
    if len(cols):
        stats.rows += len(cols)
        stats.record_bytes += cols.record_bytes
        yield cols.to_batch()


def read_queue_range(
    options: ReadOptions, topic: str, queue_id: int, start_index: int, end_index: int,
    segments: list[SegmentFile], stats: ScanStats | None = None, *, file_size: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Records of ``topic`` queue ``queue_id`` at logical offsets [start_index, end_index).

    The queue ends at its first never-written entry. Entries pointing below the CommitLog's
    first segment (deleted by retention) are skipped; an entry that does not point at a
    record of this queue raises :class:`CorruptStoreError` (or is skipped with a warning
    under ``corruptRecords=skip``): ``rocketstore pipeline reindex`` rebuilds such queues.
    """
    started = time.monotonic()
    stats = stats if stats is not None else ScanStats()
    file_size = file_size or options.consume_queue_file_size
    queue_dir = os.path.join(options.consume_queue_dir, topic, str(queue_id))
    cl_min = segments[0].from_offset if segments else 0
    view = CommitLogView(segments)
    cols = _Columns()
    index = start_index
    try:
        while index < end_index:
            file_start = index * CQ_STORE_UNIT_SIZE // file_size * file_size
            path = os.path.join(queue_dir, f"{file_start:020d}")
            pos = index * CQ_STORE_UNIT_SIZE - file_start
            count = min(end_index - index, (file_size - pos) // CQ_STORE_UNIT_SIZE)
            try:
                entries = list(iter_consume_queue_entries(path, pos, count))
            except FileNotFoundError:
                if index == start_index:  # this range starts in a file deleted by retention, or past the end
                    index = (file_start + file_size) // CQ_STORE_UNIT_SIZE
                    continue
                break
            ended = False
            for entry_pos, offset, size, tags in entries:
                if (offset, size, tags) == PRE_BLANK_ENTRY:
                    continue
                if offset == 0 and size == 0 and tags == 0:
                    ended = True  # never written: the end of the queue
                    break
                logical = (file_start + entry_pos) // CQ_STORE_UNIT_SIZE
                if offset < cl_min:
                    continue
                if (options.start_offset is not None and offset < options.start_offset) or (
                        options.end_offset is not None and offset >= options.end_offset):
                    continue
                msg = _lookup(view, offset, size, topic, queue_id, logical, path, entry_pos, options.skip_corrupt)
                if msg is None or not options.store_time_matches(msg.store_timestamp):
                    continue
                cols.add(msg)
                if len(cols) >= options.batch_size:
                    stats.rows += len(cols)
                    stats.record_bytes += cols.record_bytes
                    yield cols.to_batch()
                    cols = _Columns()
            if ended or len(entries) < count:
                break
            index += count
        if len(cols):
            stats.rows += len(cols)
            stats.record_bytes += cols.record_bytes
            yield cols.to_batch()
    finally:
        view.close()
    stats.seconds += time.monotonic() - started


def _lookup(
    view: CommitLogView, offset: int, size: int, topic: str, queue_id: int, logical: int, cq_path: str, cq_pos: int,
    skip: bool,
) -> StoredMessage | None:
    where = f"consume queue {cq_path} position {cq_pos} (queue offset {logical}) -> CommitLog offset {offset}"
    try:
        result = view.record_at(offset)
    except FileNotFoundError as exc:
        raise _gone(str(exc.filename)) from None
    if isinstance(result, str):
        problem = result
    elif (result.topic, result.queue_id, result.queue_offset, result.total_size) == (topic, queue_id, logical, size):
        return result
    else:
        problem = (f"the record there is {result.topic} queue {result.queue_id} offset {result.queue_offset}, "
                   f"size {result.total_size} (entry size {size})")
    if not skip:
        raise CorruptStoreError(f"{where}: {problem}; `rocketstore pipeline reindex` rebuilds the consume queues")
    log.warning("%s: %s; skipped", where, problem)
    return None
