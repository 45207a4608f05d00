"""ConsumeQueue: the per-(topic, queueId) logical index into the CommitLog.

Each entry is 20 bytes, big-endian::

    commitLogOffset i64 | size i32 | tagsCode i64      (tagsCode = Java hash of the tags)

Logical offset ``n`` lives at byte ``n * 20`` of ``consumequeue/{topic}/{queueId}/``, in files
of 300,000 entries named by their first byte offset. A queue whose first file does not start
at logical 0 is padded with ``(0, 0x7FFFFFFF, 0)`` entries (RocketMQ's fillPreBlank), so byte
positions stay equal to ``offset * 20`` in every file.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rocketstore.common.message import TRANSACTION_NOT_TYPE, SysFlag, transaction_type
from rocketstore.store.mapped_file import MappedFile
from rocketstore.store.mapped_file_queue import MappedFileQueue

CQ_STORE_UNIT_SIZE = 20
CQ_ENTRY = struct.Struct(">qiq")
"""One entry: commitLogOffset i64, size i32, tagsCode i64."""
_PRE_BLANK = CQ_ENTRY.pack(0, 0x7FFFFFFF, 0)
PRE_BLANK_ENTRY = (0, 0x7FFFFFFF, 0)

#: the transaction types (sysFlag & TRANSACTION_TYPE_MASK) whose records get a ConsumeQueue entry
#: and so take a queue offset: plain and committed messages. A prepared half message waits for
#: its commit (the broker writes a new, committed record then) and a rollback marker is never
#: delivered, so neither is consumable: RocketMQ's CommitLogDispatcherBuildConsumeQueue skips both.
CONSUME_QUEUE_TRANSACTION_TYPES = (TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT)

log = logging.getLogger(__name__)


def gets_consume_queue_entry(sys_flag: int) -> bool:
    """Whether dispatch writes a ConsumeQueue entry for a record with this sysFlag (not prepared / rolled back)."""
    return transaction_type(sys_flag) in CONSUME_QUEUE_TRANSACTION_TYPES


def unpack_entries(data: bytes | bytearray | memoryview) -> Iterator[tuple[int, int, int]]:
    """(commitLogOffset, size, tagsCode) of each 20-byte entry in ``data`` (a whole number of entries).

    For tools that read consume queue files themselves (offline inspection opens them read-only).
    """
    yield from CQ_ENTRY.iter_unpack(data)


@dataclass(slots=True)  # not frozen: built per message, and frozen init costs a setattr per field
class ConsumeQueueEntry:
    """One decoded entry; ``queue_offset`` is its logical offset in the queue."""

    queue_offset: int
    commit_log_offset: int
    size: int
    tags_code: int


class ConsumeQueue:
    """One queue's entries; appended by dispatch, read by pulls, trimmed by recovery and cleanup."""

    def __init__(self, topic: str, queue_id: int, store_path: str, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size - file_size % CQ_STORE_UNIT_SIZE
        self.queue_dir = os.path.join(store_path, topic, str(queue_id))
        self.mapped_file_queue = MappedFileQueue(self.queue_dir, self.file_size)
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the end of valid entries, scanning from the third-to-last file, and trim there."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(len(files) - 3, 0)
        mapped = files[index]
        process_offset = mapped.file_from_offset
        mapped_offset = 0
        while True:
            mapped_offset = 0
            buf = mapped.buffer
            for pos in range(0, self.file_size, CQ_STORE_UNIT_SIZE):
                offset, size, _ = CQ_ENTRY.unpack_from(buf, pos)
                if offset >= 0 and size > 0:
                    mapped_offset = pos + CQ_STORE_UNIT_SIZE
                    self.max_physic_offset = offset + size
                else:
                    break
            if mapped_offset == self.file_size and index + 1 < len(files):
                index += 1
                mapped = files[index]
                process_offset = mapped.file_from_offset
                continue
            break
        process_offset += mapped_offset
        self.mapped_file_queue.set_flushed_where(process_offset)
        self.mapped_file_queue.truncate_dirty_files(process_offset)

    def truncate_dirty_logic_files(self, phy_offset: int, *, wipe: bool = False) -> None:
        """Drop entries pointing at or past ``phy_offset`` (the CommitLog was cut back).

        Files whose first entry points there go, newest first; the last one left is cut after
        its last entry below ``phy_offset``. With ``wipe`` (a truncation, not recovery) the
        dropped entries of that file are zeroed and synced: recovery reads a file up to its
        first zero entry, and entries merely left behind the write position would come back
        after a restart, pointing at whatever the CommitLog holds there by then.
        """
        self.max_physic_offset = phy_offset
        mfq = self.mapped_file_queue
        while (mapped := mfq.last) is not None:
            written = mapped.wrote_position
            kept = self._cut_last_file(mapped, phy_offset)
            if kept is None:
                mfq.delete_last_mapped_file()
                continue
            if wipe and kept < written:
                mapped.wipe(kept, written)
            break
        if mfq.flushed_where > mfq.max_offset:  # else the flusher would skip the entries that follow
            mfq.set_flushed_where(mfq.max_offset)

    def _cut_last_file(self, mapped: MappedFile, phy_offset: int) -> int | None:
        """Set ``mapped``'s positions after its last entry below ``phy_offset`` and return that
        position; None when its first entry is not below (the whole file goes)."""
        buf = mapped.buffer
        mapped.set_positions(0)
        for pos in range(0, self.file_size, CQ_STORE_UNIT_SIZE):
            offset, size, _ = CQ_ENTRY.unpack_from(buf, pos)
            if pos == 0:
                if offset >= phy_offset:
                    return None
            elif not (offset >= 0 and size > 0) or offset >= phy_offset:
                return pos
            mapped.set_positions(pos + CQ_STORE_UNIT_SIZE)
            self.max_physic_offset = offset + size
        return self.file_size

    def last_offset(self) -> int:
        """The CommitLog offset just past the last entry (-1 if none)."""
        mapped = self.mapped_file_queue.last
        if mapped is None:
            return -1
        pos = max(mapped.wrote_position - CQ_STORE_UNIT_SIZE, 0)
        last = -1
        buf = mapped.buffer
        while pos + CQ_STORE_UNIT_SIZE <= self.file_size:
            offset, size, _ = CQ_ENTRY.unpack_from(buf, pos)
            if not (offset >= 0 and size > 0):
                break
            last = offset + size
            pos += CQ_STORE_UNIT_SIZE
        return last

    # -- writing (dispatch thread) ---------------------------------------------------------
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append one entry; re-dispatched records (already covered) are skipped, not repeated."""
        with self._lock:
            if offset + size <= self.max_physic_offset:
                # Expected after a crash (recovery re-dispatches from the checkpoint): debug, not
                # warning, or a recovery of one segment would log a million lines.
                log.debug("%s-%d: entry for %d already built (max %d)", self.topic, self.queue_id,
                          offset, self.max_physic_offset)
                return True
            expect_logic_offset = cq_offset * CQ_STORE_UNIT_SIZE
            mfq = self.mapped_file_queue
            mapped = mfq.get_last_mapped_file(expect_logic_offset)
            if mapped is None:
                return False
            if mapped.first_create_in_queue and cq_offset != 0 and mapped.wrote_position == 0:
                self.min_logic_offset = expect_logic_offset
                mfq.set_flushed_where(expect_logic_offset)
                self._fill_pre_blank(mapped, expect_logic_offset)
            if cq_offset != 0:
                current = mapped.wrote_position + mapped.file_from_offset
                if expect_logic_offset < current:
                    log.debug("%s-%d: consume queue offset %d built repeatedly", self.topic, self.queue_id,
                                cq_offset)
                    return True
                if expect_logic_offset != current:
                    log.error("%s-%d: logic queue order maybe wrong: expect %d, at %d", self.topic,
                              self.queue_id, expect_logic_offset, current)
            self.max_physic_offset = offset + size
            return mapped.append(CQ_ENTRY.pack(offset, size, tags_code))

    def put_message_position_infos(self, first_cq_offset: int, count: int, entries: bytes) -> bool:
        """Append ``count`` encoded entries for consecutive queue offsets from ``first_cq_offset``.

        Dispatch hands the entries of one queue in a pass over as one run. When the run simply
        continues the queue within its last file (nearly always), it is one write; anything
        else (a queue's first entry, a file boundary, a re-dispatched stretch after a crash)
        goes entry by entry through :meth:`put_message_position_info`, which handles it.
        """
        size = count * CQ_STORE_UNIT_SIZE
        with self._lock:
            mapped = self.mapped_file_queue.last
            expect = first_cq_offset * CQ_STORE_UNIT_SIZE
            first_offset, first_size, _ = CQ_ENTRY.unpack_from(entries, 0)
            if (
                mapped is not None and mapped.wrote_position > 0 and first_offset + first_size > self.max_physic_offset
                and mapped.file_from_offset + mapped.wrote_position == expect
                and mapped.wrote_position + size <= mapped.file_size
            ):
                last_offset, last_size, _ = CQ_ENTRY.unpack_from(entries, size - CQ_STORE_UNIT_SIZE)
                self.max_physic_offset = last_offset + last_size
                return mapped.append(entries)
        for i, (offset, entry_size, code) in enumerate(CQ_ENTRY.iter_unpack(entries)):
            if not self.put_message_position_info(offset, entry_size, code, first_cq_offset + i):
                return False
        return True

    def _fill_pre_blank(self, mapped: MappedFile, until_where: int) -> None:
        until = until_where % self.file_size
        mapped.append(_PRE_BLANK * (until // CQ_STORE_UNIT_SIZE))

    # -- reading ---------------------------------------------------------------------------
    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.max_offset // CQ_STORE_UNIT_SIZE

    @property
    def message_total_in_queue(self) -> int:
        return self.max_offset_in_queue - self.min_offset_in_queue

    def read_entries(self, start_index: int, max_entries: int) -> bytes:
        """Raw bytes of up to ``max_entries`` entries from ``start_index``, within one file.

        RocketMQ's getIndexBuffer: pulls walk these lazily (see :func:`unpack_entries`) and
        usually stop after a few dozen, so nothing is decoded up front.
        """
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return b""
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped is None:
            return b""
        pos = offset % self.file_size
        count = min(max_entries, (mapped.read_position - pos) // CQ_STORE_UNIT_SIZE)
        data = mapped.read(pos, count * CQ_STORE_UNIT_SIZE) if count > 0 else None
        return data or b""

    def entries(self, start_index: int, max_entries: int) -> list[ConsumeQueueEntry]:
        """Up to ``max_entries`` decoded entries from ``start_index`` within one file."""
        data = self.read_entries(start_index, max_entries)
        return [ConsumeQueueEntry(start_index + i, *entry) for i, entry in enumerate(CQ_ENTRY.iter_unpack(data))]

    def entry(self, index: int) -> ConsumeQueueEntry | None:
        found = self.entries(index, 1)
        return found[0] if found else None

    def iter_entries(self, start_index: int = 0) -> Iterator[ConsumeQueueEntry]:
        """Every entry from ``start_index`` on, file by file (verify and tooling)."""
        index = max(start_index, self.min_offset_in_queue)
        while index < self.max_offset_in_queue:
            batch = self.entries(index, 4096)
            if not batch:
                index = self.roll_next_file(index)
                continue
            yield from batch
            index += len(batch)

    def roll_next_file(self, index: int) -> int:
        per_file = self.file_size // CQ_STORE_UNIT_SIZE
        return index + per_file - index % per_file

    def offset_in_queue_by_time(
        self, timestamp_ms: int, min_phy_offset: int, store_time_of: Callable[[int, int], int]
    ) -> int:
        """Binary-search the file by store time for the entry nearest ``timestamp_ms``.

        Mirrors getOffsetInQueueByTime: the file is picked by mtime, then entries are compared
        by the store time of the records they point at; ties go to the closer side.
        """
        mapped = self.mapped_file_queue.get_mapped_file_by_time(timestamp_ms)
        if mapped is None:
            return 0
        data = mapped.read_from(0)
        if data is None:
            return 0
        low = max(self.min_logic_offset - mapped.file_from_offset, 0)
        high = len(data) - CQ_STORE_UNIT_SIZE
        target = left = right = -1
        left_value = right_value = -1
        while high >= low:
            mid = (low + high) // (2 * CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
            phy_offset, size, _ = CQ_ENTRY.unpack_from(data, mid)
            if phy_offset < min_phy_offset:
                low = mid + CQ_STORE_UNIT_SIZE
                left = mid
                continue
            store_time = store_time_of(phy_offset, size)
            if store_time < 0:
                return 0
            if store_time == timestamp_ms:
                target = mid
                break
            if store_time > timestamp_ms:
                high = mid - CQ_STORE_UNIT_SIZE
                right, right_value = mid, store_time
            else:
                low = mid + CQ_STORE_UNIT_SIZE
                left, left_value = mid, store_time
        if target != -1:
            offset = target
        elif left_value == -1:
            offset = right
        elif right_value == -1:
            offset = left
        else:
            offset = right if abs(timestamp_ms - left_value) > abs(timestamp_ms - right_value) else left
        return (mapped.file_from_offset + offset) // CQ_STORE_UNIT_SIZE

    # -- maintenance -----------------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def delete_expired_file(self, phy_min_offset: int) -> int:
        count = self.mapped_file_queue.delete_expired_file_by_offset(phy_min_offset, CQ_STORE_UNIT_SIZE)
        self.correct_min_offset(phy_min_offset)
        return count

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the queue's min offset to the first entry whose record still exists."""
        mapped = self.mapped_file_queue.first
        if mapped is None:
            return
        data = mapped.read_from(0)
        if data is None:
            return
        for pos in range(0, len(data) - CQ_STORE_UNIT_SIZE + 1, CQ_STORE_UNIT_SIZE):
            offset, _, _ = CQ_ENTRY.unpack_from(data, pos)
            if offset >= phy_min_offset:
                self.min_logic_offset = mapped.file_from_offset + pos
                return

    def destroy(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy()

    def shutdown(self) -> None:
        self.mapped_file_queue.shutdown()
