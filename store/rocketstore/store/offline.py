"""Offline inspection of a store directory: verify, stats and dump, strictly read-only.

Meant for a store nothing runs on (a stopped broker, a copied directory, a crash site), and
harmless beside a running one: files are opened read-only (``open(path, 'rb')`` and
``mmap.ACCESS_READ``), nothing is created, truncated or renamed, the ``lock`` file is never
taken and no recovery runs. At most a couple of files are mapped at a time, so inspecting a
store of many GiB-sized segments keeps memory small.

The on-disk formats come from the engine's own modules (record decoder, ConsumeQueue entry
layout, IndexFile header and entry layout, checkpoint layout): there is one codec per format.

* :func:`verify_store` walks every CommitLog record with its CRC, every ConsumeQueue entry and
  every IndexFile entry and reports each inconsistency as a precise string.
* :func:`store_stats` summarises segments, offsets, queues, index files, disk usage and
  checkpoint times as a JSON-ready dict.
* :func:`dump_messages` yields the records (as :class:`~store.message.StoredMessage`) matching
  filters.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocketstore.common.message import (
    KEY_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    BlankRecord,
    StoredMessage,
    SysFlag,
    decode_record,
    tags_code,
    transaction_type,
)
from rocketstore.common.topic_validator import RMQ_SYS_SCHEDULE_TOPIC
from rocketstore.store.checkpoint import read_checkpoint
from rocketstore.store.config import MULTI_PATH_SPLITTER, StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, PRE_BLANK_ENTRY, unpack_entries
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

__all__ = [
    "MAX_REPORTED_PROBLEMS",
    "NotAStoreError",
    "SegmentFile",
    "VerifyReport",
    "commit_log_segments",
    "dump_messages",
    "store_stats",
    "verify_store",
]

#: verify stops listing problems after this many (a wrecked store would otherwise list millions)
MAX_REPORTED_PROBLEMS = 1000

_EXT_ADDR_MAX = -(2**31) - 1  # ConsumeQueueExt.MAX_ADDR: tagsCodes at or below are ext addresses
_CQ_READ_CHUNK = CQ_STORE_UNIT_SIZE * 4096


class NotAStoreError(Exception):
    """The directory is missing or holds nothing a store writes."""


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


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A CommitLog segment as found on disk."""

    path: str
    name: str
    from_offset: int
    size: int
    #: the first 8 bytes are not all zero (a preallocated, never written segment has none)
    has_data: bool


# -- locating things --------------------------------------------------------------------------
def _require_store(config: StoreConfig) -> Path:
    root = config.root_dir()
    if not root.exists():
        raise NotAStoreError(f"store directory {root} does not exist")
    if not root.is_dir():
        raise NotAStoreError(f"{root} is not a directory")
    markers = [*_commit_log_dirs(config), config.consume_queue_dir(), config.index_dir()]
    if not any(p.is_dir() for p in markers) and not config.checkpoint_path().is_file():
        raise NotAStoreError(
            f"{root} is not a store directory: it has no commitlog/, consumequeue/, index/ or checkpoint"
        )
    return root


def _commit_log_dirs(config: StoreConfig) -> list[Path]:
    dirs = list(config.commit_log_dirs())
    read_only = config.read_only_commit_log_store_paths
    if read_only:
        dirs += [Path(p) for p in read_only.strip().split(MULTI_PATH_SPLITTER) if p]
    return dirs


def commit_log_segments(config: StoreConfig) -> list[SegmentFile]:
    """Every CommitLog segment file (decimal names) of every CommitLog directory, by offset."""
    found: list[SegmentFile] = []
    for directory in _commit_log_dirs(config):
        if not directory.is_dir():
            continue
        for name in sorted(os.listdir(directory)):
            path = directory / name
            if not name.isdigit() or not path.is_file():
                continue
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
            found.append(SegmentFile(str(path), name, int(name), size, head.count(0) != len(head)))
    found.sort(key=lambda s: (s.from_offset, s.path))
    return found


def _numbered_files(directory: Path) -> list[tuple[str, str, int, int]]:
    """(name, path, number, size) of the decimal-named files of a directory, by number."""
    if not directory.is_dir():
        return []
    out = []
    for name in os.listdir(directory):
        path = directory / name
        if name.isdigit() and path.is_file():
            out.append((name, str(path), int(name), path.stat().st_size))
    out.sort(key=lambda t: t[2])
    return out


def _queue_dirs(config: StoreConfig) -> list[tuple[str, int, Path]]:
    """(topic, queueId, directory) of every consume queue, sorted."""
    root = config.consume_queue_dir()
    if not root.is_dir():
        return []
    out = []
    for topic in sorted(os.listdir(root)):
        topic_dir = root / topic
        if not topic_dir.is_dir():
            continue
        for qid in os.listdir(topic_dir):
            if qid.lstrip("-").isdigit() and (topic_dir / qid).is_dir():
                out.append((topic, int(qid), topic_dir / qid))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


class _Mappings:
    """Read-only mappings of files, at most ``capacity`` open at once (least recently used goes)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._open: OrderedDict[str, mmap.mmap] = OrderedDict()

    def get(self, path: str) -> mmap.mmap | None:
        """The file's mapping; None for an empty file (which cannot be mapped)."""
        mm = self._open.get(path)
        if mm is not None:
            self._open.move_to_end(path)
            return mm
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return None
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._open[path] = mm
        while len(self._open) > self._capacity:
            _, oldest = self._open.popitem(last=False)
            oldest.close()
        return mm

    def close(self) -> None:
        while self._open:
            _, mm = self._open.popitem()
            mm.close()


class _CommitLogView:
    """Random and sequential access to the segments of one store."""

    def __init__(self, segments: list[SegmentFile], file_size: int) -> None:
        self.segments = segments
        self.file_size = file_size
        self.mappings = _Mappings(2)
        self._starts = [s.from_offset for s in segments]

    @property
    def min_offset(self) -> int:
        return self.segments[0].from_offset if self.segments else -1

    def segment_of(self, offset: int) -> SegmentFile | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.from_offset + max(self.file_size, seg.size) else None

    def decode_at(self, offset: int, *, read_body: bool = False) -> StoredMessage | str:
        """The record starting at ``offset`` (no CRC check), or why there is none."""
        seg = self.segment_of(offset)
        if seg is None:
            return f"no CommitLog segment holds offset {offset}"
        buf = self.mappings.get(seg.path)
        if buf is None:
            return f"segment {seg.name} is empty"
        pos = offset - seg.from_offset
        result = decode_record(buf, pos, check_crc=False, read_body=read_body)
        if isinstance(result, StoredMessage):
            if result.physical_offset != offset:
                return (f"the bytes at {seg.name} position {pos} decode as a record storing physicalOffset "
                        f"{result.physical_offset}, so offset {offset} is not where a record starts")
            return result
        if isinstance(result, BlankRecord):
            return f"{seg.name} position {pos} holds an end-of-segment blank record, not a message"
        return f"no valid record at {seg.name} position {pos}: {result.reason}"

    def close(self) -> None:
        self.mappings.close()


@dataclass(slots=True)
class _Step:
    """One stop of a CommitLog walk.

    kind: ``record`` (valid), ``crc`` (well-formed but its body CRC fails; ``message`` holds it),
    ``corrupt`` (cannot be decoded: the rest of the segment is unreachable), ``blank``
    (end-of-segment filler), ``end`` (zero bytes: nothing more was written here), ``eof``
    (the file ended without a blank record).
    """

    kind: str
    segment: SegmentFile
    pos: int
    message: StoredMessage | None = None
    reason: str = ""
    size: int = 0
    later_data: SegmentFile | None = None  # for ``end``: a later segment that still holds data

    @property
    def offset(self) -> int:
        return self.segment.from_offset + self.pos


def _walk(view: _CommitLogView, start_index: int = 0, *, check_crc: bool, read_body: bool) -> Iterator[_Step]:
    """Follow the records from the start of segment ``start_index``, as recovery reads them.

    A blank record or an undecodable record moves on to the next segment; zero bytes end the
    log unless a later segment still holds data, in which case the walk goes on there.
    """
    segments = view.segments
    i = start_index
    while i < len(segments):
        seg = segments[i]
        buf = view.mappings.get(seg.path)
        limit = len(buf) if buf is not None else 0
        next_index = i + 1
        pos = 0
        while True:
            if buf is None or pos >= limit:
                yield _Step("eof", seg, pos)
                break
            header = buf[pos : pos + 8]
            if header.count(0) == len(header):
                later = next((j for j in range(i + 1, len(segments)) if segments[j].has_data), None)
                yield _Step("end", seg, pos, later_data=segments[later] if later is not None else None)
                if later is None:
                    return
                next_index = later
                break
            result = decode_record(buf, pos, check_crc=check_crc, read_body=read_body)
            if isinstance(result, StoredMessage):
                yield _Step("record", seg, pos, result)
                pos += result.total_size
                continue
            if isinstance(result, BlankRecord):
                yield _Step("blank", seg, pos, size=result.size)
                break
            if check_crc:
                lenient = decode_record(buf, pos, check_crc=False, read_body=read_body)
                if isinstance(lenient, StoredMessage):  # only the CRC failed: the walk can go on
                    yield _Step("crc", seg, pos, lenient, result.reason)
                    pos += lenient.total_size
                    continue
            yield _Step("corrupt", seg, pos, reason=result.reason)
            break
        i = next_index


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


def _iter_queue_file(path: str) -> Iterator[tuple[int, int, int, int]]:
    """(position, commitLogOffset, size, tagsCode) of each whole entry of a consume queue file."""
    with open(path, "rb") as f:
        pos = 0
        while True:
            chunk = f.read(_CQ_READ_CHUNK)
            usable = len(chunk) - len(chunk) % CQ_STORE_UNIT_SIZE
            for i, (offset, size, tags) in enumerate(unpack_entries(chunk[:usable])):
                yield pos + i * CQ_STORE_UNIT_SIZE, offset, size, tags
            pos += usable
            if len(chunk) < _CQ_READ_CHUNK:
                return


def _is_never_written(offset: int, size: int, tags: int) -> bool:
    return offset == 0 and size == 0 and tags == 0


def _size_on_disk(configured: int, sizes: list[int], numbers: list[int]) -> int | None:
    """The file size every file shares when it differs from ``configured``, else None.

    A store inspected with the wrong config (say, without the broker.conf of a store written
    with small segments) has every file "wrong" by the same amount: that is one mistake of the
    caller, to be reported once, and the files can still be checked with the size they have.
    """
    distinct = set(sizes)
    if len(distinct) != 1:
        return None
    size = distinct.pop()
    if size == configured or size <= 0 or any(n % size for n in numbers):
        return None
    return size


def _commit_log_file_size(config: StoreConfig, segments: list[SegmentFile]) -> tuple[int, int | None]:
    """(segment size to read with, size found on disk when it differs from the config)."""
    configured = config.mapped_file_size_commit_log
    found = _size_on_disk(configured, [s.size for s in segments], [s.from_offset for s in segments])
    return (found if found is not None else configured), found


# -- verify -----------------------------------------------------------------------------------
class _Verifier:
    def __init__(self, config: StoreConfig, root: Path) -> None:
        self.config = config
        self.root = root
        self.report = VerifyReport(ok=True, problems=[], records=0, consume_queue_entries=0, index_entries=0)
        self.problem_count = 0
        self.abnormal = config.abort_path().exists()
        segments = commit_log_segments(config)
        file_size, self.commit_log_size_found = _commit_log_file_size(config, segments)
        self.view = _CommitLogView(segments, file_size)
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
        size = self.view.file_size
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
        for step in _walk(self.view, check_crc=True, read_body=False):
            seg = step.segment
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
                self.max_offset = seg.from_offset + self.view.file_size
            elif step.kind == "corrupt":
                self.unreachable[seg.from_offset] = step.pos
                self.problem(f"{where}: {step.reason}; the rest of the segment cannot be read "
                             "(recovery would cut the CommitLog here)")
            elif step.kind == "end":
                if step.later_data is not None:
                    self.problem(f"{where}: the log ends here (zero bytes, no blank record) but "
                                 f"{self.rel(step.later_data.path)} holds data")
            elif step.kind == "eof" and seg.size == self.view.file_size and seg.size > 0:
                self.problem(f"{where}: segment ends without an end-of-segment blank record")

    def track_queue_offset(self, msg: StoredMessage, offset: int, where: str) -> None:
        if transaction_type(msg.sys_flag) not in (0, SysFlag.TRANSACTION_COMMIT):
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
        found = self.view.decode_at(offset)
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
        queues = [(topic, queue_id, directory, _numbered_files(directory))
                  for topic, queue_id, directory in _queue_dirs(self.config)]
        configured = self.config.get_mapped_file_size_consume_queue()
        all_files = [f for *_, files in queues for f in files]
        found = _size_on_disk(configured, [f[3] for f in all_files], [f[2] for f in all_files])
        if found is not None and found % CQ_STORE_UNIT_SIZE == 0:
            self.problem(
                f"{self.rel(self.config.consume_queue_dir())}: all {len(all_files)} files are {found} bytes, but "
                f"mappedFileSizeConsumeQueue is {configured}: the store was written with another size (pass its "
                f"broker.conf); checked as {found}-byte files"
            )
            file_size = found
        else:
            file_size = configured
        for topic, queue_id, directory, files in queues:
            max_logical = self.check_queue(files, topic, queue_id, file_size)
            tail = self.queue_tail.pop((topic, queue_id), None)
            if tail is not None and tail[0] >= max_logical:
                self.not_dispatched(
                    f"{self.rel(directory)}: ends at queue offset {max_logical}, but the CommitLog holds the "
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

    def check_queue(self, files: list[tuple[str, str, int, int]], topic: str, queue_id: int, file_size: int) -> int:
        """Check one queue; returns its max logical offset (one past its last entry)."""
        for (_name, path, number, size), nxt in zip(files, [*files[1:], None], strict=True):
            if size != file_size:
                self.problem(f"{self.rel(path)}: file is {size} bytes, expected {file_size} "
                             "(mappedFileSizeConsumeQueue)")
            if number % file_size:
                self.problem(f"{self.rel(path)}: name is not a multiple of the file size {file_size}")
            if nxt is not None and nxt[2] != number + file_size:
                self.problem(f"{self.rel(path)} and {self.rel(nxt[1])} are not adjacent")
        ended_at: int | None = None
        hole_reported = False
        seen_real = False
        prev_offset = -1
        max_logical = files[0][2] // CQ_STORE_UNIT_SIZE if files else 0
        cl_min = self.view.min_offset
        for _name, path, number, _size in files:
            for pos, offset, size, tags in _iter_queue_file(path):
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
        files = _numbered_files(directory)
        sizes = {f[3] for f in files}
        if len(files) > 1 and len(sizes) == 1 and expected_size not in sizes:
            self.problem(f"{self.rel(directory)}: all {len(files)} index files are {sizes.pop()} bytes, expected "
                         f"{expected_size} (maxHashSlotNum {slots}, maxIndexNum {index_num}): the store was written "
                         "with other index sizes (pass its broker.conf); entries not checked")
            return
        mappings = _Mappings(1)
        try:
            for _name, path_text, _number, size in files:
                path = Path(path_text)
                if size != expected_size:
                    self.problem(f"{self.rel(path)}: file is {size} bytes, expected {expected_size} "
                                 f"(maxHashSlotNum {slots}, maxIndexNum {index_num}); entries not checked")
                    continue
                buf = mappings.get(str(path))
                if buf is not None:
                    self.check_index_file(self.rel(path), buf, slots, index_num)
        finally:
            mappings.close()

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


def verify_store(config: StoreConfig) -> VerifyReport:
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
    counted in ``expired_references``, not reported. Raises :class:`NotAStoreError` for a missing
    or non-store directory.
    """
    root = _require_store(config)
    return _Verifier(config, root).run()


# -- stats ------------------------------------------------------------------------------------
def _last_valid_end(view: _CommitLogView) -> int:
    """End of the last valid record (or blank record) of the last segment holding data."""
    segments = view.segments
    if not segments:
        return 0
    last = max((i for i, s in enumerate(segments) if s.has_data), default=None)
    if last is None:
        return segments[0].from_offset
    seg = segments[last]
    end = seg.from_offset
    for step in _walk(view, last, check_crc=True, read_body=False):
        if step.segment is not seg or step.kind not in ("record", "blank"):
            break
        if step.kind == "blank":
            end = seg.from_offset + view.file_size
            break
        assert step.message is not None
        end = step.offset + step.message.total_size
    return end


def _scan_queue_stats(files: list[tuple[str, str, int, int]], cl_min: int) -> dict[str, Any]:
    min_logical: int | None = None
    max_logical = files[0][2] // CQ_STORE_UNIT_SIZE if files else 0
    first_phy = last_phy = -1
    entries = 0
    for _name, path, number, _size in files:
        for pos, offset, size, tags in _iter_queue_file(path):
            if (offset, size, tags) == PRE_BLANK_ENTRY or offset < 0 or size <= 0:
                continue
            logical = (number + pos) // CQ_STORE_UNIT_SIZE
            entries += 1
            max_logical = logical + 1
            last_phy = offset
            if min_logical is None and offset >= cl_min:
                min_logical = logical
                first_phy = offset
    min_offset = max_logical if min_logical is None else min_logical
    return {
        "min_offset": min_offset,
        "max_offset": max_logical,
        "message_count": max_logical - min_offset,
        "entries_on_disk": entries,
        "min_commit_log_offset": first_phy,
        "max_commit_log_offset": last_phy,
        "files": len(files),
    }


def _disk_usage(path: Path) -> dict[str, int]:
    apparent = allocated = files = 0
    if path.is_file():
        st = path.stat()
        return {"apparent_bytes": st.st_size, "allocated_bytes": st.st_blocks * 512, "files": 1}
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return {"apparent_bytes": apparent, "allocated_bytes": allocated, "files": files}


def store_stats(config: StoreConfig) -> dict[str, Any]:
    """A JSON-ready summary of a store directory, read without changing anything.

    Keys: ``store_dir``; ``commit_log`` (segment size, ``segments`` with name/path/size/from
    offset, ``min_offset`` = first segment's offset or -1, ``max_offset`` = end of the last
    valid record); ``topics`` (per topic: queues and messages); ``queues`` (per topic/queue:
    min/max logical offsets, message count); ``index_files`` (entries, time and offset ranges);
    ``disk_usage`` (bytes per directory); ``checkpoint`` (the three timestamps, ms);
    ``abort_present`` / ``last_shutdown_abnormal``.
    """
    root = _require_store(config)
    segments = commit_log_segments(config)
    file_size, size_found = _commit_log_file_size(config, segments)
    view = _CommitLogView(segments, file_size)
    try:
        max_offset = _last_valid_end(view)
    finally:
        view.close()
    cl_min = view.min_offset

    queues = []
    topics: dict[str, dict[str, int]] = {}
    for topic, queue_id, directory in _queue_dirs(config):
        q = {"topic": topic, "queue_id": queue_id, **_scan_queue_stats(_numbered_files(directory), cl_min)}
        queues.append(q)
        summary = topics.setdefault(topic, {"queues": 0, "message_count": 0})
        summary["queues"] += 1
        summary["message_count"] += q["message_count"]

    index_files = []
    for name, path, _number, size in _numbered_files(config.index_dir()):
        with open(path, "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
        item: dict[str, Any] = {"name": name, "path": path, "size": size}
        if len(head) == INDEX_HEADER_SIZE:
            header = read_index_header(head)
            item.update({
                "entries": max(header.index_count - 1, 0),
                "begin_timestamp": header.begin_timestamp,
                "end_timestamp": header.end_timestamp,
                "begin_phy_offset": header.begin_phy_offset,
                "end_phy_offset": header.end_phy_offset,
                "hash_slot_count": header.hash_slot_count,
            })
        else:
            item["error"] = f"only {len(head)} bytes, the header needs {INDEX_HEADER_SIZE}"
        index_files.append(item)

    checkpoint: dict[str, Any] | None = None
    if config.checkpoint_path().is_file():
        try:
            physic, logics, index = read_checkpoint(str(config.checkpoint_path()))
            checkpoint = {"physic_msg_timestamp": physic, "logics_msg_timestamp": logics,
                          "index_msg_timestamp": index}
        except ValueError as exc:
            checkpoint = {"error": str(exc)}

    disk: dict[str, dict[str, int]] = {}
    cl_dirs = _commit_log_dirs(config)
    commit_log_usage = {"apparent_bytes": 0, "allocated_bytes": 0, "files": 0}
    for d in cl_dirs:
        if d.is_dir():
            for k, v in _disk_usage(d).items():
                commit_log_usage[k] += v
    disk["commitlog"] = commit_log_usage
    for label, directory in (("consumequeue", config.consume_queue_dir()), ("index", config.index_dir()),
                             ("config", config.config_dir())):
        disk[label] = _disk_usage(directory) if directory.exists() else {
            "apparent_bytes": 0, "allocated_bytes": 0, "files": 0}
    total = _disk_usage(root)
    for d in cl_dirs:  # commit log directories configured outside the root
        if d.is_dir() and not d.resolve().is_relative_to(root.resolve()):
            for k, v in _disk_usage(d).items():
                total[k] += v
    disk["total"] = total

    abort = config.abort_path().exists()
    return {
        "store_dir": str(root),
        "commit_log": {
            "dirs": [str(d) for d in cl_dirs],
            "segment_size": config.mapped_file_size_commit_log,
            "segment_size_on_disk": size_found if size_found is not None else file_size,
            "segments": [
                {"name": s.name, "path": s.path, "size": s.size, "from_offset": s.from_offset, "has_data": s.has_data}
                for s in view.segments
            ],
            "min_offset": cl_min,
            "max_offset": max_offset,
        },
        "topics": topics,
        "queues": queues,
        "index_files": index_files,
        "disk_usage": disk,
        "checkpoint": checkpoint,
        "abort_present": abort,
        "last_shutdown_abnormal": abort,
    }


# -- dump -------------------------------------------------------------------------------------
def dump_messages(
    config: StoreConfig,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    key: str | None = None,
) -> Iterator[StoredMessage]:
    """The records of the CommitLog in physical order, with their bodies, filtered.

    ``start_offset`` / ``end_offset`` bound the physical offset (start inclusive, end
    exclusive); ``key`` matches one of the KEYS values or the UNIQ_KEY. Records are decoded
    without the CRC check (``verify_store`` is for that) so a damaged store can still be read;
    undecodable bytes skip to the next segment. Raises :class:`NotAStoreError` at once.
    """
    _require_store(config)
    segments = commit_log_segments(config)

    def generate() -> Iterator[StoredMessage]:
        view = _CommitLogView(segments, _commit_log_file_size(config, segments)[0])
        try:
            start_index = 0
            if start_offset is not None:
                start_index = max(bisect.bisect_right([s.from_offset for s in segments], start_offset) - 1, 0)
            for step in _walk(view, start_index, check_crc=False, read_body=False):
                msg = step.message
                if step.kind != "record" or msg is None:
                    continue
                at = step.offset
                if start_offset is not None and at < start_offset:
                    continue
                if end_offset is not None and at >= end_offset:
                    return
                if topic is not None and msg.topic != topic:
                    continue
                if queue_id is not None and msg.queue_id != queue_id:
                    continue
                if key is not None and key != msg.uniq_key and key not in (msg.keys or "").split(KEY_SEPARATOR):
                    continue
                full = decode_record(view.mappings.get(step.segment.path) or b"", step.pos, check_crc=False)
                if isinstance(full, StoredMessage):
                    yield full
        finally:
            view.close()

    return generate()
