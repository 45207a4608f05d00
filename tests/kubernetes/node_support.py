"""What the node tests share besides fixtures: the control-plane scripts loaded by path, constants,
the cluster a scenario runs on and a polling helper. A module of its own (not conftest) so that
the tier runs in one pytest call with tests/operator, whose conftest has the same module name."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from polling import wait_until
from ports import controlplane

__all__ = ["IMAGE", "ROOT", "Target", "controlplane", "node_module", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE_DIR = ROOT / "tests" / "controlplane"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = f"rocketstore/rocketstore:{VERSION}"


@dataclass
class Target:
    """The cluster the scenario runs on: how to reach it, where its volumes come from, which nodes
    are real (the test control plane also registers a kwok node, where nothing runs)."""

    kubeconfig: Path
    storage_class: str | None
    nodes: set[str]
    #: makes room for ``n`` broker volumes, once (pre-created PVs; a no-op with a provisioner)
    add_volumes: Callable[[int], None] = field(default=lambda n: None)
    #: SIGKILLs the process of a container (its status' ``containerID``) through the node's container
    #: runtime, as the kernel's OOM killer or a crash ends it: no ``kubectl exec`` can, since a
    #: container's main process is its PID namespace's init, to which the namespace cannot send
    #: SIGKILL. None where the nodes' runtimes are out of the test's reach (a given cluster)
    kill_container: Callable[[str], None] | None = None


def _load_node() -> ModuleType:
    """node.py is a script beside controlplane.py (which tests/support/ports.py loads): load it by path."""
    if str(CONTROLPLANE_DIR) not in sys.path:
        sys.path.insert(0, str(CONTROLPLANE_DIR))  # node.py imports controlplane by name
    spec = importlib.util.spec_from_file_location("node", CONTROLPLANE_DIR / "node.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


node_module = _load_node()
