"""RemotingServer: RocketMQ's remoting protocol over asyncio, one Protocol per connection.

Bytes are parsed in ``data_received`` by the I/O-free :class:`remoting.command.FrameDecoder`;
each request becomes a tracked task that runs its handler and writes the response with the
request's opaque. A malformed frame closes that connection only. Reading pauses while a
connection has too many requests in flight (flow control), and shutdown closes the listener,
lets in-flight requests finish within a grace period, then cancels the rest.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import RPC_ONEWAY, FrameDecoder, ProtocolError, RemotingCommand

log = logging.getLogger(__name__)

MAX_IN_FLIGHT_PER_CONNECTION = 256


class RequestError(Exception):
    """A request the handler refuses: answered with ``code`` and ``remark``, connection kept."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


Handler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass(eq=False)
class Connection(asyncio.Protocol):
    """One client connection: frames in, responses (and broker-initiated requests) out."""

    server: RemotingServer
    transport: asyncio.Transport | None = None
    peer: str = ""
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    paused: bool = False
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    _next_opaque: int = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.closed.set()
        for listener in self.server.on_disconnect:
            listener(self)

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.decoder.feed(data)
        except ProtocolError as exc:
            log.warning("closing %s: %s", self.peer, exc)
            self.close()
            return
        for cmd in commands:
            if cmd.is_response:
                continue  # answers to our one-way notifications: nothing waits for them
            task = asyncio.get_running_loop().create_task(self._serve(cmd))
            self.tasks.add(task)
            task.add_done_callback(self._task_done)
        if len(self.tasks) >= MAX_IN_FLIGHT_PER_CONNECTION and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if self.paused and len(self.tasks) < MAX_IN_FLIGHT_PER_CONNECTION // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    async def _serve(self, request: RemotingCommand) -> None:
        handler = self.server.handlers.get(request.code)
        response: RemotingCommand | None
        if handler is None:
            response = request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                        f"request code {request.code} is not supported")
        else:
            try:
                response = await handler(self, request)
            except RequestError as exc:
                response = request.response(exc.code, exc.remark)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a handler bug answers SYSTEM_ERROR; the broker stays up
                log.exception("request code %d from %s failed", request.code, self.peer)
                response = request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is not None and not request.is_oneway:
            self.send(response)

    def send(self, cmd: RemotingCommand) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(cmd.encode())

    def notify(self, code: int, ext_fields: dict[str, str]) -> None:
        """Send a one-way request to the client (e.g. NOTIFY_CONSUMER_IDS_CHANGED)."""
        self._next_opaque += 1
        self.send(RemotingCommand(code=code, opaque=self._next_opaque, flag=RPC_ONEWAY, ext_fields=ext_fields))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class RemotingServer:
    """Accepts connections and routes requests to handlers registered by request code."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.handlers: dict[int, Handler] = {}
        self.connections: set[Connection] = set()
        self.on_disconnect: list[Callable[[Connection], None]] = []
        self._server: asyncio.Server | None = None

    def register(self, code: int, handler: Handler) -> None:
        self.handlers[int(code)] = handler

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop accepting, let in-flight requests finish (up to ``grace_s``), then close."""
        if self._server is not None:
            self._server.close()
        pending = [t for c in self.connections for t in c.tasks]
        if pending:
            _, still = await asyncio.wait(pending, timeout=grace_s)
            for task in still:
                task.cancel()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()  # after the connections: 3.12+ waits for them
