"""RemotingClient and NameServerClient against a real broker on loopback: matching responses
to requests by opaque across threads, timeouts, one-way sends, reconnects, errors that name
their address, and name-server fail-over."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from typing import Any

import pytest
from ports import free_port

from rocketstore.client import (
    NameServerClient,
    Producer,
    RemotingClient,
    RemotingConnectError,
    RemotingError,
    RemotingTimeout,
)
from rocketstore.client.remoting_client import parse_addr, split_namesrv_addr
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import GetMaxOffsetRequestHeader, GetMaxOffsetResponseHeader, PullMessageRequestHeader

pytestmark = pytest.mark.integration


def _refused_addr() -> str:
    """An address nothing listens on: a free port no one is told of."""
    return f"127.0.0.1:{free_port()}"


def test_connect_refused_names_the_address(remoting: RemotingClient) -> None:
    addr = _refused_addr()
    with pytest.raises(RemotingConnectError) as info:
        remoting.call(addr, RequestCode.GET_BROKER_CONFIG)
    assert info.value.addr == addr
    assert addr in str(info.value)
    assert info.value.retriable


def test_bad_address_is_a_connect_error(remoting: RemotingClient) -> None:
    with pytest.raises(RemotingConnectError, match="not host:port"):
        remoting.call("no-port-here", RequestCode.GET_BROKER_CONFIG)


def _suspended_pull(remoting: RemotingClient, topic: str, suspend_ms: int) -> object:
    header = PullMessageRequestHeader(consumer_group="CG", topic=topic, queue_id=0, queue_offset=0, max_msg_nums=1,
                                      sys_flag=0x2 | 0x4, commit_offset=0, suspend_timeout_millis=suspend_ms,
                                      subscription="*", sub_version=0, expression_type="TAG")
    return remoting.request(RequestCode.PULL_MESSAGE, header)


def test_timeout_keeps_the_connection_usable(cluster: Any, remoting: RemotingClient) -> None:
    Producer(cluster.namesrv_addr, "PG", client=remoting).send("TimeoutTopic", b"x", queue_id=1)
    cluster.wait_dispatched()
    # A pull the broker holds (long polling on an empty queue) is a response that does not come.
    cmd = _suspended_pull(remoting, "TimeoutTopic", 3000)
    started = time.monotonic()
    with pytest.raises(RemotingTimeout) as info:
        remoting.invoke(cluster.broker_addr, cmd, timeout=0.3)  # type: ignore[arg-type]
    assert 0.25 < time.monotonic() - started < 2.0
    assert info.value.addr == cluster.broker_addr and info.value.retriable
    assert "PULL_MESSAGE" in str(info.value)
    # same pooled connection answers the next request; the late pull response is dropped
    response = remoting.call(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                             GetMaxOffsetRequestHeader(topic="TimeoutTopic", queue_id=1))
    assert GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset == 1


def test_error_response_carries_code_and_remark(cluster: Any, remoting: RemotingClient) -> None:
    with pytest.raises(RemotingError) as info:
        NameServerClient(cluster.namesrv_addr, remoting).get_route("NoSuchTopic")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in info.value.remark
    assert not info.value.retriable
    with pytest.raises(RemotingError) as unsupported:
        remoting.call(cluster.broker_addr, 9999)
    assert unsupported.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert unsupported.value.addr == cluster.broker_addr


def test_retriable_codes() -> None:
    assert RemotingError(ResponseCode.SYSTEM_BUSY, "busy").retriable
    assert RemotingError(ResponseCode.FLUSH_DISK_TIMEOUT, "slow disk").retriable
    assert RemotingError(ResponseCode.SERVICE_NOT_AVAILABLE, "disk full").retriable
    assert not RemotingError(ResponseCode.MESSAGE_ILLEGAL, "bad").retriable
    assert not RemotingError(ResponseCode.NO_PERMISSION, "no").retriable


def test_concurrent_callers_get_their_own_responses(cluster: Any, remoting: RemotingClient) -> None:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    for queue_id in range(4):
        for _ in range(queue_id + 1):
            producer.send("ConcurrentTopic", b"m", queue_id=queue_id)
    cluster.wait_dispatched()
    errors: list[BaseException] = []
    results: list[tuple[int, int]] = []
    lock = threading.Lock()

    def worker(seed: int) -> None:
        try:
            for i in range(50):
                queue_id = (seed + i) % 4
                response = remoting.call(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                                         GetMaxOffsetRequestHeader(topic="ConcurrentTopic", queue_id=queue_id))
                with lock:
                    results.append((queue_id, GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(results) == 400
    assert all(offset == queue_id + 1 for queue_id, offset in results)


def _close_server_side(cluster: Any) -> None:
    def close_all() -> None:
        for conn in list(cluster.controller.remoting.connections):
            conn.close()

    cluster.handle.call_soon(close_all)


def test_in_flight_request_fails_fast_when_the_connection_drops_then_reconnects(
        cluster: Any, remoting: RemotingClient) -> None:
    Producer(cluster.namesrv_addr, "PG", client=remoting).send("DropTopic", b"x", queue_id=1)
    cluster.wait_dispatched()
    future = remoting.invoke_future(cluster.broker_addr, _suspended_pull(remoting, "DropTopic", 10_000))  # type: ignore[arg-type]
    cluster.handle.wait_held_pulls(1)  # in flight: the broker holds it
    _close_server_side(cluster)
    started = time.monotonic()
    with pytest.raises(RemotingConnectError) as info:
        future.result(5)
    assert time.monotonic() - started < 3
    assert info.value.addr == cluster.broker_addr
    # the next call opens a new connection
    response = remoting.call(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                             GetMaxOffsetRequestHeader(topic="DropTopic", queue_id=1))
    assert GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset == 1


def test_oneway_is_not_answered_but_takes_effect(cluster: Any, remoting: RemotingClient) -> None:
    producer = Producer(cluster.namesrv_addr, "PG", client=remoting)
    producer.send("OnewayTopic", b"first", queue_id=0)
    producer.send_oneway("OnewayTopic", b"second", queue_id=0)
    deadline = time.monotonic() + 5
    offset = 0
    while time.monotonic() < deadline:
        response = remoting.call(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                                 GetMaxOffsetRequestHeader(topic="OnewayTopic", queue_id=0))
        offset = GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset
        if offset == 2:
            break
        time.sleep(0.02)
    assert offset == 2


def test_name_server_fail_over(cluster: Any, remoting: RemotingClient) -> None:
    dead = _refused_addr()
    ns = NameServerClient(f"{dead};{cluster.namesrv_addr}", remoting)
    ns._preferred = 0  # start with the dead one
    assert "TBW102" in ns.topic_list()
    assert ns._preferred == 1  # sticks with the one that answered
    assert ns.cluster_info().broker_addr_table["broker-a"].broker_addrs[0] == cluster.broker_addr


def test_no_name_server_answers(remoting: RemotingClient) -> None:
    a, b = _refused_addr(), _refused_addr()
    with pytest.raises(RemotingConnectError) as info:
        NameServerClient([a, b], remoting).get_route("T")
    assert a in str(info.value) and b in str(info.value)


def test_async_invoke(cluster: Any, remoting: RemotingClient) -> None:
    async def main() -> int:
        response = await remoting.call_async(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                                             GetMaxOffsetRequestHeader(topic="TBW102", queue_id=0))
        return GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset

    assert asyncio.run(main()) == 0


def test_closed_client_refuses(cluster: Any) -> None:
    client = RemotingClient()
    client.call(cluster.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    client.close()
    with pytest.raises(RemotingConnectError, match="closed"):
        client.call(cluster.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)


def test_address_parsing() -> None:
    assert parse_addr("10.0.0.1:9876") == ("10.0.0.1", 9876)
    assert parse_addr("[::1]:10911") == ("::1", 10911)
    assert split_namesrv_addr("a:1; b:2,c:3") == ["a:1", "b:2", "c:3"]
    with pytest.raises(ValueError):
        split_namesrv_addr(" ; ")
    with pytest.raises(ValueError):
        parse_addr("host:0")


def test_listener_that_accepts_and_closes_is_a_connect_error(remoting: RemotingClient) -> None:
    # A fake peer: a socket that accepts and closes at once, which no real broker does on purpose.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    addr = f"127.0.0.1:{server.getsockname()[1]}"

    def accept_and_close() -> None:
        conn, _ = server.accept()
        conn.close()

    t = threading.Thread(target=accept_and_close)
    t.start()
    try:
        with pytest.raises(RemotingConnectError) as info:
            remoting.call(addr, RequestCode.GET_BROKER_CONFIG, timeout=5)
        assert info.value.addr == addr
    finally:
        t.join(5)
        server.close()


def test_async_timeout(cluster: Any, remoting: RemotingClient) -> None:
    Producer(cluster.namesrv_addr, "PG", client=remoting).send("AsyncTimeout", b"x", queue_id=1)
    cluster.wait_dispatched()

    async def main() -> None:
        await remoting.invoke_async(cluster.broker_addr, _suspended_pull(remoting, "AsyncTimeout", 3000),  # type: ignore[arg-type]
                                    timeout=0.3)

    with pytest.raises(RemotingTimeout):
        asyncio.run(main())
    # the connection and its reader thread survived the cancelled future
    response = remoting.call(cluster.broker_addr, RequestCode.GET_MAX_OFFSET,
                             GetMaxOffsetRequestHeader(topic="AsyncTimeout", queue_id=1))
    assert GetMaxOffsetResponseHeader.from_ext_fields(response.ext_fields).offset == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_opens_its_own_connection(cluster: Any, remoting: RemotingClient) -> None:
    """Spark forks its Python workers: a client inherited through fork must not use (or shut
    down) the parent's sockets."""
    remoting.call(cluster.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)  # parent has a pooled connection
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            remoting.call(cluster.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=5)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    remoting.call(cluster.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)  # parent's still works
