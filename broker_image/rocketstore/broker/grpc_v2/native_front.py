"""NativeFront: the gRPC port served by the Rust HTTP/2 front end (``GrpcFront`` in native/), the
calls run by the same per-call logic as grpcio's (:func:`~rocketstore.broker.grpc_v2.call_logic.methods`).

grpcio spends ~300 µs of CPU per call handing it between its threads and the event loop. The
front end speaks HTTP/2 and gRPC framing on a thread of its own and hands calls over in batches:
the loop watches one descriptor and takes every waiting event in one call. The answers of one
loop pass go back in one call too (:meth:`NativeFront._answer` queues them; the end of the pass,
or a callback scheduled with the first answer given outside one, hands them over), so the front's
thread wakes once for the pass, not once per answer. Protobuf stays in Python.

Each call gets a :class:`CallContext`, the part of grpc.aio's ServicerContext the servicer uses.
A unary call whose behaviour answers inline is answered in the pass that took it; one that waits,
and every streaming call, runs as a task, which a call the client ends (cancel, reset, deadline,
lost connection) cancels. TLS is not served here: a TLS port stays on grpcio.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any, NamedTuple, NoReturn

import grpc

from rocketstore.broker.grpc_v2.call_logic import SERVICE_NAME, Method
from rocketstore.broker.grpc_v2.transport_limits import TransportLimits

log = logging.getLogger(__name__)

_CALL, _MESSAGE, _HALF_CLOSE, _CANCEL = 0, 1, 2, 3


class CallAborted(Exception):
    """Raised by :meth:`CallContext.abort`: the call ends with the status it set."""


class CallContext:
    """What the servicer and the per-call logic ask of a call: its peer, metadata, deadline, and abort."""

    __slots__ = ("_code", "_deadline", "_details", "_metadata", "_peer")

    def __init__(self, peer: str, metadata: list[tuple[str, Any]], deadline: float | None) -> None:
        self._peer = peer
        self._metadata = tuple(metadata)
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def peer(self) -> str:
        """``ipv4:host:port`` / ``ipv6:[host]:port``, as grpc names a peer."""
        return self._peer

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        """Seconds until the client's deadline, None without one."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        self._code = code
        self._details = details
        raise CallAborted(details)

    def code(self) -> grpc.StatusCode | None:
        return self._code


class FrontStats(NamedTuple):
    """What the front's limits did so far (``GrpcFront.stats``)."""

    open_connections: int
    refused_connections: int
    idle_closed: int
    reset_flood_closed: int
    request_budget_refused: int
    slow_reader_reset: int


class NativeFront:
    """Serves ``methods`` on ``host:port`` through ``front_class`` (the extension's GrpcFront), within ``limits``."""

    def __init__(self, front_class: Any, methods: list[Method], host: str, port: int,
                 limits: TransportLimits) -> None:
        self._methods = {f"/{SERVICE_NAME}/{m.name}": m for m in methods}
        streaming = [path for path, m in self._methods.items() if m.client_streaming]
        self._front = front_class(host, port, max_message_bytes=limits.max_message_bytes, client_streaming=streaming,
                                  max_request_bytes_per_connection=limits.max_request_bytes_per_connection,
                                  max_response_bytes_per_connection=limits.max_response_bytes_per_connection,
                                  max_concurrent_streams=limits.max_concurrent_streams,
                                  max_connections=limits.max_connections, idle_timeout_ms=limits.idle_timeout_ms)
        self.port: int = self._front.port
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._ids: dict[asyncio.Task[None], int] = {}
        self._inbound: dict[int, asyncio.Queue[bytes | None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: answers not handed to the front yet: (call id, message or None, status or None, details)
        self._outbox: list[tuple[int, bytes | None, int | None, str]] = []
        #: inside _drain, which hands the outbox over when it ends
        self._draining = False

    def stats(self) -> FrontStats:
        return FrontStats(*self._front.stats())

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._front.fileno(), self._drain)

    async def stop(self, grace_s: float) -> None:
        """Calls in flight get ``grace_s`` to finish; those still running then end UNAVAILABLE (a
        status clients retry on). The front then sends each connection a GOAWAY, writes what it
        was given and closes them."""
        if self._loop is not None:
            self._loop.remove_reader(self._front.fileno())
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks.values()), timeout=grace_s)
            for task in pending:
                task.cancel()
                self._answer(self._ids[task], None, grpc.StatusCode.UNAVAILABLE.value[0], "the broker is stopping")
        self._hand_over()
        await asyncio.to_thread(self._front.close)

    def _answer(self, call_id: int, message: bytes | None, status: int | None, details: str = "") -> None:
        """Queue an answer of call ``call_id``: ``message`` sent on it (when given), then the call
        ended with ``status`` (when given)."""
        if not self._outbox and not self._draining:
            self._loop_or_fail().call_soon(self._hand_over)
        self._outbox.append((call_id, message, status, details))

    def _hand_over(self) -> None:
        if self._outbox:
            answers, self._outbox = self._outbox, []
            self._front.answer(answers)

    def _loop_or_fail(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "NativeFront.start() first"
        return self._loop

    def _drain(self) -> None:
        loop = self._loop_or_fail()
        self._draining = True
        try:
            for event in self._front.take():
                kind, call_id = event[0], event[1]
                if kind == _CALL:
                    _, _, path, metadata, peer, timeout, message = event
                    deadline = None if timeout is None else loop.time() + timeout
                    context = CallContext(peer, metadata, deadline)
                    method = self._methods.get(path)
                    if method is None:
                        self._answer(call_id, None, grpc.StatusCode.UNIMPLEMENTED.value[0], f"Method not found: {path}")
                        continue
                    if method.client_streaming:
                        inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
                        self._inbound[call_id] = inbound
                        self._spawn(call_id, self._bidi(call_id, method, inbound, context))
                    elif method.server_streaming:
                        self._spawn(call_id, self._server_stream(call_id, method, message, context))
                    else:
                        self._start_unary(call_id, method, message, context)
                elif kind == _MESSAGE:
                    queue = self._inbound.get(call_id)
                    if queue is not None:
                        queue.put_nowait(event[2])
                elif kind == _HALF_CLOSE:
                    queue = self._inbound.get(call_id)
                    if queue is not None:
                        queue.put_nowait(None)
                elif kind == _CANCEL:
                    ended = self._tasks.get(call_id)
                    if ended is not None:
                        ended.cancel()
        finally:
            self._draining = False
            self._hand_over()  # the answers given in this pass

    def _spawn(self, call_id: int, coro: Coroutine[Any, Any, None]) -> None:
        task = self._loop_or_fail().create_task(coro)
        self._tasks[call_id] = task
        self._ids[task] = call_id
        task.add_done_callback(self._forget)

    def _start_unary(self, call_id: int, method: Method, raw: bytes, context: CallContext) -> None:
        """Answer the call now when its behaviour answers inline; a task only for one that waits."""
        try:
            answer = method.behaviour(raw, context)
        except Exception as exc:
            self._failed(call_id, context, exc)
            return
        if asyncio.iscoroutine(answer):
            self._spawn(call_id, self._unary(call_id, method, answer, context))
        else:
            self._answer(call_id, method.serialize(answer), 0)

    def _forget(self, task: asyncio.Task[None]) -> None:
        call_id = self._ids.pop(task)
        self._tasks.pop(call_id, None)
        self._inbound.pop(call_id, None)

    def _failed(self, call_id: int, context: CallContext, exc: Exception) -> None:
        """Ends a call whose behaviour raised: its abort status, else UNKNOWN as grpcio answers."""
        code = context.code()
        if isinstance(exc, CallAborted) and code is not None:
            self._answer(call_id, None, code.value[0], context._details)
        else:
            log.error("gRPC call %s failed", call_id, exc_info=exc)
            self._answer(call_id, None, grpc.StatusCode.UNKNOWN.value[0], f"Unexpected {type(exc)}: {exc}")

    async def _unary(self, call_id: int, method: Method, answer: Coroutine[Any, Any, Any],
                     context: CallContext) -> None:
        try:
            response = await answer
        except asyncio.CancelledError:
            return  # the client ended the call: nobody is listening
        except Exception as exc:
            self._failed(call_id, context, exc)
            return
        self._answer(call_id, method.serialize(response), 0)

    async def _server_stream(self, call_id: int, method: Method, raw: bytes, context: CallContext) -> None:
        await self._stream(call_id, method, method.behaviour(raw, context), context)

    async def _bidi(self, call_id: int, method: Method, inbound: asyncio.Queue[bytes | None],
                    context: CallContext) -> None:
        async def requests() -> AsyncIterator[bytes]:
            while (raw := await inbound.get()) is not None:
                yield raw

        await self._stream(call_id, method, method.behaviour(requests(), context), context)

    async def _stream(self, call_id: int, method: Method, responses: AsyncIterator[Any],
                      context: CallContext) -> None:
        """Send each response of a streaming call as it comes, then end the call OK."""
        try:
            async for response in responses:
                self._answer(call_id, method.serialize(response), None)
        except asyncio.CancelledError:
            return
        except Exception as exc:
            self._failed(call_id, context, exc)
            return
        self._answer(call_id, None, 0)
