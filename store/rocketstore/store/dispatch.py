"""Dispatch (RocketMQ's ReputMessageService): make CommitLog records visible to consumers.

A background thread follows the CommitLog from ``reput_from_offset``. Each pass reads up to
:data:`~rocketstore.store.dispatch_scan.SCAN_MAX_RECORDS` records with one
:func:`~rocketstore.store.dispatch_scan.scan` (native code, without the interpreter lock for
large passes, unless the pure-Python reference runs) and hands the result to a list of one-method dispatchers (the
ConsumeQueue builder appends each queue's run of entries at once, the index builder writes the
hashed keys); then waiting pulls on each (topic, queueId) that got entries are woken.
RocketMQ's thread polls (a 1 ms sleep per pass). This one polls the same way while appends keep
coming, and once they stop it sleeps until a writer signals an append, so an idle broker does
not wake a thousand times a second. Callers that need dispatch to be close enough to the
CommitLog's end (start-up, send back-pressure) register a one-shot waiter instead of polling
``behind_bytes``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from rocketstore.store.commit_log import CommitLog
from rocketstore.store.dispatch_scan import END_BLANK, END_CORRUPT, ScanResult, scan

log = logging.getLogger(__name__)


CommitLogDispatcher = Callable[[ScanResult], None]
"""Receives each pass's records once they are in the CommitLog (ConsumeQueue builder, index builder)."""

MessageArrivingListener = Callable[[str, int, int, int], None]
"""(topic, queueId, next queue offset, entries that arrived): called after the dispatchers, once
per queue run of a pass (RocketMQ's MessageArrivingListener, per run instead of per message)."""

LagWaiter = Callable[[], None]
"""Called once, in the dispatch thread, when dispatch is within the waiter's lag: it must not
block (dispatch waits for it); an exception it raises is logged."""

STUCK_BACKOFF_S = 0.05
"""Pause between passes that cannot get past a CommitLog tail that does not decode."""

POLL_INTERVAL_S = 0.001
"""Pause between passes while appends keep coming (RocketMQ's ReputMessageService sleeps 1 ms)."""

POLL_FOR_S = 0.05
"""How long after its last progress the thread keeps polling before it sleeps until signalled."""


class ReputMessageService:
    """Follows the CommitLog and fans records out to the dispatchers."""

    def __init__(
        self,
        commit_log: CommitLog,
        dispatchers: list[CommitLogDispatcher],
        on_arriving: MessageArrivingListener | None = None,
        *,
        delay_levels_ms: tuple[int, ...],
        index_enabled: bool = True,
    ) -> None:
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.index_enabled = index_enabled
        self.delay_levels_ms = delay_levels_ms
        self.on_arriving = on_arriving
        self.reput_from_offset = 0
        self.dispatched_count = 0
        # The wake-up signal: released = signalled. A bare lock rather than a threading.Event,
        # whose set() takes a Condition's lock and notifies in Python: with native dispatch the
        # thread is idle between most puts, so a set() per put was a sixth of the broker's
        # interpreter time under 32 senders. Releasing a lock is one C call.
        self._appended = threading.Lock()
        self._appended.acquire()
        self._idle = False
        self._stopped = False
        #: see POLL_FOR_S; 0 makes every pass that finds nothing sleep until an append signals
        self.poll_for_s = POLL_FOR_S
        self._lag_waiters: list[tuple[int, LagWaiter]] = []
        self._lag_waiters_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ReputMessageService", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        """Called after every append (``CommitLog.on_appended``), once the new end is published.

        The put path is hot: while the thread is dispatching this is one flag check. Only a
        thread that has declared itself idle is signalled, once: the writer that signals it
        takes the flag down, so the puts made before the woken thread gets the interpreter
        lock do not signal it again. See :meth:`_run` for why no append can slip between the
        thread's last look at the CommitLog's end and its sleep.
        """
        if self._idle:
            self._idle = False
            self._signal()

    def _signal(self) -> None:
        with contextlib.suppress(RuntimeError):  # already signalled (two writers both saw _idle)
            self._appended.release()

    @property
    def behind_bytes(self) -> int:
        """How much of the CommitLog is not yet visible to consumers."""
        return max(self.commit_log.max_offset - self.reput_from_offset, 0)

    def add_lag_waiter(self, lag_bytes: int, waiter: LagWaiter) -> bool:
        """Arrange for ``waiter()`` to run once dispatch trails the CommitLog by at most ``lag_bytes``.

        Returns False, registering nothing, if it already does. Otherwise ``waiter`` runs in the
        dispatch thread after the first pass that ends within the lag (or at shutdown), unless
        :meth:`remove_lag_waiter` comes first. The waiter is registered before the lag is
        checked and the thread looks for waiters after every pass, so progress made after the
        check always finds it: there is no window in which a wake-up can be lost.
        """
        with self._lag_waiters_lock:
            self._lag_waiters.append((lag_bytes, waiter))
        if self.behind_bytes <= lag_bytes or self._stopped:
            self.remove_lag_waiter(waiter)
            return False
        return True

    def remove_lag_waiter(self, waiter: LagWaiter) -> None:
        """Forget ``waiter`` if it has not run (a caller that timed out or was cancelled)."""
        with self._lag_waiters_lock:
            self._lag_waiters = [(lag, w) for lag, w in self._lag_waiters if w != waiter]

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Block until dispatch has reached the CommitLog's end; start-up and tests use it."""
        caught_up = threading.Event()
        if self.add_lag_waiter(0, caught_up.set):
            try:
                caught_up.wait(timeout_s)
            finally:
                self.remove_lag_waiter(caught_up.set)
        return self.behind_bytes <= 0

    def _run(self) -> None:
        stalled = False  # the last pass moved nothing although the CommitLog was ahead of it
        last_progress = float("-inf")
        while not self._stopped:
            try:
                progressed = self._do_reput()
            except Exception:  # a dispatch bug must not silently stop visibility for ever
                log.exception("dispatch failed at offset %d; retrying", self.reput_from_offset)
                progressed = False
                time.sleep(0.1)
            if self._lag_waiters:
                self._wake_lag_waiters()
            if progressed:
                stalled = False
                last_progress = time.monotonic()
                continue
            if time.monotonic() - last_progress < self.poll_for_s:
                # Appends are coming: poll, as RocketMQ's thread does, rather than be signalled.
                # A signal per put made every put wake this thread for a pass of one record,
                # and each wake-up take the interpreter lock from the writer (a sixth of the
                # broker's time under 32 senders); a pass per POLL_INTERVAL_S finds a batch.
                time.sleep(POLL_INTERVAL_S)
                continue
            # About to sleep. Clear the signal, declare idleness, then take the last look at
            # the CommitLog's end. A writer publishes its end before it reads ``_idle``. If it
            # read True, its signal comes after the clear and ends the wait below at once. If it
            # read False before idleness was declared, its end was published before this look,
            # which sees it; if after, another writer took the flag down, and that writer's
            # signal comes after the clear. shutdown() sets ``_stopped`` before its signal too.
            self._appended.acquire(blocking=False)  # clear a signal left from before this pass
            self._idle = True
            behind = self.commit_log.max_offset > self.reput_from_offset
            if not self._stopped and (stalled or not behind):
                # Caught up: sleep until an append. Behind twice without moving: a tail that
                # does not decode, so back off instead of spinning (an append cuts it short).
                # Behind once: an append landed after the pass read the end; go again at once.
                self._appended.acquire(timeout=STUCK_BACKOFF_S if behind else -1)
            stalled = behind
            self._idle = False

    def _wake_lag_waiters(self, *, all_of_them: bool = False) -> None:
        """Run, and forget, the waiters whose lag dispatch is now within (at shutdown: all)."""
        behind = self.behind_bytes
        with self._lag_waiters_lock:
            due = [w for lag, w in self._lag_waiters if all_of_them or behind <= lag]
            self._lag_waiters = [(lag, w) for lag, w in self._lag_waiters if not all_of_them and behind > lag]
        for waiter in due:
            try:
                waiter()
            except Exception:  # e.g. its event loop closed meanwhile: dispatch must go on
                log.exception("lag waiter %r failed", waiter)

    def _do_reput(self) -> bool:
        """Dispatch what is available in the current segment; True if anything moved."""
        commit_log = self.commit_log
        if self.reput_from_offset < commit_log.min_offset:
            log.warning("reput offset %d below CommitLog min %d; skipping deleted data",
                        self.reput_from_offset, commit_log.min_offset)
            self.reput_from_offset = commit_log.min_offset
        if self.reput_from_offset >= commit_log.max_offset:
            return False
        file_size = commit_log.settings.file_size
        mapped = commit_log.mapped_file_queue.find_mapped_file_by_offset(self.reput_from_offset)
        if mapped is None or not mapped.hold():
            return False
        limit = mapped.read_position
        # Only the written bytes: a slave's CommitLog grows by replicated frames that may end inside a
        # record, and the scan must see that record as incomplete, not decode zeros (or stale bytes)
        # past the end as the rest of it.
        written = memoryview(mapped.buffer)[:limit]
        try:
            found = scan(written, self.reput_from_offset % file_size, limit,
                         index_enabled=self.index_enabled, delay_levels_ms=self.delay_levels_ms)
            incomplete = found.end_kind == END_CORRUPT and _runs_past(written, found.end_pos)
        finally:
            written.release()
            mapped.release()
        if found.records:
            for dispatcher in self.dispatchers:
                dispatcher(found)
            self.dispatched_count += found.records
            self.reput_from_offset = mapped.file_from_offset + found.end_pos
            if self.on_arriving is not None:
                for run in found.runs:
                    self.on_arriving(run.topic, run.queue_id, run.first_queue_offset + run.count, run.count)
        if found.end_kind == END_BLANK:
            self.reput_from_offset = commit_log.roll_next_file(self.reput_from_offset)
            return True
        if found.end_kind == END_CORRUPT and not incomplete \
                and mapped.file_from_offset + found.end_pos < commit_log.max_offset:
            log.error("dispatch stopped at %d: %s", mapped.file_from_offset + found.end_pos, found.reason)
        return found.records > 0

    def dispatch_from(self, offset: int) -> None:
        """Dispatch, in the calling thread, from ``offset`` to the CommitLog's end: crash recovery
        rebuilds the indexes of the stretch after the checkpoint this way, before the thread runs."""
        self.reput_from_offset = offset
        while self._do_reput():
            pass

    def shutdown(self) -> None:
        """Stop the thread; lag waiters still registered are run so that none waits for ever."""
        self._stopped = True
        self._signal()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self._wake_lag_waiters(all_of_them=True)


def _runs_past(written: memoryview, pos: int) -> bool:
    """Whether the record at ``pos`` declares more bytes than are written: the rest of it has not
    arrived yet (a slave mid-frame), which is no corruption. A put never leaves that state (the
    write position moves past whole records only)."""
    if pos + 4 > len(written):
        return True
    size = int.from_bytes(written[pos:pos + 4], "big", signed=True)
    return size > 0 and pos + size > len(written)
