"""java.util.Properties text: broker.conf files and the config bodies brokers answer with.

RocketMQ reads broker.conf with ``Properties.load`` and sends its config over the wire as
properties text (GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG), so the store, the broker and the client
all parse the same dialect, here.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["format_properties", "parse_properties"]

_BLANKS: Final = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LINE_BREAK_RE: Final = re.compile(r"\r\n|\r|\n")


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text the way ``java.util.Properties.load`` does.

    Handles ``#``/``!`` comment lines, ``key=value``, ``key: value`` and ``key value``, blanks
    around the separator, a trailing odd backslash joining the next line (whose leading blanks
    are dropped), and the escapes ``\\t \\n \\r \\f \\uXXXX``. Like Java, trailing blanks of a value
    are kept and the last duplicate key wins. A malformed ``\\uXXXX`` raises ValueError.
    """
    result: dict[str, str] = {}
    pending: str | None = None  # logical line being joined across continuations
    for natural in _LINE_BREAK_RE.split(text):
        line = natural.lstrip(_BLANKS)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            logical = line
        else:
            if not line:  # a blank continuation line ends the logical line
                key, value = _split_entry(pending)
                result[key] = value
                pending = None
                continue
            logical = pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = logical[:-1]
            continue
        pending = None
        key, value = _split_entry(logical)
        result[key] = value
    if pending is not None:  # continuation at end of input: the backslash is simply dropped
        key, value = _split_entry(pending)
        result[key] = value
    return result


def _escape(text: str, is_key: bool) -> str:
    """Properties.store's escaping (saveConvert), keeping non-ASCII characters as they are (the
    file is written as UTF-8, as Properties.store(Writer) does)."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch in "=:#!" or (ch == " " and (is_key or i == 0)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: dict[str, str]) -> str:
    """``key=value`` lines that :func:`parse_properties` (and ``Properties.load``) read back as
    ``props``: separators, comment marks, backslashes, line breaks and leading blanks escaped."""
    return "".join(f"{_escape(key, True)}={_escape(value, False)}\n" for key, value in props.items())


def _split_entry(line: str) -> tuple[str, str]:
    """Split one logical line at the first unescaped '=', ':' or blank."""
    end = len(line)
    key_end = end
    value_start = end
    has_separator = False
    escaped = False
    for i, ch in enumerate(line):
        if not escaped and ch in "=:":
            key_end, value_start, has_separator = i, i + 1, True
            break
        if not escaped and ch in _BLANKS:
            key_end, value_start = i, i + 1
            break
        escaped = ch == "\\" and not escaped
    while value_start < end:
        ch = line[value_start]
        if ch not in _BLANKS:
            if has_separator or ch not in "=:":
                break
            has_separator = True
        value_start += 1
    return _unescape(line[:key_end]), _unescape(line[value_start:])


def _unescape(segment: str) -> str:
    out: list[str] = []
    i, end = 0, len(segment)
    while i < end:
        ch = segment[i]
        i += 1
        if ch != "\\":
            out.append(ch)
            continue
        if i == end:  # a lone trailing backslash carries no character
            break
        ch = segment[i]
        i += 1
        if ch == "u":
            digits = segment[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"malformed \\uXXXX escape in properties text: {segment!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(ch, ch))
    joined = "".join(out)
    # \uD83D\uDE00 is one character in Java (a UTF-16 surrogate pair); combine such pairs.
    return joined.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
