"""The vectorised CommitLog decoder (pipeline.columnar) against the engine's reference decoder.

No Spark here: runs of records are encoded by the engine's own encoder, then decoded both ways,
record by record with :func:`store.message.decode_record` and all at once with
:func:`pipeline.columnar.decode_run`; the two must give the same rows. Hypothesis varies what
the fast path computes with offsets and masks: empty and short (inline, <= 12 bytes) values,
values ending exactly at the end of the buffer, IPv4 and IPv6 hosts, unicode text.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore.common.message import HostAddress, Message, StoredMessage, decode_record, encode_message, stamp_record
from rocketstore.pipeline.columnar import _Bytes, _views, decode_run, walk_run
from rocketstore.pipeline.reader import ARROW_SCHEMA, _Columns

TEXT = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=16)
HOSTS = st.sampled_from([HostAddress("10.0.0.1", 1), HostAddress("10.0.0.2", 65000), HostAddress("::1", 7),
                         HostAddress("fe80::2", 10911)])


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        topic=draw(st.text(alphabet="ABCxyz_%-é", min_size=1, max_size=20)),
        body=draw(st.binary(max_size=40)),
        queue_id=draw(st.integers(0, 15)),
        flag=draw(st.integers(-5, 5)),
        properties=draw(st.dictionaries(TEXT, TEXT, max_size=5)),
        born_timestamp=draw(st.integers(0, 2**42)),
        born_host=draw(HOSTS),
        store_host=draw(HOSTS),
        reconsume_times=draw(st.integers(0, 16)),
    )


def encode_run(msgs: list[Message], base: int) -> bytes:
    """The messages as consecutive records, stamped as the CommitLog would stamp them at ``base``."""
    buf = bytearray()
    for i, m in enumerate(msgs):
        record = encode_message(m)
        stamp_record(record, 0, i, base + len(buf), 1_700_000_000_000 + i, int.from_bytes(record[36:40], "big"))
        buf += record
    return bytes(buf)


def reference(buf: bytes, positions: list[int]) -> pa.RecordBatch:
    cols = _Columns()
    for pos in positions:
        decoded = decode_record(buf, pos, check_crc=True)
        assert isinstance(decoded, StoredMessage)
        cols.add(decoded)
    return cols.to_batch()


@settings(max_examples=150, deadline=None)
@given(st.lists(messages(), min_size=1, max_size=12), st.integers(0, 2**40))
def test_decode_run_equals_reference_decoder(msgs: list[Message], base: int) -> None:
    buf = encode_run(msgs, base)
    positions: list[int] = []
    end, why = walk_run(buf, 0, len(buf), 1000, positions)
    assert (end, why, len(positions)) == (len(buf), "more", len(msgs))
    decoded = decode_run(buf, positions, base, None, None, ARROW_SCHEMA)
    assert decoded is not None
    batch, record_bytes = decoded
    assert record_bytes == len(buf)
    assert batch.to_pylist() == reference(buf, positions).to_pylist()


@settings(max_examples=50, deadline=None)
@given(st.lists(messages(), min_size=2, max_size=8), st.data())
def test_time_window_keeps_the_same_rows_as_the_reference(msgs: list[Message], data: st.DataObject) -> None:
    buf = encode_run(msgs, 0)
    positions: list[int] = []
    walk_run(buf, 0, len(buf), 1000, positions)
    lo = data.draw(st.integers(0, len(msgs)))
    hi = data.draw(st.integers(lo, len(msgs)))
    decoded = decode_run(buf, positions, 0, 1_700_000_000_000 + lo, 1_700_000_000_000 + hi, ARROW_SCHEMA)
    assert decoded is not None
    assert decoded[0].to_pylist() == reference(buf, positions[lo:hi]).to_pylist()


def test_a_physical_offset_that_does_not_match_its_position_is_left_to_the_reference_decoder() -> None:
    buf = encode_run([Message(topic="T", body=b"x")], 4096)
    assert decode_run(buf, [0], 0, None, None, ARROW_SCHEMA) is None  # stamped for 4096, read as if at 0


def test_text_that_is_not_utf8_is_left_to_the_reference_decoder() -> None:
    buf = bytearray(encode_run([Message(topic="T", body=b"x", properties={"KEYS": "abc"})], 0))
    buf[-1] = 0xFF  # the last byte of the properties text
    assert decode_run(bytes(buf), [0], 0, None, None, ARROW_SCHEMA) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=64), st.data())
def test_views_slice_any_buffer(raw: bytes, data: st.DataObject) -> None:
    """Every (start, length) inside the buffer, including short values that end at its last byte
    and buffers shorter than the 8 bytes the vector path reads at once."""
    spans = data.draw(st.lists(st.integers(0, len(raw)).flatmap(
        lambda s: st.tuples(st.just(s), st.integers(0, len(raw) - s))), max_size=20))
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    lengths = np.array([n for _, n in spans], dtype=np.int64)
    got = _views(_Bytes(np.frombuffer(raw, dtype=np.uint8)), pa.py_buffer(raw), starts, lengths, pa.binary())
    assert got.to_pylist() == [raw[s : s + n] for s, n in spans]
