"""Differential tests of the remoting fast paths: Rust frame decoding and JSON frame encoding
against the pure-Python reference in rocketstore.remoting.command.

The native functions handle the usual frame and return None for anything else, which Python
then decodes or refuses. So the properties are: whatever native returns equals what Python
makes of the same bytes; native never accepts a frame Python refuses; and the frames real
clients send (string extFields, in-range integers) do take the native path.
"""

from __future__ import annotations

import json
import struct
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from native_support import native_module

from rocketstore.remoting.codes import LanguageCode, RequestCode, SerializeType
from rocketstore.remoting.command import (
    ProtocolError,
    RemotingCommand,
    command_from_native,
    decode_frame_python,
    encode_frame_python,
)

NATIVE: ModuleType = native_module()
EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

I32 = st.integers(-(2**31), 2**31 - 1)
ANY_TEXT = st.text(max_size=12)  # control characters, quotes, non-ASCII, lone surrogates
PLAIN_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


def commands(text: st.SearchStrategy[str], serialize: st.SearchStrategy[SerializeType]) -> st.SearchStrategy[
        RemotingCommand]:
    return st.builds(
        RemotingCommand,
        code=st.one_of(st.integers(-(2**15), 2**15 - 1), st.sampled_from(list(RequestCode))),
        opaque=I32, flag=st.integers(0, 3), remark=st.one_of(st.none(), text),
        ext_fields=st.dictionaries(text, text, max_size=6), body=st.binary(max_size=40),
        language=st.sampled_from([int(c) for c in LanguageCode]), version=st.integers(-(2**15), 2**15 - 1),
        serialize_type=serialize,
    )


def python_decode(frame: bytes) -> RemotingCommand | ProtocolError:
    try:
        return decode_frame_python(frame)
    except ProtocolError as exc:
        return exc


def check_same(frame: bytes) -> bool:
    """Native's answer (if any) equals Python's; True when native took the frame."""
    expected = python_decode(frame)
    fast = NATIVE.decode_frame(frame)
    if fast is None:
        return False
    assert not isinstance(expected, ProtocolError), f"native accepted a frame Python refuses: {expected}"
    assert command_from_native(fast) == expected
    return True


@EXAMPLES
@given(cmd=commands(ANY_TEXT, st.just(SerializeType.JSON)))
def test_json_encoding_matches_the_python_reference(cmd: RemotingCommand) -> None:
    fast = NATIVE.encode_json_frame(cmd.code, cmd.ext_fields, cmd.flag, "JAVA", cmd.opaque, cmd.remark,
                                    cmd.version, cmd.body)
    cmd.language = LanguageCode.JAVA
    try:
        expected: bytes | Exception = encode_frame_python(cmd)
    except UnicodeEncodeError as exc:  # lone surrogates: Python refuses, native must hand over
        expected = exc
    if fast is not None:
        assert fast == expected


@EXAMPLES
@given(cmd=commands(PLAIN_TEXT, st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])))
def test_usual_frames_take_the_native_path_and_decode_alike(cmd: RemotingCommand) -> None:
    frame = encode_frame_python(cmd)[4:]
    assert check_same(frame), "a frame as real clients send it fell back to Python"
    if cmd.serialize_type is SerializeType.JSON:
        fast = NATIVE.encode_json_frame(cmd.code, cmd.ext_fields, cmd.flag, "JAVA", cmd.opaque, cmd.remark,
                                        cmd.version, cmd.body)
        cmd.language = LanguageCode.JAVA
        assert fast == encode_frame_python(cmd), "a usual command fell back to the Python encoder"


@st.composite
def json_variants(draw: st.DrawFn) -> bytes:
    """JSON headers as other writers might shape them: any key order and spacing, missing or null
    fields, floats, bools, numbers out of range, nested or non-string extFields, duplicates."""
    value = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False),
                      PLAIN_TEXT, st.lists(st.integers(), max_size=2))
    fields: dict[str, object] = {}
    for key in draw(st.lists(st.sampled_from(["code", "language", "version", "opaque", "flag", "remark",
                                              "extFields", "serializeTypeCurrentRPC", "other"]), max_size=9)):
        if key == "extFields":
            fields[key] = draw(st.one_of(value, st.dictionaries(PLAIN_TEXT, st.one_of(PLAIN_TEXT, value),
                                                                max_size=3)))
        elif key == "language":
            fields[key] = draw(st.one_of(value, st.sampled_from(["JAVA", "CPP", "GO", "NOPE"])))
        else:
            fields[key] = draw(st.one_of(value, I32))
    text = json.dumps(fields, indent=draw(st.sampled_from([None, 1])), ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()) and fields:  # a duplicate key: the later one wins in both
        text = text[:-1] + f', "code": {draw(I32)}' + "}"
    header = text.encode()
    return struct.pack(">i", len(header)) + header + draw(st.binary(max_size=8))


@EXAMPLES
@given(frame=json_variants())
def test_unusual_json_headers_decode_alike_or_fall_back(frame: bytes) -> None:
    check_same(frame)


@EXAMPLES
@given(cmd=commands(PLAIN_TEXT, st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])), data=st.data())
def test_damaged_frames_decode_alike_or_fall_back(cmd: RemotingCommand, data: st.DataObject) -> None:
    frame = bytearray(encode_frame_python(cmd)[4:])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del frame[data.draw(st.integers(0, len(frame))):]
    check_same(bytes(frame))


@EXAMPLES
@given(frame=st.binary(max_size=64))
def test_arbitrary_bytes_decode_alike_or_fall_back(frame: bytes) -> None:
    check_same(frame)


@EXAMPLES
@given(fields=st.lists(st.one_of(st.none(), I32, PLAIN_TEXT, st.dictionaries(PLAIN_TEXT, PLAIN_TEXT, max_size=2)),
                       max_size=8),
       shape=st.sampled_from(["array", "padded object", "string", "number"]))
def test_json_headers_that_are_not_objects_fall_back(fields: list[object], shape: str) -> None:
    """The native decoder reads the header into a struct, and serde reads a struct from a JSON
    array too (its fields by position): Python refuses every header that is not an object."""
    header = {
        "array": json.dumps(fields),
        "padded object": " \t\r\n" + json.dumps({"code": 310, "extFields": {"a": "b"}}),
        "string": json.dumps("code"),
        "number": "310",
    }[shape].encode()
    frame = struct.pack(">i", len(header)) + header
    took = check_same(frame)
    assert took == (shape == "padded object")


@EXAMPLES
@given(cmd=commands(ANY_TEXT, st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ])),
       cut=st.integers(0, 40))
def test_the_leading_json_code_is_the_first_frames_code_or_none(cmd: RemotingCommand, cut: int) -> None:
    """``leading_json_code``, the look a connection's read gets before the plain-send path is
    prepared: the code of a JSON-headed first frame whose header has arrived (its body need not
    have), None for a binary header or a header cut short."""
    try:
        frame = encode_frame_python(cmd)
    except UnicodeEncodeError:  # lone surrogates: no frame to look at
        return
    header_end = 8 + (struct.unpack(">i", frame[4:8])[0] & 0xFFFFFF)
    expected = cmd.code if cmd.serialize_type is SerializeType.JSON else None
    assert NATIVE.leading_json_code(frame + frame) == expected  # the next frame is not looked at
    assert NATIVE.leading_json_code(frame[:header_end]) == expected
    assert NATIVE.leading_json_code(frame[:max(0, header_end - 1 - cut)]) is None
