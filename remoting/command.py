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
from dataclasses import dataclass, field
from typing import Any

from remoting.codes import LanguageCode, SerializeType

RPC_TYPE_RESPONSE = 0x1
RPC_ONEWAY = 0x2
MAX_FRAME_SIZE = 16 * 1024 * 1024
# What our own clients and broker report as their version: MQVersion.CURRENT_VERSION of RocketMQ
# 4.9.8, i.e. Version.V4_9_8.ordinal() (checked against the real class by the interop tests).
DEFAULT_VERSION = 409

_I32 = struct.Struct(">i")
_BINARY_FIXED = struct.Struct(">hBhii")  # code, language, version, opaque, flag


class ProtocolError(ValueError):
    """Bytes that are not a valid RocketMQ remoting frame or header."""


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
        header = encode_header(self)
        return b"".join((
            _I32.pack(4 + len(header) + len(self.body)),
            _I32.pack((int(self.serialize_type) << 24) | len(header)),
            header,
            self.body,
        ))


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return LanguageCode.OTHER.name


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type is SerializeType.ROCKETMQ:
        return _encode_binary_header(cmd)
    # Keys sorted by name and a null remark left out, as fastjson writes RocketMQ's RemotingCommand.
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": cmd.ext_fields,
        "flag": cmd.flag,
        "language": _language_name(cmd.language),
        "opaque": cmd.opaque,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()


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


def decode_frame(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its 4-byte length prefix (what :class:`FrameDecoder` yields)."""
    if len(frame) < 4:
        raise ProtocolError(f"frame of {len(frame)} bytes has no header-length word")
    (mark,) = _I32.unpack_from(frame, 0)
    serialize_byte = (mark >> 24) & 0xFF
    header_length = mark & 0xFFFFFF
    if header_length > len(frame) - 4:
        raise ProtocolError(f"header length {header_length} exceeds the frame ({len(frame) - 4} bytes after the mark)")
    try:
        serialize_type = SerializeType(serialize_byte)
    except ValueError:
        raise ProtocolError(f"unknown header serialize type {serialize_byte}") from None
    header = bytes(frame[4 : 4 + header_length])
    body = bytes(frame[4 + header_length :])
    cmd = _decode_binary_header(header) if serialize_type is SerializeType.ROCKETMQ else _decode_json_header(header)
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _as_int(header: dict[str, Any], name: str, default: int | None = None) -> int:
    """An int field of RocketMQ's RemotingCommand: a JSON integer within Java's int range."""
    value = header.get(name, default)
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
        language_code = LanguageCode[language].value if language in LanguageCode.__members__ else LanguageCode.OTHER
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
        remark=None if remark is None else _ext_value(remark, "remark"),
        ext_fields={str(k): _ext_value(v, f"extFields[{k!r}]") for k, v in ext.items() if v is not None},
        language=language_code,
        version=_as_int(header, "version", 0),
    )


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
        while pos < ext_end:
            if pos + 2 > ext_end:
                raise ProtocolError("extFields block ends inside a key length")
            (klen,) = struct.unpack_from(">h", data, pos)
            pos += 2
            key = _take(data, pos, klen, "extFields key", ext_end).decode()
            pos += klen
            if pos + 4 > ext_end:
                raise ProtocolError(f"extFields entry {key!r} has no value length inside the extFields block")
            (vlen,) = _I32.unpack_from(data, pos)
            pos += 4
            ext[key] = _take(data, pos, vlen, f"extFields value of {key!r}", ext_end).decode()
            pos += vlen
    except struct.error as exc:
        raise ProtocolError(f"binary header truncated: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"binary header has a string that is not UTF-8: {exc}") from None
    return RemotingCommand(code=code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext,
                           language=language, version=version)


def _take(data: bytes, pos: int, length: int, what: str, end: int | None = None) -> bytes:
    end = len(data) if end is None else end
    if length < 0 or pos + length > end:
        raise ProtocolError(f"{what} length {length} runs past its block (ends at byte {end} of {len(data)})")
    return data[pos : pos + length]


class FrameDecoder:
    """Feed it bytes as they arrive; it returns the complete commands, keeping the rest.

    A length outside 0..max_frame_size raises :class:`ProtocolError` before anything is
    buffered, so a peer cannot make us hold gigabytes by announcing a huge frame.
    """

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[RemotingCommand]:
        self._buffer += data
        commands = []
        buf = self._buffer
        pos = 0
        while len(buf) - pos >= 4:
            (length,) = _I32.unpack_from(buf, pos)
            if length < 4 or length + 4 > self.max_frame_size:
                raise ProtocolError(f"frame length {length} outside 4..{self.max_frame_size - 4}")
            if len(buf) - pos - 4 < length:
                break
            commands.append(decode_frame(bytes(buf[pos + 4 : pos + 4 + length])))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return commands

    @property
    def buffered(self) -> int:
        return len(self._buffer)
