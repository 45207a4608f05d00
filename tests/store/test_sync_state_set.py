"""The SyncStateSet decisions of a controller-mode master (store/sync_state_set.py): who leaves, who
rejoins, what is confirmed, when an acknowledgement may leave."""

from __future__ import annotations

from rocketstore.store.sync_state_set import acks_reached, all_acked, caught_up_at, confirm_offset, may_join, shrunk

MASTER = 1


def test_a_slave_caught_up_within_the_limit_stays() -> None:
    assert shrunk(frozenset({1, 2, 3}), MASTER, {2: 10_000, 3: 20_000}, 25_000, 15_000) == {1, 2, 3}


def test_a_slave_last_caught_up_longer_ago_than_ha_max_time_slave_not_catchup_leaves() -> None:
    assert shrunk(frozenset({1, 2, 3}), MASTER, {2: 9_999, 3: 20_000}, 25_000, 15_000) == {1, 3}


def test_a_member_never_seen_by_this_master_leaves_but_the_master_always_stays() -> None:
    assert shrunk(frozenset({1, 2}), MASTER, {}, 1, 15_000) == {1}


def test_a_slave_rejoins_once_it_has_what_the_set_confirmed_and_part_of_this_epoch() -> None:
    assert may_join(5_000, 5_000, 4_000)
    assert not may_join(4_999, 5_000, 4_000)  # short of what every member has
    assert not may_join(5_000, 1_000, 6_000)  # has nothing of the current master's epoch yet


def test_caught_up_time_is_now_when_level_with_the_master_else_the_last_transfer() -> None:
    assert caught_up_at(100, 100, 80, now_ms=9, last_transfer_ms=5) == 9
    assert caught_up_at(90, 100, 80, now_ms=9, last_transfer_ms=5) == 5
    assert caught_up_at(70, 100, 80, now_ms=9, last_transfer_ms=5) is None


def test_confirm_offset_is_the_least_member_acknowledgement() -> None:
    assert confirm_offset(frozenset({1, 2, 3}), MASTER, {2: 700, 3: 500, 4: 100}, 900) == 500
    assert confirm_offset(frozenset({1}), MASTER, {2: 700}, 900) == 900


def test_confirm_offset_stays_while_a_member_has_no_connection() -> None:
    assert confirm_offset(frozenset({1, 2, 3}), MASTER, {2: 700}, 900) is None


def test_confirm_offset_stays_until_a_member_reported_and_counts_a_report_of_0() -> None:
    assert confirm_offset(frozenset({1, 2}), MASTER, {2: -1}, 900) is None  # connected, no report yet
    assert confirm_offset(frozenset({1, 2}), MASTER, {2: 0}, 900) == 0  # an empty log confirms nothing


def test_all_ack_waits_for_every_member_but_not_for_others() -> None:
    members = frozenset({1, 2, 3})
    assert not all_acked(members, MASTER, {2: 1_000, 3: 999, 4: 0}, 1_000)
    assert all_acked(members, MASTER, {2: 1_000, 3: 1_000, 4: 0}, 1_000)
    assert not all_acked(members, MASTER, {2: 1_000}, 1_000)  # member 3 is not connected
    assert all_acked(frozenset({1}), MASTER, {}, 1_000)  # the master alone


def test_in_sync_replicas_counts_the_master_and_the_slaves_past_the_offset() -> None:
    assert acks_reached({2: 1_000, 3: 10}, 1_000, 2)
    assert not acks_reached({2: 1_000, 3: 10}, 1_000, 3)
