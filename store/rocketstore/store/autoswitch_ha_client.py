"""AutoSwitchHAClient: the slave's side of replication in controller mode (RocketMQ 5).

While a master HA address is set, the client connects, sends its handshake (its replica id),
and waits for the master's epoch history. It compares that history with its own
(:func:`~rocketstore.store.epoch_file.find_consistent_point`), truncates its store to the last
offset both share (``DefaultMessageStore.truncate_files``: crash-safe, the discarded tail zeroed),
and reports that offset; from then on it appends what the master streams, records each new epoch
the transfers carry in its epoch file, and reports its max offset after every append and every
``haSendHeartbeatInterval``.

A replica with no epoch yet (a new one) keeps its log as it is, as RocketMQ's does. When the two
histories share nothing the client refuses, logs both, and waits for another master address.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Final

from rocketstore.common.clock import now_ms
from rocketstore.store.abstract_ha_client import AbstractHAClient
from rocketstore.store.autoswitch_ha_protocol import (
    MasterHandshake,
    SlaveHandshake,
    TransferHeader,
    encode_slave_handshake,
    encode_slave_report,
    next_master_message,
)
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.epoch_file import EpochFileCache, find_consistent_point, linked, with_last_end_offset
from rocketstore.store.ha_protocol import continuity_error

log = logging.getLogger(__name__)

POLL_S: Final = 0.5
"""The socket's read timeout: how often the heartbeat and housekeeping clocks are looked at."""

Truncate = Callable[[int], bool]
"""The store's truncate_files: cut the log (and its queues, index, epochs) back to an offset."""


def truncation_point(local: EpochFileCache, local_max: int, handshake: MasterHandshake) -> int | None:
    """Where a slave cuts its log before following the master of ``handshake`` (doTruncate):
    None for a replica without epochs (it keeps its log), -1 when the histories share nothing."""
    if not local.entries:
        return None
    mine = with_last_end_offset(local.entries, local_max)
    theirs = with_last_end_offset(linked(handshake.entries), handshake.max_offset)
    return find_consistent_point(mine, theirs)


class AutoSwitchHAClient(AbstractHAClient):
    """Connects to the master, hand-shakes, truncates, appends what it streams, reports progress."""

    CONNECT_RETRY_S = 1.0

    def __init__(self, config: StoreConfig, commit_log: CommitLog, epoch_cache: EpochFileCache, local_id: int,
                 truncate: Truncate) -> None:
        super().__init__("AutoSwitchHAClient", config, commit_log)
        self.epoch_cache = epoch_cache
        self.local_id = local_id
        self._truncate = truncate

    def _replicate(self, sock: socket.socket, address: str) -> None:
        sock.settimeout(POLL_S)
        sock.sendall(encode_slave_handshake(SlaveHandshake(self.local_id, self.config.sync_from_last_file)))
        buf = bytearray()
        handshaken = False
        received_epoch = -1
        reported = -1
        last_write_ms = last_read_ms = now_ms()
        while self._connected_to(sock, address):
            now = now_ms()
            if handshaken and now - last_write_ms > self.config.ha_send_heartbeat_interval:
                sock.sendall(encode_slave_report(self.commit_log.max_offset))
                last_write_ms = now
            if self._master_silent(address, now, last_read_ms, self.config.ha_housekeeping_interval):
                return
            try:
                data = sock.recv(1024 * 1024)
            except TimeoutError:
                continue
            if not data:
                return
            last_read_ms = now_ms()
            buf += data
            pos = 0
            while (found := next_master_message(buf, pos, len(buf))) is not None:
                message, body_start, end = found
                if isinstance(message, MasterHandshake):
                    if not self._on_handshake(message, address):
                        return
                    handshaken = True
                    reported = self.commit_log.max_offset
                    sock.sendall(encode_slave_report(reported))
                    last_write_ms = now_ms()
                elif handshaken:
                    if not self._on_transfer(message, bytes(buf[body_start:end]), received_epoch):
                        return
                    received_epoch = message.epoch
                pos = end
            del buf[:pos]
            current = self.commit_log.max_offset
            if handshaken and current > reported:
                sock.sendall(encode_slave_report(current))
                reported = current
                last_write_ms = now_ms()

    def _on_handshake(self, handshake: MasterHandshake, address: str) -> bool:
        point = truncation_point(self.epoch_cache, self.commit_log.max_offset, handshake)
        log.info("HA client: master %s has epochs %s up to %d; this replica %s up to %d: truncating to %s", address,
                 [(e.epoch, e.start_offset) for e in handshake.entries], handshake.max_offset,
                 [(e.epoch, e.start_offset) for e in self.epoch_cache.entries], self.commit_log.max_offset, point)
        if point is None:
            self._record_master_epochs(handshake)
            return True
        if point < 0:
            self._refused_reason = (f"no epoch in common with master {address} (its epochs "
                                    f"{[(e.epoch, e.start_offset) for e in handshake.entries]})")
            log.error("HA client: %s", self._refused_reason)
            return False
        if not self._truncate(point):
            log.error("HA client: truncating to %d failed", point)
            return False
        self._record_master_epochs(handshake)
        return True

    def _record_master_epochs(self, handshake: MasterHandshake) -> None:
        """Record the master's epochs that start at or before this log's end, before the first
        report: the log up to its end is the master's now, and so is that history.

        The first transfer would record the epoch covering the log's end, but the report that
        follows the handshake may already bring this replica into the SyncStateSet (its log
        reaches the epoch's start when the master has written nothing since its election); and
        no transfer ever carries an epoch in which nothing was written. A truncation to the
        offset where such epochs start drops them here too. Elected without them, this replica
        would start its own epoch with none in common with a replica that has only those, which
        could then never follow it (found by tests/store/test_failover_properties.py).
        """
        for entry in linked(handshake.entries):
            if entry.start_offset > self.commit_log.max_offset:
                break
            if entry.epoch > self.epoch_cache.last_epoch:
                self.epoch_cache.append_entry(entry.epoch, entry.start_offset)

    def _on_transfer(self, header: TransferHeader, body: bytes, received_epoch: int) -> bool:
        if header.body_size:
            refusal = continuity_error(self.commit_log.max_offset, header.phy_offset)
            if refusal is not None:
                log.error("HA client: %s", refusal)
                return False
        if header.epoch != received_epoch and header.epoch > self.epoch_cache.last_epoch:
            self.epoch_cache.append_entry(header.epoch, header.epoch_start_offset)
        if header.body_size and not self.commit_log.append_data(header.phy_offset, [body]):
            log.error("HA client: appending %d bytes at %d failed", header.body_size, header.phy_offset)
            return False
        return True
