"""Hostile clients against a real broker process: the connection limits hold (issue 27 section 3).

gRPC port (the native HTTP/2 front, native/src/grpc_front.rs): many streams opened and never read,
a slow reader of ReceiveMessage and PullMessage streams, oversized headers (CONTINUATION frames),
reset floods, a ping flood, a connection storm and idle connections; and that the grpcio server
(TLS ports) gets the limits it can take. Remoting port (server.py): the idle timeout and the
connection cap. The hostile side speaks raw HTTP/2 frames (:class:`RawH2`): a client library would
refuse to break the protocol's rules (open more streams than the server allows, say).

In every case the broker stays up, its resident size grows less than :data:`MAX_GROWTH`, another
client is served meanwhile (a real gRPC call through grpcio, or a remoting send when the gRPC port is
full by design), and the broker's log gains fewer than :data:`MAX_LOG_LINES` lines. Each test also
asserts what its limit does (streams refused, GOAWAY ENHANCE_YOUR_CALM, connections closed), so it
fails without that limit.

The limits are set low in broker.conf (:data:`CONF`) so the floods stay short.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from inprocess_broker import RawClient
from polling import wait_until
from prometheus_client.parser import text_string_to_metric_families

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.transport_limits import max_request_bytes
from rocketstore.client.admin import MQAdmin
from rocketstore.common.native import NATIVE
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import PullSysFlag

pytestmark = [
    pytest.mark.integration,  # a broker process
    pytest.mark.skipif(NATIVE is None or not hasattr(NATIVE, "GrpcFront"),
                       reason="the native extension (ROCKETSTORE_NATIVE=0 or not built) serves the gRPC port"),
]

STREAMS = 100
GRPC_CONNECTIONS = 40
REMOTING_CONNECTIONS = 30
CONF = (f"grpcMaxConcurrentCallsPerConnection={STREAMS}\ngrpcMaxConnections={GRPC_CONNECTIONS}\n"
        f"grpcClientIdleTimeMills=1500\nserverChannelMaxIdleTimeSeconds=2\n"
        f"remotingMaxConnections={REMOTING_CONNECTIONS}\nmaxMessageSize={128 * 1024}\n"
        # a pull may carry a whole batch of the test's 64 KiB messages (a slow reader's worst case)
        "maxTransferBytesOnMessageInMemory=4194304\nmaxTransferBytesOnMessageInDisk=4194304\n"
        "maxTransferCountOnMessageInDisk=32\n")
TOPIC = "Hostile"
MAX_GROWTH = 40 * 1024 * 1024
MAX_LOG_LINES = 20

SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
PULL = "/apache.rocketmq.v2.MessagingService/PullMessage"

# HTTP/2 frame types, flags, settings and error codes (RFC 9113)
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x9
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE = 0x3, 0x4
REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x7, 0x8, 0xB
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _hpack_int(value: int, prefix_bits: int) -> bytes:
    """An HPACK integer with an N-bit prefix (flags of the first byte all zero)."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([value])
    out, value = [top], value - top
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def header_block(headers: list[tuple[str, str]]) -> bytes:
    """Each header as a literal without indexing and with a literal name: no HPACK state on either side."""
    out = bytearray()
    for name, value in headers:
        out += b"\x00" + _hpack_int(len(name), 7) + name.encode() + _hpack_int(len(value), 7) + value.encode()
    return bytes(out)


def grpc_headers(path: str, *extra: tuple[str, str]) -> bytes:
    return header_block([(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "broker"),
                         ("content-type", "application/grpc"), ("te", "trailers"), *extra])


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


class RawH2:
    """One HTTP/2 connection driven frame by frame, breaking whatever rule a test wants broken."""

    def __init__(self, endpoint: str, window: int = 65535) -> None:
        host, port = endpoint.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", INITIAL_WINDOW_SIZE, window)))
        self.settings: dict[int, int] = {}
        self._buf = b""
        kind, flags, _, payload = self.read_frame()
        assert kind == SETTINGS and not flags & ACK, "the server's first frame is its SETTINGS"
        self.settings = {key: value for key, value in struct.iter_unpack(">HI", payload)}
        self.sock.sendall(frame(SETTINGS, ACK, 0))
        self.next_stream = 1

    def open(self, headers: bytes, end_stream: bool = False) -> int:
        """A new stream with ``headers`` (one HEADERS frame); its id."""
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        self.sock.sendall(frame(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), stream, headers))
        return stream

    def read_frame(self, timeout: float = 10.0) -> tuple[int, int, int, bytes]:
        """(type, flags, stream, payload); TimeoutError when none comes, EOFError when the server closed."""
        self.sock.settimeout(timeout)
        while True:
            if len(self._buf) >= 9:
                length = int.from_bytes(self._buf[:3], "big")
                if len(self._buf) >= 9 + length:
                    head, self._buf = self._buf[:9 + length], self._buf[9 + length:]
                    stream = struct.unpack(">I", head[5:9])[0] & 0x7FFFFFFF
                    return head[3], head[4], stream, head[9:]
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError("the server closed the connection")
            self._buf += chunk

    def answer(self, stream: int, timeout: float) -> tuple[int, int, int, bytes]:
        """The first frame on ``stream``, or a GOAWAY (the connection's own frames are skipped)."""
        while True:
            answer = self.read_frame(timeout)
            if answer[2] == stream or answer[0] == GOAWAY:
                return answer

    def frames(self, timeout: float = 0.5) -> Iterator[tuple[int, int, int, bytes]]:
        """Frames until none comes for ``timeout`` seconds or the server closes."""
        with contextlib.suppress(TimeoutError, EOFError, OSError):
            while True:
                yield self.read_frame(timeout)

    def close(self) -> None:
        self.sock.close()


def grpc_message(message: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(message)) + message


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _counter(broker: Broker, name: str) -> float:
    for family in text_string_to_metric_families(broker.metrics()):
        for sample in family.samples:
            if sample.name in (name, f"{name}_total"):
                return float(sample.value)
    raise AssertionError(f"{name} is not on /metrics")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("hostile"), CONF).running() as b:
        with MQAdmin(b.namesrv) as admin:
            admin.create_topic(TOPIC, 1, 1)
        yield b


class Watch:
    """The broker's RSS and log lines at the start of a test, and the checks every test ends with."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        served(broker)  # first-use costs of the calls that prove others are served, out of the baseline
        self.rss = _rss(broker.proc.pid)
        self.lines = len(broker.log_text().splitlines())

    def check(self) -> None:
        assert self.broker.proc.poll() is None, "the broker died"
        growth = _rss(self.broker.proc.pid) - self.rss
        assert growth < MAX_GROWTH, f"broker RSS grew by {growth >> 20} MiB"
        added = self.broker.log_text().splitlines()[self.lines:]
        assert len(added) < MAX_LOG_LINES, "the log flooded:\n" + "\n".join(added[:40])


def served(broker: Broker) -> None:
    """A real gRPC client's call is answered (it has a connection of its own)."""
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        answer = pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=10)
    assert answer.status.code == pb.OK


def sent_over_remoting(broker: Broker) -> None:
    client = RawClient("127.0.0.1", broker.listen_port)
    try:
        assert client.send_message(TOPIC, b"meanwhile").code == ResponseCode.SUCCESS
    finally:
        client.close()


def test_streams_opened_and_never_read_are_refused_past_the_limit(broker: Broker) -> None:
    """20,000 SendMessage streams whose request never comes, on one connection that never reads:
    before the limit this grew the broker by 89 MB. Past grpcMaxConcurrentCallsPerConnection the
    front resets each new stream REFUSED_STREAM (or ends the connection when they keep coming)."""
    watch = Watch(broker)
    hostile = RawH2(broker.grpc_endpoint)
    assert hostile.settings.get(MAX_CONCURRENT_STREAMS) == STREAMS
    headers = grpc_headers(SEND)
    with contextlib.suppress(OSError):  # the front may end the connection midway
        for _ in range(20_000):
            hostile.open(headers)
    served(broker)
    refused = sum(1 for kind, _, _, payload in hostile.frames()
                  if (kind == RST_STREAM and struct.unpack(">I", payload)[0] == REFUSED_STREAM) or kind == GOAWAY)
    assert refused > 0, "every stream was taken"
    hostile.close()
    watch.check()


def test_a_slow_reader_of_receive_streams_holds_little(broker: Broker) -> None:
    """ReceiveMessage and PullMessage streams on a connection that opens no window (it never reads
    a byte): their responses wait in the broker, up to the connection's response budget (two
    batches of the largest messages: 12 MiB with this broker's maxMessageSize); past it the calls
    are reset ENHANCE_YOUR_CALM. Without it, each PullMessage stream here held 2 MiB, a hundred
    streams 200 MiB. Streams past grpcMaxConcurrentCallsPerConnection are refused."""
    body = b"s" * (64 * 1024)
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        for _ in range(64):
            assert stub.SendMessage(pb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name=TOPIC), body=body)]), timeout=10).status.code == pb.OK
    watch = Watch(broker)
    queue = pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=0)
    receive = pb.ReceiveMessageRequest(group=pb.Resource(name="SlowReader"), batch_size=32, message_queue=queue)
    receive.invisible_duration.FromSeconds(30)
    receive.long_polling_timeout.FromSeconds(5)
    pull = pb.PullMessageRequest(group=pb.Resource(name="SlowReader"), message_queue=queue, offset=0, batch_size=32)
    hostile = RawH2(broker.grpc_endpoint, window=0)
    for n in range(3 * STREAMS):
        path, request = (RECEIVE, receive) if n < 4 else (PULL, pull)
        stream = hostile.open(grpc_headers(path))
        hostile.sock.sendall(frame(DATA, END_STREAM, stream, grpc_message(request.SerializeToString())))
    time.sleep(2)
    served(broker)
    resets = [struct.unpack(">I", payload)[0] for kind, _, _, payload in hostile.frames() if kind == RST_STREAM]
    assert resets.count(REFUSED_STREAM) >= STREAMS, f"{resets.count(REFUSED_STREAM)} streams refused"
    assert resets.count(ENHANCE_YOUR_CALM) > 0, "no call was reset for its unread responses"
    assert _counter(broker, "rocketstore_grpc_slow_reader_reset_calls") > 0
    watch.check()
    hostile.close()


def test_oversized_headers_are_refused(broker: Broker) -> None:
    """Header blocks of 64 KiB (a HEADERS frame and CONTINUATION frames, the CONTINUATION flood):
    each request is refused before it becomes a call; the connection or the next one serves on."""
    watch = Watch(broker)
    block = grpc_headers(SEND, ("x-padding", "p" * (64 * 1024)))
    piece = 16 * 1024  # the largest frame the front takes
    refused = 0
    hostile = RawH2(broker.grpc_endpoint)
    for _ in range(50):
        stream, hostile.next_stream = hostile.next_stream, hostile.next_stream + 2
        chunks = [block[i:i + piece] for i in range(0, len(block), piece)]
        frames = [frame(HEADERS, 0, stream, chunks[0])]
        frames += [frame(CONTINUATION, END_HEADERS if i == len(chunks) - 1 else 0, stream, chunk)
                   for i, chunk in enumerate(chunks[1:], 1)]
        try:
            hostile.sock.sendall(b"".join(frames))
            kind, flags, answered, _ = hostile.answer(stream, timeout=2)
        except TimeoutError:
            raise AssertionError("a request with oversized headers was taken (no answer)") from None
        except (OSError, EOFError):  # the front ended the connection: refused too; the next one goes on
            hostile.close()
            hostile = RawH2(broker.grpc_endpoint)
            refused += 1
            continue
        # an answer to a request that has not sent its message yet: a refusal (431, or a reset)
        assert kind in (HEADERS, RST_STREAM, GOAWAY), (kind, flags, answered)
        refused += 1
    assert refused == 50
    hostile.close()
    served(broker)
    watch.check()


def _flood(broker: Broker, per_round: int, taken_first: bool) -> tuple[int, bytes | None]:
    """Open ``per_round`` SendMessage calls, reset them (CANCEL); again until a GOAWAY comes: the
    resets sent and the GOAWAY's payload (None if none came).

    ``taken_first``: a PING after the calls, whose answer comes once the front read their HEADERS;
    it then takes them (its accept loop empties h2's queue before reading further frames), so
    the resets that follow the answer hit calls in progress."""
    hostile = RawH2(broker.grpc_endpoint)
    headers = grpc_headers(SEND)
    goaway = None
    resets = 0
    with contextlib.suppress(OSError):  # the front dropped the connection
        while goaway is None and resets < 20_000:
            streams = [hostile.open(headers) for _ in range(per_round)]
            if taken_first:
                hostile.sock.sendall(frame(PING, 0, 0, b"barrier!"))
                while (answer := hostile.answer(0, timeout=5))[0] != PING and answer[0] != GOAWAY:
                    pass
                if answer[0] == GOAWAY:
                    goaway = answer[3]
                    break
            hostile.sock.sendall(b"".join(frame(RST_STREAM, 0, s, struct.pack(">I", CANCEL)) for s in streams))
            resets += per_round
            goaway = next((payload for kind, _, _, payload in hostile.frames(timeout=0.001) if kind == GOAWAY), None)
    goaway = goaway or next((payload for kind, _, _, payload in hostile.frames(timeout=2) if kind == GOAWAY), None)
    hostile.close()
    return resets, goaway


def test_reset_floods_end_the_connection(broker: Broker) -> None:
    """Rapid reset (CVE-2023-44487): streams opened and reset (RST_STREAM CANCEL) at once sit in
    h2's accept queue, at most 20 (max_pending_accept_reset_streams); streams reset after the front
    took them, each a task and a call, spend the connection's reset budget (1,000, refilled at
    200/s). Either way the front sends GOAWAY ENHANCE_YOUR_CALM and drops the connection."""
    watch = Watch(broker)
    resets, goaway = _flood(broker, per_round=100, taken_first=False)
    assert goaway is not None, f"no GOAWAY after {resets} resets of streams not taken yet"
    assert struct.unpack(">I", goaway[4:8])[0] == ENHANCE_YOUR_CALM
    flood_closed = _counter(broker, "rocketstore_grpc_reset_flood_closed_connections")
    resets, goaway = _flood(broker, per_round=50, taken_first=True)
    assert goaway is not None, f"no GOAWAY after {resets} resets of calls in progress"
    assert struct.unpack(">I", goaway[4:8])[0] == ENHANCE_YOUR_CALM
    assert resets >= 1000
    assert _counter(broker, "rocketstore_grpc_reset_flood_closed_connections") == flood_closed + 1
    served(broker)
    watch.check()


def test_a_ping_flood_is_read_no_faster_than_it_is_answered(broker: Broker) -> None:
    """PINGs sent flat out by a client that reads nothing: h2 answers one PING at a time and reads
    no further frame until its answer is written, so once the socket buffers fill the broker stops
    reading this client (what it has taken stays within the buffers) and serves others."""
    watch = Watch(broker)
    hostile = RawH2(broker.grpc_endpoint)
    pings = memoryview(frame(PING, 0, 0, b"flooding") * 4096)
    hostile.sock.setblocking(False)
    sent = 0
    deadline = time.monotonic() + 1.0  # within the idle timeout (no call is open here)
    while time.monotonic() < deadline:
        try:
            sent += hostile.sock.send(pings[sent % len(pings):])  # whole frames: a partial send goes on where it ended
        except BlockingIOError:
            time.sleep(0.005)
    served(broker)
    assert sent < 64 * 1024 * 1024, f"the broker read {sent >> 20} MiB of PINGs in a second"
    hostile.close()
    watch.check()


def test_the_grpcio_server_gets_the_limits_too(tmp_path_factory: pytest.TempPathFactory) -> None:
    """grpcNativeFront=false (and every TLS port) serves on grpcio: the streams per connection and
    the request size limit reach it as channel arguments."""
    conf = f"grpcNativeFront=false\ngrpcMaxConcurrentCallsPerConnection={STREAMS}\nmaxMessageSize={128 * 1024}\n"
    with Broker(tmp_path_factory.mktemp("hostile-grpcio"), conf).running() as b:
        conn = RawH2(b.grpc_endpoint)
        assert conn.settings.get(MAX_CONCURRENT_STREAMS) == STREAMS
        conn.close()
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            send = channel.unary_unary(SEND)
            with pytest.raises(grpc.RpcError) as refused:
                send(b"\x00" * (max_request_bytes(128 * 1024) + 1), timeout=30)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_connection_storm_meets_the_cap_and_idle_connections_go(broker: Broker) -> None:
    """Past grpcMaxConnections each new connection is closed as it comes; the ones taken, idle (no
    call) for grpcClientIdleTimeMills, get a GOAWAY; then a real client is served again."""
    watch = Watch(broker)
    refused_before = _counter(broker, "rocketstore_grpc_refused_connections")
    storm: list[RawH2] = []
    refused = 0
    for _ in range(4 * GRPC_CONNECTIONS):
        try:
            storm.append(RawH2(broker.grpc_endpoint))
        except (OSError, EOFError, AssertionError):
            refused += 1
    assert len(storm) <= GRPC_CONNECTIONS and refused >= 3 * GRPC_CONNECTIONS, (len(storm), refused)
    sent_over_remoting(broker)  # the gRPC port is full by design
    assert _counter(broker, "rocketstore_grpc_refused_connections") - refused_before >= refused
    for conn in storm:
        assert any(kind == GOAWAY for kind, _, _, _ in conn.frames(timeout=5)), "an idle connection was kept"
        conn.close()
    wait_until("the storm's connections to be let go",
               lambda: _counter(broker, "rocketstore_grpc_connections") == 0, timeout=10)
    served(broker)
    watch.check()


def test_an_endless_http_request_head_is_answered_431(broker: Broker) -> None:
    """The HTTP side port (/metrics, /healthz) buffers at most 8 KiB of a request head: a client
    sending header lines without end gets 431 and its connection closed, whatever it sends."""
    watch = Watch(broker)
    conn = socket.create_connection(("127.0.0.1", broker.http_port), timeout=10)
    with contextlib.suppress(OSError):  # the broker may answer and close while this still sends
        conn.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Padding: " + b"p" * (1024 * 1024))
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := conn.recv(65536):
            answer += chunk
    conn.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/healthz", timeout=10) as healthz:
        assert healthz.status == 200
    watch.check()


def test_remoting_idle_connections_close_but_a_long_polling_pull_is_not_idle(broker: Broker) -> None:
    """serverChannelMaxIdleTimeSeconds=2: a silent connection is closed; a pull held 4 s in long
    polling, with no byte either way, is answered on its connection."""
    watch = Watch(broker)
    silent = socket.create_connection(("127.0.0.1", broker.listen_port), timeout=10)
    puller = RawClient("127.0.0.1", broker.listen_port)
    try:
        offset = int(puller.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).ext_fields["offset"])
        started = time.monotonic()
        held = puller.pull(TOPIC, 0, offset, group="LongPoll", sys_flag=PullSysFlag.SUSPEND, suspend_ms=4000)
        assert held.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - started >= 3.5
        silent.settimeout(5)
        assert silent.recv(1) == b"", "the silent connection was kept"
    finally:
        puller.close()
        silent.close()
    sent_over_remoting(broker)
    watch.check()


def test_remoting_connections_past_the_cap_are_closed(broker: Broker) -> None:
    """remotingMaxConnections=30: a storm of connections gets no more than the cap; a client
    connected before it is served throughout."""
    watch = Watch(broker)
    good = RawClient("127.0.0.1", broker.listen_port)
    storm = [socket.create_connection(("127.0.0.1", broker.listen_port), timeout=10)
             for _ in range(3 * REMOTING_CONNECTIONS)]
    try:
        assert good.send_message(TOPIC, b"during the storm").code == ResponseCode.SUCCESS
        time.sleep(0.3)  # well within the idle timeout: what is closed now was refused
        closed = 0
        for conn in storm:
            conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                try:
                    closed += conn.recv(1) == b""
                except ConnectionResetError:
                    closed += 1
        assert closed >= 2 * REMOTING_CONNECTIONS, f"{closed} of {len(storm)} closed"
        assert _counter(broker, "rocketstore_remoting_refused_connections") >= closed
    finally:
        for conn in storm:
            conn.close()
        good.close()
    watch.check()
