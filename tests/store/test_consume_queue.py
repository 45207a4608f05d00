"""ConsumeQueue: RocketMQ 4.9.8's ConsumeQueueTest plus the on-disk rules it relies on.

Entry layout, pre-blank fill, repeated builds, recovery, truncation and min offset correction,
checked against the raw files. Expected tag codes come from an independent Java
``String.hashCode`` written here, not from the store.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from store_support import small_config, start_store

from rocketstore.common.message import HostAddress, Message, StoredMessage
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import ConsumeQueue
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus

ENTRY = struct.Struct(">qiq")
PRE_BLANK = struct.pack(">qiq", 0, 0x7FFFFFFF, 0)
SEG = 4096

OpenStore = Callable[..., DefaultMessageStore]


def java_hash(s: str) -> int:
    """java.lang.String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


def test_java_hash_reference_values() -> None:
    assert java_hash("") == 0
    assert java_hash("a") == 97
    assert java_hash("TagA") == 2598919  # String.hashCode of "TagA" in Java
    assert java_hash("polygenelubricants") == -(2**31)  # wraps to Integer.MIN_VALUE


def cq_file(queue_dir: Path, byte_offset: int) -> Path:
    return queue_dir / f"{byte_offset:020d}"


def read_entries(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    return [ENTRY.unpack_from(data, p) for p in range(0, len(data), 20)]


@pytest.fixture
def new_cq(tmp_path: Path) -> Iterator[Callable[..., ConsumeQueue]]:
    made: list[ConsumeQueue] = []

    def _make(file_size: int = 200, topic: str = "abc", queue_id: int = 0) -> ConsumeQueue:
        cq = ConsumeQueue(topic, queue_id, str(tmp_path / "consumequeue"), file_size)
        cq.load()
        made.append(cq)
        return cq

    yield _make
    for cq in made:
        cq.shutdown()


def reopen(cq: ConsumeQueue, make: Callable[..., ConsumeQueue]) -> ConsumeQueue:
    """Close a queue and open it again from disk, recovering as a store load does."""
    cq.shutdown()
    again = make(cq.file_size, cq.topic, cq.queue_id)
    again.recover()
    return again


def fill(cq: ConsumeQueue, n: int, start: int = 0, size: int = 100) -> None:
    for i in range(start, start + n):
        assert cq.put_message_position_info(i * size, size, 1000 + i, i)


# -- layout ---------------------------------------------------------------------------------


def test_entry_is_20_bytes_offset_size_tagscode(new_cq: Callable[..., ConsumeQueue], tmp_path: Path) -> None:
    cq = new_cq()
    assert cq.put_message_position_info(123_456_789_012, 345, java_hash("TagA"), 0)
    assert cq.put_message_position_info(123_456_789_357, 77, -5, 1)
    raw = cq_file(Path(cq.queue_dir), 0).read_bytes()
    assert raw[:40] == (struct.pack(">qiq", 123_456_789_012, 345, java_hash("TagA"))
                        + struct.pack(">qiq", 123_456_789_357, 77, -5))
    assert raw[40:] == b"\x00" * (200 - 40)
    assert Path(cq.queue_dir) == tmp_path / "consumequeue" / "abc" / "0"
    assert cq.max_offset_in_queue == 2


def test_store_writes_entries_pointing_at_records(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "s", commit_log_size=SEG, cq_entries=10)
    store = start_store(cfg)
    try:
        r1 = store.put_message(Message(topic="abc", body=b"one", properties={"TAGS": "TagA"}))
        r2 = store.put_message(Message(topic="abc", body=b"two"))
        r3 = store.put_message(Message(topic="abc", body=b"three", properties={"TAGS": "\u00e9t\u00e9"}))
        assert store.reput_service.wait_caught_up(5)
        entries = read_entries(tmp_path / "s" / "consumequeue" / "abc" / "0" / f"{0:020d}")
        where = []
        for r in (r1, r2, r3):
            assert r.append is not None
            where.append((r.append.wrote_offset, r.append.wrote_bytes))
        assert entries[:3] == [
            (*where[0], java_hash("TagA")),
            (*where[1], 0),  # no tags: tagsCode 0
            (*where[2], java_hash("\u00e9t\u00e9")),
        ]
        assert entries[3:] == [(0, 0, 0)] * 7
    finally:
        store.shutdown()


def test_default_file_is_6_000_000_bytes_of_300_000_entries(new_cq: Callable[..., ConsumeQueue]) -> None:
    cfg = StoreConfig()
    assert cfg.mapped_file_size_consume_queue == 6_000_000
    assert cfg.get_mapped_file_size_consume_queue() == 6_000_000
    # RocketMQ rounds a configured size up to whole entries
    assert StoreConfig(mapped_file_size_consume_queue=1001).get_mapped_file_size_consume_queue() == 1020
    cq = new_cq(cfg.get_mapped_file_size_consume_queue())
    assert cq.roll_next_file(0) == 300_000
    # the first entry at logical 299,999 is the last slot of the first file...
    assert cq.put_message_position_info(10_000, 50, 1, 299_999)
    # ...and 300,000 starts the second file, named by its byte offset
    assert cq.put_message_position_info(10_050, 60, 2, 300_000)
    qdir = Path(cq.queue_dir)
    assert sorted(os.listdir(qdir)) == [f"{0:020d}", f"{6_000_000:020d}"]
    assert os.path.getsize(cq_file(qdir, 0)) == 6_000_000
    assert os.path.getsize(cq_file(qdir, 6_000_000)) == 6_000_000
    with open(cq_file(qdir, 0), "rb") as f:
        f.seek(299_999 * 20)
        assert ENTRY.unpack(f.read(20)) == (10_000, 50, 1)
    with open(cq_file(qdir, 6_000_000), "rb") as f:
        assert ENTRY.unpack(f.read(20)) == (10_050, 60, 2)
    assert cq.max_offset_in_queue == 300_001
    entry = cq.entry(300_000)
    assert entry is not None and (entry.commit_log_offset, entry.size) == (10_050, 60)


# -- pre-blank ---------------------------------------------------------------------------------


def test_pre_blank_fill_when_first_file_starts_past_zero(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)  # 10 entries per file
    assert cq.put_message_position_info(1000, 50, 7, 25)
    qdir = Path(cq.queue_dir)
    # logical 25 lives at byte 500, in the file starting at byte 400; slots 20..24 are padding
    assert os.listdir(qdir) == [f"{400:020d}"]
    raw = cq_file(qdir, 400).read_bytes()
    assert raw[:100] == PRE_BLANK * 5
    assert PRE_BLANK == b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 8
    assert raw[100:120] == ENTRY.pack(1000, 50, 7)
    assert raw[120:] == b"\x00" * 80
    assert cq.min_offset_in_queue == 25
    assert cq.max_offset_in_queue == 26
    assert cq.entry(24) is None  # below the min offset: not readable
    entry = cq.entry(25)
    assert entry is not None and (entry.queue_offset, entry.commit_log_offset) == (25, 1000)
    assert cq.put_message_position_info(1050, 60, 8, 26)
    assert cq_file(qdir, 400).read_bytes()[120:140] == ENTRY.pack(1050, 60, 8)


def test_no_pre_blank_when_queue_starts_at_zero_or_file_boundary(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200, queue_id=1)
    assert cq.put_message_position_info(0, 50, 7, 20)  # logical 20 = first slot of file 400
    raw = cq_file(Path(cq.queue_dir), 400).read_bytes()
    assert raw[:20] == ENTRY.pack(0, 50, 7)
    assert cq.min_offset_in_queue == 20


# -- repeated builds ---------------------------------------------------------------------------------


def test_building_the_same_entries_twice_adds_nothing(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 15)
    qdir = Path(cq.queue_dir)
    before = {name: (qdir / name).read_bytes() for name in os.listdir(qdir)}
    for i in range(15):  # same records dispatched again: accepted, but no new entry
        assert cq.put_message_position_info(i * 100, 100, 1000 + i, i)
    assert cq.max_offset_in_queue == 15
    assert {name: (qdir / name).read_bytes() for name in os.listdir(qdir)} == before
    # an entry for a logical offset already written is not written again either
    assert cq.put_message_position_info(99_999, 100, 1, 12)
    assert cq.max_offset_in_queue == 15
    assert {name: (qdir / name).read_bytes() for name in os.listdir(qdir)} == before


def _open_store(root: Path, **overrides: object) -> DefaultMessageStore:
    return start_store(small_config(root, commit_log_size=SEG, cq_entries=10, **overrides))


@pytest.fixture
def stores() -> Iterator[list[DefaultMessageStore]]:
    opened: list[DefaultMessageStore] = []
    yield opened
    for s in opened:
        s.shutdown()


def put_msgs(store: DefaultMessageStore, n: int, topic: str = "abc", queue_id: int = 0) -> list[tuple[int, int]]:
    out = []
    for i in range(n):
        host = HostAddress("1050::5:600:300c:326b", 123) if i >= n // 2 else HostAddress("127.0.0.1", 0)
        r = store.put_message(Message(topic=topic, body=b"Once, there was a chance for me!", queue_id=queue_id,
                                      properties={"TAGS": "TAG1", "KEYS": str(time.time_ns()), "0": "imagoodperson0"},
                                      born_host=host, store_host=host))
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        out.append((r.append.wrote_offset, r.append.wrote_bytes))
    return out


def test_redispatching_every_record_is_idempotent(tmp_path: Path, stores: list[DefaultMessageStore]) -> None:
    store = _open_store(tmp_path / "s")
    stores.append(store)
    put_msgs(store, 40)
    assert store.reput_service.wait_caught_up(5)
    cq = store.get_consume_queue("abc", 0)
    assert cq is not None
    qdir = Path(cq.queue_dir)
    before = {n: (qdir / n).read_bytes() for n in sorted(os.listdir(qdir))}
    # dispatch the first record again, as RocketMQ's buildCQRepeatedly test does, then all of them
    entry0 = cq.entry(0)
    assert entry0 is not None
    first = store.look_message_by_offset(entry0.commit_log_offset)
    assert isinstance(first, StoredMessage)
    assert cq.put_message_position_info(first.physical_offset, first.total_size, java_hash("TAG1"),
                                        first.queue_offset)
    for entry in list(cq.iter_entries()):
        msg = store.look_message_by_offset(entry.commit_log_offset, entry.size)
        assert msg is not None
        assert cq.put_message_position_info(msg.physical_offset, msg.total_size, entry.tags_code, msg.queue_offset)
    assert cq.max_offset_in_queue == 40
    assert {n: (qdir / n).read_bytes() for n in sorted(os.listdir(qdir))} == before


def test_abnormal_restart_redispatch_leaves_no_duplicates(tmp_path: Path, stores: list[DefaultMessageStore]) -> None:
    root = tmp_path / "s"
    store = _open_store(root)
    put_msgs(store, 45)
    assert store.reput_service.wait_caught_up(5)
    store.shutdown()
    qdir = root / "consumequeue" / "abc" / "0"
    before = {n: (qdir / n).read_bytes() for n in sorted(os.listdir(qdir))}
    (root / "abort").touch()  # pretend a crash: recovery re-dispatches every record
    again = _open_store(root)
    stores.append(again)
    assert not again.last_exit_ok
    assert again.get_max_offset_in_queue("abc", 0) == 45
    assert {n: (qdir / n).read_bytes() for n in sorted(os.listdir(qdir))} == before


# -- multi-queue dispatch ----------------------------------------------------------------------------


def test_dispatch_to_many_topics_and_queues(tmp_path: Path, stores: list[DefaultMessageStore]) -> None:
    root = tmp_path / "s"
    store = _open_store(root)
    stores.append(store)
    expected: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for i in range(60):
        topic = ("abc", "xyz")[i % 2]
        qid = (i // 2) % 3
        tag = f"TAG{i % 4}"
        r = store.put_message(Message(topic=topic, body=b"m%d" % i, queue_id=qid, properties={"TAGS": tag}))
        assert r.append is not None
        assert r.append.logics_offset == len(expected.setdefault((topic, qid), []))
        expected[(topic, qid)].append((r.append.wrote_offset, r.append.wrote_bytes, tag))
    assert store.reput_service.wait_caught_up(5)
    assert sorted(os.listdir(root / "consumequeue")) == ["abc", "xyz"]
    for (topic, qid), records in expected.items():
        assert sorted(os.listdir(root / "consumequeue" / topic)) == ["0", "1", "2"]
        cq = store.get_consume_queue(topic, qid)
        assert cq is not None
        entries = list(cq.iter_entries())
        assert [(e.commit_log_offset, e.size, e.tags_code) for e in entries] == [
            (off, size, java_hash(tag)) for off, size, tag in records
        ]
        for e in entries:
            msg = store.look_message_by_offset(e.commit_log_offset, e.size)
            assert msg is not None
            assert (msg.topic, msg.queue_id, msg.queue_offset) == (topic, qid, e.queue_offset)


# -- recovery ------------------------------------------------------------------------------------------


def test_recover_stops_at_first_invalid_entry(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 35)  # files at bytes 0, 200, 400, 600 (10 entries each, the last one half full)
    qdir = Path(cq.queue_dir)
    cq.shutdown()
    # entry 24 gets size 0: invalid, recovery must end the queue there
    with open(cq_file(qdir, 400), "r+b") as f:
        f.seek(4 * 20)
        f.write(ENTRY.pack(2400, 0, 0))
    again = new_cq(200)
    again.recover()
    assert again.max_offset_in_queue == 24
    assert again.max_physic_offset == 2300 + 100  # end of the last valid entry's record
    assert not cq_file(qdir, 600).exists()  # files after the cut are deleted
    # the queue continues at the cut: entry 24 is written at byte 480
    assert again.put_message_position_info(2400, 100, 5, 24)
    assert read_entries(cq_file(qdir, 400))[4] == (2400, 100, 5)


def test_recover_treats_negative_offset_as_end(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 8)
    qdir = Path(cq.queue_dir)
    cq.shutdown()
    with open(cq_file(qdir, 0), "r+b") as f:
        f.seek(5 * 20)
        f.write(ENTRY.pack(-1, 100, 0))
    again = new_cq(200)
    again.recover()
    assert again.max_offset_in_queue == 5


def test_recover_scans_only_the_last_three_files(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 45)  # five files
    qdir = Path(cq.queue_dir)
    cq.shutdown()
    # damage in the first file is outside the scanned window, as in RocketMQ
    with open(cq_file(qdir, 0), "r+b") as f:
        f.seek(3 * 20)
        f.write(ENTRY.pack(0, 0, 0))
    again = new_cq(200)
    again.recover()
    assert again.max_offset_in_queue == 45
    assert again.max_physic_offset == 4500


def test_recover_full_last_file(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 30)  # exactly three full files
    again = reopen(cq, new_cq)
    assert again.max_offset_in_queue == 30
    assert again.put_message_position_info(3000, 100, 0, 30)  # rolls to a fourth file
    assert cq_file(Path(again.queue_dir), 600).exists()


# -- truncation ---------------------------------------------------------------------------------------


def test_truncate_dirty_logic_files(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 35)  # entry i -> CommitLog offset i*100, size 100
    qdir = Path(cq.queue_dir)
    cq.truncate_dirty_logic_files(1450)  # records at 1500.. are gone: entries 15.. must go
    assert cq.max_offset_in_queue == 15
    assert cq.max_physic_offset == 1500
    assert sorted(os.listdir(qdir)) == [f"{0:020d}", f"{200:020d}"]
    assert cq.entry(15) is None
    assert cq.put_message_position_info(1450, 80, 0, 15)  # the queue continues at 15
    assert read_entries(cq_file(qdir, 200))[5] == (1450, 80, 0)


def test_truncate_at_file_boundary_deletes_the_whole_file(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 25)
    cq.truncate_dirty_logic_files(2000)  # entry 20 is the first of file 400: that file goes
    assert cq.max_offset_in_queue == 20
    assert sorted(os.listdir(cq.queue_dir)) == [f"{0:020d}", f"{200:020d}"]
    cq.truncate_dirty_logic_files(0)
    assert cq.max_offset_in_queue == 0
    assert os.listdir(cq.queue_dir) == []


def test_truncate_keeps_everything_below(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 12)
    cq.truncate_dirty_logic_files(10**9)
    assert cq.max_offset_in_queue == 12
    assert cq.max_physic_offset == 1200


# -- min offset ---------------------------------------------------------------------------------------


def test_correct_min_offset(new_cq: Callable[..., ConsumeQueue]) -> None:
    cq = new_cq(200)
    fill(cq, 25)
    assert cq.min_offset_in_queue == 0
    cq.correct_min_offset(350)  # the first record at or past 350 is entry 4 (offset 400)
    assert cq.min_offset_in_queue == 4
    cq.correct_min_offset(400)
    assert cq.min_offset_in_queue == 4
    # deleting expired files: file 0 ends with entry 9 (offset 900) < 1250, file 200 does not
    assert cq.delete_expired_file(1250) == 1
    assert sorted(os.listdir(cq.queue_dir)) == [f"{200:020d}", f"{400:020d}"]
    assert cq.min_offset_in_queue == 13
    assert cq.max_offset_in_queue == 25


@pytest.mark.parametrize("entries_per_file", [200, 10])
def test_min_offset_corrected_after_segments_deleted_by_hand(
    tmp_path: Path, stores: list[DefaultMessageStore], entries_per_file: int
) -> None:
    root = tmp_path / "s"
    store = _open_store(root, mapped_file_size_consume_queue=20 * entries_per_file)
    puts = put_msgs(store, 120)
    assert store.reput_service.wait_caught_up(5)
    store.shutdown()
    segments = sorted(os.listdir(root / "commitlog"))
    assert len(segments) >= 4
    for name in segments[:2]:  # an operator removes the two oldest CommitLog segments
        os.unlink(root / "commitlog" / name)
    again = _open_store(root, mapped_file_size_consume_queue=20 * entries_per_file)
    stores.append(again)
    min_phy = int(segments[2])
    assert again.min_phy_offset == min_phy
    expected = next(i for i, (off, _) in enumerate(puts) if off >= min_phy)
    assert expected > entries_per_file or entries_per_file == 200
    if entries_per_file == 200:
        # load corrects the min offset within the first consume queue file, as RocketMQ does
        assert again.get_min_offset_in_queue("abc", 0) == expected
    # RocketMQ only looks inside the first file; with small files the consume queue cleanup
    # (every cleanResourceInterval) first drops files that point below the CommitLog
    again.config.update({"deleteConsumeQueueFilesInterval": "0"})
    again.clean_consume_queue_service.run()
    assert again.get_min_offset_in_queue("abc", 0) == expected
    assert again.get_max_offset_in_queue("abc", 0) == 120
    res = again.get_message("g", "abc", 0, 0, 32)
    assert (res.status.name, res.next_begin_offset) == ("OFFSET_TOO_SMALL", expected)
