"""A real `rocketstore broker` process (with its embedded name server), shared by the tests that
need one in a process of its own (restarts, kill -9, Spark executors, CPU contention).

Importable from any test directory: pyproject's pytest ``pythonpath`` puts ``tests/`` on sys.path.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """`rocketstore broker -c broker.conf` as a child process; stderr goes to a file."""

    def __init__(self, tmp: Path, extra_conf: str = "", *, flush_disk_type: str = "ASYNC_FLUSH") -> None:
        self.tmp = tmp
        self.listen_port, self.namesrv_port, self.http_port = _free_port(), _free_port(), _free_port()
        self.conf = tmp / "broker.conf"
        self.conf.write_text(
            "brokerClusterName=TestCluster\nbrokerName=broker-a\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={tmp / 'store'}\nflushDiskType={flush_disk_type}\n"
            f"listenPort={self.listen_port}\nnamesrvListenPort={self.namesrv_port}\nhttpListenPort={self.http_port}\n"
            "mappedFileSizeCommitLog=131072\n" + extra_conf  # small segments: data spans several files
        )
        self.proc: subprocess.Popen[str] | None = None

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def start(self) -> None:
        env = {**os.environ, "HOME": str(self.tmp / "home")}
        self.stderr = open(self.tmp / f"broker-{time.monotonic_ns()}.log", "w")  # noqa: SIM115 closed in stop
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "broker", "-c", str(self.conf)],
                                     cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 60
        for line in self.proc.stdout:
            if line.strip() == "ready":
                return
            if time.monotonic() > deadline:
                break
        raise AssertionError(f"broker did not become ready: see {self.tmp}/broker-*.log")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.stderr.close()
        return code


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = Broker(tmp_path_factory.mktemp("broker"))
    b.start()
    try:
        yield b
    finally:
        b.stop()
