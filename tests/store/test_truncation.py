"""Truncating a store to a CommitLog offset (a former master rejoining as a slave), on real files:
what a running store and a reopened one (normal and crash recovery) hold afterwards, the epoch
file, and kill -9 in the middle of a truncation."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from store_support import SEGMENT, OpenStore, small_config, verify_problems_of_truncated_store

from rocketstore.common.message import Message
from rocketstore.store.epoch_file import EpochEntry, EpochFileCache, linked
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.truncation import CRASH_POINT_ENV, TRUNCATE_INTENT_FILE

CQ_ENTRIES = 10  # small consume queue files: a queue of a few dozen entries spans several
TOPICS = ("TruncA", "TruncB")
QUEUES = 2
CHILD = str(Path(__file__).resolve().parent / "truncation_child.py")


@pytest.fixture
def store_defaults() -> dict[str, Any]:
    # messageIndexSafe: crash recovery rebuilds the index from where the index checkpoint
    # vouches for it, not from the CommitLog's checkpoint, so the lookups by key after a crash
    # do not depend on how long a test ran (an unflushed index file is deleted on crash recovery)
    return {"cq_entries": CQ_ENTRIES, "message_index_safe": True}


@dataclass(frozen=True)
class Put:
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    offset: int  # CommitLog offset
    store_timestamp: int


def key(seq: int) -> str:
    return f"trunc-{seq}"


def put(store: DefaultMessageStore, seq: int) -> Put:
    topic, queue_id = TOPICS[seq % 2], (seq // 2) % QUEUES
    body = f"message {seq} ".encode() * (1 + seq % 7)
    result = store.put_message(Message(topic=topic, body=body, queue_id=queue_id, properties={"KEYS": key(seq)}))
    assert result.status is PutMessageStatus.PUT_OK and result.append is not None
    a = result.append
    return Put(seq, topic, queue_id, a.logics_offset, a.wrote_offset, a.store_timestamp)


def fill(store: DefaultMessageStore, first: int, count: int) -> list[Put]:
    puts = [put(store, seq) for seq in range(first, first + count)]
    assert store.reput_service.wait_caught_up(10)
    return puts


def queue_sizes(puts: list[Put]) -> dict[tuple[str, int], int]:
    sizes = {(t, q): 0 for t in TOPICS for q in range(QUEUES)}
    for p in puts:
        sizes[(p.topic, p.queue_id)] = max(sizes[(p.topic, p.queue_id)], p.queue_offset + 1)
    return sizes


def assert_store_holds(store: DefaultMessageStore, kept: list[Put], gone: list[Put], end: int) -> None:
    """The store ends at ``end``, every queue ends after its last kept entry, every kept
    message is found by queue offset and by key, and no discarded one by key."""
    assert store.max_phy_offset == end
    assert store.commit_log.mapped_file_queue.check_self() == []
    sizes = queue_sizes(kept)
    assert {(t, q): store.get_max_offset_in_queue(t, q) for t, q in sizes} == sizes
    for p in kept:
        assert store.get_commit_log_offset_in_queue(p.topic, p.queue_id, p.queue_offset) == p.offset
        found = store.query_message(p.topic, key(p.seq), 4, 0, 2**62).messages
        assert [m.physical_offset for m in found] == [p.offset], f"message {p.seq} by key"
    for p in gone:
        found = store.query_message(p.topic, key(p.seq), 4, 0, 2**62).messages
        assert found == [], f"discarded message {p.seq} still found by key"
    for (topic, queue_id), size in sizes.items():  # nothing past the queue's end reads back
        assert store.get_consume_queue(topic, queue_id) is None or \
            store.get_commit_log_offset_in_queue(topic, queue_id, size) == 0


def reopen(open_store: OpenStore, store: DefaultMessageStore, root: Path, *, crash: bool) -> DefaultMessageStore:
    store.shutdown()
    if crash:
        (root / "abort").touch()  # what a kill -9 leaves: crash recovery
    again = open_store()
    assert again.last_exit_ok is not crash
    return again


@pytest.mark.parametrize("crash", [False, True], ids=["normal-recovery", "crash-recovery"])
def test_truncate_at_a_record_boundary(open_store: OpenStore, root: Path, crash: bool) -> None:
    store = open_store()
    puts = fill(store, 0, 120)
    assert store.max_phy_offset > 4 * SEGMENT
    cut = puts[50]  # a boundary in the middle of a segment, segments after it
    assert cut.offset % SEGMENT != 0 and store.max_phy_offset - cut.offset > 2 * SEGMENT
    kept, gone = puts[:50], puts[50:]

    assert store.truncate_files(cut.offset)
    assert_store_holds(store, kept, gone, cut.offset)
    assert store.checkpoint.physic_msg_timestamp < cut.store_timestamp
    assert not (root / TRUNCATE_INTENT_FILE).exists()
    for cq in store._all_consume_queues():  # the flusher resumes at the cut, not past it
        assert cq.mapped_file_queue.flushed_where <= cq.mapped_file_queue.max_offset
    segments = sorted(int(n) for n in os.listdir(root / "commitlog"))
    assert segments[-1] <= cut.offset  # later segments are gone from disk

    store = reopen(open_store, store, root, crash=crash)
    assert_store_holds(store, kept, gone, cut.offset)
    assert store.checkpoint.physic_msg_timestamp < cut.store_timestamp

    # the queues continue where the cut left them; fewer new records than were discarded must
    # not let discarded ConsumeQueue entries or records come back after another restart
    new = fill(store, 1000, 6)
    assert [p.queue_offset for p in new] == [queue_sizes(kept)[(p.topic, p.queue_id)] + i // 4
                                            for i, p in enumerate(new)]
    end = store.max_phy_offset
    store = reopen(open_store, store, root, crash=True)
    assert_store_holds(store, kept + new, gone, end)


def test_truncating_a_running_store_keeps_it_running(open_store: OpenStore, root: Path) -> None:
    store = open_store()
    puts = fill(store, 0, 40)
    assert store.truncate_files(puts[30].offset)
    more = fill(store, 2000, 10)  # dispatch restarted from the cut
    assert_store_holds(store, puts[:30] + more, puts[30:], store.max_phy_offset)
    assert more[0].offset == puts[30].offset


def test_an_offset_inside_a_record_is_refused(open_store: OpenStore) -> None:
    store = open_store()
    puts = fill(store, 0, 30)
    end = store.max_phy_offset
    assert not store.truncate_files(puts[10].offset + 1)
    assert not store.truncate_files(-1)
    assert_store_holds(store, puts, [], end)


def test_a_torn_record_ending_the_log_is_cut_at_its_start(open_store: OpenStore) -> None:
    """A slave's log may end inside a record (the master's frames are cut anywhere): a new master's
    history can put the cut exactly there, at a record whose bytes are not all here."""
    store = open_store()
    puts = fill(store, 0, 10)
    end = store.max_phy_offset
    record = store.commit_log.get_message(puts[3].offset, puts[4].offset - puts[3].offset)
    assert record is not None
    assert store.commit_log.append_data(end, [record[: len(record) // 2]])  # half a record, as replicated
    assert store.max_phy_offset == end + len(record) // 2
    assert store.truncate_files(end)
    assert_store_holds(store, puts, [], end)
    assert not store.truncate_files(puts[5].offset + 1)  # inside a whole record: still refused


def test_truncate_trims_the_epoch_file(open_store: OpenStore, root: Path) -> None:
    store = open_store()
    puts = fill(store, 0, 30)
    for epoch, p in ((1, puts[0]), (2, puts[10]), (3, puts[20]), (4, puts[25])):
        assert store.epoch_cache.append_entry(epoch, p.offset)
    assert store.truncate_files(puts[20].offset)
    assert store.epoch_cache.entries == linked([EpochEntry(1, puts[0].offset), EpochEntry(2, puts[10].offset)])
    reread = EpochFileCache(root / "epochFileCheckpoint")
    reread.load()
    assert reread.entries == store.epoch_cache.entries


def test_load_drops_epochs_that_start_past_the_log(open_store: OpenStore, root: Path) -> None:
    """A RocketMQ broker killed between cutting its log and its epoch file leaves epochs the
    log does not reach; a rejoining slave must not claim them when it compares histories."""
    store = open_store()
    fill(store, 0, 10)
    end = store.max_phy_offset
    store.shutdown()
    cache = EpochFileCache(root / "epochFileCheckpoint")
    for epoch, start in ((1, 0), (2, end), (3, end + 100)):
        assert cache.append_entry(epoch, start)
    store = open_store()
    assert [e.epoch for e in store.epoch_cache.entries] == [1, 2]


# -- kill -9 during a truncation ----------------------------------------------------------------------


def _prepared(open_store: OpenStore, root: Path) -> tuple[list[Put], list[Put], int]:
    store = open_store()
    puts = fill(store, 0, 120)
    for epoch, p in ((1, puts[0]), (2, puts[40]), (3, puts[60])):
        assert store.epoch_cache.append_entry(epoch, p.offset)
    store.shutdown()
    return puts[:50], puts[50:], puts[50].offset


@pytest.mark.integration
@pytest.mark.parametrize("point", ["intent-recorded", "first-consume-queue-cut", "consume-queues-cut",
                                   "commit-log-cut", "epoch-file-cut"])
def test_kill_9_inside_a_truncation_recovers_to_the_cut(open_store: OpenStore, root: Path, point: str) -> None:
    """A child process truncates the store and is SIGKILLed at ``point`` inside the truncation.

    The kill comes from the child itself, at a named point the test selects through an
    environment variable the store reads only there: a kill -9 sent from outside cannot be
    timed to land between two given steps. Reopening the store (crash recovery) must finish
    the truncation: the same state as a truncation that completed.
    """
    kept, gone, cut = _prepared(open_store, root)
    env = {**os.environ, CRASH_POINT_ENV: point}
    child = subprocess.run([sys.executable, CHILD, str(root), str(SEGMENT), str(CQ_ENTRIES), str(cut)],
                           env=env, capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert (root / "abort").exists()

    store = open_store()
    assert not store.last_exit_ok
    assert_store_holds(store, kept, gone, cut)
    assert not (root / TRUNCATE_INTENT_FILE).exists()
    assert [e.epoch for e in store.epoch_cache.entries] == [1, 2]
    new = fill(store, 1000, 6)
    end = store.max_phy_offset
    store.shutdown()
    (root / "abort").touch()
    assert_store_holds(open_store(), kept + new, gone, end)


def test_a_kill_part_way_through_zeroing_the_commit_log_is_finished(open_store: OpenStore, root: Path) -> None:
    """What a kill -9 inside MappedFile.wipe leaves, made by hand (the wipe is one loop of
    memory writes; no named point inside it): the intent recorded, the discarded records of the
    segment holding the cut zeroed only from the end backwards to half-way, the later
    segments still there. Recovery must end the log exactly at the cut, with no old record
    left past it."""
    kept, gone, cut = _prepared(open_store, root)
    segment = root / "commitlog" / f"{cut - cut % SEGMENT:020d}"
    with open(segment, "r+b") as f:
        data = f.read()
        start = cut % SEGMENT
        end = len(data.rstrip(b"\0"))
        middle = (start + end) // 2
        f.seek(middle)
        f.write(bytes(end - middle))
    (root / TRUNCATE_INTENT_FILE).write_text(f"{cut}\n")
    (root / "abort").touch()

    store = open_store()
    assert_store_holds(store, kept, gone, cut)
    with open(segment, "rb") as f:
        assert f.read()[cut % SEGMENT:] == bytes(SEGMENT - cut % SEGMENT)


def test_the_reput_restart_does_not_lose_a_put_made_right_after(open_store: OpenStore) -> None:
    store = open_store()
    puts = fill(store, 0, 20)
    assert store.truncate_files(puts[5].offset)
    p = put(store, 500)
    deadline = time.monotonic() + 10
    while store.get_max_offset_in_queue(p.topic, p.queue_id) <= p.queue_offset and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.get_commit_log_offset_in_queue(p.topic, p.queue_id, p.queue_offset) == p.offset


def _run_child(root: Path, cut: int, kill_after: float | None) -> tuple[int, bool, float | None]:
    """Truncate the store at ``root`` to ``cut`` in a child process, SIGKILLed from here
    ``kill_after`` seconds after it says it starts (None: let it finish). Returns its exit status,
    whether the truncation's redo record was on disk when it died, and how long the truncation
    took when it finished."""
    child = subprocess.Popen([sys.executable, CHILD, str(root), str(SEGMENT), str(CQ_ENTRIES), str(cut)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "truncating\n", child.stderr.read() if child.stderr else ""
        if kill_after is not None:
            time.sleep(kill_after)
            child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    pending = (root / TRUNCATE_INTENT_FILE).exists()
    took = float(out.split()[1]) if out.startswith("truncated ") else None
    assert child.returncode in (0, -signal.SIGKILL), err[-2000:]
    return child.returncode, pending, took


@pytest.mark.integration
def test_kill_9_from_outside_at_random_moments_of_a_truncation(tmp_path: Path, open_store: OpenStore) -> None:
    """kill -9, sent by this process at random moments, to a child truncating a store of many
    CommitLog segments and ConsumeQueue files (no fault hook: the kill lands wherever the child
    is). Each run starts from a copy of the same store. Whatever the kill interrupted, reopening
    the store (crash recovery) leaves it consistent, the CommitLog, ConsumeQueues, IndexFiles and
    epoch file agreeing either on the whole log (killed before the redo record) or on the cut,
    and running the truncation again completes it."""
    base = tmp_path / "base"
    store = open_store(root=base)
    puts = fill(store, 0, 1200)
    for epoch, p in ((1, puts[0]), (2, puts[100]), (3, puts[400])):
        assert store.epoch_cache.append_entry(epoch, p.offset)
    end = store.max_phy_offset
    store.shutdown()
    cut = puts[300].offset
    kept, gone = puts[:300], puts[300:]
    assert (end - cut) // SEGMENT > 30  # dozens of segments and queue files to delete

    def check(root: Path, killed: bool | None, truncated: bool) -> None:
        """``killed``: whether the store was left running (None: the kill landed in the child's
        shutdown after the truncation, before or after it removed ``abort``: either holds)."""
        store = open_store(root=root)
        if killed is not None:
            assert store.last_exit_ok is not killed
        assert not (root / TRUNCATE_INTENT_FILE).exists()
        if truncated:
            assert_store_holds(store, kept, gone, cut)
        else:
            assert_store_holds(store, puts, [], end)
            assert [e.epoch for e in store.epoch_cache.entries] == [1, 2, 3]
        assert store.truncate_files(cut)  # again, or for the first time: it completes
        assert_store_holds(store, kept, gone, cut)
        assert [e.epoch for e in store.epoch_cache.entries] == [1, 2]
        store.shutdown()
        reread = EpochFileCache(root / "epochFileCheckpoint")
        reread.load()
        assert [e.epoch for e in reread.entries] == [1, 2]
        cfg = small_config(root, commit_log_size=SEGMENT, cq_entries=CQ_ENTRIES)
        assert verify_problems_of_truncated_store(cfg) == []  # the IndexFiles: assert_store_holds

    # one undisturbed run gives the truncation's length, over which the kills are spread
    shutil.copytree(base, tmp_path / "calibration")
    status, _, took = _run_child(tmp_path / "calibration", cut, None)
    assert status == 0 and took is not None
    rng = random.Random(int(os.environ.get("TRUNCATION_KILL_SEED", "25")))
    runs = 8
    inside = 0
    for i in range(runs):
        root = tmp_path / f"run-{i}"
        shutil.copytree(base, root)
        status, pending, finished_in = _run_child(root, cut, took * (i + rng.random()) / runs)
        killed = status == -signal.SIGKILL
        inside += killed and pending
        # killed before the redo record: nothing changed yet (the last segment is still there);
        # after it: recovery finishes the cut. On a busy machine the kill can also land after
        # the truncation, while the child shuts its store down.
        last_segment = root / "commitlog" / f"{(end - 1) - (end - 1) % SEGMENT:020d}"
        check(root, None if killed and finished_in is not None else killed,
              truncated=not (killed and not pending and last_segment.exists()))
    assert inside > 0, f"no kill of {runs} landed inside the truncation ({took:.3f} s)"


def test_verify_reads_a_queue_whose_files_a_truncation_deleted(open_store: OpenStore, root: Path) -> None:
    """A cut before a queue's first record deletes all its files and leaves its directory: the
    offline verifier finds the store consistent (it raised on the empty directory)."""
    store = open_store()
    puts = fill(store, 0, 40)
    assert store.truncate_files(puts[1].offset)  # only TruncA queue 0's first record stays
    store.shutdown()
    assert (root / "consumequeue" / "TruncB" / "0").is_dir()
    assert not any((root / "consumequeue" / "TruncB" / "0").iterdir())
    cfg = small_config(root, commit_log_size=SEGMENT, cq_entries=CQ_ENTRIES)
    assert verify_problems_of_truncated_store(cfg) == []
