"""Which implementation runs the per-message hot path: the Rust extension or the Python reference.

The extension ``rocketstore.common._native`` (``native/``, Rust through PyO3) is built by the
install when cargo is present. The pure-Python functions stay the reference: every native
function has a Python twin that the differential tests hold it byte-identical to, and they are
the fallback when the extension is absent or ``ROCKETSTORE_NATIVE=0`` asks for them.

Callers import :data:`NATIVE` once, at import time, and pick the native or the Python function
then; the choice is made per process, never per call, so a running broker never mixes them.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Final

log = logging.getLogger(__name__)

ENV_SWITCH: Final = "ROCKETSTORE_NATIVE"


def _load() -> tuple[ModuleType | None, str]:
    """The extension if it is wanted and importable, and a sentence saying why it is or is not used."""
    wanted = os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")
    if not wanted:
        return None, f"{ENV_SWITCH}={os.environ[ENV_SWITCH]} asks for the pure-Python hot path"
    try:
        from rocketstore.common import _native  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"native extension not importable ({exc}); the pure-Python hot path runs"
    return _native, f"native hot path (Rust extension {_native.__file__})"


NATIVE, REASON = _load()
#: "native" or "python": logged by the broker at start-up and exported on /metrics.
IMPLEMENTATION: Final = "native" if NATIVE is not None else "python"
