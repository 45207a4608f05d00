"""A real BrokerController on loopback inside the test process, and a raw remoting client.

``start_broker(root, **overrides)`` starts a broker (its own event loop in a thread, free ports,
no name-server role unless ``namesrv_listen_port`` is given, an HTTP port for /metrics) on a tiny
store under ``root``; keyword arguments override BrokerConfig fields (``broker_*`` names as in
BrokerConfig) or StoreConfig fields. The ``broker_factory``, ``broker`` and ``client`` fixtures of
tests/broker/conftest.py and the ``cluster`` fixtures of tests/client_library/conftest.py start
theirs with it. (tests/support/broker_process.py runs the broker as a child process instead.)

``handle.client()`` opens a :class:`RawClient`: a blocking socket that writes
``remoting.command`` frames and reads responses by opaque, so a test can leave a long-polling
pull outstanding on one connection while sending on another; ``handle.wait_held_pulls(n)``
waits until the broker's /metrics shows ``n`` such pulls held (instead of sleeping and hoping).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from ports import free_port
from remoting_front_switch import front_requested

from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.master_elector import MasterElector
from rocketstore.common.message import StoredMessage, decode_record, properties_to_string
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RPC_ONEWAY, FrameDecoder, RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.config import StoreConfig

T = TypeVar("T")

_BROKER_FIELDS = {f.name for f in dataclasses.fields(BrokerConfig)}
_STORE_FIELDS = {f.name for f in dataclasses.fields(StoreConfig)}

TINY_STORE: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 100,
    "max_index_num": 400,
}


_HELD_PULLS = re.compile(r"^rocketstore_held_pull_requests (\S+)$", re.MULTILINE)


class RawClient:
    """Blocking remoting client over a real socket; responses are matched by opaque."""

    _opaques = itertools.count(1)

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.decoder = FrameDecoder()
        self.pending: dict[int, RemotingCommand] = {}
        #: requests the broker pushed (kept apart: their opaques may equal one of ours)
        self.requests: list[RemotingCommand] = []

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, cmd: RemotingCommand) -> int:
        """Write a request; returns its opaque (for :meth:`receive`)."""
        cmd.opaque = next(self._opaques)
        self.sock.sendall(cmd.encode())
        return cmd.opaque

    def receive(self, opaque: int, timeout: float = 10.0) -> RemotingCommand:
        deadline = time.monotonic() + timeout
        while opaque not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no response to opaque {opaque} within {timeout} s")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("broker closed the connection")
            for resp in self.decoder.feed(data):
                if resp.is_response:
                    self.pending[resp.opaque] = resp
                else:  # pushed by the broker (NOTIFY_CONSUMER_IDS_CHANGED, ...): its opaque is the broker's
                    self.requests.append(resp)
        return self.pending.pop(opaque)

    def call(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
             timeout: float = 10.0, version: int | None = None) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext_fields=ext_fields or {}, body=body)
        if version is not None:
            cmd.version = version
        return self.receive(self.send(cmd), timeout)

    def oneway(self, code: int, ext_fields: dict[str, str], body: bytes = b"") -> None:
        self.send(RemotingCommand(code=code, flag=RPC_ONEWAY, ext_fields=ext_fields, body=body))

    # -- conveniences used by several test modules ---------------------------------------------
    def send_message(self, topic: str, body: bytes, *, properties: dict[str, str] | None = None,
                     queue_id: int = 0, v2: bool = True, **header: Any) -> RemotingCommand:
        fields = dict(producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
                      queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
                      properties=properties_to_string(properties or {}))
        fields.update(header)
        h = SendMessageRequestHeader(**fields)
        if v2:
            return self.call(RequestCode.SEND_MESSAGE_V2, h.to_v2_ext_fields(), body)
        return self.call(RequestCode.SEND_MESSAGE, h.to_ext_fields(), body)

    def wait_dispatched(self, topic: str, queue_id: int, count: int, timeout: float = 10.0) -> None:
        """Wait until ``count`` messages of the queue are visible to pulls: a send is answered once
        stored, a pull sees it once dispatch has run, which may be a moment later."""
        deadline = time.monotonic() + timeout
        while True:
            reply = self.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
            if int(reply.ext_fields.get("offset", "0")) >= count:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}-{queue_id}: {count} messages not dispatched within {timeout} s")
            time.sleep(0.005)

    def pull(self, topic: str, queue_id: int, offset: int, *, group: str = "CG", max_msgs: int = 32,
             sys_flag: int = 4, subscription: str = "*", suspend_ms: int = 0, commit_offset: int = 0,
             timeout: float = 10.0) -> RemotingCommand:
        fields = {
            "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_msgs), "sysFlag": str(sys_flag), "commitOffset": str(commit_offset),
            "suspendTimeoutMillis": str(suspend_ms), "subscription": subscription, "subVersion": "0",
            "expressionType": "TAG",
        }
        return self.call(RequestCode.PULL_MESSAGE, fields, timeout=timeout)


def decode_records(body: bytes) -> list[StoredMessage]:
    """Split a PULL/QUERY body (raw CommitLog records back to back) into messages."""
    out: list[StoredMessage] = []
    pos = 0
    while pos < len(body):
        msg = decode_record(body, pos)
        assert isinstance(msg, StoredMessage), msg
        out.append(msg)
        pos += msg.total_size
    return out


class BrokerHandle:
    """A started broker on its own loop thread."""

    def __init__(self, controller: BrokerController, loop: asyncio.AbstractEventLoop, thread: threading.Thread):
        self.controller = controller
        self.loop = loop
        self.thread = thread
        self.clients: list[RawClient] = []
        self.stopped = False

    @property
    def port(self) -> int:
        return self.controller.remoting.port

    @property
    def store(self) -> Any:
        return self.controller.store

    def client(self) -> RawClient:
        c = RawClient("127.0.0.1", self.port)
        self.clients.append(c)
        return c

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call_soon(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` on the broker's loop (where processors run) and return its result."""
        async def wrapper() -> T:
            return fn()
        return self.run(wrapper(), timeout)

    def wait_dispatched(self, timeout: float = 5.0) -> None:
        assert self.controller.store.reput_service.wait_caught_up(timeout)

    def metrics(self) -> str:
        """The broker's /metrics page (Prometheus text)."""
        assert self.controller.http is not None, "this broker was started without an HTTP port"
        url = f"http://127.0.0.1:{self.controller.http.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return str(resp.read().decode())

    def held_pulls(self) -> int:
        """``rocketstore_held_pull_requests`` as the broker's /metrics reports it."""
        found = _HELD_PULLS.search(self.metrics())
        assert found is not None, "rocketstore_held_pull_requests missing from /metrics"
        return int(float(found.group(1)))

    def wait_held_pulls(self, count: int, timeout: float = 10.0) -> None:
        """Wait until exactly ``count`` long-polling pulls are held by the broker."""
        deadline = time.monotonic() + timeout
        while (held := self.held_pulls()) != count:
            assert time.monotonic() < deadline, f"{held} pulls held after {timeout} s, expected {count}"
            time.sleep(0.01)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        for c in self.clients:
            c.close()
        try:
            self.run(self.controller.stop(grace_s=2.0))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def start_broker(root: Path, auth_config: AuthConfig | None = None, elector: MasterElector | None = None,
                 **overrides: Any) -> BrokerHandle:
    broker_values: dict[str, Any] = {
        "broker_ip1": "127.0.0.1", "listen_host": "127.0.0.1", "listen_port": 0, "namesrv_listen_port": 0,
        "http_listen_port": free_port(), "broker_name": "broker-a", "grpc_listen_port": 0,
    }
    if (front := front_requested()) is not None:
        broker_values["remoting_native_front"] = front
    store_values: dict[str, Any] = {"store_path_root_dir": str(root), **TINY_STORE}
    for key, value in overrides.items():
        if key in _BROKER_FIELDS:
            broker_values[key] = value
        elif key in _STORE_FIELDS:
            store_values[key] = value
        else:
            raise TypeError(f"unknown broker/store config field {key!r}")
    controller = BrokerController(BrokerConfig(**broker_values), StoreConfig(**store_values), auth_config, elector)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="broker-loop", daemon=True)
    thread.start()
    handle = BrokerHandle(controller, loop, thread)
    try:
        handle.run(controller.start())
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        raise
    return handle
