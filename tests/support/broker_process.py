"""A real `rocketstore broker` process (with its embedded name server): the one launcher every test
that needs a broker in a process of its own uses (restarts, kill -9, Spark executors, CPU
contention, the command line itself, the operator, real Java and C++ clients).

* :class:`BrokerProcess` runs ``rocketstore broker ARGS`` as given: a thread collects its stdout
  lines (the listening addresses, then ``ready``) and keeps draining them, stderr goes to a log
  file. Tests of the command line itself use it directly.
* :class:`Broker` writes a broker.conf (free ports on loopback, small CommitLog segments, plus the
  caller's lines) and runs ``rocketstore broker -c broker.conf`` through :class:`BrokerProcess`.

Importable from any test directory: pyproject's pytest ``pythonpath`` puts tests/support on sys.path.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from ports import free_port
from remoting_front_switch import front_requested

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60.0


class BrokerProcess:
    """``rocketstore broker ARGS`` as a child process; stdout lines in :attr:`lines`, stderr in ``log_path``.

    ``env`` is added to the environment (HOME defaults to a scratch directory beside the log, so
    the broker's defaults never touch the real home); ``wrapper`` goes before the command (one that
    execs it, so :attr:`proc` is the broker: ``ip netns exec NAME``).
    """

    def __init__(self, args: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 wrapper: Sequence[str] = ()) -> None:
        self.log_path = log_path
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._log = log_path.open("w")
        full_env = {**os.environ, "HOME": str(log_path.parent / "home"), **(env or {})}
        self.proc = subprocess.Popen([*wrapper, sys.executable, "-m", "rocketstore.cli", "broker", *args], cwd=ROOT,
                                     env=full_env, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     stdin=subprocess.DEVNULL)
        threading.Thread(target=self._read_stdout, name="broker-stdout", daemon=True).start()

    def _read_stdout(self) -> None:
        """Record every line and keep draining, so the broker never blocks on a full pipe."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == "ready":
                self._ready.set()

    def log_text(self) -> str:
        """What the broker wrote to stderr so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, str]:
        """Wait for the ``ready`` line; returns the listening lines as {"remoting": "host:port ...", ...}.

        If the broker exits or the time runs out, it is killed and the test fails with its log.
        """
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(signal.SIGKILL)
                raise AssertionError(f"broker not ready (exit {self.proc.returncode}); stdout={self.lines}\n"
                                     f"{self.log_text()[-6000:]}")
        return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in self.lines if " " in line}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` (if still running) and return the exit code; killed if it outlives ``timeout``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code


class Broker:
    """``rocketstore broker -c broker.conf`` with free ports, on loopback.

    ``extra_conf`` is appended to broker.conf (later lines win); ``listen_host`` is where the
    broker binds and ``publish_host`` what it puts in routes (brokerIP1); ``listen_port`` pins the
    remoting port (a free one otherwise); ``store`` defaults to ``tmp/store``; ``env`` is added to
    the broker's environment; ``wrapper`` runs it (:class:`BrokerProcess`), and ``ports_host`` is
    where free ports are looked for (``listen_host``, unless that is not an address of this
    namespace: a broker in a network namespace of its own, where every port is free).
    """

    def __init__(self, tmp: Path, extra_conf: str = "", *, flush_disk_type: str = "ASYNC_FLUSH",
                 listen_host: str = "127.0.0.1", publish_host: str = "127.0.0.1", listen_port: int | None = None,
                 store: Path | None = None, env: Mapping[str, str] | None = None, wrapper: Sequence[str] = (),
                 ports_host: str | None = None) -> None:
        self.tmp = tmp
        self.listen_host = listen_host
        self.store = store or tmp / "store"
        self.env = dict(env or {})
        self.wrapper = list(wrapper)
        ports_host = ports_host or listen_host
        # A master's HA service listens on listenPort + 1 (haListenPort's default).
        self.listen_port = listen_port or free_port(ports_host, also=(1,))
        self.namesrv_port, self.http_port = free_port(ports_host), free_port(ports_host)
        self.grpc_port = free_port(ports_host)
        self.conf = tmp / "broker.conf"
        self.conf.write_text(
            f"brokerClusterName=TestCluster\nbrokerName=broker-a\nbrokerIP1={publish_host}\n"
            f"listenHost={listen_host}\nstorePathRootDir={self.store}\nflushDiskType={flush_disk_type}\n"
            f"listenPort={self.listen_port}\nnamesrvListenPort={self.namesrv_port}\nhttpListenPort={self.http_port}\n"
            f"grpcListenPort={self.grpc_port}\n"
            "mappedFileSizeCommitLog=131072\n"  # small segments: data spans several files
            + ("" if (front := front_requested()) is None else f"remotingNativeFront={str(front).lower()}\n")
            + extra_conf
        )
        self.process: BrokerProcess | None = None

    @property
    def namesrv(self) -> str:
        return f"{self.listen_host}:{self.namesrv_port}"

    @property
    def addr(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def grpc_endpoint(self) -> str:
        """host:port of the gRPC v2 endpoint (RocketMQ 5.x clients)."""
        return f"{self.listen_host}:{self.grpc_port}"

    @property
    def proc(self) -> subprocess.Popen[str]:
        assert self.process is not None, "broker not started"
        return self.process.proc

    @property
    def log_path(self) -> Path:
        assert self.process is not None, "broker not started"
        return self.process.log_path

    def log_text(self) -> str:
        return self.process.log_text() if self.process is not None else ""

    def metrics(self) -> str:
        """The broker's /metrics page (Prometheus text)."""
        with urllib.request.urlopen(f"http://{self.listen_host}:{self.http_port}/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def start(self) -> None:
        """Start and wait for ``ready``; each start logs to a file of its own (restarts keep earlier logs)."""
        log = self.tmp / f"broker-{time.monotonic_ns()}.log"
        self.process = BrokerProcess(["-c", str(self.conf)], log, {"HOME": str(self.tmp / "home"), **self.env},
                                     self.wrapper)
        self.process.wait_ready()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None, "broker not started"
        return self.process.stop(sig)

    @contextlib.contextmanager
    def running(self) -> Iterator[Broker]:
        """Started for the ``with`` block, stopped after it (what every broker fixture does)."""
        self.start()
        try:
            yield self
        finally:
            self.stop()


def plain_acl_broker(tmp: Path, acl_file: str, extra_conf: str = "") -> Broker:
    """A Broker (not started) with ``aclEnable`` whose plain ACL is ``acl_file``: the text of
    ``conf/plain_acl.yml`` under its rocketmqHome, ``tmp``."""
    (tmp / "conf").mkdir(exist_ok=True)
    (tmp / "conf" / "plain_acl.yml").write_text(acl_file)
    return Broker(tmp, f"aclEnable=true\nrocketmqHome={tmp}\n{extra_conf}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("broker")).running() as b:
        yield b


def published_metric_names(text: str) -> set[str]:
    """Every series name a /metrics page's families can have, samples present or not (a counter
    of nothing yet, e.g. deleted files, is still published): what dashboards and alert rules may
    query."""
    from prometheus_client.parser import text_string_to_metric_families

    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "info": ("_info",)}
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names
