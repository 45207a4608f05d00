"""Dispatch (ReputMessageService) hand-off: appends wake the sleeping thread with no lost wake-up,
and lag waiters run once dispatch is close enough to the CommitLog's end.

Everything is a real store on real files. One device is not: to put a message exactly between
the dispatch thread's last look at the CommitLog's end and its sleep, an interleaving no
scheduler produces on demand, ``CommitLog.max_offset`` is wrapped so that this one read, made
by the dispatch loop itself, holds the thread until a put from the test has returned.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator

import pytest
from store_support import SEGMENT, OpenStore

from rocketstore.common.message import Message
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.dispatch_scan import ScanResult
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus

TOPIC = "DispatchTopic"
#: a woken dispatch thread makes one record visible in well under a millisecond; this leaves
#: room for a loaded machine, and is what a sleep that an append did not end costs at least
WAKE_BOUND_S = 0.05


class Arrivals:
    """Records when each queue offset became visible (the store's arrival listener runs after
    the ConsumeQueue entry is written) and lets the test wait for one without polling."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.at: dict[int, float] = {}
        self._changed = threading.Condition()
        store.reput_service.on_arriving = self._arrived

    def _arrived(self, topic: str, queue_id: int, next_offset: int, count: int) -> None:
        with self._changed:
            now = time.perf_counter()
            for offset in range(next_offset - count, next_offset):
                self.at[offset] = now
            self._changed.notify_all()

    def wait_for(self, queue_offset: int, timeout_s: float) -> float | None:
        with self._changed:
            self._changed.wait_for(lambda: queue_offset in self.at, timeout_s)
            return self.at.get(queue_offset)


def put(store: DefaultMessageStore, body: bytes) -> int:
    result = store.put_message(Message(topic=TOPIC, body=body, queue_id=0))
    assert result.status is PutMessageStatus.PUT_OK and result.append is not None
    return result.append.logics_offset


@pytest.fixture
def store(open_store: OpenStore) -> Iterator[DefaultMessageStore]:
    yield open_store()


def test_put_between_last_look_and_sleep_is_dispatched_at_once(
    store: DefaultMessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    arrivals = Arrivals(store)
    reput = store.reput_service
    reput.poll_for_s = 0  # no polling after progress: each pass that finds nothing sleeps on the signal
    put(store, b"settle")
    assert reput.wait_caught_up(5)  # the thread is asleep now, waiting for an append

    at_last_look = threading.Event()
    racy_put_returned = threading.Event()
    armed = [True]
    real_max_offset = CommitLog.max_offset

    def max_offset(commit_log: CommitLog) -> int:
        end: int = real_max_offset.fget(commit_log)  # type: ignore[attr-defined]
        # The dispatch loop's own look at the end, taken when it has dispatched everything
        # (reads made inside a dispatch pass come from deeper frames).
        if (armed[0] and threading.current_thread() is reput._thread
                and sys._getframe(1).f_code.co_name == "_run" and end == reput.reput_from_offset):
            armed[0] = False
            at_last_look.set()
            assert racy_put_returned.wait(10)  # the thread goes on with the end it read before
        return end

    monkeypatch.setattr(CommitLog, "max_offset", property(max_offset))
    put(store, b"wake the thread, which dispatches this and then takes its last look")
    assert at_last_look.wait(10), "the dispatch loop never looked at the end before sleeping"
    racy = put(store, b"lands between the last look and the sleep")
    returned = time.perf_counter()
    racy_put_returned.set()

    visible = arrivals.wait_for(racy, 10)
    assert visible is not None, "a put between the last look and the sleep was never dispatched"
    assert visible - returned < WAKE_BOUND_S, (
        f"visible {1000 * (visible - returned):.1f} ms after its put returned: the append's wake-up "
        "was lost and the thread slept until a timeout")


def test_lag_waiter_runs_once_dispatch_is_within_its_lag(store: DefaultMessageStore) -> None:
    reput = store.reput_service
    release = threading.Event()

    def held_dispatcher(found: ScanResult) -> None:
        release.wait(10)  # dispatch falls behind for real while the test holds it here

    reput.dispatchers.append(held_dispatcher)
    put(store, b"held")
    for i in range(20):
        put(store, b"queued behind %d" % i)
    behind = reput.behind_bytes
    assert behind > 0

    assert not reput.add_lag_waiter(behind, lambda: None), "already within: nothing to wait for"
    calls: list[tuple[str, int]] = []
    ran = threading.Event()

    def waiter() -> None:
        calls.append((threading.current_thread().name, reput.behind_bytes))
        ran.set()

    assert reput.add_lag_waiter(0, waiter)
    assert not ran.wait(0.2), "the waiter ran while dispatch was still behind"
    release.set()
    assert ran.wait(5), "dispatch caught up but the waiter never ran"
    assert calls == [("ReputMessageService", 0)]
    put(store, b"after")
    assert reput.wait_caught_up(5)
    assert len(calls) == 1, "a lag waiter runs once"


def test_shutdown_runs_the_waiters_left(store: DefaultMessageStore) -> None:
    reput = store.reput_service
    release = threading.Event()
    reput.dispatchers.append(lambda request: release.wait(10))  # hold dispatch, as above
    for i in range(3 * SEGMENT // 100):  # ~100-byte records: the backlog spans segments
        put(store, b"backlog %d" % i)
    ran = threading.Event()
    assert reput.add_lag_waiter(0, ran.set)
    stopping = threading.Thread(target=reput.shutdown)
    stopping.start()
    release.set()  # the pass in progress ends at its segment's end; the thread then stops
    stopping.join(10)
    assert not stopping.is_alive()
    assert reput.behind_bytes > 0, "dispatch was meant to stop short of the end"
    assert ran.is_set(), "a waiter left at shutdown would have waited for its own timeout"
    assert not reput.wait_caught_up(10), "a stopped service cannot catch up"
    assert not reput.add_lag_waiter(0, lambda: None), "a stopped service registers no waiter"
