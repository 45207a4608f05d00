"""ScheduleMessageService: delay levels, as RocketMQ 4.9.8 stores and delivers them.

A message put with ``DELAY=n`` (n > 0, clamped to the highest level of ``messageDelayLevel``) is
not stored on its topic. The put rewrites it (:func:`schedule`) to

* topic ``SCHEDULE_TOPIC_XXXX``, queue ``n - 1``;
* properties plus ``REAL_TOPIC`` and ``REAL_QID``, the topic and queue it was sent to;

and dispatch gives its ConsumeQueue entry the delivery time, ``storeTimestamp + delay(n)``, as
tagsCode (:func:`deliver_timestamp`; ``dispatch_scan`` and its Rust twin). Since every message of
a level waits the same time, each level's queue is in delivery order: the service reads each
queue from its progress offset, re-puts every due message on its real topic
(:func:`message_timeup`) and stops at the first one not yet due. Progress per level persists in
``config/delayOffset.json`` (``{"offsetTable":{level:offset}}``, fastjson), every
``flushDelayOffsetInterval`` ms and at shutdown, so either broker can take over the other's store.

The delivered record is the scheduled one with topic and queue put back: its properties string
is kept byte for byte, ``DELAY`` included (RocketMQ clears the level from the message's map after
it has computed the string, so the stored bytes keep it); the put neither re-schedules it nor
waits for a sync flush.

Exactly once across a crash (what RocketMQ does not give: it redelivers everything after the last
persisted offset): at start, each level's entries from the persisted offset that were due are
checked against the log. Deliveries of a level are sequential, so the first entry whose delivered
copy is not in the log ends the check, and the offset moves past the ones that are there. A copy
is found through the IndexFile (``REAL_TOPIC#UNIQ_KEY``): a record on the real queue, after the
scheduled one, with the same reconsume count. Without the index or a UNIQ_KEY the entry is
delivered again (at least once) and a warning says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from rocketstore.common.clock import now_ms
from rocketstore.common.java_number import parse_java_int
from rocketstore.common.message import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    Message,
    StoredMessage,
    tags_code,
    transaction_type,
)
from rocketstore.common.topic_validator import RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC
from rocketstore.store.commit_log import PutMessageResult
from rocketstore.store.config import ConfigError, StoreConfig
from rocketstore.store.config_manager import DelayOffsetManager
from rocketstore.store.consume_queue import ConsumeQueue, unpack_entries
from rocketstore.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
#: sysFlag transaction types that may be delayed: not-a-transaction and commit (PREPARED and
#: ROLLBACK records are never scheduled, as in RocketMQ's CommitLog).
_SCHEDULABLE_TRANSACTION_TYPES: Final = (0, 0x8)
#: how often a level with nothing due is looked at again (RocketMQ's DELAY_FOR_A_WHILE)
POLL_INTERVAL_S: Final = 0.1
#: entries read per look at a level
ENTRIES_PER_READ: Final = 256


class _Found(Protocol):
    @property
    def messages(self) -> Sequence[StoredMessage]: ...


class DeliveringStore(Protocol):
    """What the schedule and timer services use of DefaultMessageStore (which owns them)."""

    config: StoreConfig

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None: ...

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None: ...

    def put_message(self, msg: Message, *, wait_flush: bool = True, timeup: bool = False) -> PutMessageResult: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> _Found: ...


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s 10s ...") as milliseconds, level 1 first.

    Units s, m, h, d as RocketMQ's parseDelayLevel; anything else is refused naming the item
    (RocketMQ logs the error and starts without delays).
    """
    levels: list[int] = []
    for item in text.split(" "):
        number = parse_java_int(item[:-1], "i64") if item[-1:] in _UNIT_MS else None
        if number is None or number < 0:
            raise ConfigError("messageDelayLevel", text,
                              f"item {item!r} is not a number followed by s, m, h or d (e.g. '1s 5s 10m 2h')")
        levels.append(number * _UNIT_MS[item[-1]])
    return tuple(levels)


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def delay_level_of(properties: dict[str, str]) -> int:
    """The ``DELAY`` property as Java's ``getDelayTimeLevel`` reads it: 0 when absent.

    Raises ValueError for a value ``Integer.parseInt`` refuses (RocketMQ's put throws).
    """
    text = properties.get(PROPERTY_DELAY_TIME_LEVEL)
    if text is None:
        return 0
    level = parse_java_int(text)
    if level is None:
        raise ValueError(f"property DELAY={text!r} is not an integer delay level")
    return level


def schedule(msg: Message, max_level: int) -> Message:
    """The record a put stores for ``msg``: itself, or its rewrite to SCHEDULE_TOPIC_XXXX.

    Raises ValueError for a malformed ``DELAY`` (see :func:`delay_level_of`).
    """
    level = delay_level_of(msg.properties)
    if level <= 0 or transaction_type(msg.sys_flag) not in _SCHEDULABLE_TRANSACTION_TYPES:
        return msg
    properties = dict(msg.properties)
    if level > max_level:
        level = max_level
        properties[PROPERTY_DELAY_TIME_LEVEL] = str(level)
    properties[PROPERTY_REAL_TOPIC] = msg.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return replace(msg, topic=RMQ_SYS_SCHEDULE_TOPIC, queue_id=delay_level_to_queue_id(level), properties=properties)


def deliver_timestamp(levels_ms: tuple[int, ...], level: int, store_timestamp: int) -> int:
    """The tagsCode of a scheduled record's ConsumeQueue entry: when it is due.

    ``level`` is clamped to the highest level; an unknown level waits one second, as RocketMQ's
    computeDeliverTimestamp.
    """
    level = min(level, len(levels_ms))
    due = store_timestamp + (levels_ms[level - 1] if level > 0 else 1000)
    return (due + 2**63) % 2**64 - 2**63  # a Java long: wraps as RocketMQ's addition does


def consume_queue_tags_code(topic: str, tags: str | None, delay: str | None, store_timestamp: int,
                            levels_ms: tuple[int, ...]) -> int:
    """The tagsCode of a record's ConsumeQueue entry (CommitLog.checkMessageAndReturnSize).

    The delivery time for a SCHEDULE_TOPIC_XXXX record with a positive ``DELAY``, else the tag
    hash. A ``DELAY`` Java cannot parse (only a foreign writer could store one: puts refuse it)
    gets the tag hash rather than stopping dispatch.
    """
    if topic == RMQ_SYS_SCHEDULE_TOPIC and delay is not None:
        level = parse_java_int(delay)
        if level is not None and min(level, len(levels_ms)) > 0:
            return deliver_timestamp(levels_ms, level, store_timestamp)
    return tags_code(tags)


def message_timeup(scheduled: StoredMessage) -> Message | None:
    """The message to put on the real topic when ``scheduled`` is due (None: it names none).

    Body, flag, properties (string as stored), sysFlag, born time and host, store host and
    reconsume count are the scheduled record's; topic and queue come from REAL_TOPIC / REAL_QID.
    """
    topic = scheduled.properties.get(PROPERTY_REAL_TOPIC)
    queue_id = parse_java_int(scheduled.properties.get(PROPERTY_REAL_QUEUE_ID, ""))
    if not topic or queue_id is None or topic == RMQ_SYS_TRANS_HALF_TOPIC:
        return None
    return Message(
        topic=topic, body=scheduled.body, queue_id=queue_id, flag=scheduled.flag,
        properties=dict(scheduled.properties), sys_flag=scheduled.sys_flag,
        born_timestamp=scheduled.born_timestamp, born_host=scheduled.born_host,
        store_host=scheduled.store_host, reconsume_times=scheduled.reconsume_times,
    )


def is_delivered_copy(candidate: StoredMessage, scheduled: StoredMessage, target: Message) -> bool:
    """Whether ``candidate`` is what delivering ``scheduled`` (as ``target``) put in the log."""
    return (candidate.physical_offset > scheduled.physical_offset and candidate.topic == target.topic
            and candidate.queue_id == target.queue_id and candidate.reconsume_times == target.reconsume_times
            and candidate.uniq_key == scheduled.uniq_key)


def was_delivered(store: DeliveringStore, held: StoredMessage, target: Message) -> bool:
    """Whether the log holds ``target``, the delivery of ``held`` (a delayed or timed record).

    Looked up in the IndexFile by ``REAL_TOPIC#UNIQ_KEY``; without a UNIQ_KEY or the index it
    cannot tell, says so, and answers False (the caller delivers: at least once).
    """
    uniq = held.uniq_key
    if not uniq or not store.config.message_index_enable:
        log.warning("record at %d: cannot tell whether it was delivered before the crash (no %s); delivering it "
                    "(at least once)", held.physical_offset, "UNIQ_KEY" if not uniq else "message index")
        return False
    found = store.query_message(target.topic, uniq, 32, held.store_timestamp, now_ms() + 1000)
    return any(is_delivered_copy(candidate, held, target) for candidate in found.messages)


@dataclass
class ScheduleStats:
    """Counters /metrics exports (deliveries by level; what start-up found already delivered)."""

    delivered: dict[int, int] = field(default_factory=dict)
    skipped_already_delivered: int = 0
    dropped: int = 0


class ScheduleMessageService(ServiceThread):
    """Delivers due delayed messages (module docstring); one thread for all levels."""

    def __init__(self, store: DeliveringStore, levels_ms: tuple[int, ...]) -> None:
        super().__init__("ScheduleMessageService")
        self.store = store
        self.levels_ms = levels_ms
        self.offsets = DelayOffsetManager(store.config.config_dir())
        self.stats = ScheduleStats()
        self._persisted: dict[int, int] = {}

    @property
    def max_delay_level(self) -> int:
        return len(self.levels_ms)

    # -- lifecycle -----------------------------------------------------------------------------
    def load(self) -> None:
        """Read delayOffset.json, bring each offset within its queue, and skip what was delivered."""
        self.offsets.load()
        for level in range(1, self.max_delay_level + 1):
            cq = self.store.get_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            if cq is None:
                continue
            offset = self.offsets.get_offset(level)
            if offset is None:  # never persisted: a crash before the first persist, or a new store
                offset = cq.min_offset_in_queue
            corrected = min(max(offset, cq.min_offset_in_queue), cq.max_offset_in_queue)
            if corrected != offset:
                log.error("delay level %d: offset %d outside its queue [%d, %d], corrected to %d", level, offset,
                          cq.min_offset_in_queue, cq.max_offset_in_queue, corrected)
            self.offsets.set_offset(level, self._skip_delivered(level, corrected))
        self._persisted = self.offsets.offsets()

    def shutdown(self) -> None:
        self.stop_thread()
        self.persist()

    def persist(self) -> None:
        offsets = self.offsets.offsets()
        if offsets != self._persisted:
            self.offsets.persist()
            self._persisted = offsets

    # -- what is pending --------------------------------------------------------------------
    def pending(self) -> dict[int, int]:
        """Messages scheduled and not yet delivered, per level."""
        found = {}
        for level in range(1, self.max_delay_level + 1):
            cq = self.store.get_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            if cq is not None:
                offset = self.offsets.get_offset(level) or 0
                found[level] = max(0, cq.max_offset_in_queue - max(offset, cq.min_offset_in_queue))
        return found

    # -- delivery ---------------------------------------------------------------------------
    def run(self) -> None:
        interval_s = self.store.config.flush_delay_offset_interval / 1000
        next_persist = time.monotonic() + interval_s
        while not self.stopping:
            now = now_ms()
            next_due = now + int(POLL_INTERVAL_S * 1000)
            for level in range(1, self.max_delay_level + 1):
                try:
                    due = self._deliver_due(level)
                except Exception:  # a bad record must not stop delivery of the others
                    log.exception("delay level %d: delivery failed; retrying", level)
                    due = now + 1000
                if due is not None:
                    next_due = min(next_due, due)
            if time.monotonic() >= next_persist:
                self._persist_logged()
                next_persist = time.monotonic() + interval_s
            self.wait((next_due - now_ms()) / 1000)
        self._persist_logged()

    def _persist_logged(self) -> None:
        try:
            self.persist()
        except OSError:
            log.exception("could not persist delayOffset.json; will retry")

    def _deliver_due(self, level: int) -> int | None:
        """Deliver what is due on ``level``; when the next entry is due (ms), or None if none waits."""
        cq = self.store.get_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, delay_level_to_queue_id(level))
        if cq is None:
            return None
        offset = max(self.offsets.get_offset(level) or 0, cq.min_offset_in_queue)
        while not self.stopping:
            entries = cq.read_entries(offset, ENTRIES_PER_READ)
            if not entries:
                if offset < cq.max_offset_in_queue:  # the rest of this file is padding: next file
                    offset = cq.roll_next_file(offset)
                    self.offsets.set_offset(level, offset)
                    continue
                return None
            for offset_py, size_py, deliver_ts in unpack_entries(entries):
                now = now_ms()
                due = self._correct_deliver_timestamp(level, now, deliver_ts)
                if due > now:
                    return due
                if not self._deliver(level, offset_py, size_py):
                    return now + 1000
                offset += 1
                self.offsets.set_offset(level, offset)
        return None

    def _correct_deliver_timestamp(self, level: int, now: int, deliver_ts: int) -> int:
        """A delivery time further away than the level's delay (the clock went back) is now."""
        return now if deliver_ts > now + self.levels_ms[level - 1] else deliver_ts

    def _deliver(self, level: int, offset_py: int, size_py: int) -> bool:
        """Put one due message on its real topic; False (retry later) when the put failed."""
        scheduled = self.store.look_message_by_offset(offset_py, size_py)
        if scheduled is None:
            log.warning("delay level %d: no record at offset %d (cleaned up?), skipped", level, offset_py)
            self.stats.dropped += 1
            return True
        msg = message_timeup(scheduled)
        if msg is None:
            log.error("delay level %d: record at %d has no deliverable REAL_TOPIC/REAL_QID (%r, %r), dropped",
                      level, offset_py, scheduled.properties.get(PROPERTY_REAL_TOPIC),
                      scheduled.properties.get(PROPERTY_REAL_QUEUE_ID))
            self.stats.dropped += 1
            return True
        result = self.store.put_message(msg, wait_flush=False, timeup=True)
        if not result.ok:
            log.warning("delay level %d: re-put of %s to %s failed (%s); retrying", level,
                        scheduled.uniq_key, msg.topic, result.status.value)
            return False
        self.stats.delivered[level] = self.stats.delivered.get(level, 0) + 1
        return True

    # -- exactly once after a crash ------------------------------------------------------------
    def _skip_delivered(self, level: int, offset: int) -> int:
        """The first offset of ``level`` whose message is not yet on its real topic."""
        cq = self.store.get_consume_queue(RMQ_SYS_SCHEDULE_TOPIC, delay_level_to_queue_id(level))
        assert cq is not None
        now = now_ms()
        skipped = 0
        for entry in cq.iter_entries(offset):
            if entry.tags_code > now:
                break
            scheduled = self.store.look_message_by_offset(entry.commit_log_offset, entry.size)
            target = message_timeup(scheduled) if scheduled is not None else None
            if scheduled is None or target is None or not was_delivered(self.store, scheduled, target):
                break
            offset = entry.queue_offset + 1
            skipped += 1
        if skipped:
            log.info("delay level %d: %d message(s) after the persisted offset were already delivered before the "
                     "last stop; not delivering them again", level, skipped)
            self.stats.skipped_already_delivered += skipped
        return offset
