"""RemotingServer: RocketMQ's remoting protocol over asyncio, one Protocol per connection.

Bytes are parsed in ``data_received`` by the I/O-free :class:`rocketstore.remoting.command.FrameDecoder`
and each request goes to the handler registered for its code, which returns a :data:`Reply`:

* the response itself (or None: nothing to answer), for every handler that never waits (an
  ASYNC_FLUSH send, offsets, heartbeats, a pull that finds messages). It runs inline, within
  ``data_received``: an asyncio task per request (creation, scheduling, a loop iteration, the
  done callback) cost more than many of these handlers do;
* a coroutine, when the handler must wait (a send held by dispatch back-pressure, a
  long-polling pull). It becomes a tracked task that writes the response when it completes. A
  handler may decide per request: try the work inline and hand back a coroutine only when it
  has to wait;
* a future of the response, when what it waits for calls back (a plain send waiting for its
  flush or its slave): cheaper than a task, which steps a coroutine through the loop. The
  responses of the futures that complete together are written together, as inline ones are.

Requests of the codes a group handler is registered for (``RemotingServer.register_group``: the
plain sends) that a connection has read one after the other are handed to it together, as many
as the free in-flight slots allow, and it replies to each: the sends of one read then share one
taking of the CommitLog's lock, one publication of what they wrote and one wait for the slave or
the flush. A lone one goes to its code's handler.

Before that, ``RemotingServer.serve_frames`` may serve the frames at the head of a read itself,
before they become commands (:func:`serve_by_code` picks by the first frame's code: the plain
sends' one native call, ``SendMessageProcessor.serve_plain_frames``, or the pulls',
``PullMessageProcessor.serve_pull_frames``): it serves what the usual path would answer at once,
and only while nothing else is pending on the connection (no backlog, writing not paused, no
``before_request`` hook, the server not stopping); from the first frame it does not serve on, the
read takes the usual path.

The responses produced while handling one read go out in one ``transport.writelines`` call
(one system call instead of one per response), up to :data:`COALESCE_MAX_BYTES` at a time.
Every response carries its request's opaque, so the order among them does not matter to
clients. A malformed frame closes that connection only; a well-framed request whose header or
body does not decode is the client's error, answered SYSTEM_ERROR with a remark naming the field
and logged at most once per :data:`MALFORMED_LOG_INTERVAL_S` (any client can send them at will,
so they must not fill the log); errors are answered the same whether the handler raised inline
or in its coroutine. Shutdown closes the listener, lets in-flight requests finish within a grace
period, then cancels the rest.

Before a request's handler runs, ``RemotingServer.before_request`` (RocketMQ's server RPC hook;
the ACL check of ``aclEnable``) may answer it instead. With a TLS mode configured
(tls_system_config.py), :class:`TlsSniffingListener` accepts the connections: it peeks at each one's
first byte, as RocketMQ's HandshakeHandler does, and hands the socket to the loop with or without
TLS; from then on it is an ordinary :class:`Connection`.

The event loop: :func:`event_loop_factory` picks uvloop when it is importable (its transports and
callbacks are implemented in C: less interpreter work per read and write), unless
``ROCKETSTORE_UVLOOP=0`` asks for asyncio's own loop; :func:`loop_name` says which one runs.

Flow control bounds what one connection can make the broker hold, both ways:

* read side: at most :data:`MAX_IN_FLIGHT_PER_CONNECTION` waiting requests (tasks) run at once;
  decoded requests beyond that wait in the connection's backlog and reading pauses until half
  of them have finished. Inline requests finish before the next one is taken, so they hold no
  slot;
* write side: responses queue in the transport's buffer, whose high-water mark is
  :data:`WRITE_BUFFER_HIGH`. Past it (a client that sends and does not read), asyncio calls
  :meth:`Connection.pause_writing` (during the write that passed it: inline responses are
  written at least every :data:`COALESCE_MAX_BYTES`, so the check comes in time): reading
  pauses, no further request is dispatched, and waiting handlers that finish hold their
  response until the client drains the buffer below
  :data:`WRITE_BUFFER_LOW` (:meth:`Connection.resume_writing`). Without this, 20,000 pipelined
  pulls from a client that never reads grew the broker by over 1 GB in ten seconds.

Connections themselves are bounded too (:class:`ConnectionLimits`, read at each use so a live update
applies):

* idle timeout, RocketMQ's ``serverChannelMaxIdleTimeSeconds`` (NettyServerConfig, default 120 s): a
  connection that neither read nor wrote for that long is closed, as Netty's IdleStateHandler
  (all-idle) makes RocketMQ do; one with a request in progress (a long-polling pull waits without
  any I/O) or a broker request awaiting the client's answer is not idle here, so the timeout never
  cuts a call short. Clients reconnect on their next request;
* a connection cap, ``remotingMaxConnections`` (RocketStore's key: RocketMQ has none), per listener:
  a connection past it is closed at once (reset) and counted in
  :attr:`RemotingServer.refused_connections`. On a TLS port the connections still deciding between
  TLS and plain count too.

Closes for either reason are logged as malformed requests are: at most one line per
:data:`MALFORMED_LOG_INTERVAL_S` (a storm must not fill the log), the others counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Final, Protocol, cast

from rocketstore.broker.tls_system_config import ReloadingSslContext, TlsMode, TlsSettings
from rocketstore.common.message import DEFAULT_BORN_HOST, HostAddress
from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import (
    RPC_ONEWAY,
    FrameDecoder,
    MalformedRequestError,
    ProtocolError,
    RemotingCommand,
)

log = logging.getLogger(__name__)

MAX_IN_FLIGHT_PER_CONNECTION = 256
# The transport's write buffer: asyncio pauses the protocol's writing above HIGH and resumes it
# below LOW. A few pull responses (32 messages of 4 KiB are 128 KiB) fit under HIGH, so a client
# that reads keeps its pipeline full; one that does not costs at most this much buffer, plus the
# responses of the requests in flight.
WRITE_BUFFER_HIGH = 4 * 1024 * 1024
WRITE_BUFFER_LOW = 1024 * 1024
# Inline responses of one read are written together once they reach this many bytes (and at the
# end of the read): small ones share a system call, large ones (pulls) gain nothing from being
# joined, and the transport must see them in time to pause writing.
COALESCE_MAX_BYTES = 256 * 1024
# At most one log line per this many seconds, for all connections together, about malformed
# requests (the rest are counted in RemotingServer.malformed_requests), and the same for connections
# refused by the cap and for idle connections closed.
MALFORMED_LOG_INTERVAL_S = 10.0
# How often idle connections are looked for, at most (a timeout shorter than four of these is
# checked four times per timeout).
IDLE_SWEEP_MAX_INTERVAL_S: Final = 1.0
# Longest remark and log text taken from a decoding error: it may quote what the client sent.
_MAX_ERROR_TEXT = 300


class ConnectionLimits(Protocol):
    """What the listeners read at each use (:class:`~rocketstore.broker.broker_config.BrokerConfig` has them)."""

    @property
    def server_channel_max_idle_time_seconds(self) -> int:
        """Seconds without a read or a write after which an idle connection is closed; <= 0: never."""

    @property
    def remoting_max_connections(self) -> int:
        """Connections the listener holds at once."""


@dataclass(frozen=True)
class DefaultLimits:
    """The defaults of :class:`ConnectionLimits` (BrokerConfig's), for a server built without a config."""

    server_channel_max_idle_time_seconds: int = 120
    remoting_max_connections: int = 10_000


class SparseLog:
    """Logs one kind of event any client can cause at will at most once per ``interval_s``; the
    events between are counted, and the next line says how many went unlogged."""

    def __init__(self, interval_s: float = MALFORMED_LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        #: events since start, logged or not
        self.count = 0
        self._unlogged = 0
        self._logged_at = float("-inf")

    def event(self, level: int, msg: str, *args: object) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._logged_at < self.interval_s:
            self._unlogged += 1
            return
        log.log(level, msg + " (%d more not logged since the last such line)", *args, self._unlogged)
        self._logged_at = now
        self._unlogged = 0


class RequestError(Exception):
    """A request the handler refuses: answered with ``code`` and ``remark``, connection kept."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


#: What a handler returns: its response (None: no response), or, when it must wait, a coroutine
#: that produces it or a future of it. ``async def`` handlers fit too: calling one returns its
#: coroutine.
Reply = RemotingCommand | None | Coroutine[Any, Any, RemotingCommand | None] | asyncio.Future[RemotingCommand]
Handler = Callable[["Connection", RemotingCommand], Reply]
#: A handler of consecutive requests read off one connection in one pass (the plain sends:
#: ``RemotingServer.register_group``): their replies, one per request, in order.
GroupHandler = Callable[["Connection", list[RemotingCommand]], list[Reply]]

#: ``ROCKETSTORE_UVLOOP=0`` (or false/no/off) runs the broker on asyncio's own loop even where
#: uvloop is installed: to compare the two, or to rule uvloop out when chasing a problem.
UVLOOP_ENV_SWITCH: Final = "ROCKETSTORE_UVLOOP"


def event_loop_factory() -> tuple[Callable[[], asyncio.AbstractEventLoop], str]:
    """The factory of the loop to run the broker on, and a sentence saying which loop and why.

    uvloop when it is importable and not switched off (:data:`UVLOOP_ENV_SWITCH`), else asyncio's
    default loop. Whoever creates the broker's loop asks here (``asyncio.Runner(loop_factory=...)``);
    brokers embedded in another program's loop run on that loop.
    """
    raw = os.environ.get(UVLOOP_ENV_SWITCH, "1")
    if raw.strip().lower() in ("0", "false", "no", "off"):
        return asyncio.new_event_loop, f"asyncio's event loop ({UVLOOP_ENV_SWITCH}={raw})"
    try:
        import uvloop
    except ImportError as exc:
        return asyncio.new_event_loop, f"asyncio's event loop (uvloop not importable: {exc})"
    return uvloop.new_event_loop, f"uvloop {version('uvloop')} ({UVLOOP_ENV_SWITCH}=0 switches to asyncio's loop)"


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio": which implementation ``loop`` is (logged and on /metrics)."""
    return "uvloop" if type(loop).__module__.partition(".")[0] == "uvloop" else "asyncio"


def _writable_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


@dataclass(eq=False)
class Connection(asyncio.Protocol):
    """One client connection: frames in, responses (and broker-initiated requests) out."""

    server: RemotingServer
    transport: asyncio.Transport | None = None
    peer: str = ""
    #: the client's address as a message's bornHost (computed once, not per send)
    peer_host: HostAddress = DEFAULT_BORN_HOST
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    #: the waiting requests: tasks, and the futures handlers returned (:data:`Reply`)
    tasks: set[asyncio.Future[Any]] = field(default_factory=set)
    #: Decoded requests not dispatched yet: flow control holds them (bounded, as reading pauses).
    backlog: deque[RemotingCommand] = field(default_factory=deque)
    reading_paused: bool = False
    writing_paused: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set while the client drains its responses; handlers wait on it before writing.
    _writable: asyncio.Event = field(default_factory=_writable_event)
    _next_opaque: int = 0
    #: Broker-initiated requests (:meth:`invoke`) waiting for the client's response, by opaque.
    _awaiting: dict[int, asyncio.Future[RemotingCommand]] = field(default_factory=dict)
    #: Encoded inline responses not written yet, and their size (see :meth:`_pump`).
    _out: list[bytes] = field(default_factory=list)
    _out_bytes: int = 0
    #: among the server's connections with futures' answers to flush (:meth:`_gather_answer`)
    _flush_due: bool = False
    #: time.monotonic() of the last read or write (the idle timeout)
    last_io: float = 0.0
    #: closed by the connection cap as it arrived: never served, so nobody hears of its end
    refused: bool = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (asyncio's or uvloop's, which does not subclass asyncio.Transport)
        self.transport = transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if not self.server.admit(self.peer) or self.server.going_away:
            self.refused = True
            transport.abort()
            return
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        if isinstance(peer, tuple) and len(peer) >= 2:
            # RocketMQ takes the remote address as is; an IPv6 scope id is not part of it
            self.peer_host = HostAddress(str(peer[0]).split("%", 1)[0], int(peer[1]))
        self.last_io = time.monotonic()
        self.server.connections.add(self)

    def idle(self, now: float, max_idle_s: float) -> bool:
        """Whether nothing was read or written for ``max_idle_s`` and nothing is in progress."""
        return (now - self.last_io >= max_idle_s and not self.tasks and not self.backlog
                and not self._awaiting)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.refused:
            return
        self.server.connections.discard(self)
        self.backlog.clear()
        self._writable.set()  # handlers waiting to write wake up and find the transport closed
        self.closed.set()
        for waiting in self._awaiting.values():
            if not waiting.done():
                waiting.set_exception(ConnectionError(f"connection to {self.peer} closed"))
        self._awaiting.clear()
        for listener in self.server.on_disconnect:
            listener(self)

    def data_received(self, data: bytes) -> None:
        server = self.server
        serve = None
        if (server.serve_frames is not None and not self.backlog and not self.writing_paused
                and server.before_request is None and not server.going_away):
            serve = self._serve_frames
        try:
            commands = self.decoder.feed(data, serve)
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            self.close()
            return
        self.commands_received(commands)

    def _serve_frames(self, data: bytes, max_frame: int) -> int:
        """The server's ``serve_frames`` on the frames at the head of ``data`` (:meth:`data_received`):
        their responses join the ones this pass writes; the bytes it served."""
        assert self.server.serve_frames is not None
        served, responses = self.server.serve_frames(self, data, max_frame)
        for response in responses:
            self._out.append(response)
            self._out_bytes += len(response)
        return served

    def commands_received(self, commands: list[RemotingCommand]) -> None:
        """Commands read off the connection, in order: decoded here (:meth:`data_received`) or by
        the native remoting front (remoting_front.py)."""
        self.last_io = time.monotonic()
        # Responses answer our requests: :meth:`invoke` may wait for one; the rest (answers to
        # one-way notifications, or arriving after their waiter gave up) are dropped.
        for cmd in commands:
            if not cmd.is_response:
                self.backlog.append(cmd)
                continue
            waiting = self._awaiting.pop(cmd.opaque, None)
            if waiting is not None and not waiting.done():
                waiting.set_result(cmd)
        self._pump()

    def pause_writing(self) -> None:
        """The transport's buffer passed its high-water mark: stop taking and answering requests."""
        self.writing_paused = True
        self._writable.clear()
        self._pump()

    def resume_writing(self) -> None:
        """The client drained the buffer below its low-water mark: answer and read again."""
        self.writing_paused = False
        self._writable.set()
        self._pump()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._pump()

    def _answer_later(self, request: RemotingCommand, future: asyncio.Future[RemotingCommand]) -> None:
        """A handler's future is done: its response joins the ones waiting to be written, in one
        write with every other response that came due in this loop pass
        (:meth:`RemotingServer.flush_answers`). Written even while the client does not read, unlike
        a task's: what is held is bounded by :data:`MAX_IN_FLIGHT_PER_CONNECTION` small responses,
        and a future cannot wait."""
        if future not in self.tasks and not future.cancelled():
            return  # answered by answer_all, or the connection ended
        self.tasks.discard(future)
        if future.cancelled():  # the broker stops past its grace: answered, not left to the client's timeout
            response: RemotingCommand | None = going_away_response(request)
        elif (exc := future.exception()) is not None:
            response = self.error_response(request, exc if isinstance(exc, Exception) else RuntimeError(exc))
        else:
            response = future.result()
        self._gather_answer(request, response)

    def answer_all(self, answers: Iterable[tuple[RemotingCommand, asyncio.Future[RemotingCommand],
                                                 RemotingCommand]]) -> None:
        """Answer handlers' pending futures from the loop, in the caller's pass: (request, future,
        response) each.

        Setting a future's result would answer it through its callbacks (:meth:`_answer_later`),
        which the loop runs a pass later, whose write then waits a pass more; each pass may first
        handle a whole batch of new requests. The responses join the others due and are written
        when the server flushes them (:meth:`RemotingServer.flush_answers`): at the latest in the
        next pass, at once when the caller flushes itself (:class:`StoreWaits` does, after each
        slave report or flush). A future already done (cancelled by a stop) was answered by its
        callback.
        """
        for request, future, response in answers:
            if future.done():
                continue
            self.tasks.discard(future)  # so that _answer_later, run when the result is set, leaves it alone
            future.set_result(response)
            if not request.is_oneway:
                self._gather(response)
        self.server.answers_due(self)

    def _gather_answer(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        """A future's answer (None: none to write), to be written by the server's next flush, which
        also takes backlogged requests now that the future's in-flight slot is free."""
        if response is not None and not request.is_oneway:
            self._gather(response)
        self.server.answers_due(self)

    def _gather(self, response: RemotingCommand) -> None:
        """``response`` encoded into the answers this connection writes next."""
        data = response.encode()
        self._out.append(data)
        self._out_bytes += len(data)

    def _pump(self) -> None:
        """Dispatch backlogged requests as far as flow control allows; pause or resume reading to match.

        Inline replies are encoded into ``_out`` and written together at the end (or once
        :data:`COALESCE_MAX_BYTES` gather); a write that passes the high-water mark calls
        :meth:`pause_writing` at once (which pumps again, only to pause reading), and the loop
        stops dispatching.
        """
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        backlog = self.backlog
        going_away = self.server.going_away
        groups = self.server.group_handlers
        while backlog and not self.writing_paused and len(self.tasks) < MAX_IN_FLIGHT_PER_CONNECTION:
            request = backlog.popleft()
            if going_away:
                self._take_reply(request, going_away_response(request))
                continue
            group = groups.get(request.code)
            if group is not None and backlog and groups.get(backlog[0].code) == group:
                self._call_group(group, request)
            else:
                self._take_reply(request, self._call_handler(request))
        if self._out:
            self._flush()
            if transport.is_closing():  # the write failed and closed it: nothing to pause or resume
                return
        if self.writing_paused or backlog or len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION:
            if not self.reading_paused:
                self.reading_paused = True
                transport.pause_reading()
        elif self.reading_paused and len(self.tasks) < MAX_IN_FLIGHT_PER_CONNECTION // 2:
            self.reading_paused = False
            transport.resume_reading()

    def _take_reply(self, request: RemotingCommand, reply: Reply) -> None:
        """A handler's reply: an inline response is gathered for the pass's write, a future or a
        coroutine is waited for in a slot of its own."""
        if reply is None or isinstance(reply, RemotingCommand):
            if reply is not None and not request.is_oneway:
                self._gather(reply)
                if self._out_bytes >= COALESCE_MAX_BYTES:
                    self._flush()
        elif isinstance(reply, asyncio.Future):
            self.tasks.add(reply)
            reply.add_done_callback(functools.partial(self._answer_later, request))
        else:
            task = asyncio.get_running_loop().create_task(self._finish(request, reply))
            self.tasks.add(task)
            task.add_done_callback(self._task_done)

    def _call_group(self, handler: GroupHandler, first: RemotingCommand) -> None:
        """``first`` and the backlogged requests right after it that ``handler`` takes too, handled
        in one call, as many as the free in-flight slots allow (each reply may be a future).

        A request ``before_request`` refuses ends the group and is answered after it, in order; if
        the handler raises, every request of the group is answered with the error (a group
        handler stores nothing of a group it fails on: ``SendMessageProcessor.handle_group``).
        """
        backlog, groups = self.backlog, self.server.group_handlers
        room = MAX_IN_FLIGHT_PER_CONNECTION - len(self.tasks)
        requests: list[RemotingCommand] = []
        refused: RemotingCommand | None = None
        request = first
        while True:
            refused = self._refusal(request)
            if refused is not None:
                break
            requests.append(request)
            if len(requests) >= room or not backlog or groups.get(backlog[0].code) != handler:
                break
            request = backlog.popleft()
        if requests:
            try:
                replies = handler(self, requests)
            except Exception as exc:
                replies = [self.error_response(r, exc) for r in requests]
            for done, reply in zip(requests, replies, strict=True):
                self._take_reply(done, reply)
        if refused is not None:
            self._take_reply(request, refused)

    def _flush(self) -> None:
        """Write the gathered inline responses in one call (taken off ``_out`` first: the write
        may re-enter :meth:`_pump` through :meth:`pause_writing`)."""
        out, self._out, self._out_bytes = self._out, [], 0
        if self.transport is not None and not self.transport.is_closing():
            self.last_io = time.monotonic()
            self.transport.writelines(out)

    def _call_handler(self, request: RemotingCommand) -> Reply:
        """Run the request's handler up to its reply; what it raises is answered as :meth:`error_response` says."""
        handler = self.server.handlers.get(request.code)
        if handler is None:
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                    f"request code {request.code} is not supported")
        refused = self._refusal(request)
        if refused is not None:
            return refused
        return self.call_protected(request, handler)

    def _refusal(self, request: RemotingCommand) -> RemotingCommand | None:
        """RocketMQ's server RPC hook (``RemotingServer.before_request``, the ACL check): the
        answer that refuses ``request``, or None to let it through."""
        before = self.server.before_request
        if before is None:
            return None
        try:
            return before(request, self.peer)
        except Exception as exc:
            return self.error_response(request, exc)

    def call_protected(self, request: RemotingCommand, handler: Handler) -> Reply:
        """``handler``'s reply to ``request``, or the answer to what it raised (:meth:`error_response`)."""
        try:
            return handler(self, request)
        except Exception as exc:
            return self.error_response(request, exc)

    async def _finish(self, request: RemotingCommand, waiting: Coroutine[Any, Any, RemotingCommand | None]) -> None:
        """A handler's wait, then its response, written as soon as the client is reading again."""
        response: RemotingCommand | None
        try:
            response = await waiting
        except asyncio.CancelledError:
            # the broker stops past its grace: the request is answered, not left to the client's timeout
            if not request.is_oneway:
                self.send(going_away_response(request))
            raise
        except Exception as exc:
            response = self.error_response(request, exc)
        if response is not None and not request.is_oneway:
            if self.writing_paused:  # every response passes here: no await unless it must wait
                await self._writable.wait()
            self.send(response)

    def error_response(self, request: RemotingCommand, exc: Exception) -> RemotingCommand:
        """The answer to a request whose handler raised ``exc``: the connection always survives."""
        if isinstance(exc, RequestError):
            return request.response(exc.code, exc.remark)
        if isinstance(exc, MalformedRequestError):  # the client's error: answered, logged sparingly
            remark = _shorten(str(exc))
            self.server.report_malformed(self, request, remark)
            return request.response(ResponseCode.SYSTEM_ERROR, remark)
        # a handler bug answers SYSTEM_ERROR; the broker stays up
        log.error("request code %d from %s failed", request.code, self.peer, exc_info=exc)
        return request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")

    def send(self, cmd: RemotingCommand) -> None:
        """Write ``cmd`` now, whatever the flow control: responses of waiting handlers wait for a
        drain in ``_finish``."""
        if self.transport is not None and not self.transport.is_closing():
            self.last_io = time.monotonic()
            self.transport.write(cmd.encode())

    def notify(self, code: int, ext_fields: dict[str, str], body: bytes = b"") -> None:
        """Send a one-way request to the client (e.g. NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE).

        Written even while writing is paused: notifications are small and rare, and dropping one
        would leave a consumer with a stale view of its group.
        """
        self._next_opaque += 1
        self.send(RemotingCommand(code=code, opaque=self._next_opaque, flag=RPC_ONEWAY, ext_fields=ext_fields,
                                  body=body))

    @property
    def active(self) -> bool:
        """Whether the connection is open (neither closed nor closing)."""
        return self.transport is not None and not self.transport.is_closing()

    async def invoke(self, code: int, ext_fields: dict[str, str], body: bytes, timeout_s: float) -> RemotingCommand:
        """Send a request to the client and wait for its response (RocketMQ's invokeSync to a channel,
        e.g. PUSH_REPLY_MESSAGE_TO_CLIENT).

        Raises TimeoutError when no response comes within ``timeout_s`` and ConnectionError when
        the connection is (or gets) closed first.
        """
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError(f"connection to {self.peer} closed")
        self._next_opaque += 1
        opaque = self._next_opaque
        waiting: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._awaiting[opaque] = waiting
        try:
            self.send(RemotingCommand(code=code, opaque=opaque, ext_fields=ext_fields, body=body))
            return await asyncio.wait_for(waiting, timeout_s)
        finally:
            self._awaiting.pop(opaque, None)

    def close(self) -> None:
        """Close the connection; at once, dropping unsent responses, if the client stopped reading
        (a graceful close would wait for it to drain them, which it may never do)."""
        if self.transport is not None:
            if self.writing_paused:
                self.transport.abort()
            else:
                self.transport.close()


#: (connection, the read, the largest frame) -> (bytes served from the read's head, their response frames)
ServeFrames = Callable[["Connection", bytes, int], tuple[int, list[bytes]]]


def serve_by_code(servers: Mapping[int, ServeFrames], leading_code: Callable[[bytes], int | None]) -> ServeFrames:
    """One ``serve_frames`` for several request codes: the one for the code of the read's first
    frame (``leading_code``, a look at its header alone), nothing served for any other code."""

    def serve(conn: Connection, data: bytes, max_frame: int) -> tuple[int, list[bytes]]:
        chosen = servers.get(leading_code(data))  # type: ignore[arg-type]  # None finds nothing
        return (0, []) if chosen is None else chosen(conn, data, max_frame)

    return serve


def going_away_response(request: RemotingCommand) -> RemotingCommand:
    """The answer to a request read while the broker stops: SERVICE_NOT_AVAILABLE, which a 4.x
    and a 5.x client retry at once (their retryResponseCodes), where a request left unanswered
    costs them their whole send timeout."""
    return request.response(ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is stopping")


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_ERROR_TEXT else text[: _MAX_ERROR_TEXT - 3] + "..."


class Front(Protocol):
    """What serves a plaintext port in asyncio's place (remoting_front.py's native front): it
    listens on :attr:`port` and feeds the server's connections."""

    port: int

    def start(self) -> None: ...

    def hand_over(self) -> None:
        """Give the front what the connections wrote so far, now (else at the end of the pass)."""

    async def stop(self) -> None: ...


#: Makes the front of a server, or returns None to leave the port on asyncio (the broker passes
#: remoting_front.py's when remotingNativeFront is set; this module does not import it, which
#: imports this one).
FrontFactory = Callable[["RemotingServer"], "Front | None"]


class RemotingServer:
    """Accepts connections and routes requests to handlers registered by request code."""

    def __init__(self, host: str, port: int, tls: TlsSettings | None = None,
                 limits: ConnectionLimits | None = None, front: FrontFactory | None = None) -> None:
        self.host = host
        self.port = port
        #: serve a plaintext port with this front instead of asyncio's server (a TLS port stays on
        #: asyncio)
        self.front_factory = front
        self._front: Front | None = None
        #: connections with answers to write (:meth:`Connection.answer_all`), and whether a
        #: :meth:`flush_answers` is scheduled
        self._answers_due: list[Connection] = []
        self._flush_scheduled = False
        #: the idle timeout and the connection cap, read at each use
        self.limits: ConnectionLimits = limits if limits is not None else DefaultLimits()
        #: TLS on this port (tls_system_config.py); None or mode disabled: plain connections only
        self.tls = tls
        #: Run before each request's handler with the client's host:port: None lets it through,
        #: a response refuses it (RocketMQ's doBeforeRpcHooks; the ACL check sets it).
        self.before_request: Callable[[RemotingCommand, str], RemotingCommand | None] | None = None
        #: Connections taken by the TLS-aware listener: with TLS, plain, refused (enforcing).
        self.tls_connections = 0
        self.plain_connections = 0
        self.refused_plain_connections = 0
        self._listener: TlsSniffingListener | None = None
        self.handlers: dict[int, Handler] = {}
        #: request codes whose consecutive requests on a connection are handled together (register_group)
        self.group_handlers: dict[int, GroupHandler] = {}
        #: Serves whole frames at the head of a read before they are decoded into commands (the
        #: plain sends' and the pulls' native paths; see the module's docstring).
        self.serve_frames: ServeFrames | None = None
        self.connections: set[Connection] = set()
        self.on_disconnect: list[Callable[[Connection], None]] = []
        self._malformed = SparseLog()
        #: connections closed by the cap as they arrived, and idle connections closed
        self._refused = SparseLog()
        self._idle_closed = SparseLog()
        self._server: asyncio.Server | None = None
        self._idle_sweep: asyncio.Task[None] | None = None
        #: set by :meth:`go_away`: every request read is answered SERVICE_NOT_AVAILABLE
        self.going_away = False

    @property
    def malformed_requests(self) -> int:
        """Requests answered as malformed since start, logged or not."""
        return self._malformed.count

    @property
    def refused_connections(self) -> int:
        """Connections closed as they arrived because ``remotingMaxConnections`` were open."""
        return self._refused.count

    @property
    def idle_closed_connections(self) -> int:
        """Connections closed after ``serverChannelMaxIdleTimeSeconds`` without a read or a write."""
        return self._idle_closed.count

    def admit(self, peer: str, waiting: int = 0) -> bool:
        """Whether a connection from ``peer`` fits under the cap, with ``waiting`` more accepted and
        not served yet; counts (and sparsely logs) a refusal."""
        limit = self.limits.remoting_max_connections
        if len(self.connections) + waiting < limit:
            return True
        self._refused.event(logging.WARNING, "closing a connection from %s: remotingMaxConnections (%d) are open",
                            peer, limit)
        return False

    @property
    def tls_certificate_reloads(self) -> int:
        """How often the TLS certificate files were reloaded after a change."""
        return self._listener.contexts.reloads if self._listener is not None else 0

    @property
    def tls_certificate_reload_failures(self) -> int:
        """How often changed TLS certificate files did not load (the previous certificate stayed)."""
        return self._listener.contexts.reload_failures if self._listener is not None else 0

    def report_malformed(self, conn: Connection, request: RemotingCommand, error: str) -> None:
        """Count a malformed request; log one line about it unless one was logged recently."""
        self._malformed.event(logging.WARNING, "malformed request code %d from %s: %s", request.code, conn.peer, error)

    def close_idle(self, now: float) -> None:
        """Close the connections idle for ``serverChannelMaxIdleTimeSeconds`` (none when it is <= 0)."""
        max_idle_s = self.limits.server_channel_max_idle_time_seconds
        if max_idle_s <= 0:
            return
        # one closing already (a graceful close waits for its writes) is not closed, nor counted, again
        for conn in [c for c in self.connections if c.active and c.idle(now, max_idle_s)]:
            self._idle_closed.event(logging.INFO, "closing %s: idle for %d s (serverChannelMaxIdleTimeSeconds)",
                                    conn.peer, max_idle_s)
            conn.close()

    async def _sweep_idle(self) -> None:
        while True:
            max_idle_s = self.limits.server_channel_max_idle_time_seconds
            await asyncio.sleep(min(IDLE_SWEEP_MAX_INTERVAL_S, max_idle_s / 4) if max_idle_s > 0
                                else IDLE_SWEEP_MAX_INTERVAL_S)
            self.close_idle(time.monotonic())

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    def register_group(self, codes: Iterable[int], handler: GroupHandler) -> None:
        """Have ``handler`` take the requests of ``codes`` that a connection has read one after the
        other, together (a lone one still goes to its code's handler). Why: the sends of one
        read share one taking of the CommitLog's lock, one segment lookup and one wait for the
        slave or the flush."""
        for code in codes:
            self.group_handlers[int(code)] = handler

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._idle_sweep = loop.create_task(self._sweep_idle(), name="remoting-idle-sweep")
        if self.tls is not None and self.tls.enabled:
            self._listener = TlsSniffingListener(self, ReloadingSslContext(self.tls))
            self.port = await self._listener.start()
            return
        if self.front_factory is not None:
            self._front = self.front_factory(self)
            if self._front is not None:
                self.port = self._front.port
                self._front.start()
                return
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def go_away(self) -> None:
        """The broker is stopping: take no new connection (a client's connect fails at once; the
        native front, which listens until :meth:`stop`, closes a new one unserved at once), and
        answer every request read from now on SERVICE_NOT_AVAILABLE at once, without its handler,
        on connections that stay open until :meth:`stop` closes them.

        Why: a Java 4.x client whose connection ends with a request unanswered fails that request
        only at its send timeout (3 s) when the end is a FIN (only a reset fails its pending
        requests at once), while SERVICE_NOT_AVAILABLE is in the 4.x and 5.x producers'
        retryResponseCodes: the send is retried at once. Closing a connection per answer would
        race each client's next request (its immediate retry) against the FIN; keeping them open
        leaves a single close, at the end of the stop. (RocketMQ 5.3 answers GO_AWAY, to 5.3.2+
        clients only, and serves the older ones as usual until it closes.)"""
        if self.going_away:
            return
        self.going_away = True
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            await self._listener.stop()

    def answers_due(self, conn: Connection) -> None:
        """``conn`` has futures' answers to write (:meth:`Connection._gather_answer`): flushed with the others
        due by :meth:`flush_answers`, scheduled for the next pass unless someone flushes first."""
        if not conn._flush_due:
            conn._flush_due = True
            self._answers_due.append(conn)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_answers_later)

    def _flush_answers_later(self) -> None:
        self._flush_scheduled = False
        self.flush_answers()

    def flush_answers(self) -> None:
        """Write every future's answer gathered since the last flush, one write per connection, and
        hand them to the front now rather than at the end of the pass."""
        due, self._answers_due = self._answers_due, []
        for conn in due:
            conn._flush_due = False
            conn._pump()  # writes what is gathered, and takes backlogged requests as the answers free room
        if due and self._front is not None:
            self._front.hand_over()

    async def stop(self, grace_s: float = 10.0) -> None:
        """:meth:`go_away`, let in-flight requests finish (up to ``grace_s``; those still running are
        answered SERVICE_NOT_AVAILABLE), then close."""
        if self._idle_sweep is not None:
            self._idle_sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_sweep
        await self.go_away()
        pending = [t for c in self.connections for t in c.tasks]
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            for task in still:
                task.cancel()
            if still:  # each writes its answer as the cancellation reaches it (Connection._finish)
                await asyncio.wait(still)
        for conn in list(self.connections):
            conn.close()
        if self._front is not None:
            await self._front.stop()
        if self._server is not None:
            await self._server.wait_closed()  # after the connections: 3.12+ waits for them


#: The first byte of a TLS handshake record (RocketMQ's HandshakeHandler.HANDSHAKE_MAGIC_CODE).
TLS_HANDSHAKE_BYTE: Final = 0x16
#: How long an accepted connection may stay silent before its first byte decides TLS or plain.
SNIFF_TIMEOUT_S: Final = 120.0


class TlsSniffingListener:
    """Accepts connections for a TLS port: the first byte (peeked, not consumed) picks TLS or plain.

    RocketMQ's HandshakeHandler: 0x16 starts a TLS handshake with the server's SSLContext; any other
    first byte is a plain connection in permissive mode and is closed in enforcing mode. The
    accepted socket then becomes an ordinary :class:`Connection` through
    ``loop.connect_accepted_socket``, which runs the handshake when TLS was chosen.
    """

    def __init__(self, server: RemotingServer, contexts: ReloadingSslContext) -> None:
        self.server = server
        self.contexts = contexts
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._sock = sock = socket.create_server((self.server.host or "0.0.0.0", self.server.port), backlog=1024)
        sock.setblocking(False)
        self._accepting = asyncio.get_running_loop().create_task(self._accept_loop(sock), name="tls-accept")
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        for task in (self._accepting, *self._pending):
            if task is not None:
                task.cancel()
        for task in (self._accepting, *self._pending):
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._sock is not None:
            self._sock.close()

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(sock)
            except OSError as exc:  # e.g. EMFILE: keep serving the connections we have
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if not self.server.admit(_peer_text(conn), len(self._pending)):
                conn.close()
                continue
            task = loop.create_task(self._take(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _take(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            first = await asyncio.wait_for(_peek_first_byte(loop, conn), SNIFF_TIMEOUT_S)
            if not first:
                conn.close()
                return
            server = self.server
            if first[0] == TLS_HANDSHAKE_BYTE:
                await loop.connect_accepted_socket(lambda: Connection(server), conn, ssl=self.contexts.current())
                server.tls_connections += 1
            elif server.tls is not None and server.tls.mode is TlsMode.ENFORCING:
                server.refused_plain_connections += 1
                log.warning("closing a plain connection from %s: tls.server.mode is enforcing",
                            _peer_text(conn))
                conn.close()
            else:
                await loop.connect_accepted_socket(lambda: Connection(server), conn)
                server.plain_connections += 1
        except (OSError, ssl.SSLError, TimeoutError) as exc:  # a failed handshake ends that connection only
            log.info("connection from %s dropped before serving: %s", _peer_text(conn), exc)
            conn.close()


async def _peek_first_byte(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    """The connection's first byte, left in the socket for whoever reads next ("" at EOF)."""
    conn.setblocking(False)
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    return conn.recv(1, socket.MSG_PEEK)


def _peer_text(conn: socket.socket) -> str:
    try:
        peer = conn.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
