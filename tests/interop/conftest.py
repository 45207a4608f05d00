"""Fixtures for the interop tests against Apache RocketMQ's own store (4.9.8, from Maven Central).

The Java side is ``java/src/main/java/io/rocketstore/interop/StoreDriver.java``, built once per
session with Maven into ``java/target`` (``store-driver.jar`` plus the runtime classpath in
``target/lib``). ``java`` and ``mvn`` are required: under CI a missing tool fails the tests; on a
developer machine (``CI`` unset) the tests are skipped with the reason.

The segment sizes below must equal the constants at the top of StoreDriver.java.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tool_support import require_executable

from rocketstore.store.config import StoreConfig

JAVA_DIR = Path(__file__).parent / "java"
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

# What MappedFile.clean and friends need on JDK 17 (see shared/reference/java-rocketmq-anchor.md).
JDK17_FLAGS = [
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
]

MVN_TIMEOUT_S = 900  # a cold ~/.m2 downloads ~20 MB of artifacts
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


def _driver_is_current() -> bool:
    """The jar and its classpath exist and are newer than every input of the build."""
    lib = TARGET / "lib"
    if not DRIVER_JAR.is_file() or not lib.is_dir() or not any(lib.glob("rocketmq-store-*.jar")):
        return False
    built = DRIVER_JAR.stat().st_mtime
    inputs = [POM, *(JAVA_DIR / "src").rglob("*")]
    return all(p.stat().st_mtime <= built for p in inputs if p.is_file())


@pytest.fixture(scope="session")
def rocketmq_driver() -> list[str]:
    """Build the Java driver (once per session) and return the command line that runs it.

    Append the mode and its arguments: ``[*rocketmq_driver, "write", dir, "600"]``.
    """
    java = require_executable("java", "the interop tests run Apache RocketMQ's store on Java 17")
    mvn = require_executable("mvn", "the interop tests build their RocketMQ driver with Maven")
    if _driver_is_current():
        print(f"\ninterop driver {DRIVER_JAR} is up to date, mvn not run", file=sys.stderr)
    else:
        begin = time.monotonic()
        build = subprocess.run(
            [mvn, "-q", "-B", "-f", str(POM), "package"],
            capture_output=True, text=True, timeout=MVN_TIMEOUT_S, check=False,
        )
        took = time.monotonic() - begin
        if build.returncode != 0 or not DRIVER_JAR.is_file():
            pytest.fail(
                f"building the RocketMQ interop driver failed (exit {build.returncode}, {took:.1f} s):\n"
                f"{build.stdout[-4000:]}\n{build.stderr[-4000:]}",
                pytrace=False,
            )
        print(f"\ninterop driver built by mvn in {took:.1f} s", file=sys.stderr)
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
