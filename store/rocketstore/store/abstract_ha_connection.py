"""AbstractHAConnection: the master's side of one slave, whatever protocol the slave speaks.

RocketMQ gives each slave connection a reader and a writer thread, in its 4.x HAConnection as in
its 5.x AutoSwitchHAConnection, and the two differ only in what the bytes mean. This class is
what they share, so that each protocol's connection (ha_connection, autoswitch_ha_connection)
holds only its frames:

* the two daemon threads, their start, and a close that runs once whichever thread (or the
  service) gets there first, wakes the writer and tells the service;
* the reader: it waits for the slave's bytes, drops a slave silent for
  ``haHousekeepingInterval``, and hands what arrived to :meth:`_on_read`; a thread, or, given
  the broker's event loop, a reader callback on that loop (the 4.x connection takes it);
* the writer: it runs :meth:`_stream` and, whenever that finds nothing to send,
  :meth:`_idle` sends a heartbeat after ``haSendHeartbeatInterval`` without a write and sleeps
  until the log grows;
* the slave's offsets (where it asked to start, what it acknowledged, where the next transfer
  starts) and :attr:`_wake`, on which the writer waits for the reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from abc import ABC, abstractmethod
from typing import Any, Final, Generic, Protocol, TypeVar

from rocketstore.common.clock import now_ms
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.ha_io import close_socket, wait_readable

log = logging.getLogger(__name__)

READ_POLL_S: Final = 1.0
"""How often the reader looks at the stop flag and the housekeeping clock."""

RECV_BYTES: Final = 64 * 1024
"""Bytes one read of the slave's reports takes at most (they are a few bytes each)."""


class HAConnectionOwner(Protocol):
    """What any connection needs from the HAService that accepted it."""

    config: StoreConfig
    commit_log: CommitLog

    def remove_connection(self, conn: AbstractHAConnection[Any]) -> None: ...

    def wait_for_data(self, offset: int, timeout_s: float) -> None: ...

    def wake_writers(self) -> None: ...


OwnerT = TypeVar("OwnerT", bound=HAConnectionOwner)


class AbstractHAConnection(ABC, Generic[OwnerT]):
    """One slave: its reader and writer threads and its offsets; subclasses speak the protocol."""

    def __init__(self, service: OwnerT, sock: socket.socket, address: str, reader_name: str,
                 writer_name: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.service = service
        #: the broker's event loop when the reports are read there (see :meth:`start`), else None
        self.loop = loop
        self.sock = sock
        self.address = address
        sock.setblocking(True)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        #: the slave's first report: where it wants data from (-1 until it arrives)
        self.slave_request_offset = -1
        #: the slave's latest report: how far it has the log (-1 until the first)
        self.acked_offset = -1
        self.next_transfer_from = -1
        #: the writer waits on it for the reader; notified on close too
        self._wake = threading.Condition()
        self._stopped = False
        self._closed_lock = threading.Lock()
        self._closed = False
        self._last_write_ms = now_ms()
        self._last_read_ms = now_ms()
        #: what the slave sent that :meth:`_on_read` has not taken yet (a partial message)
        self._pending = bytearray()
        self._housekeeping: asyncio.TimerHandle | None = None
        self._reader = threading.Thread(target=self._read_loop, name=f"{reader_name}-{address}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"{writer_name}-{address}", daemon=True)

    def start(self) -> None:
        """Start the writer, and the reader: a thread of its own, or, with a :attr:`loop`, a
        reader callback on that loop, so that a report releases its SYNC_MASTER waiters in the
        loop's own pass instead of crossing from a thread (a wake-up and a hand-over of the
        interpreter lock per report)."""
        if self.loop is None:
            self._reader.start()
        else:
            self.loop.call_soon_threadsafe(self._read_on_loop)
        self._writer.start()

    def shutdown(self) -> None:
        """Stop both threads and close the socket (the service is stopping or dropping slaves)."""
        self._close()
        for thread in (self._reader, self._writer):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=5)

    @abstractmethod
    def lag_seconds(self, master_max: int) -> float:
        """How far behind this slave is in store time (see the service's SlaveInfo); -1: cannot be told."""

    def _close(self) -> None:
        with self._closed_lock:
            if self._closed:
                return
            self._closed = True
        self._stopped = True
        self._wake_writer()
        # an idle writer sleeps in the service's wait for data, up to haSendHeartbeatInterval:
        # woken too, or shutdown()'s join (a master handing over) waits that out
        self.service.wake_writers()
        if self.loop is None:
            close_socket(self.sock)  # the shutdown in it unblocks a writer stuck in sendmsg
        else:
            self._close_on_loop()
        self.service.remove_connection(self)

    def _close_on_loop(self) -> None:
        """Shut the socket down now (a writer stuck in sendmsg returns), and close it on the loop
        once the loop no longer watches it: a descriptor closed under the loop's poller could be
        reused by another socket before the loop forgets it."""
        loop = self.loop
        assert loop is not None
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        try:
            loop.call_soon_threadsafe(self._detach)
        except RuntimeError:  # the loop is closed: it watches nothing any more
            close_socket(self.sock)

    def _detach(self) -> None:
        assert self.loop is not None
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.sock.fileno())
        close_socket(self.sock)

    def _wake_writer(self) -> None:
        with self._wake:
            self._wake.notify_all()

    # -- reader ----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while not self._stopped:
                if not wait_readable(self.sock, READ_POLL_S):
                    if self._too_silent():
                        return
                    continue
                if not self._take(self.sock.recv(RECV_BYTES)):
                    return
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: connection to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

    def _take(self, data: bytes) -> bool:
        """What one read brought, for :meth:`_on_read`; False when the connection ends (the slave
        closed it, or :meth:`_on_read` refused it)."""
        if not data:
            log.info("HA: slave %s closed the connection", self.address)
            return False
        self._last_read_ms = now_ms()
        self._pending += data
        return self._on_read(self._pending)

    def _too_silent(self) -> bool:
        """Whether the slave has been silent for more than haHousekeepingInterval (said in the log)."""
        silent = now_ms() - self._last_read_ms
        if silent > self.service.config.ha_housekeeping_interval:
            self._log_silent(silent)
            return True
        return False

    def _read_on_loop(self) -> None:
        """On the loop: watch the socket for reports and the clock for the slave's silence."""
        loop = self.loop
        assert loop is not None
        if self._stopped:
            return
        self._last_read_ms = now_ms()
        loop.add_reader(self.sock.fileno(), self._readable)
        self._housekeeping = loop.call_later(READ_POLL_S, self._housekeep)

    def _readable(self) -> None:
        """The loop's reader: what one non-blocking read brings, handed to :meth:`_on_read`."""
        if self._stopped:  # shut down, and the loop has not yet forgotten the socket
            return
        try:
            if not self._take(self.sock.recv(RECV_BYTES, socket.MSG_DONTWAIT)):
                self._close()
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: connection to slave %s failed: %s", self.address, exc)
            self._close()

    def _housekeep(self) -> None:
        """Drop a slave silent for haHousekeepingInterval (the loop's reader has no poll timeout)."""
        loop = self.loop
        assert loop is not None
        if self._stopped:
            return
        if self._too_silent():
            self._close()
            return
        self._housekeeping = loop.call_later(READ_POLL_S, self._housekeep)

    @abstractmethod
    def _on_read(self, pending: bytearray) -> bool:
        """Take the whole messages at the front of ``pending`` (removing them, leaving a partial
        one); False to drop the slave. A ValueError drops it too (logged)."""

    def _log_silent(self, silent_ms: int) -> None:
        """The warning that drops a silent slave (each protocol's connection words its own)."""
        log.warning("HA: slave %s silent for %d ms, closing the connection", self.address, silent_ms)

    # -- writer ----------------------------------------------------------------------------
    def _write_loop(self) -> None:
        try:
            self._stream()
        except (OSError, ValueError) as exc:
            if not self._stopped:
                log.warning("HA: sending to slave %s failed: %s", self.address, exc)
        finally:
            self._close()

    @abstractmethod
    def _stream(self) -> None:
        """The writer's loop until the connection stops; it calls :meth:`_idle` when there is
        nothing to send."""

    @abstractmethod
    def _send_heartbeat(self) -> None:
        """Send the protocol's empty transfer (which says where the next data starts)."""

    def _idle(self) -> None:
        """Nothing to send: a heartbeat once ``haSendHeartbeatInterval`` passed without a write,
        then sleep until the log grows past :attr:`next_transfer_from` or the next one is due."""
        heartbeat_ms = self.service.config.ha_send_heartbeat_interval
        idle_ms = now_ms() - self._last_write_ms
        if idle_ms > heartbeat_ms:
            self._send_heartbeat()
            idle_ms = 0
        self._sleep(max(heartbeat_ms - idle_ms, 1) / 1000)

    def _sleep(self, timeout_s: float) -> None:
        """Wait until there may be more to send: the log grows past :attr:`next_transfer_from`, the
        connection closes, or ``timeout_s`` (the next heartbeat) passes."""
        self.service.wait_for_data(self.next_transfer_from, timeout_s)
