"""StoreWaits: the puts a broker answers only once they are durable (SYNC_FLUSH) or on a slave
(SYNC_MASTER), waited for on the broker's event loop.

RocketMQ's CommitLog hands each such put to its GroupCommitService or GroupTransferService as a
request with a deadline and completes the put's future from that service's thread. Here the
store's flush and HA threads only call back (``request_flush``, ``request_transfer``), and the
waiting is kept on the loop, in one queue per kind, in the order the puts were made:

* Only the oldest waiting put of a queue is registered with the store. When the store calls
  back, the loop answers every put the flush or the slave's report now covers in that pass (it
  reads the store's flushed or acknowledged end once, then asks put by put only past it, where
  the store registers the first one it does not cover). One slave report answers all the sends
  it covers with one wake-up of the loop and no per-send callback.
* Each queue has one loop timer, for its oldest put's deadline (syncFlushTimeout, slaveTimeout);
  when it fires, every put past its deadline is answered with the timeout.

A waiting send used to cost a task, a timeout scope, a callback object and a loop timer of its
own: twice the event loop's CPU of an ASYNC_MASTER send (docs/benchmarks.md, "Replication").

Puts are registered in the order the loop made them, which is their order in the CommitLog
except for a put whose waiting starts a step later than its append (a coroutine's). Such a put
behind one with a later end is answered when that one is, or at its deadline: a little late,
never wrong. A timeout changed live applies to puts registered after the change.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable

from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus

log = logging.getLogger(__name__)

#: A put's outcome, called once on the loop: its status after the waits (see :meth:`StoreWaits.add`).
Done = Callable[[PutMessageStatus], None]


class _Wait:
    """One put's waits: how many are pending and the status they leave it with."""

    __slots__ = ("done", "pending", "status")

    def __init__(self, status: PutMessageStatus, pending: int, done: Done) -> None:
        self.status = status
        self.pending = pending
        self.done = done

    def settle(self) -> None:
        self.pending -= 1
        if not self.pending:
            self.done(self.status)


class _WaitQueue:
    """The puts waiting for one kind of completion (the flush, or a slave), oldest first."""

    __slots__ = ("_armed", "_covered", "_entries", "_expired", "_loop", "_request", "_settled", "_thread",
                 "_timeout_ms", "_timer", "_what")

    def __init__(self, loop: asyncio.AbstractEventLoop, request: Callable[[int, Callable[[], None]], bool],
                 covered: Callable[[], int], timeout_ms: Callable[[], int], expired: Callable[[_Wait], None],
                 what: str, settled: Callable[[], None]) -> None:
        self._loop = loop
        self._thread = threading.get_ident()  # the loop's: a queue is made on it
        self._settled = settled
        self._request = request
        #: an end at or below which ``request`` would find every put done (-1: none known)
        self._covered = covered
        self._timeout_ms = timeout_ms
        self._expired = expired
        self._what = what
        #: (end offset, loop-time deadline, wait), in the order the puts were made
        self._entries: deque[tuple[int, float, _Wait]] = deque()
        #: whether the store holds a callback for the oldest entry (at most one at a time)
        self._armed = False
        self._timer: asyncio.TimerHandle | None = None

    def add(self, end: int, wait: _Wait) -> bool:
        """Queue a put ending at ``end``; False, queueing nothing, when the store says it is done."""
        entries = self._entries
        if not entries and not self._armed and not self._request(end, self._wake):
            return False
        if not entries:
            self._armed = True
        entries.append((end, self._loop.time() + self._timeout_ms() / 1000, wait))
        if self._timer is None:
            self._timer = self._loop.call_at(entries[0][1], self._expire_due)
        return True

    def _wake(self) -> None:
        """The store's callback: in its flush thread, or on the loop when the loop read the slave's
        report (HAService.attach_loop), where the waits are settled in the same pass."""
        if threading.get_ident() == self._thread:
            self._woken()
        else:
            self._loop.call_soon_threadsafe(self._woken)

    def _woken(self) -> None:
        self._armed = False
        entries, request, wake = self._entries, self._request, self._wake
        covered = self._covered()
        while entries and entries[0][0] <= covered:
            entries.popleft()[2].settle()
        while entries:
            if request(entries[0][0], wake):
                self._armed = True
                break
            entries.popleft()[2].settle()
        self._settled()

    def _expire_due(self) -> None:
        self._timer = None
        entries = self._entries
        now = self._loop.time()
        while entries and entries[0][1] <= now:
            end, _, wait = entries.popleft()
            log.warning("%s of offset %d not done within %d ms", self._what, end, self._timeout_ms())
            self._expired(wait)
        if entries:
            self._timer = self._loop.call_at(entries[0][1], self._expire_due)
        self._settled()


class StoreWaits:
    """The broker's puts waiting for their flush or their slave (see the module docstring)."""

    def __init__(self, store: DefaultMessageStore, store_config: StoreConfig) -> None:
        self._store = store
        self._config = store_config
        #: called on the loop after each pass that answered puts (a report, a flush, a timeout),
        #: once for all of them: the broker writes their answers then (RemotingServer.flush_answers)
        self.on_settled: Callable[[], None] = lambda: None
        self._queues: tuple[asyncio.AbstractEventLoop, _WaitQueue, _WaitQueue] | None = None

    def add(self, status: PutMessageStatus, end: int, *, flush: bool, replica: bool, done: Done) -> bool:
        """Have ``done(status)`` called on the running loop once a put ending at ``end`` is
        durable (``flush``) and on a slave (``replica``); False, with ``done`` never called, when
        there is nothing to wait for.

        Both waits run at once, as RocketMQ's CommitLog combines its flush and replica futures.
        The store has already said SLAVE_NOT_AVAILABLE for a SYNC_MASTER put when no slave was OK
        right after the append (isSlaveOK); only a PUT_OK put waits for a slave. Outcomes, in
        RocketMQ's precedence: the flush not done within syncFlushTimeout is FLUSH_DISK_TIMEOUT;
        no slave past the put within slaveTimeout is FLUSH_SLAVE_TIMEOUT, and a slave status (that
        or SLAVE_NOT_AVAILABLE) wins over the flush's.
        """
        replica = replica and status is PutMessageStatus.PUT_OK
        if not (flush or replica) or (status is not PutMessageStatus.PUT_OK and not status.ok):
            return False
        _, flushes, transfers = self._queues_on(asyncio.get_running_loop())
        wait = _Wait(status, 2, done)  # one pending more than the waits, released below
        waiting = False
        if flush and flushes.add(end, wait):
            waiting = True
        else:
            wait.pending -= 1
        if replica and transfers.add(end, wait):
            waiting = True
        else:
            wait.pending -= 1
        return waiting

    def _queues_on(self, loop: asyncio.AbstractEventLoop) -> tuple[asyncio.AbstractEventLoop, _WaitQueue, _WaitQueue]:
        queues = self._queues
        if queues is None or queues[0] is not loop:  # the first wait, or the broker runs on a new loop
            store, config = self._store, self._config
            queues = self._queues = (
                loop,
                _WaitQueue(loop, store.request_flush, store.flushed_offset, lambda: config.sync_flush_timeout,
                           _flush_timed_out, "sync flush", self._on_settled),
                _WaitQueue(loop, store.request_transfer, store.transferred_offset, lambda: config.slave_timeout,
                           _transfer_timed_out, "the slaves' copy", self._on_settled))
        return queues

    def _on_settled(self) -> None:
        self.on_settled()


def _flush_timed_out(wait: _Wait) -> None:
    if wait.status is PutMessageStatus.PUT_OK:
        wait.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
    wait.settle()


def _transfer_timed_out(wait: _Wait) -> None:
    wait.status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    wait.settle()
