"""StoreCheckpoint: RocketMQ's StoreCheckpointTest plus the exact on-disk layout."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from store_support import small_config, start_store

from rocketstore.common.message import Message
from rocketstore.store.checkpoint import CHECKPOINT_SIZE, StoreCheckpoint


def test_write_flush_reopen_read_back(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoint_test" / "0000")  # the parent directory is created
    cp = StoreCheckpoint(path)
    physic, logics, index = 0xAABB, 0xCCDD, 0xEEFF
    cp.physic_msg_timestamp = physic
    cp.logics_msg_timestamp = logics
    cp.index_msg_timestamp = index
    cp.flush()
    assert physic - cp.min_timestamp == 3000
    cp.shutdown()

    reopened = StoreCheckpoint(path)
    try:
        assert reopened.physic_msg_timestamp == physic
        assert reopened.logics_msg_timestamp == logics
        assert reopened.index_msg_timestamp == index
    finally:
        reopened.shutdown()


def test_byte_layout(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 1_700_000_000_123
    cp.logics_msg_timestamp = 1_700_000_000_456
    cp.index_msg_timestamp = 1_700_000_000_789
    cp.flush()
    data = path.read_bytes()
    assert len(data) == CHECKPOINT_SIZE == 4096
    assert data[0:8] == (1_700_000_000_123).to_bytes(8, "big")
    assert data[8:16] == (1_700_000_000_456).to_bytes(8, "big")
    assert data[16:24] == (1_700_000_000_789).to_bytes(8, "big")
    assert data[24:] == b"\x00" * (CHECKPOINT_SIZE - 24)  # 5.x fields (24, 32) stay zero
    cp.shutdown()
    assert os.path.getsize(path) == CHECKPOINT_SIZE


def test_reads_a_file_written_by_someone_else(tmp_path: Path) -> None:
    """A checkpoint as RocketMQ writes it (big-endian longs at 0, 8, 16 of a 4 KiB page)."""
    path = tmp_path / "checkpoint"
    page = bytearray(CHECKPOINT_SIZE)
    struct.pack_into(">qqq", page, 0, 111_000, 222_000, 333_000)
    path.write_bytes(bytes(page))
    cp = StoreCheckpoint(str(path))
    try:
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (111_000, 222_000,
                                                                                                 333_000)
        assert cp.min_timestamp == 111_000 - 3000
        assert cp.min_timestamp_index == 108_000
    finally:
        cp.shutdown()


def test_new_checkpoint_is_one_zeroed_page(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
    assert cp.min_timestamp == 0
    cp.shutdown()
    assert path.read_bytes() == b"\x00" * CHECKPOINT_SIZE


def test_min_timestamp_rules(tmp_path: Path) -> None:
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    try:
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 50_000, 20_000
        assert cp.min_timestamp == 17_000  # min of the two, minus 3 s
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 20_000, 50_000
        assert cp.min_timestamp == 17_000
        cp.physic_msg_timestamp, cp.logics_msg_timestamp = 2_999, 10_000
        assert cp.min_timestamp == 0  # floored at 0, never negative
        cp.physic_msg_timestamp = 3_000
        assert cp.min_timestamp == 0
        cp.physic_msg_timestamp = 3_001
        assert cp.min_timestamp == 1
        # The index variant additionally takes the index timestamp into account.
        cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 50_000, 60_000, 40_000
        assert cp.min_timestamp == 47_000
        assert cp.min_timestamp_index == 40_000
        cp.index_msg_timestamp = 49_000
        assert cp.min_timestamp_index == 47_000
    finally:
        cp.shutdown()


def test_shutdown_flushes_pending_values(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 42
    cp.shutdown()  # no explicit flush
    assert path.read_bytes()[0:8] == (42).to_bytes(8, "big")


def test_store_records_flush_times_in_checkpoint(tmp_path: Path) -> None:
    store = start_store(small_config(tmp_path / "store", commit_log_size=64 * 1024))
    stamps = []
    for i in range(5):
        result = store.put_message(Message(topic="T", body=b"body-%d" % i, properties={"KEYS": f"k{i}"}))
        assert result.ok and result.append is not None
        stamps.append(result.append.store_timestamp)
    assert store.reput_service.wait_caught_up(5)
    store.shutdown()
    physic, logics, _index = struct.unpack_from(">qqq", (tmp_path / "store" / "checkpoint").read_bytes())
    # After a clean shutdown everything is flushed: both times are the newest record's store time.
    assert physic == max(stamps)
    assert logics == max(stamps)
