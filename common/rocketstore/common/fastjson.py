"""fastjson's JSON dialect, which RocketMQ writes to its config files and remoting bodies.

fastjson writes ``Map<Integer, Long>`` keys unquoted (``{"t@g":{0:12,1:5}}``), which strict JSON
parsers reject; :func:`parse_fastjson` accepts that. In admin bodies fastjson also writes a
``Map<MessageQueue, ...>`` with the key *object* in key position, which
:func:`parse_fastjson_object_keys` reads (slower: a parser of its own, not a rewrite for
``json``). We write standard JSON (quoted keys), which
fastjson reads back into the same integer-keyed maps. The ``as_*`` readers turn a value of the
wrong shape into a ``ValueError`` naming the field, so a bad file or body is reported, not
half-applied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

__all__ = ["Fields", "as_bool", "as_int", "as_object", "as_str", "parse_fastjson", "parse_fastjson_object_keys",
           "to_json"]

T = TypeVar("T")


# -- fastjson text -----------------------------------------------------------------------------

# One left-to-right lexer pass. Every '"' the scan meets outside a token opens a string literal,
# which the first alternative consumes whole (to the end of the text if unterminated, so that
# json.loads reports it); the scan therefore never looks inside a string, and a name such as
# "t{1:x" is copied untouched. The second alternative is an integer in key position: right
# after '{' or ',' (blanks allowed) and followed by ':'.
_FASTJSON_TOKEN_RE: Final = re.compile(
    r"""
      "[^"\\]*(?:\\.[^"\\]*)*"?
    | (?P<before>[{,][\ \t\r\n]*) (?P<key>-?[0-9]+) (?=[\ \t\r\n]*:)
    """,
    re.VERBOSE | re.DOTALL,
)


def parse_fastjson(text: str) -> Any:
    """Parse JSON as fastjson writes it: standard JSON plus bare integer object keys."""
    try:
        return json.loads(text)  # our own files and most of RocketMQ's: no rewriting needed
    except json.JSONDecodeError:
        return json.loads(_FASTJSON_TOKEN_RE.sub(_quote_key, text))


def _quote_key(token: re.Match[str]) -> str:
    key = token.group("key")
    if key is None:
        return token.group()  # a string literal, unchanged
    return f'{token.group("before")}"{key}"'


def to_json(obj: object, pretty: bool) -> str:
    """JSON as fastjson writes it: compact, or tab-indented with no blank after ':'."""
    if pretty:
        return json.dumps(obj, indent="\t", separators=(",", ":"))
    return json.dumps(obj, separators=(",", ":"))


# -- map keys that are objects --------------------------------------------------------------

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


def parse_fastjson_object_keys(text: str) -> Any:
    """JSON plus fastjson's map keys that are numbers or objects. An object key becomes a
    sorted tuple of its (name, value) pairs (hashable; JsonBody turns it back into the key's
    class), a number key an int."""
    value, pos = _value(text, _skip(text, 0))
    if _skip(text, pos) != len(text):
        raise ValueError(f"extra data at character {pos}")
    return value


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def _value(text: str, pos: int) -> tuple[Any, int]:
    if pos >= len(text):
        raise ValueError("unexpected end of JSON")
    ch = text[pos]
    if ch == "{":
        obj: dict[Any, Any] = {}
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "}":
            return obj, pos + 1
        while True:
            key, pos = _value(text, _skip(text, pos))
            pos = _skip(text, pos)
            if text[pos : pos + 1] != ":":
                raise ValueError(f"expected ':' at character {pos}")
            item, pos = _value(text, _skip(text, pos + 1))
            obj[_hashable(key)] = item
            pos = _skip(text, pos)
            if text[pos : pos + 1] == ",":
                pos = _skip(text, pos + 1)
                continue
            if text[pos : pos + 1] == "}":
                return obj, pos + 1
            raise ValueError(f"expected ',' or '}}' at character {pos}")
    if ch == "[":
        arr: list[Any] = []
        pos = _skip(text, pos + 1)
        if text[pos : pos + 1] == "]":
            return arr, pos + 1
        while True:
            item, pos = _value(text, _skip(text, pos))
            arr.append(item)
            pos = _skip(text, pos)
            if text[pos : pos + 1] == ",":
                pos += 1
                continue
            if text[pos : pos + 1] == "]":
                return arr, pos + 1
            raise ValueError(f"expected ',' or ']' at character {pos}")
    value, end = _DECODER.raw_decode(text, pos)
    return value, end


# -- reading values of a known shape: a wrong shape is a ValueError naming the field -------------


def as_object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def as_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: expected an integer, got {value!r}")
    return value


def as_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what}: expected true or false, got {value!r}")
    return value


def as_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {value!r}")
    return value


class Fields:
    """Reads the properties of one JSON object, naming ``owner.key`` in any error."""

    def __init__(self, data: dict[str, Any], owner: str) -> None:
        self._data = data
        self._owner = owner

    def read(self, key: str, default: T, check: Callable[[object, str], T]) -> T:
        # An absent property keeps its default, as fastjson leaves an unset field alone.
        return check(self._data.get(key, default), f"{self._owner}.{key}")
