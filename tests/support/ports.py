"""Free TCP ports for the processes tests start, and the control-plane script they come from.

Every test that hands a port number to another process takes it from here. The ports come from
``controlplane.free_ports``: outside the kernel's ephemeral range, so no outgoing connection made in
the meantime can take one before the child binds it, and claimed across the test processes CI runs
side by side, so no two of them hand out the same port.

Importable from any test directory: pyproject's pytest ``pythonpath`` puts tests/support on sys.path.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _load_controlplane() -> ModuleType:
    """tests/controlplane/controlplane.py is a script in a folder, not a package: load it by path
    once, under the name node.py (beside it) imports it by."""
    name = "controlplane"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "controlplane" / "controlplane.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


controlplane = _load_controlplane()


def free_port(host: str = "127.0.0.1", *, also: Sequence[int] = (), hosts: Sequence[str] = ()) -> int:
    """A port free on ``host`` whose offsets ``also`` (e.g. -2, +1: ports a RocketMQ broker derives
    from its listen port) are free too, and which is free on every address in ``hosts`` as well."""
    for _ in range(200):
        port: int = controlplane.free_ports(1, host, also)[0]
        if all(controlplane.port_is_free(port, h) for h in hosts):
            return port
    raise RuntimeError(f"no port free on {[host, *hosts]} with free neighbours {list(also)}")
