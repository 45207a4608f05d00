"""Differential test: the native ReceiveMessage response (native/src/grpc_convert.rs) against its
Python twin (message_convert.received_message_response_python).

Hypothesis builds stored messages with random properties (RocketMQ's own keys among user ones,
keys with runs of spaces, empty and missing message ids, FIFO groups, delivery times in the
forms Python's ``int()`` takes and the native twin leaves to it, transactional flags, trace
contexts), hosts, timestamps before 1970, negative queue ids and compressed bodies. The two
responses must parse to equal messages, and be byte-identical when map order cannot differ (at
most one user property); where the native twin declines, the broker's function gives the Python
twin's bytes.
"""

from __future__ import annotations

import zlib
from types import ModuleType
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_support import native_module

from rocketstore.broker.grpc_v2 import message_convert
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.common.message import HostAddress, StoredMessage, SysFlag

NATIVE: ModuleType = native_module()
EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

I32 = st.integers(-(2**31), 2**31 - 1)
MS = st.integers(-(2**45), 2**45)
TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=10)
OWN_KEYS = ["TAGS", "KEYS", "UNIQ_KEY", "__SHARDINGKEY", "TIMER_DELIVER_MS", "TRACE_CONTEXT", "TRAN_MSG", "DELAY",
            "CLUSTER", "WAIT", "REAL_TOPIC"]
VALUES = {
    "KEYS": st.sampled_from(["", "k1", "k1 k2", "  k1   k2 ", " ", "ключ 键"]),
    "UNIQ_KEY": st.sampled_from(["", "7F00000100002A9F0000000000000001"]),
    "TIMER_DELIVER_MS": st.one_of(MS.map(str), st.sampled_from([" 12", "+5", "1_000", "\uff10\uff17", "x", ""])),
    "TRAN_MSG": st.sampled_from(["true", "false", "TRUE"]),
}


@st.composite
def stored_messages(draw: st.DrawFn) -> StoredMessage:
    properties: dict[str, str] = {}
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.one_of(st.sampled_from(OWN_KEYS), TEXT))
        properties[key] = draw(VALUES.get(key, TEXT))
    compressed = draw(st.integers(0, 9)) == 0
    body = draw(st.binary(max_size=80))
    v6 = draw(st.booleans())
    born = HostAddress("::1" if v6 else draw(st.sampled_from(["127.0.0.1", "10.1.2.3"])), draw(I32))
    store = HostAddress("192.168.0.9", 10911)
    return StoredMessage(
        total_size=0, magic=0, body_crc=0, queue_id=draw(I32), flag=0,
        queue_offset=draw(st.integers(-(2**63), 2**63 - 1)),
        physical_offset=draw(st.integers(0, 2**40)), sys_flag=SysFlag.COMPRESSED if compressed else 0,
        born_timestamp=draw(MS), born_host=born, store_timestamp=draw(MS), store_host=store, reconsume_times=0,
        prepared_transaction_offset=0, body=zlib.compress(body) if compressed else body, topic=draw(TEXT),
        properties=properties)


def _python_or_error(stored: StoredMessage, **call: object) -> bytes | type[Exception]:
    try:
        return message_convert.received_message_response_python(stored, **call)  # type: ignore[arg-type]
    except ValueError as exc:  # e.g. a delivery time int() does not take
        return type(exc)


@EXAMPLES
@given(stored_messages(), TEXT, I32, MS, st.sampled_from(["", "192.168.0.9:10911"]))
def test_native_response_equals_the_python_one(stored: StoredMessage, handle: str, attempt: int, invisible_ms: int,
                                               store_host: str) -> None:
    call = {"receipt_handle": handle, "attempt": attempt, "invisible_ms": invisible_ms, "store_host": store_host}
    expected = _python_or_error(stored, **call)
    native = NATIVE.received_message_response(stored, system_keys=message_convert.SYSTEM_PROPERTY_KEYS, **call)
    if native is None:  # declined: only what the twin is documented to leave to Python
        delivery = stored.properties.get("TIMER_DELIVER_MS")
        assert stored.sys_flag & SysFlag.COMPRESSED or (delivery is not None and not _plain_int(delivery))
    else:
        assert isinstance(expected, bytes), "the native twin answered where the Python one fails"
        assert pb.ReceiveMessageResponse.FromString(native) == pb.ReceiveMessageResponse.FromString(expected)
        if len(message_convert.user_properties(stored.properties)) <= 1:
            assert native == expected
    # the broker's function when the extension is on, whatever this process's ROCKETSTORE_NATIVE says
    # (the pure-Python rerun of this tier sets it to 0)
    with mock.patch.object(message_convert, "NATIVE", NATIVE):
        try:
            chosen: bytes | type[Exception] = message_convert._received_message_response_native(
                stored, **call)  # type: ignore[arg-type]
        except ValueError as exc:
            chosen = type(exc)
    if isinstance(chosen, bytes) and isinstance(expected, bytes):
        assert pb.ReceiveMessageResponse.FromString(chosen) == pb.ReceiveMessageResponse.FromString(expected)
    else:
        assert chosen == expected


def _plain_int(text: str) -> bool:
    """What Rust's i64 parse takes: an optional sign and ASCII digits, within range."""
    digits = text[1:] if text[:1] in "+-" else text
    return digits.isascii() and digits.isdigit() and -(2**63) <= int(text) < 2**63
