"""CommitLog flushing: ASYNC_FLUSH's background flusher and SYNC_FLUSH's group commit.

ASYNC_FLUSH (FlushRealTimeService): every ``flushIntervalCommitLog`` ms flush when at least
``flushCommitLogLeastPages`` new pages are dirty, and everything once per
``flushCommitLogThoroughInterval``. A put returns as soon as its bytes are in the mapping.

SYNC_FLUSH (GroupCommitService): a put returns only once an fdatasync has covered its last
byte. One flusher thread serves every waiting put: whatever was appended before a sync
starts is made durable by that one sync, so N concurrent writers share one fsync instead of
paying N. A put not covered within ``syncFlushTimeout`` gets FLUSH_DISK_TIMEOUT.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from collections.abc import Callable

from rocketstore.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

RETRY_TIMES_OVER = 10


class FlushService(abc.ABC):
    """Common shape of both flushers: a thread, a wakeup, checkpoint stamping, clean stop."""

    def __init__(self, name: str, queue: MappedFileQueue, on_flushed: Callable[[int], None]) -> None:
        self._queue = queue
        self._on_flushed = on_flushed
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _flush(self, least_pages: int) -> None:
        self._queue.flush(least_pages)
        if self._queue.store_timestamp > 0:
            self._on_flushed(self._queue.store_timestamp)

    @abc.abstractmethod
    def _run(self) -> None:
        """The flusher's loop; returns once shut down."""

    def shutdown(self) -> None:
        """Stop the thread, then flush everything, retrying like RocketMQ does on shutdown."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for _ in range(RETRY_TIMES_OVER):
            self._queue.flush(0)
            if self._queue.flushed_where >= self._queue.max_offset:
                break
        if self._queue.store_timestamp > 0:
            self._on_flushed(self._queue.store_timestamp)


class FlushRealTimeService(FlushService):
    """ASYNC_FLUSH: periodic flush by least pages, thorough flush on an interval."""

    def __init__(
        self, queue: MappedFileQueue, on_flushed: Callable[[int], None], *, interval_ms: Callable[[], int],
        least_pages: Callable[[], int], thorough_interval_ms: Callable[[], int],
    ) -> None:
        super().__init__("FlushRealTimeService", queue, on_flushed)
        self._interval_ms = interval_ms
        self._least_pages = least_pages
        self._thorough_interval_ms = thorough_interval_ms
        self._last_thorough = time.monotonic()

    def wakeup(self) -> None:
        """Flushes are timed, not triggered by puts (RocketMQ's flushCommitLogTimed default)."""

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                self._cond.wait(self._interval_ms() / 1000)
                if self._stopped:
                    return
            least = self._least_pages()
            now = time.monotonic()
            if (now - self._last_thorough) * 1000 >= self._thorough_interval_ms():
                self._last_thorough = now
                least = 0
            try:
                self._flush(least)
            except OSError:
                log.exception("commit log flush failed; retrying at the next interval")


class GroupCommitService(FlushService):
    """SYNC_FLUSH: one flusher, many waiting puts, one fdatasync per group.

    Like RocketMQ's GroupCommitService it swaps the request list: puts that arrive while an
    fdatasync runs form the next group. Each put waits on its own event, so a flush wakes
    exactly the puts it made durable instead of every waiting thread.
    """

    def __init__(self, queue: MappedFileQueue, on_flushed: Callable[[int], None]) -> None:
        super().__init__("GroupCommitService", queue, on_flushed)
        self._requests: list[tuple[int, Callable[[], None]]] = []
        self.flush_count = 0

    def wakeup(self) -> None:
        with self._cond:
            self._cond.notify()

    def request_flush(self, end_offset: int, on_durable: Callable[[], None]) -> bool:
        """Have ``on_durable()`` called, in the flush thread, once the log is durable up to
        ``end_offset``; False, registering nothing, if it already is or the service stopped.

        The event loop's way to wait for a SYNC_FLUSH put without a thread per put (RocketMQ's
        4.x broker completes a future the same way): the callback must not block.
        """
        if self._queue.flushed_where >= end_offset:
            return False
        with self._cond:
            if self._stopped:
                return False
            self._requests.append((end_offset, on_durable))
            self._cond.notify()
        return True

    def wait_flushed(self, end_offset: int, timeout_s: float) -> bool:
        """Block until the log is durable up to ``end_offset``; False on timeout."""
        done = threading.Event()
        if not self.request_flush(end_offset, done.set):
            return self._queue.flushed_where >= end_offset
        return done.wait(timeout_s) or self._queue.flushed_where >= end_offset

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._requests:
                    self._cond.wait()
                if self._stopped:
                    pending, self._requests = self._requests, []
                    break
                group, self._requests = self._requests, []
            target = max(end for end, _ in group)
            try:
                # A roll can leave the target in the next segment: flush until covered (twice
                # at most in practice, as RocketMQ's doCommit loop).
                for _ in range(2):
                    self._flush(0)
                    self.flush_count += 1
                    if self._queue.flushed_where >= target:
                        break
            except OSError:
                log.exception("commit log sync flush failed; waiting puts will time out")
                time.sleep(0.01)
            self._release(group)
        self._queue.flush(0)  # shutting down: make what waiters wrote durable before answering them
        self._release(pending)

    def _release(self, group: list[tuple[int, Callable[[], None]]]) -> None:
        flushed = self._queue.flushed_where
        unfinished = []
        for end, done in group:
            if flushed >= end:
                try:
                    done()
                except Exception:  # e.g. its event loop closed meanwhile: the others still go
                    log.exception("flush waiter %r failed", done)
            else:
                unfinished.append((end, done))
        if unfinished:
            with self._cond:
                self._requests[:0] = unfinished
