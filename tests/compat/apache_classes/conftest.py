"""Fixtures for the interop tests against Apache RocketMQ's own store and remoting classes (4.9.8,
from Maven Central).

The Java side is the Maven project tests/support/drivers/apache_classes (StoreDriver.java and
RemotingDriver.java), built with java_rocketmq.maven_build into its ``target`` (``store-driver.jar``
plus the runtime classpath in ``target/lib``) when an input changed. ``java`` and ``mvn`` are
required: under CI a missing tool fails the tests; on a developer machine (``CI`` unset) the tests
are skipped with the reason.

The segment sizes below must equal the constants at the top of StoreDriver.java.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from java_rocketmq import JDK17_FLAGS, BuildError, maven_build
from tool_support import DRIVERS_DIR, require_executable

from rocketstore.store.config import StoreConfig

JAVA_DIR = DRIVERS_DIR / "apache_classes"
POM = JAVA_DIR / "pom.xml"
TARGET = JAVA_DIR / "target"
DRIVER_JAR = TARGET / "store-driver.jar"
DRIVER_MAIN = "io.rocketstore.interop.StoreDriver"

# Same values as StoreDriver.java: 64 KiB CommitLog segments (they roll), 100-entry consume
# queue files, 8,440-byte index files of 399 entries.
COMMIT_LOG_FILE_SIZE = 64 * 1024
CONSUME_QUEUE_FILE_SIZE = 20 * 100
MAX_HASH_SLOT_NUM = 100
MAX_INDEX_NUM = 400

DRIVER_TIMEOUT_S = 180


ConfigFactory = Callable[..., StoreConfig]


def _interop_config(root: Path | str, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": COMMIT_LOG_FILE_SIZE,
        "mapped_file_size_consume_queue": CONSUME_QUEUE_FILE_SIZE,
        "max_hash_slot_num": MAX_HASH_SLOT_NUM,
        "max_index_num": MAX_INDEX_NUM,
    }
    values.update(overrides)
    return StoreConfig(**values)


@pytest.fixture(scope="session")
def interop_config() -> ConfigFactory:
    """``interop_config(root, **overrides)``: our StoreConfig with the driver's sizes."""
    return _interop_config


@pytest.fixture(scope="session")
def rocketmq_driver() -> list[str]:
    """Build the Java driver (once per session, when an input changed) and return the command line
    that runs it.

    Append the mode and its arguments: ``[*rocketmq_driver, "write", dir, "600"]``.
    """
    java = require_executable("java", "the interop tests run Apache RocketMQ's store on Java 17")
    mvn = require_executable("mvn", "the interop tests build their RocketMQ driver with Maven")
    try:
        took = maven_build(POM, [DRIVER_JAR, TARGET / "lib"], [POM, JAVA_DIR / "src"], mvn=mvn)
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    print(f"\ninterop driver {DRIVER_JAR}: {'up to date' if took is None else f'built by mvn in {took:.1f} s'}",
          file=sys.stderr)
    classpath = os.pathsep.join([str(DRIVER_JAR), str(TARGET / "lib" / "*")])
    return [java, *JDK17_FLAGS, "-Xmx256m", "-cp", classpath, DRIVER_MAIN]


@pytest.fixture(scope="session")
def java_home_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch ``user.home`` for the JVM, so RocketMQ's defaults never touch the real home."""
    return tmp_path_factory.mktemp("java-user-home")


DriverRunner = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def run_driver(rocketmq_driver: list[str], java_home_dir: Path) -> DriverRunner:
    """Run one driver mode; returns its JSON lines. A non-zero exit fails with the JVM's stderr."""

    def run(mode: str, *args: str | os.PathLike[str]) -> list[dict[str, Any]]:
        cmd = [rocketmq_driver[0], f"-Duser.home={java_home_dir}", *rocketmq_driver[1:], mode, *map(str, args)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            pytest.fail(f"RocketMQ driver {mode} {args} exited {proc.returncode}:\n{proc.stderr[-6000:]}",
                        pytrace=False)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        errors = [line for line in lines if line.get("kind") == "error"]
        assert not errors, f"RocketMQ reported errors: {errors}"
        return lines

    return run
