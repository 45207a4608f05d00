"""CommitLog: every message of every topic, appended to one sequence of fixed-size segments.

Puts encode outside the lock and only stamp queueOffset, physicalOffset and storeTimestamp
inside it, as RocketMQ's MessageExtEncoder does. A record that would not leave 8 bytes of
room ends the segment with a blank record and goes to the next one. Recovery reads records
with :func:`store.message.decode_record`, the same decoder dispatch uses.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from rocketstore.common.message import (
    DEFAULT_BORN_HOST,
    DEFAULT_STORE_HOST,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MAX_TOPIC_LENGTH_V1,
    MESSAGE_MAGIC_CODE,
    BlankRecord,
    CorruptRecord,
    DecodeResult,
    HostAddress,
    Message,
    StoredMessage,
    SysFlag,
    create_message_id,
    decode_record,
    encode_batch_records,
    encode_blank,
    encode_record,
    host_length,
    properties_to_string,
    stamp_records,
    store_timestamp_pos,
    transaction_type,
    with_host_flags,
)
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.consume_queue import gets_consume_queue_entry
from rocketstore.store.flush import FlushRealTimeService, FlushService, GroupCommitService
from rocketstore.store.mapped_file import MappedFile
from rocketstore.store.mapped_file_queue import AllocateMappedFileService, MappedFileQueue
from rocketstore.store.status import AppendMessageStatus, PutMessageStatus

log = logging.getLogger(__name__)

PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
_ENCODE_HEADROOM = 64 * 1024  # RocketMQ's encoder allows body + 64 KiB for the whole record


@dataclass(slots=True)  # not frozen: built per message, and frozen init costs a setattr per field
class AppendMessageResult:
    """Where a put landed: RocketMQ's AppendMessageResult."""

    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    store_host: HostAddress = DEFAULT_STORE_HOST
    store_timestamp: int = 0
    logics_offset: int = 0
    msg_num: int = 1

    @property
    def msg_id(self) -> str:
        """Offset message id of the first record, computed on demand (most puts never ask)."""
        return create_message_id(self.store_host, self.wrote_offset)


@dataclass(slots=True)  # not frozen: built per message, and frozen init costs a setattr per field
class PutMessageResult:
    status: PutMessageStatus
    append: AppendMessageResult | None = None

    @property
    def ok(self) -> bool:
        return self.status.ok


@dataclass(slots=True)
class MessageBatch:
    """A SEND_BATCH_MESSAGE put: one topic/queue, many bodies (RocketMQ's MessageExtBatch)."""

    topic: str
    queue_id: int
    items: list[tuple[bytes, int, str]]  # (body, flag, properties string) per message
    properties: dict[str, str]
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: HostAddress = DEFAULT_BORN_HOST
    store_host: HostAddress = DEFAULT_STORE_HOST
    reconsume_times: int = 0


class PlainSendPut(Protocol):
    """One of the native ``PlainSend``'s puts (native/src/send.rs): ``put`` for a plain
    SEND_MESSAGE_V2, ``put_batch`` for a plain SEND_BATCH_MESSAGE. (bytes written, records
    written, the response frame, the message id(s)), or None with nothing written."""

    def __call__(self, fields: dict[str, str], body: bytes, topic: str, queue_id: int, sys_flag_bits: int,
                 born_host: bytes, mapping: mmap.mmap, position: int, room: int, file_from_offset: int,
                 queue_offset: int, store_timestamp: int, max_body: int, language: str, opaque: int,
                 version: int) -> tuple[int, int, bytes, str] | None: ...


#: One plain send for :meth:`CommitLog.put_plain_sends`: the native put to make it with, then the
#: request's header fields and body, its topic, queue id and sysFlag bits, the producer's address
#: (8 bytes), and the language, opaque and version its response frame is encoded for.
PlainSendRequest = tuple[PlainSendPut, dict[str, str], bytes, str, int, int, bytes, str, int, int]


class PlainSendEncoder(Protocol):
    """The native ``PlainSend`` (native/src/send.rs): a plain send's or batch's records and response frame."""

    @property
    def put(self) -> PlainSendPut: ...

    @property
    def put_batch(self) -> PlainSendPut: ...

    def serve_frames(self, data: bytes, start: int, max_frame: int, topics: dict[str, tuple[int, int] | None],
                     queue_offsets: dict[str, int], born_host: bytes, mapping: mmap.mmap, position: int, room: int,
                     file_from_offset: int, store_timestamp: int,
                     max_body: int) -> tuple[int, int, bytes, dict[str, int], list[tuple[str, int, int]], str | None]:
        """See :class:`ServedSends` and ``PlainSend::serve_frames``."""
        ...


class ServedSends(NamedTuple):
    """What :meth:`CommitLog.serve_plain_frames` did with the frames at the head of a read."""

    #: bytes of the read served (whole frames from its start)
    consumed: int
    #: the SEND_OK frames of the served sends, back to back, in order
    responses: bytes
    #: one (topic, sends, bytes stored) per run of served sends to one topic
    runs: list[tuple[str, int, int]]
    #: the topic the caller's table did not know, when that is what stopped the serving
    unknown_topic: str | None
    #: from taking the put lock to the wake-ups after the puts (as :attr:`PlainPut.elapsed_s`)
    elapsed_s: float


class PlainPut(NamedTuple):
    """Where a plain send landed, how many records it wrote (a batch's, or 1), its offset message
    id (a batch's: every record's, comma-joined), its encoded SEND_OK response frame and how long
    the put took (from taking the put lock to the wake-ups after it: one clock pair serves the
    store's put statistics and the broker's send latency)."""

    wrote_offset: int
    wrote_bytes: int
    queue_offset: int
    msg_num: int
    msg_id: str
    frame: bytes
    elapsed_s: float
    #: PUT_OK, or SLAVE_NOT_AVAILABLE: a SYNC_MASTER put stored while no slave was OK
    #: (:meth:`DefaultMessageStore.put_plain_sends`)
    status: PutMessageStatus = PutMessageStatus.PUT_OK


@dataclass(frozen=True, slots=True)
class CommitLogSettings:
    """What the CommitLog reads from StoreConfig, as callables so live changes apply at once."""

    store_path: str
    file_size: int
    sync_flush: bool
    max_message_size: Callable[[], int]
    sync_flush_timeout_ms: Callable[[], int]
    flush_interval_ms: Callable[[], int]
    flush_least_pages: Callable[[], int]
    flush_thorough_interval_ms: Callable[[], int]
    check_crc_on_recover: bool = True


class CommitLog:
    """The segment sequence plus the put path, flushing and recovery."""

    def __init__(self, settings: CommitLogSettings, checkpoint: StoreCheckpoint) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.allocator = AllocateMappedFileService(settings.file_size)
        self.mapped_file_queue = MappedFileQueue(settings.store_path, settings.file_size, self.allocator)
        self.topic_queue_table: dict[str, int] = {}
        self.put_lock = threading.Lock()
        self.begin_time_in_lock = 0.0
        self.on_appended: Callable[[], None] = lambda: None
        self.flush_service: FlushService
        if settings.sync_flush:
            self.flush_service = GroupCommitService(self.mapped_file_queue, self._stamp_physic)
        else:
            self.flush_service = FlushRealTimeService(
                self.mapped_file_queue, self._stamp_physic,
                interval_ms=settings.flush_interval_ms, least_pages=settings.flush_least_pages,
                thorough_interval_ms=settings.flush_thorough_interval_ms,
            )

    def _stamp_physic(self, timestamp: int) -> None:
        self.checkpoint.physic_msg_timestamp = timestamp

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        self.mapped_file_queue.load()

    def start(self) -> None:
        self.flush_service.start()

    def shutdown(self) -> None:
        self.flush_service.shutdown()
        self.allocator.shutdown()
        self.mapped_file_queue.shutdown()

    # -- offsets ---------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First readable offset; -1 when empty. A first segment being destroyed is skipped."""
        first = self.mapped_file_queue.first
        if first is None:
            return -1
        if first.is_available:
            return first.file_from_offset
        return self.roll_next_file(first.file_from_offset)

    @property
    def max_offset(self) -> int:
        return self.mapped_file_queue.max_offset

    def roll_next_file(self, offset: int) -> int:
        size = self.settings.file_size
        return offset + size - offset % size

    def queue_key(self, topic: str, queue_id: int) -> str:
        return f"{topic}-{queue_id}"

    # -- put -------------------------------------------------------------------------------
    def check_message(self, topic: str, properties_length: int) -> PutMessageStatus | None:
        """Reject what RocketMQ rejects before touching the log (checkMessage in DefaultMessageStore)."""
        if len(topic.encode()) > MAX_TOPIC_LENGTH_V1:
            log.warning("put refused: topic %r longer than %d bytes", topic[:40], MAX_TOPIC_LENGTH_V1)
            return PutMessageStatus.MESSAGE_ILLEGAL
        if properties_length > MAX_PROPERTIES_LENGTH:
            log.warning("put refused: properties are %d bytes, the limit is %d", properties_length,
                        MAX_PROPERTIES_LENGTH)
            return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
        return None

    def put_message(self, msg: Message, *, wait_flush: bool = True) -> PutMessageResult:
        """Append one message; with SYNC_FLUSH return only once it is durable, unless
        ``wait_flush`` is False (the caller then waits with :meth:`request_flush`)."""
        props = properties_to_string(msg.properties).encode()
        refused = self.check_message(msg.topic, len(props))
        if refused is not None:
            return PutMessageResult(refused)
        max_size = self.settings.max_message_size()
        if len(msg.body) > max_size:
            log.warning("put refused: body of %d bytes exceeds maxMessageSize %d", len(msg.body), max_size)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        sys_flag = with_host_flags(msg.sys_flag, msg.born_host, msg.store_host)
        record = encode_record(
            topic_data=msg.topic.encode(), body=msg.body, properties_data=props, queue_id=msg.queue_id,
            flag=msg.flag, sys_flag=sys_flag, born_timestamp=msg.born_timestamp,
            born_host=msg.born_host.to_bytes(), store_host=msg.store_host.to_bytes(),
            reconsume_times=msg.reconsume_times, prepared_transaction_offset=msg.prepared_transaction_offset,
        )
        if len(record) > max_size + _ENCODE_HEADROOM:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        result = self._append(record, 1, msg.topic, msg.queue_id, sys_flag, msg.store_host)
        return self._after_append(result, wait_flush and msg.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false")

    def put_messages(self, batch: MessageBatch, *, wait_flush: bool = True) -> PutMessageResult:
        """Append a batch as consecutive records in one segment (RocketMQ's batch put).

        Each item becomes its own record; the batch's own properties are appended to each
        item's, with a separator when needed, exactly as MessageExtBatchEncoder does.
        """
        if transaction_type(batch.sys_flag) != 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)  # batches cannot be transactional
        batch_props = properties_to_string(batch.properties).encode()
        refused = self.check_message(batch.topic, len(batch_props))
        if refused is not None:
            return PutMessageResult(refused)
        sys_flag = with_host_flags(batch.sys_flag, batch.born_host, batch.store_host)
        encoded = encode_batch_records(
            batch.items, batch_props, topic_data=batch.topic.encode(), queue_id=batch.queue_id, sys_flag=sys_flag,
            born_timestamp=batch.born_timestamp, born_host=batch.born_host.to_bytes(),
            store_host=batch.store_host.to_bytes(), reconsume_times=batch.reconsume_times,
        )
        if encoded is None:
            return PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED)
        payload, count, wire_size = encoded
        # RocketMQ limits the batch's wire body (20-byte item header + body + 2 + properties)
        if not count or wire_size > self.settings.max_message_size():
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        result = self._append(payload, count, batch.topic, batch.queue_id, sys_flag, batch.store_host)
        return self._after_append(result, wait_flush)

    def _append(
        self, payload: bytearray, count: int, topic: str, queue_id: int, sys_flag: int, store_host: HostAddress
    ) -> PutMessageResult:
        """Write ``count`` encoded records (back to back in ``payload``) at the end of the log."""
        total = len(payload)
        key = f"{topic}-{queue_id}"
        counts_in_queue = gets_consume_queue_entry(sys_flag)
        if total + END_FILE_MIN_BLANK_LENGTH > self.settings.file_size:
            # refuse before the loop below ends the current segment with a blank for a record
            # that cannot fit even an empty one (a refused put must leave the log untouched)
            log.error("record of %d bytes cannot fit a %d-byte segment", total, self.settings.file_size)
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        with self.put_lock:
            self.begin_time_in_lock = time.monotonic()
            try:
                now_ms = int(time.time() * 1000)
                mapped = self.mapped_file_queue.get_last_mapped_file(0)
                for attempt in range(2):
                    if mapped is None:
                        return PutMessageResult(PutMessageStatus.CREATE_MAPPED_FILE_FAILED)
                    room = mapped.file_size - mapped.wrote_position
                    if total + END_FILE_MIN_BLANK_LENGTH <= room:
                        break
                    if attempt == 1 or mapped.wrote_position == 0:
                        log.error("record of %d bytes does not fit an empty %d-byte segment", total,
                                  mapped.file_size)
                        return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
                    mapped.append_with(lambda mm, pos, left: self._write_blank(mm, pos, left))
                    mapped = self.mapped_file_queue.get_last_mapped_file(0)
                assert mapped is not None
                queue_offset = self.topic_queue_table.get(key, 0)
                wrote_offset = mapped.file_from_offset + mapped.wrote_position

                def write(mm: mmap.mmap, pos: int, room: int) -> int:
                    # Stamp our own (private, not yet shared) encoding, then copy it into the
                    # mapping in one go: stamping in the mapping let a kill -9 between copy and
                    # stamp leave CRC-valid records with queueOffset/physicalOffset/storeTimestamp
                    # 0, which recovery accepts. The write position is published after this
                    # returns, so dispatch never sees a record without its offsets either.
                    stamp_records(payload, count, queue_offset, wrote_offset, now_ms, sys_flag, counts_in_queue)
                    mm[pos : pos + total] = payload
                    return total

                try:
                    mapped.append_with(write)
                except (OSError, ValueError) as exc:
                    log.error("append to %s failed: %s", mapped.path, exc)
                    return PutMessageResult(PutMessageStatus.UNKNOWN_ERROR)
                mapped.store_timestamp = now_ms
                if counts_in_queue:
                    self.topic_queue_table[key] = queue_offset + count
            finally:
                self.begin_time_in_lock = 0.0
        self.on_appended()
        append = AppendMessageResult(
            AppendMessageStatus.PUT_OK, wrote_offset, total, store_host, now_ms,
            queue_offset if counts_in_queue else 0, count,
        )
        return PutMessageResult(PutMessageStatus.PUT_OK, append)

    def put_plain_sends(self, sends: Sequence[PlainSendRequest]) -> list[PlainPut]:
        """Plain sends and batches (see ``rocketstore.broker.processor.send``) put under one taking
        of the lock, in order, each in one native call: its records encoded, stamped (consecutive
        queue offsets for a batch) and copied in at the end of the last segment, and its SEND_OK
        frame (to a request of its ``language``, ``opaque`` and ``version``) encoded.

        Returns the puts of the longest prefix of ``sends`` the native calls took: the first one
        found not plain, not fitting the segment's room, or there being no segment yet, ends it,
        and the caller takes that send through the reference path, which also creates and rolls
        segments. The sends of one event-loop pass come here together, so that the lock, the
        segment lookup, the publication and the wake-ups after it cost once per pass, not per send.

        What the prefix wrote is published at once (:meth:`MappedFile.advance`) after every record
        of it is in place, and the queue-offset table is updated then: if a call raises, nothing of
        the group is published or counted, as if none of it had been put.
        """
        placed: list[tuple[int, int, int, int, str, bytes]] = []
        with self.put_lock:
            self.begin_time_in_lock = begin = time.monotonic()
            try:
                # the reference path creates segments: a put it refuses leaves the store without one
                mapped = self.mapped_file_queue.get_last_mapped_file(0, need_create=False)
                if mapped is None:
                    return []
                now_ms = int(time.time() * 1000)
                table = self.topic_queue_table
                offsets: dict[str, int] = {}
                buffer, base, size = mapped.buffer, mapped.file_from_offset, mapped.file_size
                max_size = self.settings.max_message_size()
                start = pos = mapped.wrote_position
                for put, fields, body, topic, queue_id, sys_flag_bits, born_host, language, opaque, version in sends:
                    key = f"{topic}-{queue_id}"
                    queue_offset = offsets.get(key)
                    if queue_offset is None:
                        queue_offset = table.get(key, 0)
                    done = put(fields, body, topic, queue_id, sys_flag_bits, born_host, buffer, pos, size - pos, base,
                               queue_offset, now_ms, max_size, language, opaque, version)
                    if done is None:
                        break
                    wrote_bytes, msg_num, encoded, msg_id = done
                    offsets[key] = queue_offset + msg_num
                    placed.append((base + pos, wrote_bytes, queue_offset, msg_num, msg_id, encoded))
                    pos += wrote_bytes
                if not placed:
                    return []
                mapped.advance(pos - start)  # published after the stamped records are in place
                mapped.store_timestamp = now_ms
                table.update(offsets)
            finally:
                self.begin_time_in_lock = 0.0
        self.on_appended()
        elapsed_s = time.monotonic() - begin
        return [PlainPut(*where, elapsed_s) for where in placed]

    def serve_plain_frames(self, encoder: PlainSendEncoder, data: bytes, start: int, max_frame: int,
                           topics: dict[str, tuple[int, int] | None], born_host: bytes) -> ServedSends:
        """Plain SEND_MESSAGE_V2 requests at the head of ``data[start:]`` (remoting frames as a
        connection read them) stored under one taking of the lock in one native call, which walks
        the frames, decodes their headers and stores and answers each as :meth:`put_plain_sends`
        would (``PlainSend::serve_frames`` in native/src/send.rs). ``topics``: each topic's sysFlag
        bits and queue bound, or None for a topic whose sends are not plain, as the caller decided.

        Serving stops at the first frame that is not such a send, does not fit the segment's room,
        or goes to a topic ``topics`` does not know (named in the result, for the caller to decide
        on and call again); with no segment yet nothing is served. That frame and the rest take the
        connection's usual path, which also rolls segments. What was stored is published and the
        queue-offset table updated once, after every record is in place, as in
        :meth:`put_plain_sends`.
        """
        with self.put_lock:
            self.begin_time_in_lock = begin = time.monotonic()
            try:
                mapped = self.mapped_file_queue.get_last_mapped_file(0, need_create=False)
                if mapped is None:
                    return ServedSends(0, b"", [], None, 0.0)
                now_ms = int(time.time() * 1000)
                table = self.topic_queue_table
                position = mapped.wrote_position
                consumed, wrote, responses, offsets, runs, unknown = encoder.serve_frames(
                    data, start, max_frame, topics, table, born_host, mapped.buffer, position,
                    mapped.file_size - position, mapped.file_from_offset, now_ms, self.settings.max_message_size())
                if not wrote:
                    return ServedSends(0, b"", [], unknown, 0.0)
                mapped.advance(wrote)  # published after the stamped records are in place
                mapped.store_timestamp = now_ms
                table.update(offsets)
            finally:
                self.begin_time_in_lock = 0.0
        self.on_appended()
        return ServedSends(consumed, responses, runs, unknown, time.monotonic() - begin)

    @staticmethod
    def _write_blank(mm: mmap.mmap, pos: int, left: int) -> int:
        mm[pos : pos + END_FILE_MIN_BLANK_LENGTH] = encode_blank(left)
        return left

    def _after_append(self, result: PutMessageResult, wait: bool) -> PutMessageResult:
        if result.append is None or not self.settings.sync_flush:
            return result
        assert isinstance(self.flush_service, GroupCommitService)
        end = result.append.wrote_offset + result.append.wrote_bytes
        if not wait:
            self.flush_service.wakeup()
            return result
        if self.flush_service.wait_flushed(end, self.settings.sync_flush_timeout_ms() / 1000):
            return result
        log.warning("sync flush of offset %d timed out after %d ms", end, self.settings.sync_flush_timeout_ms())
        return PutMessageResult(PutMessageStatus.FLUSH_DISK_TIMEOUT, result.append)

    def request_flush(self, end_offset: int, on_durable: Callable[[], None]) -> bool:
        """SYNC_FLUSH: see :meth:`GroupCommitService.request_flush`; False (nothing to wait for)
        when the offset is durable already or the log flushes asynchronously."""
        if not isinstance(self.flush_service, GroupCommitService):
            return False
        return self.flush_service.request_flush(end_offset, on_durable)

    def wait_flushed(self, end_offset: int) -> bool:
        """SYNC_FLUSH: block until the log is durable up to ``end_offset`` or syncFlushTimeout
        passes; True when durable (always True when the log flushes asynchronously)."""
        if not isinstance(self.flush_service, GroupCommitService):
            return True
        if self.flush_service.wait_flushed(end_offset, self.settings.sync_flush_timeout_ms() / 1000):
            return True
        log.warning("sync flush of offset %d timed out after %d ms", end_offset, self.settings.sync_flush_timeout_ms())
        return False

    # -- replication -----------------------------------------------------------------------
    def hold_data(self, offset: int) -> tuple[MappedFile, int, int] | None:
        """RocketMQ's getData for the HA master: the segment holding ``offset``, held (the caller
        must ``release()`` it), with ``offset``'s position in it and the segment's written end.

        None when nothing is written at ``offset`` yet, or the segment is gone or going.
        """
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset, offset == 0)
        if mapped is None:
            return None
        pos = offset - mapped.file_from_offset
        limit = mapped.read_position
        if pos < 0 or pos >= limit or not mapped.hold():
            return None
        return mapped, pos, limit

    def append_data(self, start_offset: int, chunks: Sequence[bytes | bytearray | memoryview]) -> bool:
        """Append bytes replicated from the master unchanged at ``start_offset`` (RocketMQ's
        appendData; ``chunks`` are consecutive stretches, written in order); False when they do not
        continue the log or do not fit its segment.

        The first append of an empty log creates the segment holding ``start_offset``; an append
        after a full segment creates the next one, so the slave's segments are named and cut
        exactly as the master's (a master frame never spans two segments). A segment's first append
        preallocates it (:meth:`MappedFile.preallocate`). One positional write (see
        :meth:`MappedFile.append_through_file`); dispatch is woken afterwards.
        """
        with self.put_lock:
            mapped = self.mapped_file_queue.get_last_mapped_file(start_offset)
            if mapped is None:
                log.error("replicated data at %d: no segment could be created", start_offset)
                return False
            where = mapped.file_from_offset + mapped.wrote_position
            if where != start_offset:
                log.error("replicated data starts at %d but the CommitLog ends at %d", start_offset, where)
                return False
            if mapped.wrote_position == 0:
                mapped.preallocate()
            if not mapped.append_through_file(chunks):
                log.error("replicated data of %d bytes at %d does not fit segment %s", sum(map(len, chunks)),
                          start_offset, mapped.file_name)
                return False
        self.on_appended()
        return True

    def lock_held_ms(self) -> float:
        """How long the current put has held the lock (0 if none): the page-cache-busy signal."""
        begin = self.begin_time_in_lock
        return (time.monotonic() - begin) * 1000 if begin else 0.0

    # -- read ------------------------------------------------------------------------------
    def get_message(self, offset: int, size: int) -> bytes | None:
        """The raw bytes of the record at ``offset`` (None once deleted or not yet written)."""
        # No first-file fallback for offset 0 (RocketMQ passes offset == 0): once segment 0 is
        # deleted it would return the bytes of another record instead of None.
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped is None:
            return None
        return mapped.read(offset % self.settings.file_size, size)

    def look_message_by_offset(self, offset: int, size: int | None = None) -> StoredMessage | None:
        """Decode the record at ``offset``; reads its size first when not given."""
        if size is None:
            head = self.get_message(offset, 4)
            if head is None:
                return None
            size = int.from_bytes(head, "big", signed=True)
            if size <= 0:
                return None
        data = self.get_message(offset, size)
        if data is None:
            return None
        decoded = decode_record(data, 0, check_crc=False)
        return decoded if isinstance(decoded, StoredMessage) else None

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        """Store time of the record at ``offset``; -1 when it is gone or unreadable."""
        if offset < self.min_offset:
            return -1
        data = self.get_message(offset, size)
        if data is None or len(data) < 64:
            return -1
        sys_flag = int.from_bytes(data[36:40], "big", signed=True)
        pos = store_timestamp_pos(sys_flag)
        return int.from_bytes(data[pos : pos + 8], "big", signed=True)

    def records_in(self, mapped: MappedFile, start: int = 0, *, check_crc: bool) -> Iterator[tuple[int, DecodeResult]]:
        """Decode records of one segment from ``start`` until a blank or corrupt record.

        Yields (position in segment, result). The final result is the blank or corrupt
        record that ended the walk, or nothing when the written area ends cleanly.
        """
        if not mapped.hold():
            return
        try:
            buf = mapped.buffer
            pos = start
            limit = mapped.read_position
            while pos < limit:
                result = decode_record(buf, pos, check_crc=check_crc, read_body=False)
                yield pos, result
                if not isinstance(result, StoredMessage):
                    return
                pos += result.total_size
        finally:
            mapped.release()

    # -- recovery --------------------------------------------------------------------------
    def recover_normally(self, max_phy_offset_of_consume_queue: int) -> tuple[int, bool]:
        """Clean-shutdown recovery: re-check the last three segments, cut at the first bad record.

        Returns (end offset, whether consume queues must be truncated past it).
        """
        files = self.mapped_file_queue.mapped_files
        if not files:
            self.mapped_file_queue.set_flushed_where(0)
            return 0, True
        process_offset = self._scan_valid_end(max(len(files) - 3, 0))
        self.mapped_file_queue.set_flushed_where(process_offset)
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        return process_offset, max_phy_offset_of_consume_queue >= process_offset

    def recover_abnormally(self, max_phy_offset_of_consume_queue: int, min_timestamp: int) -> tuple[int, bool, int]:
        """Crash recovery: start at the newest segment older than the checkpoint and cut at the first bad record.

        Returns (end offset, whether consume queues must be truncated past it, the offset from
        which dispatch must rebuild the indexes: the start of that segment).
        """
        files = self.mapped_file_queue.mapped_files
        if not files:
            self.mapped_file_queue.set_flushed_where(0)
            return 0, True, 0
        index = 0
        for i in range(len(files) - 1, -1, -1):
            if self._matched_recover(files[i], min_timestamp):
                index = i
                break
        process_offset = self._scan_valid_end(index)
        self.mapped_file_queue.set_flushed_where(process_offset)
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        return process_offset, max_phy_offset_of_consume_queue >= process_offset, files[index].file_from_offset

    def _matched_recover(self, mapped: MappedFile, min_timestamp: int) -> bool:
        buf = mapped.buffer
        if int.from_bytes(buf[4:8], "big", signed=True) != MESSAGE_MAGIC_CODE:
            return False
        sys_flag = int.from_bytes(buf[36:40], "big", signed=True)
        pos = 48 + host_length(sys_flag, SysFlag.BORNHOST_V6)
        store_timestamp = int.from_bytes(buf[pos : pos + 8], "big", signed=True)
        return store_timestamp != 0 and store_timestamp <= min_timestamp

    def _scan_valid_end(self, index: int) -> int:
        files = self.mapped_file_queue.mapped_files
        check_crc = self.settings.check_crc_on_recover
        while True:
            mapped = files[index]
            end_pos = 0
            ended_by: DecodeResult | None = None
            for pos, result in self.records_in(mapped, 0, check_crc=check_crc):
                if isinstance(result, StoredMessage):
                    end_pos = pos + result.total_size
                else:
                    ended_by = result
            if isinstance(ended_by, BlankRecord) and index + 1 < len(files):
                index += 1
                continue
            if isinstance(ended_by, CorruptRecord) and not _all_zero(mapped.buffer, end_pos):
                wiped = _wipe_torn_tail(mapped.buffer, end_pos)
                log.warning("recovery stops in %s at %d: %s; %d bytes after it zeroed", mapped.file_name, end_pos,
                            ended_by.reason, wiped)
            return mapped.file_from_offset + end_pos

    # -- truncation ------------------------------------------------------------------------
    def is_offset_aligned(self, offset: int) -> bool:
        """Whether ``offset`` is a place the log may be cut: its end, or the start of a record
        (or of the blank that ends a segment) whose CRC checks (isOffsetAligned)."""
        if offset == self.max_offset:
            return True
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped is None or not mapped.hold():
            return False
        try:
            pos = offset - mapped.file_from_offset
            if pos >= mapped.read_position:
                return False
            result = decode_record(mapped.buffer, pos, check_crc=True, read_body=False)
        finally:
            mapped.release()
        if isinstance(result, StoredMessage):
            return pos + result.total_size <= mapped.read_position
        return isinstance(result, BlankRecord)

    def truncate_dirty_files(self, offset: int) -> None:
        """Discard everything from ``offset`` on (truncateDirtyFiles): the records are zeroed,
        later segments deleted (see :meth:`MappedFileQueue.truncate_dirty_files`). Holds the put
        lock, so no put or replicated append lands meanwhile.

        First the checkpoint is lowered below the store time of the first discarded record (and
        so are the flush timestamps it is later stamped from): it must not vouch for records
        that are gone, or crash recovery would trust segments written after the cut that were
        never flushed. Done before the cut, while that record can still be read.
        """
        with self.put_lock:
            mfq = self.mapped_file_queue
            first_discarded = self.look_message_by_offset(offset) or \
                self.look_message_by_offset(self.roll_next_file(offset))  # after a blank
            if first_discarded is not None:
                stamp = first_discarded.store_timestamp - 1
                checkpoint = self.checkpoint
                checkpoint.physic_msg_timestamp = min(checkpoint.physic_msg_timestamp, stamp)
                checkpoint.logics_msg_timestamp = min(checkpoint.logics_msg_timestamp, stamp)
                checkpoint.flush()
                mfq.store_timestamp = min(mfq.store_timestamp, stamp)
                for mapped in mfq:
                    mapped.store_timestamp = min(mapped.store_timestamp, stamp)
            mfq.truncate_dirty_files(offset, wipe=True)
            self.allocator.discard_ahead()
            if mfq.flushed_where > offset:
                mfq.set_flushed_where(offset)

    # -- cleanup ---------------------------------------------------------------------------
    def delete_expired_file(
        self, expired_ms: int, delete_files_interval_ms: int, interval_forcibly_ms: int, clean_immediately: bool
    ) -> int:
        return self.mapped_file_queue.delete_expired_file_by_time(
            expired_ms, delete_files_interval_ms, interval_forcibly_ms, clean_immediately
        )

    def retry_delete_first_file(self, interval_forcibly_ms: int) -> bool:
        return self.mapped_file_queue.retry_delete_first_file(interval_forcibly_ms)

    def remain_to_flush(self) -> int:
        return self.mapped_file_queue.remain_to_flush()


def _all_zero(buf: mmap.mmap, pos: int) -> bool:
    """Whether the bytes at ``pos`` look like never-written space (the normal end of a log)."""
    return buf[pos : pos + 8] == b"\x00" * 8


_ZERO_CHUNK: Final = bytes(1 << 20)


def _wipe_torn_tail(buf: mmap.mmap, pos: int) -> int:
    """Zero what follows the last whole record, up to the first all-zero page; returns the count.

    A kill -9 in the middle of copying a record leaves some of its bytes (memcpy does not copy
    front to back), and recovery cuts the log before them. RocketMQ leaves them until the next
    append overwrites them; until then anything that walks the segment (``store verify``,
    another tool) meets bytes that look like corruption inside the log. Recovery discards them
    anyway, so zeroing them, back to the never-written state, loses nothing. Appends are
    sequential, so the torn bytes end within the in-flight copy: the first zero page after
    them bounds the wipe.
    """
    page = mmap.PAGESIZE
    end = len(buf)
    zero_page = _ZERO_CHUNK[:page]
    stop = min(end, (pos // page + 1) * page)
    while stop < end and buf[stop : stop + page] != zero_page[: min(page, end - stop)]:
        stop += page
    stop = min(stop, end)
    cursor = pos
    while cursor < stop:
        n = min(len(_ZERO_CHUNK), stop - cursor)
        buf[cursor : cursor + n] = _ZERO_CHUNK[:n]
        cursor += n
    buf.flush()
    return stop - pos


def segment_paths(store_path: str) -> list[str]:
    """CommitLog segment files in offset order (offline tooling opens them read-only)."""
    if not os.path.isdir(store_path):
        return []
    return [os.path.join(store_path, n) for n in sorted(os.listdir(store_path)) if n.isdigit()]

