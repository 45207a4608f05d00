"""Rolling restarts under Lease failover (rocketstore.operator.rollout.lease_group_restart), pure:
the member the Lease names as master restarts last, after its slaves are updated, ready and in
its SyncStateSet, so its SIGTERM hands the Lease over (docs/failover.md, planned hand-over)."""

from __future__ import annotations

from typing import Any

from rocketstore.operator.desired import Owner, Plan, slave_statefulset, statefulset
from rocketstore.operator.model import parse_spec
from rocketstore.operator.rollout import LeaseMember, lease_group_restart
from rocketstore.operator.sizing import volume_size
from rocketstore.operator.upgrade import statefulset_settled


def members(*states: str) -> list[LeaseMember]:
    """Member k (replica id k + 1) of group 0 per state: u updated, s stale, each ready unless
    followed by '!'; then M or S: the role its broker reports (none: not known)."""
    roles = {"M": "MASTER", "S": "SLAVE"}
    return [LeaseMember(f"p{k + 1}", k + 1, ready="!" not in s, updated=s.startswith("u"), role=roles.get(s[-1]))
            for k, s in enumerate(states)]


def test_the_members_the_lease_does_not_name_restart_first_the_master_last() -> None:
    # the Lease's master is replica 1 (the masters' StatefulSet's pod) here, replica 3 below
    assert lease_group_restart(members("s", "s", "s"), 1, frozenset({1, 2, 3})) == "p3"
    assert lease_group_restart(members("s", "s", "u"), 1, frozenset({1, 2, 3})) == "p2"
    assert lease_group_restart(members("s", "u", "u"), 1, frozenset({1, 2, 3})) == "p1"
    # after a failover the master is another member: pod NAME-<i> is then a slave, restarted first
    assert lease_group_restart(members("s", "s", "s"), 3, frozenset({1, 2, 3})) == "p2"
    assert lease_group_restart(members("s", "u", "s"), 3, frozenset({1, 2, 3})) == "p1"
    assert lease_group_restart(members("u", "u", "s"), 3, frozenset({1, 2, 3})) == "p3"
    assert lease_group_restart(members("u", "u", "u"), 3, frozenset({1, 2, 3})) is None


def test_the_master_waits_for_its_slaves_to_be_back_in_its_sync_state_set() -> None:
    assert lease_group_restart(members("s", "u"), 1, frozenset({1})) is None  # the slave still catching up
    assert lease_group_restart(members("s", "u"), 1, frozenset({1, 2})) == "p1"
    assert lease_group_restart(members("s", "u", "u"), 1, frozenset({1, 2})) is None  # every slave, not one


def test_one_restart_at_a_time_but_a_broken_stale_member_goes_at_once() -> None:
    assert lease_group_restart(members("s", "u!", "s"), 1, frozenset({1})) is None  # p2 is coming back
    # not ready and still on the old template (crash-looping): restarting it loses nothing
    assert lease_group_restart(members("s", "u", "s!"), 1, frozenset({1, 2})) == "p3"
    assert lease_group_restart(members("s!", "u"), 1, frozenset({1, 2})) == "p1"


def test_without_a_master_the_stale_members_restart_in_turn() -> None:
    # no master (a released Lease) and every broker a slave: nobody to hand over from, highest id first
    assert lease_group_restart(members("sS", "sS"), None, frozenset()) == "p2"
    assert lease_group_restart(members("s"), 1, frozenset({1})) == "p1"  # a group of one


def test_switching_failover_on_restarts_the_serving_master_first() -> None:
    # the brokers ran without failover, no Lease yet: the first member on the new template takes
    # the Lease, so it must be the master, the one holding every acknowledged message
    assert lease_group_restart(members("sM", "sS", "sS"), None, frozenset()) == "p1"
    # after a failover without the operator's Lease mode, a slave StatefulSet's pod may serve
    assert lease_group_restart(members("sS", "sM"), None, frozenset()) == "p2"
    # its role not known, or a member already on the new template about to take the Lease: wait
    assert lease_group_restart(members("s", "s"), None, frozenset()) is None
    assert lease_group_restart(members("sS", "s"), None, frozenset()) is None
    assert lease_group_restart(members("uS", "sS"), None, frozenset()) is None
    # once it holds the Lease, the others follow
    assert lease_group_restart(members("uM", "sS"), 1, frozenset({1})) == "p2"
    # a master on the old template that crash-loops still restarts at once
    assert lease_group_restart(members("sS", "s!"), None, frozenset()) == "p2"


def test_every_statefulset_of_a_lease_store_updates_on_delete() -> None:
    s = parse_spec({"brokers": 2, "replication": {"replicasPerGroup": 3, "failover": {"mode": "Lease"}}})
    plan = Plan(Owner("rs", "ns", "1"), s, s.brokers, volume_size(s), default_image="rocketstore/rocketstore:test",
                master_partition=1)
    objects: list[dict[str, Any]] = [statefulset(plan), slave_statefulset(plan, 1), slave_statefulset(plan, 2)]
    assert [o["spec"]["updateStrategy"] for o in objects] == [{"type": "OnDelete"}] * 3


def test_an_on_delete_statefulset_is_settled_once_every_replica_runs_the_update_revision() -> None:
    # the controller leaves currentRevision behind under OnDelete (it completes rolling updates only)
    sts = {"metadata": {"generation": 4}, "spec": {"replicas": 2, "updateStrategy": {"type": "OnDelete"}},
           "status": {"observedGeneration": 4, "updatedReplicas": 2, "readyReplicas": 2,
                      "currentRevision": "old", "updateRevision": "new"}}
    assert statefulset_settled(sts)
    assert not statefulset_settled({**sts, "status": {**sts["status"], "updatedReplicas": 1}})
    rolling = {**sts, "spec": {"replicas": 2, "updateStrategy": {"type": "RollingUpdate"}}}
    assert not statefulset_settled(rolling)
