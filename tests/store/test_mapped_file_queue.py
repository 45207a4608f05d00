"""MappedFile and MappedFileQueue: the behaviours of RocketMQ's MappedFileQueueTest and MappedFileTest.

Everything runs on real files under tmp_path with 1 KiB-ish segments.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from store_support import small_config, start_store

from rocketstore.common.message import Message
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.store.mapped_file import OS_PAGE_SIZE, MappedFile, MappedFileError, offset_to_file_name
from rocketstore.store.mapped_file_queue import DELETE_FILES_BATCH_MAX, AllocateMappedFileService, MappedFileQueue
from rocketstore.store.message_store import DefaultMessageStore


@pytest.fixture
def queues() -> Iterator[list[MappedFileQueue]]:
    """Queues made by a test; closed afterwards so no mapping outlives tmp_path."""
    made: list[MappedFileQueue] = []
    yield made
    for q in made:
        q.shutdown()


def new_queue(made: list[MappedFileQueue], path: Path, file_size: int = 1024,
              allocator: AllocateMappedFileService | None = None) -> MappedFileQueue:
    q = MappedFileQueue(str(path), file_size, allocator)
    made.append(q)
    return q


def fill(q: MappedFileQueue, chunk: bytes, times: int) -> None:
    for _ in range(times):
        mapped = q.get_last_mapped_file(0)
        assert mapped is not None
        assert mapped.append(chunk)


def set_age(mapped: MappedFile, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(mapped.path, (t, t))


# -- getLastMappedFile / findMappedFileByOffset ----------------------------------------------------

def test_get_last_mapped_file_rolls_when_full(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "a")
    assert q.get_last_mapped_file(0, need_create=False) is None
    fill(q, b"0123456789abcdef", 1024)  # 16 KiB into 1 KiB segments
    assert len(q) == 16
    assert [m.file_name for m in q] == [offset_to_file_name(i * 1024) for i in range(16)]
    assert sorted(os.listdir(tmp_path / "a")) == [offset_to_file_name(i * 1024) for i in range(16)]
    assert all(os.path.getsize(m.path) == 1024 for m in q)
    assert q.max_offset == 16 * 1024
    last = q.last
    assert last is not None and last.is_full
    # The last segment is full: the next call creates the 17th; without need_create it does not.
    assert q.get_last_mapped_file(0, need_create=False) is last
    nxt = q.get_last_mapped_file(0)
    assert nxt is not None and nxt.file_from_offset == 16 * 1024 and nxt.wrote_position == 0


def test_get_last_mapped_file_aligns_a_non_zero_start(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "s")
    first = q.get_last_mapped_file(1024 + 100)
    assert first is not None and first.file_from_offset == 1024
    assert first.first_create_in_queue
    assert q.min_offset == 1024


def test_find_mapped_file_by_offset(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "b")
    fill(q, b"abcd", 1024)  # exactly 4 full segments
    assert len(q) == 4 and q.max_offset == 4 * 1024

    def start_of(offset: int) -> int | None:
        found = q.find_mapped_file_by_offset(offset)
        return None if found is None else found.file_from_offset

    assert start_of(0) == 0
    assert start_of(100) == 0
    assert start_of(1023) == 0  # last byte of the first segment
    assert start_of(1024) == 1024
    assert start_of(1024 + 100) == 1024
    assert start_of(2048) == 2048
    assert start_of(2048 + 100) == 2048
    assert start_of(4 * 1024 - 1) == 3 * 1024  # last byte of the last segment
    assert start_of(4 * 1024) is None  # past the end
    assert start_of(4 * 1024 + 100) is None
    assert start_of(-1) is None


def test_find_mapped_file_by_offset_when_queue_starts_past_zero(tmp_path: Path,
                                                               queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "b2")
    mapped = q.get_last_mapped_file(1024)
    assert mapped is not None
    assert q.find_mapped_file_by_offset(1025) is mapped
    assert q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(123, False) is None
    assert q.find_mapped_file_by_offset(123, True) is mapped
    assert q.find_mapped_file_by_offset(0, True) is mapped
    assert q.find_mapped_file_by_offset(2048, True) is mapped  # not found above the end: the first too


def test_find_mapped_file_survives_out_of_order_list(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    """The index computed from the offset is checked against the segment; a scan finds the right one."""
    q = new_queue(queues, tmp_path / "g")
    for i in range(3):
        mapped = q.get_last_mapped_file(1024 * i)
        assert mapped is not None
        mapped.set_positions(1024)
    found = q.find_mapped_file_by_offset(1028)
    assert found is not None and found.file_from_offset == 1024
    files = q.mapped_files
    files[1], files[2] = files[2], files[1]
    found = q.find_mapped_file_by_offset(1028)
    assert found is not None and found.file_from_offset == 1024


def test_find_on_empty_queue(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "empty")
    assert q.find_mapped_file_by_offset(0) is None
    assert q.find_mapped_file_by_offset(0, True) is None
    assert q.min_offset == -1 and q.max_offset == 0


# -- flush -----------------------------------------------------------------------------------------

def test_flush_advances_one_segment_per_call(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "c")
    fill(q, b"0123456789abcdef", 1024)
    for n in range(1, 7):
        assert q.flush(0) is False  # something was flushed
        assert q.flushed_where == 1024 * n
    assert q.remain_to_flush() == (16 - 6) * 1024


def test_flush_with_least_pages(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    size = 8 * OS_PAGE_SIZE
    q = new_queue(queues, tmp_path / "pages", size)
    mapped = q.get_last_mapped_file(0)
    assert mapped is not None
    assert not mapped.is_able_to_flush(0)  # nothing written
    assert mapped.append(b"x" * (2 * OS_PAGE_SIZE - 1))
    assert mapped.is_able_to_flush(0)  # any new byte counts with least pages 0
    assert mapped.is_able_to_flush(1)  # one whole page
    assert not mapped.is_able_to_flush(2)  # the second page is not complete
    assert q.flush(2) is True  # nothing flushed
    assert q.flushed_where == 0 and mapped.flushed_position == 0
    assert mapped.append(b"x")
    assert mapped.is_able_to_flush(2)
    assert q.flush(2) is False
    assert q.flushed_where == 2 * OS_PAGE_SIZE
    # A partial page after the flush point is not enough for least pages 1 ...
    assert mapped.append(b"y" * 10)
    assert not mapped.is_able_to_flush(1)
    assert mapped.is_able_to_flush(0)
    # ... but a full segment is always flushable, whatever the least pages.
    assert mapped.append(b"z" * (size - mapped.wrote_position))
    assert mapped.is_full
    assert mapped.is_able_to_flush(100)
    q.flush(100)
    assert q.flushed_where == size


# -- deletion ----------------------------------------------------------------------------------------

def test_delete_expired_file_by_time(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "f")
    fill(q, b"\x00" * 512, 100)
    assert len(q) == 50
    expired_ms = 100 * 1000
    files = q.mapped_files
    for i, mapped in enumerate(files):
        if i < 5 or i > 20:
            set_age(mapped, 2 * expired_ms / 1000)
    deleted_paths = [m.path for m in files[:5]]
    assert q.delete_expired_file_by_time(expired_ms, 0, 0, False) == 5
    assert len(q) == 45  # stopped at segment 5, which is young; 21..49 stay although old
    assert q.min_offset == 5 * 1024
    assert not any(os.path.exists(p) for p in deleted_paths)
    assert q.delete_expired_file_by_time(expired_ms, 0, 0, False) == 0


def test_delete_by_time_batches_and_spares_last(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "batch")
    fill(q, b"\x00" * 1024, 25)
    for mapped in q:
        set_age(mapped, 3600)
    counts = [q.delete_expired_file_by_time(1000, 0, 0, False) for _ in range(4)]
    assert counts == [DELETE_FILES_BATCH_MAX, DELETE_FILES_BATCH_MAX, 4, 0]
    assert len(q) == 1 and q.min_offset == 24 * 1024


def test_delete_by_time_clean_immediately_ignores_age(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "now")
    fill(q, b"\x00" * 1024, 5)
    assert q.delete_expired_file_by_time(10**9, 0, 0, False) == 0
    assert q.delete_expired_file_by_time(10**9, 0, 0, True) == 4


def cq_entries_queue(made: list[MappedFileQueue], path: Path) -> MappedFileQueue:
    """A consume-queue-like queue: 2048 entries of 20 bytes in 5120-byte segments (256 per segment)."""
    q = new_queue(made, path, 5120)
    for i in range(2048):
        mapped = q.get_last_mapped_file(0)
        assert mapped is not None
        assert mapped.append(struct.pack(">q", i) + b"0" * 12)
    assert len(q) == 8
    return q


def test_delete_expired_file_by_offset_blocked_by_holder(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = cq_entries_queue(queues, tmp_path / "e")
    first = q.first
    assert first is not None
    assert first.hold()
    # Every segment's last entry is below 20480, but the held first segment cannot go, and
    # deletion never skips ahead of it.
    assert q.delete_expired_file_by_offset(20480, CQ_STORE_UNIT_SIZE) == 0
    assert len(q) == 8 and os.path.exists(first.path)
    first.release()
    deleted = q.delete_expired_file_by_offset(20480, CQ_STORE_UNIT_SIZE)
    assert deleted == 7  # all but the last
    assert not os.path.exists(first.path)
    new_first = q.first
    assert new_first is not None and new_first.file_from_offset == 7 * 5120


def test_delete_expired_file_by_offset_keeps_files_pointing_at_live_data(tmp_path: Path,
                                                                        queues: list[MappedFileQueue]) -> None:
    q = cq_entries_queue(queues, tmp_path / "live")
    # Segment k's last entry is 256k + 255: a min offset of 600 frees segments 0 (255) and 1 (511) only.
    assert q.delete_expired_file_by_offset(600, CQ_STORE_UNIT_SIZE) == 2
    assert q.min_offset == 2 * 5120


def test_held_segment_is_destroyed_after_forcible_interval(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    """A reader that never releases pins a segment only until the forcible interval has passed."""
    q = cq_entries_queue(queues, tmp_path / "hang")
    first = q.first
    assert first is not None and first.hold()  # never released
    assert q.delete_expired_file_by_offset(20480, CQ_STORE_UNIT_SIZE) == 0
    assert not first.is_available and not first.is_cleanup_over
    assert first.read(0, 8) is None  # new readers are refused once deletion started
    # The retry path (CleanCommitLogService.redeleteHangedFile): too early for a minute's forcible
    # interval (however slow this machine), due for 200 ms once that much has certainly passed
    assert q.retry_delete_first_file(60_000) is False
    assert os.path.exists(first.path)
    time.sleep(0.25)
    assert q.retry_delete_first_file(200) is True
    assert not os.path.exists(first.path)
    assert first.is_cleanup_over
    assert len(q) == 7
    first.release()  # the late release of the forgotten reader is harmless


def test_held_segment_blocks_delete_by_time_until_forcible_interval(tmp_path: Path,
                                                                    queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "hang2")
    fill(q, b"\x00" * 1024, 4)
    first = q.first
    assert first is not None and first.hold()
    assert q.delete_expired_file_by_time(0, 0, 200, True) == 0
    assert len(q) == 4
    time.sleep(0.25)
    assert q.delete_expired_file_by_time(0, 0, 200, True) == 3
    assert not os.path.exists(first.path)


# -- MappedFile reference counting (MappedFileTest) ------------------------------------------------

def test_mapped_file_read_shutdown_release_destroy(tmp_path: Path) -> None:
    text = b"Once, there was a chance for me!"
    mapped = MappedFile(str(tmp_path / offset_to_file_name(0)), 64 * 1024)
    assert mapped.append(text)
    assert mapped.read(0, len(text)) == text
    assert mapped.read_from(0) == text
    assert mapped.read(0, len(text) + 1) is None  # beyond what was written
    assert mapped.hold()  # a reader in the middle of a copy
    mapped.shutdown(1000)
    assert not mapped.is_available
    assert not mapped.is_cleanup_over
    assert not mapped.hold()
    mapped.release()
    assert mapped.is_cleanup_over
    assert mapped.destroy(1000)
    assert not os.path.exists(mapped.path)


def test_mapped_file_rejects_bad_names_and_sizes(tmp_path: Path) -> None:
    with pytest.raises(MappedFileError, match="decimal start offset"):
        MappedFile(str(tmp_path / "not-a-number"), 1024)
    path = tmp_path / offset_to_file_name(0)
    path.write_bytes(b"\x00" * 100)
    with pytest.raises(MappedFileError, match=r"100 bytes.*1024"):
        MappedFile(str(path), 1024)


# -- truncate / reset ----------------------------------------------------------------------------------

def test_truncate_dirty_files(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "t")
    fill(q, b"\x01" * 256, 20)  # 5 full segments
    paths = [m.path for m in q]
    q.truncate_dirty_files(2 * 1024 + 300)
    assert len(q) == 3
    last = q.last
    assert last is not None and last.file_from_offset == 2048
    assert last.wrote_position == last.flushed_position == last.committed_position == 300
    assert q.max_offset == 2048 + 300
    assert [os.path.exists(p) for p in paths] == [True, True, True, False, False]
    # Appends resume at the truncation point.
    assert last.append(b"\x02" * 4)
    assert last.read(300, 4) == b"\x02" * 4


def test_truncate_at_segment_boundary_keeps_an_empty_segment(tmp_path: Path,
                                                            queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "tb")
    fill(q, b"\x01" * 1024, 4)
    q.truncate_dirty_files(2048)
    assert [m.file_from_offset for m in q] == [0, 1024, 2048]
    assert [m.wrote_position for m in q] == [1024, 1024, 0]
    assert q.max_offset == 2048


def test_reset_offset(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "r")
    fill(q, b"\x01" * 512, 9)  # segments 0..4, the last one half full: max offset 4608
    assert q.max_offset == 4608
    # More than two segments back is refused and changes nothing.
    assert q.reset_offset(4608 - 2 * 1024 - 1) is False
    assert len(q) == 5 and q.max_offset == 4608
    assert q.reset_offset(3 * 1024 + 100) is True
    assert [m.file_from_offset for m in q] == [0, 1024, 2048, 3072]
    last = q.last
    assert last is not None and last.wrote_position == last.flushed_position == 100
    assert q.max_offset == 3172


# -- load ------------------------------------------------------------------------------------------------

def test_load_reopens_segments_as_full(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "l")
    fill(q, b"\x07" * 256, 10)
    q.shutdown()
    reopened = new_queue(queues, tmp_path / "l")
    reopened.load()
    assert [m.file_from_offset for m in reopened] == [0, 1024, 2048]
    assert all(m.wrote_position == 1024 for m in reopened)  # recovery sets the real end later
    first = reopened.first
    assert first is not None and first.read(0, 4) == b"\x07" * 4
    assert reopened.check_self() == []


def test_load_of_missing_directory_is_empty(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "nothing-here")
    q.load()
    assert len(q) == 0


def test_load_refuses_wrong_sized_segment(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "w")
    fill(q, b"\x00" * 1024, 3)
    q.shutdown()
    bad = tmp_path / "w" / offset_to_file_name(1024)
    with open(bad, "r+b") as fh:
        fh.truncate(1000)
    reopened = new_queue(queues, tmp_path / "w")
    with pytest.raises(MappedFileError) as info:
        reopened.load()
    message = str(info.value)
    assert str(bad) in message
    assert "1000" in message and "1024" in message


def test_store_load_names_a_wrong_sized_commit_log_segment(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "store", cq_entries=50, max_hash_slot_num=10, max_index_num=40)
    store = start_store(cfg)
    for i in range(40):
        assert store.put_message(Message(topic="T", body=b"m%03d" % i + b"." * 200)).ok
    store.shutdown()
    bad = cfg.commit_log_dir() / offset_to_file_name(0)
    with open(bad, "r+b") as fh:
        fh.truncate(4000)
    again = DefaultMessageStore(cfg)
    with pytest.raises(MappedFileError, match=str(bad)):
        again.load()
    again.shutdown()


def test_load_ignores_hidden_files(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "h")
    fill(q, b"\x00" * 1024, 1)
    q.shutdown()
    (tmp_path / "h" / ".nfs0001").write_bytes(b"x")
    reopened = new_queue(queues, tmp_path / "h")
    reopened.load()
    assert len(reopened) == 1


def test_check_self_reports_gaps(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    q = new_queue(queues, tmp_path / "gap")
    fill(q, b"\x00" * 1024, 3)
    q.shutdown()
    os.unlink(tmp_path / "gap" / offset_to_file_name(1024))
    reopened = new_queue(queues, tmp_path / "gap")
    reopened.load()
    problems = reopened.check_self()
    assert len(problems) == 1 and offset_to_file_name(2048) in problems[0]


# -- AllocateMappedFileService -----------------------------------------------------------------------

def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return bool(predicate())


def is_segment(path: Path, size: int) -> bool:
    """Created and sized (the file exists a moment before it gets its length)."""
    return path.exists() and os.path.getsize(path) == size


def test_allocator_prepares_next_segment_before_the_roll(tmp_path: Path, queues: list[MappedFileQueue]) -> None:
    size = 1024 * 1024
    allocator = AllocateMappedFileService(size)
    try:
        q = new_queue(queues, tmp_path / "alloc", size, allocator)
        directory = tmp_path / "alloc"
        first = q.get_last_mapped_file(0)
        assert first is not None and first.file_from_offset == 0
        second_path = directory / offset_to_file_name(size)
        # The next segment is created in the background, before anyone needs it.
        assert wait_for(lambda: is_segment(second_path, size))
        assert len(q) == 1  # created ahead, but not part of the queue until the roll
        # Preallocation is sparse: a 1 MiB segment does not take 1 MiB of disk up front.
        assert os.stat(second_path).st_blocks * 512 < size
        assert first.append(b"\x05" * size)
        second = q.get_last_mapped_file(0)
        assert second is not None and second.path == str(second_path)
        assert second.wrote_position == 0 and not second.first_create_in_queue
        # The roll itself asked for the one after: it exists soon after, ahead of the next roll.
        assert wait_for(lambda: is_segment(directory / offset_to_file_name(2 * size), size))
        assert len(q) == 2
    finally:
        allocator.shutdown()
    # A segment created ahead but never taken is deleted on shutdown, as RocketMQ 4.9.8's
    # AllocateMappedFileService.shutdown does; the ones in the queue stay.
    assert not (tmp_path / "alloc" / offset_to_file_name(2 * size)).exists()
    assert (tmp_path / "alloc" / offset_to_file_name(size)).exists()


def test_allocator_shutdown_unblocks_waiters(tmp_path: Path) -> None:
    allocator = AllocateMappedFileService(1024)
    allocator.shutdown()
    with pytest.raises(MappedFileError, match="shut down"):
        allocator.take(str(tmp_path / offset_to_file_name(0)), None)


def test_allocator_reports_creation_failure(tmp_path: Path) -> None:
    allocator = AllocateMappedFileService(1024)
    try:
        missing_dir = tmp_path / "does-not-exist" / offset_to_file_name(0)
        with pytest.raises(MappedFileError, match="could not create segment"):
            allocator.take(str(missing_dir), None)
    finally:
        allocator.shutdown()
