"""PullRequestHoldService: long polling for PULL_MESSAGE.

A pull that finds nothing new (PULL_NOT_FOUND) with the SUSPEND flag is not answered at once:
its handler awaits :meth:`PullRequestHoldService.wait_for_message`, which returns

* the moment dispatch makes a message visible on that (topic, queue) past the pull's offset
  and the message matches the pull's filter (its tag code; for a SQL92 filter, its properties) — the broker calls
  :meth:`notify_message_arriving` on the loop with the messages dispatched since its last call;
* when the pull's own suspend timeout expires (a per-request ``loop.call_later`` timer);
* when the connection closes (the request is dropped, nobody is left to answer) or the
  service is closed at shutdown.

The caller then re-runs the pull and answers with whatever it finds, as RocketMQ's
executeRequestWhenWakeup does. A coarse safety check every ``safety_interval_s`` (RocketMQ's
PullRequestHoldService checks every 5 s) compares each waiting queue with the store's max
offset, so a notification that never came cannot strand a pull; like RocketMQ's periodic
check, it wakes without consulting the filter. Registration itself re-checks the queue, which
closes the race between a pull finding nothing and a message arriving before it is held.

Everything runs on the broker's event loop: no locks, and no polling besides the safety check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from rocketstore.broker.server import Connection
from rocketstore.store.message_store import DefaultMessageStore, MessageFilter, TagFilter

log = logging.getLogger(__name__)

SAFETY_INTERVAL_S = 5.0


@dataclass(eq=False, slots=True)
class HeldPull:
    """One suspended pull: where it waits, from which offset, and how it is woken."""

    conn: Connection
    topic: str
    queue_id: int
    offset: int
    message_filter: MessageFilter
    future: asyncio.Future[bool] = field(repr=False)


class PullRequestHoldService:
    """Suspended pulls by (topic, queue id); woken by message arrival, timeout or disconnect."""

    def __init__(self, store: DefaultMessageStore, safety_interval_s: float = SAFETY_INTERVAL_S) -> None:
        self.store = store
        self.safety_interval_s = safety_interval_s
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._safety_task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def _has_new_message(self, held: HeldPull) -> bool:
        return self.store.get_max_offset_in_queue(held.topic, held.queue_id) > held.offset

    async def wait_for_message(
        self, conn: Connection, topic: str, queue_id: int, offset: int, message_filter: MessageFilter,
        timeout_ms: int,
    ) -> bool:
        """Wait until a message past ``offset`` may be there, or ``timeout_ms`` passes.

        Returns False when nobody should be answered any more (the connection closed), True
        when the caller should re-run the pull and answer.
        """
        loop = asyncio.get_running_loop()
        held = HeldPull(conn, topic, queue_id, offset, message_filter, loop.create_future())
        if self._closed or self._has_new_message(held):
            return True
        if conn.closed.is_set():
            return False
        key = (topic, queue_id)
        self._held.setdefault(key, []).append(held)
        self._ensure_safety_task()
        timer = loop.call_later(max(timeout_ms, 0) / 1000, _resolve, held.future, True)
        try:
            return await held.future
        finally:
            timer.cancel()
            waiting = self._held.get(key)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(held)
                if not waiting:
                    del self._held[key]

    def notify_message_arriving(self, topic: str, queue_id: int, max_offset: int, arrived: int = 1) -> None:
        """``arrived`` messages up to ``max_offset`` (exclusive) are visible: wake the pulls they may
        satisfy. For a single message the filter is consulted, as RocketMQ's notifyMessageArriving
        does: the tag code, then, for a property (SQL92) filter, the message's properties, with the
        record read from the CommitLog at most once per call. For several (handed over together)
        every pull past its offset is woken, as the safety check does, and re-runs."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        tags_code: int | None = None
        records: list[bytes | None] = []  # the arrived record, once read
        looked_up = arrived > 1
        for held in waiting:
            if held.future.done() or max_offset <= held.offset:
                continue
            if not looked_up:
                looked_up = True
                tags_code = self.store.get_tags_code(topic, queue_id, max_offset - 1)
            if tags_code is not None:
                message_filter = held.message_filter
                if not message_filter.is_matched_by_consume_queue(tags_code):
                    continue
                if not isinstance(message_filter, TagFilter):  # a tag filter decides on the tag code alone
                    if not records:
                        records.append(self.store.get_message_record(topic, queue_id, max_offset - 1))
                    record = records[0]
                    # a record gone already: wake, and let the re-run tell
                    if record is not None and not message_filter.is_matched_by_commit_log(record):
                        continue
            _resolve(held.future, True)

    def on_disconnect(self, conn: Connection) -> None:
        """The client is gone: drop its suspended pulls without answering."""
        for waiting in self._held.values():
            for held in waiting:
                if held.conn is conn:
                    _resolve(held.future, False)

    def check_held_requests(self) -> None:
        """The safety check: wake every pull whose queue has grown past its offset."""
        for waiting in list(self._held.values()):
            for held in waiting:
                if not held.future.done() and self._has_new_message(held):
                    _resolve(held.future, True)

    def _ensure_safety_task(self) -> None:
        if self._safety_task is None or self._safety_task.done():
            self._safety_task = asyncio.get_running_loop().create_task(self._safety_loop())

    async def _safety_loop(self) -> None:
        while self._held and not self._closed:
            await asyncio.sleep(self.safety_interval_s)
            try:
                self.check_held_requests()
            except Exception:  # a store read failing must not end the safety net
                log.exception("checking suspended pulls failed")

    def close(self) -> None:
        """Shutdown: answer every suspended pull now (re-run) and hold no new ones."""
        self._closed = True
        for waiting in self._held.values():
            for held in waiting:
                _resolve(held.future, True)
        if self._safety_task is not None:
            self._safety_task.cancel()


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
