"""Vectorised decoding of a run of CommitLog records into one Arrow record batch (the fast path).

Decoding record by record in Python (``decode_record`` plus a list append per column) costs
tens of microseconds per message; the scan target is hundreds of MB/s per core. This module
decodes a *run* of v1 records at once: the Python loop only follows ``totalSize`` from record
to record, every field is then gathered with numpy at offsets computed from the layout
constants of :mod:`store.message` (header positions, host sizes from the sysFlag bits), and
variable-length fields (body, topic, properties) become Arrow binary *views* over the chunk
read from disk, cast once to plain binary/string (one memcpy per value, in C++). Properties
are parsed with Arrow compute kernels exactly as ``string_to_properties`` does (pairs without
a name or a value are skipped).

:func:`store.message.decode_record` stays the reference: whenever a run holds anything this
path does not model — a v2 (5.x) record, fields that do not add up to totalSize, text that is
not UTF-8, a record with a property name given twice — :func:`decode_run` returns None and the
caller decodes that run record by record. Tests compare both paths on engine-written stores.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocketstore.common.message import (
    BORN_HOST_POS,
    MESSAGE_MAGIC_CODE,
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
    SYS_FLAG_POS,
    Buffer,
    HostAddress,
    SysFlag,
    record_length,
)

__all__ = ["MIN_RECORD_SIZE", "decode_run", "walk_run"]

I64 = npt.NDArray[np.int64]
_HEAD = struct.Struct(">ii")
#: smallest possible v1 record (no body, topic or properties)
MIN_RECORD_SIZE = record_length(0, 0, 0, 0)
_BODY_CRC_POS = 8
_QUEUE_ID_POS = 12
_FLAG_POS = 16
_BORN_TIMESTAMP_POS = 40
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
_NAME_VALUE = "\x01"
_PAIR = "\x02"


def walk_run(buf: Buffer, pos: int, limit: int, max_rows: int, positions: list[int]) -> tuple[int, str]:
    """Follow v1 records from ``pos`` while they lie whole inside ``buf[:limit]``.

    Appends each record's position to ``positions`` (at most ``max_rows``); returns the
    position where it stopped and why: ``full`` (max_rows), ``more`` (the next record is not
    whole in the buffer), ``limit`` (it starts at or past ``limit``), ``zero`` (zero header:
    nothing written here), ``other`` (a blank record, a v2 or a corrupt one: for the reference
    decoder). The loop is the only per-record Python code of a scan, so it does the least it can.
    """
    unpack = _HEAD.unpack_from
    append = positions.append
    buf_len = len(buf)
    last_header = buf_len - 8
    magic_code, min_size = MESSAGE_MAGIC_CODE, MIN_RECORD_SIZE
    for _ in range(max_rows):
        if pos > last_header:
            return pos, "more"
        size, magic = unpack(buf, pos)
        if magic != magic_code or size < min_size or pos + size > buf_len or pos >= limit:
            return pos, _stop_reason(size, magic, pos, limit, buf_len)
        append(pos)
        pos += size
    return pos, "full"


def _stop_reason(size: int, magic: int, pos: int, limit: int, buf_len: int) -> str:
    if magic == MESSAGE_MAGIC_CODE and size >= MIN_RECORD_SIZE:
        return "more" if pos + size > buf_len else "limit"
    return "zero" if size == 0 and magic == 0 else "other"


class _Bytes:
    """A byte buffer whose integers of any width can be read starting at *any* byte position.

    Each dtype gets one strided view (stride 1 byte, unaligned), so a field of n records is
    one fancy index into it instead of an (n, width) gather of single bytes and a reshape:
    CommitLog records are not aligned, and this is the scan's inner loop.
    """

    def __init__(self, arr: npt.NDArray[np.uint8]) -> None:
        self.arr = arr
        self._by_dtype: dict[str, npt.NDArray[Any]] = {}

    def read(self, at: I64, dtype: str) -> npt.NDArray[Any]:
        """The ``dtype`` values starting at byte positions ``at`` (each must lie whole in the buffer)."""
        view = self._by_dtype.get(dtype)
        if view is None:
            count = max(len(self.arr) - np.dtype(dtype).itemsize + 1, 0)
            view = np.ndarray((count,), dtype=dtype, buffer=self.arr, strides=(1,))
            self._by_dtype[dtype] = view
        return view[at]

    def int64(self, at: I64, dtype: str) -> I64:
        """Big-endian integers (``>i4``, ``>i8``, ...) at ``at``, widened to int64."""
        return self.read(at, dtype).astype(np.int64)


#: masks keeping the low k bytes of a little-endian uint64, k = 0..8
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


def _views(src: _Bytes, data: pa.Buffer, starts: I64, lengths: I64, target: pa.DataType) -> pa.Array:
    """``src[start:start+length]`` per row as an Arrow array of ``target`` (binary or string).

    Builds Arrow binary *views* (16 bytes per row: length, then up to 12 bytes inline, or a
    4-byte prefix and the value's offset in ``data``) with a handful of vector operations,
    then casts once: the only per-value work, a memcpy, happens in Arrow's C++.
    """
    n = len(starts)
    size = len(src.arr)
    # bytes 0-3 of every value (a long value's prefix) and bytes 4-11 (the rest of an inline one);
    # positions are clipped so the reads stay inside the buffer, and the few short values at its
    # very end, whose reads were clipped, are fixed below
    first = np.zeros(n, np.uint64)
    rest = np.zeros(n, np.uint64)
    if size >= 8:
        first = src.read(np.clip(starts, 0, size - 4), "<u4").astype(np.uint64)
        rest = src.read(np.clip(starts + 4, 0, size - 8), "<u8")
    long = lengths > 12
    words = np.empty((n, 2), dtype=np.uint64)
    words[:, 0] = lengths.astype(np.uint64) | ((first & _LOW_BYTES[np.minimum(lengths, 4)]) << np.uint64(32))
    inline_rest = rest & _LOW_BYTES[np.clip(lengths - 4, 0, 8)]
    words[:, 1] = np.where(long, starts.astype(np.uint64) << np.uint64(32), inline_rest)
    for row in np.flatnonzero(~long & (starts + 12 > size)):  # also every row of a buffer under 8 bytes
        start, length = int(starts[row]), int(lengths[row])
        value = src.arr[start : start + length].tobytes().ljust(12, b"\0")
        words[row, 0] = length | (int.from_bytes(value[:4], "little") << 32)
        words[row, 1] = int.from_bytes(value[4:], "little")
    array = pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(words), data])
    return array.cast(target)


def _hosts(src: _Bytes, at: I64, v6: npt.NDArray[np.bool_]) -> pa.Array:
    """``ip:port`` / ``[ipv6]:port`` strings; a store sees few hosts, so each distinct one is formatted once."""
    n = len(at)
    if not n:
        return pa.array([], pa.string())
    if not v6.any():  # the usual case: 4 address bytes and 4 port bytes, one uint64 per row is the exact key
        key = src.read(at, "<u8")
        if (key == key[0]).all():
            host = HostAddress.from_bytes(int(key[0]).to_bytes(8, "little"))
            return pa.repeat(pa.scalar(str(host), pa.string()), n)
        encoded = pc.dictionary_encode(pa.array(key))
        names = [str(HostAddress.from_bytes(int(k).to_bytes(8, "little"))) for k in encoded.dictionary.to_pylist()]
        return pa.DictionaryArray.from_arrays(encoded.indices, pa.array(names, pa.string())).cast(pa.string())
    window = np.minimum(at[:, None] + np.arange(20), len(src.arr) - 1)
    raw = np.zeros((n, 21), dtype=np.uint8)
    raw[:, :20] = src.arr[window] * (np.arange(20) < np.where(v6, 20, 8)[:, None])
    raw[:, 20] = v6
    rows = np.ascontiguousarray(raw).view(np.dtype("V21")).reshape(-1)
    _unique, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    names = []
    for row in first:
        b = raw[row].tobytes()
        names.append(str(HostAddress.from_bytes(b[:20] if b[20] else b[:8])))
    return pa.DictionaryArray.from_arrays(pa.array(inverse.reshape(-1).astype(np.int32)),
                                          pa.array(names, pa.string())).cast(pa.string())


def _properties(text: pa.Array) -> tuple[pa.MapArray, list[pa.Array]] | None:
    """``name\x01value\x02...`` strings to a map, as string_to_properties reads them (pairs without
    a name or a value skipped), plus the TAGS, KEYS and UNIQ_KEY columns; None when a row names a
    property twice (the reference decoder keeps the last value)."""
    n = len(text)
    _validity, offsets_buf, data_buf = text.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1, offset=text.offset * 4).astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    used = data[offsets[0] : offsets[-1]]
    pair_seps = np.flatnonzero(used == 2) + offsets[0]
    name_seps = np.flatnonzero(used == 1) + offsets[0]
    starts = np.sort(np.concatenate([offsets[:-1], pair_seps + 1]))
    ends = np.sort(np.concatenate([pair_seps, offsets[1:]]))
    sep_index = np.searchsorted(name_seps, starts)
    sep = name_seps[np.minimum(sep_index, max(len(name_seps) - 1, 0))] if len(name_seps) else starts
    valid = (sep_index < len(name_seps)) & (sep > starts) & (sep < ends - 1)
    starts, ends, sep = starts[valid], ends[valid], sep[valid]
    parents = np.searchsorted(offsets[1:], starts, side="right")
    if len(starts):
        src = _Bytes(data)
        names = _views(src, data_buf, starts, sep - starts, pa.string())
        values = _views(src, data_buf, sep + 1, ends - sep - 1, pa.string())
    else:
        names = values = pa.array([], pa.string())
    if len(starts) > n:  # some row has two or more properties: is any name given twice in a row?
        codes = np.asarray(pc.dictionary_encode(names).indices, dtype=np.int64)
        distinct = int(codes.max()) + 1
        combined = parents * distinct + codes
        twice = (np.bincount(combined).max() > 1 if n * distinct <= 1 << 22
                 else len(np.unique(combined)) != len(combined))
        if twice:
            return None
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parents, minlength=n), out=map_offsets[1:])
    properties = pa.MapArray.from_arrays(pa.array(map_offsets), names, values, type=_MAP)
    picked = []
    for wanted in ("TAGS", "KEYS", "UNIQ_KEY"):
        hits = np.flatnonzero(np.asarray(pc.equal(names, wanted), dtype=bool)) if len(names) else np.zeros(0, int)
        take = np.full(n, -1, dtype=np.int64)
        take[parents[hits]] = hits
        missing = take < 0
        picked.append(values.take(pa.array(np.where(missing, 0, take), mask=missing)) if len(names)
                      else pa.nulls(n, pa.string()))
    return properties, picked


def decode_run(
    buf: Buffer, positions: list[int], base_offset: int, start_time: int | None, end_time: int | None,
    schema: pa.Schema,
) -> tuple[pa.RecordBatch, int] | None:
    """The records at ``positions`` of ``buf`` (whole v1 records) as one batch of ``schema``.

    ``base_offset`` is the physical offset of ``buf[0]`` (checked against each record's
    physicalOffset). Rows outside [start_time, end_time) by storeTimestamp are dropped.
    Returns (batch, bytes of the records kept), or None when the run needs the reference decoder.
    """
    src = _Bytes(np.frombuffer(buf, dtype=np.uint8))
    p = np.asarray(positions, dtype=np.int64)
    sys_flag = src.int64(p + SYS_FLAG_POS, ">i4")
    born_v6 = (sys_flag & SysFlag.BORNHOST_V6) != 0
    store_ts_at = p + BORN_HOST_POS + np.where(born_v6, 20, 8)
    store_ts = src.int64(store_ts_at, ">i8")
    if start_time is not None or end_time is not None:
        keep = np.ones(len(p), dtype=bool)
        if start_time is not None:
            keep &= store_ts >= start_time
        if end_time is not None:
            keep &= store_ts < end_time
        if not keep.all():
            p, sys_flag, born_v6 = p[keep], sys_flag[keep], born_v6[keep]
            store_ts_at, store_ts = store_ts_at[keep], store_ts[keep]
    size = src.int64(p, ">i4")
    store_v6 = (sys_flag & SysFlag.STOREHOST_V6) != 0
    store_host_at = store_ts_at + 8
    tail_at = store_host_at + np.where(store_v6, 20, 8)  # reconsumeTimes, preparedTransactionOffset, bodyLength
    body_len = src.int64(tail_at + 12, ">i4")
    body_at = tail_at + 16
    topic_len_at = body_at + body_len
    topic_len = src.arr[np.clip(topic_len_at, 0, len(src.arr) - 1)].astype(np.int64)
    props_len_at = topic_len_at + 1 + topic_len
    props_len = src.int64(np.clip(props_len_at, 0, len(src.arr) - 2), ">i2")
    phy = src.int64(p + PHYSICAL_OFFSET_POS, ">i8")
    if len(p) and (
        (body_len < 0).any() or (props_len < 0).any()
        or not np.array_equal(props_len_at + 2 + props_len, p + size)
        or not np.array_equal(phy, p + base_offset)
    ):
        return None
    data = pa.py_buffer(buf)
    try:
        topic = _views(src, data, props_len_at - topic_len, topic_len, pa.string())
        props_text = _views(src, data, props_len_at + 2, props_len, pa.string())
    except pa.ArrowInvalid:  # not UTF-8: the reference decoder substitutes U+FFFD
        return None
    parsed = _properties(props_text)
    if parsed is None:
        return None
    properties, (tags, keys, uniq_key) = parsed
    columns = [
        topic,
        pa.array(src.read(p + _QUEUE_ID_POS, ">i4").astype(np.int32)),
        pa.array(src.int64(p + QUEUE_OFFSET_POS, ">i8")),
        pa.array(phy),
        pa.array(size.astype(np.int32)),
        pa.array(src.read(p + _BODY_CRC_POS, ">i4").astype(np.int32)),
        pa.array(src.read(p + _FLAG_POS, ">i4").astype(np.int32)),
        pa.array(sys_flag.astype(np.int32)),
        pa.array(src.int64(p + _BORN_TIMESTAMP_POS, ">i8") * 1000, _TIMESTAMP),
        _hosts(src, p + BORN_HOST_POS, born_v6),
        pa.array(store_ts * 1000, _TIMESTAMP),
        _hosts(src, store_host_at, store_v6),
        pa.array(src.read(tail_at, ">i4").astype(np.int32)),
        tags,
        keys,
        uniq_key,
        properties,
        _views(src, data, body_at, body_len, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema), int(size.sum())
