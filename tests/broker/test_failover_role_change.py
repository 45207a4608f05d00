"""The broker's side of a role change in controller mode (broker/replicas_manager.py), with real
brokers over real sockets: two in-process brokers of one group, and a test-driven elector
(tests/support/driven_elector.py) standing in for the Lease or Apache's controller.

* a slave promoted to master starts a new epoch at its log's end and acknowledges sends at once;
* a slave rejoins the SyncStateSet once caught up, through the elector, and allAckInSyncStateSet
  then makes a send wait for it;
* a former master that kept writing after it was replaced (sends it could not get acknowledged)
  rejoins as a slave: the AutoSwitch handshake cuts its tail back to the epoch both share, and
  its CommitLog and epoch file then equal the new master's byte for byte;
* a member that goes away is proposed out of the set, and sends no longer wait for it once the
  elector accepted; back and caught up, it is proposed in again;
* a master that stops closes its slaves' HA connections, and a slave that loses its master's
  connection wakes its elector (the successor of a hand-over reads the released Lease at once);
* a master past its write deadline refuses to acknowledge (and stores nothing); one whose deadline
  passes while a stored send waits for its replicas answers it as a non-master too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from commit_log_files import read_commit_log
from driven_elector import DrivenElector, ElectorGroup
from inprocess_broker import BrokerHandle
from polling import wait_until

from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

SEGMENT = 256 * 1024


def replica(broker_factory: Callable[..., BrokerHandle], group: ElectorGroup, replica_id: int,
            **overrides: Any) -> BrokerHandle:
    settings: dict[str, Any] = {"ha_send_heartbeat_interval": 200, "slave_timeout": 1500,
                                "check_sync_state_set_period": 200, **overrides}
    handle = broker_factory(enable_controller_mode=True, broker_id=replica_id, elector=group.elector(), **settings)
    group.addresses[replica_id] = (handle.controller.broker_addr, handle.controller.ha_server_addr)
    return handle


def commit_log(handle: BrokerHandle) -> bytes:
    store = handle.store
    return read_commit_log(Path(store.config.commit_log_dir()), SEGMENT, 0, store.max_phy_offset)


def send(handle: BrokerHandle, text: str) -> int:
    return handle.client().send_message("Failover", text.encode(), queue_id=0).code


def test_promotion_rejoin_and_truncation_of_the_unacknowledged_tail(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1, all_ack_in_sync_state_set=True)
    b = replica(broker_factory, group, 2, all_ack_in_sync_state_set=True)
    # no role yet: neither takes writes
    assert send(a, "before any election") == ResponseCode.SERVICE_NOT_AVAILABLE

    group.elect(1)
    assert a.controller.broker_config.broker_id == 0 and b.controller.broker_config.broker_id == 2
    assert a.store.epoch_cache.entries[-1].epoch == 1
    # b catches up (nothing to copy yet) and a asks the elector to take it back into the set
    wait_until("b joins the SyncStateSet", lambda: any(m == {1, 2} for m, _ in group.sync_state_sets), 15)
    wait_until("a applies it", lambda: a.store.ha_service.sync_state_set == {1, 2}, 5)

    for i in range(3):
        assert send(a, f"acknowledged-{i}") == ResponseCode.SUCCESS
        # allAckInSyncStateSet: the acknowledgement came after b had the record
        assert b.store.max_phy_offset == a.store.max_phy_offset
    acknowledged_end = a.store.max_phy_offset

    # b is elected while a does not hear of it (a partition); a still thinks it is master and
    # stores sends that no member confirms: they time out unacknowledged
    b_before = b.store.max_phy_offset
    elected = group.elect(2, tell=(2,))
    assert elected.master_epoch == 2
    assert b.store.epoch_cache.entries[-1].epoch == 2
    assert b.store.epoch_cache.entries[-1].start_offset == b_before
    for i in range(2):
        assert send(a, f"unacknowledged-{i}") == ResponseCode.FLUSH_SLAVE_TIMEOUT
    assert a.store.max_phy_offset > acknowledged_end
    for i in range(4):
        assert send(b, f"new-master-{i}") == ResponseCode.SUCCESS

    # a hears of epoch 2: it becomes b's slave, truncates its unacknowledged tail and follows
    group.apply(1)
    assert a.controller.broker_config.broker_id == 1
    assert send(a, "to the old master") == ResponseCode.SERVICE_NOT_AVAILABLE
    wait_until("a caught up with b", lambda: a.store.max_phy_offset == b.store.max_phy_offset, 15)
    assert commit_log(a) == commit_log(b)
    assert a.store.epoch_cache.entries == b.store.epoch_cache.entries
    assert b"unacknowledged-" not in commit_log(a)
    assert all(f"acknowledged-{i}".encode() in commit_log(b) for i in range(3))
    # routes: the new master registered as brokerId 0 (the group's view in b's own name server)
    assert b.controller.broker_config.broker_id == 0


def test_a_member_that_goes_away_is_proposed_out_and_rejoins_once_caught_up(
        broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1, all_ack_in_sync_state_set=True)
    b = replica(broker_factory, group, 2, all_ack_in_sync_state_set=True, root=tmp_path / "b")
    group.elect(1)
    wait_until("b joins the SyncStateSet", lambda: a.store.ha_service.sync_state_set == {1, 2}, 15)
    assert send(a, "with b") == ResponseCode.SUCCESS
    b.stop()
    wait_until("a drops b from the set through the elector",
               lambda: a.store.ha_service.sync_state_set == {1} and group.sync_state_sets[-1][0] == {1}, 15)
    for i in range(20):  # no longer waits for b
        assert send(a, f"without b {i}") == ResponseCode.SUCCESS
    # b comes back behind: it follows a, catches up, and only then is taken back into the set
    b = replica(broker_factory, group, 2, all_ack_in_sync_state_set=True, root=tmp_path / "b")
    group.apply(2)
    wait_until("b back in the SyncStateSet", lambda: a.store.ha_service.sync_state_set == {1, 2}, 15)
    assert b.store.max_phy_offset >= a.store.ha_service.confirm_offset
    assert send(a, "with b again") == ResponseCode.SUCCESS
    assert b.store.max_phy_offset == a.store.max_phy_offset


def test_a_slave_that_loses_its_stopping_masters_connection_wakes_its_elector(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1, all_ack_in_sync_state_set=True)
    b = replica(broker_factory, group, 2, all_ack_in_sync_state_set=True)
    group.elect(1)
    wait_until("b joins the SyncStateSet", lambda: a.store.ha_service.sync_state_set == {1, 2}, 15)
    manager = b.controller.replicas_manager
    assert manager is not None
    elector = manager.elector
    assert isinstance(elector, DrivenElector)
    assert elector.woken == 0
    a.stop()
    wait_until("b's elector woken by the closed HA connection", lambda: elector.woken > 0, 10)


def test_a_master_past_its_write_deadline_refuses_to_acknowledge(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1)
    group.elect(1)
    assert send(a, "in time") == ResponseCode.SUCCESS
    end = a.store.max_phy_offset
    group.expire(1)
    reply = a.client().send_message("Failover", b"too late", queue_id=0)
    assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "not the master" in (reply.remark or "")
    assert a.store.max_phy_offset == end


def test_a_deadline_passing_while_a_send_waits_for_its_replicas_refuses_the_acknowledgement(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1, all_ack_in_sync_state_set=True, slave_timeout=5000)
    b = replica(broker_factory, group, 2, all_ack_in_sync_state_set=True)
    group.elect(1)
    wait_until("b joins the SyncStateSet", lambda: a.store.ha_service.sync_state_set == {1, 2}, 15)
    group.elect(2, tell=(2,))  # b no longer follows a; a, not told, still waits for b's acknowledgement
    end = a.store.max_phy_offset
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(send, a, "stored, never acknowledged")
        wait_until("the put is stored and waiting", lambda: a.store.max_phy_offset > end, 5)
        group.expire(1)  # a's Lease runs out meanwhile
        started = time.monotonic()
        assert answer.result(10) == ResponseCode.SERVICE_NOT_AVAILABLE  # not FLUSH_SLAVE_TIMEOUT, not SUCCESS
    assert time.monotonic() - started < 5.5
    assert b.store.max_phy_offset == end


def test_min_in_sync_replicas_refuses_a_send_before_storing_it(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    group = ElectorGroup()
    a = replica(broker_factory, group, 1, min_in_sync_replicas=2)
    group.elect(1)
    end = a.store.max_phy_offset
    reply = a.client().send_message("Failover", b"alone", queue_id=0)
    assert (reply.code, reply.remark) == (ResponseCode.SYSTEM_ERROR, "in-sync replicas not enough")
    assert a.store.max_phy_offset == end
