"""RemotingCommand and its frame, as RocketMQ 4.x clients put them on the wire.

Frame (all integers big-endian)::

    length        i32   4 + headerLength + bodyLength (the length field itself excluded)
    headerMark    i32   serializeType << 24 | headerLength
    header        headerLength bytes, JSON or ROCKETMQ binary (below)
    body          the rest

ROCKETMQ binary header::

    code i16 | language u8 | version i16 | opaque i32 | flag i32
    remarkLength i32 + remark (UTF-8)
    extFieldsLength i32 + repeated (keyLength i16 + key, valueLength i32 + value)

JSON header: ``{"code", "language" (name), "version", "opaque", "flag", "remark",
"extFields" {str: str}, "serializeTypeCurrentRPC"}``. flag bit 0 marks a response, bit 1 a
one-way request; a response carries the request's ``opaque``.

Decoding raises :class:`ProtocolError` naming what is wrong; the server closes that
connection and nothing else.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rocketstore.common.native import NATIVE
from rocketstore.remoting.codes import LanguageCode, SerializeType

RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2
MAX_FRAME_SIZE = 16 * 1024 * 1024
# What our own clients and broker report as their version: MQVersion.CURRENT_VERSION of RocketMQ
# 4.9.8, i.e. Version.V4_9_8.ordinal() (checked against the real class by the interop tests).
DEFAULT_VERSION = 409

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag


class ProtocolError(ValueError):
    """Bytes that are not a valid RocketMQ remoting frame or header."""


class MalformedRequestError(ProtocolError):
    """A well-framed command whose typed header fields or JSON body are missing or do not parse.

    Raised by the header and body codecs (:mod:`rocketstore.remoting.header_codec`,
    :mod:`rocketstore.remoting.body_codec`). Unlike a bad frame, which leaves the byte
    stream unusable, this is one bad request from a client that still speaks the protocol: a
    server answers it (naming the field) and keeps the connection, and since any client can send
    one at will it is not a bug of the server's to log with a traceback.
    """


@dataclass(slots=True)
class RemotingCommand:
    """One request or response."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: int = LanguageCode.PYTHON
    version: int = DEFAULT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes = b"") -> RemotingCommand:
        """A response to this request: same opaque and header encoding, response flag set."""
        return RemotingCommand(
            code=code, opaque=self.opaque, flag=RPC_TYPE_RESPONSE, remark=remark, ext_fields=ext_fields or {},
            body=body, language=self.language, version=self.version, serialize_type=self.serialize_type,
        )

    def encode(self) -> bytes:
        """The whole frame, length prefix included."""
        return encode_frame(self)


def encode_frame_python(cmd: RemotingCommand) -> bytes:
    """The reference frame encoder (the native fast path must match it byte for byte)."""
    header = encode_header(cmd)
    return b"".join((
        _I32.pack(4 + len(header) + len(cmd.body)),
        _I32.pack((int(cmd.serialize_type) << 24) | len(header)),
        header,
        cmd.body,
    ))


def _encode_frame_native(cmd: RemotingCommand) -> bytes:
    """JSON frames through the Rust encoder when every field has its usual type, else Python."""
    if cmd.serialize_type is SerializeType.JSON:
        assert NATIVE is not None
        frame: bytes | None = NATIVE.encode_json_frame(
            cmd.code, cmd.ext_fields, cmd.flag, language_name(cmd.language), cmd.opaque, cmd.remark, cmd.version,
            cmd.body)
        if frame is not None:
            return frame
    return encode_frame_python(cmd)


# LanguageCode by name and name by number as plain dicts: an Enum lookup (``LanguageCode(n)``,
# ``LanguageCode[name]``) costs a microsecond or more, paid on every request and response.
_LANGUAGE_NAMES: dict[int, str] = {member.value: name for name, member in LanguageCode.__members__.items()}
_LANGUAGE_CODES: dict[str, int] = {name: member.value for name, member in LanguageCode.__members__.items()}
# json.dumps with non-default options builds a new JSONEncoder per call; this one is built once
# with the same options (compact separators, UTF-8 text kept as is).
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_encode_json_string: Callable[[str], str] = json.encoder.encode_basestring  # what _JSON_ENCODER uses


def language_name(language: int) -> str:
    """The LanguageCode name of ``language``; OTHER for a number RocketMQ does not define."""
    return _LANGUAGE_NAMES.get(language, "OTHER")


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type is SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    fast = _encode_json_header_fast(cmd)
    if fast is not None:
        return fast
    # Keys sorted by name and a null remark left out, as fastjson writes RocketMQ's RemotingCommand.
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": language_name(cmd.language),
        "opaque": cmd.opaque,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return _JSON_ENCODER.encode(header).encode()


def _encode_json_header_fast(cmd: RemotingCommand) -> bytes | None:
    """The JSON header of the usual command, byte for byte what the json module writes; or None.

    Every response goes through here, and building the dict plus a JSON encoder pass costs about
    twice this string assembly. It applies only when every value has the type the json module
    would write plainly: int fields that are ints or IntEnums (not bools; ``int.__repr__`` is
    what the C encoder writes for both), extFields a dict of ``str`` to ``str``, the remark a
    ``str`` or None. Strings are escaped by the very function the encoder uses with
    ``ensure_ascii=False`` (:func:`json.encoder.encode_basestring`); anything else returns None
    and takes the general path.
    """
    code, flag, opaque, version, remark, ext = cmd.code, cmd.flag, cmd.opaque, cmd.version, cmd.remark, cmd.ext_fields
    if not (isinstance(code, int) and isinstance(flag, int) and isinstance(opaque, int) and isinstance(version, int)):
        return None
    if type(code) is bool or type(flag) is bool or type(opaque) is bool or type(version) is bool:
        return None
    if type(ext) is not dict or (remark is not None and type(remark) is not str):
        return None
    esc = _encode_json_string
    parts = []
    for key, value in ext.items():
        if type(key) is not str or type(value) is not str:
            return None
        parts.append(esc(key) + ":" + esc(value))
    int_text = int.__repr__
    remark_part = "" if remark is None else ',"remark":' + esc(remark)
    return (
        f'{{"code":{int_text(code)},"extFields":{{{",".join(parts)}}},"flag":{int_text(flag)},'
        f'"language":"{language_name(cmd.language)}","opaque":{int_text(opaque)}{remark_part},'
        f'"serializeTypeCurrentRPC":"JSON","version":{int_text(version)}}}'
    ).encode()


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    parts = [_BINARY_FIXED.pack(cmd.code, cmd.language & 0xFF, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode()
    parts.append(_I32.pack(len(remark)))
    parts.append(remark)
    fields = []
    for key, value in cmd.ext_fields.items():
        k, v = key.encode(), value.encode()
        fields.append(struct.pack(">h", len(k)) + k + _I32.pack(len(v)) + v)
    ext = b"".join(fields)
    parts.append(_I32.pack(len(ext)))
    parts.append(ext)
    return b"".join(parts)


_SERIALIZE_TYPES: dict[int, SerializeType] = {member.value: member for member in SerializeType}


def _decode_frame_native(frame: bytes | memoryview) -> RemotingCommand:
    """The usual frame through the Rust decoder; anything else (valid or not) through Python."""
    assert NATIVE is not None
    fast = NATIVE.decode_frame(frame)
    return decode_frame_python(frame) if fast is None else command_from_native(fast)


def command_from_native(fields: tuple[Any, ...]) -> RemotingCommand:
    """The command the Rust decoder's (code, language, version, opaque, flag, remark, extFields,
    body, serialize type) tuple describes; language names map to codes as in the Python decoder."""
    code, language, version, opaque, flag, remark, ext_fields, body, serialize = fields
    return RemotingCommand(
        code=code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext_fields, body=body,
        language=_LANGUAGE_CODES.get(language, LanguageCode.OTHER) if type(language) is str else language,
        version=version, serialize_type=_SERIALIZE_TYPES[serialize],
    )


def decode_frame_python(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix (what :class:`FrameDecoder` yields).

    The reference decoder: :data:`decode_frame` is the Rust fast path when the extension runs,
    which hands every frame it does not find usual back to this function.

    Given a memoryview, header and body are each copied out of it once, and nothing keeps a
    reference to ``frame`` afterwards.
    """
    if len(frame) < 4:
        raise ProtocolError(f"frame of {len(frame)} bytes has no header-length word")
    (mark,) = _I32.unpack_from(frame, 0)
    serialize_byte = (mark >> 24) & 0xFF
    header_length = mark & 0xFFFFFF
    if header_length > len(frame) - 4:
        raise ProtocolError(f"header length {header_length} exceeds the frame ({len(frame) - 4} bytes after the mark)")
    serialize_type = _SERIALIZE_TYPES.get(serialize_byte)
    if serialize_type is None:
        raise ProtocolError(f"unknown header serialize type {serialize_byte}")
    header = bytes(frame[4 : 4 + header_length])
    body = bytes(frame[4 + header_length :])
    cmd = _decode_binary_header(header) if serialize_type is SerializeType.ROCKETMQ else _decode_json_header(header)
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


decode_frame = _decode_frame_native if NATIVE is not None else decode_frame_python
"""Decode one frame (without its length prefix) with the implementation this process runs."""
encode_frame = _encode_frame_native if NATIVE is not None else encode_frame_python
"""Encode a whole frame with the implementation this process runs."""

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _as_int(header: dict[str, Any], name: str, default: int | None = None) -> int:
    """An int field of RocketMQ's RemotingCommand: a JSON integer within Java's int range."""
    value = header.get(name, default)
    if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:  # the usual case, checked first
        return value
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32_MIN <= value <= _INT32_MAX:
        raise ProtocolError(f"header field {name!r} must be a 32-bit integer, got {_short_repr(value)}")
    return value


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _decode_json_header(data: bytes) -> RemotingCommand:
    try:
        header = json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProtocolError(f"JSON header does not parse: {_short_repr(str(exc))}") from None
    if not isinstance(header, dict):
        raise ProtocolError("JSON header must be an object")
    language = header.get("language", "JAVA")
    if isinstance(language, str):
        language_code = _LANGUAGE_CODES.get(language, LanguageCode.OTHER)
    elif isinstance(language, int) and not isinstance(language, bool):
        language_code = language
    else:
        raise ProtocolError(f"header field 'language' must be a name or a number, got {language!r}")
    ext = header.get("extFields") or {}
    if not isinstance(ext, dict):
        raise ProtocolError("header field 'extFields' must be an object")
    remark = header.get("remark")
    return RemotingCommand(
        code=_as_int(header, "code"),
        opaque=_as_int(header, "opaque", 0),
        flag=_as_int(header, "flag", 0),
        remark=remark if remark is None or type(remark) is str else _ext_value(remark, "remark"),
        ext_fields=_ext_fields(ext),
        language=language_code,
        version=_as_int(header, "version", 0),
    )


def _ext_fields(ext: dict[str, Any]) -> dict[str, str]:
    """extFields as text, null values left out.

    What every real client sends (all values strings) is returned as is, after one C-level scan
    and no per-field error text; anything else goes field by field through :func:`_ext_value`.
    json.loads only ever makes ``str`` keys, so they need no conversion.
    """
    if all(type(v) is str for v in ext.values()):
        return ext
    return {k: _ext_value(v, f"extFields[{k!r}]") for k, v in ext.items() if v is not None}


def _ext_value(value: Any, name: str) -> str:
    """extFields are strings on the wire; a client that sends a bare number or boolean still means its text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ProtocolError(f"header field {name} must be a string, got {_short_repr(value)}")


def _decode_binary_header(data: bytes) -> RemotingCommand:
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(data, 0)
        pos = _BINARY_FIXED.size
        (remark_len,) = _I32.unpack_from(data, pos)
        pos += 4
        remark = _take(data, pos, remark_len, "remark").decode() if remark_len > 0 else None
        pos += max(remark_len, 0)
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        ext_end = pos + ext_len
        if ext_len < 0 or ext_end > len(data):
            raise ProtocolError(f"extFields length {ext_len} runs past the header ({len(data)} bytes)")
        ext: dict[str, str] = {}
        # Bounds are checked inline and error texts built only on failure: this loop runs once
        # per header field of every request (14 times for a SEND_MESSAGE_V2).
        unpack_i16, unpack_i32 = _I16.unpack_from, _I32.unpack_from
        while pos < ext_end:
            if pos + 2 > ext_end:
                raise ProtocolError("extFields block ends inside a key length")
            (klen,) = unpack_i16(data, pos)
            pos += 2
            end = pos + klen
            if klen < 0 or end > ext_end:
                raise _past_block("extFields key", klen, ext_end, len(data))
            key = data[pos:end].decode()
            pos = end
            if pos + 4 > ext_end:
                raise ProtocolError(f"extFields entry {key!r} has no value length inside the extFields block")
            (vlen,) = unpack_i32(data, pos)
            pos += 4
            end = pos + vlen
            if vlen < 0 or end > ext_end:
                raise _past_block(f"extFields value of {key!r}", vlen, ext_end, len(data))
            ext[key] = data[pos:end].decode()
            pos = end
    except struct.error as exc:
        raise ProtocolError(f"binary header truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header has a string that is not UTF-8: {exc}") from None
    return RemotingCommand(code=code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                           language=language, version=version)


def _take(data: bytes, pos: int, length: int, what: str, end: int | None = None) -> bytes:
    end = len(data) if end is None else end
    if length < 0 or pos + length > end:
        raise _past_block(what, length, end, len(data))
    return data[pos : pos + length]


def _past_block(what: str, length: int, end: int, total: int) -> ProtocolError:
    return ProtocolError(f"{what} length {length} runs past its block (ends at byte {end} of {total})")


class FrameDecoder:
    """Feed it bytes as they arrive; it returns the complete commands, keeping the rest.

    A length outside 0..max_frame_size raises :class:`ProtocolError` before anything is
    buffered, so a peer cannot make us hold gigabytes by announcing a huge frame.

    Work is linear in the bytes fed however they are split: while the buffered frame is still
    incomplete, a feed only appends to the buffer (a 16 MiB frame in 64 KiB reads would
    otherwise copy the growing prefix 256 times, about 2 GiB), and the buffer is copied out once,
    when the frame completes.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        # Size the buffer must reach before parsing it can yield a frame: 4 + the length of the
        # frame at its head once that length was read and found legal; 0 when not known (less
        # than 4 bytes buffered, or a bad frame left there, which the next feed must report again).
        self._needed = 0

    def feed(self, data: bytes | bytearray | memoryview,
             serve: Callable[[bytes, int], int] | None = None) -> list[RemotingCommand]:
        """The commands completed by ``data``; an incomplete tail stays buffered.

        Frames are decoded from an immutable ``bytes`` through a memoryview, so header and body
        are copied once each (not first into the buffer, then out of it as a frame, then apart).
        In the usual case (nothing buffered, ``data`` is whole frames) nothing is buffered at
        all. When a frame is bad, :class:`ProtocolError` leaves everything fed so far and not
        served buffered, as if no frame had been taken out.

        ``serve``, given the buffered bytes and ``data`` together and the largest frame, may take
        whole frames at their head itself (the broker's plain sends: Connection.data_received):
        it returns how many bytes it took, and decoding starts after them.
        """
        buf = self._buffer
        if buf:
            buf += data
            if len(buf) < self._needed:
                return []
            data = bytes(buf)
            buf.clear()
        elif type(data) is not bytes:
            # Any buffer, as bytearray += takes; copied so that a caller's bytearray stays
            # resizable whatever views of it an exception's traceback may keep.
            data = bytes(memoryview(data))
        commands = []
        size = len(data)
        pos = served = serve(data, self.max_frame_size) if serve is not None else 0
        needed = 0
        try:
            with memoryview(data) as view:
                while size - pos >= 4:
                    (length,) = _I32.unpack_from(data, pos)
                    if length < 4 or length + 4 > self.max_frame_size:
                        raise ProtocolError(f"frame length {length} outside 4..{self.max_frame_size - 4}")
                    if size - pos - 4 < length:
                        needed = 4 + length
                        break
                    commands.append(decode_frame(view[pos + 4 : pos + 4 + length]))
                    pos += 4 + length
        except BaseException:
            buf += data[served:] if served else data
            self._needed = 0
            raise
        self._needed = needed
        if pos < size:
            buf += data[pos:] if pos else data
        return commands

    @property
    def buffered(self) -> int:
        return len(self._buffer)
