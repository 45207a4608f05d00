"""The epoch file (controller mode's EpochFileCache): its on-disk format, the cases of RocketMQ
5.3.3's EpochFileCacheTest, and a model of a replica group checked with hypothesis."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from rocketstore.store.epoch_file import (
    NO_END_OFFSET,
    EpochEntry,
    EpochFileCache,
    appended,
    decode_epoch_file,
    encode_epoch_file,
    find_consistent_point,
    find_entry_by_offset,
    linked,
    truncate_suffix_by_epoch,
    truncate_suffix_by_offset,
    with_last_end_offset,
)

# What RocketMQ 5.3.3's CheckpointFile writes for entries 7-7000 and 8-8000 (its own javadoc
# example): the count, the CRC32 of the entry lines masked to 31 bits, one line per entry.
APACHE_FILE = "2\n773307083\n7-7000\n8-8000\n"


def entries(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    return linked(EpochEntry(epoch, start) for epoch, start in pairs)


# -- format ------------------------------------------------------------------------------------


def test_a_file_rocketmq_wrote_parses() -> None:
    assert decode_epoch_file(APACHE_FILE) == (EpochEntry(7, 7000, 8000), EpochEntry(8, 8000))


def test_we_write_what_rocketmq_writes() -> None:
    assert encode_epoch_file(entries((7, 7000), (8, 8000))) == APACHE_FILE


def test_crc_is_java_crc32_masked_to_31_bits() -> None:
    lines = "1-0\n2-4096\n3-81920\n"
    text = encode_epoch_file(entries((1, 0), (2, 4096), (3, 81920)))
    assert text.splitlines()[1] == str(zlib.crc32(lines.encode()) & 0x7FFFFFFF)


def test_round_trip_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    cache = EpochFileCache(path)
    for epoch, start in ((1, 0), (2, 300), (5, 300), (9, 7000)):
        assert cache.append_entry(epoch, start)
    reread = EpochFileCache(path)
    reread.load()
    assert reread.entries == cache.entries
    assert path.read_text() == encode_epoch_file(cache.entries)


@pytest.mark.parametrize("text", [
    "2\n773307084\n7-7000\n8-8000\n",  # CRC off by one
    "3\n773307083\n7-7000\n8-8000\n",  # count does not match
    "2\n",  # no entries at all after a count of 2
    "",
    "x\n0\n7-7000\n",
    "1\n0\n7-x\n",
])
def test_damaged_files_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_epoch_file(text)


def test_crc_zero_means_unchecked_and_odd_lines_are_skipped_as_rocketmq_skips_them() -> None:
    # a blank line and a line with three fields are not entries (fromLine returns null), but
    # they count in the CRC; a CRC of 0 is not checked at all
    assert decode_epoch_file("1\n0\n\n1-2-3\n4-100\n") == (EpochEntry(4, 100),)
    text = "1\n0\n4-100\r\n"  # a Windows line end, which BufferedReader.readLine accepts
    assert decode_epoch_file(text) == (EpochEntry(4, 100),)


def test_unusable_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    cache = EpochFileCache(path)
    cache.append_entry(1, 0)
    cache.append_entry(2, 100)  # the version with only epoch 1 is now the backup
    assert (tmp_path / "epochFileCheckpoint.bak").read_text() == encode_epoch_file(entries((1, 0)))
    path.write_text("2\n12345\n1-0\n2-100\n")  # torn: CRC does not match
    reread = EpochFileCache(path)
    reread.load()
    assert reread.entries == entries((1, 0))


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    cache = EpochFileCache(tmp_path / "epochFileCheckpoint")
    cache.load()
    assert cache.entries == () and cache.last_epoch == -1


def test_truncating_every_entry_removes_file_and_backup(tmp_path: Path) -> None:
    """RocketMQ writes nothing for an empty list and reads an empty file as "use the backup";
    either would bring the old entries back after a restart."""
    path = tmp_path / "epochFileCheckpoint"
    cache = EpochFileCache(path)
    cache.append_entry(1, 0)
    cache.append_entry(2, 100)
    cache.truncate_suffix_by_offset(0)
    assert not path.exists() and not (tmp_path / "epochFileCheckpoint.bak").exists()
    reread = EpochFileCache(path)
    reread.load()
    assert reread.entries == ()


# -- RocketMQ 5.3.3 EpochFileCacheTest, case by case ------------------------------------------------


@pytest.fixture
def cache(tmp_path: Path) -> EpochFileCache:
    c = EpochFileCache(tmp_path / "EpochCheckpoint")
    assert c.append_entry(1, 100)
    assert c.append_entry(2, 300)
    assert c.append_entry(3, 500)
    assert c.get_entry(2) == EpochEntry(2, 300, 500)
    return c


def test_init_from_file(cache: EpochFileCache) -> None:
    reread = EpochFileCache(cache.path)
    reread.load()
    assert reread.get_entry(2) == EpochEntry(2, 300, 500)


def test_truncate(cache: EpochFileCache) -> None:
    cache.truncate_suffix_by_offset(150)
    assert cache.get_entry(1) == EpochEntry(1, 100)  # open again
    assert cache.get_entry(2) is None
    reread = EpochFileCache(cache.path)
    reread.load()
    assert reread.entries == entries((1, 100))


def test_find_epoch_entry_by_offset(cache: EpochFileCache) -> None:
    assert cache.find_epoch_entry_by_offset(350) == EpochEntry(2, 300, 500)
    assert cache.find_epoch_entry_by_offset(99) is None


def test_find_consistent_point_sample1(cache: EpochFileCache) -> None:
    other = entries((1, 100), (2, 300), (3, 450))
    # <1,100> <2,300> <3,500> against <1,100> <2,300> <3,450>: epoch 3 differs, epoch 2 ends
    # at 450 on the other side
    assert find_consistent_point(cache.entries, other) == 450


def test_find_consistent_point_sample2(cache: EpochFileCache) -> None:
    cache.set_last_epoch_entry_end_offset(700)
    other = with_last_end_offset(entries((1, 100), (2, 300), (3, 500)), 600)
    assert find_consistent_point(cache.entries, other) == 600


def test_find_consistent_point_sample3(cache: EpochFileCache) -> None:
    assert find_consistent_point(cache.entries, entries((1, 200), (2, 500))) == -1


def test_find_consistent_point_sample4(cache: EpochFileCache) -> None:
    cache.set_last_epoch_entry_end_offset(700)
    other = entries((1, 100), (2, 300), (3, 500), (4, 800))
    assert find_consistent_point(other, cache.entries) == 700


# -- appending ---------------------------------------------------------------------------------------


def test_append_needs_a_greater_epoch_and_no_smaller_start(tmp_path: Path) -> None:
    cache = EpochFileCache(tmp_path / "epochFileCheckpoint")
    assert cache.append_entry(3, 100)
    assert not cache.append_entry(3, 200)  # same epoch
    assert not cache.append_entry(2, 200)  # older epoch
    assert not cache.append_entry(4, 99)  # starts before the last one
    assert cache.append_entry(4, 100)  # an election with nothing written in epoch 3
    assert cache.entries == (EpochEntry(3, 100, 100), EpochEntry(4, 100))
    assert cache.find_epoch_entry_by_offset(100) == EpochEntry(4, 100)


def test_truncate_suffix_by_epoch_reopens_the_last_entry() -> None:
    assert truncate_suffix_by_epoch(entries((1, 0), (2, 10), (3, 20)), 2) == (EpochEntry(1, 0, NO_END_OFFSET),)


# -- a model of a replica group (pure, on the functions above) ------------------------------------------
#
# Replicas hold a log (a list of record ids; one record = one offset) and epoch entries. The master
# appends; a slave that (re)joins first truncates to the consistent point with the master, then
# copies records and, like AutoSwitchHAClient, appends the master's epoch entry for the epoch of
# the data it receives. The SyncStateSet (SSS) is the master plus the slaves that caught up; an
# offset is acknowledged when every SSS member has it. A crash keeps a replica's log and epoch
# file (re-read from their encoded form); the controller elects a new master among the live SSS
# members only, which starts a new epoch at its log's end with SSS = {itself}.

class _Replica:
    def __init__(self) -> None:
        self.log: list[tuple[int, int]] = []  # (epoch written in, sequence number)
        self.entries: tuple[EpochEntry, ...] = ()
        self.alive = True
        self.following = False  # truncated against the current master since its last (re)start


class ReplicaGroup(RuleBasedStateMachine):
    @initialize(n=st.integers(min_value=2, max_value=3))
    def start(self, n: int) -> None:
        self.replicas = [_Replica() for _ in range(n)]
        self.epoch = 1
        self.master = 0
        self.sss = {0}
        self.seq = 0
        self.acked: dict[int, tuple[int, int]] = {}  # offset -> the record acknowledged there
        self.replicas[0].entries = appended((), 1, 0) or ()

    # -- helpers -------------------------------------------------------------------------------
    @property
    def leader(self) -> _Replica:
        return self.replicas[self.master]

    def committed_prefix(self) -> list[tuple[int, int]]:
        return [self.acked[o] for o in range(len(self.acked))]

    def resync(self, r: _Replica) -> bool:
        """AutoSwitchHAClient.doTruncate; False when no consistent point exists."""
        if not r.entries:
            r.log.clear()  # a replica that never received an epoch has nothing (as in RocketMQ)
        else:
            local = with_last_end_offset(r.entries, len(r.log))
            remote = with_last_end_offset(self.leader.entries, len(self.leader.log))
            point = find_consistent_point(local, remote)
            if point < 0:
                return False
            assert point <= len(r.log)
            assert r.log[:point] == self.leader.log[:point], "the consistent point is not consistent"
            held = self.committed_prefix()[: len(r.log)]
            if r.log[: len(held)] == held:
                assert point >= len(held), f"truncation to {point} cuts acknowledged offsets < {len(held)}"
            del r.log[point:]
            r.entries = truncate_suffix_by_offset(r.entries, point)
        r.following = True
        return True

    # -- rules ---------------------------------------------------------------------------------
    @precondition(lambda self: self.leader.alive)
    @rule(k=st.integers(min_value=1, max_value=4))
    def append(self, k: int) -> None:
        for _ in range(k):
            self.seq += 1
            self.leader.log.append((self.epoch, self.seq))

    @precondition(lambda self: self.leader.alive)
    @rule(data=st.data(), k=st.integers(min_value=1, max_value=5))
    def replicate(self, data: st.DataObject, k: int) -> None:
        i = data.draw(st.sampled_from([i for i in range(len(self.replicas)) if i != self.master]))
        r = self.replicas[i]
        if not r.alive or (not r.following and not self.resync(r)):
            return
        leader = self.leader
        leader_entries = with_last_end_offset(leader.entries, len(leader.log))
        for offset in range(len(r.log), min(len(r.log) + k, len(leader.log))):
            entry = find_entry_by_offset(leader_entries, offset)
            assert entry is not None
            if not r.entries or r.entries[-1].epoch < entry.epoch:
                new = appended(r.entries, entry.epoch, entry.start_offset)
                assert new is not None
                r.entries = new
            r.log.append(leader.log[offset])

    @precondition(lambda self: self.leader.alive)
    @rule()
    def acknowledge(self) -> None:
        confirm = min(len(self.replicas[i].log) for i in self.sss)
        for offset in range(confirm):
            record = self.leader.log[offset]
            assert self.acked.setdefault(offset, record) == record, f"offset {offset} acknowledged twice"

    @precondition(lambda self: self.leader.alive)
    @rule(data=st.data())
    def expand_sync_state_set(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(min_value=0, max_value=len(self.replicas) - 1))
        r, leader = self.replicas[i], self.leader
        # AutoSwitchHAService.maybeExpandInSyncStateSet: caught up to the confirm offset and
        # into the current epoch (not necessarily to the master's end)
        confirm = min(len(self.replicas[j].log) for j in self.sss)
        if r.alive and r.following and len(r.log) >= confirm and len(r.log) >= leader.entries[-1].start_offset:
            self.sss.add(i)

    @rule(data=st.data())
    def shrink_sync_state_set(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(min_value=0, max_value=len(self.replicas) - 1))
        if i != self.master:
            self.sss.discard(i)

    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        r = self.replicas[data.draw(st.integers(min_value=0, max_value=len(self.replicas) - 1))]
        r.alive = False
        r.following = False
        r.entries = decode_epoch_file(encode_epoch_file(r.entries)) if r.entries else ()

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(min_value=0, max_value=len(self.replicas) - 1))
        self.replicas[i].alive = True  # rejoins as a slave; the master's own restart keeps its role

    @precondition(lambda self: not self.leader.alive)
    @rule(data=st.data())
    def elect(self, data: st.DataObject) -> None:
        candidates = sorted(i for i in self.sss if self.replicas[i].alive)
        if not candidates:
            return
        self.master = data.draw(st.sampled_from(candidates))
        self.epoch += 1
        leader = self.leader
        new = appended(truncate_suffix_by_epoch(leader.entries, self.epoch), self.epoch, len(leader.log))
        assert new is not None, f"epoch {self.epoch} cannot follow {leader.entries}"
        leader.entries = new
        self.sss = {self.master}
        for r in self.replicas:
            r.following = r is leader

    # -- invariants ----------------------------------------------------------------------------
    @invariant()
    def master_holds_every_acknowledged_record(self) -> None:
        prefix = self.committed_prefix()
        assert self.leader.log[: len(prefix)] == prefix

    @invariant()
    def followers_agree_with_the_master(self) -> None:
        for r in self.replicas:
            if r.following:
                assert r.log == self.leader.log[: len(r.log)]

    @invariant()
    def sync_state_set_members_hold_what_was_acknowledged(self) -> None:
        prefix = self.committed_prefix()
        for i in self.sss:
            assert self.replicas[i].log[: len(prefix)] == prefix

    @invariant()
    def epoch_entries_start_within_the_log(self) -> None:
        for r in self.replicas:
            assert all(e.start_offset <= len(r.log) for e in r.entries)
            assert [e.epoch for e in r.entries] == sorted({e.epoch for e in r.entries})


ReplicaGroup.TestCase.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
TestReplicaGroup = ReplicaGroup.TestCase
