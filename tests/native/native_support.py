"""The Rust extension under test, imported directly whatever ``ROCKETSTORE_NATIVE`` says.

The differential tests compare it with the pure-Python reference functions, so they need both
at once; the process-wide switch only decides which one the store and broker use. Also the one
list of header decode plans that the header differential test and the fuzz harness share.
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Any

from rocketstore.remoting import header_codec, headers


def native_module() -> ModuleType:
    """``rocketstore.common._native``, or fail (CI) / skip when the install did not build it."""
    from tool_support import require_tool  # here, not at the top: the fuzz harness imports this
    # module as a script, without tests/ on its path, for header_decode_plans alone

    try:
        module = importlib.import_module("rocketstore.common._native")
    except ImportError as exc:
        require_tool("the native extension rocketstore.common._native", False,
                     f"{exc}; `pip install -e .` builds it when cargo is on PATH")
        raise
    return module


def header_decode_plans() -> list[tuple[str, tuple[Any, ...]]]:
    """(name, decode plan) of every typed header, plus SEND_MESSAGE_V2's one-letter names: what
    the native header decoder is held to the Python one on."""
    base = header_codec.Header
    classes = sorted((obj for obj in vars(headers).values()
                      if isinstance(obj, type) and issubclass(obj, base) and obj is not base
                      and dataclasses.is_dataclass(obj)), key=lambda cls: cls.__name__)
    v2 = header_codec.decode_plan(headers.SendMessageRequestHeader, headers._SEND_V2_NAMES)
    return [(cls.__name__, header_codec.decode_plan(cls, None)) for cls in classes] + [
        ("SendMessageRequestHeader v2", v2)]
