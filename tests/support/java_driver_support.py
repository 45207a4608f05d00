"""The one place tests make sure the RocketMQ Java client driver is built (tests/compat).

Kept apart from java_rocketmq.py, which the benchmarks import without pytest.
"""

from __future__ import annotations

import sys

import java_rocketmq
import pytest
from java_rocketmq import BuildError, ToolMissing
from tool_support import require_tool


def require_java_driver(purpose: str) -> None:
    """java and mvn present and the driver built; a missing tool fails under CI, skips otherwise."""
    try:
        java_rocketmq.find_tools()
    except ToolMissing as e:
        require_tool(e.tool, False, f"{purpose} build the RocketMQ Java client driver with Maven and run it on Java 17")
    try:
        took = java_rocketmq.build_driver()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\nRocketMQ client driver: {'up to date' if took is None else f'built by mvn in {took:.1f} s'}",
          file=sys.stderr)
