"""Random failover histories over three real stores: no acknowledged message is ever cut, and
the replicas agree on what they hold as committed.

A hypothesis state machine drives three DefaultMessageStores in temporary directories (small
CommitLog segments and ConsumeQueue files, so histories cross their boundaries) through random
sequences of puts, replication, acknowledgements, crashes, elections, SyncStateSet shrinks and
rejoins. Every decision is the product's own pure function: who may be elected and the epoch it
starts (``lease_elector.decide``), SyncStateSet changes (``sync_state_set.shrunk`` /
``may_join`` / ``caught_up_at`` and ``lease_elector.altered``), the confirm offset and the
acknowledgement rule (``sync_state_set.confirm_offset`` / ``all_acked``, allAckInSyncStateSet),
how a transfer is cut at epoch boundaries (``batch_size_within_epoch``) and where a rejoining
replica truncates (``truncation_point`` over the two epoch files). Every effect is the store's
own code: puts, ``change_to_master`` (the new epoch), the AutoSwitch HA client's handshake
(truncation through ``truncate_files``) and transfer handling (``CommitLog.append_data`` and the
epoch file), crash recovery.

The HA link itself is not a socket here: the test plays the master's writer (bytes read with
``hold_data``, one segment and one epoch per transfer, cut at any byte as the real link cuts
them) and hands each frame to the slave's ``AutoSwitchHAClient`` as its reader would. A socket
would make the interleavings the network's, not hypothesis's.

A crash is what kill -9 leaves: the mapped bytes (the page cache keeps them), the ``abort``
file, and the ``checkpoint`` as it was on disk before (a shutdown would have rewritten it); the
store is reopened through abnormal recovery.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from store_support import small_config, verify_problems_of_truncated_store

from rocketstore.broker.lease_elector import Action, Candidate, LeaseTiming, Sighting, altered, decide
from rocketstore.common.message import Message
from rocketstore.common.replica_lease import ReplicaInfo, ReplicaLease
from rocketstore.store import sync_state_set
from rocketstore.store.autoswitch_ha_client import AutoSwitchHAClient, truncation_point
from rocketstore.store.autoswitch_ha_protocol import MasterHandshake, TransferHeader, batch_size_within_epoch
from rocketstore.store.config import StoreConfig
from rocketstore.store.epoch_file import NO_END_OFFSET, EpochEntry, EpochFileCache, find_entry_by_offset
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus

REPLICAS = 3
SEGMENT = 2048  # a dozen records a segment: histories cross segment boundaries
CQ_ENTRIES = 8
TOPIC = "FailoverProps"
TIMING = LeaseTiming()
NOT_CATCHUP_MS = 15_000  # haMaxTimeSlaveNotCatchup's default


def config_of(root: Path) -> StoreConfig:
    # haListenPort 0: three stores in one process, each on a free port (nothing connects to them)
    return small_config(root, commit_log_size=SEGMENT, cq_entries=CQ_ENTRIES, ha_listen_port=0)


def open_replica(root: Path, replica_id: int) -> DefaultMessageStore:
    """A controller-mode store as a broker starts one: no writes, following no one."""
    store = DefaultMessageStore(config_of(root))
    store.use_controller_mode(replica_id)
    store.load()
    store.start()
    store.change_to_slave(None)
    return store


def log_bytes(store: DefaultMessageStore, end: int) -> bytes:
    """The CommitLog's bytes [0, end), segment by segment, as the HA master reads them."""
    out = bytearray()
    while len(out) < end:
        held = store.commit_log.hold_data(len(out))
        assert held is not None, f"no data at {len(out)} (log ends at {store.max_phy_offset})"
        mapped, pos, limit = held
        try:
            out += mapped.buffer[pos:min(limit, pos + end - len(out))]
        finally:
            mapped.release()
    return bytes(out)


def whole_records_end(store: DefaultMessageStore, limit: int) -> int:
    """The end of the last whole record at or before ``limit``: a confirm offset is a slave's
    report, which may fall inside a record (the link cuts frames anywhere); only the whole
    records below it are committed (recovery cuts a torn tail)."""
    data = log_bytes(store, min(limit, store.max_phy_offset))
    offset = 0
    while offset + 4 <= len(data):
        size = int.from_bytes(data[offset:offset + 4], "big")
        if size <= 0 or offset + size > len(data):
            break
        offset += size
    return offset


@dataclass
class Replica:
    replica_id: int
    root: Path
    store: DefaultMessageStore
    #: hand-shook with the current master (and truncated): the link is up
    following: bool = False
    #: the epoch of the last transfer received over the current link (the client's received_epoch)
    received_epoch: int = -1
    #: the end of the whole records this replica was ever told are committed and holds (a slave:
    #: below the master's confirm offset in a transfer; the master: below its own confirm offset)
    committed: int = 0

    @property
    def client(self) -> AutoSwitchHAClient:
        client = self.store.ha_service.client
        assert isinstance(client, AutoSwitchHAClient)
        return client

    @property
    def max_offset(self) -> int:
        return self.store.max_phy_offset


@dataclass(frozen=True)
class Acked:
    key: str
    offset: int
    data: bytes

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


def lease_of(info: ReplicaInfo) -> ReplicaLease:
    return ReplicaLease("ns", "lease", "cluster", "broker", info, "renewed", "acquired", 3, "1")


def candidate(replica_id: int) -> Candidate:
    return Candidate(replica_id, f"replica-{replica_id}:10911", f"replica-{replica_id}:10912")


# The same 15 histories every run (derandomize), within CI's time; no shrinking: shrinking
# histories over real stores takes many minutes, and the failure report lists the whole history
# (replayable step by step on a FailoverHistories() instance).
@settings(max_examples=15, stateful_step_count=40, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
class FailoverHistories(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="failover-props-"))
        self.replicas = [Replica(i, self.tmp / f"replica-{i}", open_replica(self.tmp / f"replica-{i}", i))
                         for i in range(REPLICAS)]
        #: the Lease: None before the first election
        self.info: ReplicaInfo | None = None
        #: whether the master the Lease names is running as master (not crashed since its election)
        self.master_active = False
        #: the master's view of its links: replica id -> last reported offset
        self.acked: dict[int, int] = {}
        self.confirm = 0
        self.now_ms = 0
        #: puts the current master stored and is waiting to acknowledge
        self.pending: list[Acked] = []
        self.acknowledged: list[Acked] = []
        self.seq = 0

    # -- helpers ---------------------------------------------------------------------------
    @property
    def master(self) -> Replica | None:
        if self.info is None or not self.master_active or self.info.master_replica_id is None:
            return None
        return self.replicas[self.info.master_replica_id]

    def _apply_sync_state_set(self, members: frozenset[int]) -> None:
        """A change the master proposed, recorded in the Lease (``altered``) and applied."""
        master, info = self.master, self.info
        assert master is not None and info is not None
        changed = altered(info, candidate(master.replica_id), info.master_epoch, members, info.sync_state_set_epoch)
        assert changed is not None, (info, members)
        self.info = changed
        master.store.ha_service.set_sync_state_set(members)
        self._update_confirm()

    def _update_confirm(self) -> None:
        master, info = self.master, self.info
        assert master is not None and info is not None
        confirmed = sync_state_set.confirm_offset(info.sync_state_set, master.replica_id, self.acked,
                                                  master.max_offset)
        if confirmed is not None:
            self.confirm = confirmed
            master.committed = max(master.committed, whole_records_end(master.store, confirmed))

    def _on_report(self, slave: Replica) -> None:
        """What the master does with a slave's report (AutoSwitchHAConnection's reader and
        HAService.on_slave_report): the SyncStateSet may grow, the confirm offset move."""
        master, info = self.master, self.info
        assert master is not None and info is not None
        offset = slave.max_offset
        self.acked[slave.replica_id] = offset
        self.now_ms += 1
        caught_up = sync_state_set.caught_up_at(offset, master.max_offset, master.max_offset, self.now_ms,
                                                self.now_ms)
        epoch = master.store.epoch_cache.last_entry()
        assert epoch is not None
        if caught_up is not None and slave.replica_id not in info.sync_state_set and sync_state_set.may_join(
                offset, self.confirm, epoch.start_offset):
            self._apply_sync_state_set(info.sync_state_set | {slave.replica_id})
        elif slave.replica_id in info.sync_state_set:
            self._update_confirm()
        self._acknowledge()

    def _transfer(self, slave: Replica, header: TransferHeader, body: bytes) -> None:
        assert slave.client._on_transfer(header, body, slave.received_epoch)
        slave.received_epoch = header.epoch
        slave.committed = max(slave.committed, whole_records_end(slave.store, header.confirm_offset))

    # -- rules -----------------------------------------------------------------------------
    @initialize()
    def form_the_group(self) -> None:
        """Most histories start from a group: replica 0 elected, the others following it."""
        self.elect(0)
        self.rejoin(1)
        self.rejoin(2)

    @precondition(lambda self: self.master is not None)
    @rule(count=st.integers(1, 4), size=st.integers(1, 300))
    def put(self, count: int, size: int) -> None:
        master = self.master
        assert master is not None
        for _ in range(count):
            self.seq += 1
            body = f"{self.seq:06d}".encode() * (1 + (size + self.seq) % 50)
            result = master.store.put_message(Message(topic=TOPIC, body=body, queue_id=self.seq % 2,
                                                      properties={"KEYS": f"k{self.seq}"}), wait_flush=False)
            assert result.status is PutMessageStatus.PUT_OK, result.status
            assert result.append is not None
            offset, end = result.append.wrote_offset, result.append.wrote_offset + result.append.wrote_bytes
            self.pending.append(Acked(f"k{self.seq}", offset, log_bytes(master.store, end)[offset:]))
        self._acknowledge()

    @precondition(lambda self: self.master is not None)
    @rule(replica_id=st.integers(0, REPLICAS - 1), budget=st.just(0) | st.integers(1, 3 * SEGMENT))
    def replicate(self, replica_id: int, budget: int) -> None:
        """The master's writer sends up to ``budget`` bytes to a slave (its reader appends them)
        and the slave reports its max offset; ``budget`` 0 is a heartbeat."""
        master = self.master
        slave = self.replicas[replica_id]
        assert master is not None
        if slave is master or not slave.following:
            return
        entries = master.store.epoch_cache.entries
        offset = slave.max_offset
        while True:
            entry = find_entry_by_offset(entries, offset)
            assert entry is not None, (entries, offset)
            held = master.store.commit_log.hold_data(offset) if budget > 0 else None
            if held is None:  # nothing (more) to send: a heartbeat carrying the epoch and confirm offset
                self._transfer(slave, TransferHeader(offset, 0, entry.epoch, entry.start_offset, self.confirm), b"")
                break
            mapped, pos, limit = held
            try:
                epoch_end = -1 if entry.end_offset == NO_END_OFFSET else entry.end_offset
                size = batch_size_within_epoch(offset, min(limit - pos, budget), epoch_end)
                body = bytes(mapped.buffer[pos:pos + size])
            finally:
                mapped.release()
            assert size > 0
            self._transfer(slave, TransferHeader(offset, size, entry.epoch, entry.start_offset, self.confirm), body)
            offset += size
            budget -= size
        assert slave.max_offset == offset
        self._on_report(slave)

    def _acknowledge(self) -> None:
        """allAckInSyncStateSet: a put is acknowledged once every member reported its end (the
        master checks its waiters after each put, report and SyncStateSet change)."""
        master, info = self.master, self.info
        assert master is not None and info is not None
        while self.pending and sync_state_set.all_acked(info.sync_state_set, master.replica_id, self.acked,
                                                        self.pending[0].end):
            self.acknowledged.append(self.pending.pop(0))

    @precondition(lambda self: self.master is not None)
    @rule()
    def shrink(self) -> None:
        """Time passes: members that did not catch up for haMaxTimeSlaveNotCatchup go."""
        master, info = self.master, self.info
        assert master is not None and info is not None
        self.now_ms += NOT_CATCHUP_MS + 1
        caught_up = {rid: self.now_ms for rid, offset in self.acked.items() if offset >= master.max_offset}
        kept = sync_state_set.shrunk(info.sync_state_set, master.replica_id, caught_up, self.now_ms, NOT_CATCHUP_MS)
        if kept != info.sync_state_set:
            self._apply_sync_state_set(kept)

    @rule(replica_id=st.integers(0, REPLICAS - 1))
    def crash(self, replica_id: int) -> None:
        replica = self.replicas[replica_id]
        checkpoint = replica.root / "checkpoint"
        on_disk = checkpoint.read_bytes() if checkpoint.exists() else None
        replica.store.shutdown()
        if on_disk is not None:  # what was on disk before: a kill -9 writes nothing more
            checkpoint.write_bytes(on_disk)
        (replica.root / "abort").touch()
        replica.store = open_replica(replica.root, replica_id)
        assert not replica.store.last_exit_ok
        replica.following, replica.received_epoch = False, -1
        self.acked.pop(replica_id, None)
        if self.info is not None and self.info.master_replica_id == replica_id:
            self.master_active = False
            self.pending.clear()  # their producers time out

    @rule(replica_id=st.integers(0, REPLICAS - 1))
    def elect(self, replica_id: int) -> None:
        """``replica_id`` reads the Lease after it expired (the master stopped renewing: crashed,
        paused or cut off) and acts on ``decide``: only a SyncStateSet member takes it."""
        me = candidate(replica_id)
        current = self.master
        held = self.info.master_epoch if current is not None and current.replica_id == replica_id else None
        lease = lease_of(self.info) if self.info is not None else None
        sighting = Sighting((self.info.master_replica_id, self.info.master_epoch, "renewed"), 0.0) \
            if self.info is not None else None
        decision = decide(lease, me, held, sighting, TIMING.duration * 10, TIMING)
        if decision.action not in (Action.CREATE, Action.TAKE):
            assert self.info is None or replica_id not in self.info.sync_state_set or held is not None
            return
        assert self.info is None or replica_id in self.info.sync_state_set
        info = decision.info
        assert info is not None and info.master_replica_id == replica_id
        assert self.info is None or info.master_epoch == self.info.master_epoch + 1
        if current is not None:  # past its write deadline: it acknowledges nothing more
            current.store.change_to_slave(None)
        for replica in self.replicas:
            replica.following, replica.received_epoch = False, -1
        self.pending.clear()
        self.acked.clear()
        new = self.replicas[replica_id]
        assert new.store.change_to_master(info.master_epoch)
        self.info, self.master_active = info, True
        new.store.ha_service.set_sync_state_set(info.sync_state_set)
        self.confirm = new.store.ha_service.confirm_offset
        new.committed = max(new.committed, whole_records_end(new.store, self.confirm))

    @precondition(lambda self: self.master is not None)
    @rule(replica_id=st.integers(0, REPLICAS - 1))
    def rejoin(self, replica_id: int) -> None:
        """A slave connects to the master: handshake, truncation to the point both epoch files
        share, first report."""
        master = self.master
        slave = self.replicas[replica_id]
        assert master is not None
        if slave is master or slave.following:
            return
        entries = master.store.epoch_cache.entries
        handshake = MasterHandshake(master.max_offset, entries[-1].epoch, entries)
        point = truncation_point(slave.store.epoch_cache, slave.max_offset, handshake)
        assert point is None or point >= 0, "a replica shares no epoch with the master"
        if point is not None:
            assert point >= min(slave.committed, slave.max_offset), \
                f"replica {replica_id} would cut to {point} below what it holds as committed ({slave.committed})"
        before = slave.max_offset
        assert slave.client._on_handshake(handshake, "master")
        assert slave.max_offset == (before if point is None else min(point, before))
        slave.following, slave.received_epoch = True, -1
        self._on_report(slave)

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def acknowledged_messages_are_kept(self) -> None:
        # the master and every replica that may be elected (so an election loses nothing)
        holders = [r for r in self.replicas if r is self.master
                   or (self.info is not None and r.replica_id in self.info.sync_state_set)]
        for replica in self.replicas:
            kept = [a for a in self.acknowledged if a.end <= replica.committed]
            if kept:
                data = log_bytes(replica.store, max(a.end for a in kept))
                for a in kept:
                    assert data[a.offset:a.end] == a.data, f"replica {replica.replica_id} lost the record at {a.offset}"
        for holder in holders:
            data = log_bytes(holder.store, min(holder.max_offset, max((a.end for a in self.acknowledged), default=0)))
            for a in self.acknowledged:
                assert data[a.offset:a.end] == a.data, f"replica {holder.replica_id} lacks the record at {a.offset}"

    @invariant()
    def replicas_agree_on_the_committed_prefix(self) -> None:
        for replica in self.replicas:
            assert replica.max_offset >= replica.committed, \
                f"replica {replica.replica_id} ends at {replica.max_offset}, below its committed {replica.committed}"
        for a in self.replicas:
            for b in self.replicas:
                if a.replica_id < b.replica_id:
                    end = min(a.committed, b.committed)
                    assert log_bytes(a.store, end) == log_bytes(b.store, end), \
                        f"replicas {a.replica_id} and {b.replica_id} differ below {end}"

    @invariant()
    def epoch_files_are_consistent(self) -> None:
        master = self.master
        for replica in self.replicas:
            entries = replica.store.epoch_cache.entries
            epochs = [e.epoch for e in entries]
            starts = [e.start_offset for e in entries]
            assert epochs == sorted(set(epochs)) and starts == sorted(starts), entries
            assert not entries or entries[-1].start_offset <= replica.max_offset, (entries, replica.max_offset)
            assert self.info is None or not epochs or epochs[-1] <= self.info.master_epoch
            on_disk = EpochFileCache(replica.store.epoch_cache.path)
            on_disk.load()
            assert on_disk.entries == entries
            if master is not None and replica.following:
                theirs = {(e.epoch, e.start_offset) for e in master.store.epoch_cache.entries}
                assert {(e.epoch, e.start_offset) for e in entries} <= theirs, (entries, theirs)
        if master is not None:
            assert self.info is not None
            assert master.store.epoch_cache.last_epoch == self.info.master_epoch

    def teardown(self) -> None:
        """Restart every replica (recovery cuts a slave's torn tail, the last record a transfer
        cut); the committed messages are found by key there, and the offline verifier finds its
        CommitLog and ConsumeQueues in agreement.

        The IndexFiles are checked by those lookups, not by the verifier (see
        verify_problems_of_truncated_store).
        """
        try:
            for replica in self.replicas:
                replica.store.shutdown()
                replica.store = open_replica(replica.root, replica.replica_id)
                assert replica.max_offset >= replica.committed
                assert replica.store.reput_service.wait_caught_up(10)
                for a in self.acknowledged:
                    if a.end <= replica.committed:
                        found = replica.store.query_message(TOPIC, a.key, 4, 0, 2**62).messages
                        assert [m.physical_offset for m in found] == [a.offset], (replica.replica_id, a.key)
                replica.store.shutdown()
                assert verify_problems_of_truncated_store(config_of(replica.root)) == [], replica.replica_id
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


TestFailoverHistories = FailoverHistories.TestCase


def test_a_member_elected_before_any_transfer_reached_it_lets_its_predecessor_rejoin(tmp_path: Path) -> None:
    """A slave's first report after the handshake may make it a member before any transfer
    (which carries the master's epoch) reached it: an idle master's epoch starts at the slave's
    end. Elected then, it must still share the old master's epoch, or the old master, which wrote
    an unacknowledged record meanwhile, finds no epoch in common and can never follow it."""
    old = open_replica(tmp_path / "old", 0)
    slave = open_replica(tmp_path / "slave", 1)
    try:
        assert old.change_to_master(1)
        old.ha_service.set_sync_state_set(frozenset({0}))
        client = slave.ha_service.client
        assert isinstance(client, AutoSwitchHAClient)
        assert client._on_handshake(MasterHandshake(old.max_phy_offset, 1, old.epoch_cache.entries), "old")
        assert sync_state_set.may_join(slave.max_phy_offset, old.ha_service.confirm_offset, 0)
        old.ha_service.set_sync_state_set(frozenset({0, 1}))
        assert old.put_message(Message(topic=TOPIC, body=b"never acknowledged"),
                               wait_flush=False).status is PutMessageStatus.PUT_OK

        assert slave.change_to_master(2)
        old.change_to_slave(None)
        handshake = MasterHandshake(slave.max_phy_offset, 2, slave.epoch_cache.entries)
        assert truncation_point(old.epoch_cache, old.max_phy_offset, handshake) == 0
        client = old.ha_service.client
        assert isinstance(client, AutoSwitchHAClient)
        assert client._on_handshake(handshake, "slave")
        assert old.max_phy_offset == 0
        assert [(e.epoch, e.start_offset) for e in old.epoch_cache.entries] == [(1, 0), (2, 0)]
    finally:
        old.shutdown()
        slave.shutdown()


def test_a_truncation_to_where_empty_epochs_start_keeps_them(tmp_path: Path) -> None:
    """Epochs in which nothing was written all start at one offset; a replica truncated to it
    drops them from its file, and no transfer brings them back. It takes them from the master's
    handshake, so that a replica which has only those still shares one with it once elected."""
    replica = open_replica(tmp_path / "replica", 2)
    other = open_replica(tmp_path / "other", 1)
    try:
        assert replica.epoch_cache.append_entry(2, 0)
        assert other.epoch_cache.append_entry(1, 0) and other.epoch_cache.append_entry(2, 0)
        client = replica.ha_service.client
        assert isinstance(client, AutoSwitchHAClient)
        master = MasterHandshake(0, 3, (EpochEntry(2, 0), EpochEntry(3, 0)))
        assert truncation_point(replica.epoch_cache, 0, master) == 0
        assert client._on_handshake(master, "master")
        assert [(e.epoch, e.start_offset) for e in replica.epoch_cache.entries] == [(2, 0), (3, 0)]

        assert replica.change_to_master(4)  # elected; the other one rejoins it
        elected = MasterHandshake(0, 4, replica.epoch_cache.entries)
        assert truncation_point(other.epoch_cache, other.max_phy_offset, elected) == 0
    finally:
        replica.shutdown()
        other.shutdown()


def test_a_member_with_an_empty_log_bounds_the_confirm_offset() -> None:
    """The history the state machine can reach (a heartbeat is a transfer of budget 0): members
    that joined with empty logs report 0 after the master's puts; the confirm offset must not
    claim those puts, or the old master, cut back by the member elected next, would lose records
    it was told were committed."""
    machine = FailoverHistories()
    try:
        machine.form_the_group()
        machine.put(count=2, size=100)
        machine.replicate(replica_id=1, budget=0)
        machine.replicate(replica_id=2, budget=0)
        assert machine.confirm == 0
        machine.elect(replica_id=1)
        machine.rejoin(replica_id=0)
        machine.replicas_agree_on_the_committed_prefix()
    finally:
        machine.teardown()
