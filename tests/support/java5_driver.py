"""The real RocketMQ 5.x Java client (``rocketmq-client-java``, gRPC v2) as a test peer:
tests/support/drivers/java5 (Client5Driver.java), built once with Maven, run as a ``java``
subprocess that prints JSON lines. Used by tests/compat/java5 and by the RocketMQ 5.3 auth
comparison with Apache (tests/compat/apache_broker/test_grpc_auth_against_rocketmq.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import java_rocketmq
from java_driver_support import require_maven_build
from tool_support import DRIVERS_DIR

DRIVER_DIR = DRIVERS_DIR / "java5"
DRIVER_POM = DRIVER_DIR / "pom.xml"
DRIVER_JAR = DRIVER_DIR / "target" / "client5-driver.jar"
DRIVER_LIB = DRIVER_DIR / "target" / "lib"
DRIVER_MAIN = "io.rocketstore.clients5.Client5Driver"


def require_java5_driver() -> str:
    """The ``java`` executable, with the driver built; a missing tool fails under CI and skips otherwise."""
    took = require_maven_build(
        lambda: java_rocketmq.maven_build(DRIVER_POM, [DRIVER_JAR, DRIVER_LIB], [DRIVER_POM, DRIVER_DIR / "src"]),
        "the RocketMQ 5.x Java client driver is built with Maven and runs on Java 17")
    print(f"\nRocketMQ 5.x Java client driver: {'up to date' if took is None else f'built in {took:.1f} s'}",
          file=sys.stderr)
    return java_rocketmq.find_tools()[0]


def client_log(workdir: Path) -> Path:
    """Where the client logs when driven with ``workdir`` (it tells its caller only that a start
    failed; the refused call's status is in this log)."""
    return workdir / "logs" / "rocketmq" / "rocketmq-client.log"


def drive(java: str, endpoint: str, workdir: Path, *args: str | int, timeout: float = 60,
          credentials: tuple[str, str] | None = None, check: bool = True) -> list[dict[str, Any]]:
    """The driver's JSON lines for mode ``args[0]`` against the gRPC ``endpoint`` (host:port);
    ``credentials`` (access key, secret key) sign its calls; unless ``check`` is off it must have
    succeeded."""
    env = {**os.environ, "HOME": str(workdir)}  # the client logs under $HOME/logs
    if credentials is not None:
        env["CLIENT5_ACCESS_KEY"], env["CLIENT5_SECRET_KEY"] = credentials
    # the client logs under ${user.home}/logs/rocketmq, which Java takes from the password file, not HOME
    proc = subprocess.run([java, f"-Duser.home={workdir}", "-cp", f"{DRIVER_JAR}{os.pathsep}{DRIVER_LIB}/*",
                           DRIVER_MAIN, str(args[0]), endpoint, *map(str, args[1:])], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)
    lines = [json.loads(raw) for raw in proc.stdout.splitlines() if raw.startswith("{")]
    errors = [line for line in lines if line["kind"] == "error"]
    if check:
        assert proc.returncode == 0 and not errors, (errors, proc.stderr[-3000:])
    return lines


def start(java: str, endpoint: str, workdir: Path, *args: str | int) -> tuple[subprocess.Popen[bytes], Path]:
    """Mode ``args[0]`` running in the background (a send loop through a failover): the process and
    the file its stdout goes to, which :func:`lines_in` reads while it runs (each line is flushed)."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / f"{args[0]}.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen([java, f"-Duser.home={workdir}", "-cp", f"{DRIVER_JAR}{os.pathsep}{DRIVER_LIB}/*",
                                 DRIVER_MAIN, str(args[0]), endpoint, *map(str, args[1:])],
                                stdout=sink, stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(workdir)})
    return proc, out


def lines_in(out: Path) -> list[dict[str, Any]]:
    """The whole JSON lines a background run has printed so far (a line being written is left out)."""
    text = out.read_text()
    return [json.loads(raw) for raw in text[:text.rfind("\n") + 1].splitlines() if raw.startswith("{")]


def of(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == kind]
