"""Dispatch (RocketMQ's ReputMessageService): make CommitLog records visible to consumers.

A background thread follows the CommitLog from ``reput_from_offset``: each record becomes a
ConsumeQueue entry and IndexFile keys, through a list of one-method dispatchers, and waiting
pulls on that (topic, queueId) are woken. Writers wake the thread when they append; when it
has caught up it sleeps on an event, not in a polling loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from rocketstore.common.message import BlankRecord, StoredMessage
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.dispatch_request import DispatchRequest, to_dispatch_request

log = logging.getLogger(__name__)


CommitLogDispatcher = Callable[[DispatchRequest], None]
"""Receives every record once it is in the CommitLog (ConsumeQueue builder, index builder)."""

MessageArrivingListener = Callable[[DispatchRequest], None]


class ReputMessageService:
    """Follows the CommitLog and fans records out to the dispatchers."""

    def __init__(
        self,
        commit_log: CommitLog,
        dispatchers: list[CommitLogDispatcher],
        on_arriving: MessageArrivingListener | None = None,
    ) -> None:
        self.commit_log = commit_log
        self.dispatchers = dispatchers
        self.on_arriving = on_arriving
        self.reput_from_offset = 0
        self.dispatched_count = 0
        self._event = threading.Event()
        self._idle = False
        self._stopped = False
        self._caught_up = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="ReputMessageService", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wakeup(self) -> None:
        """Called after every append; costs a flag check unless the thread is asleep."""
        if self._idle:
            self._event.set()

    @property
    def behind_bytes(self) -> int:
        """How much of the CommitLog is not yet visible to consumers."""
        return max(self.commit_log.max_offset - self.reput_from_offset, 0)

    def wait_caught_up(self, timeout_s: float) -> bool:
        """Block until dispatch has reached the CommitLog's end; start-up and tests use it."""
        deadline = time.monotonic() + timeout_s
        with self._caught_up:
            while self.behind_bytes > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped:
                    return self.behind_bytes <= 0
                self._event.set()
                self._caught_up.wait(min(remaining, 0.05))
        return True

    def _run(self) -> None:
        while not self._stopped:
            try:
                progressed = self._do_reput()
            except Exception:  # a dispatch bug must not silently stop visibility for ever
                log.exception("dispatch failed at offset %d; retrying", self.reput_from_offset)
                progressed = False
                time.sleep(0.1)
            if progressed:
                continue
            # Under a steady stream of puts, waiting a millisecond before declaring ourselves
            # idle lets the next records arrive without every put paying for an Event.set
            # (RocketMQ's reput thread sleeps 1 ms between passes for the same reason).
            time.sleep(0.001)
            if self.reput_from_offset < self.commit_log.max_offset:
                continue
            with self._caught_up:
                self._caught_up.notify_all()
            self._idle = True
            if not self._stopped:
                # Caught up: sleep until a writer wakes us. Behind but stuck (a record that
                # does not decode yet): back off briefly instead of spinning.
                self._event.wait(0.5 if self.behind_bytes <= 0 else 0.05)
            self._idle = False
            self._event.clear()

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
        if mapped is None:
            return False
        start = self.reput_from_offset % file_size
        moved = False
        for pos, result in commit_log.records_in(mapped, start, check_crc=False):
            if isinstance(result, StoredMessage):
                self.dispatch_message(result)
                self.reput_from_offset = mapped.file_from_offset + pos + result.total_size
                moved = True
            elif isinstance(result, BlankRecord):
                self.reput_from_offset = commit_log.roll_next_file(self.reput_from_offset)
                return True
            else:
                if mapped.file_from_offset + pos < commit_log.max_offset:
                    log.error("dispatch stopped at %d: %s", mapped.file_from_offset + pos, result)
                return moved
        return moved

    def dispatch_message(self, msg: StoredMessage) -> None:
        """Build every index for one record and wake its waiting pulls."""
        request = to_dispatch_request(msg)
        for dispatcher in self.dispatchers:
            dispatcher(request)
        self.dispatched_count += 1
        if self.on_arriving is not None:
            self.on_arriving(request)

    def shutdown(self) -> None:
        self._stopped = True
        self._event.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
