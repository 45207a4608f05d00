"""HAClient: the slave's side of replication (RocketMQ's HAService.HAClient).

While a master address is set, the client connects to it, reports its CommitLog's max offset
(at once, after appending what arrived, and every ``haSendHeartbeatInterval``), and appends the bytes
of each frame the master sends unchanged at the frame's offset; dispatch then builds the
slave's ConsumeQueue and IndexFile from them as from any append. A connection over which the
master has sent nothing (not even a heartbeat) for ``haHousekeepingInterval`` is dropped and
made again.

A frame that does not start where this log ends means the logs have diverged (this slave has a
tail the master lacks). The client refuses: it logs both offsets, closes, leaves its log
untouched and stops replicating until it is given another master address (or the store is
restarted). :meth:`HAClient.state` shows why.
"""

from __future__ import annotations

import logging
import socket
from typing import Final

from rocketstore.common.clock import now_ms
from rocketstore.store.abstract_ha_client import AbstractHAClient
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.ha_io import wait_readable
from rocketstore.store.ha_protocol import HEADER_SIZE, continuity_error, encode_report, next_frame

log = logging.getLogger(__name__)

READ_BUFFER_SIZE: Final = 4 * 1024 * 1024
"""The read buffer (RocketMQ's HAClient reads into 4 MiB too): room for a partial frame plus reads."""

READ_CHUNK: Final = 1024 * 1024
"""Bytes one recv takes at most. The frames of a read are written to the CommitLog right after it;
a read this small is still in the CPU cache then, so the write copies from the cache rather than
from memory (loopback, 32 KiB frames, one core: 0.85-1.05 ms of the slave's CPU per MiB against
1.3-1.6 with whole 4 MiB reads)."""

MAX_CHUNKS_PER_WRITE: Final = 512
"""Frame bodies one write takes at most (the kernel takes 1024 buffers per call)."""

POLL_S: Final = 1.0
"""Longest wait for master data before the heartbeat and housekeeping clocks are looked at."""


class HAClient(AbstractHAClient):
    """Connects to the master, appends what it streams, reports progress."""

    CONNECT_RETRY_S = 5.0  # RocketMQ's HAClient waits 5 s too

    def __init__(self, config: StoreConfig, commit_log: CommitLog) -> None:
        super().__init__("HAClient", config, commit_log)
        self._buf = bytearray()  # the read buffer, made at the first connection (masters never need it)

    def _replicate(self, sock: socket.socket, address: str) -> None:
        """Serve one connection until it ends (raises OSError) or this client refuses or stops."""
        config = self.config
        reported = self.commit_log.max_offset
        log.info("HA client: connected to master %s, this CommitLog ends at %d", address, reported)
        sock.sendall(encode_report(reported))
        last_write_ms = last_read_ms = now_ms()
        if not self._buf:
            self._buf = bytearray(READ_BUFFER_SIZE)
        buf = self._buf
        view = memoryview(buf)
        start = end = 0  # unprocessed bytes are buf[start:end]
        try:
            while self._connected_to(sock, address):
                now = now_ms()
                if now - last_write_ms > config.ha_send_heartbeat_interval:
                    sock.sendall(encode_report(reported))
                    last_write_ms = now
                if self._master_silent(address, now, last_read_ms, config.ha_housekeeping_interval):
                    return
                # A timeout on the socket rather than a poll before each read: while data flows, one
                # system call (one release of the interpreter lock) per read instead of two.
                wait_s = round(min(POLL_S, max(config.ha_send_heartbeat_interval - (now - last_write_ms), 10) / 1000),
                               2)
                if sock.gettimeout() != wait_s:
                    sock.settimeout(wait_s)
                if end == len(buf):  # full: keep the partial frame, at the front
                    buf[: end - start] = bytes(view[start:end])  # less than one frame
                    start, end = 0, end - start
                try:
                    read = sock.recv_into(view[end:end + READ_CHUNK])
                except TimeoutError:
                    continue
                if read == 0:
                    log.info("HA client: master %s closed the connection", address)
                    return
                end += read
                last_read_ms = now_ms()
                start = self._dispatch(view, start, end)
                if start < 0:
                    return
                if start == end:
                    start = end = 0
                needed = self._frame_room(view, start, end)
                if needed > len(buf):  # a frame bigger than the buffer: grow it once
                    view.release()
                    grown = bytearray(needed)
                    grown[: end - start] = buf[start:end]
                    buf = self._buf = grown
                    view = memoryview(buf)
                    start, end = 0, end - start
                current = self.commit_log.max_offset
                # Report once what has arrived is appended; during a burst (more bytes already
                # waiting) every READ_BUFFER_SIZE, as when one read took up to that much: a
                # report per READ_CHUNK woke the master's reader four times as often.
                if current > reported and (current - reported >= READ_BUFFER_SIZE or not wait_readable(sock, 0)):
                    sock.sendall(encode_report(current))
                    reported = current
                    last_write_ms = now_ms()
        finally:
            view.release()

    @staticmethod
    def _frame_room(view: memoryview, start: int, end: int) -> int:
        """Bytes the buffer must hold for the partial frame at ``start`` to complete."""
        if end - start < HEADER_SIZE:
            return 0
        return HEADER_SIZE + int.from_bytes(view[start + 8:start + 12], "big", signed=True)

    def _dispatch(self, view: memoryview, start: int, end: int) -> int:
        """Append every whole frame in ``view[start:end]``; the position after the last one, or -1
        when this client refused (diverged logs) or an append failed.

        Frames are checked one by one (each must continue the log where the previous one ended)
        and their bodies appended together, one write per segment they fall in: one system call
        per read rather than per frame.
        """
        segment = self.config.mapped_file_size_commit_log
        expected = self.commit_log.max_offset  # where the next frame must start
        pending: list[memoryview] = []
        pending_from = -1
        try:
            while True:
                frame = next_frame(view, start, end)
                if frame is None:
                    break
                refusal = continuity_error(expected, frame.phy_offset)
                if refusal is not None:
                    if pending and not self._append(pending_from, pending):
                        return -1
                    self._refused_reason = refusal
                    log.error("HA client: master %s: %s", self._master_address, refusal)
                    return -1
                if frame.body_size:
                    if pending and (frame.phy_offset // segment != pending_from // segment
                                    or len(pending) >= MAX_CHUNKS_PER_WRITE):
                        if not self._append(pending_from, pending):
                            return -1
                        pending = []
                    if not pending:
                        pending_from = frame.phy_offset
                    pending.append(view[frame.body_start:frame.end])
                    expected = frame.phy_offset + frame.body_size
                start = frame.end
            if pending and not self._append(pending_from, pending):
                return -1
            return start
        finally:
            for chunk in pending:
                chunk.release()

    def _append(self, offset: int, chunks: list[memoryview]) -> bool:
        if self.commit_log.append_data(offset, chunks):
            return True
        log.error("HA client: appending %d replicated bytes at %d failed; reconnecting", sum(map(len, chunks)), offset)
        return False
