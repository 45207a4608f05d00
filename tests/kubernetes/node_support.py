"""What the node tests share besides fixtures: the control-plane scripts loaded by path, constants
and a polling helper. A module of its own (not conftest) so that the tier runs in one pytest call
with tests/operator, whose conftest has the same module name."""

from __future__ import annotations

import importlib.util
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE_DIR = ROOT / "operator" / "controlplane"
IMAGE_DIR = ROOT / "tests" / "image"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"rocketstore/rocketstore:{VERSION}"
STORAGE_CLASS = "local-node"


def _load(name: str) -> ModuleType:
    """controlplane.py and node.py are scripts in a folder, not a package: load them by path."""
    if str(CONTROLPLANE_DIR) not in sys.path:
        sys.path.insert(0, str(CONTROLPLANE_DIR))  # node.py imports controlplane by name
    spec = importlib.util.spec_from_file_location(name, CONTROLPLANE_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


controlplane = _load("controlplane")
node_module = _load("node")


def wait_until(what: str, check: Callable[[], Any], timeout: float = 120, interval: float = 0.5) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))
