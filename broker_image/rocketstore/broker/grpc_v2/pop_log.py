"""The pop log: durable state of pop consumption (who holds which message invisible until when).

RocketMQ 5 keeps pop state as checkpoint and ack messages in a revive topic that a revive
service replays. This broker keeps a small append-only file instead, ``<store>/pop/pop.log``,
whose replay gives the state directly:

* **cursor** (group, topic, queue) -> the next queue offset never handed out to that group. Messages
  below it were received (or skipped by the group's tag filter) at least once.
* **in flight** (group, topic, queue, offset) -> (visible again at ms, delivery attempt): a message
  received and not acked. Once its time passes, the next receive hands it out again with the
  attempt one higher.

Three records change it (:class:`Invisible`, :class:`Ack`, :class:`Cursor`); :func:`apply` is the
whole semantics, so replay after a restart rebuilds exactly the state before it. A receive is
logged before the client sees the message and an ack before the client is told OK, so a crash
can only make a message come back (at-least-once), never lose one or revive an acked one.

Frames are ``u32 length | u32 crc32 | payload``. A torn or corrupt tail (a crash mid-write)
ends the replay there and is cut off, so later appends never follow garbage. Appends go to the
kernel at once (a killed broker loses none); they are fsynced by :meth:`PopLog.sync`, which the
broker calls periodically and at shutdown: a power loss can lose the last interval, which again
only brings messages back. The file is compacted (a snapshot of the live state written beside
it, fsynced, renamed over it) at open and whenever it grows past :data:`COMPACT_MIN_BYTES` and
four times the snapshot size, so it stays proportional to the messages in flight.
"""

from __future__ import annotations

import heapq
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

#: the file under ``<store root>/pop/``
LOG_NAME: Final = "pop.log"
COMPACT_MIN_BYTES: Final = 1024 * 1024
_FRAME: Final = struct.Struct(">II")
_KIND_INVISIBLE: Final = 1
_KIND_ACK: Final = 2
_KIND_CURSOR: Final = 3
_QUEUE: Final = struct.Struct(">iq")  # queue id, queue offset
_INVISIBLE_TAIL: Final = struct.Struct(">qi")  # visible-at ms, attempt
_CURSOR_TAIL: Final = struct.Struct(">q")
_NAME_LEN: Final = struct.Struct(">H")


class PopLogError(ValueError):
    """A record that does not decode (only ever raised for a frame whose CRC matched)."""


@dataclass(frozen=True, slots=True)
class Invisible:
    """The message at ``offset`` is handed out (again) and invisible until ``visible_at_ms``."""

    group: str
    topic: str
    queue_id: int
    offset: int
    visible_at_ms: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Ack:
    """The message at ``offset`` is consumed: it never comes back."""

    group: str
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class Cursor:
    """The queue's cursor is ``next_offset``: offsets below it were handed out or filtered away (a
    receive moved past them). It sets the cursor, back too (the store lost its tail); a receive only
    ever moves it forward (:class:`Invisible` records never move it back)."""

    group: str
    topic: str
    queue_id: int
    next_offset: int


Record = Invisible | Ack | Cursor
QueueKey = tuple[str, str, int]  # group, topic, queue id


@dataclass(frozen=True, slots=True)
class InFlight:
    visible_at_ms: int
    attempt: int


TopicKey = tuple[str, str]  # group, topic


@dataclass(slots=True)
class PopState:
    """What the records add up to (see the module docstring), with two indexes over it that keep a
    receive and an ack independent of how many messages are in flight, both heaps: each queue's
    offsets in flight (its oldest is the group's committed offset) and each group's visible-again
    times (the messages a receive hands out again come off the top). Items of entries acked or
    changed since stay until they reach the top, where they are dropped; a heap that holds more
    of them than live ones is rebuilt."""

    cursors: dict[QueueKey, int] = field(default_factory=dict)
    in_flight: dict[QueueKey, dict[int, InFlight]] = field(default_factory=dict)
    #: (group, topic, queue id) -> heap of its offsets in flight, stale items included
    _offsets: dict[QueueKey, list[int]] = field(default_factory=dict, compare=False, repr=False)
    #: (group, topic) -> heap of (visible-at ms, queue id, offset), stale items included
    _visible: dict[TopicKey, list[tuple[int, int, int]]] = field(default_factory=dict, compare=False, repr=False)
    #: (group, topic) -> its messages in flight
    _live: dict[TopicKey, int] = field(default_factory=dict, compare=False, repr=False)

    def in_flight_count(self) -> int:
        return sum(self._live.values())

    def oldest_in_flight(self, key: QueueKey) -> int | None:
        """The lowest offset of the queue in flight."""
        entries = self.in_flight.get(key)
        if not entries:
            return None
        heap = self._offsets[key]
        if len(heap) > 2 * len(entries) + 1024:
            heap[:] = entries
            heapq.heapify(heap)
        while heap[0] not in entries:
            heapq.heappop(heap)
        return heap[0]

    def earliest_visible(self, group: str, topic: str) -> int | None:
        """When the first of the group's messages of ``topic`` in flight becomes visible again."""
        heap = self._visible.get((group, topic))
        return heap[0][0] if heap and self._drop_stale_top(group, topic, heap) else None

    def pop_due(self, group: str, topic: str, now_ms: int) -> tuple[int, int, InFlight] | None:
        """Take the top of the group's heap if it is visible again by ``now_ms``: (queue id, offset,
        entry), the earliest first, each once (an entry applied twice unchanged has two equal
        items). The entry stays in flight: the caller records what happens to it, or puts it
        back with :meth:`rearm` to be taken again."""
        heap = self._visible.get((group, topic))
        if not heap or not self._drop_stale_top(group, topic, heap) or heap[0][0] > now_ms:
            return None
        top = heapq.heappop(heap)
        while heap and heap[0] == top:
            heapq.heappop(heap)
        _, queue_id, offset = top
        return queue_id, offset, self.in_flight[(group, topic, queue_id)][offset]

    def rearm(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Put an entry taken by :meth:`pop_due` and left as it was back on the heap."""
        held = self.in_flight[(group, topic, queue_id)][offset]
        heapq.heappush(self._visible.setdefault((group, topic), []), (held.visible_at_ms, queue_id, offset))

    def _drop_stale_top(self, group: str, topic: str, heap: list[tuple[int, int, int]]) -> bool:
        """Pop stale items off the top (rebuilding a heap mostly stale); whether a live one is left."""
        if len(heap) > 2 * self._live.get((group, topic), 0) + 1024:
            heap[:] = [(held.visible_at_ms, queue_id, offset)
                       for (g, t, queue_id), entries in self.in_flight.items() if g == group and t == topic
                       for offset, held in entries.items()]
            heapq.heapify(heap)
        while heap:
            visible_at, queue_id, offset = heap[0]
            held = self.in_flight.get((group, topic, queue_id), {}).get(offset)
            if held is not None and held.visible_at_ms == visible_at:
                return True
            heapq.heappop(heap)
        return False


# -- record format (pure) ------------------------------------------------------------------------


def _name(text: str) -> bytes:
    raw = text.encode()
    return _NAME_LEN.pack(len(raw)) + raw


def encode_record(record: Record) -> bytes:
    """One framed record, ready to append."""
    head = _name(record.group) + _name(record.topic)
    if isinstance(record, Invisible):
        payload = (bytes([_KIND_INVISIBLE]) + head + _QUEUE.pack(record.queue_id, record.offset)
                   + _INVISIBLE_TAIL.pack(record.visible_at_ms, record.attempt))
    elif isinstance(record, Ack):
        payload = bytes([_KIND_ACK]) + head + _QUEUE.pack(record.queue_id, record.offset)
    else:
        payload = bytes([_KIND_CURSOR]) + head + _QUEUE.pack(record.queue_id, record.next_offset)
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _decode_payload(payload: bytes) -> Record:
    try:
        kind, pos = payload[0], 1
        names = []
        for _ in range(2):
            (length,) = _NAME_LEN.unpack_from(payload, pos)
            names.append(payload[pos + 2:pos + 2 + length].decode())
            pos += 2 + length
        queue_id, offset = _QUEUE.unpack_from(payload, pos)
        pos += _QUEUE.size
        group, topic = names
        if kind == _KIND_INVISIBLE:
            visible_at_ms, attempt = _INVISIBLE_TAIL.unpack_from(payload, pos)
            return Invisible(group, topic, queue_id, offset, visible_at_ms, attempt)
        if kind == _KIND_ACK:
            return Ack(group, topic, queue_id, offset)
        if kind == _KIND_CURSOR:
            return Cursor(group, topic, queue_id, offset)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise PopLogError(f"undecodable pop log record: {exc}") from exc
    raise PopLogError(f"unknown pop log record kind {kind}")


def decode_records(data: bytes) -> tuple[list[Record], int]:
    """The records of ``data`` up to the first torn or corrupt frame, and the length they cover."""
    records: list[Record] = []
    pos = 0
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        payload = data[pos + _FRAME.size:end]
        if end > len(data) or zlib.crc32(payload) != crc:
            break
        try:
            records.append(_decode_payload(payload))
        except PopLogError:
            break
        pos = end
    return records, pos


def apply(state: PopState, record: Record) -> None:
    """Change ``state`` as ``record`` says (the log's semantics; replay is this in a loop)."""
    key = (record.group, record.topic, record.queue_id)
    if isinstance(record, Invisible):
        entries = state.in_flight.get(key)
        if entries is None:
            entries = state.in_flight[key] = {}
        if record.offset not in entries:
            topic_key = (record.group, record.topic)
            state._live[topic_key] = state._live.get(topic_key, 0) + 1
            heapq.heappush(state._offsets.setdefault(key, []), record.offset)
        entries[record.offset] = InFlight(record.visible_at_ms, record.attempt)
        heapq.heappush(state._visible.setdefault((record.group, record.topic), []),
                       (record.visible_at_ms, record.queue_id, record.offset))
        state.cursors[key] = max(state.cursors.get(key, 0), record.offset + 1)
    elif isinstance(record, Ack):
        entries = state.in_flight.get(key)
        if entries is not None and entries.pop(record.offset, None) is not None:
            state._live[(record.group, record.topic)] -= 1
            if not entries:
                del state.in_flight[key]
                del state._offsets[key]
    else:
        state.cursors[key] = record.next_offset


def snapshot(state: PopState) -> Iterator[Record]:
    """The fewest records that rebuild ``state``: every message in flight, then every cursor (last:
    a cursor record sets the cursor exactly, where an in-flight record only moves it forward)."""
    for (group, topic, queue_id), entries in state.in_flight.items():
        for offset, held in entries.items():
            yield Invisible(group, topic, queue_id, offset, held.visible_at_ms, held.attempt)
    for (group, topic, queue_id), next_offset in state.cursors.items():
        yield Cursor(group, topic, queue_id, next_offset)


# -- the file (I/O) ------------------------------------------------------------------------------


class PopLog:
    """The log file and the state it holds; every change goes through :meth:`append`."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOG_NAME
        self.state = PopState()
        self._fd = -1
        self._size = 0
        self._snapshot_size = 0
        self._unsynced = False
        self._fd_lock = threading.Lock()  # the descriptor, between the loop and the fsync thread

    def open(self) -> None:
        """Replay the file (cutting off a torn tail), compact it, and open it for appends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        records, valid = decode_records(data)
        if valid < len(data):  # goes with the compaction below; its messages can only come back
            log.warning("%s: %d bytes from offset %d do not decode (a write cut short by a crash?); dropped",
                        self.path, len(data) - valid, valid)
        for record in records:
            apply(self.state, record)
        self._compact()

    def append(self, records: Iterable[Record]) -> None:
        """Apply and write ``records`` (one write: a receive of a batch is one system call)."""
        frames = []
        for record in records:
            apply(self.state, record)
            frames.append(encode_record(record))
        if not frames:
            return
        data = b"".join(frames)
        with self._fd_lock:
            os.write(self._fd, data)
            self._unsynced = True
        self._size += len(data)
        if self._size > max(COMPACT_MIN_BYTES, 4 * self._snapshot_size):
            self._compact()

    def sync(self) -> None:
        """fsync what was appended since the last call (periodically, and at close).

        Safe from another thread while the loop appends: it fsyncs a duplicate of the descriptor,
        which a compaction closing (and replacing) the original does not invalidate.
        """
        with self._fd_lock:
            if not self._unsynced or self._fd < 0:
                return
            self._unsynced = False
            fd = os.dup(self._fd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.sync()
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    @property
    def size(self) -> int:
        """Bytes in the file now."""
        return self._size

    def _compact(self) -> None:
        """Replace the file by a snapshot of the state: written beside it, fsynced, renamed over it."""
        data = b"".join(encode_record(record) for record in snapshot(self.state))
        staging = self.path.with_suffix(".compacting")
        with staging.open("wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staging, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        with self._fd_lock:
            if self._fd >= 0:
                os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._unsynced = False
        self._size = self._snapshot_size = len(data)
