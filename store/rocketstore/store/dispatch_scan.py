"""One dispatch pass over a stretch of a CommitLog segment, reduced to what the indexes need.

ReputMessageService used to decode every record into a Python object and call each dispatcher
per record: tens of microseconds of interpreter time per message, on the interpreter lock the
writers need. A pass now makes one :func:`scan` call that returns, for a run of records:

* the ConsumeQueue entries, already encoded, grouped in runs of consecutive queue offsets of
  one (topic, queueId): a run is appended to its queue with one write;
* the IndexFile keys (``topic#uniqKey`` and ``topic#key``), already hashed with Java's
  ``String.hashCode``, as ``keyHash i32 | phyOffset i64 | storeTimestamp i64`` entries that
  :func:`rocketstore.store.index_file.put_index_entries` writes.

So Python does per-pass and per-queue work, and none per message. :func:`scan_python` is the
reference: it reads records with :func:`rocketstore.common.message.decode_record`, the decoder
recovery uses. The Rust extension's ``scan_dispatch`` is its twin, held byte-identical by the
differential tests, and reads the mapping without the interpreter lock.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketstore.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    BlankRecord,
    Buffer,
    CorruptRecord,
    StoredMessage,
    decode_record,
)
from rocketstore.common.native import NATIVE
from rocketstore.store.consume_queue import CQ_ENTRY, gets_consume_queue_entry
from rocketstore.store.index_file import index_key_entries
from rocketstore.store.schedule_message_service import consume_queue_tags_code

#: Records per pass at most: bounds the time between two looks at lag waiters and arrivals.
SCAN_MAX_RECORDS = 4096

END_NONE = 0
"""The scan stopped at ``limit`` or after ``max_records``."""
END_BLANK = 1
"""The scan met the end-of-segment blank record: dispatch rolls to the next segment."""
END_CORRUPT = 2
"""The scan met bytes that are not a whole record: dispatch stops there."""

RawQueueRun = tuple[str, int, int, int, bytes, int]
"""(topic, queueId, first queue offset, entry count, entries, store time of the last entry)."""
RawScan = tuple[int, int, int, str, list[RawQueueRun], bytes, int]
"""(end position, records, END_*, reason, runs, index entries, store time of the last entry that
got a ConsumeQueue entry or 0): what both implementations return, compared as is by the tests."""


@dataclass(frozen=True, slots=True)
class QueueRun:
    """ConsumeQueue entries for consecutive offsets of one queue, in CommitLog order."""

    topic: str
    queue_id: int
    first_queue_offset: int
    count: int
    entries: bytes
    last_store_timestamp: int


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What one pass found between its start and ``end_pos``."""

    end_pos: int
    records: int
    end_kind: int
    """END_NONE, END_BLANK or END_CORRUPT."""
    reason: str
    """For END_CORRUPT, what is wrong with the bytes at ``end_pos`` (logged by dispatch)."""
    runs: list[QueueRun]
    index_entries: bytes
    last_queue_timestamp: int


def scan_python(buf: Buffer, start: int, limit: int, max_records: int, index_enabled: bool,
                delay_levels_ms: tuple[int, ...]) -> RawScan:
    """The reference scan: whole records from ``start`` while below ``limit`` (see the module doc).

    ``delay_levels_ms`` (messageDelayLevel) gives SCHEDULE_TOPIC_XXXX entries their delivery time
    as tagsCode.
    """
    pos = start
    records = 0
    end_kind, reason = END_NONE, ""
    runs: list[tuple[str, int, int, int, bytearray, int]] = []
    open_runs: dict[tuple[str, int], int] = {}  # (topic, queueId) -> index of its latest run
    index = bytearray()
    last_queue_ts = 0
    while pos < limit and records < max_records:
        result = decode_record(buf, pos, check_crc=False, read_body=False)
        if isinstance(result, BlankRecord):
            end_kind, reason = END_BLANK, f"blank record of {result.size} bytes"
            break
        if isinstance(result, CorruptRecord):
            end_kind, reason = END_CORRUPT, result.reason
            break
        records += 1
        pos += result.total_size
        if gets_consume_queue_entry(result.sys_flag):
            code = consume_queue_tags_code(result.topic, result.tags, result.properties.get(PROPERTY_DELAY_TIME_LEVEL),
                                           result.store_timestamp, delay_levels_ms)
            _add_to_run(runs, open_runs, result, code)
            last_queue_ts = result.store_timestamp
        if index_enabled:
            index += index_key_entries(result.topic, result.uniq_key, result.keys, result.sys_flag,
                                       result.physical_offset, result.store_timestamp)
    return (pos, records, end_kind, reason, [(t, q, first, n, bytes(e), ts) for t, q, first, n, e, ts in runs],
            bytes(index), last_queue_ts)


def _add_to_run(
    runs: list[tuple[str, int, int, int, bytearray, int]], open_runs: dict[tuple[str, int], int], msg: StoredMessage,
    code: int,
) -> None:
    key = (msg.topic, msg.queue_id)
    entry = CQ_ENTRY.pack(msg.physical_offset, msg.total_size, code)
    at = open_runs.get(key)
    if at is not None:
        topic, queue_id, first, count, entries, _ = runs[at]
        if first + count == msg.queue_offset:
            entries += entry
            runs[at] = (topic, queue_id, first, count + 1, entries, msg.store_timestamp)
            return
    open_runs[key] = len(runs)
    runs.append((msg.topic, msg.queue_id, msg.queue_offset, 1, bytearray(entry), msg.store_timestamp))


def scan(
    buf: Buffer, start: int, limit: int, *, index_enabled: bool, delay_levels_ms: tuple[int, ...],
    max_records: int = SCAN_MAX_RECORDS,
) -> ScanResult:
    """One pass with the implementation this process runs (native unless absent or switched off)."""
    raw = _scan(buf, start, limit, max_records, index_enabled, delay_levels_ms)
    return to_scan_result(raw)


_scan = NATIVE.scan_dispatch if NATIVE is not None else scan_python


def to_scan_result(raw: RawScan) -> ScanResult:
    end_pos, records, end_kind, reason, runs, index, last_ts = raw
    return ScanResult(end_pos, records, end_kind, reason, [QueueRun(*run) for run in runs], index, last_ts)
