"""IndexFile and IndexService: RocketMQ's message-key index, byte for byte.

One index file, named after its creation time in local time (``yyyyMMddHHmmssSSS``), is laid
out as follows (all integers big-endian)::

    off                         size             field
    0                           8                beginTimestamp   store time of the first entry (ms)
    8                           8                endTimestamp     store time of the last entry (ms)
    16                          8                beginPhyOffset   CommitLog offset of the first entry
    24                          8                endPhyOffset     CommitLog offset of the last entry
    32                          4                hashSlotCount    slots that have been used
    36                          4                indexCount       next entry number (starts at 1)
    40                          4 * slotNum      slots            newest entry number per slot, 0 = empty
    40 + 4 * slotNum            20 * indexNum    entries          keyHash i32, phyOffset i64,
                                                                 timeDiff i32 (s since beginTimestamp),
                                                                 prevIndex i32 (older entry in the slot)

Entry 0 is never written: entry numbers start at 1 so that 0 can mean "no entry". A file is
full when ``indexCount >= indexNum``, so it holds ``indexNum - 1`` entries. A freshly created
file has ``indexCount`` 0 on disk until its first entry or first flush, exactly as RocketMQ
leaves it; loading treats anything below 1 as 1.

Keys are ``topic#key``; the slot is ``abs(String.hashCode(key)) % slotNum`` (a hash whose
absolute value is still negative, i.e. Integer.MIN_VALUE, counts as 0). Different keys can share
a hash, so a lookup may return offsets of other keys: callers must check the record's keys.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketstore.common.message import KEY_SEPARATOR, SysFlag, java_string_hash, transaction_type
from rocketstore.common.native import NATIVE
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.dispatch_request import DispatchRequest
from rocketstore.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 5_000_000 * 4
DEFAULT_MAX_MSGS_NUM_BATCH = 64
MAX_TRY_IDX_CREATE = 3

_INT_MAX = 2**31 - 1
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

_BEGIN_TIMESTAMP_POS = 0
_END_TIMESTAMP_POS = 8
_BEGIN_PHY_OFFSET_POS = 16
_END_PHY_OFFSET_POS = 24
_HASH_SLOT_COUNT_POS = 32
_INDEX_COUNT_POS = 36


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    """Total size of an index file: header + slots + entries (420,000,040 with the defaults)."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: ``abs(hashCode)``, or 0 when that is still negative."""
    h = java_string_hash(key)
    # Java's Math.abs(Integer.MIN_VALUE) overflows back to MIN_VALUE, which is then mapped to 0.
    return 0 if h == -(2**31) else abs(h)


def build_key(topic: str, key: str) -> str:
    """The indexed string for a message key: ``topic#key``."""
    return f"{topic}#{key}"


def time_millis_to_human_string(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: local time as ``yyyyMMddHHmmssSSS``."""
    t = time.localtime(ms // 1000)
    return (
        f"{t.tm_year:04d}{t.tm_mon:02d}{t.tm_mday:02d}"
        f"{t.tm_hour:02d}{t.tm_min:02d}{t.tm_sec:02d}{ms % 1000:03d}"
    )


def _to_int64(value: int) -> int:
    """Wrap to a Java long, as the subtraction of two longs does."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - 2**64 if value >= 2**63 else value


def _java_div(a: int, b: int) -> int:
    """Java integer division: truncates toward zero (Python's // floors)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


IndexHeaderState = tuple[int, int, int, int, int, int]
"""beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset, hashSlotCount, indexCount."""

INDEX_KEY_ENTRY = struct.Struct(">iqq")
"""A key to index, as dispatch hands it over: keyHash i32 (:func:`index_key_hash` of ``topic#key``),
phyOffset i64, storeTimestamp i64."""

_NO_SKIP = -(2**63)


def index_key_entries(
    topic: str, uniq_key: str | None, keys: str | None, sys_flag: int, phy_offset: int, store_timestamp: int,
) -> bytes:
    """The keys IndexService.buildIndex indexes for one record: ``topic#uniqKey``, then ``topic#key``
    per non-empty space-separated key; none for a rolled-back transaction."""
    if transaction_type(sys_flag) == SysFlag.TRANSACTION_ROLLBACK:
        return b""
    names = [] if uniq_key is None else [uniq_key]
    if keys:
        names.extend(key for key in keys.split(KEY_SEPARATOR) if key)
    return b"".join(INDEX_KEY_ENTRY.pack(index_key_hash(f"{topic}#{name}"), phy_offset, store_timestamp)
                    for name in names)


def put_index_entries_python(
    buf: mmap.mmap | bytearray, hash_slot_num: int, index_num: int, entries: bytes, start: int, skip_below: int,
    header: IndexHeaderState,
) -> tuple[int, IndexHeaderState]:
    """The reference writer behind :meth:`IndexFile.put_entries` (the Rust twin is ``put_index_entries``).

    For each entry: chain it in front of its slot's newest entry (a slot value that is not a
    valid entry number counts as empty), store its time as whole seconds since the file's
    beginTimestamp (0 while that is unset, capped at Integer.MAX_VALUE), and point the slot at
    it. The header is written once at the end, after the entries and slots it counts.
    """
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = header
    if slot_count < 0 or index_count < 0:
        raise ValueError(f"header counts must not be negative: {header}")
    if slot_count + (len(entries) - start) // INDEX_KEY_ENTRY.size > _INT_MAX:
        raise ValueError(f"hashSlotCount {slot_count} of the header could overflow an int: the header is corrupt")
    entries_pos = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
    pos = start
    wrote = False
    while pos < len(entries):
        key_hash, phy_offset, store_timestamp = INDEX_KEY_ENTRY.unpack_from(entries, pos)
        if phy_offset < skip_below:
            pos += INDEX_KEY_ENTRY.size
            continue
        if index_count >= index_num:
            break
        abs_slot_pos = INDEX_HEADER_SIZE + (key_hash % hash_slot_num) * HASH_SLOT_SIZE
        (slot_value,) = _I32.unpack_from(buf, abs_slot_pos)
        if slot_value <= INVALID_INDEX or slot_value > index_count:
            slot_value = INVALID_INDEX
        time_diff = _java_div(_to_int64(store_timestamp - begin_ts), 1000)
        if begin_ts <= 0 or time_diff < 0:
            time_diff = 0
        elif time_diff > _INT_MAX:
            time_diff = _INT_MAX
        _ENTRY.pack_into(buf, entries_pos + index_count * INDEX_SIZE, key_hash, phy_offset, time_diff, slot_value)
        _I32.pack_into(buf, abs_slot_pos, index_count)
        if index_count <= 1:
            begin_phy, begin_ts = phy_offset, store_timestamp
        if slot_value == INVALID_INDEX:
            slot_count += 1
        index_count += 1
        end_phy, end_ts = phy_offset, store_timestamp
        wrote = True
        pos += INDEX_KEY_ENTRY.size
    if wrote:
        _HEADER.pack_into(buf, 0, begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count)
    return pos, (begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count)


_put_index_entries = NATIVE.put_index_entries if NATIVE is not None else put_index_entries_python


@dataclass(frozen=True, slots=True)
class IndexHeader:
    """A snapshot of an index file's header (for stats and verification)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int


def read_index_header(buf: bytes | bytearray | memoryview | mmap.mmap) -> IndexHeader:
    """The header as stored in an index file's bytes (indexCount as is, even below 1)."""
    return IndexHeader(*_HEADER.unpack_from(buf, 0))


def index_slot_pos(slot: int) -> int:
    """Byte position of hash slot ``slot``."""
    return INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE


def index_entry_pos(hash_slot_num: int, number: int) -> int:
    """Byte position of entry ``number`` (entries start at 1; 0 is never written)."""
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + number * INDEX_SIZE


def read_index_entry(
    buf: bytes | bytearray | memoryview | mmap.mmap, hash_slot_num: int, number: int
) -> tuple[int, int, int, int]:
    """Entry ``number`` as (keyHash, phyOffset, timeDiff, prevIndex)."""
    key_hash, phy_offset, time_diff, prev_index = _ENTRY.unpack_from(buf, index_entry_pos(hash_slot_num, number))
    return key_hash, phy_offset, time_diff, prev_index


def read_index_slot(buf: bytes | bytearray | memoryview | mmap.mmap, slot: int) -> int:
    """The newest entry number stored in hash slot ``slot`` (0 = empty)."""
    (value,) = _I32.unpack_from(buf, index_slot_pos(slot))
    return int(value)


class IndexFile:
    """One index file: a hash table of key chains over a fixed-size, sparse, mapped file.

    ``put_key`` is meant for a single writer (the dispatch thread); ``select_phy_offsets`` may
    run concurrently from other threads. An internal lock keeps each call atomic.
    """

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        create: bool = True,
    ) -> None:
        """Map ``path``, creating it (sparse) unless ``create`` is False.

        A new file continues from a full predecessor: a positive ``end_phy_offset`` /
        ``end_timestamp`` becomes both the begin and end values of the header, as in RocketMQ.
        With ``create=False`` the file must exist and its header is loaded.
        """
        if hash_slot_num <= 0 or index_num <= 0:
            raise ValueError("hash_slot_num and index_num must be positive")
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self._entries_pos = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._mapped_file = MappedFile(path, self.file_size, create=create)
        self._buf = self._mapped_file.buffer
        self._lock = threading.Lock()
        self._begin_timestamp = 0
        self._end_timestamp = 0
        self._begin_phy_offset = 0
        self._end_phy_offset = 0
        self._hash_slot_count = 0
        self._index_count = 1
        if not create:
            self.load()
            return
        if end_phy_offset > 0:
            self._set_begin_phy_offset(end_phy_offset)
            self._set_end_phy_offset(end_phy_offset)
        if end_timestamp > 0:
            self._set_begin_timestamp(end_timestamp)
            self._set_end_timestamp(end_timestamp)

    # -- identity and header ---------------------------------------------------------------
    @property
    def path(self) -> str:
        return self._mapped_file.path

    @property
    def file_name(self) -> str:
        return self._mapped_file.file_name

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def hash_slot_count(self) -> int:
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        """The next entry number; the file holds ``index_count - 1`` entries."""
        return self._index_count

    @property
    def is_write_full(self) -> bool:
        return self._index_count >= self.index_num

    def header(self) -> IndexHeader:
        return IndexHeader(
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    def load(self) -> None:
        """Read the header from the file (an indexCount below 1 is taken as 1)."""
        (
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        ) = _HEADER.unpack_from(self._buf, 0)
        if self._index_count <= 0:
            self._index_count = 1

    def _set_begin_timestamp(self, value: int) -> None:
        self._begin_timestamp = value
        _I64.pack_into(self._buf, _BEGIN_TIMESTAMP_POS, value)

    def _set_end_timestamp(self, value: int) -> None:
        self._end_timestamp = value
        _I64.pack_into(self._buf, _END_TIMESTAMP_POS, value)

    def _set_begin_phy_offset(self, value: int) -> None:
        self._begin_phy_offset = value
        _I64.pack_into(self._buf, _BEGIN_PHY_OFFSET_POS, value)

    def _set_end_phy_offset(self, value: int) -> None:
        self._end_phy_offset = value
        _I64.pack_into(self._buf, _END_PHY_OFFSET_POS, value)

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._buf,
            0,
            self._begin_timestamp,
            self._end_timestamp,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._hash_slot_count,
            self._index_count,
        )

    def cap_phy_offsets(self, offset: int) -> bool:
        """Lower the header's CommitLog offsets to ``offset`` (the log was cut back there);
        True when they changed."""
        with self._lock:
            if self._end_phy_offset <= offset:
                return False
            self._set_end_phy_offset(offset)
            if self._begin_phy_offset > offset:
                self._set_begin_phy_offset(offset)
            return True

    # -- writing ---------------------------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset`` at the head of its slot's chain; False when full."""
        entry = INDEX_KEY_ENTRY.pack(index_key_hash(key), phy_offset, store_timestamp)
        return self.put_entries(entry, 0, _NO_SKIP) == len(entry)

    def put_entries(self, entries: bytes, start: int, skip_below: int) -> int:
        """Write the INDEX_KEY_ENTRY keys of ``entries`` from byte ``start`` until the file is full.

        Entries whose offset is below ``skip_below`` are passed over (already indexed before a
        crash). Returns the byte position of the first entry not consumed: ``len(entries)``
        unless the file filled up.
        """
        with self._lock:
            header = (self._begin_timestamp, self._end_timestamp, self._begin_phy_offset, self._end_phy_offset,
                      self._hash_slot_count, self._index_count)
            end, header = _put_index_entries(self._buf, self.hash_slot_num, self.index_num, entries, start,
                                             skip_below, header)
            (self._begin_timestamp, self._end_timestamp, self._begin_phy_offset, self._end_phy_offset,
             self._hash_slot_count, self._index_count) = header
        if end < len(entries):
            log.warning("index file %s over capacity: index count %d, max %d", self.file_name,
                        self._index_count, self.index_num)
        return end

    # -- reading ---------------------------------------------------------------------------
    def is_time_matched(self, begin: int, end: int) -> bool:
        """Whether [begin, end] overlaps the file's [beginTimestamp, endTimestamp]."""
        b, e = self._begin_timestamp, self._end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(
        self,
        key: str,
        max_num: int,
        begin_ms: int,
        end_ms: int,
        into: list[int] | None = None,
    ) -> list[int]:
        """Offsets of entries whose hash equals ``key``'s and whose time is in [begin, end].

        Walks the slot's chain newest first and appends to ``into`` (a new list if None) until
        it holds ``max_num`` offsets; returns that list. Entries of other keys with the same
        hash are included: the caller must check the records.
        """
        result: list[int] = [] if into is None else into
        if not self._mapped_file.hold():
            return result
        try:
            with self._lock:
                self._select(result, key, max_num, begin_ms, end_ms)
        finally:
            self._mapped_file.release()
        return result

    def _select(self, result: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        key_hash = index_key_hash(key)
        abs_slot_pos = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        (slot_value,) = _I32.unpack_from(self._buf, abs_slot_pos)
        index_count = self._index_count
        if slot_value <= INVALID_INDEX or slot_value > index_count or index_count <= 1:
            return
        next_index = slot_value
        while len(result) < max_num:
            key_hash_read, phy_offset_read, time_diff, prev_index = _ENTRY.unpack_from(
                self._buf, self._entries_pos + next_index * INDEX_SIZE
            )
            if time_diff < 0:
                break
            time_read = self._begin_timestamp + time_diff * 1000
            if key_hash == key_hash_read and begin <= time_read <= end:
                result.append(phy_offset_read)
            if (
                prev_index <= INVALID_INDEX
                or prev_index > index_count
                or prev_index == next_index
                or time_read < begin
            ):
                break
            next_index = prev_index

    # -- lifecycle -------------------------------------------------------------------------
    def flush(self) -> None:
        """Rewrite the header from memory and msync the whole mapping."""
        if not self._mapped_file.hold():
            return
        try:
            started = time.monotonic()
            with self._lock:
                self._write_header()
            self._buf.flush()
            log.info("flushed index file %s in %.1f ms", self.file_name, (time.monotonic() - started) * 1000)
        finally:
            self._mapped_file.release()

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Unmap and delete the file once no reader holds it; True when gone."""
        return self._mapped_file.destroy(interval_forcibly_ms)

    def close(self) -> None:
        """Unmap and close without deleting."""
        self._mapped_file.close()

    def __repr__(self) -> str:
        return f"IndexFile({self.path!r}, {self.header()})"


@dataclass(slots=True)
class QueryOffsetResult:
    """CommitLog offsets found for a key, plus where the index stood when asked."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class IndexService:
    """The ``index`` directory: a list of IndexFiles, oldest first; only the last one is written.

    ``build_index`` runs on the dispatch thread, queries and deletions on others; a lock guards
    the file list (RocketMQ's read-write lock) and each IndexFile guards its own buffer.
    """

    #: seconds to wait between attempts to create an index file (RocketMQ sleeps 1 s)
    retry_interval_s: float = 1.0

    def __init__(
        self,
        store_path: str,
        hash_slot_num: int,
        index_num: int,
        checkpoint: StoreCheckpoint,
        message_index_enable: bool = True,
        max_msgs_num_batch: int = DEFAULT_MAX_MSGS_NUM_BATCH,
        *,
        on_index_file_error: Callable[[], None] | None = None,
    ) -> None:
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        self.message_index_enable = message_index_enable
        self.max_msgs_num_batch = max_msgs_num_batch
        self.on_index_file_error = on_index_file_error
        #: set once an index file could not be created (RocketMQ's makeIndexFileError)
        self.index_file_error = False
        self._files: list[IndexFile] = []
        self._lock = threading.RLock()
        self._flush_threads: list[threading.Thread] = []

    @property
    def files(self) -> list[IndexFile]:
        """A copy of the file list, oldest first."""
        with self._lock:
            return list(self._files)

    # -- load ------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool) -> None:
        """Map the existing files in name order.

        After an abnormal exit, files whose endTimestamp is newer than the checkpoint's
        indexMsgTimestamp were maybe not flushed whole: they are deleted and rebuilt by dispatch.
        Names that are not numbers are skipped; a file of the wrong size raises MappedFileError.
        """
        try:
            names = sorted(os.listdir(self.store_path))
        except FileNotFoundError:
            return
        with self._lock:
            for name in names:
                path = os.path.join(self.store_path, name)
                if not os.path.isfile(path):
                    continue
                if not name.isdigit():
                    log.error("load index file %s: not a timestamp name, skipped", path)
                    continue
                if os.path.getsize(path) == 0:  # kill -9 between creating and sizing it: never written
                    log.warning("removing %s: an empty index file whose creation was interrupted", path)
                    os.unlink(path)
                    continue
                f = IndexFile(path, self.hash_slot_num, self.index_num, create=False)
                if not last_exit_ok and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                    f.destroy(0)
                    log.info("index file %s newer than the checkpoint, deleted", name)
                    continue
                log.info("load index file OK, %s", name)
                self._files.append(f)

    # -- building --------------------------------------------------------------------------
    def build_index(self, req: DispatchRequest) -> None:
        """Index one record: ``topic#uniqKey`` and ``topic#key`` for each key."""
        self.put_index_entries(index_key_entries(req.topic, req.uniq_key, req.keys, req.sys_flag,
                                                 req.commit_log_offset, req.store_timestamp))

    def put_index_entries(self, entries: bytes) -> None:
        """Write INDEX_KEY_ENTRY keys (dispatch makes them a pass at a time), rolling to a new
        file when one fills; keys of records the last file already covers are skipped."""
        if not self.message_index_enable:
            return
        index_file = self.retry_get_and_create_index_file()  # even without keys, as RocketMQ does
        if index_file is None:
            log.error("build index error, stop building index")
            return
        if not entries:
            return
        skip_below = index_file.end_phy_offset
        pos = 0
        while True:
            pos = index_file.put_entries(entries, pos, skip_below)
            if pos >= len(entries):
                return
            log.warning("index file %s is full, trying to create another one", index_file.file_name)
            next_file = self.retry_get_and_create_index_file()
            if next_file is None:
                (_, phy_offset, _) = INDEX_KEY_ENTRY.unpack_from(entries, pos)
                log.error("putKey error: no index file for the keys of commitlog offset %d", phy_offset)
                return
            index_file = next_file

    def retry_get_and_create_index_file(self) -> IndexFile | None:
        """The writable last file, creating one if needed; up to 3 attempts, 1 s apart."""
        for attempt in range(MAX_TRY_IDX_CREATE):
            index_file = self.get_and_create_last_index_file()
            if index_file is not None:
                return index_file
            log.info("tried to create index file %d times", attempt + 1)
            time.sleep(self.retry_interval_s)
        self.index_file_error = True
        log.error("mark index file cannot build flag")
        if self.on_index_file_error is not None:
            self.on_index_file_error()
        return None

    def get_and_create_last_index_file(self) -> IndexFile | None:
        """The last file if it is not full, else a new one continuing from it (None on error).

        When a full file is succeeded, it is flushed in a background thread, which then records
        its endTimestamp in the checkpoint.
        """
        with self._lock:
            prev: IndexFile | None = None
            if self._files:
                last = self._files[-1]
                if not last.is_write_full:
                    return last
                prev = last
            try:
                os.makedirs(self.store_path, exist_ok=True)
                path = self._new_file_path(prev)
                index_file = IndexFile(
                    path,
                    self.hash_slot_num,
                    self.index_num,
                    prev.end_phy_offset if prev is not None else 0,
                    prev.end_timestamp if prev is not None else 0,
                )
            except (OSError, ValueError) as exc:
                log.error("create index file error: %s", exc)
                return None
            self._files.append(index_file)
            if prev is not None:
                self._start_flush_thread(prev)
            return index_file

    def _new_file_path(self, prev: IndexFile | None) -> str:
        """A path named by the current time, bumped by whole ms past any existing name.

        RocketMQ would map the same file twice if two files were created within one ms; names
        must also keep increasing so that sorting by name keeps the files in order.
        """
        ms = int(time.time() * 1000)
        while True:
            name = time_millis_to_human_string(ms)
            path = os.path.join(self.store_path, name)
            if (prev is None or name > prev.file_name) and not os.path.exists(path):
                return path
            ms += 1

    def _start_flush_thread(self, index_file: IndexFile) -> None:
        self._flush_threads = [t for t in self._flush_threads if t.is_alive()]
        thread = threading.Thread(
            target=self.flush_file, args=(index_file,), name="FlushIndexFileThread", daemon=True
        )
        self._flush_threads.append(thread)
        thread.start()

    def wait_for_background_flushes(self, timeout_s: float | None = None) -> None:
        """Join the threads flushing full files (tests and shutdown)."""
        with self._lock:
            threads = list(self._flush_threads)
        for thread in threads:
            thread.join(timeout_s)

    # -- flushing --------------------------------------------------------------------------
    def flush_file(self, index_file: IndexFile) -> None:
        """Flush one file; if it is full, record its endTimestamp in the checkpoint afterwards."""
        index_msg_timestamp = index_file.end_timestamp if index_file.is_write_full else 0
        index_file.flush()
        if index_msg_timestamp > 0:
            self.checkpoint.index_msg_timestamp = index_msg_timestamp
            self.checkpoint.flush()

    def flush(self) -> None:
        """Flush the last file (the checkpoint is only advanced if that file is full)."""
        with self._lock:
            last = self._files[-1] if self._files else None
        if last is not None:
            self.flush_file(last)

    def truncate(self, offset: int) -> None:
        """The CommitLog was cut back to ``offset``: no file claims to cover records past it.

        Dispatch skips records below the last file's endPhyOffset (they were indexed before a
        crash), so without this the records written again from ``offset`` on would go unindexed
        until the log passed its old end: RocketMQ leaves the headers as they are, and has that
        gap. The keys of the discarded records stay in the files; a lookup reads the record a
        hit points at and drops it unless its topic and key match.
        """
        with self._lock:
            changed = [f for f in self._files if f.cap_phy_offsets(offset)]
        for f in changed:
            f.flush()

    # -- querying --------------------------------------------------------------------------
    def query_offset(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> QueryOffsetResult:
        """CommitLog offsets for ``topic#key`` stored in [begin_ms, end_ms], newest file first.

        At most ``min(max_num, max_msgs_num_batch)`` offsets; hash collisions are included.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        phy_offsets: list[int] = []
        last_update_timestamp = 0
        last_update_phy_offset = 0
        index_key = build_key(topic, key)
        with self._lock:
            files = self._files
            for i in range(len(files) - 1, -1, -1):
                f = files[i]
                if i == len(files) - 1:
                    last_update_timestamp = f.end_timestamp
                    last_update_phy_offset = f.end_phy_offset
                if f.is_time_matched(begin_ms, end_ms):
                    f.select_phy_offsets(index_key, max_num, begin_ms, end_ms, into=phy_offsets)
                if f.begin_timestamp < begin_ms or len(phy_offsets) >= max_num:
                    break
        return QueryOffsetResult(phy_offsets, last_update_timestamp, last_update_phy_offset)

    # -- deletion and lifecycle ------------------------------------------------------------
    def delete_expired_file(self, commit_log_min_offset: int) -> None:
        """Delete the oldest files whose endPhyOffset is below the CommitLog's min offset.

        The last file is never deleted; deletion stops at the first file still referenced.
        """
        with self._lock:
            if not self._files or self._files[0].end_phy_offset >= commit_log_min_offset:
                return
            expired: list[IndexFile] = []
            for f in self._files[:-1]:
                if f.end_phy_offset >= commit_log_min_offset:
                    break
                expired.append(f)
            for f in expired:
                if not f.destroy(3000):
                    log.error("deleteExpiredFile remove failed: %s", f.file_name)
                    break
                self._files.remove(f)

    def shutdown(self) -> None:
        """Wait for background flushes, flush the last file and unmap everything."""
        self.wait_for_background_flushes()
        with self._lock:
            self.flush()
            for f in self._files:
                f.close()
            self._files.clear()

    def destroy(self) -> None:
        """Delete every index file."""
        self.wait_for_background_flushes()
        with self._lock:
            for f in self._files:
                f.destroy(3000)
            self._files.clear()
