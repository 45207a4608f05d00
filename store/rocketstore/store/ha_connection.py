"""HAConnection: the master's side of one slave connection (RocketMQ's HAConnection).

A reader and a writer, as in RocketMQ (abstract_ha_connection runs them; this module holds the
4.x frames):

* the reader takes the slave's 8-byte offset reports: the first one says where to start, every
  one acknowledges (and releases SYNC_MASTER waiters through the service). A slave silent for
  ``haHousekeepingInterval`` is dropped. A slave reporting more than the master has is refused.
* the writer streams the CommitLog from the transfer start as ``[offset][size][body]`` frames of
  at most ``haTransferBatchSize`` bytes from one segment, and a heartbeat frame (size 0) after
  ``haSendHeartbeatInterval`` without anything sent.

The writer thread sends each frame's body straight from its segment's file (``sendfile``,
:func:`rocketstore.store.ha_io.send_from_file`), a run of frames up to :data:`GATHER_BYTES` per
turn; the loop's :meth:`HAConnection.push` gathers a run of frames (header bytes plus memoryviews
of the mapping, no copy in Python) into one non-blocking ``sendmsg``. Segments are held while
they are being sent from, so deletion waits for the send.

On a broker (HAService.attach_loop) the reports are read on its event loop, and the loop sends
what each of its passes appended itself (:meth:`HAConnection.push`): a SYNC_MASTER send's round
trip then has no thread in it. The writer thread keeps what would make the loop wait: the
catch-up, the heartbeats, and the rest of a send the socket did not take at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from typing import Final, Protocol

from rocketstore.common.clock import now_ms
from rocketstore.store.abstract_ha_connection import AbstractHAConnection, HAConnectionOwner
from rocketstore.store.ha_io import GATHER_FRAMES, send_all, send_from_file
from rocketstore.store.ha_protocol import (
    batch_end,
    encode_header,
    last_report,
    slave_ahead_error,
    transfer_start,
    unacknowledged_record,
)
from rocketstore.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

GATHER_BYTES: Final = 4 * 1024 * 1024
"""Body bytes one turn of the writer, or one push, sends at most."""


class ConnectionOwner(HAConnectionOwner, Protocol):
    """What a 4.x connection needs from the HAService that accepted it, besides any connection's needs."""

    def notify_transfer_some(self, offset: int) -> None: ...

    def refuse_slave(self, address: str, slave_offset: int, master_offset: int, reason: str) -> None: ...


class HAConnection(AbstractHAConnection[ConnectionOwner]):
    """One slave: its offset reports in, the CommitLog's frames out."""

    def __init__(self, service: ConnectionOwner, sock: socket.socket, address: str,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        super().__init__(service, sock, address, "HAReadSocketService", "HAWriteSocketService", loop)
        self._lag_boundary = -1  # a record start at or before acked_offset, for lag_seconds
        #: whoever sends holds it: the writer thread, or the loop's :meth:`push` (which never waits for it)
        self._send_lock = threading.Lock()
        #: the tail of a frame the loop's push could not finish; the writer sends it first
        self._unsent = b""
        #: the loop's push left data to the writer thread (the socket was full, or a batch was large)
        self._handed_over = False

    # -- reader ----------------------------------------------------------------------------
    def _on_read(self, pending: bytearray) -> bool:
        offset, used = last_report(pending)
        if offset is None:
            return True
        del pending[:used]
        return self._on_report(offset)

    def _on_report(self, offset: int) -> bool:
        """Take one report; False when the slave must be refused (it is ahead of the master)."""
        master_max = self.service.commit_log.max_offset
        refusal = slave_ahead_error(offset, master_max)
        if refusal is not None:
            self.service.refuse_slave(self.address, offset, master_max, refusal)
            if self.slave_request_offset < 0:
                # the writer has not started: tell the slave where this log really ends, in a
                # heartbeat it cannot take as a continuation, so it refuses (and says why) too
                with contextlib.suppress(OSError):
                    self.sock.sendall(encode_header(master_max, 0))
            return False
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            self.next_transfer_from = self._lag_boundary = transfer_start(
                offset, master_max, self.service.config.mapped_file_size_commit_log)
            log.info("HA: transferring to slave %s from offset %d (it requested %d)", self.address,
                     self.next_transfer_from, offset)
            self._wake_writer()
        self.acked_offset = offset
        self.service.notify_transfer_some(offset)
        return True

    # -- writer ----------------------------------------------------------------------------
    def _stream(self) -> None:
        with self._wake:  # the reader sets next_transfer_from from the slave's first report
            self._wake.wait_for(lambda: self.next_transfer_from >= 0 or self._stopped)
        while not self._stopped:
            with self._send_lock:
                sent = self._send_unsent() or self._send_from_file()
                if not sent:
                    self._handed_over = False
            if not sent:
                self._idle()

    def _sleep(self, timeout_s: float) -> None:
        if self.loop is None:
            super()._sleep(timeout_s)
            return
        # the loop pushes new data itself: this thread waits only for what the loop hands over
        with self._wake:
            self._wake.wait_for(lambda: self._handed_over or self._stopped, timeout_s)

    def push(self) -> None:
        """On the loop, after a pass that appended: send the new data now, without waiting.

        It sends what the socket takes at once (MSG_DONTWAIT) and never waits for the writer
        thread: when that thread is sending, it sends the new data too. What the socket did not
        take, or a batch past :data:`GATHER_BYTES`, is handed over to the thread.
        """
        if self.next_transfer_from < 0 or self._stopped or not self._send_lock.acquire(blocking=False):
            return
        try:
            if self._handed_over:
                return
            try:
                self._push_data()
            except OSError as exc:  # the writer thread meets the same error and closes
                log.debug("HA: push to slave %s failed: %s", self.address, exc)
                self._handed_over = True
        finally:
            self._send_lock.release()
        if self._handed_over:
            self._wake_writer()

    def _send_unsent(self) -> bool:
        if not self._unsent:
            return False
        send_all(self.sock, [self._unsent])
        self._unsent = b""
        self._last_write_ms = now_ms()
        return True

    def _send_heartbeat(self) -> None:
        with self._send_lock:  # the loop's push may be sending
            if self._unsent:  # the tail of a frame goes first; the writer sends it at once
                return
            send_all(self.sock, [encode_header(self.next_transfer_from, 0)])
            self._last_write_ms = now_ms()

    def _send_from_file(self) -> bool:
        """The writer thread's turn: frames from ``next_transfer_from`` to the written end of its
        segment, :data:`GATHER_BYTES` at most, each body sent from the segment's file; False when
        there is nothing to send. A finished segment's last frame ends the turn; the next turn
        starts in the next segment."""
        found = self.service.commit_log.hold_data(self.next_transfer_from)
        if found is None:
            return False
        mapped, pos, limit = found
        batch = self.service.config.ha_transfer_batch_size
        end = min(limit, pos + GATHER_BYTES)
        try:
            while pos < end:
                size = batch_end(pos, end, batch) - pos
                send_from_file(self.sock, encode_header(self.next_transfer_from, size), mapped.fileno(), pos, size)
                pos += size
                self.next_transfer_from += size
        finally:
            mapped.release()
        self._last_write_ms = now_ms()
        return True

    def _push_data(self) -> None:
        """The loop's push: one non-blocking sendmsg of the frames from ``next_transfer_from``.

        A frame it sent in part leaves its tail in :attr:`_unsent`, and the frames after it stay
        for the writer thread (:attr:`_handed_over`), as does anything past a full gather."""
        commit_log = self.service.commit_log
        batch = self.service.config.ha_transfer_batch_size
        offset = self.next_transfer_from
        parts: list[bytes | memoryview] = []
        held: list[tuple[MappedFile, memoryview]] = []
        total = 0
        try:
            while total < GATHER_BYTES and len(parts) < 2 * GATHER_FRAMES:
                found = commit_log.hold_data(offset)
                if found is None:
                    break
                mapped, pos, limit = found
                view = memoryview(mapped.buffer)
                held.append((mapped, view))
                while pos < limit and total < GATHER_BYTES and len(parts) < 2 * GATHER_FRAMES:
                    size = batch_end(pos, limit, batch) - pos
                    parts.append(encode_header(offset, size))
                    parts.append(view[pos:pos + size])
                    pos += size
                    offset += size
                    total += size
                if pos < mapped.file_size:  # the segment is not finished: its end is the log's end
                    break
            if not parts:
                return
            offset = self._send_now(parts, offset, total >= GATHER_BYTES or len(parts) >= 2 * GATHER_FRAMES)
        finally:
            for part in parts:
                if isinstance(part, memoryview):
                    part.release()
            for mapped, view in held:
                view.release()
                mapped.release()
        self.next_transfer_from = offset
        self._last_write_ms = now_ms()

    def _send_now(self, parts: list[bytes | memoryview], end: int, more: bool) -> int:
        """One non-blocking sendmsg of ``parts`` (header, body pairs ending at ``end``); returns
        where the next transfer starts."""
        try:
            sent = self.sock.sendmsg(parts, [], socket.MSG_DONTWAIT)
        except BlockingIOError:
            sent = 0
        total = sum(len(part) for part in parts)
        if sent == total:
            if more:
                self._handed_over = True
            return end
        self._handed_over = True
        # walk the frames to the one the send stopped in: its tail is copied, the rest resent
        offset = self.next_transfer_from
        pos = 0
        for index in range(0, len(parts), 2):
            header, body = parts[index], parts[index + 1]
            frame = len(header) + len(body)
            if pos + frame > sent:
                if sent > pos:  # stopped inside this frame: it must be finished before any other
                    self._unsent = (bytes(header) + bytes(body))[sent - pos:]
                    return offset + len(body)
                return offset
            pos += frame
            offset += len(body)
        return offset

    # -- lag -------------------------------------------------------------------------------
    def lag_seconds(self, master_max: int) -> float:
        """Store time of the master's newest record minus that of the first record this slave has
        not acknowledged: 0 when caught up, -1 when it cannot be told (see SlaveInfo)."""
        acked = self.acked_offset
        if acked < 0 or self._lag_boundary < 0:
            return -1.0
        if acked >= master_max:
            return 0.0
        commit_log = self.service.commit_log

        def size_at(offset: int) -> int | None:
            head = commit_log.get_message(offset, 4)
            return int.from_bytes(head, "big", signed=True) if head is not None else None

        first_unacked = self._lag_boundary
        if acked >= first_unacked:
            walked = unacknowledged_record(first_unacked, acked, size_at)
            if walked is None:
                return -1.0
            first_unacked = self._lag_boundary = walked  # the next call walks only what was acknowledged since
        # else a fresh slave: what it lacks starts where the transfer started
        record = commit_log.look_message_by_offset(first_unacked)
        if record is None:  # the blank that ends a segment: the next record opens the next segment
            record = commit_log.look_message_by_offset(commit_log.roll_next_file(first_unacked))
        if record is None:
            return -1.0
        last = commit_log.mapped_file_queue.last
        newest_ts = last.store_timestamp if last is not None and last.store_timestamp > 0 else now_ms()
        unacked_ts = record.store_timestamp
        return max(newest_ts - unacked_ts, 0) / 1000
