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

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.message import (
    BORN_HOST_POS,
    MESSAGE_MAGIC_CODE,
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
    SYS_FLAG_POS,
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
_HEAD_SIZE = BORN_HOST_POS  # totalSize .. bornTimestamp: the fields every v1 record has at fixed positions
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAP = pa.map_(pa.string(), pa.string())
_NAME_VALUE = "\x01"
_PAIR = "\x02"


def walk_run(buf: bytes, pos: int, limit: int, max_rows: int, positions: list[int]) -> tuple[int, str]:
    """Follow v1 records from ``pos`` while they lie whole inside ``buf[:limit]``.

    Appends each record's position to ``positions`` (at most ``max_rows``); returns the
    position where it stopped and why: ``full`` (max_rows), ``more`` (the next record is not
    whole in the buffer: read on), ``zero`` (zero header: nothing written here),
    ``other`` (a blank record, a v2 or a corrupt one: for the reference decoder).
    """
    unpack = _HEAD.unpack_from
    append = positions.append
    count = 0
    buf_len = len(buf)
    while count < max_rows:
        if pos + 8 > buf_len:
            return pos, "more"
        size, magic = unpack(buf, pos)
        if magic == MESSAGE_MAGIC_CODE and size >= MIN_RECORD_SIZE:
            if pos + size > buf_len:
                return pos, "more"
            if pos >= limit:
                return pos, "limit"
            append(pos)
            pos += size
            count += 1
            continue
        if size == 0 and magic == 0:
            return pos, "zero"
        return pos, "other"
    return pos, "full"


def _gather(arr: npt.NDArray[np.uint8], at: I64, width: int) -> npt.NDArray[np.int64]:
    """Big-endian signed integers of ``width`` bytes at positions ``at`` (clipped inside ``arr``)."""
    idx = np.minimum(at[:, None] + np.arange(width), len(arr) - 1)
    raw = np.ascontiguousarray(arr[idx])
    return raw.view(f">i{width}").reshape(-1).astype(np.int64)


def _field(head: npt.NDArray[np.uint8], pos: int, width: int) -> npt.NDArray[np.int64]:
    """Big-endian signed integers of ``width`` bytes at column ``pos`` of the gathered headers."""
    return np.ascontiguousarray(head[:, pos : pos + width]).view(f">i{width}").reshape(-1).astype(np.int64)


def _views(arr: npt.NDArray[np.uint8], data: pa.Buffer, starts: I64, lengths: I64, target: pa.DataType) -> pa.Array:
    """``arr[start:start+length]`` per row as an Arrow array of ``target`` (binary or string)."""
    n = len(starts)
    views = np.zeros((n, 16), dtype=np.uint8)
    views[:, 0:4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
    window = np.minimum(starts[:, None] + np.arange(12), len(arr) - 1)
    inline = arr[window] * (np.arange(12) < lengths[:, None])
    long = lengths > 12
    views[~long, 4:16] = inline[~long]
    views[long, 4:8] = inline[long, 0:4]
    views[long, 12:16] = starts[long].astype("<i4").view(np.uint8).reshape(-1, 4)
    view_type = pa.binary_view()
    array = pa.Array.from_buffers(view_type, n, [None, pa.py_buffer(views), data])
    return array.cast(target)


def _hosts(arr: npt.NDArray[np.uint8], at: I64, v6: npt.NDArray[np.bool_]) -> pa.Array:
    """``ip:port`` / ``[ipv6]:port`` strings; a store sees few hosts, so each distinct one is formatted once."""
    n = len(at)
    window = np.minimum(at[:, None] + np.arange(20), len(arr) - 1)
    raw = np.zeros((n, 24), dtype=np.uint8)
    raw[:, :20] = arr[window] * (np.arange(20) < np.where(v6, 20, 8)[:, None])
    raw[:, 20] = v6
    words = raw.view(np.uint64)  # (n, 3)
    key = words[:, 0] ^ (words[:, 1] * np.uint64(0x9E3779B97F4A7C15)) ^ (words[:, 2] * np.uint64(0xC2B2AE3D27D4EB4F))
    _unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if not (raw == raw[first[inverse]]).all():  # a hash collision between two hosts: format each row
        first, inverse = np.arange(n), np.arange(n)
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
    names = _views(data, data_buf, starts, sep - starts, pa.string()) if len(starts) else pa.array([], pa.string())
    values = _views(data, data_buf, sep + 1, ends - sep - 1, pa.string()) if len(starts) else names
    if len(starts) > n:
        codes = np.asarray(pc.dictionary_encode(names).indices, dtype=np.int64)
        combined = parents * (int(codes.max()) + 1) + codes
        if len(np.unique(combined)) != len(combined):
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
    buf: bytes, positions: list[int], base_offset: int, start_time: int | None, end_time: int | None,
    schema: pa.Schema,
) -> tuple[pa.RecordBatch, int] | None:
    """The records at ``positions`` of ``buf`` (whole v1 records) as one batch of ``schema``.

    ``base_offset`` is the physical offset of ``buf[0]`` (checked against each record's
    physicalOffset). Rows outside [start_time, end_time) by storeTimestamp are dropped.
    Returns (batch, bytes of the records kept), or None when the run needs the reference decoder.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    p = np.asarray(positions, dtype=np.int64)
    head = np.ascontiguousarray(arr[p[:, None] + np.arange(_HEAD_SIZE)])  # records are whole: no clipping
    size = _field(head, 0, 4)
    sys_flag = _field(head, SYS_FLAG_POS, 4)
    born_v6 = (sys_flag & SysFlag.BORNHOST_V6) != 0
    store_v6 = (sys_flag & SysFlag.STOREHOST_V6) != 0
    born_at = p + BORN_HOST_POS
    store_ts_at = born_at + np.where(born_v6, 20, 8)
    store_ts = _gather(arr, store_ts_at, 8)
    if start_time is not None or end_time is not None:
        keep = np.ones(len(p), dtype=bool)
        if start_time is not None:
            keep &= store_ts >= start_time
        if end_time is not None:
            keep &= store_ts < end_time
        if not keep.all():
            p, size, sys_flag, born_v6, store_v6 = p[keep], size[keep], sys_flag[keep], born_v6[keep], store_v6[keep]
            head = head[keep]
            born_at, store_ts_at, store_ts = born_at[keep], store_ts_at[keep], store_ts[keep]
    n = len(p)
    store_host_at = store_ts_at + 8
    tail_at = store_host_at + np.where(store_v6, 20, 8)
    body_len = _gather(arr, tail_at + 12, 4)
    body_at = tail_at + 16
    topic_len_at = body_at + body_len
    topic_len = arr[np.clip(topic_len_at, 0, len(arr) - 1)].astype(np.int64)
    props_len_at = topic_len_at + 1 + topic_len
    props_len = _gather(arr, props_len_at, 2)
    phy = _field(head, PHYSICAL_OFFSET_POS, 8)
    if n and (
        (body_len < 0).any() or (props_len < 0).any()
        or not np.array_equal(props_len_at + 2 + props_len, p + size)
        or not np.array_equal(phy, p + base_offset)
    ):
        return None
    data = pa.py_buffer(buf)
    try:
        topic = _views(arr, data, props_len_at - topic_len, topic_len, pa.string())
        props_text = _views(arr, data, props_len_at + 2, props_len, pa.string())
    except pa.ArrowInvalid:  # not UTF-8: the reference decoder substitutes U+FFFD
        return None
    parsed = _properties(props_text)
    if parsed is None:
        return None
    properties, (tags, keys, uniq_key) = parsed
    columns = [
        topic,
        pa.array(_field(head, _QUEUE_ID_POS, 4).astype(np.int32)),
        pa.array(_field(head, QUEUE_OFFSET_POS, 8)),
        pa.array(phy),
        pa.array(size.astype(np.int32)),
        pa.array(_field(head, _BODY_CRC_POS, 4).astype(np.int32)),
        pa.array(_field(head, _FLAG_POS, 4).astype(np.int32)),
        pa.array(sys_flag.astype(np.int32)),
        pa.array(_field(head, _BORN_TIMESTAMP_POS, 8) * 1000, _TIMESTAMP),
        _hosts(arr, born_at, born_v6),
        pa.array(store_ts * 1000, _TIMESTAMP),
        _hosts(arr, store_host_at, store_v6),
        pa.array(_gather(arr, tail_at, 4).astype(np.int32)),
        tags,
        keys,
        uniq_key,
        properties,
        _views(arr, data, body_at, body_len, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema), int(size.sum())
