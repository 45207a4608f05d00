"""RocketMQ 5's AutoSwitch HA messages byte for byte (store/autoswitch_ha_protocol.py) and the
slave's truncation point from two epoch histories (AutoSwitchHAClient.doTruncate)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rocketstore.store.autoswitch_ha_client import truncation_point
from rocketstore.store.autoswitch_ha_protocol import (
    MasterHandshake,
    SlaveHandshake,
    TransferHeader,
    batch_size_within_epoch,
    encode_master_handshake,
    encode_slave_handshake,
    encode_slave_report,
    encode_transfer_header,
    next_master_message,
    next_slave_message,
    transfer_start_in_controller_mode,
)
from rocketstore.store.epoch_file import EpochEntry, EpochFileCache


def test_slave_handshake_is_state_flags_and_broker_id() -> None:
    data = encode_slave_handshake(SlaveHandshake(7, sync_from_last_file=True))
    # HANDSHAKE ordinal 1, isSyncFromLastFile 1 (short), isAsyncLearner 0 (short), slaveBrokerId (long)
    assert data == struct.pack(">ihhq", 1, 1, 0, 7)
    assert next_slave_message(data, 0, len(data)) == (SlaveHandshake(7, True, False), 16)


def test_slave_report_is_transfer_state_and_offset() -> None:
    data = encode_slave_report(123456789)
    assert data == struct.pack(">iq", 2, 123456789)
    assert next_slave_message(data + b"\0\0", 0, len(data) + 2) == (123456789, 12)
    assert next_slave_message(data[:11], 0, 11) is None


def test_a_slave_message_of_another_state_is_refused() -> None:
    with pytest.raises(ValueError):
        next_slave_message(struct.pack(">iq", 4, 0), 0, 12)


def test_master_handshake_carries_max_offset_last_epoch_and_every_entry() -> None:
    entries = (EpochEntry(1, 0), EpochEntry(3, 4096))
    data = encode_master_handshake(entries, 8192, 3)
    assert data == struct.pack(">iiqi", 1, 24, 8192, 3) + struct.pack(">iq", 1, 0) + struct.pack(">iq", 3, 4096)
    found = next_master_message(data, 0, len(data))
    assert found is not None
    message, _, end = found
    assert isinstance(message, MasterHandshake)
    assert message.entries == entries and message.max_offset == 8192 and message.last_epoch == 3
    assert end == len(data)
    assert next_master_message(data, 0, len(data) - 1) is None  # the body is not all there


def test_transfer_header_is_36_bytes_with_epoch_start_and_confirm_offset() -> None:
    header = TransferHeader(phy_offset=4096, body_size=3, epoch=3, epoch_start_offset=2048, confirm_offset=4000)
    data = encode_transfer_header(header) + b"abc"
    assert data[:36] == struct.pack(">iiqiqq", 2, 3, 4096, 3, 2048, 4000)
    assert next_master_message(data, 0, len(data)) == (header, 36, 39)


def test_transfer_start_for_an_empty_slave_is_the_whole_log_or_its_last_segment() -> None:
    assert transfer_start_in_controller_mode(0, 1024, 5000, 1024, sync_from_last_file=False) == 1024
    assert transfer_start_in_controller_mode(0, 1024, 5000, 1024, sync_from_last_file=True) == 4096
    assert transfer_start_in_controller_mode(3000, 1024, 5000, 1024, sync_from_last_file=True) == 3000


def test_a_batch_never_crosses_the_end_of_its_epoch() -> None:
    assert batch_size_within_epoch(900, 500, 1000) == 100
    assert batch_size_within_epoch(900, 500, -1) == 500


def _cache(tmp_path: Path, *entries: tuple[int, int]) -> EpochFileCache:
    cache = EpochFileCache(tmp_path / "epochFileCheckpoint")
    for epoch, start in entries:
        assert cache.append_entry(epoch, start)
    return cache


def test_old_master_truncates_its_unacknowledged_tail_of_its_own_epoch(tmp_path: Path) -> None:
    # epoch 1 was the old master's from 0; it wrote to 5000, the slave had 4000 when it took over
    old = _cache(tmp_path, (1, 0))
    new = MasterHandshake(max_offset=6000, last_epoch=2, entries=(EpochEntry(1, 0), EpochEntry(2, 4000)))
    assert truncation_point(old, 5000, new) == 4000


def test_a_slave_behind_in_the_same_history_keeps_its_log(tmp_path: Path) -> None:
    slave = _cache(tmp_path, (1, 0), (2, 4000))
    master = MasterHandshake(max_offset=6000, last_epoch=2, entries=(EpochEntry(1, 0), EpochEntry(2, 4000)))
    assert truncation_point(slave, 5000, master) == 5000


def test_two_epochs_the_new_master_never_had_are_both_cut(tmp_path: Path) -> None:
    # this replica was master in epochs 2 and 3 while the new master (epoch 4) only saw epoch 1
    replica = _cache(tmp_path, (1, 0), (2, 3000), (3, 3500))
    master = MasterHandshake(max_offset=9000, last_epoch=4, entries=(EpochEntry(1, 0), EpochEntry(4, 2800)))
    assert truncation_point(replica, 4000, master) == 2800


def test_no_history_in_common_is_refused_and_a_new_replica_keeps_its_log(tmp_path: Path) -> None:
    replica = _cache(tmp_path, (5, 100))
    master = MasterHandshake(max_offset=9000, last_epoch=4, entries=(EpochEntry(4, 0),))
    assert truncation_point(replica, 4000, master) == -1
    assert truncation_point(EpochFileCache(tmp_path / "none"), 4000, master) is None
