"""Who is master of a broker group: the contract between a broker and its source of truth.

In controller mode (docs/failover.md) one source of truth per broker group decides which replica
is master and which replicas are in sync: a Kubernetes Lease held by the brokers themselves
(lease_elector.py), or Apache RocketMQ's own controller off Kubernetes. Both drive a broker
through the same calls, so the broker's side of a role change (replicas_manager.py) is written
once and the sources of truth stay swappable.

The names follow RocketMQ 5's controller mode: a role change carries what its
``NotifyBrokerRoleChangedRequestHeader`` carries (master address, master epoch, SyncStateSet
epoch, master broker id), plus the SyncStateSet itself and the master's HA address.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RoleAssignment:
    """One decision of the source of truth: the group's master and its in-sync replicas.

    Replicas are named by their stable replica id (``Replica.replica_id``), not by the routes'
    brokerId: routes give the master brokerId 0 whichever replica it is.
    """

    #: the replica id of the master
    master_replica_id: int
    #: the master's remoting address (host:port), which routes and clients use
    master_address: str
    #: the master's HA listen address (host:port), which slaves connect to
    master_ha_address: str
    #: the master epoch: a new master starts a new one (epochFileCheckpoint)
    master_epoch: int
    #: the replicas that may be elected: within haMaxTimeSlaveNotCatchup of the master
    sync_state_set: frozenset[int]
    #: bumped on every change of the SyncStateSet, so a stale change is refused
    sync_state_set_epoch: int


class Replica(Protocol):
    """A broker as its source of truth sees it (implemented by the broker's replicas manager)."""

    @property
    def replica_id(self) -> int:
        """This replica's stable id in its group (the same across restarts and role changes)."""

    @property
    def max_phy_offset(self) -> int:
        """The end of this replica's CommitLog: where a new epoch would start."""

    @property
    def last_epoch(self) -> int:
        """The last master epoch in this replica's epoch file (0 before any): a controller
        prefers the replica with the newest history."""

    @property
    def confirm_offset(self) -> int:
        """The offset up to which the SyncStateSet confirmed this replica's log."""

    @property
    def acked_offsets(self) -> Mapping[int, int]:
        """As master: the offset each connected slave acknowledged, by replica id (a planned
        step-down hands over only to a slave holding the whole log)."""

    async def apply_role(self, assignment: RoleAssignment) -> None:
        """Becomes master or slave as ``assignment`` says, without a restart.

        Idempotent: the same assignment applied twice changes nothing the second time.
        """


class MasterElector(Protocol):
    """A group's source of truth for mastership, as a broker uses it."""

    async def start(self, replica: Replica) -> None:
        """Joins the group: from now on ``replica.apply_role`` is called on every decision."""

    async def stop(self) -> None:
        """Leaves the group; a master gives up its mastership so another can take it at once."""

    def write_deadline(self) -> float:
        """Until when (``time.monotonic()``) this replica may acknowledge writes as master.

        A master checks it before every acknowledgement leaves: past it, the mastership may
        already have passed to another replica (the timing argument of docs/failover.md), so it
        answers as a broker that is not master. 0.0 for a replica that is not master.
        """

    def wake(self) -> None:
        """The replica lost its connection to its master (a master handing over closes it):
        look at the source of truth now rather than at the next periodic look."""

    async def alter_sync_state_set(self, members: frozenset[int], sync_state_set_epoch: int) -> int | None:
        """Asks the source of truth to record a new SyncStateSet; the master applies it only after.

        ``sync_state_set_epoch`` is the epoch of the set the change starts from. Returns the new
        set's epoch, or None when the change was refused (a newer set exists, or this replica is
        no longer master): a master must never shrink its acknowledgement set on its own.
        """
