"""Java's integer syntax and ranges, for values that arrive as text (headers, properties).

RocketMQ reads such values with ``Integer.parseInt`` / ``Long.parseLong``; where Java would throw,
RocketStore must refuse too, rather than accept what Python's ``int()`` happens to take (blanks,
'_' separators, non-ASCII digits).
"""

from __future__ import annotations

from typing import Final

#: Java's int ("i32") and long ("i64").
JAVA_RANGES: Final[dict[str, tuple[int, int]]] = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}
SIGNS: Final = ("+", "-")


def parse_java_int(text: str, kind: str = "i32") -> int | None:
    """``Integer.parseInt``/``Long.parseLong``: the value, or None when Java would throw.

    Accepted: one optional '+' or '-', then one or more ASCII digits (``[+-]?[0-9]+``), within
    the range of ``kind``. ``isascii() and isdigit()`` rules out what ``int()`` alone would also
    take with two C-level scans, about half the cost of the equivalent regex match on the
    per-field header path.
    """
    digits = text[1:] if text[:1] in SIGNS else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    value = int(text)
    low, high = JAVA_RANGES[kind]
    return value if low <= value <= high else None
