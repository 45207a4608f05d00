"""Our broker as a process behind a recording proxy, and the Java 4.x client driver pointed at it:
what the tests of unmodified clients against our broker (tests/compat/java4, cpp, mqadmin) build on.
The ``rocketstore_broker`` fixture is in tests/compat/conftest.py.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from broker_process import Broker
from java_rocketmq import ClientDriver
from ports import free_port

from rocketstore.remoting.command import FrameDecoder, ProtocolError, RemotingCommand

BROKER_HOST = "127.0.0.2"  # where the broker really listens; 127.0.0.1 is the recording proxy
PUBLIC_HOST = "127.0.0.1"


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


class RocketStoreBroker(Broker):
    """broker_process's broker on 127.0.0.2, behind a :class:`RecordingProxy` on 127.0.0.1
    with the same port, which is also the address it publishes in routes."""

    def __init__(self, workdir: Path, name: str = "e2e-broker", conf: str = "") -> None:
        """``conf``: broker.conf lines added to the ones every such broker has."""
        self.name = name
        self.port = free_port(PUBLIC_HOST, hosts=(BROKER_HOST,))  # the proxy's and the broker's
        # small segments: the tests' data spans several CommitLog files
        super().__init__(workdir, f"brokerClusterName=E2ECluster\nbrokerName={name}\n"
                         f"mappedFileSizeCommitLog={1024 * 1024}\nmappedFileSizeConsumeQueue={20 * 1000}\n{conf}",
                         listen_host=BROKER_HOST, publish_host=PUBLIC_HOST, listen_port=self.port)
        self.proxy = RecordingProxy((PUBLIC_HOST, self.port), (BROKER_HOST, self.port))

    @property
    def addr(self) -> str:
        """The address in routes and offset message ids (the proxy)."""
        return f"{PUBLIC_HOST}:{self.port}"

    def start(self) -> None:
        self.proxy.start()
        try:
            super().start()
        except BaseException:
            self.proxy.stop()
            raise

    def stop(self, sig: int = signal.SIGTERM) -> int:
        try:
            return super().stop(sig)
        finally:
            self.proxy.stop()

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        """The group's offsets as the broker stores them (QUERY_CONSUMER_OFFSET), by queue id."""
        from rocketstore.client.consumer import PullConsumer

        consumer = PullConsumer(self.namesrv, group)
        try:
            return {mq.queue_id: consumer.fetch_offset(mq) for mq in consumer.queues(topic)}
        finally:
            consumer.close()

    def wait_committed_offsets(self, group: str, topic: str, expected: dict[int, int], timeout: float = 10.0) -> None:
        """Wait until the broker stores ``expected`` for the group: a push consumer's shutdown sends its
        offsets one-way (UPDATE_CONSUMER_OFFSET, no response), so the broker may apply them a little
        after the client process has exited."""
        deadline = time.monotonic() + timeout
        while (stored := self.committed_offsets(group, topic)) != expected:
            assert time.monotonic() < deadline, f"offsets of {group} on {topic}: {stored}, expected {expected}"
            time.sleep(0.05)


def java_driver(broker: RocketStoreBroker, workdir: Path, serialize_type: str | None = None) -> ClientDriver:
    """The Java driver pointed at our name server, with the fast timers of the ``anchor_client``
    fixture (tests/compat/conftest.py): routes, heartbeats and rebalances every second instead of
    every 30, 30 and 20 s."""
    return ClientDriver(broker.namesrv, workdir, serialize_type=serialize_type, poll_namesrv_ms=1000,
                        heartbeat_ms=1000, rebalance_interval_ms=1000)
