"""A stopping broker answers every request it reads, promptly, before it closes the connection.

A Java 4.x client fails a request whose connection closes unanswered only at its send timeout
(3 s), so each request cut by a stop pauses a producer that long (issue 25: the rolling upgrade's
5-6 s write pauses). Once stopping, the broker answers SERVICE_NOT_AVAILABLE, which the 4.x and 5.x
clients retry at once, takes no new connection and closes the open ones after their answers; the
master it was is unregistered from the name server by address, so a successor already registered
as brokerId 0 keeps its route.
"""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import RawClient
from polling import wait_until

from rocketstore.broker.route_info_manager import RouteInfoManager
from rocketstore.broker.server import RemotingServer
from rocketstore.common.data_version import DataVersion
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper

TOPIC = "StopTopic"
#: what "at once" means on a busy two-core machine; a cut request costs a client 3 s
PROMPT_S = 1.5
_HELD_ONE = re.compile(r"^rocketstore_held_pull_requests 1(\.0)?$", re.MULTILINE)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        if broker.proc.poll() is None:
            broker.stop()


def _closed_by_peer(client: RawClient, timeout: float) -> bool:
    """Whether the broker closes the connection within ``timeout`` without sending more."""
    client.sock.settimeout(timeout)
    try:
        return client.sock.recv(1 << 16) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.integration
def test_a_stopping_broker_answers_every_request_it_reads_then_closes(broker: Broker) -> None:
    host, port = broker.addr.rsplit(":", 1)
    producer, consumer = RawClient(host, int(port)), RawClient(host, int(port))
    try:
        assert producer.send_message(TOPIC, b"m0").code == ResponseCode.SUCCESS
        producer.wait_dispatched(TOPIC, 0, 1)
        # a long-polling pull in flight when the stop begins
        held = consumer.send(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields={
            "consumerGroup": "CG", "topic": TOPIC, "queueId": "0", "queueOffset": "1", "maxMsgNums": "32",
            "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "30000", "subscription": "*",
            "subVersion": "0", "expressionType": "TAG"}))
        wait_until("the pull held", lambda: _HELD_ONE.search(broker.metrics()), 10, 0.05)

        broker.proc.send_signal(signal.SIGTERM)
        stopping_at = time.monotonic()
        # the producer goes on sending one message after another, as a 4.x sync producer does:
        # every send is answered at once, from the stop on SERVICE_NOT_AVAILABLE (which the client
        # retries at once), none is left to the client's send timeout
        codes = []
        while not codes or codes[-1] == ResponseCode.SUCCESS:
            assert time.monotonic() - stopping_at < 10, codes
            sent_at = time.monotonic()
            codes.append(producer.send_message(TOPIC, b"m").code)
            assert time.monotonic() - sent_at < PROMPT_S, codes
            time.sleep(0.02)
        assert codes[-1] == ResponseCode.SERVICE_NOT_AVAILABLE, codes
        # a new connection is not taken: the client's reconnect fails at once too
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=PROMPT_S).close()
        # the pull held at the stop is answered, not cut with its connection
        answer = consumer.receive(held, timeout=5)
        assert answer.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY), answer
        # and the connections close when the stop ends, after their answers
        assert _closed_by_peer(producer, 10)
        assert _closed_by_peer(consumer, 10)
        assert broker.proc.wait(30) == 0
    finally:
        producer.close()
        consumer.close()


@pytest.mark.integration
def test_a_request_still_running_past_the_grace_is_answered_not_cut() -> None:
    """The last resort of a stop: a handler still waiting after ``grace_s`` is cancelled, and its
    request answered SERVICE_NOT_AVAILABLE before the connection closes."""

    async def never(_conn: object, _request: RemotingCommand) -> RemotingCommand:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def scenario() -> tuple[float, RemotingCommand | None, bool]:
        server = RemotingServer("127.0.0.1", 0)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, never)
        await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        request = RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO, opaque=7)
        writer.write(request.encode())
        await writer.drain()
        await asyncio.sleep(0.1)  # read and running
        started = time.monotonic()
        await server.stop(grace_s=0.3)
        data = await asyncio.wait_for(reader.read(), 5)  # up to the close
        writer.close()
        frames = FrameDecoder().feed(data)
        return time.monotonic() - started, frames[0] if frames else None, len(frames) == 1

    took, response, one = asyncio.run(scenario())
    assert response is not None and one
    assert response.opaque == 7 and response.code == ResponseCode.SERVICE_NOT_AVAILABLE, response
    assert took < PROMPT_S


def _wrapper() -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({TOPIC: TopicConfig(TOPIC)}, DataVersion(1, 1))


def test_a_stopped_master_unregistering_keeps_its_successors_route() -> None:
    """A Lease master hands over and stops: its UNREGISTER_BROKER (brokerId 0) may come after the
    successor registered as brokerId 0; the name server removes the stopped master's address,
    not whatever is listed under its id (RocketMQ 5's RouteInfoManager does the same)."""
    routes = RouteInfoManager()
    routes.register_broker("C", "10.0.0.1:10911", "b", 0, "", _wrapper(), [], None, 1)
    routes.register_broker("C", "10.0.0.2:10911", "b", 1, "", _wrapper(), [], None, 1)
    routes.register_broker("C", "10.0.0.2:10911", "b", 0, "", _wrapper(), [], None, 2)  # the successor
    routes.unregister_broker("C", "10.0.0.1:10911", "b", 0)
    route = routes.pickup_topic_route(TOPIC)
    assert route is not None
    assert [b.broker_addrs for b in route[1]] == [{0: "10.0.0.2:10911"}]
    routes.unregister_broker("C", "10.0.0.2:10911", "b", 0)
    assert routes.pickup_topic_route(TOPIC) is None
