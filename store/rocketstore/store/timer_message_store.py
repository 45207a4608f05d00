"""TimerMessageStore: RocketMQ 5's timed messages (any delivery time), crash-safe and on disk.

A message put with ``TIMER_DELIVER_MS`` (an absolute time, ms), ``TIMER_DELAY_SEC`` or
``TIMER_DELAY_MS`` (relative to the put) that is due in the future is rewritten, as RocketMQ
5.3's HookUtils.transformTimerMessage does (:func:`timer`), to

* topic ``rmq_sys_wheel_timer``, queue 0;
* properties plus ``TIMER_OUT_MS`` (when it is due), ``REAL_TOPIC`` and ``REAL_QID``;

and delivered, when due, to its real topic with ``TIMER_ENQUEUE_MS`` and ``TIMER_DEQUEUE_MS``
added, as RocketMQ's TimerMessageStore.convert does (:func:`timer_timeup`). Due dates further
than ``timerMaxDelaySec`` ahead are refused (WHEEL_TIMER_MSG_ILLEGAL), as is every timer when
``timerWheelEnable=false`` (WHEEL_TIMER_NOT_ENABLE).

Where RocketMQ 5 keeps a time wheel and a timer log of its own format, this store keeps an
SQLite table (``<store>/timer/timers.db``), one row per pending timer: (due time, CommitLog
offset and size, enqueue time), indexed by due time. Nothing per timer stays in memory, so
millions can be pending; the table is a derived index, like a ConsumeQueue:

* ingestion reads the ``rmq_sys_wheel_timer`` ConsumeQueue from the offset recorded in the table
  and inserts the rows of a batch in the same transaction that moves that offset, so a crash
  neither loses nor doubles a timer;
* delivery marks the due rows it is about to put (one transaction), puts them, then deletes them
  (another). After a crash, marked rows are checked against the log: a row whose delivered copy
  is there is deleted, the others are delivered (see ``schedule_message_service.was_delivered``).

Differences from RocketMQ 5, on purpose: ``TIMER_OUT_MS`` is the exact due time rather than the
time rounded down to ``timerPrecisionMs``, so a message is never delivered early (RocketMQ 5's
wheel may deliver up to a second before the asked time); ``TIMER_DEL_UNIQKEY`` (cancelling a
pending timer) is refused rather than half supported.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from rocketstore.common.clock import now_ms
from rocketstore.common.java_number import parse_java_int
from rocketstore.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    Message,
    StoredMessage,
    transaction_type,
)
from rocketstore.common.topic_validator import RMQ_SYS_TIMER_TOPIC
from rocketstore.store.consume_queue import unpack_entries
from rocketstore.store.schedule_message_service import DeliveringStore, message_timeup, was_delivered
from rocketstore.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
_REQUESTS: Final = (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS)
_SCHEDULABLE_TRANSACTION_TYPES: Final = (0, 0x8)

#: ConsumeQueue entries ingested, and due rows delivered, per transaction
BATCH: Final = 512
#: the longest sleep between two looks (new timers are ingested at least this often)
POLL_INTERVAL_S: Final = 0.1


class TimerNotEnabled(ValueError):
    """A timer was asked for and ``timerWheelEnable`` is false."""


class TimerIllegal(ValueError):
    """A timer the store refuses (bad number, too far ahead, a cancel); the text says which."""


def timer(msg: Message, now: int, *, enabled: bool, max_delay_ms: int) -> Message:
    """The record a put stores for ``msg``: itself, or its rewrite to rmq_sys_wheel_timer.

    A message with a positive ``DELAY`` keeps its level and loses its timer properties (the
    level wins, as in RocketMQ 5). Raises TimerNotEnabled or TimerIllegal.
    """
    props = msg.properties
    # every put comes here: three dict lookups, no generator, for the usual message without a timer
    if ((PROPERTY_TIMER_DELIVER_MS not in props and PROPERTY_TIMER_DELAY_SEC not in props
         and PROPERTY_TIMER_DELAY_MS not in props) or msg.topic == RMQ_SYS_TIMER_TOPIC
            or PROPERTY_TIMER_OUT_MS in props or transaction_type(msg.sys_flag) not in _SCHEDULABLE_TRANSACTION_TYPES):
        return msg
    level = parse_java_int(props.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
    if level is not None and level > 0:
        return replace(msg, properties={k: v for k, v in props.items() if k not in _REQUESTS})
    if not enabled:
        raise TimerNotEnabled("a timer message was sent and timerWheelEnable is false")
    deliver_ms = _deliver_ms(props, now)
    if deliver_ms <= now:
        if PROPERTY_TIMER_DEL_UNIQKEY in props:
            raise TimerIllegal("a timer delete (TIMER_DEL_UNIQKEY) must be due in the future")
        return msg  # due already: stored on its topic at once, as RocketMQ does
    if deliver_ms - now > max_delay_ms:
        raise TimerIllegal(f"the timer is due in {deliver_ms - now} ms, more than timerMaxDelaySec allows "
                           f"({max_delay_ms} ms)")
    if PROPERTY_TIMER_DEL_UNIQKEY in props:
        raise TimerIllegal("cancelling a timer message (TIMER_DEL_UNIQKEY) is not supported by this broker")
    properties = dict(props)
    properties[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    properties[PROPERTY_REAL_TOPIC] = msg.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return replace(msg, topic=RMQ_SYS_TIMER_TOPIC, queue_id=0, properties=properties)


def _deliver_ms(props: dict[str, str], now: int) -> int:
    """When the message asks to be delivered: DELAY_SEC first, then DELAY_MS, then DELIVER_MS."""
    for name, scale, relative in ((PROPERTY_TIMER_DELAY_SEC, 1000, True), (PROPERTY_TIMER_DELAY_MS, 1, True),
                                  (PROPERTY_TIMER_DELIVER_MS, 1, False)):
        text = props.get(name)
        if text is None:
            continue
        value = parse_java_int(text, "i64")
        if value is None:
            raise TimerIllegal(f"property {name}={text!r} is not a number")
        return now + value * scale if relative else value
    raise AssertionError("timer() checked that one of the properties is there")


def timer_timeup(held: StoredMessage, enqueue_ms: int, dequeue_ms: int) -> Message | None:
    """The message to put on the real topic when ``held`` is due (None: it names none)."""
    msg = message_timeup(held)
    if msg is None:
        return None
    properties = dict(msg.properties)
    properties[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    properties[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    return replace(msg, properties=properties)


def due_ms_of(held: StoredMessage) -> int | None:
    """``TIMER_OUT_MS`` of a record of the timer topic, or None when it has none that parses."""
    return parse_java_int(held.properties.get(PROPERTY_TIMER_OUT_MS, ""), "i64")


_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS timers (
    id INTEGER PRIMARY KEY,
    due_ms INTEGER NOT NULL,
    phy_offset INTEGER NOT NULL,
    size INTEGER NOT NULL,
    enqueue_ms INTEGER NOT NULL,
    delivering INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS timers_by_due ON timers (due_ms);
CREATE TABLE IF NOT EXISTS progress (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


@dataclass
class TimerStats:
    """Counters /metrics exports."""

    delivered: int = 0
    skipped_already_delivered: int = 0
    dropped: int = 0
    pending_rows: int = 0
    ingested_offset: int = 0


class TimerMessageStore(ServiceThread):
    """Ingests the timer topic into the on-disk table and delivers due rows (module docstring)."""

    def __init__(self, store: DeliveringStore, path: Path) -> None:
        super().__init__("TimerMessageStore")
        self.store = store
        self.path = path
        self.stats = TimerStats()
        self._db: sqlite3.Connection | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def load(self) -> None:
        """Open (or create) the table and settle rows a crash left half delivered."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one thread at a time uses the connection: this one now, then the service thread
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        self._db = db
        row = db.execute("SELECT value FROM progress WHERE name = 'cq_offset'").fetchone()
        self.stats.ingested_offset = int(row[0]) if row else 0
        self._settle_in_flight()
        self.stats.pending_rows = int(db.execute("SELECT COUNT(*) FROM timers").fetchone()[0])

    def shutdown(self) -> None:
        self.stop_thread()
        if self._db is not None:
            self._db.close()
            self._db = None

    def pending(self) -> int:
        """Timers stored and not yet delivered (in the table, or not yet ingested)."""
        cq = self.store.get_consume_queue(RMQ_SYS_TIMER_TOPIC, 0)
        waiting = cq.max_offset_in_queue - max(self.stats.ingested_offset, cq.min_offset_in_queue) if cq else 0
        return self.stats.pending_rows + max(waiting, 0)

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.stopping:
            try:
                busy = self._ingest() == BATCH
                delivered, next_due = self._deliver_due()
                busy = busy or delivered == BATCH
            except Exception:  # the next look retries; a broken table must not stop the broker
                log.exception("timer service pass failed; retrying in 1 s")
                self.wait(1.0)
                continue
            if not busy:
                wait_s = POLL_INTERVAL_S if next_due is None else (next_due - now_ms()) / 1000
                self.wait(min(wait_s, POLL_INTERVAL_S))

    def _ingest(self) -> int:
        """Move up to BATCH new entries of the timer topic into the table; how many were read."""
        cq = self.store.get_consume_queue(RMQ_SYS_TIMER_TOPIC, 0)
        if cq is None:
            return 0
        offset = self.stats.ingested_offset
        if offset < cq.min_offset_in_queue:
            log.error("timer topic offset %d is below its queue's first offset %d (cleaned up): %d timers lost",
                      offset, cq.min_offset_in_queue, cq.min_offset_in_queue - offset)
            self.stats.dropped += cq.min_offset_in_queue - offset
            offset = cq.min_offset_in_queue
        entries = cq.read_entries(offset, BATCH)
        if not entries:
            if offset < cq.max_offset_in_queue:  # the rest of this file is padding
                self._save_offset(cq.roll_next_file(offset), [])
            return 0
        now = now_ms()
        rows = []
        count = 0
        for phy, size, _ in unpack_entries(entries):
            count += 1
            held = self.store.look_message_by_offset(phy, size)
            due = due_ms_of(held) if held is not None else None
            if held is None or due is None:
                log.warning("timer topic entry %d (offset %d) has no readable record with TIMER_OUT_MS: dropped",
                            offset + count - 1, phy)
                self.stats.dropped += 1
                continue
            rows.append((due, phy, size, now))
        self._save_offset(offset + count, rows)
        return count

    def _save_offset(self, offset: int, rows: list[tuple[int, int, int, int]]) -> None:
        db = self._connection()
        with _transaction(db):
            db.executemany("INSERT INTO timers (due_ms, phy_offset, size, enqueue_ms) VALUES (?, ?, ?, ?)", rows)
            db.execute("INSERT OR REPLACE INTO progress (name, value) VALUES ('cq_offset', ?)", (offset,))
        self.stats.ingested_offset = offset
        self.stats.pending_rows += len(rows)

    def _deliver_due(self) -> tuple[int, int | None]:
        """Deliver up to BATCH due rows; (rows handled, when the next row is due or None)."""
        db = self._connection()
        now = now_ms()
        rows = db.execute("SELECT id, due_ms, phy_offset, size, enqueue_ms FROM timers WHERE due_ms <= ? "
                          "ORDER BY due_ms LIMIT ?", (now, BATCH)).fetchall()
        if rows:
            with _transaction(db):
                db.executemany("UPDATE timers SET delivering = 1 WHERE id = ?", [(r[0],) for r in rows])
            done = []
            for row_id, due, phy, size, enqueue_ms in rows:
                if not self._deliver(due, phy, size, enqueue_ms):
                    break
                done.append((row_id,))
            with _transaction(db):
                db.executemany("DELETE FROM timers WHERE id = ?", done)
            self.stats.pending_rows -= len(done)
            if len(done) < len(rows):
                return len(done), now_ms() + 1000  # a put failed: look again in a second
        next_row = db.execute("SELECT MIN(due_ms) FROM timers").fetchone()
        return len(rows), (int(next_row[0]) if next_row[0] is not None else None)

    def _deliver(self, due: int, phy: int, size: int, enqueue_ms: int) -> bool:
        """Put one due timer on its real topic; False when the put failed (kept for a retry)."""
        held = self._held(due, phy, size)
        msg = timer_timeup(held, enqueue_ms, now_ms()) if held is not None else None
        if msg is None:
            log.error("timer due at %d (CommitLog offset %d) has no deliverable record: dropped", due, phy)
            self.stats.dropped += 1
            return True
        result = self.store.put_message(msg, wait_flush=False, timeup=True)
        if not result.ok:
            log.warning("timer re-put to %s failed (%s); retrying", msg.topic, result.status.value)
            return False
        self.stats.delivered += 1
        return True

    def _held(self, due: int, phy: int, size: int) -> StoredMessage | None:
        """The timer record at ``phy``, if it is still the one the row was made from."""
        held = self.store.look_message_by_offset(phy, size)
        if held is None or held.topic != RMQ_SYS_TIMER_TOPIC or due_ms_of(held) != due:
            return None
        return held

    # -- after a crash -------------------------------------------------------------------------
    def _settle_in_flight(self) -> None:
        db = self._connection()
        rows = db.execute("SELECT id, due_ms, phy_offset, size, enqueue_ms FROM timers WHERE delivering = 1").fetchall()
        if not rows:
            return
        delivered = []
        for row_id, due, phy, size, enqueue_ms in rows:
            held = self._held(due, phy, size)
            target = timer_timeup(held, enqueue_ms, 0) if held is not None else None
            if held is not None and target is not None and was_delivered(self.store, held, target):
                delivered.append((row_id,))
        with _transaction(db):
            db.executemany("DELETE FROM timers WHERE id = ?", delivered)
            db.execute("UPDATE timers SET delivering = 0 WHERE delivering = 1")
        self.stats.skipped_already_delivered += len(delivered)
        log.info("timers: %d of %d left mid-delivery by the last stop were already delivered; the rest will be",
                 len(delivered), len(rows))

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the timer store is not loaded")
        return self._db


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT around the block; ROLLBACK if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
