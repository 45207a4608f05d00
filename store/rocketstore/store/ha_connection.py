"""HAConnection: the master's side of one slave connection (RocketMQ's HAConnection).

Two threads, as in RocketMQ:

* the reader takes the slave's 8-byte offset reports: the first one says where to start, every
  one acknowledges (and releases SYNC_MASTER waiters through the service). A slave silent for
  ``haHousekeepingInterval`` is dropped. A slave reporting more than the master has is refused.
* the writer streams the CommitLog from the transfer start as ``[offset][size][body]`` frames of
  at most ``haTransferBatchSize`` bytes from one segment, and a heartbeat frame (size 0) after
  ``haSendHeartbeatInterval`` without anything sent.

The writer sends straight from the segment mappings: one ``sendmsg`` carries a run of frames
(header bytes plus memoryviews of the mapping, no copy in Python) up to :data:`GATHER_BYTES`.
The segments are held while their views are out, so deletion waits for the send.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from typing import Final, Protocol

from rocketstore.common.clock import now_ms
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
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
"""Body bytes one sendmsg carries at most: many frames per system call during catch-up."""

GATHER_FRAMES: Final = 256
"""Frames one sendmsg carries at most (two iovecs each; the kernel takes at most 1024)."""

READ_POLL_S: Final = 1.0
"""How often the reader looks at the stop flag and the housekeeping clock."""


def wait_readable(sock: socket.socket, timeout_s: float) -> bool:
    """Whether ``sock`` has bytes (or end of stream) to read within ``timeout_s``.

    poll, not select: select cannot watch a descriptor numbered 1024 or more, and a broker with
    many segments, queues and connections open has those.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(int(timeout_s * 1000), 0)))


class ConnectionOwner(Protocol):
    """What a connection needs from the HAService that accepted it."""

    config: StoreConfig
    commit_log: CommitLog

    def remove_connection(self, conn: HAConnection) -> None: ...

    def notify_transfer_some(self, offset: int) -> None: ...

    def refuse_slave(self, address: str, slave_offset: int, master_offset: int, reason: str) -> None: ...

    def wait_for_data(self, offset: int, timeout_s: float) -> None: ...


def send_all(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    """Send every byte of ``parts`` in order with as few system calls as the kernel allows."""
    index = 0
    while index < len(parts):
        sent = sock.sendmsg(parts[index:index + 2 * GATHER_FRAMES])
        while index < len(parts) and sent >= len(parts[index]):
            sent -= len(parts[index])
            index += 1
        if sent:
            parts[index] = parts[index][sent:]


class HAConnection:
    """One slave: its reader and writer threads, its acknowledged offset."""

    def __init__(self, service: ConnectionOwner, sock: socket.socket, address: str) -> None:
        self.service = service
        self.sock = sock
        self.address = address
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: the slave's first report: where it wants data from (-1 until it arrives)
        self.slave_request_offset = -1
        #: the slave's latest report: how far it has the log (-1 until the first)
        self.acked_offset = -1
        self.next_transfer_from = -1
        self._first_report = threading.Event()
        self._stopped = False
        self._closed_lock = threading.Lock()
        self._closed = False
        self._last_write_ms = now_ms()
        self._lag_boundary = -1  # a record start at or before acked_offset, for lag_seconds
        self._reader = threading.Thread(target=self._read_loop, name=f"HAReadSocketService-{address}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"HAWriteSocketService-{address}",
                                        daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    def shutdown(self) -> None:
        """Stop both threads and close the socket (the service is stopping or dropping slaves)."""
        self._close()
        for thread in (self._reader, self._writer):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=5)

    def _close(self) -> None:
        with self._closed_lock:
            if self._closed:
                return
            self._closed = True
        self._stopped = True
        self._first_report.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # unblocks a writer stuck in sendmsg
        with contextlib.suppress(OSError):
            self.sock.close()
        self.service.remove_connection(self)

    # -- reader ----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        pending = bytearray()
        last_read_ms = now_ms()
        try:
            while not self._stopped:
                if not wait_readable(self.sock, READ_POLL_S):
                    silent = now_ms() - last_read_ms
                    if silent > self.service.config.ha_housekeeping_interval:
                        log.warning("HA: slave %s silent for %d ms, closing the connection", self.address, silent)
                        return
                    continue
                data = self.sock.recv(64 * 1024)
                if not data:
                    log.info("HA: slave %s closed the connection", self.address)
                    return
                last_read_ms = now_ms()
                pending += data
                offset, used = last_report(pending)
                if offset is None:
                    continue
                del pending[:used]
                if not self._on_report(offset):
                    return
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: connection to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

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
            self._first_report.set()
        self.acked_offset = offset
        self.service.notify_transfer_some(offset)
        return True

    # -- writer ----------------------------------------------------------------------------
    def _write_loop(self) -> None:
        config = self.service.config
        try:
            self._first_report.wait()  # the reader has set next_transfer_from
            while not self._stopped:
                if self._send_data():
                    continue
                idle_ms = now_ms() - self._last_write_ms
                heartbeat_ms = config.ha_send_heartbeat_interval
                if idle_ms > heartbeat_ms:
                    self.sock.sendall(encode_header(self.next_transfer_from, 0))
                    self._last_write_ms = now_ms()
                    idle_ms = 0
                self.service.wait_for_data(self.next_transfer_from, max(heartbeat_ms - idle_ms, 1) / 1000)
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: sending to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

    def _send_data(self) -> bool:
        """Send a run of frames from ``next_transfer_from``; False when there is nothing to send."""
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
                return False
            send_all(self.sock, parts)
        finally:
            for part in parts:
                if isinstance(part, memoryview):
                    part.release()
            for mapped, view in held:
                view.release()
                mapped.release()
        self.next_transfer_from = offset
        self._last_write_ms = now_ms()
        return True

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
