"""A MasterElector driven by the test: it stands in for the Kubernetes Lease elector and for Apache's
controller, neither of which a broker test should need to exercise the broker's side of a role change.

One :class:`ElectorGroup` is the group's source of truth; each in-process broker gets a
:class:`DrivenElector` of it (``start_broker(..., elector=group.elector())``). The test decides:
``group.elect(replica_id)`` makes a replica master in a new epoch and tells every replica (on its own
broker loop, through ``Replica.apply_role``), ``group.expire(replica_id)`` ends a master's write
deadline as a lost Lease would. ``alter_sync_state_set`` is accepted when it comes from the current
master and starts from the current set's epoch, as the Lease's compare-and-swap and the controller
accept it; every accepted set is kept in ``group.sync_state_sets`` for the test to look at.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from rocketstore.broker.master_elector import Replica, RoleAssignment


@dataclass
class ElectorGroup:
    """The group's state: replicas, their addresses, the current assignment, the write deadlines."""

    #: replica id -> (remoting address, HA address); the test fills it once the brokers listen
    addresses: dict[int, tuple[str, str]] = field(default_factory=dict)
    replicas: dict[int, tuple[Replica, asyncio.AbstractEventLoop]] = field(default_factory=dict)
    assignment: RoleAssignment | None = None
    deadlines: dict[int, float] = field(default_factory=dict)
    sync_state_sets: list[tuple[frozenset[int], int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def elector(self) -> DrivenElector:
        return DrivenElector(self)

    def elect(self, master_id: int, sync_state_set: frozenset[int] | None = None, *,
              tell: Iterable[int] | None = None, timeout: float = 30.0) -> RoleAssignment:
        """Make ``master_id`` master in the next epoch and apply it on the replicas of ``tell``
        (default: all; fewer for a replica cut off from the source of truth), master first, as a
        new master must listen before its slaves connect. Returns the assignment."""
        with self.lock:
            previous = self.assignment
            address, ha_address = self.addresses[master_id]
            members = sync_state_set if sync_state_set is not None else frozenset({master_id})
            assignment = RoleAssignment(master_id, address, ha_address,
                                        previous.master_epoch + 1 if previous else 1, members,
                                        previous.sync_state_set_epoch + 1 if previous else 1)
            self.assignment = assignment
            told = set(self.replicas if tell is None else tell) | {master_id}
            # a replica not told keeps its deadline: the test plays the window before its Lease ran out
            self.deadlines = {rid: deadline for rid, deadline in self.deadlines.items() if rid not in told}
            self.deadlines[master_id] = math.inf
        order = sorted(told, key=lambda rid: rid != master_id)
        for replica_id in order:
            self.apply(replica_id, timeout)
        return assignment

    def apply(self, replica_id: int, timeout: float = 30.0) -> None:
        """Tell ``replica_id`` the current assignment again (e.g. once it rejoined)."""
        replica, loop = self.replicas[replica_id]
        assert self.assignment is not None
        asyncio.run_coroutine_threadsafe(replica.apply_role(self.assignment), loop).result(timeout)

    def expire(self, replica_id: int) -> None:
        """The replica's mastership lapsed (a Lease not renewed): it must stop acknowledging writes."""
        with self.lock:
            self.deadlines[replica_id] = 0.0


class DrivenElector:
    """One replica's view of an :class:`ElectorGroup` (implements MasterElector)."""

    def __init__(self, group: ElectorGroup) -> None:
        self.group = group
        self.replica: Replica | None = None
        #: how often the broker said it lost its master's HA connection (MasterElector.wake)
        self.woken = 0

    async def start(self, replica: Replica) -> None:
        self.replica = replica
        self.group.replicas[replica.replica_id] = (replica, asyncio.get_running_loop())

    async def stop(self) -> None:
        if self.replica is not None:
            self.group.replicas.pop(self.replica.replica_id, None)

    def write_deadline(self) -> float:
        assert self.replica is not None
        return self.group.deadlines.get(self.replica.replica_id, 0.0)

    def wake(self) -> None:
        """Counted only: the test tells every replica of each election itself."""
        self.woken += 1

    async def alter_sync_state_set(self, members: frozenset[int], sync_state_set_epoch: int) -> int | None:
        assert self.replica is not None
        group = self.group
        with group.lock:
            current = group.assignment
            if (current is None or current.master_replica_id != self.replica.replica_id
                    or current.sync_state_set_epoch != sync_state_set_epoch):
                return None
            epoch = sync_state_set_epoch + 1
            group.assignment = RoleAssignment(current.master_replica_id, current.master_address,
                                              current.master_ha_address, current.master_epoch, members, epoch)
            group.sync_state_sets.append((members, epoch))
            return epoch
