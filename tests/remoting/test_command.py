"""RemotingCommand frames: exact bytes, round trips, the streaming FrameDecoder and hostile input.

Expected frames are built here field by field with ``struct`` from the layout RocketMQ 4.9.8
uses (RemotingCommand.encode, RocketMQSerializable), not with the encoder under test. Whatever
bytes arrive, decoding may only raise ProtocolError: the server turns that into closing one
connection, while any other exception would be a bug in the codec.
"""

from __future__ import annotations

import json
import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import (
    MAX_FRAME_SIZE,
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    decode_frame,
)


def binary_header(code: int, language: int, version: int, opaque: int, flag: int, remark: bytes,
                  ext: list[tuple[bytes, bytes]]) -> bytes:
    ext_block = b"".join(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext)
    return (struct.pack(">h", code) + struct.pack(">B", language) + struct.pack(">h", version)
            + struct.pack(">i", opaque) + struct.pack(">i", flag)
            + struct.pack(">i", len(remark)) + remark
            + struct.pack(">i", len(ext_block)) + ext_block)


def frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    return (struct.pack(">i", 4 + len(header) + len(body)) + struct.pack(">i", serialize_type << 24 | len(header))
            + header + body)


# -- exact bytes -------------------------------------------------------------------------------


def test_binary_frame_bytes_field_by_field() -> None:
    cmd = RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2, opaque=7, flag=RPC_ONEWAY, remark="hé",
        ext_fields={"a": "group", "e": "3"}, body=b"\x00body", language=LanguageCode.JAVA, version=453,
        serialize_type=SerializeType.ROCKETMQ,
    )
    header = binary_header(310, 0, 453, 7, 2, "hé".encode(), [(b"a", b"group"), (b"e", b"3")])
    assert cmd.encode() == frame(1, header, b"\x00body")


def test_binary_frame_without_remark_or_fields() -> None:
    cmd = RemotingCommand(code=ResponseCode.SUCCESS, opaque=-5, flag=RPC_TYPE_RESPONSE,
                          language=LanguageCode.GO, version=0, serialize_type=SerializeType.ROCKETMQ)
    assert cmd.encode() == frame(1, binary_header(0, 9, 0, -5, 1, b"", []))


def test_json_frame_bytes_are_fastjsons_layout() -> None:
    cmd = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=42, remark="no msg",
                          ext_fields={"topic": "T", "queueId": "1"}, body=b"xyz", language=LanguageCode.CPP,
                          version=453)
    # fastjson writes the bean's properties sorted by name, nulls left out, no blanks.
    header = (b'{"code":11,"extFields":{"topic":"T","queueId":"1"},"flag":0,"language":"CPP","opaque":42,'
              b'"remark":"no msg","serializeTypeCurrentRPC":"JSON","version":453}')
    assert cmd.encode() == frame(0, header, b"xyz")


def test_json_frame_without_remark_leaves_it_out() -> None:
    data = RemotingCommand(code=0, opaque=1, flag=1, language=LanguageCode.JAVA, version=1).encode()
    (length, mark) = struct.unpack_from(">ii", data)
    assert length == len(data) - 4 and mark >> 24 == 0
    header = json.loads(data[8 : 8 + (mark & 0xFFFFFF)])
    assert "remark" not in header
    assert header == {"code": 0, "extFields": {}, "flag": 1, "language": "JAVA", "opaque": 1,
                      "serializeTypeCurrentRPC": "JSON", "version": 1}


def test_decode_of_handmade_binary_frame() -> None:
    header = binary_header(11, 1, 300, 99, 0, b"r", [(b"topic", "tópico".encode()), (b"", b"")])
    cmd = decode_frame(frame(1, header, b"BODY")[4:])
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark) == (11, 1, 300, 99, 0, "r")
    assert cmd.ext_fields == {"topic": "tópico", "": ""}
    assert cmd.body == b"BODY" and cmd.serialize_type is SerializeType.ROCKETMQ


def test_decode_of_handmade_json_frame_coerces_scalar_ext_values() -> None:
    header = json.dumps({"code": 34, "language": "GO", "version": 317, "opaque": 3, "flag": 0,
                         "extFields": {"n": 5, "b": True, "s": "x", "none": None}}).encode()
    cmd = decode_frame(frame(0, header)[4:])
    assert cmd.code == 34 and cmd.language == LanguageCode.GO and cmd.version == 317 and cmd.opaque == 3
    assert cmd.ext_fields == {"n": "5", "b": "true", "s": "x"}
    assert cmd.remark is None and cmd.body == b"" and cmd.serialize_type is SerializeType.JSON


def test_json_unknown_language_name_is_other() -> None:
    cmd = decode_frame(frame(0, b'{"code":1,"language":"COBOL"}')[4:])
    assert cmd.language == LanguageCode.OTHER and cmd.opaque == 0 and cmd.flag == 0


# -- round trips -------------------------------------------------------------------------------

texts = st.text(max_size=20)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    remark=st.none() | st.text(min_size=1, max_size=30),
    ext_fields=st.dictionaries(texts, texts, max_size=5),
    body=st.binary(max_size=64),
    language=st.sampled_from(list(LanguageCode)),
    version=st.integers(-(2**15), 2**15 - 1),
    serialize_type=st.sampled_from(list(SerializeType)),
)


@given(commands)
def test_round_trip(cmd: RemotingCommand) -> None:
    data = cmd.encode()
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    assert decode_frame(data[4:]) == cmd
    assert FrameDecoder().feed(data) == [cmd]


def test_response_echoes_opaque_and_encoding() -> None:
    request = RemotingCommand(code=RequestCode.HEART_BEAT, opaque=77, serialize_type=SerializeType.ROCKETMQ,
                              language=LanguageCode.CPP)
    response = request.response(ResponseCode.SUCCESS, remark="ok", ext_fields={"k": "v"}, body=b"b")
    assert response.is_response and not response.is_oneway and not request.is_response
    assert (response.opaque, response.serialize_type, response.language) == (77, SerializeType.ROCKETMQ, 1)
    assert decode_frame(response.encode()[4:]) == response


# -- FrameDecoder ------------------------------------------------------------------------------

SAMPLE = [
    RemotingCommand(code=310, opaque=1, ext_fields={"a": "g", "b": "t"}, body=b"hello",
                    serialize_type=SerializeType.ROCKETMQ),
    RemotingCommand(code=0, opaque=1, flag=1, remark="done"),
    RemotingCommand(code=11, opaque=2, ext_fields={"topic": "T"}, body=b"\x00" * 300),
]
STREAM = b"".join(c.encode() for c in SAMPLE)


def test_split_at_every_byte_boundary() -> None:
    for cut in range(len(STREAM) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:])
        assert got == SAMPLE, cut
        assert decoder.buffered == 0


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    got = []
    for i in range(len(STREAM)):
        before = len(got)
        got += decoder.feed(STREAM[i : i + 1])
        if len(got) > before:  # a frame completes exactly at its last byte and nothing stays behind
            assert decoder.buffered == 0
    assert got == SAMPLE and decoder.buffered == 0


def test_several_frames_in_one_feed_keep_the_partial_rest() -> None:
    decoder = FrameDecoder()
    extra = SAMPLE[0].encode()
    assert decoder.feed(STREAM + extra[:10]) == SAMPLE
    assert decoder.buffered == 10
    assert decoder.feed(extra[10:]) == [SAMPLE[0]]


def test_large_frame_in_small_reads_is_not_copied_over_and_over() -> None:
    """A 16 MiB frame fed in 64 KiB reads allocates about its own size, not 256 growing prefixes.

    Deterministic rather than timed: tracemalloc's peak during each feed, above what was
    allocated when the feed began, counts the bytes that feed allocated (a copy needs one). A
    decoder that re-copies the buffered prefix on every read peaks at that prefix each time,
    about 2 GiB in all; one that appends to its buffer and copies the frame out once allocates
    a small multiple of 16 MiB (the buffer's growth slack, the frame's copy out of it and the body
    taken out of that included).
    """
    body = bytes(range(256)) * ((MAX_FRAME_SIZE - 4096) // 256)
    data = RemotingCommand(code=11, opaque=9, body=body).encode()
    pieces = [data[start : start + 64 * 1024] for start in range(0, len(data), 64 * 1024)]
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    allocated = 0
    tracemalloc.start()
    try:
        for piece in pieces:
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            got += decoder.feed(piece)
            allocated += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert len(got) == 1 and got[0].body == body and decoder.buffered == 0
    assert allocated < 4 * len(data), f"{allocated >> 20} MiB allocated to decode a {len(data) >> 20} MiB frame"


def test_frame_over_16_mib_rejected_before_buffering() -> None:
    decoder = FrameDecoder()
    # The largest legal frame announces 16 MiB - 4 after its own length field (Netty's limit counts it).
    assert decoder.feed(struct.pack(">i", MAX_FRAME_SIZE - 4)) == []
    assert decoder.buffered == 4
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match="frame length"):
        decoder.feed(struct.pack(">i", MAX_FRAME_SIZE - 3) + b"\x00" * 100)
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", 2**31 - 1))


def test_custom_limit() -> None:
    small = FrameDecoder(max_frame_size=64)
    with pytest.raises(ProtocolError):
        small.feed(SAMPLE[2].encode())
    tiny = RemotingCommand(code=0, serialize_type=SerializeType.ROCKETMQ)
    assert FrameDecoder(max_frame_size=64).feed(tiny.encode()) == [tiny]


@pytest.mark.parametrize("length", [-1, -(2**31), 0, 3])
def test_negative_and_short_lengths(length: int) -> None:
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(struct.pack(">i", length) + b"\x00" * 8)


def test_frame_shorter_than_header_mark() -> None:
    with pytest.raises(ProtocolError, match="header-length"):
        decode_frame(b"\x00\x00")


def test_header_length_beyond_frame() -> None:
    with pytest.raises(ProtocolError, match="header length"):
        decode_frame(struct.pack(">i", 50) + b"{}")


@pytest.mark.parametrize("serialize_type", [2, 0x7F, 0xFF])
def test_unknown_serialize_type(serialize_type: int) -> None:
    with pytest.raises(ProtocolError, match="serialize type"):
        decode_frame(struct.pack(">I", serialize_type << 24 | 2) + b"{}")


def test_truncated_binary_header_at_every_length() -> None:
    full = binary_header(10, 0, 1, 2, 0, b"remark", [(b"key", b"value")])
    for cut in range(len(full)):
        with pytest.raises(ProtocolError):
            decode_frame(struct.pack(">i", 1 << 24 | cut) + full[:cut])


@pytest.mark.parametrize("header", [
    binary_header(10, 0, 1, 2, 0, b"", [])[:-4] + struct.pack(">i", -1),  # negative extFields length
    binary_header(10, 0, 1, 2, 0, b"", [])[:15] + struct.pack(">i", 100) + struct.pack(">i", 0),  # remark too long
    binary_header(10, 0, 1, 2, 0, b"", [(b"k", b"v")])[:-8] + struct.pack(">i", -1) + b"v",  # negative key length
    binary_header(10, 0, 1, 2, 0, b"\xff\xfe", []),  # remark not UTF-8
    binary_header(10, 0, 1, 2, 0, b"", [(b"\xc3", b"v")]),  # key not UTF-8
])
def test_bad_binary_headers(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_frame(struct.pack(">i", 1 << 24 | len(header)) + header)


def test_binary_ext_entry_may_not_run_past_its_block() -> None:
    """The value's length fits in the header but not in the extFields block it belongs to."""
    entry = struct.pack(">h", 1) + b"k" + struct.pack(">i", 4) + b"vvvv"
    fixed = struct.pack(">hBhii", 10, 0, 1, 2, 0) + struct.pack(">i", 0)
    header = fixed + struct.pack(">i", len(entry) - 2) + entry
    with pytest.raises(ProtocolError, match="extFields"):
        decode_frame(struct.pack(">i", 1 << 24 | len(header)) + header)


@pytest.mark.parametrize("header", [
    b"{", b"not json", b"\xff\xfe\x00", b"[1,2]", b'"code"', b"{}", b'{"code":"10"}', b'{"code":true}',
    b'{"code":1.5}', b'{"code":2147483648}', b'{"code":1,"opaque":"x"}', b'{"code":1,"flag":[]}',
    b'{"code":1,"version":-2147483649}', b'{"code":1,"extFields":[1]}', b'{"code":1,"extFields":{"k":{"x":1}}}',
    b'{"code":1,"extFields":{"k":[1]}}', b'{"code":1,"remark":{}}', b'{"code":1,"language":[]}',
    b'{"code":1' + b"1" * 5000 + b"}",  # longer than Python's int-string limit
    b"[" * 100_000 + b"]" * 100_000,  # deeper than the recursion limit
])
def test_bad_json_headers(header: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_frame(struct.pack(">i", len(header)) + header)


# -- fuzzing: only ProtocolError may escape ------------------------------------------------------

def _decode_or_protocol_error(data: bytes) -> None:
    try:
        cmd = decode_frame(data)
    except ProtocolError:
        return
    # Whatever was accepted is well-typed: string extFields and remark, bytes body, 32-bit numbers.
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in cmd.ext_fields.items())
    assert cmd.remark is None or isinstance(cmd.remark, str)
    assert isinstance(cmd.body, bytes)
    assert all(-(2**31) <= n < 2**31 for n in (cmd.code, cmd.opaque, cmd.flag, cmd.version))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_fuzz_decode_frame_arbitrary_bytes(data: bytes) -> None:
    _decode_or_protocol_error(data)


@settings(max_examples=300)
@given(serialize_type=st.sampled_from([0, 1]), header=st.binary(max_size=120), body=st.binary(max_size=8))
def test_fuzz_decode_frame_with_plausible_mark(serialize_type: int, header: bytes, body: bytes) -> None:
    _decode_or_protocol_error(struct.pack(">i", serialize_type << 24 | len(header)) + header + body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
header_keys = st.sampled_from(["code", "opaque", "flag", "version", "language", "remark", "extFields", "x"])


@settings(max_examples=300)
@given(st.dictionaries(header_keys, json_values, max_size=8) | json_values)
def test_fuzz_json_header_shapes(value: object) -> None:
    header = json.dumps(value).encode()
    _decode_or_protocol_error(struct.pack(">i", len(header)) + header)


@settings(max_examples=300)
@given(commands, st.integers(0, 200), st.binary(min_size=1, max_size=3))
def test_fuzz_corrupted_valid_frames(cmd: RemotingCommand, where: int, junk: bytes) -> None:
    data = bytearray(cmd.encode()[4:])
    pos = where % len(data)
    data[pos : pos + len(junk)] = junk
    _decode_or_protocol_error(bytes(data))


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(8, 4096))
def test_fuzz_frame_decoder_feed(chunks: list[bytes], limit: int) -> None:
    decoder = FrameDecoder(max_frame_size=limit)
    for chunk in chunks:
        try:
            for cmd in decoder.feed(chunk):
                assert isinstance(cmd, RemotingCommand)
        except ProtocolError:
            return
        assert decoder.buffered < limit


@settings(max_examples=200)
@given(st.lists(commands, min_size=1, max_size=4), st.lists(st.integers(0, 10_000), max_size=5))
def test_fuzz_frame_decoder_any_chunking(cmds: list[RemotingCommand], cuts: list[int]) -> None:
    stream = b"".join(c.encode() for c in cmds)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    prev = 0
    for point in [*points, len(stream)]:
        got += decoder.feed(stream[prev:point])
        prev = point
    assert got == cmds and decoder.buffered == 0


class _Reparser:
    """The decoder's contract at its plainest: all bytes fed so far, parsed from the start on every feed."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self.pending = b""

    def feed(self, data: bytes) -> list[RemotingCommand]:
        stream = self.pending + data
        self.pending = stream  # what stays buffered if a frame is bad
        commands, pos = [], 0
        while len(stream) - pos >= 4:
            (length,) = struct.unpack_from(">i", stream, pos)
            if length < 4 or length + 4 > self.max_frame_size:
                raise ProtocolError("frame length")
            if len(stream) - pos - 4 < length:
                break
            commands.append(decode_frame(stream[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        self.pending = stream[pos:]
        return commands


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(commands.map(RemotingCommand.encode) | st.binary(max_size=12), min_size=1, max_size=6),
       st.lists(st.integers(0, 10_000), max_size=8), st.sampled_from([64, 256, MAX_FRAME_SIZE]),
       st.sampled_from([bytes, bytearray, memoryview]))
def test_fuzz_feed_matches_reparsing_everything(parts: list[bytes], cuts: list[int], limit: int,
                                                kind: type) -> None:
    """Any split of any stream (whole frames, junk, frames over the limit), fed as any buffer type,
    gives per feed the commands, the error and the buffered size that re-parsing everything gives;
    feeding on after an error reports it again."""
    stream = b"".join(parts)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    decoder, model = FrameDecoder(max_frame_size=limit), _Reparser(limit)
    prev = 0
    for point in [*points, len(stream)]:
        chunk = stream[prev:point]
        prev = point
        try:
            expected: list[RemotingCommand] | type[ProtocolError] = model.feed(chunk)
        except ProtocolError:
            expected = ProtocolError
        try:
            got: list[RemotingCommand] | type[ProtocolError] = decoder.feed(kind(chunk))
        except ProtocolError:
            got = ProtocolError
        assert got == expected
        assert decoder.buffered == len(model.pending)
