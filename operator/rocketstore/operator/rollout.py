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

Everything here is pure: :func:`group_rollouts` reads the StatefulSets and pods the reconciler
listed and the lag it observed (:func:`rocketstore.operator.status.group_views`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rocketstore.operator.desired import pod_name, slave_statefulset_name
from rocketstore.operator.status import GroupView, pod_ready

__all__ = ["GroupRollout", "group_rollouts", "held_masters", "master_partition", "pod_updated"]

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
        slaves_updated = all(
            pod_ready(m.pod) and pod_updated(statefulsets.get(slave_statefulset_name(name, m.broker_id)), m.pod)
            for m in g.slaves)
        rollouts.append(GroupRollout(
            ordinal=g.ordinal,
            master_ready=pod_ready(g.master.pod),
            master_updated=pod_updated(masters, g.master.pod),
            slaves_updated=slaves_updated,
            slaves_in_sync=all(m.in_sync for m in g.slaves),
        ))
    return rollouts
