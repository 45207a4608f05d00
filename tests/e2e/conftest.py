"""Fixtures for end-to-end tests: real, unmodified RocketMQ clients against our broker.

* ``rocketstore_broker`` (module scope): ``rocketstore broker -c broker.conf`` as a child process
  with small CommitLog segments, free ports and ``brokerIP1=127.0.0.1``, behind a
  :class:`e2e_support.RecordingProxy`. The broker listens on 127.0.0.2 (``listenHost``) and
  publishes 127.0.0.1 with the same port in its routes; the proxy owns 127.0.0.1:port, forwards
  every byte both ways and decodes the frames it forwards, so a test can assert what a real client
  put on the wire (request codes, header encoding, header fields) and how the broker answered.
  Its name server (``namesrv``) is reached directly on 127.0.0.2. At teardown the broker must stop
  cleanly (exit 0) with no traceback in its log.
* ``java_client_built``: the RocketMQ 4.9.8 Java client driver of tests/clients
  (``java_rocketmq.py``, imported from there as tests/clients/conftest.py does: its directory goes
  on ``sys.path``); ``e2e_support.java_driver`` points it at our broker.
* ``unique_name``: topic and group names unique to a test.

The helpers live in ``e2e_support.py`` (importable by name from the test modules).
``java``/``mvn`` (and, for the C++ client, ``pip`` with network access once) are required: under
CI (env ``CI`` set) a missing tool fails the tests; on a developer machine they are skipped.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# java_rocketmq.py lives in tests/clients (tests/ is not a package): make it importable as a top-level module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))

from e2e_support import RocketStoreBroker
from java_driver_support import require_java_driver


@pytest.fixture(scope="module")
def rocketstore_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketStoreBroker]:
    """Our broker for one test module (see the module docstring)."""
    broker = RocketStoreBroker(tmp_path_factory.mktemp("rocketstore-broker"))
    begin = time.monotonic()
    broker.start()
    print(f"\nour broker up in {time.monotonic() - begin:.1f} s: namesrv {broker.namesrv}, broker {broker.addr}",
          file=sys.stderr)
    yield broker
    code = broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert code == 0, f"broker exited {code}:\n{log[-6000:]}"
    assert "Traceback" not in log, f"the broker logged an exception:\n{log[log.index('Traceback') - 2000:][:8000]}"
    assert not broker.proxy.errors, broker.proxy.errors


# -- the Java client -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def java_client_built() -> None:
    """java and mvn are present and the client driver is built (once per session)."""
    require_java_driver("the end-to-end tests")


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name(prefix)``: a topic or group name unique to this test ([%|a-zA-Z0-9_-] only)."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:60]
    stamp = f"{os.getpid()}_{time.monotonic_ns() % 10**9}"

    def make(prefix: str) -> str:
        return f"{prefix}_{base}_{stamp}"

    return make
