"""Differential tests: the Rust hot path against the pure-Python reference, byte for byte.

Hypothesis builds CommitLogs of records with random fields (IPv6 hosts, transaction types,
v2 magic, non-UTF-8 topics and properties, gaps in queue offsets), followed by a clean end, a
blank record, garbage, a cut or a flipped byte; both scans must return the same ConsumeQueue
runs, index keys, record counts and stopping point. Index writes start from random file states
(stale slots, full files, unset begin timestamps) and must leave identical files. Encoding
must give identical records, and refuse the same bad input.
"""

from __future__ import annotations

import struct
from types import ModuleType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_support import native_module

from rocketstore.common.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    SysFlag,
    encode_batch_records_python,
    encode_record_python,
    properties_to_string,
    stamp_record,
    stamp_records_python,
)
from rocketstore.store.config import StoreConfig
from rocketstore.store.dispatch_scan import RawScan, scan_python
from rocketstore.store.index_file import (
    INDEX_HEADER_SIZE,
    INDEX_KEY_ENTRY,
    IndexHeaderState,
    index_file_size,
    put_index_entries_python,
)
from rocketstore.store.schedule_message_service import parse_delay_levels

NATIVE: ModuleType = native_module()
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
#: words for keys and tags, with the separators and non-ASCII that parsing and hashing must agree on
#: messageDelayLevel tables: the default, and short ones that clamp most levels
DEFAULT_LEVELS = parse_delay_levels(StoreConfig().message_delay_level)
DELAY_LEVELS = st.one_of(st.just(DEFAULT_LEVELS), st.lists(st.integers(0, 2**40), min_size=1, max_size=3).map(tuple))
WORD = st.one_of(TEXT, st.sampled_from(["TagA", "k1", "", " ", "a b", "ключ", "键", "\U0001F600", "x\x01y"]))


@st.composite
def record_fields(draw: st.DrawFn) -> dict[str, object]:
    """Fields of one record, as encode_record takes them."""
    born_v6, store_v6 = draw(st.booleans()), draw(st.booleans())
    if draw(st.integers(0, 4)) == 0:
        properties = draw(st.binary(max_size=60))  # anything, including invalid UTF-8
    else:
        props = draw(st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "K", ""]), WORD,
                                     max_size=4))
        if draw(st.booleans()):  # a delay level, well-formed or not, in or beyond the table
            props["DELAY"] = draw(st.one_of(st.integers(-3, 25).map(str), st.sampled_from(["+2", "02", "x", "",
                                                                                           "99999999999"])))
        properties = properties_to_string(props).encode()
    topic = draw(st.one_of(TEXT.map(str.encode), st.binary(max_size=20), st.just(b"SCHEDULE_TOPIC_XXXX"))) or b"T"
    tx = draw(st.sampled_from([0, SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_COMMIT,
                               SysFlag.TRANSACTION_ROLLBACK]))
    return dict(
        topic_data=topic[:127],
        body=draw(st.binary(max_size=64)),
        properties_data=properties,
        queue_id=draw(st.integers(-2, 3)),
        flag=draw(I32),
        sys_flag=tx | (SysFlag.BORNHOST_V6 if born_v6 else 0) | (SysFlag.STOREHOST_V6 if store_v6 else 0),
        born_timestamp=draw(I64),
        born_host=draw(st.binary(min_size=20, max_size=20) if born_v6 else st.binary(min_size=8, max_size=8)),
        store_host=draw(st.binary(min_size=20, max_size=20) if store_v6 else st.binary(min_size=8, max_size=8)),
        reconsume_times=draw(I32),
        prepared_transaction_offset=draw(I64),
    )


def to_v2(record: bytearray) -> bytearray:
    """The same record with RocketMQ 5's v2 magic: a 2-byte topic length instead of 1 byte."""
    (sys_flag,) = struct.unpack_from(">i", record, 36)
    fixed = 48 + (20 if sys_flag & SysFlag.BORNHOST_V6 else 8) + 8 + (20 if sys_flag & SysFlag.STOREHOST_V6 else 8) + 16
    (body_length,) = struct.unpack_from(">i", record, fixed - 4)
    at = fixed + body_length
    out = record[:at] + struct.pack(">h", record[at]) + record[at + 1 :]
    struct.pack_into(">ii", out, 0, len(out), MESSAGE_MAGIC_CODE_V2)
    return out


@st.composite
def commit_logs(draw: st.DrawFn) -> bytes:
    """Stamped records back to back, then one of the endings a segment can have."""
    log = bytearray()
    next_offsets: dict[int, int] = {}
    for fields in draw(st.lists(record_fields(), max_size=12)):
        record = encode_record_python(**fields)  # type: ignore[arg-type]
        if draw(st.integers(0, 5)) == 0:
            record = to_v2(record)
        queue_id = int(fields["queue_id"])  # type: ignore[call-overload]
        queue_offset = next_offsets.get(queue_id, draw(st.integers(0, 5)))
        if draw(st.integers(0, 8)) == 0:
            queue_offset += draw(st.integers(1, 3))  # a gap: the run must break there
        next_offsets[queue_id] = queue_offset + 1
        stamp_record(record, 0, queue_offset, draw(st.integers(0, 2**40)), draw(I64), int(fields["sys_flag"]))  # type: ignore[call-overload]
        log += record
    ending = draw(st.sampled_from(["clean", "blank", "garbage", "cut", "flip", "zeros"]))
    if ending == "blank":
        log += struct.pack(">ii", draw(st.integers(8, 4096)), BLANK_MAGIC_CODE)
    elif ending == "garbage":
        log += draw(st.binary(min_size=1, max_size=120))
    elif ending == "cut" and log:
        del log[draw(st.integers(0, len(log) - 1)) :]
    elif ending == "flip" and log:
        at = draw(st.integers(0, len(log) - 1))
        log[at] ^= draw(st.integers(1, 255))
    elif ending == "zeros":
        log += bytes(draw(st.integers(1, 100)))
    return bytes(log)


def comparable(raw: RawScan) -> RawScan:
    """Everything but the corrupt-record reason, whose wording each implementation owns."""
    end_pos, records, end_kind, _, runs, index, last_ts = raw
    return end_pos, records, end_kind, "", [tuple(run) for run in runs], bytes(index), last_ts  # type: ignore[misc]


@EXAMPLES
@given(log=commit_logs(), data=st.data())
def test_scan_matches_the_python_reference(log: bytes, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(log)))
    limit = data.draw(st.one_of(st.just(len(log)), st.integers(0, len(log) + 8)))
    max_records = data.draw(st.integers(1, 16))
    index_enabled = data.draw(st.booleans())
    levels = data.draw(DELAY_LEVELS)
    buf = data.draw(st.sampled_from([bytes, bytearray]))(log)
    expected = scan_python(buf, start, limit, max_records, index_enabled, levels)
    actual = NATIVE.scan_dispatch(buf, start, limit, max_records, index_enabled, levels)
    assert comparable(actual) == comparable(expected)


def test_scan_reads_a_real_log_to_its_end() -> None:
    """A fixed case the random one can be checked against: three queues, keys, a blank at the end."""
    log = bytearray()
    for i in range(6):
        properties = f"TAGS\x01T{i % 2}\x02KEYS\x01k{i} j\x02UNIQ_KEY\x01U{i}".encode()
        record = encode_record_python(
            topic_data=b"TopicA", body=b"x" * i, properties_data=properties,
            queue_id=i % 3, flag=0, sys_flag=0, born_timestamp=1, born_host=bytes(8), store_host=bytes(8),
            reconsume_times=0, prepared_transaction_offset=0)
        stamp_record(record, 0, i // 3, len(log), 1_700_000_000_000 + i, 0)
        log += record
    end = len(log)
    log += struct.pack(">ii", 64, BLANK_MAGIC_CODE)
    raw = NATIVE.scan_dispatch(bytes(log), 0, len(log), 100, True, DEFAULT_LEVELS)
    assert raw[0] == end and raw[1] == 6 and raw[2] == 1
    assert [(t, q, first, n) for t, q, first, n, _, _ in raw[4]] == [("TopicA", 0, 0, 2), ("TopicA", 1, 0, 2),
                                                                     ("TopicA", 2, 0, 2)]
    assert len(raw[5]) == 6 * 3 * INDEX_KEY_ENTRY.size  # UNIQ_KEY, k<i>, j per record
    assert comparable(raw) == comparable(scan_python(bytes(log), 0, len(log), 100, True, DEFAULT_LEVELS))


@st.composite
def index_cases(draw: st.DrawFn) -> tuple[bytearray, int, int, bytes, int, int, IndexHeaderState]:
    slots, num = draw(st.integers(1, 40)), draw(st.integers(1, 30))
    buf = bytearray(index_file_size(slots, num))
    for slot in draw(st.lists(st.integers(0, slots - 1), max_size=10)):  # stale or live slot values
        struct.pack_into(">i", buf, INDEX_HEADER_SIZE + 4 * slot, draw(st.integers(-3, num + 3)))
    index_count = draw(st.integers(0, num + 1))
    header: IndexHeaderState = (draw(st.one_of(st.just(0), I64)), draw(I64), draw(I64), draw(I64),
                                draw(st.integers(0, slots)), index_count)
    entries = b"".join(INDEX_KEY_ENTRY.pack(draw(I32), draw(st.integers(-5, 2**40)), draw(I64))
                       for _ in range(draw(st.integers(0, 40))))
    start = INDEX_KEY_ENTRY.size * draw(st.integers(0, len(entries) // INDEX_KEY_ENTRY.size))
    return buf, slots, num, entries, start, draw(st.one_of(st.just(-(2**63)), st.integers(-5, 2**40))), header


@EXAMPLES
@given(case=index_cases())
def test_index_writes_match_the_python_reference(
    case: tuple[bytearray, int, int, bytes, int, int, IndexHeaderState],
) -> None:
    buf, slots, num, entries, start, skip_below, header = case
    python_buf, native_buf = bytearray(buf), bytearray(buf)
    expected = put_index_entries_python(python_buf, slots, num, entries, start, skip_below, header)
    actual = NATIVE.put_index_entries(native_buf, slots, num, entries, start, skip_below, header)
    assert actual == expected
    assert native_buf == python_buf


@EXAMPLES
@given(fields=record_fields(), crc=st.one_of(st.none(), st.integers(0, 2**31 - 1)))
def test_encoding_matches_the_python_reference(fields: dict[str, object], crc: int | None) -> None:
    assert NATIVE.encode_record(**fields, crc=crc) == encode_record_python(**fields, crc=crc)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [
    {"born_host": b"\x00" * 6},
    {"store_host": b"\x00" * 16},
    {"topic_data": b"t" * 256},
    {"properties_data": b"p" * 32768},
])
def test_encoding_refuses_what_the_reference_refuses(bad: dict[str, bytes]) -> None:
    fields: dict[str, object] = dict(
        topic_data=b"T", body=b"b", properties_data=b"", queue_id=0, flag=0, sys_flag=0, born_timestamp=0,
        born_host=bytes(8), store_host=bytes(8), reconsume_times=0, prepared_transaction_offset=0) | bad
    with pytest.raises((ValueError, struct.error)):
        encode_record_python(**fields)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"host|topic|properties"):
        NATIVE.encode_record(**fields)


def test_index_writer_refuses_arguments_that_would_write_out_of_bounds() -> None:
    buf = bytearray(index_file_size(4, 4))
    entry = INDEX_KEY_ENTRY.pack(1, 0, 0)
    with pytest.raises(ValueError, match="dimensions need"):
        NATIVE.put_index_entries(buf, 5, 4, entry, 0, 0, (0, 0, 0, 0, 0, 1))
    with pytest.raises(ValueError, match="20-byte"):
        NATIVE.put_index_entries(buf, 4, 4, entry[:-1], 0, 0, (0, 0, 0, 0, 0, 1))
    with pytest.raises(ValueError, match="read-only"):
        NATIVE.put_index_entries(bytes(buf), 4, 4, entry, 0, 0, (0, 0, 0, 0, 0, 1))
    with pytest.raises(ValueError, match="negative"):
        NATIVE.put_index_entries(buf, 4, 4, entry, 0, 0, (0, 0, 0, 0, 0, -1))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[tuple[bytes, int, str]], bytes, dict[str, object]]:
    fields = draw(record_fields())
    items = draw(st.lists(st.tuples(st.binary(max_size=40), I32, st.one_of(
        st.just(""), st.sampled_from(["a\x01b", "a\x01b\x02", "KEYS\x01k1 k2", "x" * 40]),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30))), max_size=8))
    batch_properties = draw(st.sampled_from([b"", b"TAGS\x01TagA", b"CLUSTER\x01c\x02WAIT\x01false", b"p" * 32760]))
    common = {k: fields[k] for k in ("topic_data", "queue_id", "sys_flag", "born_timestamp", "born_host",
                                     "store_host", "reconsume_times")}
    return items, batch_properties, common


@EXAMPLES
@given(batch=batches(), queue_offset=st.integers(0, 2**40), physical=st.integers(0, 2**50), now=I64,
       counts=st.booleans())
def test_batch_encoding_and_stamping_match_the_python_reference(
    batch: tuple[list[tuple[bytes, int, str]], bytes, dict[str, object]], queue_offset: int, physical: int,
    now: int, counts: bool,
) -> None:
    items, batch_properties, common = batch
    expected = encode_batch_records_python(items, batch_properties, **common)  # type: ignore[arg-type]
    actual = NATIVE.encode_batch_records(items, batch_properties, **common)
    assert actual == expected
    if expected is not None:
        payload_py, payload_native = bytearray(expected[0]), bytearray(actual[0])
        sys_flag = int(common["sys_flag"])  # type: ignore[call-overload]
        stamp_records_python(payload_py, expected[1], queue_offset, physical, now, sys_flag, counts)
        NATIVE.stamp_records(payload_native, actual[1], queue_offset, physical, now, sys_flag, counts)
        assert payload_native == payload_py
