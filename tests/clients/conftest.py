"""Fixtures for tests that drive a broker with the real RocketMQ Java client (see java_rocketmq.py).

``java`` and ``mvn`` are required: under CI (env ``CI`` set) a missing tool fails the tests; on a
developer machine they are skipped with the reason.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# java_rocketmq.py lives beside this file (tests/ is not a package): make it importable as a top-level module.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import java_rocketmq
from java_driver_support import require_java_driver
from java_rocketmq import AnchorError, BuildError, ClientDriver, RocketMQAnchor


@pytest.fixture(scope="session")
def java_client_built() -> None:
    """java and mvn are present and the client driver is built (once per session)."""
    require_java_driver("the Java client tests")


@pytest.fixture(scope="module")
def rocketmq_anchor(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQAnchor]:
    """Apache RocketMQ's own name server and broker (4.9.7), one pair per test module."""
    try:
        took = java_rocketmq.build_anchor()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    if took is not None:
        print(f"\nRocketMQ anchor classpath copied by mvn in {took:.1f} s", file=sys.stderr)
    anchor = RocketMQAnchor(tmp_path_factory.mktemp("rocketmq-anchor"))
    begin = time.monotonic()
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\nRocketMQ anchor up in {time.monotonic() - begin:.1f} s {anchor.boot_seconds}: "
          f"namesrv {anchor.namesrv_addr}, broker {anchor.broker_addr}", file=sys.stderr)
    yield anchor
    begin = time.monotonic()
    codes = anchor.stop()
    print(f"\nRocketMQ anchor stopped in {time.monotonic() - begin:.1f} s, exit codes {codes}", file=sys.stderr)


@pytest.fixture(scope="module")
def anchor_client(rocketmq_anchor: RocketMQAnchor, tmp_path_factory: pytest.TempPathFactory) -> ClientDriver:
    """The Java client driver pointed at the anchor's name server; routes refresh, heartbeats and
    rebalances every second instead of every 30, 30 and 20 s (see ClientDriver)."""
    return ClientDriver(rocketmq_anchor.namesrv_addr, tmp_path_factory.mktemp("java-client"),
                        poll_namesrv_ms=1000, heartbeat_ms=1000, rebalance_interval_ms=1000)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name(prefix)``: a topic or group name unique to this test (RocketMQ allows [%|a-zA-Z0-9_-])."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:80]
    stamp = f"{os.getpid()}_{time.monotonic_ns() % 10**9}"

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{stamp}"

    return make
