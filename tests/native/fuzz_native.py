"""Fuzz harness (atheris): the Rust extension's functions against their pure-Python twins.

Run it by hand for as long as you like::

    python tests/native/fuzz_native.py CORPUS_DIR -max_total_time=600

``test_native_fuzz.py`` writes a seed corpus of real CommitLog bytes and remoting frames and
runs this for a bounded time in CI. Each input drives one call of ``scan_dispatch``,
``put_index_entries``, ``encode_record``, ``decode_frame`` or ``decode_header_fields`` (see
:func:`make_input` for the layout) with arguments picked from it: bytes, bytearray, mmap and
memoryview buffers (some strided, some read-only), starts and limits inside, at and past the end
of the buffer, negative and beyond 64 bits, index files with stale slots and odd header states,
encode fields of every size around their limits, frames and extFields off the network. The checks:

* The process survives: a segfault or abort is a libFuzzer crash, and a Rust panic (PyO3's
  ``PanicException``, which derives from ``BaseException``) is turned into a failure here.
* Arguments inside the native contract (integers that fit the Rust types, contiguous buffers,
  what ``index.rs``'s ``validate`` accepts) give exactly what the Python twin gives: the same
  scan result but for the corrupt-record wording, which each implementation owns (as in
  ``test_native_differential.py``), the same record bytes, the same index buffer and header.
  The remoting fast paths may also hand an input back (None) for Python to decode; what they do
  decode must equal what Python makes of it, and Python must not refuse it.
* Arguments outside it make the native function raise ``ValueError``, ``OverflowError`` or
  ``TypeError``, never return. The Python twins do not validate (a negative ``start`` reads
  from the end of the buffer, as ``struct`` offsets do; a negative ``max_records`` scans
  nothing), so there they are no reference and are not called.

Coverage: atheris instruments Python bytecode only. The Rust code is a black box to it, so the
search is steered by the coverage of the Python twins (and of this harness's argument picking),
and the native side is fuzzed blindly, checked differentially. It is still worth it: the twins
implement the same format with the same checks in the same order, so an input that opens a new
path through ``decode_record`` mostly opens the matching path through ``record::decode`` (the
magic codes, the length checks, the v2 topic length, the property parsing); and the differential
check catches what no coverage could, a wrong answer that is not a crash. What it cannot steer
towards is a branch only the Rust side has (an overflow in its own arithmetic, say); the edge
values this harness picks on purpose (extreme integers, starts past the end) are there for those.
"""

from __future__ import annotations

import inspect
import mmap
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import atheris
from native_support import header_decode_plans

import rocketstore.common._native as native
from rocketstore.common import message
from rocketstore.common.message import encode_record_python
from rocketstore.remoting import command, header_codec
from rocketstore.store import consume_queue, dispatch_scan, index_file
from rocketstore.store.dispatch_scan import SCAN_MAX_RECORDS, scan_python
from rocketstore.store.index_file import INDEX_HEADER_SIZE, INDEX_KEY_ENTRY, index_file_size, put_index_entries_python

#: Bytes at the start of an input that pick the target (the first) and the arguments (the rest);
#: what follows is the payload: the CommitLog stretch, the index key entries, the encode fields,
#: the remoting frame, the header field values.
CONTROL_SIZE = 32
SCAN, INDEX, ENCODE, FRAME, HEADER_FIELDS = TARGETS = range(5)

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
USIZE_END = 2**64
I32_EDGES = (I32_MIN, I32_MAX, I32_MIN - 1, I32_MAX + 1, USIZE_END)
I64_EDGES = (0, I64_MIN, I64_MAX, I64_MIN - 1, I64_MAX + 1)
#: errors a refused argument may raise; anything else from the native side is a bug
REFUSALS = (ValueError, OverflowError, TypeError)
#: index dimensions above this get no real file: they only exercise the size checks
MAX_INDEX_FILE = 1 << 16
#: every typed header's decode plan (and SEND_MESSAGE_V2's one-letter names): the header target picks one
DECODE_PLANS = [plan for _, plan in header_decode_plans()]
#: header values at the edges of Java's integer syntax and ranges, and of str.lower()
FIELD_VALUES = ["", "+", "-", "-0", "+7", "007", " 1", "1_000", "\u0661", "0x10", "1e3", "true", "TRUE", "tRuE",
                "tru\u0117", "\u0130", "2147483647", "2147483648", "-2147483648", "-2147483649",
                "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
                "9" * 40, "\ud800"]
#: how much of a failing call's buffers (as hex) and results (as repr) a failure message shows
SHOWN_BYTES = 4096


def make_input(target: int, payload: bytes, control: bytes = b"") -> bytes:
    """An input for ``target``: ``control`` (zero-padded; all zeros picks typical, in-contract
    arguments such as a whole-buffer scan) followed by ``payload``."""
    return bytes([target]) + control.ljust(CONTROL_SIZE - 1, b"\0")[: CONTROL_SIZE - 1] + payload


def test_one_input(data: bytes) -> None:
    """libFuzzer's entry point: one call of one native function, checked against its twin."""
    control = atheris.FuzzedDataProvider(data[1:CONTROL_SIZE])
    payload = data[CONTROL_SIZE:]
    target = data[0] % len(TARGETS) if data else SCAN
    with ExitStack() as buffers:
        if target == SCAN:
            _scan(control, payload, buffers)
        elif target == INDEX:
            _index(control, payload, buffers)
        elif target == ENCODE:
            _encode(control, atheris.FuzzedDataProvider(payload), buffers)
        elif target == FRAME:
            _frame(control, payload, buffers)
        else:
            _header_fields(control, atheris.FuzzedDataProvider(payload))
    # leaving the stack closes the mmaps: a BufferError there means the native call kept an export


def _int(control: atheris.FuzzedDataProvider, typical: Callable[[], int], edges: Sequence[int]) -> int:
    """Mostly ``typical()`` (always, from zero control bytes), otherwise one of ``edges``."""
    if control.ConsumeIntInRange(0, 7) < 6:
        return typical()
    return int(control.PickValueInList(list(edges)))


def _buffer(
    control: atheris.FuzzedDataProvider, content: bytes, buffers: ExitStack, *, writable: bool,
) -> tuple[Any, bool]:
    """``content`` in a buffer of a kind the control bytes pick, and whether the native side must
    accept that kind (contiguous, and writable when ``writable``)."""
    kind = control.ConsumeIntInRange(0, 4)
    if kind == 1 and content:  # an anonymous mapping, as the store's segments are mapped files
        mapped = buffers.enter_context(mmap.mmap(-1, len(content)))
        mapped[:] = content
        return mapped, True
    if kind == 2 and len(content) > 1:  # every other byte of a twice-as-long buffer: not contiguous
        doubled = bytearray(2 * len(content))
        doubled[::2] = content
        return memoryview(doubled)[::2], False
    if kind == 3:
        return memoryview(content), not writable
    if kind == 4:
        return bytes(content), not writable
    return bytearray(content), True


def _check(describe: Callable[[], str], in_contract: bool, call_native: Callable[[], object],
           call_python: Callable[[], object], *, hands_back: bool = False) -> None:
    """The rules of the module doc for one call; ``describe`` names it in a failure. With
    ``hands_back``, a native None means "decode this in Python" and is not compared."""
    try:
        got = call_native()
    except REFUSALS as exc:
        if in_contract:
            raise AssertionError(f"native refused arguments inside its contract: {exc!r}\n{describe()}") from exc
        return
    except BaseException as exc:
        if type(exc).__name__ == "PanicException" or isinstance(exc, Exception):
            raise AssertionError(f"native raised {type(exc).__name__}: {exc}\n{describe()}") from exc
        raise  # KeyboardInterrupt and the like
    if not in_contract:
        raise AssertionError(f"native accepted arguments outside its contract, returned {_short(got)}\n{describe()}")
    if hands_back and got is None:
        return
    try:
        expected = call_python()
    except Exception as exc:
        raise AssertionError(
            f"the Python twin raised {exc!r} where native returned {_short(got)}\n{describe()}") from exc
    if got != expected:
        raise AssertionError(
            f"native and Python differ\nnative: {_short(got)}\nPython: {_short(expected)}\n{describe()}")


def _short(value: object) -> str:
    text = repr(value)
    return text[:SHOWN_BYTES] + ("..." if len(text) > SHOWN_BYTES else "")


def _hex(data: object) -> str:
    raw = bytes(data)  # type: ignore[call-overload]
    return raw[:SHOWN_BYTES].hex() + ("..." if len(raw) > SHOWN_BYTES else "")


def _position(control: atheris.FuzzedDataProvider, size: int, typical: Callable[[], int]) -> int:
    return _int(control, typical, (size + 1, size + 8, I64_MAX, I64_MAX + 1, USIZE_END - 1, USIZE_END, -1, I64_MIN))


def _scan(control: atheris.FuzzedDataProvider, log: bytes, buffers: ExitStack) -> None:
    buf, accepted = _buffer(control, log, buffers, writable=False)
    size = len(log)
    start = _position(control, size, lambda: control.ConsumeIntInRange(0, size))
    limit = _position(control, size, lambda: size - control.ConsumeIntInRange(0, size))
    max_records = _int(control, lambda: SCAN_MAX_RECORDS - control.ConsumeIntInRange(0, SCAN_MAX_RECORDS),
                       (0, -1, USIZE_END - 1, USIZE_END))
    index_enabled = not control.ConsumeBool()
    levels = tuple(control.ConsumeIntInRange(0, 2**40) for _ in range(control.ConsumeIntInRange(1, 3)))
    in_contract = accepted and all(0 <= n < USIZE_END for n in (start, limit, max_records))

    def without_reason(raw: tuple[Any, ...]) -> tuple[Any, ...]:
        return raw[:3] + raw[4:]

    _check(
        lambda: (f"scan_dispatch({type(buf).__name__} of bytes.fromhex('{_hex(log)}'), start={start}, limit={limit}, "
                 f"max_records={max_records}, index_enabled={index_enabled}, delay_levels_ms={levels})"),
        in_contract,
        lambda: without_reason(native.scan_dispatch(buf, start, limit, max_records, index_enabled, levels)),
        lambda: without_reason(scan_python(buf, start, limit, max_records, index_enabled, levels)),
    )


def _index(control: atheris.FuzzedDataProvider, payload: bytes, buffers: ExitStack) -> None:
    dims = (0, -1, I32_MAX, I32_MAX + 1, I64_MAX + 1)
    slots = _int(control, lambda: control.ConsumeIntInRange(1, 64), dims)
    num = _int(control, lambda: control.ConsumeIntInRange(1, 64), dims)
    needed = index_file_size(slots, num) if slots > 0 and num > 0 else INDEX_HEADER_SIZE
    if needed > MAX_INDEX_FILE:
        size = control.ConsumeIntInRange(0, 1024)
    else:
        size = _int(control, lambda: needed + control.ConsumeIntInRange(0, 8), (needed - 1, 0, INDEX_HEADER_SIZE))
    # the payload gives the key entries, then what the file held before (stale slots, old entries)
    whole = min(255 - control.ConsumeIntInRange(0, 255), len(payload) // INDEX_KEY_ENTRY.size)
    entries = payload[: whole * INDEX_KEY_ENTRY.size + _int(control, lambda: 0, (1, 7, 19))]
    before = payload[len(entries):][:size].ljust(size, b"\0")
    start = _int(control, lambda: INDEX_KEY_ENTRY.size * control.ConsumeIntInRange(0, whole),
                 (1, 19, len(entries) + INDEX_KEY_ENTRY.size, -INDEX_KEY_ENTRY.size, USIZE_END))
    skip_below = _int(control, lambda: control.ConsumeIntInRange(-5, 1 << 40), I64_EDGES)
    header = (
        *(_int(control, lambda: control.ConsumeInt(8), I64_EDGES) for _ in range(4)),
        _int(control, lambda: control.ConsumeIntInRange(0, max(slots, 0)), (-1, I32_MAX, I32_MAX + 1)),
        _int(control, lambda: 1 + control.ConsumeIntInRange(0, max(num, 0)), (0, -1, I32_MAX, I32_MAX + 1)),
    )
    native_buf, accepted = _buffer(control, before, buffers, writable=True)
    python_buf = bytearray(before)
    in_contract = (
        accepted and 1 <= slots <= I32_MAX and 1 <= num <= I32_MAX and size >= needed
        and len(entries) % INDEX_KEY_ENTRY.size == 0 and 0 <= start <= len(entries)
        and start % INDEX_KEY_ENTRY.size == 0 and I64_MIN <= skip_below <= I64_MAX
        and all(I64_MIN <= n <= I64_MAX for n in header[:4]) and all(0 <= n <= I32_MAX for n in header[4:])
        # hashSlotCount may grow by one per entry: refused where that could overflow an int
        and header[4] + (len(entries) - start) // INDEX_KEY_ENTRY.size <= I32_MAX
    )
    _check(
        lambda: (f"put_index_entries({type(native_buf).__name__} of bytes.fromhex('{_hex(before)}'), "
                 f"hash_slot_num={slots}, index_num={num}, entries=bytes.fromhex('{_hex(entries)}'), start={start}, "
                 f"skip_below={skip_below}, header={header})"),
        in_contract,
        lambda: (native.put_index_entries(native_buf, slots, num, entries, start, skip_below, header),
                 bytes(native_buf)),
        lambda: (put_index_entries_python(python_buf, slots, num, entries, start, skip_below, header),
                 bytes(python_buf)),
    )


def _encode(control: atheris.FuzzedDataProvider, fields: atheris.FuzzedDataProvider, buffers: ExitStack) -> None:
    def sized(typical_max: int, edges: Sequence[int]) -> bytes:
        length = _int(control, lambda: control.ConsumeIntInRange(0, typical_max), edges)
        return fields.ConsumeBytes(length).ljust(length, b"x")

    def i32() -> int:
        return _int(control, lambda: fields.ConsumeInt(4), I32_EDGES)

    def i64() -> int:
        return _int(control, lambda: fields.ConsumeInt(8), I64_EDGES)

    topic = sized(127, (255, 256, 300))
    body_content = sized(255, (0, 4096))
    properties = sized(255, (32767, 32768, 40000))
    hosts = [_int(control, lambda: 20 if control.ConsumeBool() else 8, (0, 6, 16, 21)) for _ in range(2)]
    born_host, store_host = (fields.ConsumeBytes(n).ljust(n, b"\0") for n in hosts)
    queue_id, flag, sys_flag, reconsume_times = i32(), i32(), i32(), i32()
    born_timestamp, prepared_transaction_offset = i64(), i64()
    crc = i32() if control.ConsumeBool() else None
    body, accepted = _buffer(control, body_content, buffers, writable=False)
    arguments: dict[str, Any] = dict(
        topic_data=topic, body=body, properties_data=properties, queue_id=queue_id, flag=flag, sys_flag=sys_flag,
        born_timestamp=born_timestamp, born_host=born_host, store_host=store_host, reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset, crc=crc,
    )
    in_contract = (
        accepted and len(topic) <= 255 and len(properties) <= 32767 and set(hosts) <= {8, 20}
        and all(I32_MIN <= n <= I32_MAX for n in (queue_id, flag, sys_flag, reconsume_times))
        and all(I64_MIN <= n <= I64_MAX for n in (born_timestamp, prepared_transaction_offset))
        and (crc is None or I32_MIN <= crc <= I32_MAX)
    )
    _check(
        lambda: "encode_record(" + ", ".join(
            f"{name}={type(value).__name__} of bytes.fromhex('{_hex(value)}')"
            if isinstance(value, bytes | bytearray | memoryview | mmap.mmap) else f"{name}={value!r}"
            for name, value in arguments.items()) + ")",
        in_contract,
        lambda: bytes(native.encode_record(**arguments)),
        lambda: bytes(encode_record_python(**arguments)),
    )


def _frame(control: atheris.FuzzedDataProvider, frame: bytes, buffers: ExitStack) -> None:
    buf, accepted = _buffer(control, frame, buffers, writable=False)

    def decoded(fast: object) -> object:
        # the command the fast path's fields make, built as the broker builds it
        return None if fast is None else command.command_from_native(fast)

    _check(
        lambda: f"decode_frame({type(buf).__name__} of bytes.fromhex('{_hex(frame)}'))",
        accepted,
        lambda: decoded(native.decode_frame(buf)),
        lambda: command.decode_frame_python(buf),
        hands_back=True,
    )


def _header_fields(control: atheris.FuzzedDataProvider, fields_data: atheris.FuzzedDataProvider) -> None:
    plan = control.PickValueInList(DECODE_PLANS)

    def value() -> object:
        kind = control.ConsumeIntInRange(0, 7)
        if kind < 3:
            return control.PickValueInList(FIELD_VALUES)
        if kind < 5:
            return str(fields_data.ConsumeInt(control.ConsumeIntInRange(1, 10)))
        if kind == 5:
            return fields_data.ConsumeIntInRange(0, 9)  # not a string: extFields off JSON can hold any value
        return fields_data.ConsumeUnicode(control.ConsumeIntInRange(0, 12))

    fields = {name: value() for _, name, _, _, _, _ in plan if control.ConsumeIntInRange(0, 4) < 4}
    for _ in range(control.ConsumeIntInRange(0, 2)):
        fields[fields_data.ConsumeUnicode(2)] = fields_data.ConsumeUnicode(3)
    _check(
        lambda: f"decode_header_fields({fields!r}, {plan!r})",
        True,
        lambda: native.decode_header_fields(fields, plan),
        lambda: header_codec.decode_fields_python(fields, plan, "fuzzed"),
        hands_back=True,
    )


def main() -> None:
    """Instrument the Python twins (and this harness), then hand the command line to libFuzzer.

    Only the functions of the modules that decode, scan, index and pick arguments: instrumenting
    everything loaded (``atheris.instrument_all``) takes half a minute, mostly on the standard library.
    """
    for module in (message, dispatch_scan, consume_queue, index_file, command, header_codec, sys.modules[__name__]):
        for function in vars(module).values():
            if inspect.isfunction(function) and function.__module__ == module.__name__:
                atheris.instrument_func(function)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
