"""Helpers of the end-to-end tests (tests/e2e): our broker as a process behind a recording proxy,
and the Java client driver of tests/clients pointed at it. The fixtures are in conftest.py.

A module with its own name rather than conftest.py, so test modules can import from it even when
pytest runs several test directories (each with a conftest.py) in one session.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rocketstore.remoting.command import FrameDecoder, ProtocolError, RemotingCommand

# The Java helper lives in tests/clients (tests/ is not a package): import it as that directory's
# conftest does, by putting the directory on sys.path (conftest.py does the same; once is enough).
CLIENTS_DIR = str(Path(__file__).resolve().parents[1] / "clients")
if CLIENTS_DIR not in sys.path:
    sys.path.insert(0, CLIENTS_DIR)

import java_rocketmq  # noqa: E402
from java_rocketmq import ClientDriver  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BROKER_HOST = "127.0.0.2"  # where the broker really listens; 127.0.0.1 is the recording proxy
PUBLIC_HOST = "127.0.0.1"
BOOT_TIMEOUT_S = 60.0


def missing_tool(reason: str) -> None:
    """Fail under CI, skip (with the reason) elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"end-to-end client tests need this tool, and CI must have it: {reason}", pytrace=False)
    print(f"\nSKIP end-to-end client tests: {reason} (under CI this fails)", file=sys.stderr)
    pytest.skip(reason)


# -- the recording proxy --------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    """One remoting frame the proxy forwarded. ``outbound``: client -> broker."""

    conn: int
    outbound: bool
    cmd: RemotingCommand


@dataclass
class RecordingProxy:
    """A TCP proxy ``listen`` -> ``upstream`` that records every remoting frame it forwards.

    Bytes are forwarded unchanged as they come; decoding is a side copy, and a stream that does
    not decode is recorded in ``errors`` (and still forwarded).
    """

    listen: tuple[str, int]
    upstream: tuple[str, int]
    frames: list[Frame] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: socket.socket | None = None
    _stopping: bool = False
    _conns: int = 0
    _sockets: list[socket.socket] = field(default_factory=list)

    def start(self) -> RecordingProxy:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(self.listen)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping = True
        if self._server is not None:
            self._server.close()
        with self._lock:
            socks = list(self._sockets)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stopping:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError as exc:
                self.errors.append(f"upstream connect failed: {exc}")
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += 1
                conn = self._conns
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(conn, client, upstream), name=f"proxy-{conn}",
                             daemon=True).start()

    def _pump(self, conn: int, client: socket.socket, upstream: socket.socket) -> None:
        decoders = {client: FrameDecoder(), upstream: FrameDecoder()}
        peer = {client: upstream, upstream: client}
        broken: set[socket.socket] = set()
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                for src in readable:
                    data = src.recv(1 << 16)
                    if not data:
                        return
                    peer[src].sendall(data)
                    if src in broken:
                        continue
                    try:
                        cmds = decoders[src].feed(data)
                    except ProtocolError as exc:
                        broken.add(src)
                        self.errors.append(f"connection {conn}: {exc}")
                        continue
                    with self._lock:
                        self.frames.extend(Frame(conn, src is client, cmd) for cmd in cmds)
        except (OSError, ValueError):
            return
        finally:
            client.close()
            upstream.close()

    def requests(self, code: int | None = None) -> list[Frame]:
        """Client requests (not responses), optionally of one request code."""
        with self._lock:
            frames = list(self.frames)
        return [f for f in frames if f.outbound and not f.cmd.is_response and (code is None or f.cmd.code == code)]

    def on_connections(self, conns: set[int]) -> list[Frame]:
        """Every frame, both ways, of the given connections."""
        with self._lock:
            return [f for f in self.frames if f.conn in conns]

    def response_to(self, request: Frame) -> RemotingCommand | None:
        """The broker's response on the same connection with the request's opaque."""
        with self._lock:
            frames = list(self.frames)
        for f in frames:
            if f.conn == request.conn and not f.outbound and f.cmd.is_response and f.cmd.opaque == request.cmd.opaque:
                return f.cmd
        return None


# -- our broker as a process ----------------------------------------------------------------------


def _free_port_on_both() -> int:
    """A port free on 127.0.0.1 (the proxy) and on 127.0.0.2 (the broker)."""
    for _ in range(100):
        port = java_rocketmq.free_port()
        try:
            with socket.socket() as s:
                s.bind((BROKER_HOST, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no port free on both loopback addresses")


class RocketStoreBroker:
    """``rocketstore broker`` as a child process behind a :class:`RecordingProxy`."""

    def __init__(self, workdir: Path, name: str = "e2e-broker", **extra_conf: str) -> None:
        self.workdir = workdir
        self.name = name
        self.port = _free_port_on_both()
        self.namesrv_port = java_rocketmq.free_port()
        self.http_port = java_rocketmq.free_port()
        conf = {
            "brokerClusterName": "E2ECluster",
            "brokerName": name,
            "brokerIP1": PUBLIC_HOST,
            "listenHost": BROKER_HOST,
            "listenPort": str(self.port),
            "namesrvListenPort": str(self.namesrv_port),
            "httpListenPort": str(self.http_port),
            "storePathRootDir": str(workdir / "store"),
            # small segments: the tests' data spans several CommitLog files
            "mappedFileSizeCommitLog": str(1024 * 1024),
            "mappedFileSizeConsumeQueue": str(20 * 1000),
            **extra_conf,
        }
        self.conf = workdir / "broker.conf"
        self.conf.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        self.log_path = workdir / "broker.log"
        self.proxy = RecordingProxy((PUBLIC_HOST, self.port), (BROKER_HOST, self.port))
        self.proc: subprocess.Popen[str] | None = None

    @property
    def namesrv(self) -> str:
        return f"{BROKER_HOST}:{self.namesrv_port}"

    @property
    def addr(self) -> str:
        """The address in routes and offset message ids (the proxy)."""
        return f"{PUBLIC_HOST}:{self.port}"

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def start(self) -> RocketStoreBroker:
        self.proxy.start()
        env = {**os.environ, "HOME": str(self.workdir / "home")}
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "broker", "-c", str(self.conf)],
                                     cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        ready = threading.Event()

        def watch() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.strip() == "ready":
                    ready.set()  # keep draining stdout so the broker never blocks on it

        threading.Thread(target=watch, name="broker-stdout", daemon=True).start()
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"our broker did not become ready:\n{self.log_tail()}")
        return self

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
            self._log.close()
        self.proxy.stop()
        return code

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{BROKER_HOST}:{self.http_port}/metrics", timeout=10) as resp:
            return str(resp.read().decode())

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The group's offsets as the broker stores them (QUERY_CONSUMER_OFFSET), by queue id."""
        from rocketstore.client.consumer import PullConsumer

        consumer = PullConsumer(self.namesrv, group)
        try:
            return {mq.queue_id: consumer.fetch_offset(mq) for mq in consumer.queues(topic)}
        finally:
            consumer.close()


#: JVM options for short client runs: C1 only and the serial collector take ~30% less CPU per run
#: than the defaults, which matters when two JVMs and the broker share 2 cores (a client whose
#: start-up eats its 3 s send timeout fails its first send). They change no client behaviour.
LIGHT_JVM = ("-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1", "-XX:+UseSerialGC")


def java_driver(broker: RocketStoreBroker, workdir: Path, serialize_type: str | None = None) -> ClientDriver:
    """The Java driver pointed at our name server, with the fast timers tests/clients uses: routes,
    heartbeats and rebalances every second instead of every 30, 30 and 20 s."""
    return ClientDriver(broker.namesrv, workdir, serialize_type=serialize_type, poll_namesrv_ms=1000,
                        heartbeat_ms=1000, rebalance_interval_ms=1000, jvm_args=LIGHT_JVM)
