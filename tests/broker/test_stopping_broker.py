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
import contextlib
import itertools
import json
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from inprocess_broker import RawClient
from java_rocketmq import ClientDriver
from polling import wait_until
from ports import free_port
from tool_support import require_executable

from rocketstore.broker.route_info_manager import RouteInfoManager
from rocketstore.broker.server import RemotingServer
from rocketstore.client import BrokerAdmin, MQAdmin
from rocketstore.client.remoting_client import RemotingError
from rocketstore.common.data_version import DataVersion
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.register_broker_body import TopicConfigSerializeWrapper

TOPIC = "StopTopic"
#: what "at once" means on a busy two-core machine; a cut request costs a client 3 s
PROMPT_S = 1.5
_HELD_ONE = re.compile(r"^rocketstore_held_pull_requests 1(\.0)?$", re.MULTILINE)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker whose stop answers for a second before it closes (shutdownWaitTimeSeconds=1): long
    enough for a client sending every 20 ms to see what it answers, whatever the machine's speed
    (without the wait the whole stop takes about 0.1 s)."""
    broker = Broker(tmp_path, "enableShutdownGracefully=true\nshutdownWaitTimeSeconds=1\n",
                    listen_port=free_port(also=(1,)))
    broker.start()
    try:
        yield broker
    finally:
        if broker.proc.poll() is None:
            broker.stop()


def _refused_or_reset(host: str, port: int) -> bool:
    """Whether a new connection is refused (asyncio's listener is closed) or, accepted by the native
    front, which listens until the end, closed at once unserved."""
    try:
        late = socket.create_connection((host, port), timeout=PROMPT_S)
    except OSError:
        return True
    with late:
        late.settimeout(PROMPT_S)
        try:
            return late.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


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
        assert time.monotonic() - stopping_at < 0.9  # within the wait: what follows checks it too
        # a new connection is not taken: the client's reconnect fails at once too
        assert _refused_or_reset(host, int(port))
        # the pull held at the stop is answered, not cut with its connection
        answer = consumer.receive(held, timeout=5)
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,  # the first send may wake it
                               ResponseCode.PULL_RETRY_IMMEDIATELY), answer
        # and the connections close when the stop ends, after their answers
        assert _closed_by_peer(producer, 10)
        assert _closed_by_peer(consumer, 10)
        assert broker.proc.wait(30) == 0
    finally:
        producer.close()
        consumer.close()


@pytest.mark.integration
def test_with_shutdown_gracefully_a_stopping_broker_leaves_the_routes_then_answers_for_the_wait(
        tmp_path: Path) -> None:
    """enableShutdownGracefully: the broker unregisters at once and keeps answering
    SERVICE_NOT_AVAILABLE for shutdownWaitTimeSeconds, time for clients' routes to move off it
    before its address goes."""
    (tmp_path / "ns").mkdir()
    (tmp_path / "b").mkdir()
    namesrv = Broker(tmp_path / "ns", "brokerName=namesrv-only\n", listen_port=free_port(also=(1,)))
    with namesrv.running():
        broker = Broker(tmp_path / "b", f"brokerName=lingering\nnamesrvAddr={namesrv.namesrv}\n"
                        "enableShutdownGracefully=true\nshutdownWaitTimeSeconds=3\n", listen_port=free_port(also=(1,)))
        broker.start()
        host, port = broker.addr.rsplit(":", 1)
        producer = RawClient(host, int(port))
        try:
            with BrokerAdmin(broker.addr) as admin:
                admin.create_topic(TOPIC, 2, 2)
            wait_until("the broker in the route", lambda: _route(namesrv.namesrv).broker_datas, 30)
            broker.proc.send_signal(signal.SIGTERM)
            stopping_at = time.monotonic()
            wait_until("the route without the broker", lambda: not _route_or_none(namesrv.namesrv), 2, 0.05)
            # its own name server and gRPC port close before the wait: a client's route poll or 5.x
            # channel kept to this pod would be answered from its own view, naming it still
            wait_until("the broker's name server and gRPC port closed", lambda: _refused(broker.namesrv)
                       and _refused(broker.grpc_endpoint), 2, 0.05)
            answered = []
            while time.monotonic() - stopping_at < 2.5:
                answered.append(producer.send_message(TOPIC, b"m").code)
                time.sleep(0.1)
            assert answered[-1] == ResponseCode.SERVICE_NOT_AVAILABLE, answered
            assert broker.proc.poll() is None  # still answering, 2.5 s into its 3 s wait
            assert _closed_by_peer(producer, 10)
            assert broker.proc.wait(30) == 0
            assert time.monotonic() - stopping_at >= 3
        finally:
            producer.close()
            if broker.proc.poll() is None:
                broker.stop()


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


@pytest.mark.integration
def test_a_java_producer_loses_no_send_timeout_when_one_of_two_brokers_stops(tmp_path: Path) -> None:
    """The client's view: a Java 4.x producer sends synchronously every 20 ms over two brokers
    (round robin over their queues) while one stops (SIGTERM). What that broker reads while it
    stops it answers SERVICE_NOT_AVAILABLE, and the client retries such a send on the other broker
    at once: no send waits for the 3 s send timeout, and acknowledged sends never pause for long."""
    require_executable("java", "runs Apache RocketMQ's 4.x Java client (tests/support/drivers/java4)")
    require_executable("mvn", "builds the Java client driver")
    (tmp_path / "ns").mkdir()
    namesrv = Broker(tmp_path / "ns", "brokerName=namesrv-only\n", listen_port=free_port(also=(1,)))
    brokers = []
    for name in ("stop-a", "stop-b"):
        (tmp_path / name).mkdir()
        brokers.append(Broker(tmp_path / name, f"brokerName={name}\n", listen_port=free_port(also=(1,))))
    with contextlib.ExitStack() as running:
        running.enter_context(namesrv.running())
        for broker in brokers:
            broker.conf.write_text(broker.conf.read_text() + f"namesrvAddr={namesrv.namesrv}\n")
            running.enter_context(broker.running())
            with BrokerAdmin(broker.addr) as admin:
                admin.create_topic(TOPIC, 2, 2)
        wait_until("both brokers in the route", lambda: len(_route(namesrv.namesrv).broker_datas) == 2, 30)
        driver = ClientDriver(namesrv.namesrv, tmp_path / "java", poll_namesrv_ms=1000)
        loop = driver.start("produce", "-t", TOPIC, "-c", 100_000, "--mode", "sync", "--pause", 20, "--timeout", 300,
                            check=False)
        try:
            def acked() -> list[dict[str, Any]]:
                return [line for line in loop.lines_so_far() if line.get("kind") == "sent"
                        and line["status"] == "SEND_OK"]

            wait_until("the producer sending", lambda: len(acked()) >= 50, 120, interval=0.2)
            stopped_at_ms = time.time() * 1000
            assert brokers[0].stop() == 0
            wait_until("sends after the stop", lambda: sum(line["at_ms"] > stopped_at_ms + 3000
                                                           for line in acked()) >= 20, 60, interval=0.2)
        finally:
            loop.kill()
        lines = loop.lines_so_far()
    errors = [line for line in lines if line.get("kind") == "error"]
    assert not [e for e in errors if "timeout" in json.dumps(e).lower()], errors
    times = sorted(line["at_ms"] for line in lines if line.get("kind") == "sent" and line["status"] == "SEND_OK")
    gaps = [(b - a, a - stopped_at_ms) for a, b in itertools.pairwise(times) if b > stopped_at_ms - 1000]
    longest = max(gaps)
    assert longest[0] < 1000, f"no acknowledged send for {longest[0]} ms from {longest[1]:.0f} ms after the stop"


def _refused(addr: str) -> bool:
    """Whether nothing listens at ``addr`` (host:port) any more."""
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def _route(namesrv: str) -> TopicRouteData:
    with MQAdmin(namesrv) as admin:
        route: TopicRouteData = admin.route(TOPIC)
    return route


def _route_or_none(namesrv: str) -> TopicRouteData | None:
    """The topic's route, None once no broker serves it (the name server answers TOPIC_NOT_EXIST)."""
    try:
        return _route(namesrv)
    except RemotingError:
        return None
