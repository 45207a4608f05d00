"""Which hot path a process runs: the Rust extension by default, the Python reference on request.

The differential tests prove the two equal; these prove the switch picks what it says, so a
"native" run really exercised native code and a ``ROCKETSTORE_NATIVE=0`` run really did not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from native_support import native_module
from tool_support import under_ci

PROBE = """
import json
from rocketstore.common import message, native
from rocketstore.store import dispatch_scan, index_file
print(json.dumps({
    "implementation": native.IMPLEMENTATION,
    "reason": native.REASON,
    "encode": message.encode_record.__module__,
    "scan": dispatch_scan._scan.__module__,
    "index": index_file._put_index_entries.__module__,
}))
"""


def probe(switch: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ROCKETSTORE_NATIVE"}
    if switch is not None:
        env["ROCKETSTORE_NATIVE"] = switch
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True, capture_output=True, text=True).stdout
    result: dict[str, str] = json.loads(out)
    return result


def test_the_extension_runs_by_default() -> None:
    native_module()  # fails under CI, skips elsewhere, when the install did not build it
    found = probe(None)
    assert found["implementation"] == "native", found["reason"]
    assert found["encode"] == found["scan"] == found["index"] == "rocketstore.common._native"


@pytest.mark.parametrize("switch", ["0", "false", "off"])
def test_the_switch_selects_the_python_reference(switch: str) -> None:
    found = probe(switch)
    assert found["implementation"] == "python"
    assert "ROCKETSTORE_NATIVE" in found["reason"]
    assert (found["encode"], found["scan"], found["index"]) == (
        "rocketstore.common.message", "rocketstore.store.dispatch_scan", "rocketstore.store.index_file")


def test_this_run_uses_what_its_environment_asks_for() -> None:
    """Under CI, a run that did not switch the extension off must be running it (not a silent fallback)."""
    from rocketstore.common import native

    if os.environ.get("ROCKETSTORE_NATIVE", "1") == "0":
        assert native.IMPLEMENTATION == "python"
    elif under_ci():
        assert native.IMPLEMENTATION == "native", native.REASON
