"""What the operator tests share besides fixtures: constants, the control-plane script loaded by
path, a free port. A module of its own, not conftest, so that this tier runs in one pytest call with
others whose conftest has the same module name."""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType

from polling import wait_until

__all__ = ["BROKER_NAMESPACE", "BROKER_STORE", "ROOT", "SECURED_NAMESPACE", "SECURED_STORE", "STORAGE_CLASS",
           "controlplane", "free_port", "wait_until"]

ROOT = Path(__file__).resolve().parents[2]
STORAGE_CLASS = "rs-test"
BROKER_NAMESPACE = "brokers"
BROKER_STORE = "rsb"
#: the RocketStore of test_operator_secured_broker.py: its broker-0 runs with ACL and TLS enforcing
SECURED_NAMESPACE = "secured-ops"
SECURED_STORE = "guarded"


def _load_controlplane() -> ModuleType:
    path = ROOT / "operator" / "controlplane" / "controlplane.py"
    spec = importlib.util.spec_from_file_location("rocketstore_controlplane", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


controlplane = _load_controlplane()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
