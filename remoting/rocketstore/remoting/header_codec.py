"""The typed-header codec: a command's ``extFields`` to a typed header and back.

RocketMQ's ``RemotingCommand.decodeCommandCustomHeader`` / ``makeCustomHeaderToNet`` turn a
``CommandCustomHeader`` into the string map every command carries and back; this module is that
codec, kept apart from the ~70 schemas (:mod:`rocketstore.remoting.headers`, RocketMQ's
``protocol/header/*``) so that adding a header never touches how headers decode, and the decoder
the native extension mirrors has one home. How ``extFields`` themselves travel in a frame (JSON
or the ROCKETMQ binary header) is :mod:`rocketstore.remoting.command`'s job; by the time this
codec runs, both forms have become the same ``dict[str, str]``.

Headers are dataclasses whose fields carry their wire names (:mod:`rocketstore.remoting.wire_fields`);
one generic codec turns ``extFields`` (strings only) into typed values and back:

* integers parse like Java's ``Integer.parseInt`` / ``Long.parseLong`` (ASCII digits, optional
  sign, range checked against the Java type: :data:`Int32` or :data:`Int64`);
* booleans like ``Boolean.parseBoolean`` ("true" in any case is true, anything else false);
* a field without a default is required (``@CFNotNull`` in Java); an absent optional field keeps
  its default (``None`` for Java's nullable wrappers); ``None`` values are left out on encode.

Unlike Java, which logs and skips a field that does not parse, a bad value raises
:class:`~rocketstore.remoting.command.MalformedRequestError` naming the header and the field.

Decoding runs for every request, so a header class is compiled once into a decode plan (see
:func:`decode_plan`), which the Rust extension executes when it is built
(``decode_header_fields`` in native/src/lib.rs); :func:`decode_fields_python` is the reference
the native tests hold it to, byte for byte.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self, get_origin, get_type_hints

from rocketstore.common.java_number import JAVA_RANGES, SIGNS
from rocketstore.common.native import NATIVE
from rocketstore.remoting.command import MalformedRequestError
from rocketstore.remoting.wire_fields import unwrap_optional, wire_name

__all__ = ["DecodeStep", "Header", "Int32", "Int64", "decode_fields_python", "decode_plan"]

# Java's Integer and Long; the codec range-checks against them.
Int32 = Annotated[int, "i32"]
Int64 = Annotated[int, "i64"]
_RANGES = JAVA_RANGES
_SIGNS = SIGNS


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


@dataclasses.dataclass(frozen=True, slots=True)
class _HeaderField:
    attr: str
    wire: str
    kind: str  # "str", "bool", "i32" or "i64"
    required: bool


_HEADER_FIELDS: dict[type, tuple[_HeaderField, ...]] = {}


def _header_fields(cls: type) -> tuple[_HeaderField, ...]:
    cached = _HEADER_FIELDS.get(cls)
    if cached is not None:
        return cached
    hints = get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        hint, _ = unwrap_optional(hints[f.name])
        if get_origin(hint) is Annotated:
            kind = str(hint.__metadata__[0])
        elif hint is str:
            kind = "str"
        elif hint is bool:
            kind = "bool"
        else:
            raise TypeError(f"{cls.__name__}.{f.name}: header fields are str, bool, Int32 or Int64, not {hint!r}")
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        specs.append(_HeaderField(f.name, wire_name(f), kind, required))
    _HEADER_FIELDS[cls] = result = tuple(specs)
    return result


# What Header._decode walks per field: (attr, wire name, kind, required, low, high), with
# kind 0 = str, 1 = bool, 2 = integer in low..high. Built once per (header class, name map).
DecodeStep = tuple[str, str, int, bool, int, int]
_KIND_STR, _KIND_BOOL, _KIND_INT = 0, 1, 2
_DECODE_PLANS: dict[tuple[type, int], tuple[Mapping[str, str] | None, tuple[DecodeStep, ...]]] = {}


def decode_plan(cls: type, names: Mapping[str, str] | None) -> tuple[DecodeStep, ...]:
    """The field steps of ``cls`` under ``names`` (None: the wire names), cached.

    Keyed by the identity of ``names`` (the name maps are module constants, so the cache stays
    tiny); the entry keeps the map itself, so its id cannot be reused by another object while
    cached, and the identity check below guards the lookup anyway.
    """
    key = (cls, id(names))
    cached = _DECODE_PLANS.get(key)
    if cached is not None and cached[0] is names:
        return cached[1]
    steps = []
    for spec in _header_fields(cls):
        name = spec.wire if names is None else names[spec.attr]
        if spec.kind == "str":
            steps.append((spec.attr, name, _KIND_STR, spec.required, 0, 0))
        elif spec.kind == "bool":
            steps.append((spec.attr, name, _KIND_BOOL, spec.required, 0, 0))
        else:
            low, high = _RANGES[spec.kind]
            steps.append((spec.attr, name, _KIND_INT, spec.required, low, high))
    plan = tuple(steps)
    _DECODE_PLANS[key] = (names, plan)
    return plan


def decode_fields_python(fields: Mapping[str, str], plan: tuple[DecodeStep, ...], label: str) -> dict[str, Any]:
    """The field values a decode plan reads from ``fields``; raises naming the first bad field.

    The reference decoder. It runs for every request (14 fields for a send), so the per-field
    work is a cached plan and Java's integer syntax is checked inline (as parse_java_int does).
    """
    values: dict[str, Any] = {}
    get = fields.get
    for attr, name, kind, required, low, high in plan:
        raw = get(name)
        if raw is None:
            if required:
                raise MalformedRequestError(f"{label} header field {name!r} is missing")
            continue
        if not isinstance(raw, str):
            raise MalformedRequestError(f"{label} header field {name!r} must be a string, got {raw!r}")
        if kind == _KIND_STR:
            values[attr] = raw
        elif kind == _KIND_BOOL:
            values[attr] = raw.lower() == "true"
        else:
            digits = raw[1:] if raw[:1] in _SIGNS else raw
            if digits.isascii() and digits.isdigit() and low <= (number := int(raw)) <= high:
                values[attr] = number
            else:
                what = "an integer" if high == _RANGES["i32"][1] else "a long integer"
                raise MalformedRequestError(f"{label} header field {name!r} must be {what}, got {raw!r}")
    return values


def _decode_fields_native(fields: Mapping[str, str], plan: tuple[DecodeStep, ...], label: str) -> dict[str, Any]:
    """The Rust plan executor for headers that decode cleanly; Python for the rest (and its errors)."""
    assert NATIVE is not None
    values: dict[str, Any] | None = NATIVE.decode_header_fields(fields, plan)
    return decode_fields_python(fields, plan, label) if values is None else values


_decode_fields = _decode_fields_native if NATIVE is not None else decode_fields_python


class Header:
    """Base of the typed headers: decode from and encode to ``extFields``."""

    __slots__ = ()
    #: What error messages call this header, e.g. "PULL_MESSAGE" or "PULL_MESSAGE response".
    LABEL: ClassVar[str] = ""

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        return cls._decode(fields, None, cls.LABEL)

    def to_ext_fields(self) -> dict[str, str]:
        return self._encode(None)

    @classmethod
    def _decode(cls, fields: Mapping[str, str], names: Mapping[str, str] | None, label: str) -> Self:
        return cls(**_decode_fields(fields, decode_plan(cls, names), label))

    def _encode(self, names: Mapping[str, str] | None) -> dict[str, str]:
        out: dict[str, str] = {}
        for spec in _header_fields(type(self)):
            value = getattr(self, spec.attr)
            if value is None:
                continue
            name = spec.wire if names is None else names[spec.attr]
            out[name] = _java_bool(value) if isinstance(value, bool) else str(value)
        return out
