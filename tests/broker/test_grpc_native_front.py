"""The gRPC port on the native HTTP/2 front end (native/src/grpc_front.rs), from grpcio's client, an
independent HTTP/2 implementation: framing edge cases, many calls at once, calls the client ends.
test_grpc_endpoint.py and the 5.x client tests cover the methods themselves (the front is on by default)."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from polling import wait_until
from prometheus_client.parser import text_string_to_metric_families
from tool_support import require_tool

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.transport_limits import max_request_bytes
from rocketstore.client.admin import MQAdmin
from rocketstore.common.native import NATIVE

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.environ.get("ROCKETSTORE_NATIVE") == "0",
                                 reason="ROCKETSTORE_NATIVE=0: the pure-Python run serves gRPC with grpcio")]


@pytest.fixture(scope="module", autouse=True)
def native_front_built() -> None:
    """Outside the pure-Python run the extension must have the front (cargo builds it at install):
    under CI its absence fails, elsewhere it skips saying why."""
    require_tool("the native extension with GrpcFront", NATIVE is not None and hasattr(NATIVE, "GrpcFront"),
                 "these tests need the Rust extension built by `pip install` with cargo")

TOPIC = "NativeFront"
SERVED_NATIVE = "served by the native HTTP/2 front end"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with Broker(tmp_path_factory.mktemp("grpc-native-front"), "minInvisibleTimeMillsForRecv=1000\n").running() as b:
        with MQAdmin(b.namesrv) as admin:
            admin.create_topic(TOPIC, 2, 2)
        yield b


@pytest.fixture(scope="module")
def stub(broker: Broker) -> Iterator[pb_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        yield pb_grpc.MessagingServiceStub(channel)


def _count(broker: Broker, method: str, code: str) -> float:
    for family in text_string_to_metric_families(broker.metrics()):
        for sample in family.samples:
            if (sample.name == "rocketstore_grpc_requests_total" and sample.labels.get("method") == method
                    and sample.labels.get("code") == code):
                return float(sample.value)
    return 0.0


def _long_polling(broker: Broker) -> float:
    """Receives (and pulls) the broker holds in long polling now."""
    for family in text_string_to_metric_families(broker.metrics()):
        for sample in family.samples:
            if sample.name == "rocketstore_grpc_long_polling_calls":
                return float(sample.value)
    raise AssertionError("rocketstore_grpc_long_polling_calls missing from /metrics")


def _route_ok(stub: pb_grpc.MessagingServiceStub) -> bool:
    return stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=10).status.code == pb.OK


def _long_receive(group: str) -> pb.ReceiveMessageRequest:
    request = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=1,
                                       message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)))
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromSeconds(20)
    return request


def test_the_native_front_serves_the_port(broker: Broker, stub: pb_grpc.MessagingServiceStub) -> None:
    assert SERVED_NATIVE in broker.log_text()
    assert _route_ok(stub)


def test_grpc_native_front_false_keeps_grpcio(tmp_path_factory: pytest.TempPathFactory) -> None:
    with Broker(tmp_path_factory.mktemp("grpc-grpcio"), "grpcNativeFront=false\n").running() as b:
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            answer = pb_grpc.MessagingServiceStub(channel).QueryRoute(
                pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), timeout=10)
        assert answer.status.code == pb.TOPIC_NOT_FOUND
        assert SERVED_NATIVE not in b.log_text()


def test_an_oversized_message_fails_its_call_not_the_server(broker: Broker,
                                                            stub: pb_grpc.MessagingServiceStub) -> None:
    """Over the limit maxMessageSize sets (transport_limits.py): RESOURCE_EXHAUSTED for that call; the
    connection serves on."""
    with grpc.insecure_channel(broker.grpc_endpoint, options=[("grpc.max_send_message_length", -1)]) as channel:
        send = channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")
        with pytest.raises(grpc.RpcError) as failed:
            send(b"\x00" * (max_request_bytes(4 * 1024 * 1024) + 1), timeout=60)
        assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (failed.value.details() or "")
        assert pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=10).status.code == pb.OK
    assert _route_ok(stub)


def test_a_compressed_frame_gets_a_status_not_a_dropped_connection(stub: pb_grpc.MessagingServiceStub) -> None:
    """The front does not decompress (no grpc-encoding support yet): a gzip frame is UNIMPLEMENTED.
    (grpcio sends a message uncompressed when gzip does not make it smaller: hence the long name.)"""
    with pytest.raises(grpc.RpcError) as failed:
        stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="a" * 10000)), timeout=10,
                        compression=grpc.Compression.Gzip)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert _route_ok(stub)


def test_an_unknown_method_is_unimplemented(stub: pb_grpc.MessagingServiceStub, broker: Broker) -> None:
    with grpc.insecure_channel(broker.grpc_endpoint) as channel, pytest.raises(grpc.RpcError) as failed:
        channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchMethod")(b"", timeout=5)
    assert failed.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_many_concurrent_calls_each_get_their_own_answer(broker: Broker) -> None:
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        topics = [TOPIC if i % 2 else f"Missing{i}" for i in range(400)]
        with ThreadPoolExecutor(32) as pool:
            codes = list(pool.map(lambda t: stub.QueryRoute(
                pb.QueryRouteRequest(topic=pb.Resource(name=t)), timeout=30).status.code, topics))
    assert codes == [pb.OK if t == TOPIC else pb.TOPIC_NOT_FOUND for t in topics]


def test_a_cancelled_long_polling_receive_is_dropped(broker: Broker, stub: pb_grpc.MessagingServiceStub) -> None:
    before = _count(broker, "ReceiveMessage", "CANCELLED")
    call = stub.ReceiveMessage(_long_receive("GroupCancel"), timeout=30)
    wait_until("the receive waiting on the broker", lambda: _long_polling(broker) == 1, timeout=10, interval=0.05)
    started = time.monotonic()
    call.cancel()
    wait_until("the cancelled receive ends on the broker",
               lambda: _count(broker, "ReceiveMessage", "CANCELLED") == before + 1 and _long_polling(broker) == 0,
               timeout=10)
    assert time.monotonic() - started < 10  # not the 20 s of its long polling
    assert _route_ok(stub)


def test_a_connection_dropped_mid_stream_ends_its_calls(broker: Broker, stub: pb_grpc.MessagingServiceStub) -> None:
    before = _count(broker, "ReceiveMessage", "CANCELLED")
    channel = grpc.insecure_channel(broker.grpc_endpoint)
    calls = [pb_grpc.MessagingServiceStub(channel).ReceiveMessage(_long_receive(f"GroupDrop{i}"), timeout=30)
             for i in range(3)]
    wait_until("the receives waiting on the broker", lambda: _long_polling(broker) == 3, timeout=10, interval=0.05)
    channel.close()
    wait_until("the receives of the dropped connection end on the broker",
               lambda: _count(broker, "ReceiveMessage", "CANCELLED") == before + 3 and _long_polling(broker) == 0,
               timeout=10)
    assert all(c.code() == grpc.StatusCode.CANCELLED for c in calls)
    assert _route_ok(stub)


def test_a_deadline_passing_ends_the_call(stub: pb_grpc.MessagingServiceStub) -> None:
    """grpc-timeout shorter than the long polling: the receive answers before its deadline (the servicer
    reads time_remaining()), never hangs."""
    started = time.monotonic()
    responses = list(stub.ReceiveMessage(_long_receive("GroupDeadline"), timeout=3))
    assert time.monotonic() - started < 3.5
    assert responses and responses[0].status.code in (pb.MESSAGE_NOT_FOUND, pb.OK)


#: HTTP/2 (RFC 9113): the client's connection preface and the frame types this test reads
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _GOAWAY = 0x4, 0x7


def _read_frame(sock: socket.socket) -> tuple[int, bytes] | None:
    """The next HTTP/2 frame as (type, payload); None when the server closed the connection."""
    header = b""
    while len(header) < 9:
        chunk = sock.recv(9 - len(header))
        if not chunk:
            return None
        header += chunk
    length = int.from_bytes(header[:3], "big")
    payload = b""
    while len(payload) < length:
        chunk = sock.recv(length - len(payload))
        if not chunk:
            return None
        payload += chunk
    return header[3], payload


def test_a_stopping_broker_says_goaway_before_it_closes(tmp_path: Path) -> None:
    """At stop each connection gets an HTTP/2 GOAWAY (NO_ERROR) before the broker closes it: its
    client opens no new calls there and goes elsewhere, and the answers the broker gave are
    written out first. A bare close would leave the client to find out from a reset connection."""
    broker = Broker(tmp_path)
    broker.start()
    try:
        host, port = broker.grpc_endpoint.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(_PREFACE + struct.pack(">I", 0)[1:] + bytes([_SETTINGS, 0]) + struct.pack(">I", 0))
        first = _read_frame(sock)
        assert first is not None and first[0] == _SETTINGS, first  # the connection is served
    finally:
        exit_code = broker.stop()
    frames = []
    while (frame := _read_frame(sock)) is not None:
        frames.append(frame)
    sock.close()
    goaways = [payload for kind, payload in frames if kind == _GOAWAY]
    assert goaways, f"the connection was closed without a GOAWAY (frames: {[kind for kind, _ in frames]})"
    error_code = struct.unpack(">I", goaways[0][4:8])[0]  # after the last stream id
    assert error_code == 0, f"GOAWAY with error code {error_code}, not NO_ERROR"
    assert exit_code == 0
