"""AbstractHAClient: the slave's side of replication, whatever protocol its master speaks.

The 4.x HAClient and the controller-mode AutoSwitchHAClient are, as in RocketMQ, service
threads that follow one master address; they differ only in what they say over the connection.
This class is what they share, so that each client (ha_client, autoswitch_ha_client) holds only
its protocol in :meth:`~AbstractHAClient._replicate`:

* the thread (a :class:`~rocketstore.store.service_thread.ServiceThread`), its shutdown, which
  also closes the connection;
* the master address: a new one drops the connection and clears a refusal;
* the reconnect loop: idle without an address or after a refusal, a pause after a failed
  connection attempt (:attr:`~AbstractHAClient.CONNECT_RETRY_S`) and after a lost connection;
* the housekeeping rule: a master that sent nothing for ``haHousekeepingInterval`` is left;
* :meth:`~AbstractHAClient.state`, what metrics and admin show.
"""

from __future__ import annotations

import logging
import socket
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Final

from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.ha_io import close_socket
from rocketstore.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 3.0

IDLE_S: Final = 5.0
"""Longest sleep without a master address (or after a refusal); a new address cuts it short."""

RECONNECT_PAUSE_S: Final = 1.0
"""Pause after a lost connection before connecting again."""


@dataclass(frozen=True, slots=True)
class HAClientState:
    """The slave side as metrics and admin show it.

    ``max_offset`` is this store's CommitLog max offset (what it would report). ``refused_reason``
    is set once the client refused its master (diverged logs), until it is given another address.
    """

    master_address: str | None
    connected: bool
    max_offset: int
    refused_reason: str | None


class AbstractHAClient(ServiceThread):
    """Follows a master address: connects, runs the protocol, reconnects; subclasses speak it."""

    CONNECT_RETRY_S: ClassVar[float]
    """Pause after a failed connection attempt; a new master address cuts it short."""

    def __init__(self, name: str, config: StoreConfig, commit_log: CommitLog) -> None:
        super().__init__(name)
        self.config = config
        self.commit_log = commit_log
        self._master_address: str | None = None
        self._refused_reason: str | None = None
        self._sock: socket.socket | None = None
        #: called (in this client's thread) when the connection to the master it still follows
        #: ended: a master that hands over closes it, so the replica looks at its source of truth
        #: at once instead of at its next periodic read
        self.on_master_lost: Callable[[], None] | None = None

    # -- control ---------------------------------------------------------------------------
    def shutdown(self) -> None:
        self.stopping = True
        self._close()
        self.stop_thread(timeout_s=5)

    def update_master_address(self, address: str | None) -> None:
        """Replicate from ``address`` (host:port of the master's HA listener) from now on; None stops.

        Another address drops the current connection and clears a refusal (a new master may
        well continue this log); the same address again changes nothing.
        """
        old = self._master_address
        if address == old:
            return
        log.info("HA client: master address %s -> %s", old, address)
        self._master_address = address
        self._refused_reason = None
        self._close()
        self._wake.set()

    def state(self) -> HAClientState:
        return HAClientState(self._master_address, self._sock is not None, self.commit_log.max_offset,
                             self._refused_reason)

    # -- loop ------------------------------------------------------------------------------
    def run(self) -> None:
        while not self.stopping:
            address = self._master_address
            if address is None or self._refused_reason is not None:
                self._pause(IDLE_S)
                continue
            sock = self._connect(address)
            if sock is None:
                self._pause(self.CONNECT_RETRY_S)
                continue
            try:
                self._replicate(sock, address)
            except (OSError, ValueError) as exc:
                if not self.stopping and self._sock is sock:
                    log.warning("HA client: connection to master %s failed: %s", address, exc)
            finally:
                self._close()
            listener = self.on_master_lost
            if listener is not None and not self.stopping and self._master_address == address:
                listener()
            if not self.stopping and self._refused_reason is None:
                self._pause(RECONNECT_PAUSE_S)

    def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``; a new master address or the shutdown ends it (and is consumed)."""
        self._wake.wait(seconds)
        self._wake.clear()

    def _connect(self, address: str) -> socket.socket | None:
        host, _, port = address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            log.warning("HA client: cannot connect to master %s: %s", address, exc)
            return None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        return sock

    def _close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            close_socket(sock)

    def _connected_to(self, sock: socket.socket, address: str) -> bool:
        """Whether the replication over ``sock`` is still wanted: not stopping, not closed or
        replaced, the master address unchanged."""
        return not self.stopping and self._sock is sock and self._master_address == address

    @staticmethod
    def _master_silent(address: str, now: int, last_read_ms: int, housekeeping_ms: int) -> bool:
        """The housekeeping rule: True (and logged) when the master sent nothing for ``housekeeping_ms``."""
        if now - last_read_ms <= housekeeping_ms:
            return False
        log.warning("HA client: master %s sent nothing for %d ms, reconnecting", address, now - last_read_ms)
        return True

    @abstractmethod
    def _replicate(self, sock: socket.socket, address: str) -> None:
        """Serve one connection until it ends (raises OSError or ValueError), this client refuses
        (set ``_refused_reason``), or :meth:`_connected_to` turns False."""
