"""MappedFileQueue: the ordered segments of one log (CommitLog or one ConsumeQueue).

Global offsets map to a segment by ``(offset - first.from) // size``. A new segment is created
only when the last one is full; for the CommitLog an :class:`AllocateMappedFileService`
creates the next segment (and the one after it) in a background thread, so a roll is a
hand-over rather than a file creation on the writer's path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator

from rocketstore.store.mapped_file import MappedFile, MappedFileError, offset_to_file_name

log = logging.getLogger(__name__)

DELETE_FILES_BATCH_MAX = 10


class AllocateMappedFileService:
    """Creates segments ahead of the writer, like RocketMQ's AllocateMappedFileService.

    ``take(path, next_path)`` returns the segment at ``path`` (already made if it was asked
    for before) and queues ``next_path`` so it is ready by the next roll.
    """

    def __init__(self, file_size: int) -> None:
        self._file_size = file_size
        self._lock = threading.Condition()
        self._ready: dict[str, MappedFile | BaseException] = {}
        self._wanted: list[str] = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="AllocateMappedFileService", daemon=True)
        self._thread.start()

    def take(self, path: str, next_path: str | None) -> MappedFile:
        with self._lock:
            if path not in self._ready and path not in self._wanted:
                self._wanted.append(path)
            if next_path is not None and next_path not in self._ready and next_path not in self._wanted:
                self._wanted.append(next_path)
            self._lock.notify_all()
            while path not in self._ready:
                if self._stopped:
                    raise MappedFileError("allocation service is shut down")
                self._lock.wait()
            made = self._ready.pop(path)
        if isinstance(made, BaseException):
            raise MappedFileError(f"could not create segment {path}: {made}") from made
        return made

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no segment is being created ahead; False on timeout. For whoever lists the
        segment files and must not race a creation (e.g. checking a refused put created none)."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._wanted or self._stopped, timeout_s)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._wanted and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                path = self._wanted[0]
            made: MappedFile | BaseException
            try:
                made = MappedFile(path, self._file_size)
            except (OSError, MappedFileError) as exc:
                made = exc
            with self._lock:
                self._wanted.remove(path)
                self._ready[path] = made
                self._lock.notify_all()

    def discard_ahead(self) -> None:
        """Delete the segments created ahead and not taken yet (the log was cut back: they lie
        past its new end, and would otherwise sit on disk until the log reaches them)."""
        with self._lock:  # a late take() must not get a segment being deleted
            leftovers = list(self._ready.values())
            self._ready.clear()
        for made in leftovers:
            if isinstance(made, MappedFile):
                made.destroy(0)

    def shutdown(self) -> None:
        """Stop; segments created ahead but never taken are deleted, as RocketMQ's shutdown does."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
        self._thread.join(timeout=5)
        self.discard_ahead()


class MappedFileQueue:
    """Segments of one directory, oldest first."""

    def __init__(self, store_path: str, file_size: int, allocator: AllocateMappedFileService | None = None) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self.allocator = allocator
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        self._lock = threading.RLock()

    # -- load ------------------------------------------------------------------------------
    def load(self) -> None:
        """Open every segment in the directory; a file of the wrong size stops the load.

        RocketMQ refuses to start on a wrong-sized segment (loading it would mis-map every
        later offset); we do the same, with the file and both sizes in the error.
        """
        if not os.path.isdir(self.store_path):
            return
        names = sorted(n for n in os.listdir(self.store_path) if not n.startswith("."))
        # A kill -9 between creating a segment and sizing it leaves an empty file at the end;
        # nothing was ever written to it (writes need the full-size mapping): drop it.
        while names and os.path.isfile(tail := os.path.join(self.store_path, names[-1])) \
                and os.path.getsize(tail) == 0:
            log.warning("removing %s: an empty segment whose creation was interrupted", tail)
            os.unlink(tail)
            names.pop()
        for name in names:
            path = os.path.join(self.store_path, name)
            if not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if size != self.file_size:
                raise MappedFileError(
                    f"{path} is {size} bytes, expected {self.file_size}: fix or move the file, "
                    "or set the segment size the store was written with"
                )
            mapped = MappedFile(path, self.file_size, create=False)
            mapped.set_positions(self.file_size)
            self.mapped_files.append(mapped)

    def check_self(self) -> list[str]:
        """Gaps between adjacent segments (each one a damaged store); empty when sound."""
        problems = []
        for prev, cur in zip(self.mapped_files, self.mapped_files[1:], strict=False):
            if cur.file_from_offset - prev.file_from_offset != self.file_size:
                problems.append(f"segments {prev.file_name} and {cur.file_name} are not adjacent")
        return problems

    # -- segments --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[MappedFile]:
        return iter(list(self.mapped_files))

    def __len__(self) -> int:
        return len(self.mapped_files)

    @property
    def first(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    @property
    def last(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The segment to write to, creating it when there is none or the last one is full."""
        last = self.last
        create_offset = -1
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        elif last.is_full:
            create_offset = last.file_from_offset + self.file_size
        if create_offset < 0 or not need_create:
            return last
        path = os.path.join(self.store_path, offset_to_file_name(create_offset))
        os.makedirs(self.store_path, exist_ok=True)
        if self.allocator is not None:
            next_path = os.path.join(self.store_path, offset_to_file_name(create_offset + self.file_size))
            mapped = self.allocator.take(path, next_path)
        else:
            mapped = MappedFile(path, self.file_size)
        with self._lock:
            if not self.mapped_files:
                mapped.first_create_in_queue = True
            self.mapped_files.append(mapped)
        return mapped

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first, last = files[0], files[-1]
        if first.file_from_offset <= offset < last.file_from_offset + self.file_size:
            index = offset // self.file_size - first.file_from_offset // self.file_size
            if 0 <= index < len(files) and files[index].file_from_offset <= offset < (
                files[index].file_from_offset + self.file_size
            ):
                return files[index]
            for mapped in files:
                if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                    return mapped
        return first if return_first_on_not_found else None

    def get_mapped_file_by_time(self, timestamp_ms: int) -> MappedFile | None:
        files = list(self.mapped_files)
        for mapped in files:
            if mapped.last_modified_ms >= timestamp_ms:
                return mapped
        return files[-1] if files else None

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        first = self.first
        return first.file_from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        last = self.last
        return last.file_from_offset + last.read_position if last is not None else 0

    def remain_to_flush(self) -> int:
        return self.max_offset - self.flushed_where

    def how_much_fall_behind(self) -> int:
        """Unflushed bytes, as RocketMQ's howMuchFallBehind reports them."""
        if not self.mapped_files or self.flushed_where == 0:
            return 0
        return self.max_offset - self.flushed_where

    def set_flushed_where(self, offset: int) -> None:
        self.flushed_where = self.committed_where = offset

    # -- flush -----------------------------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush the segment holding ``flushed_where``; True when nothing new was flushed."""
        mapped = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mapped is None:
            return True
        timestamp = mapped.store_timestamp
        where = mapped.file_from_offset + mapped.flush(least_pages)
        result = where == self.flushed_where
        self.flushed_where = self.committed_where = where
        if least_pages == 0:
            self.store_timestamp = timestamp
        return result

    # -- truncation and deletion -------------------------------------------------------------
    def truncate_dirty_files(self, offset: int, *, wipe: bool = False) -> None:
        """Cut the log back to ``offset``: later segments are deleted, the one holding it trimmed.

        Recovery trims a log whose bytes past ``offset`` are already zeros or a torn record. A
        truncation of valid records (``wipe``) also zeroes and syncs the trimmed segment's bytes
        from ``offset`` to its written end, before anything is deleted: recovery reads a segment
        up to its first invalid record, so records merely left behind the write position would
        come back after a restart, and once that segment is cut a restart cannot read past it
        into the later segments either. Those go newest first, each one gone from disk before
        the next (a reader holding one delays it by at most a second), so an interrupted cut
        leaves contiguous segments.
        """
        holding = self.find_mapped_file_by_offset(offset)
        if holding is not None and offset - holding.file_from_offset < holding.wrote_position:
            if wipe:
                holding.wipe(offset - holding.file_from_offset, holding.wrote_position)
            holding.set_positions(offset - holding.file_from_offset)
        for mapped in reversed(list(self.mapped_files)):
            if mapped.file_from_offset <= offset:
                break
            self._destroy(mapped)

    def _destroy(self, mapped: MappedFile) -> None:
        """Delete ``mapped``'s file and forget it. Readers get a second (destroy forces after it);
        a mapping still exported after that is left to its holder, but the file is unlinked all
        the same: a later segment of that name must start empty, not on top of old records."""
        deadline = time.monotonic() + 2.0
        while not mapped.destroy(1000):
            if time.monotonic() >= deadline:
                log.warning("segment %s still mapped; unlinking it anyway", mapped.path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(mapped.path)
                break
            time.sleep(0.01)
        self._remove([mapped])

    def delete_last_mapped_file(self) -> None:
        last = self.last
        if last is not None:
            self._destroy(last)

    def reset_offset(self, offset: int) -> bool:
        """Drop segments past ``offset`` (refused when that would discard over two segments)."""
        last = self.last
        if last is not None and last.file_from_offset + last.wrote_position - offset > self.file_size * 2:
            return False
        with self._lock:
            while self.mapped_files:
                last = self.mapped_files[-1]
                if offset >= last.file_from_offset:
                    last.set_positions(offset % last.file_size)
                    break
                self.mapped_files.pop()
        return True

    def delete_expired_file_by_time(
        self, expired_ms: int, delete_files_interval_ms: int, interval_forcibly_ms: int, clean_immediately: bool
    ) -> int:
        """Delete segments older than ``expired_ms`` from the oldest on, never the active one.

        Stops at the first segment that is young enough (no holes in the middle) and after
        ``DELETE_FILES_BATCH_MAX`` deletions, sleeping ``delete_files_interval_ms`` between
        them so a burst of unlinks does not stall the disk for writers.
        """
        files = list(self.mapped_files)[:-1]
        deleted: list[MappedFile] = []
        now = int(time.time() * 1000)
        for i, mapped in enumerate(files):
            if not (clean_immediately or now >= mapped.last_modified_ms + expired_ms):
                break
            if not mapped.destroy(interval_forcibly_ms):
                break
            deleted.append(mapped)
            if len(deleted) >= DELETE_FILES_BATCH_MAX:
                break
            if delete_files_interval_ms > 0 and i + 1 < len(files):
                time.sleep(delete_files_interval_ms / 1000)
        self._remove(deleted)
        return len(deleted)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """Delete leading ConsumeQueue segments whose last entry points below ``offset``."""
        files = list(self.mapped_files)[:-1]
        deleted: list[MappedFile] = []
        for mapped in files:
            last_entry = mapped.read(self.file_size - unit_size, 8)
            if last_entry is not None:
                destroy = int.from_bytes(last_entry, "big", signed=True) < offset
            elif not mapped.is_available:
                destroy = True  # a segment whose earlier destroy did not finish
            else:
                break
            if destroy and mapped.destroy(60_000):
                deleted.append(mapped)
            else:
                break
        self._remove(deleted)
        return len(deleted)

    def retry_delete_first_file(self, interval_forcibly_ms: int) -> bool:
        """Finish deleting a first segment that an earlier pass could not destroy."""
        first = self.first
        if first is not None and not first.is_available and first.destroy(interval_forcibly_ms):
            self._remove([first])
            return True
        return False

    def _remove(self, files: list[MappedFile]) -> None:
        if files:
            with self._lock:
                gone = {id(f) for f in files}
                self.mapped_files = [m for m in self.mapped_files if id(m) not in gone]

    def shutdown(self) -> None:
        for mapped in self.mapped_files:
            mapped.close()

    def destroy(self) -> None:
        """Delete every segment and the directory (the store's destroy, used by tests and reset)."""
        for mapped in self.mapped_files:
            mapped.destroy(1000)
        self.mapped_files = []
        self.flushed_where = self.committed_where = 0
        with contextlib.suppress(OSError):  # not empty or already gone: leave it
            os.rmdir(self.store_path)
