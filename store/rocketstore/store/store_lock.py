"""The store's ``lock`` file: one running store per directory, ours or Apache RocketMQ's.

RocketMQ takes ``FileChannel.tryLock(0, 1, false)`` on the file, which on Linux is a POSIX
record lock on byte 0. We take an open-file-description lock on the same byte: it conflicts
with RocketMQ's lock across processes and, unlike a plain POSIX lock, also with a second
store opened in the same process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct


class StoreLockedError(RuntimeError):
    """Another store (this project's or RocketMQ's) already runs on the directory."""


_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux x86-64/arm64: type, whence, start, len, pid


class StoreLock:
    """Holds the exclusive lock until :meth:`release`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def acquire(self) -> None:
        """Take the lock; a no-op when this object already holds it (load, then start)."""
        if self._fd >= 0:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise StoreLockedError(
                    f"{self.path} is locked: another store is already running on "
                    f"{os.path.dirname(self.path)}; stop it first or use another storePathRootDir"
                ) from exc
            raise
        os.pwrite(fd, b"lock", 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the last descriptor drops an OFD lock
            self._fd = -1
