"""AutoSwitchHAConnection: the master's side of one slave in controller mode (RocketMQ 5).

The same two threads as the 4.x :class:`~rocketstore.store.ha_connection.HAConnection`, speaking
autoswitch_ha_protocol instead:

* the reader takes the slave's handshake (its replica id, ``syncFromLastFile``) and its offset
  reports; each report may bring the slave back into the SyncStateSet and releases waiters;
* the writer answers each handshake with this master's epoch history and max offset, then, once
  the slave reported where it stands (after truncating to what both logs share), streams the
  CommitLog from there, each batch within one epoch and carrying it, with heartbeats when idle.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Final, Protocol

from rocketstore.common.clock import now_ms
from rocketstore.store import sync_state_set
from rocketstore.store.autoswitch_ha_protocol import (
    SlaveHandshake,
    TransferHeader,
    batch_size_within_epoch,
    encode_master_handshake,
    encode_transfer_header,
    next_slave_message,
    transfer_start_in_controller_mode,
)
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.epoch_file import NO_END_OFFSET, EpochEntry, EpochFileCache
from rocketstore.store.ha_connection import send_all, wait_readable

log = logging.getLogger(__name__)

READ_POLL_S: Final = 1.0


class AutoSwitchOwner(Protocol):
    """What a connection needs from the HAService that accepted it."""

    config: StoreConfig
    commit_log: CommitLog
    epoch_cache: EpochFileCache | None
    confirm_offset: int

    def remove_connection(self, conn: AutoSwitchHAConnection) -> None: ...

    def on_slave_report(self, slave_id: int, offset: int, caught_up_ms: int | None) -> None: ...

    def update_caught_up(self, slave_id: int, at_ms: int) -> None: ...

    def wait_for_data(self, offset: int, timeout_s: float) -> None: ...


class AutoSwitchHAConnection:
    """One controller-mode slave: its replica id, handshake state and acknowledged offset."""

    def __init__(self, service: AutoSwitchOwner, sock: socket.socket, address: str) -> None:
        self.service = service
        self.sock = sock
        self.address = address
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: the slave's replica id, from its handshake (-1 before)
        self.slave_id = -1
        self.sync_from_last_file = False
        self.slave_request_offset = -1
        self.acked_offset = -1
        self.next_transfer_from = -1
        self._handshakes_due = 0
        self._wake = threading.Condition()
        self._stopped = False
        self._closed = False
        self._closed_lock = threading.Lock()
        self._last_write_ms = now_ms()
        self._last_master_max = -1
        self._last_transfer_ms = 0
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, name=f"AutoSwitchHARead-{address}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"AutoSwitchHAWrite-{address}", daemon=True)

    def start(self) -> None:
        self._reader.start()
        self._writer.start()

    def shutdown(self) -> None:
        self._close()
        for thread in (self._reader, self._writer):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=5)

    def lag_seconds(self, master_max: int) -> float:
        """Not tracked in controller mode (metrics read -1: cannot be told)."""
        return -1.0

    def _close(self) -> None:
        with self._closed_lock:
            if self._closed:
                return
            self._closed = True
        self._stopped = True
        with self._wake:
            self._wake.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
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
                    if now_ms() - last_read_ms > self.service.config.ha_housekeeping_interval:
                        log.warning("HA: slave %s silent too long, closing the connection", self.address)
                        return
                    continue
                data = self.sock.recv(64 * 1024)
                if not data:
                    return
                last_read_ms = now_ms()
                pending += data
                pos = 0
                while (found := next_slave_message(pending, pos, len(pending))) is not None:
                    message, pos = found
                    if isinstance(message, SlaveHandshake):
                        self._on_handshake(message)
                    else:
                        self._on_report(message)
                del pending[:pos]
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: connection to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

    def _on_handshake(self, handshake: SlaveHandshake) -> None:
        log.info("HA: slave %s hand-shakes as replica %d (syncFromLastFile=%s)", self.address,
                 handshake.slave_broker_id, handshake.sync_from_last_file)
        self.slave_id = handshake.slave_broker_id
        self.sync_from_last_file = handshake.sync_from_last_file
        with self._wake:
            self._handshakes_due += 1
            self._wake.notify_all()

    def _on_report(self, offset: int) -> None:
        if self.slave_id < 0:
            raise ValueError("slave reported an offset before its handshake")
        master_max = self.service.commit_log.max_offset
        if offset > master_max:
            raise ValueError(f"slave reports offset {offset} past this master's max offset {master_max}")
        if self.slave_request_offset < 0:
            self.slave_request_offset = offset
            with self._wake:
                self._wake.notify_all()
        self.acked_offset = offset
        caught_up = sync_state_set.caught_up_at(offset, master_max, self._last_master_max, now_ms(),
                                                self._last_transfer_ms)
        self.service.on_slave_report(self.slave_id, offset, caught_up)

    # -- writer ----------------------------------------------------------------------------
    def _write_loop(self) -> None:
        config = self.service.config
        try:
            while not self._stopped:
                with self._wake:
                    if self._handshakes_due:
                        self._handshakes_due -= 1
                        due = True
                    else:
                        due = False
                        if self.slave_request_offset < 0:
                            self._wake.wait(0.1)
                            continue
                if due:
                    self._send_handshake()
                    continue
                if self.next_transfer_from < 0:
                    commit_log = self.service.commit_log
                    self.next_transfer_from = transfer_start_in_controller_mode(
                        self.slave_request_offset, max(commit_log.min_offset, 0), commit_log.max_offset,
                        config.mapped_file_size_commit_log, self.sync_from_last_file)
                    log.info("HA: transferring to replica %d (%s) from offset %d", self.slave_id, self.address,
                             self.next_transfer_from)
                if self._send_data():
                    continue
                self.service.update_caught_up(self.slave_id, now_ms())
                idle_ms = now_ms() - self._last_write_ms
                if idle_ms > config.ha_send_heartbeat_interval:
                    self._send_heartbeat()
                    idle_ms = 0
                self.service.wait_for_data(self.next_transfer_from,
                                           max(config.ha_send_heartbeat_interval - idle_ms, 1) / 1000)
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: sending to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

    def _epochs(self) -> tuple[EpochEntry, ...]:
        cache = self.service.epoch_cache
        return cache.entries if cache is not None else ()

    def _send_handshake(self) -> None:
        entries = self._epochs()
        last_epoch = entries[-1].epoch if entries else -1
        self.sock.sendall(encode_master_handshake(entries, self.service.commit_log.max_offset, last_epoch))
        self._last_write_ms = now_ms()

    def _epoch_at(self, offset: int) -> EpochEntry | None:
        entries = self._epochs()
        for entry in entries:
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        return entries[-1] if entries and offset >= entries[-1].start_offset else None

    def _send_heartbeat(self) -> None:
        entry = self._epoch_at(self.next_transfer_from) or (self._epochs() or (None,))[0]
        if entry is None:
            return
        self.sock.sendall(encode_transfer_header(TransferHeader(
            self.next_transfer_from, 0, entry.epoch, entry.start_offset, self.service.confirm_offset)))
        self._last_write_ms = now_ms()

    def _send_data(self) -> bool:
        """One batch from ``next_transfer_from``, within its epoch; False with nothing to send."""
        commit_log = self.service.commit_log
        offset = self.next_transfer_from
        entry = self._epoch_at(offset)
        if entry is None:
            return False
        found = commit_log.hold_data(offset)
        if found is None:
            return False
        mapped, pos, limit = found
        try:
            epoch_end = -1 if entry.end_offset == NO_END_OFFSET else entry.end_offset
            size = batch_size_within_epoch(offset, min(limit - pos, self.service.config.ha_transfer_batch_size),
                                           epoch_end)
            if size <= 0:
                return False
            self._last_master_max = commit_log.max_offset
            self._last_transfer_ms = now_ms()
            header = encode_transfer_header(TransferHeader(offset, size, entry.epoch, entry.start_offset,
                                                           self.service.confirm_offset))
            view = memoryview(mapped.buffer)
            body = view[pos:pos + size]
            try:
                send_all(self.sock, [header, body])
            finally:
                body.release()
                view.release()
        finally:
            mapped.release()
        self.next_transfer_from = offset + size
        self._last_write_ms = now_ms()
        return True
