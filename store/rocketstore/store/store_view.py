"""A read-only view of a store directory: its files listed, mapped and decoded, nothing changed.

The engine (:class:`~rocketstore.store.message_store.DefaultMessageStore`) owns a store: it
takes the ``lock`` file, runs recovery, truncates and deletes files. The tools that only read
a store need none of that and must do none of it: ``rocketstore store verify|stats|dump``
(:mod:`rocketstore.store.offline`), the Spark source's executors and the pipeline's reindex.
They share this view instead of each listing segments and mapping files their own way.

Everything here opens files with ``open(path, 'rb')`` and maps them with ``mmap.ACCESS_READ``;
it never creates, truncates or renames a file, so it is safe beside a running broker. The
formats come from the engine's codecs: records from
:func:`rocketstore.common.message.decode_record`, ConsumeQueue entries from
:func:`rocketstore.store.consume_queue.unpack_entries`.

* :func:`commit_log_segments`: the CommitLog segments (name = base offset) of some directories.
* :class:`CommitLogView`: random access by physical offset (:meth:`CommitLogView.record_at`)
  and the recovery-order walk (:meth:`CommitLogView.walk`), a few segments mapped at a time.
* :func:`consume_queue_dirs`, :func:`numbered_files`, :func:`iter_consume_queue_entries`: the
  ConsumeQueue files of each topic and queue and their 20-byte entries.
* :class:`StoreView`: all of it for one :class:`~rocketstore.store.config.StoreConfig`, after
  checking the directory is a store at all; also lists the IndexFiles.
"""

from __future__ import annotations

import bisect
import mmap
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from rocketstore.common.message import BlankRecord, StoredMessage, decode_record
from rocketstore.store.config import MULTI_PATH_SPLITTER, StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, unpack_entries

__all__ = [
    "CommitLogView",
    "NotAStoreError",
    "NumberedFile",
    "QueueDir",
    "SegmentFile",
    "StoreView",
    "WalkStep",
    "commit_log_dirs",
    "commit_log_segments",
    "consume_queue_dirs",
    "iter_consume_queue_entries",
    "map_read_only",
    "numbered_files",
    "size_on_disk",
]

#: ConsumeQueue bytes read per call: entries are small, one read per entry would be a syscall each
_CQ_READ_CHUNK = CQ_STORE_UNIT_SIZE * 4096


class NotAStoreError(Exception):
    """The directory is missing or holds nothing a store writes."""


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A CommitLog segment as found on disk (picklable: Spark ships it to executors)."""

    path: str
    #: the file name: the physical offset of its first byte, 20 decimal digits
    name: str
    from_offset: int
    size: int
    #: the first 8 bytes are not all zero (a preallocated, never written segment has none)
    has_data: bool


@dataclass(frozen=True, slots=True)
class NumberedFile:
    """A file named by a number, as ConsumeQueue files (first byte offset) and IndexFiles (creation time) are."""

    path: str
    name: str
    number: int
    size: int


@dataclass(frozen=True, slots=True)
class QueueDir:
    """The directory ``consumequeue/{topic}/{queueId}`` of one consume queue."""

    topic: str
    queue_id: int
    path: Path


def commit_log_dirs(config: StoreConfig) -> list[Path]:
    """The CommitLog directories a store reads: storePathCommitLog's, then readOnlyCommitLogStorePaths."""
    dirs = list(config.commit_log_dirs())
    read_only = config.read_only_commit_log_store_paths
    if read_only:
        dirs += [Path(p) for p in read_only.strip().split(MULTI_PATH_SPLITTER) if p]
    return dirs


def commit_log_segments(directories: Iterable[str | os.PathLike[str]]) -> list[SegmentFile]:
    """Every segment (decimal file name) of the given CommitLog directories, by offset."""
    found: list[SegmentFile] = []
    for directory in directories:
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if not name.isdigit() or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                head = f.read(8)
            found.append(SegmentFile(path, name, int(name), size, head.count(0) != len(head)))
    found.sort(key=lambda s: (s.from_offset, s.path))
    return found


def numbered_files(directory: str | os.PathLike[str]) -> list[NumberedFile]:
    """The decimal-named files of a directory, by number; none when it does not exist."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.isdigit() and os.path.isfile(path):
            out.append(NumberedFile(path, name, int(name), os.path.getsize(path)))
    out.sort(key=lambda f: f.number)
    return out


def consume_queue_dirs(root: str | os.PathLike[str]) -> list[QueueDir]:
    """Every queue directory under a ``consumequeue`` root, by topic then queue id."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for topic in os.listdir(root):
        topic_dir = root / topic
        if not topic_dir.is_dir():
            continue
        for qid in os.listdir(topic_dir):
            if qid.lstrip("-").isdigit() and (topic_dir / qid).is_dir():
                out.append(QueueDir(topic, int(qid), topic_dir / qid))
    out.sort(key=lambda q: (q.topic, q.queue_id))
    return out


def iter_consume_queue_entries(
    path: str | os.PathLike[str], start: int = 0, count: int | None = None
) -> Iterator[tuple[int, int, int, int]]:
    """(position, commitLogOffset, size, tagsCode) of the whole entries of a ConsumeQueue file.

    From byte ``start`` (a multiple of 20), at most ``count`` entries; a file cut inside an
    entry ends before it. Raises FileNotFoundError when the file is not there (retention
    deletes them under a reader's feet).
    """
    with open(path, "rb") as f:
        f.seek(start)
        pos = start
        left = count
        while left is None or left > 0:
            want = _CQ_READ_CHUNK if left is None else min(_CQ_READ_CHUNK, left * CQ_STORE_UNIT_SIZE)
            chunk = f.read(want)
            usable = len(chunk) - len(chunk) % CQ_STORE_UNIT_SIZE
            for i, (offset, size, tags) in enumerate(unpack_entries(memoryview(chunk)[:usable])):
                yield pos + i * CQ_STORE_UNIT_SIZE, offset, size, tags
            pos += usable
            if left is not None:
                left -= usable // CQ_STORE_UNIT_SIZE
            if len(chunk) < want:
                return


def map_read_only(path: str) -> mmap.mmap | None:
    """A read-only mapping of the whole file; None for an empty file (which cannot be mapped)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def size_on_disk(configured: int, sizes: list[int], numbers: list[int]) -> int | None:
    """The file size every file shares when it differs from ``configured``, else None.

    A store inspected with the wrong config (say, without the broker.conf of a store written
    with small segments) has every file "wrong" by the same amount: that is one mistake of the
    caller, to be reported once, and the files can still be read with the size they have.
    """
    distinct = set(sizes)
    if len(distinct) != 1:
        return None
    size = distinct.pop()
    if size == configured or size <= 0 or any(n % size for n in numbers):
        return None
    return size


@dataclass(slots=True)
class WalkStep:
    """One stop of :meth:`CommitLogView.walk`.

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


class CommitLogView:
    """Random and sequential access to CommitLog segments, at most ``max_mapped`` mapped at once.

    Mapping only a couple of segments (least recently used is unmapped first) keeps inspecting
    a store of many GiB-sized segments small in memory. ``file_size`` is the segment size the
    store was written with; None takes each file's own size (a reader that never needs to know
    where a segment should end).
    """

    def __init__(self, segments: list[SegmentFile], file_size: int | None = None, max_mapped: int = 2) -> None:
        self.segments = segments
        self.file_size = file_size
        self._max_mapped = max_mapped
        self._mapped: OrderedDict[str, mmap.mmap] = OrderedDict()
        self._starts = [s.from_offset for s in segments]

    def __enter__(self) -> CommitLogView:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    @property
    def min_offset(self) -> int:
        """The first segment's offset (RocketMQ's getMinOffset of the CommitLog); -1 without segments."""
        return self.segments[0].from_offset if self.segments else -1

    def segment_index(self, offset: int) -> int:
        """Index of the segment whose name is the greatest not above ``offset`` (0 when none is)."""
        return max(bisect.bisect_right(self._starts, offset) - 1, 0)

    def segment_of(self, offset: int) -> SegmentFile | None:
        """The segment holding physical offset ``offset``, if any."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if offset < seg.from_offset + max(self.file_size or 0, seg.size) else None

    def mapping(self, segment: SegmentFile) -> mmap.mmap | None:
        """The segment's read-only mapping (None for an empty file); FileNotFoundError if it went away."""
        mm = self._mapped.get(segment.path)
        if mm is not None:
            self._mapped.move_to_end(segment.path)
            return mm
        mm = map_read_only(segment.path)
        if mm is None:
            return None
        self._mapped[segment.path] = mm
        while len(self._mapped) > self._max_mapped:
            _, oldest = self._mapped.popitem(last=False)
            oldest.close()
        return mm

    def record_at(self, offset: int, *, read_body: bool = True) -> StoredMessage | str:
        """The record starting at physical ``offset`` (no CRC check), or a sentence saying why there is none."""
        seg = self.segment_of(offset)
        if seg is None:
            return f"no CommitLog segment holds offset {offset}"
        buf = self.mapping(seg)
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

    def walk(self, start_index: int = 0, *, check_crc: bool, read_body: bool) -> Iterator[WalkStep]:
        """Follow the records from the start of segment ``start_index``, as recovery reads them.

        A blank record or an undecodable record moves on to the next segment; zero bytes end the
        log unless a later segment still holds data, in which case the walk goes on there.
        """
        segments = self.segments
        i = start_index
        while i < len(segments):
            seg = segments[i]
            buf = self.mapping(seg)
            limit = len(buf) if buf is not None else 0
            next_index = i + 1
            pos = 0
            while True:
                if buf is None or pos >= limit:
                    yield WalkStep("eof", seg, pos)
                    break
                header = buf[pos : pos + 8]
                if header.count(0) == len(header):
                    later = next((j for j in range(i + 1, len(segments)) if segments[j].has_data), None)
                    yield WalkStep("end", seg, pos, later_data=segments[later] if later is not None else None)
                    if later is None:
                        return
                    next_index = later
                    break
                result = decode_record(buf, pos, check_crc=check_crc, read_body=read_body)
                if isinstance(result, StoredMessage):
                    yield WalkStep("record", seg, pos, result)
                    pos += result.total_size
                    continue
                if isinstance(result, BlankRecord):
                    yield WalkStep("blank", seg, pos, size=result.size)
                    break
                if check_crc:
                    lenient = decode_record(buf, pos, check_crc=False, read_body=read_body)
                    if isinstance(lenient, StoredMessage):  # only the CRC failed: the walk can go on
                        yield WalkStep("crc", seg, pos, lenient, result.reason)
                        pos += lenient.total_size
                        continue
                yield WalkStep("corrupt", seg, pos, reason=result.reason)
                break
            i = next_index

    def close(self) -> None:
        while self._mapped:
            _, mm = self._mapped.popitem()
            mm.close()


class StoreView:
    """One store directory, read-only: its CommitLog, consume queues and index files.

    Raises :class:`NotAStoreError` when the directory is missing or holds nothing a store
    writes, so a typo in a path is not taken for an empty store.
    """

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.root = config.root_dir()
        if not self.root.exists():
            raise NotAStoreError(f"store directory {self.root} does not exist")
        if not self.root.is_dir():
            raise NotAStoreError(f"{self.root} is not a directory")
        self.commit_log_dirs = commit_log_dirs(config)
        markers = [*self.commit_log_dirs, config.consume_queue_dir(), config.index_dir()]
        if not any(p.is_dir() for p in markers) and not config.checkpoint_path().is_file():
            raise NotAStoreError(
                f"{self.root} is not a store directory: it has no commitlog/, consumequeue/, index/ or checkpoint"
            )

    def segments(self) -> list[SegmentFile]:
        """The CommitLog segments of every CommitLog directory, by offset."""
        return commit_log_segments(self.commit_log_dirs)

    def segment_size(self, segments: list[SegmentFile]) -> tuple[int, int | None]:
        """(segment size to read with, size found on disk when it differs from mappedFileSizeCommitLog)."""
        configured = self.config.mapped_file_size_commit_log
        found = size_on_disk(configured, [s.size for s in segments], [s.from_offset for s in segments])
        return (found if found is not None else configured), found

    def commit_log(self, segments: list[SegmentFile] | None = None) -> CommitLogView:
        """A view of the CommitLog (its segments listed now unless given), with the segment size on disk."""
        segments = self.segments() if segments is None else segments
        return CommitLogView(segments, self.segment_size(segments)[0])

    def consume_queues(self) -> list[QueueDir]:
        """Every consume queue directory, by topic then queue id."""
        return consume_queue_dirs(self.config.consume_queue_dir())

    def index_files(self) -> list[NumberedFile]:
        """The IndexFiles (named by creation time), oldest first."""
        return numbered_files(self.config.index_dir())
