"""AutoSwitchHAConnection: the master's side of one slave in controller mode (RocketMQ 5).

The same two threads as the 4.x :class:`~rocketstore.store.ha_connection.HAConnection` (both run by
:class:`~rocketstore.store.abstract_ha_connection.AbstractHAConnection`), speaking autoswitch_ha_protocol instead:

* the reader takes the slave's handshake (its replica id, ``syncFromLastFile``) and its offset
  reports; each report may bring the slave back into the SyncStateSet and releases waiters;
* the writer answers each handshake with this master's epoch history and max offset, then, once
  the slave reported where it stands (after truncating to what both logs share), streams the
  CommitLog from there, each batch within one epoch and carrying it, with heartbeats when idle.
"""

from __future__ import annotations

import logging
import socket
from typing import Protocol

from rocketstore.common.clock import now_ms
from rocketstore.store import sync_state_set
from rocketstore.store.abstract_ha_connection import AbstractHAConnection, HAConnectionOwner
from rocketstore.store.autoswitch_ha_protocol import (
    SlaveHandshake,
    TransferHeader,
    batch_size_within_epoch,
    encode_master_handshake,
    encode_transfer_header,
    next_slave_message,
    transfer_start_in_controller_mode,
)
from rocketstore.store.epoch_file import NO_END_OFFSET, EpochEntry, EpochFileCache
from rocketstore.store.ha_io import send_from_file

log = logging.getLogger(__name__)


class AutoSwitchOwner(HAConnectionOwner, Protocol):
    """What a controller-mode connection needs from the HAService, besides any connection's needs."""

    epoch_cache: EpochFileCache | None
    confirm_offset: int

    def on_slave_report(self, slave_id: int, offset: int, caught_up_ms: int | None) -> None: ...

    def update_caught_up(self, slave_id: int, at_ms: int) -> None: ...


class AutoSwitchHAConnection(AbstractHAConnection[AutoSwitchOwner]):
    """One controller-mode slave: its replica id, handshake state and acknowledged offset."""

    def __init__(self, service: AutoSwitchOwner, sock: socket.socket, address: str) -> None:
        super().__init__(service, sock, address, "AutoSwitchHARead", "AutoSwitchHAWrite")
        #: the slave's replica id, from its handshake (-1 before)
        self.slave_id = -1
        self.sync_from_last_file = False
        self._handshakes_due = 0
        self._last_master_max = -1
        self._last_transfer_ms = 0

    def lag_seconds(self, master_max: int) -> float:
        """Not tracked in controller mode (metrics read -1: cannot be told)."""
        return -1.0

    # -- reader ----------------------------------------------------------------------------
    def _on_read(self, pending: bytearray) -> bool:
        pos = 0
        while (found := next_slave_message(pending, pos, len(pending))) is not None:
            message, pos = found
            if isinstance(message, SlaveHandshake):
                self._on_handshake(message)
            else:
                self._on_report(message)
        del pending[:pos]
        return True

    def _log_silent(self, silent_ms: int) -> None:
        log.warning("HA: slave %s silent too long, closing the connection", self.address)

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
            self._wake_writer()
        self.acked_offset = offset
        caught_up = sync_state_set.caught_up_at(offset, master_max, self._last_master_max, now_ms(),
                                                self._last_transfer_ms)
        self.service.on_slave_report(self.slave_id, offset, caught_up)

    # -- writer ----------------------------------------------------------------------------
    def _stream(self) -> None:
        config = self.service.config
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
            self._idle()

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
            send_from_file(self.sock, header, mapped.fileno(), pos, size)
        finally:
            mapped.release()
        self.next_transfer_from = offset + size
        self._last_write_ms = now_ms()
        return True
