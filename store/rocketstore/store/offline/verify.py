"""``rocketstore store verify``: every CommitLog record, ConsumeQueue entry and IndexFile entry checked.

Read-only, through :class:`~rocketstore.store.store_view.StoreView`; see :func:`verify_store`.
"""

from __future__ import annotations

import itertools
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstore.common.message import KEY_SEPARATOR, PROPERTY_DELAY_TIME_LEVEL, StoredMessage, tags_code
from rocketstore.common.topic_validator import RMQ_SYS_SCHEDULE_TOPIC
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, PRE_BLANK_ENTRY, gets_consume_queue_entry
from rocketstore.store.index_file import (
    INDEX_HEADER_SIZE,
    build_key,
    index_entry_pos,
    index_file_size,
    index_key_hash,
    read_index_entry,
    read_index_header,
    read_index_slot,
)
from rocketstore.store.store_view import (
    CommitLogView,
    NumberedFile,
    StoreView,
    iter_consume_queue_entries,
    map_read_only,
    numbered_files,
    size_on_disk,
)

__all__ = ["MAX_REPORTED_PROBLEMS", "VerifyProgress", "VerifyReport", "verify_store"]

#: verify stops listing problems after this many (a wrecked store would otherwise list millions)
MAX_REPORTED_PROBLEMS = 1000

_EXT_ADDR_MAX = -(2**31) - 1  # ConsumeQueueExt.MAX_ADDR: tagsCodes at or below are ext addresses


@dataclass(frozen=True, slots=True)
class VerifyProgress:
    """One file or queue of the store checked: what :func:`verify_store` tells its ``progress`` callback."""

    #: ``commitlog`` (a segment), ``consumequeue`` (a queue, ``topic/queueId``) or ``index`` (an IndexFile)
    part: str
    #: the segment's or index file's name, or ``topic/queueId``
    item: str
    #: items of this part checked so far, and how many there are
    done: int
    total: int
    #: seconds since the verification started
    elapsed: float


@dataclass
class VerifyReport:
    """Outcome of :func:`verify_store`; ``ok`` is True exactly when ``problems`` is empty."""

    ok: bool
    problems: list[str]
    records: int
    consume_queue_entries: int
    index_entries: int
    #: ConsumeQueue and IndexFile entries pointing below the CommitLog's min offset (deleted by
    #: retention): expected, not problems
    expired_references: int = 0
    #: end-of-segment blank records met in the CommitLog
    blank_records: int = 0
    #: pre-blank filler entries at the head of consume queues
    pre_blank_entries: int = 0
    commit_log_min_offset: int = -1
    commit_log_max_offset: int = 0
    #: problems found; ``problems`` lists at most MAX_REPORTED_PROBLEMS of them, then a summary line
    problem_count: int = 0
    #: facts worth knowing that are not damage (abnormal last shutdown, dispatch behind, ...)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": list(self.problems),
            "records": self.records,
            "consume_queue_entries": self.consume_queue_entries,
            "index_entries": self.index_entries,
            "expired_references": self.expired_references,
            "blank_records": self.blank_records,
            "pre_blank_entries": self.pre_blank_entries,
            "commit_log_min_offset": self.commit_log_min_offset,
            "commit_log_max_offset": self.commit_log_max_offset,
            "problem_count": self.problem_count,
            "notes": list(self.notes),
        }



_SEGMENT_ENDS = frozenset(("blank", "corrupt", "end", "eof"))  # walk steps after which a segment is done


def _index_keys(msg: StoredMessage) -> list[str]:
    """The keys the index holds for a record: topic#uniqKey and topic#each KEYS value."""
    keys = []
    if msg.uniq_key is not None:
        keys.append(build_key(msg.topic, msg.uniq_key))
    for key in (msg.keys or "").split(KEY_SEPARATOR):
        if key:
            keys.append(build_key(msg.topic, key))
    return keys


def _expected_tags_code(msg: StoredMessage) -> int | None:
    """The tagsCode dispatch stores for ``msg``; None when it is not a tag hash (delayed messages)."""
    if msg.topic == RMQ_SYS_SCHEDULE_TOPIC and PROPERTY_DELAY_TIME_LEVEL in msg.properties:
        return None
    return tags_code(msg.tags)



def _is_never_written(offset: int, size: int, tags: int) -> bool:
    return offset == 0 and size == 0 and tags == 0

class _Verifier:
    def __init__(self, store: StoreView, progress: Callable[[VerifyProgress], None] | None) -> None:
        self.config = config = store.config
        self.root = store.root
        self.report = VerifyReport(ok=True, problems=[], records=0, consume_queue_entries=0, index_entries=0)
        self.problem_count = 0
        self.abnormal = config.abort_path().exists()
        self.store = store
        self.progress = progress
        self.started = time.monotonic()
        segments = store.segments()
        self.segment_size, self.commit_log_size_found = store.segment_size(segments)
        self.view = CommitLogView(segments, self.segment_size)
        self.crc_failed: dict[int, str] = {}
        self.unreachable: dict[int, int] = {}  # segment offset -> position of the undecodable record
        self.max_offset = 0
        # (topic, queueId) -> (last queue offset seen in the CommitLog, its physical offset)
        self.queue_tail: dict[tuple[str, int], tuple[int, int]] = {}
        self._rel_cache: dict[str, str] = {}

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the store root when inside it (as problems name files)."""
        key = str(path)
        found = self._rel_cache.get(key)
        if found is None:
            p = Path(os.path.abspath(path))
            root = Path(os.path.abspath(self.root))
            found = str(p.relative_to(root)) if p.is_relative_to(root) else key
            self._rel_cache[key] = found
        return found

    def report_progress(self, part: str, item: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(VerifyProgress(part, item, done, total, time.monotonic() - self.started))

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if self.problem_count <= MAX_REPORTED_PROBLEMS:
            self.report.problems.append(text)

    def run(self) -> VerifyReport:
        try:
            if self.abnormal:
                self.report.notes.append(
                    "abort file present: the last shutdown was abnormal (or a store is running); "
                    "the next start runs abnormal recovery"
                )
            if not self.config.checkpoint_path().is_file():
                self.report.notes.append("no checkpoint file")
            self.check_segments()
            self.walk_commit_log()
            self.check_consume_queues()
            self.check_index_files()
        finally:
            self.view.close()
        if self.problem_count > MAX_REPORTED_PROBLEMS:
            self.report.problems.append(
                f"... and {self.problem_count - MAX_REPORTED_PROBLEMS} more problems not listed"
            )
        self.report.ok = self.problem_count == 0
        self.report.problem_count = self.problem_count
        self.report.commit_log_min_offset = self.view.min_offset
        self.report.commit_log_max_offset = self.max_offset
        return self.report

    # CommitLog ----------------------------------------------------------------------------
    def check_segments(self) -> None:
        size = self.segment_size
        segments = self.view.segments
        if self.commit_log_size_found is not None:
            self.problem(
                f"{self.rel(segments[0].path).rsplit(os.sep, 1)[0]}: all {len(segments)} segments are {size} bytes, "
                f"but mappedFileSizeCommitLog is {self.config.mapped_file_size_commit_log}: the store was written "
                "with another segment size (pass its broker.conf) or the files were cut; checked as "
                f"{size}-byte segments"
            )
        for seg in segments:
            if seg.size != size:
                hint = "truncated" if seg.size < size else "too long"
                self.problem(f"{self.rel(seg.path)}: file is {seg.size} bytes, expected {size} "
                             f"(mappedFileSizeCommitLog): {hint}")
            if seg.from_offset % size:
                self.problem(f"{self.rel(seg.path)}: name is not a multiple of the segment size {size}")
        for prev, cur in itertools.pairwise(segments):
            if cur.from_offset == prev.from_offset:
                self.problem(f"{self.rel(prev.path)} and {self.rel(cur.path)}: two segments for offset "
                             f"{cur.from_offset}")
            elif cur.from_offset != prev.from_offset + size:
                gap = cur.from_offset - prev.from_offset - size
                what = f"a gap of {gap} bytes" if gap > 0 else f"an overlap of {-gap} bytes"
                self.problem(f"{self.rel(prev.path)} and {self.rel(cur.path)} are not adjacent: {what}")

    def walk_commit_log(self) -> None:
        self.max_offset = max(self.view.min_offset, 0)
        done = 0
        for step in self.view.walk(check_crc=True, read_body=False):
            seg = step.segment
            if step.kind in _SEGMENT_ENDS:
                done += 1
                self.report_progress("commitlog", seg.name, done, len(self.view.segments))
            where = f"{self.rel(seg.path)} position {step.pos} (offset {step.offset})"
            if step.kind in ("record", "crc"):
                msg = step.message
                assert msg is not None
                if step.kind == "crc":
                    self.problem(f"{where}: {step.reason}")
                    self.crc_failed[step.offset] = step.reason
                else:
                    self.report.records += 1
                if msg.physical_offset != step.offset:
                    self.problem(f"{where}: record stores physicalOffset {msg.physical_offset}, "
                                 f"expected {step.offset}")
                self.max_offset = step.offset + msg.total_size
                self.track_queue_offset(msg, step.offset, where)
            elif step.kind == "blank":
                self.report.blank_records += 1
                self.max_offset = seg.from_offset + self.segment_size
            elif step.kind == "corrupt":
                self.unreachable[seg.from_offset] = step.pos
                self.problem(f"{where}: {step.reason}; the rest of the segment cannot be read "
                             "(recovery would cut the CommitLog here)")
            elif step.kind == "end":
                if step.later_data is not None:
                    self.problem(f"{where}: the log ends here (zero bytes, no blank record) but "
                                 f"{self.rel(step.later_data.path)} holds data")
            elif step.kind == "eof" and seg.size == self.segment_size and seg.size > 0:
                self.problem(f"{where}: segment ends without an end-of-segment blank record")

    def track_queue_offset(self, msg: StoredMessage, offset: int, where: str) -> None:
        if not gets_consume_queue_entry(msg.sys_flag):
            return  # prepared and rolled-back messages take no queue offset
        key = (msg.topic, msg.queue_id)
        prev = self.queue_tail.get(key)
        if prev is not None and msg.queue_offset != prev[0] + 1:
            self.problem(f"{where}: {msg.topic} queue {msg.queue_id}: queue offset {msg.queue_offset} does not "
                         f"follow {prev[0]} (record at offset {prev[1]}); expected {prev[0] + 1}")
        self.queue_tail[key] = (msg.queue_offset, offset)

    def resolve(self, offset: int) -> StoredMessage | str:
        """The record an entry points at, or why there is no usable one ("points at ...")."""
        if offset >= self.max_offset:
            return f"points at offset {offset}, past the end of the CommitLog ({self.max_offset})"
        seg = self.view.segment_of(offset)
        if seg is not None and seg.from_offset in self.unreachable:
            bad = self.unreachable[seg.from_offset]
            if offset - seg.from_offset > bad:
                return (f"points at offset {offset}, behind the undecodable data at {self.rel(seg.path)} "
                        f"position {bad}")
        found = self.view.record_at(offset, read_body=False)
        return f"points at offset {offset}: {found}" if isinstance(found, str) else found

    def check_reference(self, offset: int, where: str, resolved: StoredMessage | str) -> StoredMessage | None:
        """Report an unusable reference; returns the record when there is one to compare with."""
        if isinstance(resolved, str):
            self.problem(f"{where}: {resolved}")
            return None
        if offset in self.crc_failed:
            self.problem(f"{where}: points at the record at offset {offset}, whose body CRC fails")
        return resolved

    # ConsumeQueue -------------------------------------------------------------------------
    def check_consume_queues(self) -> None:
        queues = [(queue, numbered_files(queue.path)) for queue in self.store.consume_queues()]
        configured = self.config.get_mapped_file_size_consume_queue()
        all_files = [f for _, files in queues for f in files]
        found = size_on_disk(configured, [f.size for f in all_files], [f.number for f in all_files])
        if found is not None and found % CQ_STORE_UNIT_SIZE == 0:
            self.problem(
                f"{self.rel(self.config.consume_queue_dir())}: all {len(all_files)} files are {found} bytes, but "
                f"mappedFileSizeConsumeQueue is {configured}: the store was written with another size (pass its "
                f"broker.conf); checked as {found}-byte files"
            )
            file_size = found
        else:
            file_size = configured
        for done, (queue, files) in enumerate(queues, start=1):
            max_logical = self.check_queue(files, queue.topic, queue.queue_id, file_size)
            self.report_progress("consumequeue", f"{queue.topic}/{queue.queue_id}", done, len(queues))
            tail = self.queue_tail.pop((queue.topic, queue.queue_id), None)
            if tail is not None and tail[0] >= max_logical:
                self.not_dispatched(
                    f"{self.rel(queue.path)}: ends at queue offset {max_logical}, but the CommitLog holds the "
                    f"record with queue offset {tail[0]} at offset {tail[1]} (not dispatched)"
                )
        for (topic, queue_id), (queue_offset, offset) in sorted(self.queue_tail.items()):
            self.not_dispatched(
                f"{self.rel(self.config.consume_queue_dir() / topic / str(queue_id))}: no consume queue, but the "
                f"CommitLog holds records of {topic} queue {queue_id} up to queue offset {queue_offset} "
                f"(at offset {offset}) (not dispatched)"
            )

    def not_dispatched(self, text: str) -> None:
        if self.abnormal:
            self.report.notes.append(text + "; recovery will dispatch it")
        else:
            self.problem(text)

    def check_queue(self, files: list[NumberedFile], topic: str, queue_id: int, file_size: int) -> int:
        """Check one queue; returns its max logical offset (one past its last entry)."""
        # a queue directory may hold no file: a truncation deletes all of a queue's files
        for f, nxt in zip(files, [*files[1:], None] if files else [], strict=True):
            if f.size != file_size:
                self.problem(f"{self.rel(f.path)}: file is {f.size} bytes, expected {file_size} "
                             "(mappedFileSizeConsumeQueue)")
            if f.number % file_size:
                self.problem(f"{self.rel(f.path)}: name is not a multiple of the file size {file_size}")
            if nxt is not None and nxt.number != f.number + file_size:
                self.problem(f"{self.rel(f.path)} and {self.rel(nxt.path)} are not adjacent")
        ended_at: int | None = None
        hole_reported = False
        seen_real = False
        prev_offset = -1
        max_logical = files[0].number // CQ_STORE_UNIT_SIZE if files else 0
        cl_min = self.view.min_offset
        for f in files:
            path, number = f.path, f.number
            for pos, offset, size, tags in iter_consume_queue_entries(path):
                logical = (number + pos) // CQ_STORE_UNIT_SIZE
                where = f"{self.rel(path)} position {pos} (queue offset {logical})"
                if (offset, size, tags) == PRE_BLANK_ENTRY:
                    self.report.pre_blank_entries += 1
                    if seen_real or ended_at is not None:
                        self.problem(f"{where}: pre-blank filler entry after the start of the queue")
                    continue
                if _is_never_written(offset, size, tags):
                    if ended_at is None:
                        ended_at = logical
                    continue
                if ended_at is not None and not hole_reported:
                    hole_reported = True
                    self.problem(f"{where}: entry (offset {offset}, size {size}) after the end of the queue at "
                                 f"queue offset {ended_at}: the entries in between are missing")
                if offset < 0 or size <= 0:
                    self.problem(f"{where}: invalid entry: commitLogOffset {offset}, size {size}")
                    if ended_at is None:
                        ended_at = logical
                    continue
                seen_real = True
                self.report.consume_queue_entries += 1
                if offset <= prev_offset:
                    self.problem(f"{where}: commitLogOffset {offset} is not after the previous entry's "
                                 f"{prev_offset}")
                prev_offset = offset
                max_logical = logical + 1
                if offset < cl_min:
                    self.report.expired_references += 1
                    continue
                msg = self.check_reference(offset, where, self.resolve(offset))
                if msg is not None:
                    self.compare_entry(msg, topic, queue_id, logical, offset, size, tags, where)
        return max_logical

    def compare_entry(
        self, msg: StoredMessage, topic: str, queue_id: int, logical: int, offset: int, size: int, tags: int,
        where: str,
    ) -> None:
        found = []
        if msg.topic != topic:
            found.append(f"topic {msg.topic!r}, expected {topic!r}")
        if msg.queue_id != queue_id:
            found.append(f"queueId {msg.queue_id}, expected {queue_id}")
        if msg.queue_offset != logical:
            found.append(f"queueOffset {msg.queue_offset}, expected {logical}")
        if msg.total_size != size:
            found.append(f"size {msg.total_size}, the entry says {size}")
        expected_tags = _expected_tags_code(msg)
        if expected_tags is not None and tags > _EXT_ADDR_MAX and tags != expected_tags:
            found.append(f"tags {msg.tags!r} hash to {expected_tags}, the entry's tagsCode is {tags}")
        if found:
            self.problem(f"{where}: the record at offset {offset} has " + "; ".join(found))

    # IndexFile ----------------------------------------------------------------------------
    def check_index_files(self) -> None:
        directory = self.config.index_dir()
        if not directory.is_dir():
            return
        slots, index_num = self.config.max_hash_slot_num, self.config.max_index_num
        expected_size = index_file_size(slots, index_num)
        for name in sorted(os.listdir(directory)):
            if not name.isdigit() and (directory / name).is_file():
                self.report.notes.append(f"{self.rel(directory / name)}: not an index file name, skipped")
        files = self.store.index_files()
        sizes = {f.size for f in files}
        if len(files) > 1 and len(sizes) == 1 and expected_size not in sizes:
            self.problem(f"{self.rel(directory)}: all {len(files)} index files are {sizes.pop()} bytes, expected "
                         f"{expected_size} (maxHashSlotNum {slots}, maxIndexNum {index_num}): the store was written "
                         "with other index sizes (pass its broker.conf); entries not checked")
            return
        for done, f in enumerate(files, start=1):
            if f.size != expected_size:
                self.problem(f"{self.rel(f.path)}: file is {f.size} bytes, expected {expected_size} "
                             f"(maxHashSlotNum {slots}, maxIndexNum {index_num}); entries not checked")
            else:
                buf = map_read_only(f.path)
                if buf is not None:
                    try:
                        self.check_index_file(self.rel(f.path), buf, slots, index_num)
                    finally:
                        buf.close()
            self.report_progress("index", f.name, done, len(files))

    def check_index_file(self, name: str, buf: mmap.mmap, slots: int, index_num: int) -> None:
        header = read_index_header(buf)
        count = max(header.index_count, 1)
        if count > index_num:
            self.problem(f"{name}: header indexCount {count} exceeds maxIndexNum {index_num}")
            count = index_num
        cl_min = self.view.min_offset
        cached_phy = -1
        cached: StoredMessage | str | None = None
        key_hashes: frozenset[int] = frozenset()
        last_phy = None
        for n in range(1, count):
            key_hash, phy, time_diff, prev = read_index_entry(buf, slots, n)
            self.report.index_entries += 1
            where = f"{name} entry {n} (position {index_entry_pos(slots, n)})"
            if n == 1 and phy != header.begin_phy_offset:
                self.problem(f"{where}: phyOffset {phy}, the header's beginPhyOffset is {header.begin_phy_offset}")
            last_phy = phy
            if key_hash < 0:
                self.problem(f"{where}: negative keyHash {key_hash}")
            else:
                self.check_index_chain(buf, slots, count, n, key_hash % slots, prev, where)
            if time_diff < 0:
                self.problem(f"{where}: negative timeDiff {time_diff}")
            if phy < cl_min:
                self.report.expired_references += 1
                continue
            if cached_phy != phy or cached is None:  # a record's entries are consecutive: decode it once
                cached_phy, cached = phy, self.resolve(phy)
                if not isinstance(cached, str):
                    key_hashes = frozenset(index_key_hash(k) for k in _index_keys(cached))
            msg = self.check_reference(phy, where, cached)
            if msg is None:
                continue
            if key_hash not in key_hashes:
                listed = ", ".join(repr(k) for k in _index_keys(msg)) or "none"
                self.problem(f"{where}: keyHash {key_hash} matches none of the keys of the record at offset "
                             f"{phy} ({listed})")
        if last_phy is not None and last_phy != header.end_phy_offset:
            self.problem(f"{name}: header endPhyOffset {header.end_phy_offset}, the last entry's is {last_phy}")

    def check_index_chain(
        self, buf: mmap.mmap, slots: int, count: int, n: int, slot: int, prev: int, where: str
    ) -> None:
        if prev < 0 or prev >= n:
            self.problem(f"{where}: prevIndex {prev}, expected 0 or an older entry (below {n})")
        elif prev > 0:
            prev_hash = read_index_entry(buf, slots, prev)[0]
            if prev_hash < 0 or prev_hash % slots != slot:
                self.problem(f"{where}: prevIndex {prev} is an entry of another hash slot (keyHash {prev_hash})")
        head = read_index_slot(buf, slot)
        if head < n or head >= count:
            self.problem(f"{where}: hash slot {slot} (position {INDEX_HEADER_SIZE + 4 * slot}) holds {head}, "
                         f"expected the newest entry of the slot ({n} or later, below indexCount {count})")


def verify_store(config: StoreConfig, progress: Callable[[VerifyProgress], None] | None = None) -> VerifyReport:
    """Check a store directory end to end without changing it.

    * CommitLog: every record from the first segment on, with its CRC; a blank record moves to
      the next segment; zero bytes after the last record of the last written segment are the
      clean end. Anything else (bad CRC, undecodable bytes, wrong physicalOffset, missing or
      misnamed segments, wrong sizes, queue offsets that skip) is a problem.
    * ConsumeQueue: every entry (after any pre-blank filler) must point at a record of its topic
      and queue with that queue offset, that size and that tags hash; entries are contiguous,
      and every record that takes a queue offset has its entry.
    * IndexFile: every used entry (1 .. indexCount-1) must point at a record one of whose keys
      (topic#UNIQ_KEY, topic#each KEYS value) has the entry's hash; hash chains stay in their slot.

    Entries pointing below the CommitLog's min offset (records deleted by retention) are
    counted in ``expired_references``, not reported. Raises
    :class:`~rocketstore.store.store_view.NotAStoreError` for a missing or non-store directory.

    ``progress``, when given, is called after each CommitLog segment, consume queue and index
    file is checked: a store of many GiB takes minutes, and a caller can show it is moving.
    """
    return _Verifier(StoreView(config), progress).run()

