"""The native remoting front (``remotingNativeFront=true``) against a real in-process broker: what the
asyncio server does, it does (frames split across and joined in reads, pipelined requests answered
by opaque, one-way requests unanswered, broker-initiated requests and their responses, the client
manager hearing of closed connections), and a malformed frame closes only its own connection.

The other broker tests run on it too with ``ROCKETSTORE_TEST_REMOTING_FRONT=native``
(tests/support/remoting_front_switch.py).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient

from rocketstore.broker.remoting_front import native_front_available
from rocketstore.broker.server import Connection
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RPC_ONEWAY, RPC_TYPE_RESPONSE, FrameDecoder, RemotingCommand

pytestmark = pytest.mark.skipif(not native_front_available(), reason="the native extension is not loaded")

TOPIC = "FrontTopic"


@pytest.fixture
def front_broker(broker_factory: Callable[..., BrokerHandle]) -> BrokerHandle:
    handle = broker_factory(remoting_native_front=True)
    assert handle.controller.remoting._front is not None, "the native front serves the port"
    return handle


def _closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the broker closes ``sock`` (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def _wait(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_off_by_default(broker_factory: Callable[..., BrokerHandle]) -> None:
    handle = broker_factory(remoting_native_front=False)
    assert handle.controller.remoting._front is None
    assert handle.client().call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS


def test_frames_split_and_joined_across_reads_are_served(front_broker: BrokerHandle) -> None:
    client = front_broker.client()
    frames = [RemotingCommand(code=RequestCode.GET_BROKER_CONFIG, opaque=100 + i).encode() for i in range(50)]
    data = b"".join(frames)
    # one byte at a time for the first frames, then the rest at once: every split point
    for i in range(len(frames[0]) * 2):
        client.sock.sendall(data[i : i + 1])
    client.sock.sendall(data[len(frames[0]) * 2 :])
    answered = {client.receive(100 + i).opaque for i in range(50)}
    assert answered == set(range(100, 150))


def test_pipelined_sends_are_answered_by_opaque_and_oneway_requests_are_not(front_broker: BrokerHandle) -> None:
    client = front_broker.client()
    # a one-way request (a heartbeat) first: no response may come for its opaque
    client.oneway(RequestCode.HEART_BEAT, {}, b'{"clientID":"front-test","producerDataSet":[],"consumerDataSet":[]}')
    opaques = [client.send(RemotingCommand(code=RequestCode.GET_BROKER_CONFIG)) for _ in range(200)]
    assert all(client.receive(opaque).code == ResponseCode.SUCCESS for opaque in opaques)
    assert client.send_message(TOPIC, b"body").code == ResponseCode.SUCCESS
    client.wait_dispatched(TOPIC, 0, 1)
    pulled = client.pull(TOPIC, 0, 0, sys_flag=0)
    assert pulled.code == ResponseCode.SUCCESS and b"body" in pulled.body
    assert not client.pending, "no response for the one-way request"


def test_a_bad_frame_length_closes_only_its_connection(front_broker: BrokerHandle) -> None:
    good, bad = front_broker.client(), front_broker.client()
    assert good.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS
    bad.sock.sendall(struct.pack(">i", 2**31 - 1) + b"x" * 16)
    assert _closed_by_peer(bad.sock)
    assert good.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS


def test_a_header_no_decoder_takes_closes_only_its_connection(front_broker: BrokerHandle) -> None:
    good, bad = front_broker.client(), front_broker.client()
    header = b"{not json"
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    # a good request before it in the same write is still answered
    bad.sock.sendall(RemotingCommand(code=RequestCode.GET_BROKER_CONFIG, opaque=7).encode() + frame)
    assert bad.receive(7).code == ResponseCode.SUCCESS
    assert _closed_by_peer(bad.sock)
    assert good.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS


def test_broker_initiated_requests_and_their_responses(front_broker: BrokerHandle) -> None:
    client = front_broker.client()
    assert client.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS
    (conn,) = front_broker.controller.remoting.connections

    def answer_requests() -> None:
        decoder = FrameDecoder()
        client.sock.settimeout(10)
        answered = 0
        while answered < 2:
            for cmd in decoder.feed(client.sock.recv(65536)):
                if cmd.flag & RPC_ONEWAY:
                    assert cmd.ext_fields == {"note": "one-way"}
                    answered += 1
                    continue
                reply = RemotingCommand(code=ResponseCode.SUCCESS, opaque=cmd.opaque, flag=RPC_TYPE_RESPONSE,
                                        remark=f"echo {cmd.body!r}")
                client.sock.sendall(reply.encode())
                answered += 1

    answering = threading.Thread(target=answer_requests)
    answering.start()
    front_broker.call_soon(lambda: conn.notify(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"note": "one-way"}))
    response = front_broker.run(conn.invoke(RequestCode.CHECK_TRANSACTION_STATE, {}, b"question", 10.0))
    answering.join(10)
    assert response.is_response and response.remark == "echo b'question'"


def test_closed_connections_are_reported_to_the_listeners(front_broker: BrokerHandle) -> None:
    lost: list[Connection] = []
    front_broker.call_soon(lambda: front_broker.controller.remoting.on_disconnect.append(lost.append))
    client = RawClient("127.0.0.1", front_broker.controller.remoting.port)
    assert client.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS
    (conn,) = front_broker.controller.remoting.connections
    client.close()
    _wait(lambda: lost == [conn])
    assert not front_broker.controller.remoting.connections and not conn.active


def test_the_broker_closing_a_connection_closes_the_socket(front_broker: BrokerHandle) -> None:
    client = front_broker.client()
    assert client.call(RequestCode.GET_BROKER_CONFIG).code == ResponseCode.SUCCESS
    (conn,) = front_broker.controller.remoting.connections
    front_broker.call_soon(conn.close)
    assert _closed_by_peer(client.sock)
    _wait(lambda: not front_broker.controller.remoting.connections)
