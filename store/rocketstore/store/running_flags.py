"""RunningFlags: why the store refuses writes (disk full, consume queue or index write errors).

Cleanup sets and clears ``disk_full`` as usage crosses diskSpaceWarningLevelRatio; puts are
refused with SERVICE_NOT_AVAILABLE while any write-blocking flag is set.
"""

from __future__ import annotations

import threading


class RunningFlags:
    """The store's health bits, with RocketMQ's get-and-set semantics for logging transitions."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.not_readable = False
        self.not_writeable = False
        self.logics_queue_error = False
        self.index_file_error = False
        self.disk_full = False

    @property
    def is_readable(self) -> bool:
        return not self.not_readable

    @property
    def is_writeable(self) -> bool:
        return not (self.not_writeable or self.logics_queue_error or self.index_file_error or self.disk_full)

    @property
    def is_cq_writeable(self) -> bool:
        """Consume queues keep being built while the disk is full, so consumers can drain it."""
        return not (self.not_writeable or self.logics_queue_error or self.index_file_error)

    def make_disk_full(self) -> bool:
        """Set the flag; True if it was clear (the transition worth logging)."""
        with self._lock:
            was_ok = not self.disk_full
            self.disk_full = True
            return was_ok

    def make_disk_ok(self) -> bool:
        """Clear the flag; True if it was already clear."""
        with self._lock:
            was_ok = not self.disk_full
            self.disk_full = False
            return was_ok

    def make_logics_queue_error(self) -> None:
        self.logics_queue_error = True

    def make_index_file_error(self) -> None:
        self.index_file_error = True
