"""HAService: master/slave replication of the CommitLog, wire-compatible with RocketMQ 4.x.

Every store runs one, whatever its role (RocketMQ does too):

* it listens on ``haListenPort``; each slave that connects gets an :class:`HAConnection`
  (ha_connection) that streams the CommitLog to it and reads its offset reports;
* it holds ``push2SlaveMaxOffset``, the highest offset any slave has reported, and the
  SYNC_MASTER waiters on it (RocketMQ's GroupTransferService, without its thread: whoever reads
  a report, the connection's thread or the broker's event loop, releases the waiters it satisfies);
* it owns the :class:`HAClient` (ha_client), which replicates from ``haMasterAddress`` while
  the store is a SLAVE.

In controller mode (enableControllerMode, :meth:`HAService.use_controller_mode`) the connections
and the client speak RocketMQ 5's AutoSwitch protocol instead (autoswitch_ha_connection,
autoswitch_ha_client), and the service also keeps the master's SyncStateSet, its confirm offset
and the waiters of allAckInSyncStateSet / inSyncReplicas (sync_state_set holds the decisions).
Roles change without a restart (``DefaultMessageStore.change_to_master`` / ``change_to_slave``):
nothing here is chosen by role at construction; the listener runs on every role, and the client
too, idle while it has no master address. A 4.x slave ahead of its master is still refused
(see ha_protocol); in controller mode the handshake truncates it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rocketstore.common.clock import now_ms
from rocketstore.store import sync_state_set
from rocketstore.store.abstract_ha_client import HAClientState
from rocketstore.store.abstract_ha_connection import AbstractHAConnection
from rocketstore.store.autoswitch_ha_client import AutoSwitchHAClient, Truncate
from rocketstore.store.autoswitch_ha_connection import AutoSwitchHAConnection
from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.epoch_file import EpochFileCache
from rocketstore.store.ha_client import HAClient
from rocketstore.store.ha_connection import HAConnection
from rocketstore.store.ha_io import close_socket

log = logging.getLogger(__name__)

ACCEPT_POLL_S = 1.0
"""How often the accept loop looks at its stop flag."""

TransferWaiter = Callable[[], None]
"""Called once, in an HA thread, when a slave has reported past the waiter's offset; must not block."""

ALL_ACK_IN_SYNC_STATE_SET = -1
"""The acknowledgement count that means every member of the SyncStateSet (MixAll's constant)."""

SyncStateSetProposal = Callable[[frozenset[int]], None]
"""Called (in an HA thread; must not block) with a SyncStateSet the master wants recorded."""


@dataclass(frozen=True, slots=True)
class SlaveInfo:
    """One connected slave as the master sees it (read-only snapshot for metrics and admin).

    ``acked_offset`` is -1 until the slave's first report. ``lag_bytes`` is the master's max
    offset minus what the slave acknowledged. ``lag_seconds`` is the store time of the master's
    newest record minus that of the first record the slave has not acknowledged (0 when caught
    up, -1 when it cannot be told: no report yet or the records are gone). ``in_sync`` applies
    RocketMQ's isSlaveOK rule to this slave alone: it trails by less than haSlaveFallbehindMax (in
    controller mode: it is a member of the SyncStateSet).
    """

    address: str
    acked_offset: int
    lag_bytes: int
    lag_seconds: float
    in_sync: bool


@dataclass(frozen=True, slots=True)
class RefusedSlave:
    """A slave this master refused because it reported more than the master has."""

    address: str
    slave_offset: int
    master_offset: int
    reason: str
    at_ms: int


def _call_waiters(due: list[TransferWaiter]) -> None:
    """Release the waiters a report satisfied, outside the waiters' lock; one that fails is logged
    and the others still go."""
    for waiter in due:
        try:
            waiter()
        except Exception:  # e.g. its event loop closed meanwhile
            log.exception("transfer waiter %r failed", waiter)


class HAService:
    """The master's listener and connections, push2SlaveMaxOffset, the transfer waiters, the client."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog) -> None:
        self.config = config
        self.commit_log = commit_log
        self._push2slave_max_offset = 0
        self._waiters: list[tuple[int, int, TransferWaiter]] = []  # heap by end offset
        self._waiter_seq = itertools.count()
        self._waiters_lock = threading.Lock()
        self._connections: list[AbstractHAConnection[Any]] = []
        self._connections_lock = threading.Lock()
        self._refused: dict[str, RefusedSlave] = {}
        # writers with nothing to send sleep on this; appends notify it only while one sleeps
        self._data_cond = threading.Condition()
        self._waiting_writers = 0
        self._server: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        #: the broker's event loop, when it serves the 4.x connections (see :meth:`attach_loop`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._push_scheduled = False
        self._stopped = True
        self.listen_port = 0
        self.client: HAClient | AutoSwitchHAClient = HAClient(config, commit_log)
        # -- controller mode (enableControllerMode): AutoSwitch protocol, epochs, SyncStateSet
        self.controller_mode = False
        self.epoch_cache: EpochFileCache | None = None
        #: this replica's id (brokerControllerId): its handshake names it to a master
        self.local_id = -1
        self._sync_state_set: frozenset[int] = frozenset()
        self._proposed: frozenset[int] | None = None  # sent to the source of truth, not yet accepted
        #: the offset every member of the SyncStateSet has (RocketMQ's confirmOffset)
        self.confirm_offset = 0
        self._caught_up_ms: dict[int, int] = {}
        self._group_waiters: list[tuple[int, int, TransferWaiter]] = []  # (end offset, acks needed, waiter)
        #: where the master sends the SyncStateSets it wants (the broker's replicas manager)
        self.on_sync_state_set_proposal: SyncStateSetProposal | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Listen on haListenPort (0: any free port, see :attr:`listen_port`) and start the client.

        A port already taken is logged, not raised: the store still serves (slaves just cannot
        connect), so that a second store on one host (tests, tools) does not fail to start.
        """
        self._stopped = False
        try:
            server = socket.create_server(("", self.config.ha_listen_port), reuse_port=False)
        except OSError as exc:
            log.error("HA service cannot listen on port %d: %s; slaves cannot replicate from this store",
                      self.config.ha_listen_port, exc)
        else:
            server.settimeout(ACCEPT_POLL_S)
            self._server = server
            self.listen_port = server.getsockname()[1]
            self._accept_thread = threading.Thread(target=self._accept_loop, name="AcceptSocketService",
                                                   daemon=True)
            self._accept_thread.start()
            log.info("HA service listening on port %d", self.listen_port)
        self.client.start()

    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve 4.x slaves on ``loop`` (the broker's, from its thread, before :meth:`start`).

        Each slave's reports are then read on the loop, and the data a pass of the loop appended
        is sent from the loop at the end of that pass; the writer thread keeps the catch-up, the
        heartbeats and whatever the socket cannot take at once. A SYNC_MASTER send is answered
        with no thread in its path, where each hand-over between a thread and the loop was a
        wake-up and a pass of the interpreter lock (docs/replication.md, "Sends").
        """
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def shutdown(self) -> None:
        """Stop the client, the listener and every connection; waiters left are dropped (their
        puts time out: nothing will acknowledge them any more)."""
        self._stopped = True
        self.client.shutdown()
        if self._server is not None:
            # the shutdown wakes the accept() blocked in the accept thread at once (close() alone
            # leaves it sleeping until its poll timeout: every store stop took up to a second)
            close_socket(self._server)
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=5)
            self._accept_thread = None
        self._server = None
        self.close_connections()
        self.wake_writers()
        with self._waiters_lock:
            self._waiters.clear()
            self._group_waiters.clear()

    def close_connections(self) -> None:
        """Drop every slave connection (RocketMQ's destroyConnections)."""
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.shutdown()

    def _accept_loop(self) -> None:
        server = self._server
        assert server is not None
        while not self._stopped:
            try:
                sock, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                if not self._stopped:
                    log.exception("HA accept failed")
                return
            address = f"{peer[0]}:{peer[1]}"
            log.info("HA service: new slave connection from %s", address)
            conn: AbstractHAConnection[Any]
            if self.controller_mode:
                conn = AutoSwitchHAConnection(self, sock, address)
            else:
                conn = HAConnection(self, sock, address, self._loop)
            with self._connections_lock:
                self._connections.append(conn)
            conn.start()

    def remove_connection(self, conn: AbstractHAConnection[Any]) -> None:
        """Called by a connection once it ends (closed, silent too long, or refused). In controller
        mode a member of the SyncStateSet that lost its connection is proposed out of it at once
        (AutoSwitchHAService.removeConnection)."""
        with self._connections_lock, contextlib.suppress(ValueError):
            self._connections.remove(conn)
        if isinstance(conn, AutoSwitchHAConnection) and not self._stopped:
            with self._waiters_lock:
                self._caught_up_ms.pop(conn.slave_id, None)
                members = self._sync_state_set
            if conn.slave_id in members and not self._has_connection(conn.slave_id):
                self._propose(members - {conn.slave_id})

    # -- master side: slaves ---------------------------------------------------------------
    @property
    def connection_count(self) -> int:
        """Connected slaves (RocketMQ's connectionCount)."""
        return len(self._connections)

    @property
    def push2slave_max_offset(self) -> int:
        """The highest offset any slave has reported having (RocketMQ's push2SlaveMaxOffset)."""
        return self._push2slave_max_offset

    def is_slave_ok(self, master_put_where: int) -> bool:
        """RocketMQ's isSlaveOK: a slave is connected and the best one trails ``master_put_where``
        (the end of the put just made) by less than haSlaveFallbehindMax."""
        return (self.connection_count > 0
                and master_put_where - self._push2slave_max_offset < self.config.ha_slave_fallbehind_max)

    def slave_fall_behind_much(self) -> int:
        """RocketMQ's slaveFallBehindMuch: the master's max offset minus push2SlaveMaxOffset."""
        return self.commit_log.max_offset - self._push2slave_max_offset

    def request_transfer(self, end_offset: int, on_transferred: TransferWaiter) -> bool:
        """Have ``on_transferred()`` called, in an HA thread, once a slave has reported having the
        log up to ``end_offset``; False, registering nothing, when one already has or the service
        is stopped.

        No thread waits per request: waiters sit in a heap by offset, and the thread that reads a
        report pops exactly the ones it satisfies (O(log n) each, O(1) for a report that
        satisfies none). A waiter is never timed out here: its caller owns the deadline (slaveTimeout)
        and simply stops caring; the waiter is released by the next report past it.
        """
        with self._waiters_lock:
            if self._push2slave_max_offset >= end_offset or self._stopped:
                return False
            heapq.heappush(self._waiters, (end_offset, next(self._waiter_seq), on_transferred))
        return True

    def notify_transfer_some(self, offset: int) -> None:
        """A slave reported ``offset``: raise push2SlaveMaxOffset and release the waiters it covers."""
        due: list[TransferWaiter] = []
        with self._waiters_lock:
            if offset <= self._push2slave_max_offset:
                return
            self._push2slave_max_offset = offset
            waiters = self._waiters
            while waiters and waiters[0][0] <= offset:
                due.append(heapq.heappop(waiters)[2])
        _call_waiters(due)

    def refuse_slave(self, address: str, slave_offset: int, master_offset: int, reason: str) -> None:
        """Record (and log) a slave refused for reporting more than the master has."""
        log.error("HA: refusing slave %s: %s", address, reason)
        self._refused[address.rpartition(":")[0]] = RefusedSlave(address, slave_offset, master_offset, reason,
                                                                 now_ms())

    @property
    def refused_slaves(self) -> list[RefusedSlave]:
        """Slaves refused since start, newest per host: a diverged slave is visible here, not only in the log."""
        return list(self._refused.values())

    def slaves(self) -> list[SlaveInfo]:
        """Read-only snapshot of the connected slaves, for metrics and admin (see :class:`SlaveInfo`)."""
        with self._connections_lock:
            connections = list(self._connections)
        master_max = self.commit_log.max_offset
        fallbehind_max = self.config.ha_slave_fallbehind_max
        infos = []
        for conn in connections:
            acked = conn.acked_offset
            lag_bytes = max(master_max - acked, 0) if acked >= 0 else master_max
            if isinstance(conn, AutoSwitchHAConnection):  # controller mode: a member of the SyncStateSet
                in_sync = conn.slave_id in self._sync_state_set
            else:
                in_sync = acked >= 0 and master_max - acked < fallbehind_max
            infos.append(SlaveInfo(conn.address, acked, lag_bytes, conn.lag_seconds(master_max), in_sync))
        return infos

    # -- master side: new data -------------------------------------------------------------
    def notify_appended(self) -> None:
        """Called after every append to this store's CommitLog: wakes writers idle for want of data
        and, with a loop attached, has the loop send the new data once at the end of its pass.

        One attribute read per put while no writer sleeps. A writer registers itself before its
        last look at the log's end, and an append publishes the end before reading the count, so
        no append can slip between that look and the writer's sleep unseen.
        """
        if self._waiting_writers:
            with self._data_cond:
                self._data_cond.notify_all()
        # only 4.x connections are pushed to: a controller-mode master's writers send for themselves
        if self._loop is not None and not self.controller_mode and self._connections and not self._push_scheduled:
            self._push_scheduled = True
            if threading.get_ident() == self._loop_thread:
                self._loop.call_soon(self._push)
            else:  # a put from another thread (the schedule service's, the timer's); if the loop
                # is closed, each writer thread sends the data by its next heartbeat
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._push)

    def _push(self) -> None:
        """On the loop, once per pass that appended: each 4.x slave gets the new data now."""
        self._push_scheduled = False
        for conn in list(self._connections):
            if isinstance(conn, HAConnection):
                conn.push()

    def wake_writers(self) -> None:
        """Wake every writer idle in :meth:`wait_for_data`: each looks again at its connection (a
        closed one ends its thread at once instead of after its heartbeat wait)."""
        with self._data_cond:
            self._data_cond.notify_all()

    def wait_for_data(self, offset: int, timeout_s: float) -> None:
        """Sleep until the CommitLog extends past ``offset``, the service stops, or ``timeout_s``."""
        with self._data_cond:
            self._waiting_writers += 1
            try:
                if self.commit_log.max_offset <= offset and not self._stopped:
                    self._data_cond.wait(timeout_s)
            finally:
                self._waiting_writers -= 1

    # -- controller mode ---------------------------------------------------------------------
    def use_controller_mode(self, epoch_cache: EpochFileCache, local_id: int, truncate: Truncate) -> None:
        """Speak RocketMQ 5's AutoSwitch HA protocol (enableControllerMode), before :meth:`start`:
        slaves hand-shake with their replica id and exchange epochs, the master keeps the
        SyncStateSet. ``local_id`` is this replica's id; ``truncate`` the store's truncate_files."""
        self.controller_mode = True
        self.epoch_cache = epoch_cache
        self.local_id = local_id
        self.client = AutoSwitchHAClient(self.config, self.commit_log, epoch_cache, local_id, truncate)

    @property
    def sync_state_set(self) -> frozenset[int]:
        """The SyncStateSet as last accepted by the source of truth."""
        return self._sync_state_set

    def wait_set(self) -> frozenset[int]:
        """The members an acknowledgement waits for: the accepted set and, while a change is
        being recorded, the proposed one too (AutoSwitchHAService.getSyncStateSet)."""
        with self._waiters_lock:
            proposed = self._proposed
            return self._sync_state_set | proposed if proposed is not None else self._sync_state_set

    def in_sync_replicas_nums(self) -> int:
        """inSyncReplicasNums: the larger of the accepted and the proposed set."""
        with self._waiters_lock:
            proposed = self._proposed
            return max(len(self._sync_state_set), len(proposed) if proposed is not None else 0)

    def set_sync_state_set(self, members: frozenset[int]) -> None:
        """Apply a SyncStateSet the source of truth accepted (setSyncStateSet)."""
        with self._waiters_lock:
            self._sync_state_set = frozenset(members)
            self._proposed = None
        self._update_confirm_offset()
        self._release_group_waiters()

    def reset_sync_state_set(self) -> None:
        """A replica that stops being master forgets its slaves' progress and its set."""
        with self._waiters_lock:
            self._sync_state_set = frozenset()
            self._proposed = None
            self._caught_up_ms.clear()

    def _propose(self, members: frozenset[int]) -> None:
        with self._waiters_lock:
            if members == self._sync_state_set or members == self._proposed:
                return
            self._proposed = members
        log.info("SyncStateSet %s: proposing %s", sorted(self._sync_state_set), sorted(members))
        listener = self.on_sync_state_set_proposal
        if listener is not None:
            listener(members)

    def maybe_shrink_sync_state_set(self) -> None:
        """Propose the set without the members that fell more than haMaxTimeSlaveNotCatchup behind
        (the replicas manager calls it every checkSyncStateSetPeriod)."""
        with self._waiters_lock:
            members, caught_up = self._sync_state_set, dict(self._caught_up_ms)
        if not members:
            return
        kept = sync_state_set.shrunk(members, self.local_id, caught_up, now_ms(),
                                     self.config.ha_max_time_slave_not_catchup)
        if kept != members:
            self._propose(kept)

    def _has_connection(self, slave_id: int) -> bool:
        with self._connections_lock:
            return any(isinstance(c, AutoSwitchHAConnection) and c.slave_id == slave_id for c in self._connections)

    def acked_by_slave(self) -> dict[int, int]:
        """Each connected slave's acknowledged offset by replica id (the best one per id)."""
        acked: dict[int, int] = {}
        with self._connections_lock:
            for conn in self._connections:
                if isinstance(conn, AutoSwitchHAConnection) and conn.slave_id >= 0:
                    acked[conn.slave_id] = max(acked.get(conn.slave_id, -1), conn.acked_offset)
        return acked

    def update_caught_up(self, slave_id: int, at_ms: int) -> None:
        with self._waiters_lock:
            self._caught_up_ms[slave_id] = max(self._caught_up_ms.get(slave_id, 0), at_ms)

    def on_slave_report(self, slave_id: int, offset: int, caught_up_ms: int | None) -> None:
        """An AutoSwitch slave reported ``offset``: it may rejoin the set, the confirm offset may
        move, waiters it satisfies go (AutoSwitchHAConnection's reader)."""
        if caught_up_ms is not None:
            self.update_caught_up(slave_id, caught_up_ms)
            members = self._sync_state_set
            epoch = self.epoch_cache.last_entry() if self.epoch_cache is not None else None
            if members and slave_id not in members and sync_state_set.may_join(
                    offset, self.confirm_offset, epoch.start_offset if epoch is not None else 0):
                self._propose(members | {slave_id})
        if slave_id in self._sync_state_set:
            self._update_confirm_offset()
        self.notify_transfer_some(offset)
        self._release_group_waiters()

    def _update_confirm_offset(self) -> None:
        confirmed = sync_state_set.confirm_offset(self._sync_state_set, self.local_id, self.acked_by_slave(),
                                                  self.commit_log.max_offset)
        if confirmed is not None:
            self.confirm_offset = confirmed

    def request_group_transfer(self, end_offset: int, need_acks: int, on_transferred: TransferWaiter) -> bool:
        """Controller mode's SYNC_MASTER wait: have ``on_transferred()`` called once ``need_acks``
        copies (master included; :data:`ALL_ACK_IN_SYNC_STATE_SET`: every member of the
        SyncStateSet) hold the log up to ``end_offset``. False, registering nothing, when they
        already do. Like :meth:`request_transfer`, the caller owns the deadline."""
        if self._group_satisfied(end_offset, need_acks, self.acked_by_slave(), self.wait_set()):
            return False
        with self._waiters_lock:
            if self._stopped:
                return False
            self._group_waiters.append((end_offset, need_acks, on_transferred))
        self._release_group_waiters()  # a report may have come between the check and the append
        return True

    def _group_satisfied(self, end_offset: int, need_acks: int, acked: dict[int, int],
                         members: frozenset[int]) -> bool:
        if need_acks == ALL_ACK_IN_SYNC_STATE_SET:
            return sync_state_set.all_acked(members, self.local_id, acked, end_offset)
        return sync_state_set.acks_reached(acked, end_offset, need_acks)

    def _release_group_waiters(self) -> None:
        if not self._group_waiters:
            return
        acked = self.acked_by_slave()
        members = self.wait_set()
        due: list[TransferWaiter] = []
        with self._waiters_lock:
            kept = []
            for waiter in self._group_waiters:
                if self._group_satisfied(waiter[0], waiter[1], acked, members):
                    due.append(waiter[2])
                else:
                    kept.append(waiter)
            self._group_waiters = kept
        _call_waiters(due)

    # -- slave side ------------------------------------------------------------------------
    def update_master_address(self, address: str | None) -> None:
        """Point the client at ``address`` (host:haPort); None stops replicating. A slave that refused
        its old master tries again only when given a different address."""
        self.client.update_master_address(address)

    def client_state(self) -> HAClientState:
        """The slave side's state, for metrics and admin (see :class:`HAClientState`)."""
        return self.client.state()
