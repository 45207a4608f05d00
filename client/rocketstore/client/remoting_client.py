"""A synchronous, thread-safe client for RocketMQ's remoting protocol, and name-server lookups.

Design: one plain TCP socket per broker address, pooled, each with a daemon reader thread that
feeds :class:`remoting.command.FrameDecoder` and completes the ``concurrent.futures.Future`` of
the request whose ``opaque`` a response carries. Callers block on that future with their own
timeout. Why threads rather than an asyncio loop in a background thread: the library's users
are the CLI (no loop), Spark executors (plain threads, and a forked worker must not inherit a
half-running loop) and the kopf operator (its own loop). A socket plus a reader thread works in
all three without marshalling every call onto a foreign loop, costs one thread per broker
connection (a handful), and the same future serves asyncio callers for free:
:meth:`RemotingClient.invoke_async` wraps it with ``asyncio.wrap_future`` — no thread per call.

Errors, all :class:`RemotingClientError` with a ``retriable`` flag:

* :class:`RemotingConnectError` — the address cannot be reached, or the connection broke while
  a request was in flight (the message names the address);
* :class:`RemotingTimeout` — no response within the call's timeout (the connection is kept,
  as RocketMQ's NettyRemotingClient keeps it; a late response is dropped);
* :class:`RemotingError` — the peer answered with a non-success code; ``code`` and ``remark``
  are the response's, ``retriable`` is true for transient states (SYSTEM_BUSY,
  FLUSH_DISK_TIMEOUT, SERVICE_NOT_AVAILABLE, ...).

A connection that failed is dropped from the pool; the next call to that address reconnects.

Security, both opt-in (without them the bytes on the wire are exactly those of a plain client):
``ssl_context`` speaks TLS to every address (:mod:`rocketstore.client.tls`, RocketMQ's
``tls.enable``), ``rpc_hook`` runs on every request before it is encoded, as RocketMQ's RPCHook
does (:class:`rocketstore.client.acl_hook.AclClientRPCHook` signs requests for a broker with
``aclEnable``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from typing import Protocol

from rocketstore.client.tls import TlsSocket
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import BrokerData, ClusterInfo, QueueData, TopicList, TopicRouteData
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import RPC_ONEWAY, FrameDecoder, ProtocolError, RemotingCommand
from rocketstore.remoting.header_codec import Header
from rocketstore.remoting.headers import GetRouteInfoRequestHeader

__all__ = [
    "MASTER_ID",
    "RETRIABLE_CODES",
    "BrokerRoutes",
    "MessageQueue",
    "NameServerClient",
    "RemotingClient",
    "RemotingClientError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeout",
    "RouteSource",
    "local_ip",
    "master_addr",
    "parse_addr",
    "readable_queues",
    "route_source_for",
    "split_namesrv_addr",
    "writable_queues",
]

log = logging.getLogger(__name__)

MASTER_ID = 0
DEFAULT_TIMEOUT_S = 3.0
DEFAULT_CONNECT_TIMEOUT_S = 3.0
_RECV_SIZE = 256 * 1024

#: Response codes after which the same request may succeed later or on another broker.
RETRIABLE_CODES: frozenset[int] = frozenset({
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.FLUSH_DISK_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.PULL_RETRY_IMMEDIATELY,
    ResponseCode.FLOW_CONTROL,
})


class RemotingClientError(Exception):
    """Base of every error this client raises."""

    retriable: bool = False


class RemotingConnectError(RemotingClientError):
    """The address could not be reached, or its connection broke under a request."""

    retriable = True

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"cannot talk to {addr}: {reason}")
        self.addr = addr
        self.reason = reason


class RemotingTimeout(RemotingClientError):
    """No response within the timeout."""

    retriable = True

    def __init__(self, addr: str, code: int, timeout_s: float) -> None:
        super().__init__(f"no response from {addr} to request {_code_name(code)} within {timeout_s:g} s")
        self.addr = addr
        self.code = code
        self.timeout_s = timeout_s


class RemotingError(RemotingClientError):
    """The peer answered with a code other than the ones the call accepts."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        where = f" from {addr}" if addr else ""
        super().__init__(f"{_response_name(code)}{where}: {remark or '(no remark)'}")
        self.code = code
        self.remark = remark or ""
        self.addr = addr
        self.retriable = code in RETRIABLE_CODES


def _code_name(code: int) -> str:
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return str(code)


def _response_name(code: int) -> str:
    try:
        return f"{ResponseCode(code).name} ({code})"
    except ValueError:
        return f"response code {code}"


def parse_addr(addr: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) into a host and a port; ValueError when malformed."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


def split_namesrv_addr(namesrv_addr: str | Sequence[str], what: str = "name server") -> list[str]:
    """RocketMQ's ``namesrvAddr`` list: ``host:port;host:port`` (',' accepted too); ``what`` the
    addresses are, for the message when there are none."""
    parts = [namesrv_addr] if isinstance(namesrv_addr, str) else list(namesrv_addr)
    addrs = [a.strip() for p in parts for a in p.replace(",", ";").split(";") if a.strip()]
    if not addrs:
        raise ValueError(f"no {what} address given")
    for addr in addrs:
        parse_addr(addr)
    return addrs


_LOCAL_IP: str | None = None


def local_ip() -> str:
    """This host's address as RocketMQ clients report it (client id, UNIQ_KEY): what the host
    name resolves to, else the address a UDP socket would use, else loopback."""
    global _LOCAL_IP
    if _LOCAL_IP is None:
        ip = "127.0.0.1"
        with contextlib.suppress(OSError):
            ip = socket.gethostbyname(socket.gethostname())
        _LOCAL_IP = ip
    return _LOCAL_IP


# -- one connection ----------------------------------------------------------------------------

RequestHandler = Callable[[str, RemotingCommand], RemotingCommand | None]
#: RocketMQ's RPCHook.doBeforeRequest: may add ext fields to a request about to be sent
RpcHook = Callable[[RemotingCommand], None]


class _Connection:
    """One socket: requests out under a lock, responses in on the reader thread."""

    def __init__(self, addr: str, sock: socket.socket | TlsSocket, on_request: RequestHandler | None,
                 on_closed: Callable[[_Connection], None]) -> None:
        self.addr = addr
        self._sock = sock
        self._on_request = on_request
        self._on_closed = on_closed
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, Future[RemotingCommand]] = {}
        self._closed_reason: str | None = None
        self._reader = threading.Thread(target=self._read_loop, name=f"remoting-reader-{addr}", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    def send(self, cmd: RemotingCommand, *, expect_response: bool) -> Future[RemotingCommand] | None:
        frame = cmd.encode()
        future: Future[RemotingCommand] | None = None
        with self._lock:
            if self._closed_reason is not None:
                raise RemotingConnectError(self.addr, self._closed_reason)
            if expect_response:
                future = Future()
                self._pending[cmd.opaque] = future
        try:
            with self._send_lock:
                self._sock.sendall(frame)
        except OSError as exc:
            self.close(f"send failed: {exc}")
            raise RemotingConnectError(self.addr, f"send failed: {exc}") from exc
        return future

    def forget(self, opaque: int) -> None:
        """Drop a request that timed out; its late response, if any, is ignored."""
        with self._lock:
            self._pending.pop(opaque, None)

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        reason = "connection closed by the peer"
        try:
            while True:
                data = self._sock.recv(_RECV_SIZE)
                if not data:
                    break
                for cmd in decoder.feed(data):
                    if cmd.is_response:
                        with self._lock:
                            future = self._pending.pop(cmd.opaque, None)
                        if future is not None:
                            with contextlib.suppress(InvalidStateError):  # cancelled by a timed-out caller
                                future.set_result(cmd)
                    else:
                        self._serve(cmd)
        except ProtocolError as exc:
            reason = f"protocol error: {exc}"
        except OSError as exc:
            reason = f"connection lost: {exc}"
        self.close(reason)

    def _serve(self, request: RemotingCommand) -> None:
        """A request the broker sends us (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
        response: RemotingCommand | None = None
        if self._on_request is not None:
            try:
                response = self._on_request(self.addr, request)
            except Exception:
                log.exception("handler for request %d from %s failed", request.code, self.addr)
                response = request.response(ResponseCode.SYSTEM_ERROR, "client handler failed")
        elif not request.is_oneway:
            response = request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                        f"request code {request.code} is not supported by this client")
        if response is not None and not request.is_oneway:
            with contextlib.suppress(RemotingConnectError):
                self.send(response, expect_response=False)

    def close(self, reason: str = "closed by the client") -> None:
        with self._lock:
            if self._closed_reason is not None:
                return
            self._closed_reason = reason
            pending, self._pending = self._pending, {}
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        error = RemotingConnectError(self.addr, reason)
        for future in pending.values():
            with contextlib.suppress(InvalidStateError):
                future.set_exception(error)
        self._on_closed(self)


# -- the client --------------------------------------------------------------------------------

HeaderLike = Header | Mapping[str, str] | None


class RemotingClient:
    """Pooled connections by address; thread-safe; one instance can serve a whole process.

    ``call`` is what most code wants: build a request from a typed header (or a plain dict),
    send it, wait, and raise :class:`RemotingError` unless the response code is accepted.
    """

    _opaque_lock = threading.Lock()
    _opaques = itertools.count(random.randrange(1 << 20))

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT_S, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
                 serialize_type: SerializeType = SerializeType.JSON, language: int = LanguageCode.PYTHON,
                 on_request: RequestHandler | None = None, ssl_context: ssl.SSLContext | None = None,
                 rpc_hook: RpcHook | None = None) -> None:
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.rpc_hook = rpc_hook
        self.connect_timeout = connect_timeout
        self.serialize_type = serialize_type
        self.language = language
        self.on_request = on_request
        self._pool: dict[str, _Connection] = {}
        self._pool_lock = threading.Lock()
        self._connect_locks: dict[str, threading.Lock] = {}
        self._closed = False
        self._pid = os.getpid()

    # -- connections ---------------------------------------------------------------------------
    def _connection(self, addr: str) -> _Connection:
        if self._pid != os.getpid():
            self._after_fork()
        conn = self._pool.get(addr)
        if conn is not None and not conn.closed:
            return conn
        with self._pool_lock:
            if self._closed:
                raise RemotingConnectError(addr, "the client is closed")
            lock = self._connect_locks.setdefault(addr, threading.Lock())
        with lock:  # one connect per address at a time; the others wait and share it
            conn = self._pool.get(addr)
            if conn is not None and not conn.closed:
                return conn
            conn = _Connection(addr, self._connect(addr), self.on_request, self._dropped)
            with self._pool_lock:
                if self._closed:
                    conn.close("the client is closed")
                    raise RemotingConnectError(addr, "the client is closed")
                self._pool[addr] = conn
            return conn

    def _connect(self, addr: str) -> socket.socket | TlsSocket:
        try:
            host, port = parse_addr(addr)
        except ValueError as exc:
            raise RemotingConnectError(addr, str(exc)) from None
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout)
        except TimeoutError:
            raise RemotingConnectError(addr, f"connect timed out after {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise RemotingConnectError(addr, exc.strerror or str(exc)) from None
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self.ssl_context is None:
            return sock
        try:
            return TlsSocket(sock, self.ssl_context, host, self.connect_timeout)
        except (OSError, ssl.SSLError) as exc:  # SSLError is an OSError; named for the reader
            sock.close()
            raise RemotingConnectError(addr, f"TLS handshake failed: {exc}") from None

    def _after_fork(self) -> None:
        """In a forked child (Spark's Python workers fork) the parent's reader threads do not
        exist and its sockets are shared with the parent: forget them without touching them."""
        self._pool_lock = threading.Lock()
        self._pool = {}
        self._connect_locks = {}
        self._pid = os.getpid()

    def _dropped(self, conn: _Connection) -> None:
        with self._pool_lock:
            if self._pool.get(conn.addr) is conn:
                del self._pool[conn.addr]

    def live_connection(self, addr: str) -> object | None:
        """The open pooled connection to ``addr`` (None when there is none): a different object
        after a reconnection, so a caller can tell that two requests went over the same one."""
        conn = self._pool.get(addr)
        return conn if conn is not None and not conn.closed else None

    def close_connection(self, addr: str) -> None:
        conn = self._pool.get(addr)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every connection; in-flight requests fail with RemotingConnectError."""
        with self._pool_lock:
            self._closed = True
            conns = list(self._pool.values())
        for conn in conns:
            conn.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------------
    @classmethod
    def next_opaque(cls) -> int:
        with cls._opaque_lock:
            return next(cls._opaques) & 0x7FFFFFFF

    def request(self, code: int, header: HeaderLike = None, body: bytes = b"", *,
                serialize_type: SerializeType | None = None) -> RemotingCommand:
        """A request command in this client's encoding (not yet sent)."""
        fields = header.to_ext_fields() if isinstance(header, Header) else dict(header or {})
        return RemotingCommand(code=int(code), ext_fields=fields, body=body, language=self.language,
                               serialize_type=serialize_type or self.serialize_type)

    def _send_request(self, addr: str, cmd: RemotingCommand) -> tuple[_Connection, Future[RemotingCommand]]:
        cmd.opaque = self.next_opaque()
        cmd.flag &= ~RPC_ONEWAY
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        conn = self._connection(addr)
        future = conn.send(cmd, expect_response=True)
        assert future is not None
        return conn, future

    def invoke_future(self, addr: str, cmd: RemotingCommand) -> Future[RemotingCommand]:
        """Send ``cmd`` (its opaque is assigned here); the future completes with the response,
        or fails with RemotingConnectError if the connection breaks first. No timeout applies."""
        return self._send_request(addr, cmd)[1]

    def invoke(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send and wait for the response, whatever its code."""
        timeout = self.timeout if timeout is None else timeout
        conn, future = self._send_request(addr, cmd)
        try:
            return future.result(timeout)
        except FutureTimeoutError:
            conn.forget(cmd.opaque)
            future.cancel()
            raise RemotingTimeout(addr, cmd.code, timeout) from None

    async def invoke_async(self, addr: str, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """:meth:`invoke` for asyncio callers: the wait does not block the loop (a new
        connection is opened in a worker thread)."""
        timeout = self.timeout if timeout is None else timeout
        conn = self._pool.get(addr)
        if conn is None or conn.closed:
            await asyncio.to_thread(self._connection, addr)
        conn, future = self._send_request(addr, cmd)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            conn.forget(cmd.opaque)
            raise RemotingTimeout(addr, cmd.code, timeout) from None

    def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        """Send with the one-way flag; nothing is awaited (the peer sends no response)."""
        cmd.opaque = self.next_opaque()
        cmd.flag |= RPC_ONEWAY
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self._connection(addr).send(cmd, expect_response=False)

    def call(self, addr: str, code: int, header: HeaderLike = None, body: bytes = b"", *,
             timeout: float | None = None, accept: Iterable[int] = (ResponseCode.SUCCESS,),
             serialize_type: SerializeType | None = None) -> RemotingCommand:
        """Request/response; raises :class:`RemotingError` for a code outside ``accept``."""
        response = self.invoke(addr, self.request(code, header, body, serialize_type=serialize_type), timeout)
        check(response, addr, accept)
        return response

    async def call_async(self, addr: str, code: int, header: HeaderLike = None, body: bytes = b"", *,
                         timeout: float | None = None, accept: Iterable[int] = (ResponseCode.SUCCESS,),
                         serialize_type: SerializeType | None = None) -> RemotingCommand:
        response = await self.invoke_async(addr, self.request(code, header, body, serialize_type=serialize_type),
                                           timeout)
        check(response, addr, accept)
        return response


def check(response: RemotingCommand, addr: str | None, accept: Iterable[int] = (ResponseCode.SUCCESS,)) -> None:
    if response.code not in set(accept):
        raise RemotingError(response.code, response.remark, addr)


# -- routes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """RocketMQ's MessageQueue: a queue of a topic on one broker."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}#{self.queue_id}"


def master_addr(route: TopicRouteData, broker_name: str) -> str | None:
    """The master (brokerId 0) address of ``broker_name`` in ``route``."""
    for data in route.broker_datas:
        if data.broker_name == broker_name:
            return data.broker_addrs.get(MASTER_ID)
    return None


def any_addr(route: TopicRouteData, broker_name: str) -> str | None:
    """The master if there is one, else any replica (reads may go to a slave)."""
    for data in route.broker_datas:
        if data.broker_name == broker_name and data.broker_addrs:
            return data.broker_addrs.get(MASTER_ID) or data.broker_addrs[min(data.broker_addrs)]
    return None


def writable_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The queues a producer may send to (TopicPublishInfo): writable queue data of brokers
    that have a master, brokers in name order."""
    queues: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_WRITE and master_addr(route, qd.broker_name) is not None:
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return queues


def readable_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The queues a consumer may pull from (topicRouteData2TopicSubscribeInfo)."""
    queues: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if qd.perm & PERM_READ:
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return queues


class NameServerClient:
    """Name-server requests, each tried on every configured address until one answers.

    An answer (even TOPIC_NOT_EXIST) ends the search; only connection failures and timeouts
    move on to the next address. The address that answered last is tried first next time.
    """

    def __init__(self, namesrv_addr: str | Sequence[str], client: RemotingClient, *,
                 timeout: float | None = None) -> None:
        self.addrs = split_namesrv_addr(namesrv_addr)
        self.client = client
        self.timeout = timeout
        self._preferred = random.randrange(len(self.addrs))

    def call(self, code: int, header: HeaderLike = None, body: bytes = b"", *,
             accept: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        errors: list[RemotingClientError] = []
        n = len(self.addrs)
        for i in range(n):
            index = (self._preferred + i) % n
            addr = self.addrs[index]
            try:
                response = self.client.invoke(addr, self.client.request(code, header, body), self.timeout)
            except (RemotingConnectError, RemotingTimeout) as exc:
                errors.append(exc)
                continue
            self._preferred = index
            check(response, addr, accept)
            return response
        if len(errors) == 1:
            raise errors[0]
        if all(isinstance(e, RemotingConnectError) for e in errors):
            raise RemotingConnectError(";".join(self.addrs), "no name server answered: " +
                                       "; ".join(str(e) for e in errors))
        raise errors[-1]

    def get_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC; TOPIC_NOT_EXIST raises :class:`RemotingError` with that code."""
        response = self.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic))
        if not response.body:
            raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, f"empty route for topic {topic}")
        return TopicRouteData.decode(response.body)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo.decode(self.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)

    def topic_list(self) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: the TopicList body's ``topicList``."""
        return TopicList.decode(self.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body).topic_list


class RouteSource(Protocol):
    """Where a client looks up a topic's route: :class:`NameServerClient` or :class:`BrokerRoutes`.

    ``get_route`` raises :class:`RemotingError` with code TOPIC_NOT_EXIST for a topic it does
    not know (the producer then sends through TBW102's route, as it does with a name server).
    """

    def get_route(self, topic: str) -> TopicRouteData: ...


def route_source_for(namesrv_addr: str | Sequence[str] | None, routes: RouteSource | None, client: RemotingClient,
                 timeout: float | None) -> RouteSource:
    """The route source of a Producer, PullConsumer or MQAdmin: ``routes`` as given, or a
    NameServerClient for ``namesrv_addr``; exactly one of the two."""
    if routes is not None:
        if namesrv_addr is not None:
            raise ValueError("give a name server address or a route source, not both")
        return routes
    if namesrv_addr is None:
        raise ValueError("a name server address or a route source is required")
    return NameServerClient(namesrv_addr, client, timeout=timeout)


class BrokerRoutes:
    """Routes built by asking the given brokers themselves, for when no name server is to be used
    (it is unreachable, or one broker is reached through a port-forward).

    Each broker is asked what any RocketMQ 4.9.8 broker answers: GET_BROKER_CONFIG for its
    ``brokerName``, ``brokerClusterName`` and ``brokerPermission``, GET_ALL_TOPIC_CONFIG for the
    topic's queue numbers and permission. A route has one BrokerData per broker that has the
    topic, holding the address given here as the master's (what the broker itself publishes may
    be unreachable from this side of a port-forward), and its QueueData as the broker would
    register it with a name server (a broker without read or write permission publishes its own
    permission for every topic). Nothing is cached: a client caches routes itself.
    """

    def __init__(self, broker_addrs: str | Sequence[str], client: RemotingClient, *,
                 timeout: float | None = None) -> None:
        self.addrs = split_namesrv_addr(broker_addrs, "broker")
        self.client = client
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"BrokerRoutes({';'.join(self.addrs)})"

    def _call(self, addr: str, code: int) -> RemotingCommand:
        return self.client.call(addr, code, timeout=self.timeout)

    def get_route(self, topic: str) -> TopicRouteData:
        route = TopicRouteData()
        owner: dict[str, str] = {}  # brokerName -> the address that answered with it
        for addr in self.addrs:
            config = parse_properties(self._call(addr, RequestCode.GET_BROKER_CONFIG).body.decode(errors="replace"))
            name = config.get("brokerName", "")
            if not name:
                raise RemotingClientError(f"broker {addr} reports no brokerName in its config")
            if name in owner:
                raise RemotingClientError(f"brokers {owner[name]} and {addr} are both {name}: give one address "
                                          "per broker")
            owner[name] = addr
            table = parse_fastjson(self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body.decode())
            entry = table.get("topicConfigTable", {}).get(topic) if isinstance(table, dict) else None
            if entry is None:
                continue
            topic_config = TopicConfig.from_dict(entry)
            perm = topic_config.perm
            broker_perm = int(config.get("brokerPermission", PERM_READ | PERM_WRITE))
            if not broker_perm & PERM_READ or not broker_perm & PERM_WRITE:
                perm = broker_perm
            route.broker_datas.append(BrokerData(cluster=config.get("brokerClusterName", ""), broker_name=name,
                                                 broker_addrs={MASTER_ID: addr}))
            route.queue_datas.append(QueueData(broker_name=name, read_queue_nums=topic_config.read_queue_nums,
                                               write_queue_nums=topic_config.write_queue_nums, perm=perm,
                                               topic_sys_flag=topic_config.topic_sys_flag))
        if not route.queue_datas:
            raise RemotingError(ResponseCode.TOPIC_NOT_EXIST,
                                f"topic {topic} is on none of the brokers {', '.join(self.addrs)}")
        return route
