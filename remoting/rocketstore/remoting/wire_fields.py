"""How a field of a typed header or body is named and typed on the wire.

Headers (:mod:`rocketstore.remoting.header_codec`) and JSON bodies
(:mod:`rocketstore.remoting.body_codec`) are dataclasses standing for RocketMQ's Java classes,
and both put a field on the wire under its Java name: the camelCase of the Python attribute
(``consumer_group`` -> ``consumerGroup``), or the name :func:`wire` gives where Java's is not
that (``bname``, ``clientID``, ``lockOKMQSet``). The two codecs share this one rule, so a
header's and a body's field of the same name are spelled alike.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, get_args, get_origin

__all__ = ["unwrap_optional", "wire", "wire_name"]

_WIRE = "wire"


def wire(name: str) -> dict[str, str]:
    """Field metadata for a wire name that is not the camelCase of the attribute name."""
    return {_WIRE: name}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def wire_name(f: dataclasses.Field[Any]) -> str:
    """The name ``f`` has on the wire: its :func:`wire` name, else the camelCase of its name."""
    return str(f.metadata.get(_WIRE) or _camel(f.name))


def unwrap_optional(hint: Any) -> tuple[Any, bool]:
    """``(T, True)`` for ``T | None`` (Java's nullable wrapper of T), else ``(hint, False)``."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False
