"""Offline store tooling (rocketstore.store.offline): verify, stats and dump on stores the engine wrote.

Every store is written by the real engine in tmp_path with tiny files so that segments roll
(blank records), consume queues and index files span several files, and some hosts are IPv6.
Corruption is made the way it happens on disk: bytes flipped, a file cut short.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketstore.common.message import (
    HostAddress,
    Message,
    StoredMessage,
    SysFlag,
    decode_record,
    properties_to_string,
    record_length,
    with_host_flags,
)
from rocketstore.store.commit_log import MessageBatch
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import gets_consume_queue_entry
from rocketstore.store.index_file import index_entry_pos, index_key_hash
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.offline import VerifyProgress, dump_messages, store_stats, verify_store
from rocketstore.store.store_lock import StoreLock, StoreLockedError
from rocketstore.store.store_view import NotAStoreError

SEG = 4096
CQ_ENTRIES_PER_FILE = 8
SLOTS = 64
INDEX_NUM = 32  # 31 entries per index file
TOPICS = ("TopicA", "TopicB", "TopicC")
BASE_BORN = 1_700_000_000_000


def make_cfg(root: Path, **overrides: object) -> StoreConfig:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=20 * CQ_ENTRIES_PER_FILE,
        max_hash_slot_num=SLOTS,
        max_index_num=INDEX_NUM,
        delete_commit_log_files_interval=0,
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


@dataclass(frozen=True)
class Put:
    """What was put and where the engine said it went."""

    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    born_host: HostAddress
    store_host: HostAddress
    flag: int
    born_timestamp: int

    @property
    def keys(self) -> list[str]:
        return self.properties.get("KEYS", "").split()

    @property
    def index_keys(self) -> int:
        return len(self.keys) + (1 if "UNIQ_KEY" in self.properties else 0)


def message(i: int) -> Message:
    born = HostAddress("::1", 40000 + i) if i % 4 == 0 else HostAddress("10.0.0.5", 50000)
    store_host = HostAddress("fe80::1", 10911) if i % 7 == 0 else HostAddress("192.168.1.2", 10911)
    return Message(
        topic=TOPICS[i % 3],
        body=f"body-{i:04d}-".encode() + b"x" * (i * 7 % 120),
        queue_id=(i // 3) % 2,
        flag=i % 3,
        properties={"TAGS": f"tag{i % 5}", "KEYS": f"order-{i} customer-{i % 10}", "UNIQ_KEY": f"UNIQ{i:06d}"},
        born_timestamp=BASE_BORN + i,
        born_host=born,
        store_host=store_host,
    )


def put_all(store: DefaultMessageStore, count: int, start: int = 0) -> list[Put]:
    puts = []
    for i in range(start, start + count):
        msg = message(i)
        r = store.put_message(msg)
        assert r.ok and r.append is not None, r.status
        puts.append(Put(msg.topic, msg.queue_id, r.append.logics_offset, r.append.wrote_offset,
                        r.append.wrote_bytes, msg.body, dict(msg.properties), msg.born_host, msg.store_host,
                        msg.flag, msg.born_timestamp))
    return puts


def put_batch(store: DefaultMessageStore) -> list[Put]:
    """A SEND_BATCH_MESSAGE of three items in TopicA queue 1: consecutive records, one put."""
    items = [(f"batch-{n}".encode(), 0, properties_to_string({"KEYS": f"batch-key-{n}"})) for n in range(3)]
    born, host = HostAddress("10.0.0.9", 1234), HostAddress("192.168.1.2", 10911)
    batch = MessageBatch(topic="TopicA", queue_id=1, items=items, properties={}, born_timestamp=BASE_BORN,
                         born_host=born, store_host=host)
    r = store.put_messages(batch)
    assert r.ok and r.append is not None, r.status
    sys_flag = with_host_flags(0, born, host)
    puts, offset = [], r.append.wrote_offset
    for n, (body, flag, props) in enumerate(items):
        size = record_length(sys_flag, len(body), len("TopicA"), len(props.encode()))
        puts.append(Put("TopicA", 1, r.append.logics_offset + n, offset, size, body,
                        {"KEYS": f"batch-key-{n}"}, born, host, flag, BASE_BORN))
        offset += size
    assert offset == r.append.wrote_offset + r.append.wrote_bytes
    return puts


def write_store(root: Path, count: int = 90) -> tuple[StoreConfig, list[Put]]:
    cfg = make_cfg(root)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        puts = put_all(store, count // 2) + put_batch(store) + put_all(store, count - count // 2, count // 2)
        assert store.reput_service.wait_caught_up(5)
    finally:
        store.shutdown()
    return cfg, puts


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Put]]:
    root = tmp_path_factory.mktemp("pristine") / "store"
    return root, write_store(root)[1]


@pytest.fixture
def written(pristine: tuple[Path, list[Put]], tmp_path: Path) -> tuple[StoreConfig, list[Put]]:
    """A private copy of one store written by the engine (tests damage their copy)."""
    root, puts = pristine
    shutil.copytree(root, tmp_path / "store")
    return make_cfg(tmp_path / "store"), puts


def segment_path(cfg: StoreConfig, offset: int) -> Path:
    return cfg.commit_log_dir() / f"{offset - offset % SEG:020d}"


def flip_byte(path: Path, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(1)
        f.seek(pos)
        f.write(bytes([old[0] ^ 0xFF]))


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out[p] = (st.st_size, st.st_mtime_ns, hashlib.sha256(Path(p).read_bytes()).hexdigest())
    return out


# -- a clean store ----------------------------------------------------------------------------
def test_verify_clean_store_counts_everything(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    segments = sorted(os.listdir(cfg.commit_log_dir()))
    assert len({p.offset // SEG for p in puts}) >= 4, "the fixture must roll several segments"
    assert len(os.listdir(cfg.index_dir())) >= 4, "the fixture must roll several index files"
    assert len(os.listdir(cfg.consume_queue_dir() / "TopicA" / "1")) >= 2

    report = verify_store(cfg)

    assert report.problems == []
    assert report.ok
    assert report.records == len(puts)
    assert report.consume_queue_entries == len(puts)
    assert report.index_entries == sum(p.index_keys for p in puts)
    assert report.blank_records == len({p.offset // SEG for p in puts}) - 1
    assert report.expired_references == 0
    assert report.commit_log_min_offset == 0
    assert report.commit_log_max_offset == max(p.offset + p.size for p in puts)
    assert len(segments) >= len({p.offset // SEG for p in puts})


def test_offline_tools_change_nothing(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, _ = written
    root = cfg.root_dir()
    before = snapshot(root)
    verify_store(cfg)
    store_stats(cfg)
    assert len(list(dump_messages(cfg))) > 0
    assert snapshot(root) == before
    assert not cfg.abort_path().exists()


def test_verify_and_stats_beside_a_running_store(tmp_path: Path) -> None:
    """No lock taken: a running store holds it, and verify still works (and leaves it held)."""
    cfg = make_cfg(tmp_path / "store")
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        puts = put_all(store, 20)
        assert store.reput_service.wait_caught_up(5)
        report = verify_store(cfg)
        assert report.ok, report.problems
        assert report.records == len(puts)
        assert any("abort file present" in note for note in report.notes)
        assert store_stats(cfg)["last_shutdown_abnormal"] is True
        with pytest.raises(StoreLockedError):
            StoreLock(str(cfg.lock_path())).acquire()
    finally:
        store.shutdown()
    assert store_stats(cfg)["last_shutdown_abnormal"] is False
    assert verify_store(cfg).notes == []


# -- stats ------------------------------------------------------------------------------------
def test_stats_match_what_was_put(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    stats = store_stats(cfg)

    cl = stats["commit_log"]
    names = sorted(os.listdir(cfg.commit_log_dir()))
    assert [s["name"] for s in cl["segments"]] == names
    assert all(s["size"] == SEG for s in cl["segments"])
    assert [s["from_offset"] for s in cl["segments"]] == [int(n) for n in names]
    data_segments = {p.offset // SEG for p in puts}
    assert [s["has_data"] for s in cl["segments"]] == [int(n) // SEG in data_segments for n in names]
    assert cl["segment_size"] == cl["segment_size_on_disk"] == SEG
    assert cl["min_offset"] == 0
    assert cl["max_offset"] == max(p.offset + p.size for p in puts)

    expected: dict[tuple[str, int], int] = {}
    for p in puts:
        expected[(p.topic, p.queue_id)] = expected.get((p.topic, p.queue_id), 0) + 1
    got = {(q["topic"], q["queue_id"]): q for q in stats["queues"]}
    assert set(got) == set(expected)
    for key, count in expected.items():
        q = got[key]
        assert (q["min_offset"], q["max_offset"], q["message_count"]) == (0, count, count)
        mine = [p for p in puts if (p.topic, p.queue_id) == key]
        assert q["min_commit_log_offset"] == mine[0].offset
        assert q["max_commit_log_offset"] == mine[-1].offset
        assert q["files"] == -(-count // CQ_ENTRIES_PER_FILE)
    for topic in TOPICS:
        assert stats["topics"][topic] == {
            "queues": 2, "message_count": sum(1 for p in puts if p.topic == topic)}

    index_files = stats["index_files"]
    assert [f["name"] for f in index_files] == sorted(os.listdir(cfg.index_dir()))
    assert sum(f["entries"] for f in index_files) == sum(p.index_keys for p in puts)
    assert all(f["entries"] == INDEX_NUM - 1 for f in index_files[:-1])
    assert index_files[0]["begin_phy_offset"] == 0
    assert index_files[-1]["end_phy_offset"] == puts[-1].offset
    assert all(f["begin_timestamp"] <= f["end_timestamp"] for f in index_files)
    assert all(a["end_timestamp"] <= b["begin_timestamp"] for a, b in itertools.pairwise(index_files))

    cp = stats["checkpoint"]
    assert cp["physic_msg_timestamp"] >= index_files[-1]["end_timestamp"] > 0
    assert cp["logics_msg_timestamp"] >= index_files[-1]["end_timestamp"]

    disk = stats["disk_usage"]
    assert disk["commitlog"]["apparent_bytes"] == SEG * len(names)
    assert disk["commitlog"]["files"] == len(names)
    assert disk["consumequeue"]["files"] == sum(q["files"] for q in stats["queues"])
    assert disk["index"]["files"] == len(index_files)
    assert disk["total"]["apparent_bytes"] >= sum(disk[d]["apparent_bytes"] for d in ("commitlog", "index"))
    assert stats["abort_present"] is False and stats["last_shutdown_abnormal"] is False


# -- dump -------------------------------------------------------------------------------------
def test_dump_returns_every_record_with_every_field(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    dumped = list(dump_messages(cfg))
    assert [m.physical_offset for m in dumped] == [p.offset for p in puts]
    for m, p in zip(dumped, puts, strict=True):
        assert (m.topic, m.queue_id, m.queue_offset, m.total_size) == (p.topic, p.queue_id, p.queue_offset, p.size)
        assert m.body == p.body
        assert m.flag == p.flag and m.born_timestamp == p.born_timestamp
        assert m.born_host == p.born_host and m.store_host == p.store_host
        for name, value in p.properties.items():
            assert m.properties[name] == value
        assert len(m.msg_id) == (56 if p.store_host.is_v6 else 32)
    assert any(m.born_host.is_v6 for m in dumped) and any(m.store_host.is_v6 for m in dumped)


def test_dump_filters(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written

    def offsets(**filters: object) -> list[int]:
        return [m.physical_offset for m in dump_messages(cfg, **filters)]  # type: ignore[arg-type]

    assert offsets(topic="TopicB") == [p.offset for p in puts if p.topic == "TopicB"]
    assert offsets(topic="TopicA", queue_id=1) == [p.offset for p in puts if (p.topic, p.queue_id) == ("TopicA", 1)]
    assert offsets(queue_id=0) == [p.offset for p in puts if p.queue_id == 0]
    assert offsets(start_offset=puts[10].offset, end_offset=puts[20].offset) == [p.offset for p in puts[10:20]]
    assert offsets(start_offset=puts[10].offset + 1) == [p.offset for p in puts[11:]]
    assert offsets(end_offset=puts[0].offset + 1) == [0]
    assert offsets(key="order-7") == [p.offset for p in puts if "order-7" in p.keys]
    assert offsets(key="customer-3") == [p.offset for p in puts if "customer-3" in p.keys]
    assert len(offsets(key="customer-3")) > 1
    assert offsets(key="UNIQ000012") == [p.offset for p in puts if p.properties.get("UNIQ_KEY") == "UNIQ000012"]
    assert offsets(key="batch-key-1") == [p.offset for p in puts if "batch-key-1" in p.keys]
    assert offsets(topic="TopicB", key="customer-3") == [
        p.offset for p in puts if p.topic == "TopicB" and "customer-3" in p.keys]
    assert offsets(key="order-") == []
    assert offsets(topic="NoSuchTopic") == []


# -- not a store ------------------------------------------------------------------------------
def test_missing_and_non_store_directories_are_refused(tmp_path: Path) -> None:
    missing = make_cfg(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("hello")
    plain = make_cfg(tmp_path / "plain")
    for cfg, text in ((missing, "does not exist"), (plain, "is not a store directory")):
        with pytest.raises(NotAStoreError, match=text):
            verify_store(cfg)
        with pytest.raises(NotAStoreError, match=text):
            store_stats(cfg)
        with pytest.raises(NotAStoreError, match=text):
            dump_messages(cfg)  # refused at the call, before any iteration


def test_empty_store_is_clean(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path / "store")
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    store.shutdown()
    report = verify_store(cfg)
    assert report.ok and report.records == 0 and report.consume_queue_entries == 0
    stats = store_stats(cfg)
    assert stats["commit_log"]["segments"] == [] and stats["commit_log"]["min_offset"] == -1
    assert stats["queues"] == [] and list(dump_messages(cfg)) == []


# -- corruption -------------------------------------------------------------------------------
def test_verify_reports_a_flipped_body_byte(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    victim = next(p for p in puts if p.offset // SEG == 2 and p.offset % SEG > 0)
    seg = segment_path(cfg, victim.offset)
    pos = victim.offset % SEG
    body_pos = seg.read_bytes().index(victim.body, pos)
    assert pos < body_pos < pos + victim.size
    flip_byte(seg, body_pos + 3)

    report = verify_store(cfg)

    assert not report.ok
    assert report.records == len(puts) - 1
    walk = [p for p in report.problems if p.startswith("commitlog/")]
    assert len(walk) == 1
    assert walk[0].startswith(f"commitlog/{seg.name} position {pos} (offset {victim.offset}): body CRC mismatch")
    cq = [p for p in report.problems if p.startswith("consumequeue/")]
    assert len(cq) == 1 and f"the record at offset {victim.offset}, whose body CRC fails" in cq[0]
    assert f"/{victim.topic}/{victim.queue_id}/" in cq[0] and f"(queue offset {victim.queue_offset})" in cq[0]
    idx = [p for p in report.problems if p.startswith("index/")]
    assert len(idx) == victim.index_keys
    # the walk went on past the damaged record: everything after it was still checked
    assert report.consume_queue_entries == len(puts)
    # dump still shows the damaged record, with the damage
    (dumped,) = dump_messages(cfg, start_offset=victim.offset, end_offset=victim.offset + 1)
    assert dumped.body != victim.body and len(dumped.body) == len(victim.body)


def test_verify_reports_a_consume_queue_entry_with_a_wrong_size(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    victim = [p for p in puts if (p.topic, p.queue_id) == ("TopicB", 1)][9]
    file_start = victim.queue_offset // CQ_ENTRIES_PER_FILE * CQ_ENTRIES_PER_FILE * 20
    cq_file = cfg.consume_queue_dir() / "TopicB" / "1" / f"{file_start:020d}"
    entry_pos = victim.queue_offset * 20 - file_start
    with open(cq_file, "r+b") as f:
        f.seek(entry_pos)
        offset, size, _tags = struct.unpack(">qiq", f.read(20))
        assert (offset, size) == (victim.offset, victim.size)
        f.seek(entry_pos + 8)
        f.write(struct.pack(">i", size + 16))

    report = verify_store(cfg)

    assert report.problems == [
        f"consumequeue/TopicB/1/{file_start:020d} position {entry_pos} (queue offset {victim.queue_offset}): "
        f"the record at offset {victim.offset} has size {victim.size}, the entry says {victim.size + 16}"
    ]


def test_verify_reports_a_truncated_last_segment(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    last = puts[-1]
    seg = segment_path(cfg, last.offset)
    pos = last.offset % SEG
    os.truncate(seg, pos + 50)  # the last record loses all but 50 bytes

    report = verify_store(cfg)

    assert not report.ok
    assert f"commitlog/{seg.name}: file is {pos + 50} bytes, expected {SEG} (mappedFileSizeCommitLog): truncated" \
        in report.problems
    cut = [p for p in report.problems if p.startswith(f"commitlog/{seg.name} position {pos} (offset {last.offset}):")]
    assert len(cut) == 1 and "runs past the data" in cut[0]
    assert report.records == len(puts) - 1
    assert report.commit_log_max_offset == last.offset
    # the consume queue entry and the index entries of the lost record point past the end now
    past_end = [p for p in report.problems if f"points at offset {last.offset}, past the end" in p]
    assert len(past_end) == 1 + last.index_keys


def test_verify_reports_garbage_after_the_last_record(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    last = puts[-1]
    seg = segment_path(cfg, last.offset)
    end = last.offset % SEG + last.size
    with open(seg, "r+b") as f:  # a torn write: a header of a record that never completed
        f.seek(end)
        f.write(struct.pack(">ii", 300, -626843481) + b"\x01" * 20)

    report = verify_store(cfg)

    assert len(report.problems) == 1
    assert report.problems[0].startswith(f"commitlog/{seg.name} position {end} (offset {last.offset + last.size}): ")
    assert "recovery would cut the CommitLog here" in report.problems[0]
    assert report.records == len(puts)


def test_verify_reports_a_record_whose_queue_offset_skips(written: tuple[StoreConfig, list[Put]]) -> None:
    """queueOffset is outside the body CRC: only the cross-checks can catch it."""
    cfg, puts = written
    queue = [p for p in puts if (p.topic, p.queue_id) == ("TopicC", 0)]
    victim = queue[5]
    seg = segment_path(cfg, victim.offset)
    with open(seg, "r+b") as f:
        f.seek(victim.offset % SEG + 20)
        f.write(struct.pack(">q", victim.queue_offset + 100))

    report = verify_store(cfg)

    where = f"commitlog/{seg.name} position {victim.offset % SEG} (offset {victim.offset})"
    assert (f"{where}: TopicC queue 0: queue offset {victim.queue_offset + 100} does not follow 4 "
            f"(record at offset {queue[4].offset}); expected 5") in report.problems
    assert any(p.startswith("consumequeue/TopicC/0/") and f"queueOffset {victim.queue_offset + 100}, expected 5" in p
               for p in report.problems)


def test_verify_reports_an_index_entry_with_a_foreign_key_hash(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    first_index = cfg.index_dir() / sorted(os.listdir(cfg.index_dir()))[0]
    n = 5
    pos = index_entry_pos(SLOTS, n)
    with open(first_index, "r+b") as f:
        f.seek(pos)
        key_hash, phy = struct.unpack(">iq", f.read(12))
        f.seek(pos)
        f.write(struct.pack(">i", index_key_hash("TopicA#nobody")))
    record = next(p for p in puts if p.offset == phy)
    assert key_hash in {index_key_hash(f"{record.topic}#{k}") for k in [*record.keys, record.properties["UNIQ_KEY"]]}

    report = verify_store(cfg)

    assert not report.ok
    where = f"index/{first_index.name} entry {n} (position {pos})"
    mismatch = [p for p in report.problems if p.startswith(f"{where}: keyHash {index_key_hash('TopicA#nobody')} "
                                                           f"matches none of the keys of the record at offset {phy}")]
    assert len(mismatch) == 1 and f"'{record.topic}#{record.properties['UNIQ_KEY']}'" in mismatch[0]


def test_verify_reports_a_record_missing_from_its_consume_queue(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    queue = [p for p in puts if (p.topic, p.queue_id) == ("TopicA", 0)]
    victim = queue[-1]
    file_start = victim.queue_offset // CQ_ENTRIES_PER_FILE * CQ_ENTRIES_PER_FILE * 20
    with open(cfg.consume_queue_dir() / "TopicA" / "0" / f"{file_start:020d}", "r+b") as f:
        f.seek(victim.queue_offset * 20 - file_start)
        f.write(b"\x00" * 20)  # as if dispatch never wrote the last entry

    report = verify_store(cfg)

    assert report.problems == [
        f"consumequeue/TopicA/0: ends at queue offset {victim.queue_offset}, but the CommitLog holds the record with "
        f"queue offset {victim.queue_offset} at offset {victim.offset} (not dispatched)"
    ]


def test_deleted_data_is_not_a_problem(tmp_path: Path) -> None:
    """Retention deletes old segments; entries still pointing below the new min are counted, not reported."""
    cfg, puts = write_store(tmp_path / "store")
    store = DefaultMessageStore(make_cfg(tmp_path / "store", file_reserved_time=0))
    store.load()
    store.start()
    try:
        store.execute_delete_files_manually()
        assert store.clean_commit_log_service.run() > 0
        store.clean_consume_queue_service.run()
        new_min = store.min_phy_offset
    finally:
        store.shutdown()
    assert new_min > 0
    kept = [p for p in puts if p.offset >= new_min]

    report = verify_store(cfg)

    assert report.problems == []
    assert report.records == len(kept)
    assert report.commit_log_min_offset == new_min
    assert report.expired_references > 0
    stats = store_stats(cfg)
    assert stats["commit_log"]["min_offset"] == new_min
    for q in stats["queues"]:
        mine = [p for p in kept if (p.topic, p.queue_id) == (q["topic"], q["queue_id"])]
        assert q["min_offset"] == (mine[0].queue_offset if mine else q["max_offset"])
        assert q["message_count"] == len(mine)
    assert [m.physical_offset for m in dump_messages(cfg)] == [p.offset for p in kept]


def test_verify_with_the_wrong_segment_size_says_so_once(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, puts = written
    wrong = make_cfg(cfg.root_dir(), mapped_file_size_commit_log=1024 * 1024)
    report = verify_store(wrong)
    assert len(report.problems) == 1
    assert report.problems[0].startswith(f"commitlog: all {len(os.listdir(cfg.commit_log_dir()))} segments are "
                                         f"{SEG} bytes, but mappedFileSizeCommitLog is {1024 * 1024}")
    assert report.records == len(puts)  # still checked, as the segments on disk are


# -- progress ---------------------------------------------------------------------------------
def test_verify_reports_each_file_to_its_progress_callback(written: tuple[StoreConfig, list[Put]]) -> None:
    cfg, _puts = written
    seen: list[VerifyProgress] = []
    report = verify_store(cfg, seen.append)
    assert report.ok
    segments = sorted(os.listdir(cfg.commit_log_dir()))
    queues = sorted(f"{t}/{q}" for t in os.listdir(cfg.consume_queue_dir())
                    for q in os.listdir(cfg.consume_queue_dir() / t))
    assert [(p.item, p.done, p.total) for p in seen if p.part == "commitlog"] == [
        (name, n, len(segments)) for n, name in enumerate(segments, start=1)]
    assert sorted(p.item for p in seen if p.part == "consumequeue") == queues
    assert [p.item for p in seen if p.part == "index"] == sorted(os.listdir(cfg.index_dir()))
    assert [p.elapsed for p in seen] == sorted(p.elapsed for p in seen)


def test_store_verify_prints_progress_on_stderr_while_it_runs(tmp_path: Path) -> None:
    """The CLI, a real process: one stderr line per segment as the walk goes, not only at the end."""
    cfg = make_cfg(tmp_path / "store")
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        put_all(store, 1500)  # ~40 segments: verifying the rest takes far longer than reading a line
        assert store.reput_service.wait_caught_up(10)
    finally:
        store.shutdown()
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={cfg.root_dir()}\nmappedFileSizeCommitLog={SEG}\n"
                    f"mappedFileSizeConsumeQueue={20 * CQ_ENTRIES_PER_FILE}\nmaxHashSlotNum={SLOTS}\n"
                    f"maxIndexNum={INDEX_NUM}\n")
    segments = sorted(os.listdir(cfg.commit_log_dir()))
    assert len(segments) > 10

    proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli.main", "store", "verify", "-c", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    running_at_first_line = proc.poll() is None
    # read on through the same buffered stream: communicate() would skip what readline() buffered
    rest = proc.stderr.read()
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=120)
    lines = [first, *rest.splitlines(keepends=True)]

    assert proc.returncode == 0, out + "".join(lines)
    assert first.startswith(f"verify: segment {segments[0]} checked (1/{len(segments)}), ")
    assert running_at_first_line, "the first progress line came only after verify had finished"
    named = [line.split()[2] for line in lines if line.startswith("verify: segment ")]
    assert named == segments
    assert any(line.startswith("verify: index file ") for line in lines)
    assert out.startswith(f"{cfg.root_dir()}: OK (1500 records")


# -- transactions -----------------------------------------------------------------------------
def test_only_plain_and_committed_records_get_consume_queue_entries(tmp_path: Path) -> None:
    """One rule for dispatch and verify: prepared halves and rollback markers take no queue offset."""
    kinds = [0, SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_COMMIT, SysFlag.TRANSACTION_ROLLBACK, 0]
    assert [gets_consume_queue_entry(k | SysFlag.MULTI_TAGS) for k in kinds] == [True, False, True, False, True]
    cfg = make_cfg(tmp_path / "store")
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        for n, kind in enumerate(kinds):
            r = store.put_message(Message(topic="TxTopic", body=f"tx-{n}".encode(), queue_id=0, sys_flag=kind,
                                          properties={"UNIQ_KEY": f"TX{n}"}))
            assert r.ok, r.status
        assert store.reput_service.wait_caught_up(5)
        raw = store.get_message("g", "TxTopic", 0, 0, 32).messages
        queued = [m.body for m in (decode_record(r, 0, check_crc=True) for r in raw) if isinstance(m, StoredMessage)]
    finally:
        store.shutdown()
    assert queued == [b"tx-0", b"tx-2", b"tx-4"] and len(raw) == 3

    report = verify_store(cfg)
    assert report.problems == [], report.problems
    assert report.records == len(kinds) and report.consume_queue_entries == 3
