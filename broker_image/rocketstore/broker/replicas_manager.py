"""ReplicasManager: the broker's side of a role change in controller mode (RocketMQ 5's ReplicasManager).

With ``enableControllerMode=true`` the broker starts as a replica that takes no writes and follows
no one; its group's source of truth (a :class:`~rocketstore.broker.master_elector.MasterElector`, or
Apache's controller through NOTIFY_BROKER_ROLE_CHANGED) decides who is master, and
:meth:`ReplicasManager.apply_role` carries each decision out without a restart:

* **to master**: the store stops following, starts the new epoch at its max physical offset,
  lets dispatch catch up and takes puts as a SYNC_MASTER; the broker takes brokerId 0, applies
  the SyncStateSet it was given and registers with every name server at once, so routes (and
  gRPC QueryRoute) name it before the next periodic registration;
* **to slave**: the store refuses puts at once, then follows the new master's HA address; the
  AutoSwitch handshake compares epoch histories and truncates this log to the last offset both
  share before anything is appended (store/autoswitch_ha_client.py); the broker registers with its
  replica id and copies the master's tables (SlaveSynchronize).

An assignment with an older master epoch than the last one applied changes nothing; the same
assignment twice changes nothing the second time.

As master it keeps the SyncStateSet: the HA service proposes a member out when it fell more
than ``haMaxTimeSlaveNotCatchup`` behind (checked every ``checkSyncStateSetPeriod``) or lost its
connection, and back in when it caught up; each proposal goes to
``MasterElector.alter_sync_state_set`` and is applied only once accepted (with Apache's controller:
controller_elector.py). Without an elector (roles by notification only) a proposal cannot be
recorded: it is logged and the set stays as last notified, which never loosens a wait.

:meth:`may_acknowledge` is what the send path asks before the put and again before an
acknowledgement leaves, and what the store asks before every put (its ``write_fence``: transaction
commits, send-backs, delayed deliveries): past the elector's ``write_deadline()`` this broker may
no longer be master (docs/failover.md, the timing argument), and it answers as a broker that is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.lease_elector import HandOver, LeaseElector
from rocketstore.broker.master_elector import MasterElector, RoleAssignment
from rocketstore.common.mix_all import MASTER_ID
from rocketstore.remoting.headers import NotifyBrokerRoleChangedRequestHeader
from rocketstore.store.config import BrokerRole
from rocketstore.store.message_store import DefaultMessageStore

log = logging.getLogger(__name__)


class RoleAction(Enum):
    """What a replica does with an assignment."""

    NONE = "none"
    MASTER = "master"
    SLAVE = "slave"
    #: the same master and epoch with a newer SyncStateSet: only the set changes
    SYNC_STATE_SET = "sync_state_set"


@dataclass(frozen=True, slots=True)
class RoleChange:
    """What :func:`decide_role_change` says to do with an assignment, and why not when NONE."""

    action: RoleAction
    reason: str = ""


def decide_role_change(assignment: RoleAssignment, replica_id: int, current: RoleAssignment | None) -> RoleChange:
    """What a replica does with ``assignment`` given the last one it applied (changeBrokerRole):
    nothing for an older master epoch or the same decision again, only the SyncStateSet for a
    newer set of the same master and epoch, else become master or slave."""
    if current is not None:
        if assignment.master_epoch < current.master_epoch:
            return RoleChange(RoleAction.NONE, f"master epoch {assignment.master_epoch} < {current.master_epoch}")
        if assignment.master_epoch == current.master_epoch:
            if assignment.master_replica_id != current.master_replica_id:
                return RoleChange(RoleAction.NONE, f"epoch {assignment.master_epoch} already has master "
                                          f"{current.master_replica_id}")
            if (assignment.master_replica_id == replica_id
                    and assignment.sync_state_set_epoch > current.sync_state_set_epoch):
                return RoleChange(RoleAction.SYNC_STATE_SET)
            if assignment.master_replica_id != replica_id and assignment.master_ha_address != current.master_ha_address:
                return RoleChange(RoleAction.SLAVE)
            return RoleChange(RoleAction.NONE, "already applied")
    return RoleChange(RoleAction.MASTER if assignment.master_replica_id == replica_id else RoleAction.SLAVE)


def ha_address_of(master_address: str) -> str:
    """The HA listen address of a broker listening at ``master_address``, as a first guess: the same
    host, port + 1 (our BrokerStartup's rule, and Apache 4.x's; Apache 5's only when haListenPort is
    not configured). NOTIFY_BROKER_ROLE_CHANGED does not carry it; the name server's registration
    answer (its haServerAddr) corrects it when brokerIP2 or haListenPort differ."""
    host, sep, port = master_address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"master address {master_address!r} is not host:port")
    return f"{host}:{int(port) + 1}"


def role_assignment(header: NotifyBrokerRoleChangedRequestHeader, body: Mapping[str, object]) -> RoleAssignment:
    """A NOTIFY_BROKER_ROLE_CHANGED request as a role assignment; ValueError when it names no
    master (masterBrokerId and masterEpoch are required, as changeBrokerRole ignores it without)."""
    if header.master_broker_id is None or header.master_epoch is None:
        raise ValueError("NOTIFY_BROKER_ROLE_CHANGED without masterBrokerId or masterEpoch")
    members = body.get("syncStateSet") or []
    if not isinstance(members, list) or not all(isinstance(m, int) for m in members):
        raise ValueError(f"syncStateSet {members!r} is not a list of broker ids")
    address = header.master_address or ""
    return RoleAssignment(
        master_replica_id=header.master_broker_id, master_address=address,
        master_ha_address=ha_address_of(address) if address else "", master_epoch=header.master_epoch,
        sync_state_set=frozenset(members),
        sync_state_set_epoch=header.sync_state_set_epoch if header.sync_state_set_epoch is not None else 0)


class ReplicasManager:
    """Implements :class:`~rocketstore.broker.master_elector.Replica` for one broker."""

    def __init__(self, broker_config: BrokerConfig, store: DefaultMessageStore, elector: MasterElector | None, *,
                 register: Callable[[], Awaitable[None]],
                 on_role_changed: Callable[[bool, str | None], None]) -> None:
        self.broker_config = broker_config
        self.store = store
        self.elector = elector
        self._replica_id = broker_config.broker_id
        self._register = register
        self._on_role_changed = on_role_changed
        self._lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the last assignment applied (None before the first)
        self.assignment: RoleAssignment | None = None
        self._check_task: asyncio.Task[None] | None = None
        self._proposals: set[asyncio.Task[None]] = set()

    # -- Replica -------------------------------------------------------------------------------
    @property
    def replica_id(self) -> int:
        return self._replica_id

    @property
    def max_phy_offset(self) -> int:
        return self.store.max_phy_offset

    @property
    def last_epoch(self) -> int:
        return self.store.epoch_cache.last_epoch

    @property
    def confirm_offset(self) -> int:
        return self.store.ha_service.confirm_offset

    @property
    def acked_offsets(self) -> Mapping[int, int]:
        return self.store.ha_service.acked_by_slave()

    @property
    def is_master(self) -> bool:
        current = self.assignment
        return current is not None and current.master_replica_id == self._replica_id

    async def start(self) -> None:
        """Join the group (once the broker serves): the elector starts deciding."""
        self._loop = asyncio.get_running_loop()
        self.store.ha_service.on_sync_state_set_proposal = self._proposal_from_ha_thread
        self.store.ha_service.client.on_master_lost = self._master_lost_from_ha_thread
        self.store.write_fence = self.may_acknowledge
        if self.elector is not None:
            await self.elector.start(self)

    async def stop(self) -> None:
        """Leave the group. A master's elector hands over (docs/failover.md, planned hand-over);
        then its slaves' HA connections close, which makes the successor read the Lease at once
        (:meth:`_master_lost_from_ha_thread` on its side) rather than at its next periodic read."""
        if self.elector is not None:
            with contextlib.suppress(Exception):
                await self.elector.stop()
            # off the loop: it joins each connection's threads, and the loop still answers sends
            await asyncio.to_thread(self.store.ha_service.close_connections)
        self._stop_checking()
        for task in list(self._proposals):
            task.cancel()

    async def hand_over(self, to: int | None = None) -> HandOver | None:
        """A master's step-down on request (an admin before a drain): its Lease elector fences,
        waits for an in-sync slave (``to``: that replica) to hold the whole log and releases the
        Lease to it (docs/failover.md, planned hand-over); this broker stays up and follows the new
        master at its elector's next read. The slaves' HA connections are then closed, as on
        SIGTERM, so the successor reads the Lease at once rather than at its next periodic read.
        None when the source of truth is not a Lease (Apache's controller elects by its own
        ``electMaster``; without an elector nothing here can)."""
        elector = self.elector
        if not isinstance(elector, LeaseElector):
            return None
        outcome = await elector.hand_over(to)
        if outcome is HandOver.RELEASED:
            await asyncio.to_thread(self.store.ha_service.close_connections)
        return outcome

    async def apply_role(self, assignment: RoleAssignment) -> None:
        async with self._lock:
            change = decide_role_change(assignment, self._replica_id, self.assignment)
            if change.action is RoleAction.NONE:
                log.debug("role assignment %s: nothing to do (%s)", assignment, change.reason)
                return
            if change.action is RoleAction.SYNC_STATE_SET:
                self._apply_sync_state_set(assignment.sync_state_set)
                self.assignment = assignment
                return
            if change.action is RoleAction.MASTER:
                await self._to_master(assignment)
            else:
                await self._to_slave(assignment)

    async def _to_master(self, assignment: RoleAssignment) -> None:
        log.info("replica %d becomes master of %s in epoch %d (SyncStateSet %s)", self._replica_id,
                 self.broker_config.broker_name, assignment.master_epoch, sorted(assignment.sync_state_set))
        if not await asyncio.to_thread(self.store.change_to_master, assignment.master_epoch):
            log.error("replica %d could not become master in epoch %d", self._replica_id, assignment.master_epoch)
            return
        self._apply_sync_state_set(assignment.sync_state_set | {self._replica_id})
        self.broker_config.broker_id = MASTER_ID
        self.assignment = assignment
        self._on_role_changed(True, None)
        self._start_checking()
        await self._register_now()

    async def _to_slave(self, assignment: RoleAssignment) -> None:
        log.info("replica %d follows master %d (%s, HA %s) in epoch %d", self._replica_id,
                 assignment.master_replica_id, assignment.master_address, assignment.master_ha_address,
                 assignment.master_epoch)
        self._stop_checking()
        await asyncio.to_thread(self.store.change_to_slave, assignment.master_ha_address or None)
        self.broker_config.broker_id = self._replica_id
        self.assignment = assignment
        self._on_role_changed(False, assignment.master_address or None)
        await self._register_now()

    async def _register_now(self) -> None:
        try:
            await self._register()
        except Exception:
            log.exception("registering after the role change failed; the periodic registration retries")

    def registered(self, master_addr: str | None, ha_server_addr: str | None) -> None:
        """A name server's registration answer: a slave takes the master's haServerAddr from it
        when it names the master of the current assignment (brokerIP2 may differ from brokerIP1)."""
        current = self.assignment
        if (current is None or self.is_master or not ha_server_addr or master_addr != current.master_address
                or ha_server_addr == current.master_ha_address):
            return
        log.info("master %s's HA address is %s (name server), not %s", master_addr, ha_server_addr,
                 current.master_ha_address)
        self.assignment = RoleAssignment(current.master_replica_id, current.master_address, ha_server_addr,
                                         current.master_epoch, current.sync_state_set, current.sync_state_set_epoch)
        self.store.update_ha_master_address(ha_server_addr)

    # -- acknowledgements ----------------------------------------------------------------------
    def may_acknowledge(self) -> bool:
        """Whether a write may be acknowledged now: this replica is master and, with an elector,
        its write deadline has not passed."""
        if not self.is_master or self.store.config.broker_role is BrokerRole.SLAVE:
            return False
        return self.elector is None or time.monotonic() < self.elector.write_deadline()

    # -- SyncStateSet --------------------------------------------------------------------------
    def _apply_sync_state_set(self, members: frozenset[int]) -> None:
        log.info("SyncStateSet of %s: %s", self.broker_config.broker_name, sorted(members))
        self.store.ha_service.set_sync_state_set(members)

    def _proposal_from_ha_thread(self, members: frozenset[int]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._spawn_proposal, members)

    def _master_lost_from_ha_thread(self) -> None:
        loop, elector = self._loop, self.elector
        if elector is not None and loop is not None and not loop.is_closed():
            log.info("the connection to master %s ended: asking the source of truth now",
                     self.assignment.master_address if self.assignment is not None else None)
            loop.call_soon_threadsafe(elector.wake)

    def _spawn_proposal(self, members: frozenset[int]) -> None:
        task = asyncio.get_running_loop().create_task(self._propose(members), name="alter-sync-state-set")
        self._proposals.add(task)
        task.add_done_callback(self._proposals.discard)

    async def _propose(self, members: frozenset[int]) -> None:
        """Ask the source of truth to record ``members``; apply them only once accepted."""
        async with self._lock:
            current = self.assignment
            if current is None or not self.is_master:
                return
            members = members | {self._replica_id}
            if self.elector is None:
                log.warning("SyncStateSet %s wanted, but no elector can record it: keeping %s", sorted(members),
                            sorted(current.sync_state_set))
                return
            epoch = await self.elector.alter_sync_state_set(members, current.sync_state_set_epoch)
            if epoch is None:
                log.warning("SyncStateSet %s refused by the source of truth", sorted(members))
                self.store.ha_service.set_sync_state_set(current.sync_state_set)
                return
            self.assignment = RoleAssignment(current.master_replica_id, current.master_address,
                                             current.master_ha_address, current.master_epoch, members, epoch)
            self._apply_sync_state_set(members)

    def _start_checking(self) -> None:
        self._stop_checking()
        assert self._loop is not None
        self._check_task = self._loop.create_task(self._check_loop(), name="check-sync-state-set")

    def _stop_checking(self) -> None:
        if self._check_task is not None:
            self._check_task.cancel()
            self._check_task = None

    async def _check_loop(self) -> None:
        """checkSyncStateSetAndDoReport, every checkSyncStateSetPeriod."""
        while True:
            await asyncio.sleep(max(self.broker_config.check_sync_state_set_period, 100) / 1000)
            self.store.ha_service.maybe_shrink_sync_state_set()
