"""The SyncStateSet a controller-mode master keeps: which replicas are in sync (RocketMQ 5's
AutoSwitchHAService), as pure decisions over what the master knows of its slaves.

A replica is named by its replica id (brokerControllerId). The master itself is always a member.
The master never changes the set on its own: it proposes a change to the group's source of truth
(``MasterElector.alter_sync_state_set``) and applies the set that comes back. Meanwhile an
acknowledgement counts the union of the applied set and the proposed one (AutoSwitchHAService's
"synchronizing" state), so a shrink proposal never loosens a SYNC_MASTER wait before it is
accepted.
"""

from __future__ import annotations

from collections.abc import Mapping

NO_ACK = -1
"""The acknowledged offset of a member that has no connection (or has not reported yet)."""


def shrunk(members: frozenset[int], local_id: int, caught_up_ms: Mapping[int, int], now_ms: int,
           max_time_not_catchup_ms: int) -> frozenset[int]:
    """``members`` less the slaves that left (maybeShrinkSyncStateSet): a slave last caught up more
    than ``haMaxTimeSlaveNotCatchup`` ago, or one never seen (no entry in ``caught_up_ms``,
    i.e. no connection since this replica became master). The master itself always stays."""
    return frozenset(m for m in members
                     if m == local_id
                     or (m in caught_up_ms and now_ms - caught_up_ms[m] <= max_time_not_catchup_ms))


def may_join(slave_max_offset: int, confirm_offset: int, epoch_start_offset: int) -> bool:
    """Whether a slave outside the set has caught up enough to rejoin it (maybeExpandInSyncStateSet):
    it has everything the set confirmed, and something of the current master's epoch (so it
    truncated and follows this master, not an old history)."""
    return slave_max_offset >= confirm_offset and slave_max_offset >= epoch_start_offset


def caught_up_at(slave_max_offset: int, master_max_offset: int, last_master_max_offset: int, now_ms: int,
                 last_transfer_ms: int) -> int | None:
    """When a slave's report shows it caught up, or None when it does not (AutoSwitchHAConnection's
    maybeExpandInSyncStateSet): a slave with everything the master had at its last transfer
    caught up then; one with everything the master has now caught up now."""
    if slave_max_offset < last_master_max_offset:
        return None
    return now_ms if slave_max_offset >= master_max_offset else last_transfer_ms


def confirm_offset(members: frozenset[int], local_id: int, acked: Mapping[int, int],
                   master_max_offset: int) -> int | None:
    """The offset every member has (computeConfirmOffset): the least acknowledgement of the
    members, the master's own max offset for a set of the master alone. None while a member other
    than the master has no connection or has not reported yet: nothing new can be confirmed, the
    old value stands.

    RocketMQ skips a member whose acknowledged offset is 0 as well as one that has not reported
    (``getSlaveAckOffset() > 0``); then a member with an empty log does not bound the confirm
    offset, which claims the master's whole log while that member, electable, has none of it
    (found by tests/store/test_failover_properties.py). A report of 0 counts here."""
    confirmed = master_max_offset
    for member in members:
        if member == local_id:
            continue
        offset = acked.get(member, NO_ACK)
        if offset < 0:
            return None
        confirmed = min(confirmed, offset)
    return confirmed


def all_acked(members: frozenset[int], local_id: int, acked: Mapping[int, int], end_offset: int) -> bool:
    """allAckInSyncStateSet: whether every member other than the master has reported
    ``end_offset`` (GroupTransferService; a set of the master alone is satisfied at once)."""
    return all(m == local_id or acked.get(m, NO_ACK) >= end_offset for m in members)


def acks_reached(acked: Mapping[int, int], end_offset: int, need_ack_nums: int) -> bool:
    """inSyncReplicas without allAckInSyncStateSet: the master plus the connected slaves that have
    ``end_offset`` make at least ``need_ack_nums`` copies (GroupTransferService counts the master)."""
    return 1 + sum(1 for offset in acked.values() if offset >= end_offset) >= need_ack_nums
