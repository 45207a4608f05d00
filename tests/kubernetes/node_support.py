"""What the node tests share besides fixtures: the control-plane scripts loaded by path, constants
and a polling helper. A module of its own (not conftest) so that the tier runs in one pytest call
with tests/operator, whose conftest has the same module name."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from polling import wait_until

__all__ = ["IMAGE", "ROOT", "STORAGE_CLASS", "controlplane", "node_module", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE_DIR = ROOT / "operator" / "controlplane"
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
