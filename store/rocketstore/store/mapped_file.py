"""MappedFile: one fixed-size segment file, memory-mapped, named by its 20-digit start offset.

A segment keeps three positions: ``wrote`` (bytes appended), ``committed`` (equal to wrote:
we always write straight into the mapping, RocketMQ's transient-pool path is not used) and
``flushed`` (bytes known durable). Readers get copies of bytes, never views into the mapping,
so unmapping a segment can never invalidate data a reader already holds.

Deletion follows RocketMQ's reference counting (ReferenceResource): a reader ``hold()``s the
segment while it copies; ``destroy()`` first marks it unavailable and only unmaps and deletes
once the readers are gone, or forcibly after ``interval_forcibly`` ms, so a slow reader cannot
pin disk space for ever.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Sequence

OS_PAGE_SIZE = 4096

log = logging.getLogger(__name__)


def offset_to_file_name(offset: int) -> str:
    """RocketMQ's UtilAll.offset2FileName: the offset zero-padded to 20 digits."""
    return f"{offset:020d}"


class MappedFileError(Exception):
    """A segment file cannot be opened or has the wrong size."""


class MappedFile:
    """One segment: appends at ``wrote_position``, flushes by least pages, reference counted."""

    def __init__(self, path: str, file_size: int, *, create: bool = True) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_size = file_size
        try:
            self.file_from_offset = int(self.file_name)
        except ValueError as exc:
            raise MappedFileError(f"{path}: segment names must be a decimal start offset") from exc
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self._fd = os.open(path, flags, 0o644)
        try:
            actual = os.fstat(self._fd).st_size
            if actual == 0 and create:
                os.ftruncate(self._fd, file_size)  # sparse, like RandomAccessFile.setLength
            elif actual != file_size:
                raise MappedFileError(
                    f"{path} is {actual} bytes, the configured segment size is {file_size}: "
                    "the file is truncated or the store was written with another segment size"
                )
            self._mm = mmap.mmap(self._fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self._fd)
            raise
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        self.first_create_in_queue = False
        self._ref_lock = threading.Lock()
        self._ref_count = 1
        self._available = True
        self._cleanup_over = False
        self._first_shutdown_ms = 0

    # -- positions -------------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        """How far readers may read: everything written."""
        return self.wrote_position

    def set_positions(self, position: int) -> None:
        """Set wrote/committed/flushed together, as load and recovery do."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    @property
    def is_full(self) -> bool:
        return self.wrote_position == self.file_size

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping, for decoders that read in place (struct.unpack_from works on it)."""
        return self._mm

    def fileno(self) -> int:
        """The segment's file descriptor, for sends straight from the page cache (os.sendfile)."""
        return self._fd

    # -- writing ---------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> bool:
        """Append raw bytes at the write position; False if they do not fit."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.file_size:
            return False
        self._mm[pos:end] = data
        self.wrote_position = self.committed_position = end
        return True

    def append_through_file(self, chunks: Sequence[bytes | bytearray | memoryview]) -> bool:
        """Append ``chunks`` (in order) at the write position with positional writes on the file
        rather than copies into the mapping (RocketMQ's appendMessage(byte[]) writes through the
        FileChannel too); False if they do not fit.

        For large appends of bytes that were never in this segment (a slave appending replicated
        frames): one system call for many chunks, the kernel fills the page cache without a page
        fault per 4 KiB, and the interpreter lock is free during the copy. The mapping shares the
        page cache, so readers see the bytes.
        """
        start = self.wrote_position
        end = start + sum(len(chunk) for chunk in chunks)
        if end > self.file_size:
            return False
        pos = start
        written = os.pwritev(self._fd, chunks, pos)
        pos += written
        if pos < end:  # a short write (rare on a regular file): finish chunk by chunk
            offset = start
            for chunk in chunks:
                size = len(chunk)
                if offset + size > pos:
                    rest = memoryview(chunk)[pos - offset:]
                    while len(rest):
                        rest = rest[os.pwrite(self._fd, rest, pos):]
                        pos = offset + size - len(rest)
                offset += size
        self.wrote_position = self.committed_position = end
        return True

    def preallocate(self) -> None:
        """Reserve the whole segment's blocks on disk now (fallocate), leaving its bytes as they read.

        For a segment filled by :meth:`append_through_file` from start to end (a slave catching
        up): ext4 then finds each page's block already reserved instead of reserving it per page
        as the write reaches it (delayed allocation), about 0.05-0.1 ms of the writer's CPU per
        MiB less (32 KiB frames over loopback, 512 MiB, alternating runs). The segment is
        allocated in full at once, as RocketMQ's warmed segments are. Not done for a master's
        segments, which stay sparse until written. A file system that cannot do it (or is full)
        leaves the segment sparse, as before: the bytes written are the same either way.
        """
        try:
            os.posix_fallocate(self._fd, 0, self.file_size)
        except OSError as exc:
            log.warning("segment %s: cannot preallocate %d bytes, left sparse: %s", self.path, self.file_size, exc)

    def append_with(self, writer: Callable[[mmap.mmap, int, int], int]) -> int:
        """Let ``writer(mapping, position, room)`` write in place; it returns bytes written.

        This is the AppendMessageCallback seam: the CommitLog decides what fits (a record or
        the end-of-file blank) while the segment owns its positions.
        """
        pos = self.wrote_position
        written = writer(self._mm, pos, self.file_size - pos)
        self.wrote_position = self.committed_position = pos + written
        return written

    def advance(self, written: int) -> None:
        """Publish ``written`` bytes a writer has put at the write position through :attr:`buffer`."""
        self.wrote_position = self.committed_position = self.wrote_position + written

    def write_at(self, position: int, data: bytes) -> None:
        """Overwrite bytes already inside the written area (ConsumeQueue pre-blank fill)."""
        self._mm[position : position + len(data)] = data

    def wipe(self, start: int, end: int) -> None:
        """Zero bytes ``[start, end)`` and sync them: a truncation discarding records.

        From the end backwards, so that a kill part-way leaves whole records followed by zeros:
        recovery then reads a shorter log that ends in zeros. Zeroing forwards would leave zeros
        followed by old records, which recovery stops before but which an append that does not
        reach past them would make reachable again (an old record right after the new end).
        """
        chunk = 1 << 20
        zeros = bytes(min(chunk, max(end - start, 0)))
        stop = end
        while stop > start:
            begin = max(start, stop - chunk)
            self._mm[begin:stop] = zeros[: stop - begin]
            stop = begin
        os.fdatasync(self._fd)

    # -- flushing --------------------------------------------------------------------------
    def is_able_to_flush(self, least_pages: int) -> bool:
        """RocketMQ's rule: a full segment always; else enough whole new pages (or any byte)."""
        flushed, write = self.flushed_position, self.read_position
        if self.is_full:
            return flushed < write
        if least_pages > 0:
            return (write // OS_PAGE_SIZE) - (flushed // OS_PAGE_SIZE) >= least_pages
        return write > flushed

    def flush(self, least_pages: int) -> int:
        """msync the dirty range when allowed; returns the flushed position."""
        if self.is_able_to_flush(least_pages):
            if self.hold():
                try:
                    value = self.read_position
                    # fdatasync writes back the mapping's dirty pages on Linux (one page cache)
                    # and, unlike mmap.flush, releases the GIL, so writers keep going meanwhile.
                    os.fdatasync(self._fd)
                    self.flushed_position = value
                finally:
                    self.release()
            else:
                self.flushed_position = self.read_position
        return self.flushed_position

    # -- reading ---------------------------------------------------------------------------
    def read(self, position: int, size: int) -> bytes | None:
        """Copy ``size`` bytes at ``position`` if they are all written, else None."""
        if position < 0 or size < 0 or position + size > self.read_position:
            return None
        if not self.hold():
            return None
        try:
            return self._mm[position : position + size]
        finally:
            self.release()

    def read_from(self, position: int) -> bytes | None:
        """Copy everything written from ``position`` on."""
        return self.read(position, self.read_position - position)

    # -- reference counting and deletion ---------------------------------------------------
    def hold(self) -> bool:
        """Take a reference; False once the segment is being destroyed."""
        with self._ref_lock:
            if self._available and self._ref_count > 0:
                self._ref_count += 1
                return True
            return False

    def release(self) -> None:
        with self._ref_lock:
            self._ref_count -= 1
            if self._ref_count > 0 or self._cleanup_over:
                return
            self._cleanup_over = self._unmap()

    @property
    def ref_count(self) -> int:
        return self._ref_count

    @property
    def is_available(self) -> bool:
        return self._available

    @property
    def is_cleanup_over(self) -> bool:
        return self._ref_count <= 0 and self._cleanup_over

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Stop new readers; after ``interval_forcibly_ms`` drop the remaining references."""
        if self._available:
            self._available = False
            self._first_shutdown_ms = int(time.time() * 1000)
            self.release()
        elif self._ref_count > 0 and int(time.time() * 1000) - self._first_shutdown_ms >= interval_forcibly_ms:
            with self._ref_lock:
                self._ref_count = -1000 - self._ref_count
            self.release()

    def _unmap(self) -> bool:
        if self._available:
            return False
        try:
            self._mm.close()
        except BufferError:  # a view is still exported: try again at the next release
            return False
        return True

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Unmap, close and delete the file once no reader holds it; True when gone."""
        self.shutdown(interval_forcibly_ms)
        if not self.is_cleanup_over:
            log.warning("segment %s still referenced (%d), not deleted yet", self.path, self._ref_count)
            return False
        with contextlib.suppress(OSError):  # already closed by an earlier destroy
            os.close(self._fd)
        self._fd = -1
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            log.warning("segment %s was already removed", self.path)
        return True

    def close(self) -> None:
        """Unmap and close without deleting (store shutdown)."""
        if self._fd >= 0:
            self._available = False
            self._mm.close()
            os.close(self._fd)
            self._fd = -1
            self._cleanup_over = True

    @property
    def last_modified_ms(self) -> int:
        """The file's mtime in ms; time-based cleanup ages segments by it, as RocketMQ does."""
        return int(os.stat(self.path).st_mtime * 1000)

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"
