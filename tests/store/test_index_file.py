"""IndexFile / IndexService: RocketMQ's IndexFileTest plus layout, roll, recovery and cleanup."""

from __future__ import annotations

import datetime
import os
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.common.message import SysFlag, java_string_hash
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.dispatch_request import DispatchRequest
from rocketstore.store.index_file import (
    DEFAULT_HASH_SLOT_NUM,
    DEFAULT_INDEX_NUM,
    HASH_SLOT_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SIZE,
    IndexFile,
    IndexService,
    build_key,
    index_file_size,
    index_key_hash,
    time_millis_to_human_string,
)

BASE_TS = 1_700_000_000_000
JAVA_LONG_MAX = 2**63 - 1

HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
SLOT = struct.Struct(">i")


def entry_pos(hash_slot_num: int, n: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + n * INDEX_SIZE


def slot_pos(hash_slot_num: int, key: str) -> int:
    return INDEX_HEADER_SIZE + (index_key_hash(key) % hash_slot_num) * HASH_SLOT_SIZE


def request(
    offset: int,
    ts: int,
    keys: str = "",
    uniq_key: str | None = None,
    topic: str = "T",
    sys_flag: int = 0,
) -> DispatchRequest:
    return DispatchRequest(
        topic=topic,
        queue_id=0,
        commit_log_offset=offset,
        msg_size=100,
        tags_code=0,
        store_timestamp=ts,
        consume_queue_offset=0,
        keys=keys,
        uniq_key=uniq_key,
        sys_flag=sys_flag,
        prepared_transaction_offset=0,
        properties={},
    )


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[StoreCheckpoint]:
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    yield cp
    cp.shutdown()


def make_service(
    tmp_path: Path,
    checkpoint: StoreCheckpoint,
    index_num: int = 4,
    message_index_enable: bool = True,
    max_msgs_num_batch: int = 64,
) -> IndexService:
    return IndexService(
        str(tmp_path / "index"), 4, index_num, checkpoint, message_index_enable, max_msgs_num_batch
    )


# -- RocketMQ's IndexFileTest -------------------------------------------------------------------


def test_put_key_capacity_is_index_num_minus_one(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "100"), 100, 400)
    now = int(time.time() * 1000)
    for i in range(399):
        assert f.put_key(str(i), i, now)
    assert f.is_write_full
    assert not f.put_key("400", 400, now)
    assert f.index_count == 400
    assert f.destroy(0)
    assert not (tmp_path / "100").exists()


def test_select_phy_offset(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "200"), 100, 400)
    now = int(time.time() * 1000)
    for i in range(399):
        assert f.put_key(str(i), i, now)
    assert not f.put_key("400", 400, now)
    assert f.select_phy_offsets("60", 10, 0, JAVA_LONG_MAX) == [60]
    for i in (0, 1, 99, 398):
        assert f.select_phy_offsets(str(i), 10, 0, JAVA_LONG_MAX) == [i]
    assert f.select_phy_offsets("never-put", 10, 0, JAVA_LONG_MAX) == []
    f.destroy(0)


# -- Java String.hashCode and slots -------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "java_hash"),
    [("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112), ("polygenelubricants", -(2**31))],
)
def test_java_hash_values(key: str, java_hash: int) -> None:
    assert java_string_hash(key) == java_hash


def test_min_value_hash_goes_to_slot_zero(tmp_path: Path) -> None:
    # Math.abs(Integer.MIN_VALUE) is still negative in Java; RocketMQ maps it to 0.
    assert index_key_hash("polygenelubricants") == 0
    f = IndexFile(str(tmp_path / "1"), 7, 10)
    assert f.put_key("polygenelubricants", 42, BASE_TS)
    buf = (tmp_path / "1").read_bytes()
    assert SLOT.unpack_from(buf, INDEX_HEADER_SIZE)[0] == 1
    assert ENTRY.unpack_from(buf, entry_pos(7, 1)) == (0, 42, 0, 0)
    assert f.select_phy_offsets("polygenelubricants", 5, 0, JAVA_LONG_MAX) == [42]
    f.close()


def test_hash_collision_chain(tmp_path: Path) -> None:
    # "Aa" and "BB" share hash 2112: both land in one chain and, since the index only stores
    # hashes, a lookup of either returns both offsets. Telling them apart is the caller's job
    # (it re-reads the records and compares keys), as in RocketMQ's queryMessage.
    f = IndexFile(str(tmp_path / "1"), 16, 10)
    assert f.put_key("Aa", 100, BASE_TS)
    assert f.put_key("BB", 200, BASE_TS)
    assert f.hash_slot_count == 1
    buf = (tmp_path / "1").read_bytes()
    assert SLOT.unpack_from(buf, slot_pos(16, "Aa"))[0] == 2
    assert ENTRY.unpack_from(buf, entry_pos(16, 1)) == (2112, 100, 0, 0)
    assert ENTRY.unpack_from(buf, entry_pos(16, 2)) == (2112, 200, 0, 1)
    assert f.select_phy_offsets("Aa", 10, 0, JAVA_LONG_MAX) == [200, 100]
    assert f.select_phy_offsets("BB", 1, 0, JAVA_LONG_MAX) == [200]
    # a key in the same slot with a different hash joins the chain but is filtered out
    other = next(k for k in (f"k{i}" for i in range(10_000)) if index_key_hash(k) % 16 == 2112 % 16
                 and index_key_hash(k) != 2112)
    assert f.put_key(other, 300, BASE_TS)
    assert f.select_phy_offsets("Aa", 10, 0, JAVA_LONG_MAX) == [200, 100]
    assert f.select_phy_offsets(other, 10, 0, JAVA_LONG_MAX) == [300]
    f.close()


# -- exact bytes --------------------------------------------------------------------------------


def test_exact_bytes_after_two_puts(tmp_path: Path) -> None:
    path = tmp_path / "20240101000000000"
    f = IndexFile(str(path), 8, 16)
    assert path.stat().st_size == 40 + 8 * 4 + 16 * 20
    # a fresh file is all zeros: indexCount is 1 in memory but not yet written
    assert HEADER.unpack_from(path.read_bytes(), 0) == (0, 0, 0, 0, 0, 0)

    assert f.put_key("a", 1000, BASE_TS)  # hash 97 -> slot 1
    assert f.put_key("b", 2345, BASE_TS + 2999)  # hash 98 -> slot 2, timeDiff 2 s (truncated)
    buf = path.read_bytes()
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = HEADER.unpack_from(buf, 0)
    assert begin_ts == BASE_TS
    assert end_ts == BASE_TS + 2999
    assert begin_phy == 1000
    assert end_phy == 2345
    assert slot_count == 2
    assert index_count == 3
    assert [SLOT.unpack_from(buf, INDEX_HEADER_SIZE + 4 * i)[0] for i in range(8)] == [0, 1, 2, 0, 0, 0, 0, 0]
    assert buf[entry_pos(8, 0) : entry_pos(8, 1)] == bytes(20)  # entry 0 is never used
    key_hash, phy, diff, prev = ENTRY.unpack_from(buf, entry_pos(8, 1))
    assert (key_hash, phy, diff, prev) == (97, 1000, 0, 0)
    raw_entry = bytes.fromhex("00000061 00000000000003e8 00000000 00000000")
    assert buf[entry_pos(8, 1) : entry_pos(8, 2)] == raw_entry
    key_hash, phy, diff, prev = ENTRY.unpack_from(buf, entry_pos(8, 2))
    assert (key_hash, phy, diff, prev) == (98, 2345, 2, 0)
    assert buf[entry_pos(8, 3) :] == bytes(len(buf) - entry_pos(8, 3))
    f.close()

    # reloading reads the header back
    g = IndexFile(str(path), 8, 16, create=False)
    assert (g.begin_timestamp, g.end_timestamp, g.begin_phy_offset, g.end_phy_offset) == (
        BASE_TS, BASE_TS + 2999, 1000, 2345,
    )
    assert (g.hash_slot_count, g.index_count) == (2, 3)
    assert g.select_phy_offsets("b", 5, 0, JAVA_LONG_MAX) == [2345]
    g.close()


def test_flush_writes_header_and_new_file_continues_from_predecessor(tmp_path: Path) -> None:
    path = tmp_path / "1"
    f = IndexFile(str(path), 4, 8, 5000, BASE_TS)
    # RocketMQ writes the inherited begin/end values at once, indexCount only on first put/flush
    assert HEADER.unpack_from(path.read_bytes(), 0) == (BASE_TS, BASE_TS, 5000, 5000, 0, 0)
    f.flush()
    assert HEADER.unpack_from(path.read_bytes(), 0) == (BASE_TS, BASE_TS, 5000, 5000, 0, 1)
    # the first put computes timeDiff against the inherited begin, then resets begin to its own
    # store time: RocketMQ's quirk, reproduced so the bytes match
    assert f.put_key("x", 6000, BASE_TS + 3000)
    buf = path.read_bytes()
    assert HEADER.unpack_from(buf, 0) == (BASE_TS + 3000, BASE_TS + 3000, 6000, 6000, 1, 2)
    assert ENTRY.unpack_from(buf, entry_pos(4, 1))[2] == 3
    f.close()


def test_time_diff_clamped(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "1"), 4, 8)
    assert f.put_key("a", 1, BASE_TS)
    assert f.put_key("b", 2, BASE_TS - 5000)  # earlier than begin -> 0
    assert f.put_key("c", 3, BASE_TS + (2**31 + 10) * 1000)  # beyond int range -> Integer.MAX_VALUE
    buf = (tmp_path / "1").read_bytes()
    assert ENTRY.unpack_from(buf, entry_pos(4, 2))[2] == 0
    assert ENTRY.unpack_from(buf, entry_pos(4, 3))[2] == 2**31 - 1
    f.close()


def test_select_time_window(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "1"), 4, 16)
    for i in range(5):
        assert f.put_key("k", i, BASE_TS + i * 1000)
    assert f.select_phy_offsets("k", 10, BASE_TS + 1000, BASE_TS + 3000) == [3, 2, 1]
    assert f.select_phy_offsets("k", 2, 0, JAVA_LONG_MAX) == [4, 3]
    acc = [99]
    assert f.select_phy_offsets("k", 3, 0, JAVA_LONG_MAX, into=acc) is acc
    assert acc == [99, 4, 3]
    assert f.is_time_matched(BASE_TS - 10, BASE_TS + 10_000)
    assert f.is_time_matched(BASE_TS + 500, BASE_TS + 600)
    assert f.is_time_matched(0, BASE_TS)
    assert not f.is_time_matched(0, BASE_TS - 1)
    assert not f.is_time_matched(BASE_TS + 4001, JAVA_LONG_MAX)
    f.close()


def test_default_size_file_is_sparse(tmp_path: Path) -> None:
    assert index_file_size(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM) == 420_000_040
    started = time.monotonic()
    f = IndexFile(str(tmp_path / "20240101000000000"), DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM)
    assert f.put_key("T#key", 123, BASE_TS)
    assert f.select_phy_offsets("T#key", 32, 0, JAVA_LONG_MAX) == [123]
    st = os.stat(f.path)
    assert st.st_size == 420_000_040
    assert st.st_blocks * 512 < 16 * 1024 * 1024
    assert f.destroy(0)
    assert time.monotonic() - started < 5


def test_time_millis_to_human_string() -> None:
    ms = 1_700_000_123_456
    expected = datetime.datetime.fromtimestamp(ms // 1000).strftime("%Y%m%d%H%M%S") + "456"
    assert time_millis_to_human_string(ms) == expected
    assert len(expected) == 17


# -- IndexService -------------------------------------------------------------------------------


def fill(service: IndexService, count: int, key: str = "K") -> None:
    for i in range(count):
        service.build_index(request(i * 100, BASE_TS + i * 1000, keys=key))


def test_roll_and_query_across_files(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=4)  # 3 entries per file
    fill(service, 9)
    files = service.files
    assert len(files) == 3
    assert [f.file_name for f in files] == sorted(f.file_name for f in files)
    assert sorted(os.listdir(tmp_path / "index")) == [f.file_name for f in files]
    assert [(f.begin_phy_offset, f.end_phy_offset) for f in files] == [(0, 200), (300, 500), (600, 800)]

    result = service.query_offset("T", "K", 100, 0, JAVA_LONG_MAX)
    # capped by max_msgs_num_batch (64), newest file first
    assert result.phy_offsets == [800, 700, 600, 500, 400, 300, 200, 100, 0]
    assert result.index_last_update_timestamp == BASE_TS + 8000
    assert result.index_last_update_phyoffset == 800

    assert service.query_offset("T", "K", 4, 0, JAVA_LONG_MAX).phy_offsets == [800, 700, 600, 500]
    window = service.query_offset("T", "K", 32, BASE_TS + 2000, BASE_TS + 5000)
    assert window.phy_offsets == [500, 400, 300, 200]
    assert service.query_offset("T", "missing", 32, 0, JAVA_LONG_MAX).phy_offsets == []
    assert service.query_offset("other-topic", "K", 32, 0, JAVA_LONG_MAX).phy_offsets == []

    # the full files were flushed in the background and the checkpoint records the last one
    service.wait_for_background_flushes()
    assert checkpoint.index_msg_timestamp == files[1].end_timestamp == BASE_TS + 5000
    service.shutdown()


def test_max_msgs_num_batch_caps_query(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=50, max_msgs_num_batch=5)
    fill(service, 20)
    assert len(service.query_offset("T", "K", 32, 0, JAVA_LONG_MAX).phy_offsets) == 5
    service.shutdown()


def test_flush_only_moves_checkpoint_for_full_files(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=4)
    fill(service, 2)
    service.flush()
    assert checkpoint.index_msg_timestamp == 0
    fill_more = request(200, BASE_TS + 2000, keys="K")
    service.build_index(fill_more)  # third entry: now full
    service.flush()
    assert checkpoint.index_msg_timestamp == BASE_TS + 2000
    service.shutdown()


def test_abnormal_load_drops_files_newer_than_checkpoint(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=4)
    fill(service, 5)  # file 1 full (0..200), file 2 holds 300, 400
    service.wait_for_background_flushes()
    names = [f.file_name for f in service.files]
    service.shutdown()
    assert len(names) == 2
    reopened_cp = StoreCheckpoint(checkpoint.path)
    assert reopened_cp.index_msg_timestamp == BASE_TS + 2000
    reopened_cp.shutdown()

    normal = make_service(tmp_path, checkpoint)
    normal.load(last_exit_ok=True)
    assert [f.file_name for f in normal.files] == names
    assert normal.query_offset("T", "K", 32, 0, JAVA_LONG_MAX).phy_offsets == [400, 300, 200, 100, 0]
    normal.shutdown()

    crashed = make_service(tmp_path, checkpoint)
    crashed.load(last_exit_ok=False)
    assert [f.file_name for f in crashed.files] == names[:1]
    assert sorted(os.listdir(tmp_path / "index")) == names[:1]
    assert crashed.query_offset("T", "K", 32, 0, JAVA_LONG_MAX).phy_offsets == [200, 100, 0]
    # dispatch re-delivers what the dropped file held
    for i in (3, 4):
        crashed.build_index(request(i * 100, BASE_TS + i * 1000, keys="K"))
    assert crashed.query_offset("T", "K", 32, 0, JAVA_LONG_MAX).phy_offsets == [400, 300, 200, 100, 0]
    assert crashed.files[-1].file_name > names[0]
    crashed.shutdown()


def test_load_skips_foreign_names(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "notes.txt").write_text("x")
    service = make_service(tmp_path, checkpoint)
    service.load(last_exit_ok=True)
    assert service.files == []
    empty = IndexService(str(tmp_path / "absent"), 4, 4, checkpoint)
    empty.load(last_exit_ok=False)
    assert empty.files == []


def test_delete_expired_file_keeps_last(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=4)
    fill(service, 9)  # files end at 200, 500, 800
    service.wait_for_background_flushes()
    first, second, third = service.files

    service.delete_expired_file(200)  # 200 is not below 200: nothing
    assert service.files == [first, second, third]
    service.delete_expired_file(201)
    assert service.files == [second, third]
    assert not os.path.exists(first.path)

    service.delete_expired_file(10_000)  # everything is expired, but the last file stays
    assert service.files == [third]
    assert sorted(os.listdir(tmp_path / "index")) == [third.file_name]
    assert service.query_offset("T", "K", 32, 0, JAVA_LONG_MAX).phy_offsets == [800, 700, 600]
    service.destroy()
    assert os.listdir(tmp_path / "index") == []


def test_build_index_keys_uniq_key_and_rollback(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=100)
    service.build_index(request(0, BASE_TS, keys="r1", uniq_key="U0", sys_flag=SysFlag.TRANSACTION_ROLLBACK))
    (f,) = service.files  # RocketMQ gets (creates) the file before checking the type
    assert f.index_count == 1

    service.build_index(request(100, BASE_TS + 1000, keys="k1 k2  k3 ", uniq_key="U1"))
    assert f.index_count == 5  # uniq key + three non-empty keys
    service.build_index(request(200, BASE_TS + 2000, keys="k2", uniq_key=None,
                                sys_flag=SysFlag.TRANSACTION_PREPARED))
    service.build_index(request(300, BASE_TS + 3000, keys="k3", sys_flag=SysFlag.TRANSACTION_COMMIT))
    assert f.index_count == 7

    def q(key: str) -> list[int]:
        return service.query_offset("T", key, 32, 0, JAVA_LONG_MAX).phy_offsets

    assert q("U1") == [100]
    assert q("k1") == [100]
    assert q("k2") == [200, 100]
    assert q("k3") == [300, 100]
    assert q("r1") == []
    assert q("U0") == []
    assert q("") == []

    # the keys really are topic#key in the file
    assert f.select_phy_offsets(build_key("T", "k1"), 5, 0, JAVA_LONG_MAX) == [100]

    # re-dispatching offsets below the last indexed one changes nothing
    service.build_index(request(100, BASE_TS + 1000, keys="k1 k2  k3 ", uniq_key="U1"))
    service.build_index(request(200, BASE_TS + 2000, keys="k2"))
    assert f.index_count == 7
    assert q("k2") == [200, 100]
    # RocketMQ skips only offsets strictly below endPhyOffset, so the newest record is indexed
    # again when re-dispatched (a duplicate offset the caller de-duplicates)
    service.build_index(request(300, BASE_TS + 3000, keys="k3"))
    assert f.index_count == 8
    assert q("k3") == [300, 300, 100]
    service.shutdown()


def test_message_index_disabled(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, message_index_enable=False)
    service.build_index(request(0, BASE_TS, keys="k"))
    assert service.files == []
    assert service.query_offset("T", "k", 32, 0, JAVA_LONG_MAX).phy_offsets == []


def test_index_file_creation_failure_marks_error(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    blocker = tmp_path / "index"
    blocker.write_text("not a directory")
    calls: list[int] = []
    service = IndexService(str(blocker), 4, 4, checkpoint, on_index_file_error=lambda: calls.append(1))
    service.retry_interval_s = 0.0
    service.build_index(request(0, BASE_TS, keys="k"))
    assert service.index_file_error
    assert calls == [1]
    assert service.files == []


def test_roll_while_uniq_and_keys_span_files(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=3)  # 2 entries per file
    service.build_index(request(0, BASE_TS, keys="a b c", uniq_key="U"))
    assert len(service.files) == 2
    assert [f.index_count - 1 for f in service.files] == [2, 2]
    for key in ("U", "a", "b", "c"):
        assert service.query_offset("T", key, 32, 0, JAVA_LONG_MAX).phy_offsets == [0]
    service.shutdown()


def test_queries_while_building(tmp_path: Path, checkpoint: StoreCheckpoint) -> None:
    service = make_service(tmp_path, checkpoint, index_num=8)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                offsets = service.query_offset("T", "K", 64, 0, JAVA_LONG_MAX).phy_offsets
                assert offsets == sorted(offsets, reverse=True)
                service.delete_expired_file(0)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    fill(service, 200)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert service.query_offset("T", "K", 10, 0, JAVA_LONG_MAX).phy_offsets == list(range(19900, 18900, -100))
    service.shutdown()
