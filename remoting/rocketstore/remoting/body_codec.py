"""The JSON body codec: RocketMQ's ``RemotingSerializable``, fastjson text to typed bodies and back.

Bodies (:class:`JsonBody` subclasses, all of them in :mod:`rocketstore.remoting.body`) are the
payloads commands carry as fastjson text. RocketMQ's ``RemotingSerializable`` encodes and decodes
every ``protocol/body/*`` class the same generic way; this module is that codec, apart from the
schemas, so that adding a body never touches how bodies decode.

Decoding is as lenient as fastjson about what real clients send (the C++ client sends
``subVersion`` as a string; absent fields take their defaults; unknown fields are ignored);
encoding writes fastjson's shape: fields sorted by name, nulls left out, and integer map keys
unquoted (``"brokerAddrs":{0:"host:port"}``), which the Java, C++ and Go clients all parse (the
Go client splits that map's text on ',' and ':' itself, so the output has no blanks). A body
that does not decode raises :class:`~rocketstore.remoting.command.MalformedRequestError` naming
the field (``HeartbeatData.consumerDataSet[0].groupName is missing``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, Self, get_args, get_origin, get_type_hints

from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_number import parse_java_int
from rocketstore.remoting.command import MalformedRequestError
from rocketstore.remoting.wire_fields import unwrap_optional, wire_name

__all__ = ["JsonBody"]


@dataclasses.dataclass(frozen=True, slots=True)
class _BodyField:
    attr: str
    wire: str
    hint: Any
    required: bool


_BODY_FIELDS: dict[type, tuple[_BodyField, ...]] = {}


def _body_fields(cls: type) -> tuple[_BodyField, ...]:
    cached = _BODY_FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = get_type_hints(cls)
    _BODY_FIELDS[cls] = result = tuple(
        _BodyField(
            f.name, wire_name(f), hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )
    return result


def _bad(path: str, what: str, value: Any) -> MalformedRequestError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MalformedRequestError(f"{path} must be {what}, got {shown}")


def _int_from_json(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):  # fastjson reads "123" into an int field; the C++ client relies on it
        number = parse_java_int(value, "i64")
        if number is not None:
            return number
    raise _bad(path, "an integer", value)


def _str_from_json(value: Any, path: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise _bad(path, "a string", value)


def _bool_from_json(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _bad(path, "a boolean", value)


def _float_from_json(value: Any, path: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _bad(path, "a number", value)


_SCALARS: dict[Any, Callable[[Any, str], Any]] = {
    int: _int_from_json, str: _str_from_json, bool: _bool_from_json, float: _float_from_json,
}


def _from_json(hint: Any, value: Any, path: str) -> Any:
    hint, optional = unwrap_optional(hint)
    if value is None and optional:
        return None
    scalar = _SCALARS.get(hint)
    if scalar is not None:
        return scalar(value, path)
    origin = get_origin(hint)
    if origin is list:
        (item,) = get_args(hint)
        if not isinstance(value, list):
            raise _bad(path, "an array", value)
        return [_from_json(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        key_type, item = get_args(hint)
        if not isinstance(value, dict):
            raise _bad(path, "an object", value)
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key: Any
            if key_type is int:
                key = _int_from_json(k, f"{path} key")
            elif isinstance(key_type, type) and issubclass(key_type, JsonBody):
                # an object in key position (fastjson's Map<MessageQueue, V>), which
                # parse_fastjson_object_keys hands over as a tuple of its (name, value) pairs
                key = key_type.from_json_value(dict(k) if isinstance(k, tuple) else k, f"{path} key")
            else:
                key = k
            out[key] = _from_json(item, v, f"{path}[{k!r}]")
        return out
    if isinstance(hint, type) and issubclass(hint, JsonBody):
        return hint.from_json_value(value, path)
    raise TypeError(f"no JSON mapping for {hint!r}")


def _dump(value: Any) -> str:
    """fastjson's compact text: bean fields sorted by name, nulls left out, int map keys bare."""
    if isinstance(value, JsonBody):
        items = sorted(
            ((spec.wire, getattr(value, spec.attr)) for spec in _body_fields(type(value))
             if getattr(value, spec.attr) is not None),
            key=lambda item: item[0],
        )
        return "{" + ",".join(f"{_dump(k)}:{_dump(v)}" for k, v in items) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(
            f"{k if isinstance(k, int) and not isinstance(k, bool) else _dump(k)}:{_dump(v)}"
            for k, v in value.items()
        ) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


class JsonBody:
    """Base of the JSON payloads: ``decode(bytes)`` and ``encode() -> bytes`` in fastjson's form.

    A body with objects in key position (fastjson's ``Map<MessageQueue, V>``) overrides
    :meth:`parse_text` with a parser that accepts them; the default one is faster and covers
    every other body.
    """

    __slots__ = ()

    @classmethod
    def parse_text(cls, text: str) -> Any:
        """The body's text as parsed JSON."""
        return parse_fastjson(text)

    @classmethod
    def decode(cls, data: bytes | str) -> Self:
        name = cls.__name__
        try:
            text = data.decode() if isinstance(data, bytes | bytearray | memoryview) else data
        except UnicodeDecodeError as exc:
            raise MalformedRequestError(f"{name} body is not UTF-8: {exc}") from None
        try:
            value = cls.parse_text(text)
        except (ValueError, RecursionError) as exc:
            raise MalformedRequestError(f"{name} body does not parse as JSON: {exc}") from None
        return cls.from_json_value(value, name)

    @classmethod
    def from_json_value(cls, value: Any, path: str | None = None) -> Self:
        """Build from parsed JSON (what :func:`json.loads` returns); ``path`` names it in errors."""
        path = path or cls.__name__
        if not isinstance(value, dict):
            raise _bad(path, "an object", value)
        values: dict[str, Any] = {}
        for spec in _body_fields(cls):
            raw = value.get(spec.wire)
            if raw is None:
                if spec.required:
                    raise MalformedRequestError(f"{path}.{spec.wire} is missing")
                continue
            values[spec.attr] = _from_json(spec.hint, raw, f"{path}.{spec.wire}")
        return cls(**values)

    def to_json(self) -> str:
        return _dump(self)

    def encode(self) -> bytes:
        return _dump(self).encode()
