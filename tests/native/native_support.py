"""The Rust extension under test, imported directly whatever ``ROCKETSTORE_NATIVE`` says.

The differential tests compare it with the pure-Python reference functions, so they need both
at once; the process-wide switch only decides which one the store and broker use.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from tool_support import require_tool


def native_module() -> ModuleType:
    """``rocketstore.common._native``, or fail (CI) / skip when the install did not build it."""
    try:
        module = importlib.import_module("rocketstore.common._native")
    except ImportError as exc:
        require_tool("the native extension rocketstore.common._native", False,
                     f"{exc}; `pip install -e .` builds it when cargo is on PATH")
        raise
    return module
