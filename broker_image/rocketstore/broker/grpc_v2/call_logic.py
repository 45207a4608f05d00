"""The per-call logic both transports of the gRPC port run (grpcio's, server.py, and the native
front end's, native_front.py): the request parsed inside the call, so an undecodable one is
INVALID_ARGUMENT naming its type (grpc's own deserializer would fail it UNKNOWN), the access check
(the plain ACL's, access_check.py, or RocketMQ 5.3's auth, auth_check.py), and the call counted in
/metrics. A check refuses a request by aborting the call (the plain ACL: a gRPC status) or by
raising :class:`Refused` (5.3's auth: the method's response carrying a v2 status, as Apache's proxy
answers; a stream ends after it). A call's context is grpc.aio's ServicerContext or
native_front.CallContext: both offer ``abort``, ``code``, ``peer``, ``invocation_metadata``,
``time_remaining``.

A unary method the servicer implements with a plain ``def`` answers inline: it returns its
response, or a coroutine when it has to wait (as the remoting handlers do), and so does its
behaviour here. The native front answers such a call in the pass that took it, without a task
per call; most sends (ASYNC_FLUSH) and every ack do not wait. With an ACL check the behaviour
always returns a coroutine (the check may abort, which awaits).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Final, NamedTuple

import grpc
from google.protobuf.message import DecodeError

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.call_metrics import CallMetrics

SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"
#: awaited with each parsed request before its method runs; aborts the call or raises Refused to refuse it
Check = Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]


class Refused(Exception):
    """Raised by a check: the call is answered with its method's response carrying ``status``."""

    def __init__(self, status: pb.Status) -> None:
        super().__init__(status.message)
        self.status = status


async def _accepted(request_class: Any, raw: bytes, context: grpc.aio.ServicerContext, check: Check | None) -> Any:
    """``raw`` parsed as ``request_class`` inside the call (grpc's own deserializer would fail it
    UNKNOWN), so an undecodable request is INVALID_ARGUMENT naming its type; then ``check``ed."""
    try:
        request = request_class.FromString(raw)
    except DecodeError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"the request is not a valid {request_class.DESCRIPTOR.full_name}: {exc}")
    if check is not None:
        await check(request, context)
    return request


#: v2 status codes by number (looked up per call: protobuf's enum wrapper lists its values anew each time)
_CODE_NAMES: Final = {number: name for name, number in pb.Code.items()}


def code_name(code: int) -> str:
    """A v2 status code's name (its number when the protos name none)."""
    return _CODE_NAMES.get(code) or str(code)


def _outcome(response: Any) -> str:
    """The v2 status code an answer carries, by name."""
    return code_name(response.status.code)


def _failure(context: grpc.aio.ServicerContext, exc: BaseException) -> str:
    """The gRPC status code of a call that ended without an answer (aborted, cancelled, failed)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "UNKNOWN"


#: a unary behaviour's answer: the response, or a coroutine when the call waits
Answer = Any


def _unary(name: str, impl: Callable[..., Any], request_class: Any, response_class: Any, check: Check | None,
           metrics: CallMetrics) -> Callable[..., Answer]:
    inline = not inspect.iscoroutinefunction(impl)

    async def accepted_then_answered(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = await _accepted(request_class, raw, context, check)
        except Refused as refused:
            return response_class(status=refused.status)
        answer = impl(request, context)
        return await answer if asyncio.iscoroutine(answer) else answer

    async def recorded(answer: Coroutine[Any, Any, Any], context: grpc.aio.ServicerContext, started: float) -> Any:
        try:
            response = await answer
        except BaseException as exc:
            metrics.record(name, _failure(context, exc), time.perf_counter() - started)
            raise
        metrics.record(name, _outcome(response), time.perf_counter() - started)
        return response

    def call(raw: bytes, context: grpc.aio.ServicerContext) -> Answer:
        started = time.perf_counter()
        if check is not None or not inline:
            return recorded(accepted_then_answered(raw, context), context, started)
        try:
            request = request_class.FromString(raw)
        except DecodeError:  # refused by _accepted, as for a checked call
            return recorded(accepted_then_answered(raw, context), context, started)
        try:
            answer = impl(request, context)
        except BaseException as exc:
            metrics.record(name, _failure(context, exc), time.perf_counter() - started)
            raise
        if asyncio.iscoroutine(answer):
            return recorded(answer, context, started)
        metrics.record(name, _outcome(answer), time.perf_counter() - started)
        return answer
    return call


def _server_stream(name: str, impl: Callable[..., Any], request_class: Any, response_class: Any,
                   check: Check | None, metrics: CallMetrics) -> Callable[..., Any]:
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = time.perf_counter()
        outcome = ""
        try:
            try:
                request = await _accepted(request_class, raw, context, check)
            except Refused as refused:
                outcome = code_name(refused.status.code)
                yield response_class(status=refused.status)
            else:
                async for response in impl(request, context):
                    if not outcome and type(response) is not bytes and response.HasField("status"):
                        outcome = _outcome(response)
                    yield response
        except BaseException as exc:
            metrics.record(name, outcome or _failure(context, exc), time.perf_counter() - started)
            raise
        metrics.record(name, outcome or "OK", time.perf_counter() - started)
    return call


def _bidi_stream(name: str, impl: Callable[..., Any], request_class: Any, response_class: Any,
                 check: Check | None, metrics: CallMetrics) -> Callable[..., Any]:
    async def call(raw_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            async for raw in raw_iterator:
                yield await _accepted(request_class, raw, context, check)

        try:
            async for response in impl(requests(), context):
                yield response
        except Refused as refused:  # out of requests(), through the method, which ends the stream
            metrics.record(name, code_name(refused.status.code), None)
            yield response_class(status=refused.status)
            return
        except BaseException as exc:
            metrics.record(name, _failure(context, exc), None)
            raise
        metrics.record(name, "OK", None)
    return call


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def serialized(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)
    return serialized


class Method(NamedTuple):
    """One implemented method as both transports serve it: ``behaviour`` takes the raw request (an
    async iterator of raw requests for a client stream) and the call's context; a unary one
    returns an :data:`Answer`, a streaming one an async iterator of responses. A server-streaming
    response may come serialized already (ReceiveMessage's messages: see
    message_convert.received_message_response); ``serialize`` passes those on as they are."""

    name: str
    client_streaming: bool
    server_streaming: bool
    behaviour: Callable[..., Any]
    serialize: Callable[[Any], bytes]


def methods(service: pb_grpc.MessagingServiceServicer, metrics: CallMetrics,
            check: Check | None = None) -> list[Method]:
    """Every MessagingService method ``service`` implements (see the module docstring), each request
    passed to ``check`` first when one is given, each call counted in ``metrics``."""
    found: list[Method] = []
    for method in pb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        impl = getattr(type(service), method.name)
        if impl is getattr(pb_grpc.MessagingServiceServicer, method.name):
            continue  # not implemented: answered UNIMPLEMENTED
        bound = getattr(service, method.name)
        request_class = getattr(pb, method.input_type.name)
        response_class = getattr(pb, method.output_type.name)
        serialize = response_class.SerializeToString
        if method.server_streaming and not method.client_streaming:
            serialize = _passing_bytes(serialize)
        if method.client_streaming:
            behaviour = _bidi_stream(method.name, bound, request_class, response_class, check, metrics)
        elif method.server_streaming:
            behaviour = _server_stream(method.name, bound, request_class, response_class, check, metrics)
        else:
            behaviour = _unary(method.name, bound, request_class, response_class, check, metrics)
        found.append(Method(method.name, method.client_streaming, method.server_streaming, behaviour, serialize))
    return found
