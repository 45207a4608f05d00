"""Crash-safe truncation of a store back to a CommitLog offset (RocketMQ's truncateFiles).

A former master that rejoins as a slave cuts its log back to the last offset it shares with the
new master (see :mod:`rocketstore.store.epoch_file`). The cut touches, in RocketMQ's order: the
ConsumeQueues (entries pointing at or past the offset), the CommitLog (records from the offset
on), then the epoch file (entries starting at or after the offset). We also lower the
``checkpoint`` timestamps, so that it never vouches for the discarded records. The IndexFiles
keep their entries, as in RocketMQ: a lookup by key reads the record each hit points at and
confirms its topic and key, so a hit on a discarded record finds nothing (or, once new records
fill the offset, a record with another key, which is dropped). Only their headers' CommitLog
offsets are lowered to the cut, so that the records written there again get indexed (see
:meth:`IndexService.truncate`; RocketMQ skips them).

No order of these steps is safe on its own against a kill -9 between them: with the queues cut
and the CommitLog not, crash recovery dispatches the discarded records again; with the log cut
and the epoch file not, the store claims an epoch it no longer holds. So the cut is a redo
record: before the first change the offset is written, fsynced, to ``truncateIntent`` in the
store root, and the file is removed only after the last. :meth:`DefaultMessageStore.load`
finds it after a crash and repeats the whole cut to that offset once recovery has put the files
in order, before any dispatch or append. Every step is idempotent, so repeating a step that had
completed, or one that had half completed, is harmless; and each step leaves files recovery
reads correctly wherever it stops (records are zeroed from the end backwards, files deleted
newest first: see :meth:`MappedFile.wipe` and :meth:`MappedFileQueue.truncate_dirty_files`).

RocketMQ itself writes nothing of the kind and relies on the slave redoing the comparison with
its master after a restart. A RocketMQ broker opening a store with a pending ``truncateIntent``
ignores it, as it would an interrupted truncation of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Final

from rocketstore.store.config_manager import fsync_dir, write_synced

log = logging.getLogger(__name__)

TRUNCATE_INTENT_FILE: Final = "truncateIntent"

CRASH_POINT_ENV: Final = "ROCKETSTORE_TEST_TRUNCATE_CRASH_POINT"
"""Tests only: the name of a :func:`crash_point` at which the process kills itself with SIGKILL.
A kill -9 at an exact instant inside a truncation cannot be scheduled from outside."""


def crash_point(name: str) -> None:
    """SIGKILL this process here if the crash-test variable names this point; else nothing."""
    if os.environ.get(CRASH_POINT_ENV) == name:
        log.warning("test crash point %s: killing the process", name)
        os.kill(os.getpid(), signal.SIGKILL)


class TruncateIntent:
    """The redo record of a truncation in progress: one decimal offset and a newline."""

    def __init__(self, root_dir: str | os.PathLike[str]) -> None:
        self.path = Path(root_dir) / TRUNCATE_INTENT_FILE

    def record(self, offset: int) -> None:
        """Make the intent durable: temporary file fsynced, renamed into place, directory fsynced."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        write_synced(tmp, f"{offset}\n".encode("ascii"))
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def pending(self) -> int | None:
        """The offset of an interrupted truncation, or None. A file that does not hold a
        non-negative number cannot have been written by :meth:`record` (it renames whole files
        into place) and is refused rather than guessed at."""
        try:
            text = self.path.read_text("ascii").strip()
        except FileNotFoundError:
            return None
        if not text.isdigit():
            raise ValueError(f"{self.path}: expected a CommitLog offset, found {text[:40]!r}")
        return int(text)

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        fsync_dir(self.path.parent)
