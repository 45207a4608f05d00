"""The pure decisions of broker/replicas_manager.py: what a replica does with a role assignment
(RocketMQ's changeBrokerRole), and a NOTIFY_BROKER_ROLE_CHANGED request read as one."""

from __future__ import annotations

import pytest

from rocketstore.broker.master_elector import RoleAssignment
from rocketstore.broker.replicas_manager import RoleAction, decide_role_change, ha_address_of, role_assignment
from rocketstore.remoting.headers import NotifyBrokerRoleChangedRequestHeader


def assignment(master: int, epoch: int, members: set[int], sse: int, ha: str = "h:2") -> RoleAssignment:
    return RoleAssignment(master, "h:1", ha, epoch, frozenset(members), sse)


def test_the_first_assignment_makes_a_replica_master_or_slave() -> None:
    assert decide_role_change(assignment(1, 1, {1}, 1), 1, None).action is RoleAction.MASTER
    assert decide_role_change(assignment(1, 1, {1}, 1), 2, None).action is RoleAction.SLAVE


def test_the_same_assignment_again_changes_nothing() -> None:
    current = assignment(1, 3, {1, 2}, 4)
    assert decide_role_change(current, 1, current).action is RoleAction.NONE
    assert decide_role_change(current, 2, current).action is RoleAction.NONE


def test_an_older_master_epoch_is_ignored() -> None:
    assert decide_role_change(assignment(2, 2, {2}, 5), 1, assignment(1, 3, {1}, 4)).action is RoleAction.NONE


def test_a_newer_epoch_swaps_the_roles() -> None:
    current = assignment(1, 3, {1, 2}, 4)
    assert decide_role_change(assignment(2, 4, {2}, 5), 1, current).action is RoleAction.SLAVE
    assert decide_role_change(assignment(2, 4, {2}, 5), 2, current).action is RoleAction.MASTER


def test_a_newer_sync_state_set_of_the_same_master_only_changes_the_set() -> None:
    current = assignment(1, 3, {1}, 4)
    assert decide_role_change(assignment(1, 3, {1, 2}, 5), 1, current).action is RoleAction.SYNC_STATE_SET
    assert decide_role_change(assignment(1, 3, {1, 2}, 4), 1, current).action is RoleAction.NONE  # not newer


def test_another_master_in_the_same_epoch_is_refused() -> None:
    assert decide_role_change(assignment(2, 3, {2}, 9), 1, assignment(1, 3, {1}, 4)).action is RoleAction.NONE


def test_a_slave_follows_a_corrected_ha_address_of_the_same_master() -> None:
    current = assignment(1, 3, {1}, 4, ha="h:2")
    assert decide_role_change(assignment(1, 3, {1}, 4, ha="other:2"), 2, current).action is RoleAction.SLAVE


def test_a_notification_is_an_assignment_with_the_master_port_plus_one_as_ha_address() -> None:
    header = NotifyBrokerRoleChangedRequestHeader(master_address="10.0.0.5:10911", master_epoch=7,
                                                  sync_state_set_epoch=9, master_broker_id=2)
    assert role_assignment(header, {"syncStateSet": [1, 2], "syncStateSetEpoch": 9}) == RoleAssignment(
        2, "10.0.0.5:10911", "10.0.0.5:10912", 7, frozenset({1, 2}), 9)


def test_a_notification_without_master_or_with_a_bad_set_is_refused() -> None:
    with pytest.raises(ValueError):
        role_assignment(NotifyBrokerRoleChangedRequestHeader(master_epoch=1), {})
    header = NotifyBrokerRoleChangedRequestHeader(master_address="h:1", master_epoch=1, master_broker_id=1)
    with pytest.raises(ValueError):
        role_assignment(header, {"syncStateSet": ["x"]})
    with pytest.raises(ValueError):
        ha_address_of("no-port")
