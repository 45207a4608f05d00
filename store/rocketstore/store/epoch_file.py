"""EpochFileCache: which master epoch wrote which stretch of the CommitLog (controller mode).

Every election gives the group a new master epoch, and the new master records
``(epoch, startOffset)``: its CommitLog end when it took over. Entry ``i`` covers
``[start_i, start_{i+1})``; the last one runs to the log's end. A replica that rejoins after a
failover compares its entries with the master's (:func:`find_consistent_point`) and truncates
its log to the last offset both histories share; RocketMQ 5's AutoSwitchHAClient does the same.

On disk it is RocketMQ 5's ``<storePathRootDir>/epochFileCheckpoint``, a CheckpointFile of
UTF-8 text lines ending in ``\\n``::

    2             number of entries
    773307083     CRC32 of the entry lines (each with its "\\n"), masked to 31 bits; 0 = unchecked
    7-7000        <epoch>-<startOffset>, one line per entry, in epoch order
    8-8000

End offsets are not stored: they are derived from the next entry's start on load. Like
RocketMQ we keep the previous version as ``epochFileCheckpoint.bak`` and read it when the file
is missing, empty or fails its count or CRC. Unlike RocketMQ (which writes in place and never
syncs) each write goes to a temporary file, is fsynced, and renamed over the old one, and the
directory is fsynced: a crash leaves either version, never a torn file.

The decisions are pure functions over tuples of :class:`EpochEntry`; :class:`EpochFileCache`
adds a lock and the file.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from rocketstore.store.config_manager import fsync_dir, write_config_file

__all__ = [
    "EPOCH_FILE_NAME",
    "NO_END_OFFSET",
    "EpochEntry",
    "EpochFileCache",
    "appended",
    "decode_epoch_file",
    "encode_epoch_file",
    "find_consistent_point",
    "find_entry_by_offset",
    "linked",
    "truncate_prefix_by_offset",
    "truncate_suffix_by_epoch",
    "truncate_suffix_by_offset",
    "with_last_end_offset",
]

log = logging.getLogger(__name__)

EPOCH_FILE_NAME: Final = "epochFileCheckpoint"
"""MessageStoreConfig.getStorePathEpochFile()'s default name, in the store root."""

NO_END_OFFSET: Final = (1 << 63) - 1
"""The open end of the last entry (Java's Long.MAX_VALUE, EpochEntry's default endOffset)."""

_NOT_CHECKED_CRC: Final = 0
_LINE_END: Final = "\n"  # Java's System.lineSeparator() on the Linux brokers that write these files
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")  # where BufferedReader.readLine ends a line
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")  # what Integer.parseInt / Long.parseLong accept


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One master epoch and the CommitLog range it wrote: ``[start_offset, end_offset)``."""

    epoch: int
    start_offset: int
    end_offset: int = NO_END_OFFSET


# -- the file format -------------------------------------------------------------------------


def _crc(entry_lines: str) -> int:
    """UtilAll.crc32: CRC32 of the UTF-8 bytes, masked to a non-negative Java int."""
    return zlib.crc32(entry_lines.encode("utf-8")) & 0x7FFFFFFF


def encode_epoch_file(entries: Sequence[EpochEntry]) -> str:
    """The file's text for ``entries`` (end offsets are not written)."""
    lines = "".join(f"{e.epoch}-{e.start_offset}{_LINE_END}" for e in entries)
    return f"{len(entries)}{_LINE_END}{_crc(lines)}{_LINE_END}{lines}"


def _java_number(text: str, bits: int, what: str) -> int:
    if not _JAVA_INT.fullmatch(text):
        raise ValueError(f"{what} {text!r} is not a number")
    value = int(text)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"{what} {value} does not fit {bits} bits")
    return value


def _parse_entry(line: str) -> EpochEntry | None:
    """One ``<epoch>-<startOffset>`` line; None for a line CheckpointFile's reader skips (one
    that does not split into exactly two fields on ``-``, e.g. a blank line)."""
    parts = line.split("-")
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    if len(parts) != 2:
        return None
    return EpochEntry(_java_number(parts[0], 32, "epoch"), _java_number(parts[1], 64, "start offset"))


def decode_epoch_file(text: str) -> tuple[EpochEntry, ...]:
    """Entries in file order, their end offsets linked (see :func:`linked`).

    ValueError when the header is missing, the entry count or the CRC does not match, or a
    number does not parse: the cases in which RocketMQ falls back to the ``.bak`` file.
    """
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()  # the last line's terminator
    if len(lines) < 2:
        raise ValueError("no size and CRC header")
    expected_count = _java_number(lines[0], 32, "entry count")
    expected_crc = _java_number(lines[1], 32, "CRC")
    entries: list[EpochEntry] = []
    for line in lines[2:]:
        entry = _parse_entry(line)
        if entry is not None:
            entries.append(entry)
    if len(entries) != expected_count:
        raise ValueError(f"expected {expected_count} entries, found {len(entries)}")
    actual_crc = _crc("".join(line + _LINE_END for line in lines[2:]))
    if expected_crc != _NOT_CHECKED_CRC and actual_crc != expected_crc:
        raise ValueError(f"entries CRC {actual_crc} does not match the file's {expected_crc}")
    return linked(entries)


# -- decisions (pure) --------------------------------------------------------------------------


def linked(entries: Iterable[EpochEntry]) -> tuple[EpochEntry, ...]:
    """Entries in epoch order with each end offset set to the next entry's start and the last
    one open (EpochFileCache.initEntries)."""
    ordered = sorted(entries, key=lambda e: e.epoch)
    return tuple(
        replace(e, end_offset=ordered[i + 1].start_offset if i + 1 < len(ordered) else NO_END_OFFSET)
        for i, e in enumerate(ordered)
    )


def appended(entries: Sequence[EpochEntry], epoch: int, start_offset: int) -> tuple[EpochEntry, ...] | None:
    """``entries`` plus ``(epoch, start_offset)``, or None when it does not follow the last entry.

    The new epoch must be greater than the last one and must not start before it. RocketMQ's
    appendEntry also refuses an equal start offset; we accept it, so that a master elected
    before anything was written in the previous epoch still records its own epoch (the previous
    one then covers an empty range, which no lookup or comparison below is confused by).
    """
    if entries:
        last = entries[-1]
        if epoch <= last.epoch or start_offset < last.start_offset:
            return None
        return (*entries[:-1], replace(last, end_offset=start_offset), EpochEntry(epoch, start_offset))
    return (EpochEntry(epoch, start_offset),)


def with_last_end_offset(entries: Sequence[EpochEntry], end_offset: int) -> tuple[EpochEntry, ...]:
    """Close the last entry at ``end_offset`` (the log's end), unless that is before its start
    (setLastEpochEntryEndOffset)."""
    if not entries or entries[-1].start_offset > end_offset:
        return tuple(entries)
    return (*entries[:-1], replace(entries[-1], end_offset=end_offset))


def find_entry_by_offset(entries: Sequence[EpochEntry], offset: int) -> EpochEntry | None:
    """The entry whose range holds ``offset`` (findEpochEntryByOffset)."""
    for entry in entries:
        if entry.start_offset <= offset < entry.end_offset:
            return entry
    return None


def find_consistent_point(local: Sequence[EpochEntry], remote: Sequence[EpochEntry]) -> int:
    """The offset up to which two replicas' logs hold the same records, or -1 if none.

    Both sides' last entries must be closed at their log's end (:func:`with_last_end_offset`).
    Walking the local epochs from the newest, the first epoch the remote side has with the same
    start offset was written by the same master from the same point on both; the shorter of the
    two copies of it is what both share (EpochFileCache.findConsistentPoint). Every epoch after
    it differs, so the replica truncates to this offset before it follows the remote side.
    """
    remote_by_epoch = {e.epoch: e for e in remote}
    for entry in sorted(local, key=lambda e: e.epoch, reverse=True):
        other = remote_by_epoch.get(entry.epoch)
        if other is not None and other.start_offset == entry.start_offset:
            return min(entry.end_offset, other.end_offset)
    return -1


def _reopened(kept: Iterable[EpochEntry]) -> tuple[EpochEntry, ...]:
    kept = tuple(kept)
    if not kept:
        return ()
    return (*kept[:-1], replace(kept[-1], end_offset=NO_END_OFFSET))


def truncate_suffix_by_offset(entries: Sequence[EpochEntry], offset: int) -> tuple[EpochEntry, ...]:
    """Drop the entries starting at or after ``offset`` (the log was cut there); the last one
    left runs open again (truncateSuffixByOffset)."""
    return _reopened(e for e in entries if e.start_offset < offset)


def truncate_suffix_by_epoch(entries: Sequence[EpochEntry], epoch: int) -> tuple[EpochEntry, ...]:
    """Drop the entries of ``epoch`` and later (truncateSuffixByEpoch)."""
    return _reopened(e for e in entries if e.epoch < epoch)


def truncate_prefix_by_offset(entries: Sequence[EpochEntry], offset: int) -> tuple[EpochEntry, ...]:
    """Drop the entries that end at or before ``offset`` (the log's head was deleted up to it)."""
    return tuple(e for e in entries if e.end_offset > offset)


# -- the file ----------------------------------------------------------------------------------


def _backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def _read_entries(path: Path) -> tuple[EpochEntry, ...]:
    """CheckpointFile.read: the file, or its backup when the file is unusable or holds no entry.

    A missing file reads as no entries. ValueError when a backup was needed and is unusable too.
    """
    try:
        entries = decode_epoch_file(path.read_text("utf-8"))
        if entries:
            return entries
    except FileNotFoundError:
        pass
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("%s is unusable (%s); reading %s", path, exc, _backup_path(path).name)
    try:
        return decode_epoch_file(_backup_path(path).read_text("utf-8"))
    except FileNotFoundError:
        return ()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{_backup_path(path)}: {exc}") from exc


def _is_epoch_file(data: bytes) -> bool:
    try:
        decode_epoch_file(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


class EpochFileCache:
    """The epoch entries of one store, kept in memory and in ``epochFileCheckpoint``.

    Every change is written through before it is visible. Thread-safe.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] = ()

    def load(self) -> None:
        """Read the file (or its backup); a store without one has no entries."""
        entries = _read_entries(self.path)
        with self._lock:
            self._entries = entries

    def _store(self, entries: tuple[EpochEntry, ...]) -> None:
        """Make ``entries`` durable, then current. Called with the lock held.

        No entries left: both the file and its backup go (backup first, then the file, then the
        directory is synced), since RocketMQ reads an empty file as "use the backup" and would
        bring the old entries back. A crash in between leaves the old entries, never others.
        """
        if entries == self._entries:
            return
        if entries:
            write_config_file(self.path, encode_epoch_file(entries), _is_epoch_file)
        else:
            for path in (_backup_path(self.path), self.path):
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
            if self.path.parent.is_dir():
                fsync_dir(self.path.parent)
        self._entries = entries

    # -- reads ---------------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    def last_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 when there is none (lastEpoch)."""
        last = self.last_entry()
        return last.epoch if last is not None else -1

    def get_entry(self, epoch: int) -> EpochEntry | None:
        return next((e for e in self._entries if e.epoch == epoch), None)

    def find_epoch_entry_by_offset(self, offset: int) -> EpochEntry | None:
        return find_entry_by_offset(self._entries, offset)

    # -- changes -------------------------------------------------------------------------------
    def append_entry(self, epoch: int, start_offset: int) -> bool:
        """Record a new epoch starting at ``start_offset``; False (nothing written) when it does
        not follow the last entry (see :func:`appended`)."""
        with self._lock:
            entries = appended(self._entries, epoch, start_offset)
            if entries is None:
                log.error("epoch %d at %d does not follow %s; not appended", epoch, start_offset, self.last_entry())
                return False
            self._store(entries)
            return True

    def set_last_epoch_entry_end_offset(self, end_offset: int) -> None:
        """Close the last entry at the log's end, in memory only (as RocketMQ: ends are derived)."""
        with self._lock:
            self._entries = with_last_end_offset(self._entries, end_offset)

    def truncate_suffix_by_offset(self, offset: int) -> None:
        with self._lock:
            self._store(truncate_suffix_by_offset(self._entries, offset))

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        with self._lock:
            self._store(truncate_suffix_by_epoch(self._entries, epoch))

    def truncate_prefix_by_offset(self, offset: int) -> None:
        with self._lock:
            self._store(truncate_prefix_by_offset(self._entries, offset))
