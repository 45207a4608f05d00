"""UNIQ_KEY generation: MessageClientIDSetter's layout, uniqueness and the time it encodes."""

from __future__ import annotations

import datetime
import os
import re
import struct
import threading
import time

from rocketstore.client.producer import _month_start_ms, _UniqIdGenerator, create_uniq_id, nearly_time_from_uniq_id


def _local_ms(*args: int) -> int:
    return int(datetime.datetime(*args).timestamp() * 1000)  # type: ignore[arg-type]


def test_layout_ip_pid_hash_time_counter() -> None:
    gen = _UniqIdGenerator(ip="10.1.2.3")
    now = _local_ms(2024, 5, 17, 12, 30, 45, 123_000)
    first, second = gen.create(now), gen.create(now)
    assert re.fullmatch(r"[0-9A-F]{32}", first), first
    raw = bytes.fromhex(first)
    assert raw[:4] == bytes([10, 1, 2, 3])
    # getPidFromID reads the short at len - 2 - 4 - 4 - 2
    assert struct.unpack_from(">H", raw, len(raw) - 12)[0] == os.getpid() & 0xFFFF
    (span,) = struct.unpack_from(">I", raw, 10)
    assert span == now - _local_ms(2024, 5, 1)
    # the fixed part is shared, the counter (last two bytes) moves by one
    assert first[:20] == second[:20] and first[20:28] == second[20:28]
    assert int(second[-4:], 16) == (int(first[-4:], 16) + 1) & 0xFFFF


def test_ipv6_ids_are_28_bytes_and_decode() -> None:
    gen = _UniqIdGenerator(ip="fe80::1")
    now = _local_ms(2024, 5, 17, 1, 2, 3)
    msg_id = gen.create(now)
    assert len(msg_id) == 56 and msg_id.startswith("FE80")
    assert nearly_time_from_uniq_id(msg_id, now_ms=now + 5000) == datetime.datetime(2024, 5, 17, 1, 2, 3)


def test_counter_wraps_at_16_bits() -> None:
    gen = _UniqIdGenerator(ip="10.0.0.1")
    now = _local_ms(2024, 1, 2)
    ids = [gen.create(now) for _ in range(0x10001)]
    assert ids[0][-4:] == "0000" and ids[0xFFFF][-4:] == "FFFF" and ids[0x10000][-4:] == "0000"


def test_ids_are_unique_across_threads() -> None:
    out: list[list[str]] = [[] for _ in range(8)]

    def worker(i: int) -> None:
        out[i].extend(create_uniq_id() for _ in range(2000))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [x for chunk in out for x in chunk]
    assert len(set(ids)) == len(ids) == 16000


def test_nearly_time_round_trips_to_the_millisecond() -> None:
    made = time.time_ns() // 1_000_000
    msg_id = create_uniq_id(made)
    assert nearly_time_from_uniq_id(msg_id, now_ms=made + 10) == datetime.datetime.fromtimestamp(made / 1000)
    # Java compares with >=: read back within the very millisecond it was made, the id is taken
    # to be a month old. Kept as RocketMQ has it.
    assert nearly_time_from_uniq_id(msg_id, now_ms=made) < datetime.datetime.fromtimestamp(made / 1000 - 27 * 86400)


def test_nearly_time_of_an_id_from_last_month() -> None:
    """An id made just before midnight at a month's end, read just after: getNearlyTimeFromID
    sees the offset would lie in the future and counts it from the previous month."""
    gen = _UniqIdGenerator(ip="10.0.0.1")
    made = _local_ms(2024, 1, 31, 23, 59, 59, 500_000)
    msg_id = gen.create(made)
    assert nearly_time_from_uniq_id(msg_id, now_ms=_local_ms(2024, 2, 1, 0, 0, 1)) == \
        datetime.datetime(2024, 1, 31, 23, 59, 59, 500_000)
    # December -> January crosses the year
    made = _local_ms(2023, 12, 31, 23, 0)
    msg_id = gen.create(made)
    decoded = nearly_time_from_uniq_id(msg_id, now_ms=_local_ms(2024, 1, 1, 0, 30))
    assert decoded == datetime.datetime(2023, 12, 31, 23, 0)


def test_month_start_is_local_midnight_of_day_one() -> None:
    start, nxt = _month_start_ms(_local_ms(2024, 12, 15, 8))
    assert start == _local_ms(2024, 12, 1) and nxt == _local_ms(2025, 1, 1)
