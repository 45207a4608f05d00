"""The HA wire format and decisions (ha_protocol), byte for byte and without sockets.

The layouts are RocketMQ 4.9.7's: HAClient writes an 8-byte big-endian offset, HAConnection's
WriteSocketService a 12-byte header (int64 offset, int32 size) then the body.
"""

from __future__ import annotations

import pytest

from rocketstore.store.ha_protocol import (
    HEADER_SIZE,
    REPORT_SIZE,
    Frame,
    batch_end,
    continuity_error,
    encode_header,
    encode_report,
    last_report,
    next_frame,
    slave_ahead_error,
    transfer_start,
    unacknowledged_record,
)


def test_report_is_eight_bytes_big_endian() -> None:
    assert REPORT_SIZE == 8
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))
    assert encode_report(0) == bytes(8)


def test_header_is_offset_then_size_big_endian() -> None:
    assert HEADER_SIZE == 12
    assert encode_header(1 << 32, 0x10203) == b"\x00\x00\x00\x01\x00\x00\x00\x00" + b"\x00\x01\x02\x03"
    assert encode_header(4096, 0) == (4096).to_bytes(8, "big") + bytes(4)  # a heartbeat


def test_the_master_acts_on_the_newest_whole_report() -> None:
    data = encode_report(100) + encode_report(250) + encode_report(300)[:5]
    assert last_report(data) == (250, 16)
    assert last_report(encode_report(7)[:7]) == (None, 0)
    assert last_report(b"") == (None, 0)


def test_next_frame_waits_for_the_whole_frame() -> None:
    body = b"abcdefgh"
    stream = encode_header(4096, len(body)) + body + encode_header(4104, 0)
    assert next_frame(stream, 0, 11) is None  # header incomplete
    assert next_frame(stream, 0, 12 + 7) is None  # body incomplete
    first = next_frame(stream, 0, len(stream))
    assert first == Frame(4096, 12, 8)
    assert bytes(stream[first.body_start:first.end]) == body
    heartbeat = next_frame(stream, first.end, len(stream))
    assert heartbeat == Frame(4104, first.end + 12, 0)
    assert heartbeat.end == len(stream)


def test_a_negative_body_size_is_not_a_master_stream() -> None:
    with pytest.raises(ValueError, match="negative body size"):
        next_frame(encode_header(0, -1), 0, HEADER_SIZE)


def test_a_fresh_slave_starts_at_the_masters_last_segment() -> None:
    assert transfer_start(0, 3 * 1024 + 100, 1024) == 3 * 1024
    assert transfer_start(0, 4096, 1024) == 4096  # a full last segment: the next one (empty)
    assert transfer_start(0, 0, 1024) == 0


def test_a_slave_with_data_continues_from_its_own_end() -> None:
    assert transfer_start(1500, 9000, 1024) == 1500


def test_a_slave_ahead_of_the_master_is_refused_naming_both_offsets() -> None:
    assert slave_ahead_error(900, 900) is None
    assert slave_ahead_error(100, 900) is None
    message = slave_ahead_error(901, 900)
    assert message is not None and "901" in message and "900" in message


def test_a_frame_must_continue_the_slaves_log() -> None:
    assert continuity_error(0, 8192) is None  # an empty slave takes the master's start
    assert continuity_error(500, 500) is None
    message = continuity_error(500, 400)
    assert message is not None and "500" in message and "400" in message
    assert continuity_error(500, 600) is not None  # a gap is as bad as an overlap


def test_a_body_stops_at_the_batch_size_and_the_segment_end() -> None:
    assert batch_end(0, 4096, 1024) == 1024
    assert batch_end(3500, 4096, 1024) == 4096


def test_the_first_unacknowledged_record_is_the_one_the_ack_falls_into() -> None:
    sizes = {0: 100, 100: 50, 150: 3946, 4096: 80}  # 150: the blank that ends a 4096-byte segment

    def size_at(offset: int) -> int | None:
        return sizes.get(offset)

    assert unacknowledged_record(0, 0, size_at) == 0
    assert unacknowledged_record(0, 99, size_at) == 0
    assert unacknowledged_record(0, 100, size_at) == 100
    assert unacknowledged_record(0, 120, size_at) == 100
    assert unacknowledged_record(100, 4096, size_at) == 4096  # across the blank
    assert unacknowledged_record(0, 4200, size_at) is None  # past what is written
