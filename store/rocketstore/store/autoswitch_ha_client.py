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

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Final

from rocketstore.common.clock import now_ms
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
from rocketstore.store.ha_client import HAClientState
from rocketstore.store.ha_protocol import continuity_error

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 3.0
RETRY_S: Final = 1.0
POLL_S: Final = 0.5

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


class AutoSwitchHAClient:
    """Connects to the master, hand-shakes, truncates, appends what it streams, reports progress."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, epoch_cache: EpochFileCache, local_id: int,
                 truncate: Truncate) -> None:
        self.config = config
        self.commit_log = commit_log
        self.epoch_cache = epoch_cache
        self.local_id = local_id
        self._truncate = truncate
        self._master_address: str | None = None
        self._refused_reason: str | None = None
        self._sock: socket.socket | None = None
        self._stopped = True
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: called (in this client's thread) when the connection to the master it still follows
        #: ended: a master that hands over closes it, so the replica looks at its source of truth
        #: at once instead of at its next periodic read
        self.on_master_lost: Callable[[], None] | None = None

    def start(self) -> None:
        self._stopped = False
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name="AutoSwitchHAClient", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def update_master_address(self, address: str | None) -> None:
        """Follow the master whose HA listener is ``address``; None stops replicating. Returns once
        the old connection is closed; a truncation in progress finishes first."""
        if address == self._master_address:
            return
        log.info("HA client: master address %s -> %s", self._master_address, address)
        self._master_address = address
        self._refused_reason = None
        self._close()
        self._wake.set()

    def state(self) -> HAClientState:
        return HAClientState(self._master_address, self._sock is not None, self.commit_log.max_offset,
                             self._refused_reason)

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _run(self) -> None:
        while not self._stopped:
            address = self._master_address
            if address is None or self._refused_reason is not None:
                self._wake.wait(5.0)
                self._wake.clear()
                continue
            host, _, port = address.rpartition(":")
            try:
                sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
            except (OSError, ValueError) as exc:
                log.warning("HA client: cannot connect to master %s: %s", address, exc)
                self._wake.wait(RETRY_S)
                self._wake.clear()
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(POLL_S)
            self._sock = sock
            try:
                self._replicate(sock, address)
            except (OSError, ValueError) as exc:
                if not self._stopped and self._sock is sock:
                    log.warning("HA client: connection to master %s failed: %s", address, exc)
            finally:
                if self._sock is sock:
                    self._close()
                else:
                    with contextlib.suppress(OSError):
                        sock.close()
            listener = self.on_master_lost
            if listener is not None and not self._stopped and self._master_address == address:
                listener()
            if not self._stopped:
                self._wake.wait(RETRY_S)
                self._wake.clear()

    def _replicate(self, sock: socket.socket, address: str) -> None:
        sock.sendall(encode_slave_handshake(SlaveHandshake(self.local_id, self.config.sync_from_last_file)))
        buf = bytearray()
        handshaken = False
        received_epoch = -1
        reported = -1
        last_write_ms = last_read_ms = now_ms()
        while not self._stopped and self._sock is sock and self._master_address == address:
            now = now_ms()
            if handshaken and now - last_write_ms > self.config.ha_send_heartbeat_interval:
                sock.sendall(encode_slave_report(self.commit_log.max_offset))
                last_write_ms = now
            if now - last_read_ms > self.config.ha_housekeeping_interval:
                log.warning("HA client: master %s sent nothing for %d ms, reconnecting", address, now - last_read_ms)
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
            return True
        if point < 0:
            self._refused_reason = (f"no epoch in common with master {address} (its epochs "
                                    f"{[(e.epoch, e.start_offset) for e in handshake.entries]})")
            log.error("HA client: %s", self._refused_reason)
            return False
        if not self._truncate(point):
            log.error("HA client: truncating to %d failed", point)
            return False
        return True

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
