"""Rolling restarts of broker groups: slaves first, a group's master once its slaves are in sync.

A group's master restarting is the moment its slaves matter: while it is down, consumers read
from the slaves, and under SYNC_MASTER nothing was acknowledged that a slave does not hold. So a
new pod template reaches the slaves first (their StatefulSets roll freely, one pod at a time) and
a master only once every slave of its group runs the new template, is ready and is in sync again
(lag at most ``replication.maxInSyncLag``, from the master's own HA metrics).

The masters' StatefulSet carries the decision as its rolling update ``partition``: the controller
updates ordinals at and above it, from the highest down, one at a time. :func:`master_partition`
lowers it over the groups that may restart their master, from the top ordinal down, and stops at
the first that may not. A group may restart its master when:

* its master already runs the new template (nothing left to do there);
* its master is not ready (restarting a master that serves nothing loses nothing, and holding it
  back would keep a fix, say more memory, from reaching a crash-looping master);
* every slave of the group runs its StatefulSet's update revision, is ready and is in sync.

With Lease failover (``replication.failover.mode: Lease``) the master of a group is whichever
member holds its Lease (``status.masters``), not pod ``NAME-<i>``, so the order comes from the
Lease: :func:`lease_group_restart` names the one member of a group to restart next, the
members the Lease does not name first, one at a time, and the Lease's master last, once every
other member runs the new template, is ready and is in the Lease's SyncStateSet. Deleting that
master's pod sends it SIGTERM, on which it hands the Lease to an in-sync slave before it exits
(``rocketstore.broker.lease_elector``, docs/failover.md): the group stays writable but for the
hand-over's pause.

Everything here is pure: :func:`group_rollouts` reads the StatefulSets and pods the reconciler
listed and the lag it observed (:func:`rocketstore.operator.status.group_views`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from rocketstore.operator.desired import pod_name, slave_statefulset_name
from rocketstore.operator.model import Spec
from rocketstore.operator.status import GroupView, pod_ready

__all__ = ["GroupRollout", "LeaseMember", "group_rollouts", "held_masters", "lease_failover_kept",
           "lease_group_restart", "master_partition", "pod_updated"]

#: the label the StatefulSet controller sets on each pod: the revision of the template it runs
REVISION_LABEL: Final = "controller-revision-hash"


@dataclass(frozen=True)
class GroupRollout:
    ordinal: int
    master_ready: bool
    #: the master runs its StatefulSet's update revision
    master_updated: bool
    #: every slave runs its StatefulSet's update revision and is ready
    slaves_updated: bool
    slaves_in_sync: bool

    @property
    def master_may_restart(self) -> bool:
        return self.master_updated or not self.master_ready or (self.slaves_updated and self.slaves_in_sync)


def master_partition(replicas: int, groups: Sequence[GroupRollout]) -> int:
    """The masters' rolling update partition: the lowest ordinal such that every group from it
    up may restart its master (``replicas``: none may). The StatefulSet controller rolls from the
    highest ordinal down, so the partition only needs to follow that order."""
    by_ordinal = {g.ordinal: g for g in groups}
    partition = replicas
    for i in reversed(range(replicas)):
        group = by_ordinal.get(i)
        if group is None or not group.master_may_restart:
            break
        partition = i
    return partition


def held_masters(name: str, partition: int, groups: Sequence[GroupRollout]) -> list[str]:
    """The masters the partition keeps from a template they do not run yet."""
    return [pod_name(name, g.ordinal) for g in groups if g.ordinal < partition and not g.master_updated]


def pod_updated(sts: Mapping[str, Any] | None, pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` runs the update revision of ``sts``, and the controller has seen the
    StatefulSet's latest spec (until then ``status.updateRevision`` is the previous template's)."""
    if sts is None or not pod:
        return False
    status = sts.get("status") or {}
    generation = (sts.get("metadata") or {}).get("generation")
    if generation is None or status.get("observedGeneration") != generation:
        return False
    revision = (pod.get("metadata", {}).get("labels") or {}).get(REVISION_LABEL)
    return revision is not None and revision == status.get("updateRevision")


def group_rollouts(name: str, groups: Sequence[GroupView], statefulsets: Mapping[str, Mapping[str, Any]]
                   ) -> list[GroupRollout]:
    """Each group's rollout state from the store's StatefulSets (by name; ``name``: the masters')."""
    masters = statefulsets.get(name)
    rollouts = []
    for g in groups:
        # without failover member 0 is the master for good: its StatefulSet's pod, whatever it reports
        master, *slaves = g.members
        slaves_updated = all(
            pod_ready(m.pod) and pod_updated(statefulsets.get(slave_statefulset_name(name, m.member)), m.pod)
            for m in slaves)
        rollouts.append(GroupRollout(
            ordinal=g.ordinal,
            master_ready=pod_ready(master.pod),
            master_updated=pod_updated(masters, master.pod),
            slaves_updated=slaves_updated,
            slaves_in_sync=all(m.in_sync for m in slaves),
        ))
    return rollouts


@dataclass(frozen=True)
class LeaseMember:
    """One member of a Lease failover group, as a rolling update sees it."""

    pod: str
    #: its stable replica id (brokerId), as the Lease names it
    replica_id: int
    ready: bool
    #: runs its StatefulSet's update revision
    updated: bool
    #: MASTER or SLAVE as its broker reports it (None: not known)
    role: str | None = None


def lease_group_restart(members: Sequence[LeaseMember], master_replica_id: int | None,
                        sync_state_set: frozenset[int]) -> str | None:
    """The pod of a Lease failover group to restart next for a new template, or None for none now.

    ``master_replica_id`` and ``sync_state_set`` are the group's Lease (None: no master now).

    * one member at a time: while an updated member is not ready (restarting, catching up),
      nothing else restarts;
    * a member that is not ready and not updated restarts at once (it serves nothing; holding it
      back would keep a fix from reaching a crash-looping pod);
    * the members the Lease does not name restart first, the highest replica id first;
    * the master last, only when every other member is updated, ready and in the SyncStateSet,
      so that it hands the Lease over on SIGTERM instead of leaving the group without a master
      until the Lease expires (a group of one member simply restarts);
    * while the Lease names no master (failover just switched on, the brokers still running
      without it; or an election pending), the first member to run the new template may take the
      Lease, and its log becomes the group's: so the member serving as master now (its broker
      reports MASTER), the one holding every acknowledged message, restarts first; and nothing
      restarts while some member's role is not known or a member already runs the new template
      (it is about to take the Lease: a second candidate would race it).
    """
    stale = [m for m in members if not m.updated]
    if not stale:
        return None
    broken = [m for m in stale if not m.ready]
    if broken:
        return broken[0].pod
    if any(not m.ready for m in members):
        return None
    if master_replica_id is None:
        serving = [m for m in stale if m.role == "MASTER"]
        if serving:
            return serving[0].pod
        if len(stale) < len(members) or any(m.role is None for m in members):
            return None
    slaves = sorted((m for m in stale if m.replica_id != master_replica_id), key=lambda m: -m.replica_id)
    if slaves:
        return slaves[0].pod
    others = [m for m in members if m.replica_id != master_replica_id]
    if not others or all(m.replica_id in sync_state_set for m in others):
        return stale[0].pod
    return None


def lease_failover_kept(spec: Spec, masters: Mapping[str, Any] | None) -> tuple[Spec, dict[str, str] | None]:
    """The spec to apply when ``spec`` switches Lease failover off on a store that runs it (its
    masters' StatefulSet ``masters`` updates OnDelete, which only Lease failover sets), and the
    refusal to report: the failover stays.

    Switching off is not safe on a running store: the brokers' Lease Role goes with the first
    apply, so the Lease's master can no longer renew and stops acknowledging sends (its group
    takes no writes until it restarts), and the restarted brokers make member 0 (``NAME-<i>``) the
    master for good, without the messages it lacks if another member held the Lease."""
    running = ((((masters or {}).get("spec") or {}).get("updateStrategy") or {}).get("type")) == "OnDelete"
    if spec.replication.failover.lease or not running or not spec.replication.slaves:
        return spec, None
    failover = replace(spec.replication.failover, mode="Lease")
    kept = replace(spec, replication=replace(spec.replication, failover=failover))
    return kept, {"reason": "FailoverOffRefused", "message": (
        "spec.replication.failover.mode None on a store running Lease failover: refused, Lease failover stays "
        "(its brokers would lose their Lease Role at once, so the masters stop taking writes, and member 0 "
        "of each group would become master even where another member holds the acknowledged messages); "
        "set mode: Lease again, see docs/operator.md")}
