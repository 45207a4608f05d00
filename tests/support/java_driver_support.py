"""The one place tests make sure the RocketMQ Java client driver is built (tests/compat).

Kept apart from java_rocketmq.py, which the benchmarks import without pytest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import java_rocketmq
import pytest
from java_rocketmq import BuildError, ToolMissing
from tool_support import require_tool

T = TypeVar("T")


def require_maven_build(build: Callable[[], T], why: str) -> T:
    """java and mvn present and ``build`` (a Maven build of a driver) done; a missing tool fails
    under CI and skips otherwise (``why`` says what needs it), a failed build fails."""
    try:
        java_rocketmq.find_tools()
    except ToolMissing as e:
        require_tool(e.tool, False, why)
    try:
        return build()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)


def require_java_driver(purpose: str) -> None:
    """java and mvn present and the driver built; a missing tool fails under CI, skips otherwise."""
    took = require_maven_build(java_rocketmq.build_driver,
                               f"{purpose} build the RocketMQ Java client driver with Maven and run it on Java 17")
    print(f"\nRocketMQ client driver: {'up to date' if took is None else f'built by mvn in {took:.1f} s'}",
          file=sys.stderr)
