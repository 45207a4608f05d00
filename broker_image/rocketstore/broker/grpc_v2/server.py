"""GrpcServer: the gRPC v2 endpoint inside the broker process, on the broker's event loop.

grpc.aio runs its server on the running asyncio loop (uvloop included: its completion queue is
polled from a thread of grpc's own and results come back as loop callbacks), so the servicer's
coroutines share the loop with the remoting server and call the broker's objects directly, with
no thread boundary.

The methods are registered by :func:`method_handlers` rather than by the generated
``add_MessagingServiceServicer_to_server``: requests arrive as bytes and are parsed inside the call,
so one that is not a valid protobuf is answered INVALID_ARGUMENT naming the message type (grpc's
own deserializer failure surfaces as UNKNOWN "Unexpected DecodeError"). Methods the servicer
does not implement are not registered: grpc answers them UNIMPLEMENTED.

With ``tls.server.mode`` enforcing or permissive the port serves TLS (server_credentials.py).

With ``aclEnable=true`` every parsed request (each command of a Telemetry stream too) goes
through the plain ACL before its method sees it (:class:`~rocketstore.broker.grpc_v2.access_check.AccessCheck`:
``MQv2-HMAC-SHA1`` signatures, the accounts and permissions of the remoting port).

The pop log is opened (replayed, compacted, held against the store) in a worker thread before
the port opens, fsynced every :data:`POP_LOG_SYNC_INTERVAL_S` and closed after the server stopped.
Auto renew (auto_renew.py) runs its pass on the loop every
:data:`~rocketstore.broker.grpc_v2.auto_renew.RENEW_PERIOD_S`, or twice within ``renewAheadTimeMillis``
when that is shorter (a delivery must not end between two passes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.access_check import AccessCheck
from rocketstore.broker.grpc_v2.auto_renew import RENEW_PERIOD_S, AutoRenew, RenewTimes
from rocketstore.broker.grpc_v2.call_metrics import CallMetrics
from rocketstore.broker.grpc_v2.pop_log import PopLog
from rocketstore.broker.grpc_v2.pop_service import PopService
from rocketstore.broker.grpc_v2.server_credentials import ReloadingCredentials
from rocketstore.broker.grpc_v2.service import MessagingService, dead_letter_forwarder, endpoints_of
from rocketstore.broker.tls_system_config import TlsMode, broker_tls_settings
from rocketstore.common.clock import now_ms

log = logging.getLogger(__name__)

#: how often appended pop-log records are fsynced (what a power loss may take back: see pop_log.py)
POP_LOG_SYNC_INTERVAL_S: Final = 1.0
#: the pop log's folder under the store's root directory
POP_DIR: Final = "pop"
#: largest request accepted (RocketMQ proxy's grpcMaxInboundMessageSize default, 130 MiB)
MAX_INBOUND_MESSAGE_BYTES: Final = 130 * 1024 * 1024


class GrpcServer:
    """Serves apache.rocketmq.v2.MessagingService on ``host:port`` for ``broker``."""

    def __init__(self, broker: BrokerContext, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.pop = PopService(broker, PopLog(Path(broker.store_config.root_dir()) / POP_DIR),
                              dead_letter_forwarder(broker))
        cfg = broker.broker_config
        self.renew = AutoRenew(self.pop, RenewTimes(ahead_ms=cfg.renew_ahead_time_millis,
                                                    slice_ms=cfg.renew_slice_time_millis,
                                                    max_ms=cfg.renew_max_time_millis))
        self._server: grpc.aio.Server | None = None
        self._service: MessagingService | None = None
        self.metrics = CallMetrics()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Replay the pop log, then listen; OSError when the port cannot be bound."""
        await asyncio.to_thread(self.pop.open)
        self.pop.attach()
        # grpc sets SO_REUSEPORT by default: a second broker on the same port would then share it
        # silently (each taking some of the connections) instead of failing to start
        # and a request may be as large as RocketMQ's proxy accepts (grpc's default of 4 MiB would
        # refuse a SendMessage carrying several messages)
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                          ("grpc.max_receive_message_length", MAX_INBOUND_MESSAGE_BYTES)])
        service = self._service = MessagingService(self.broker, self.pop, self.renew,
                                                   lambda: endpoints_of(self.broker.store_host.host, self.port))
        validator = self.broker.access_validator  # set at start when aclEnable is
        check = None if validator is None else AccessCheck(validator)
        server.add_generic_rpc_handlers((method_handlers(service, self.metrics, check),))
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        tls = broker_tls_settings(self.broker.broker_config)
        try:
            if tls.enabled:
                if tls.mode is TlsMode.PERMISSIVE:
                    log.warning("tls.server.mode=permissive: the gRPC port serves TLS only (grpc cannot take "
                                "plaintext and TLS on one port); plaintext 5.x clients are refused")
                bound = server.add_secure_port(address, ReloadingCredentials(tls).credentials)
            else:
                bound = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises, rather than returning 0, when the bind fails
            raise OSError(f"grpcListenPort: cannot listen on {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"grpcListenPort: cannot listen on {address}")
        self.port = bound
        await server.start()
        self._server = server
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sync_loop(), name="pop-log-sync"),
                       loop.create_task(self._renew_loop(), name="pop-auto-renew")]
        self.broker.add_gauge("rocketstore_pop_messages_in_flight", "Messages received over gRPC and not acked yet",
                              lambda: self.pop.log.state.in_flight_count())
        self.broker.add_counter("rocketstore_pop_redeliveries", "Messages delivered again after their invisible "
                                "time passed", lambda: self.pop.redeliveries)
        self.broker.add_counter("rocketstore_pop_dead_lettered", "Messages moved to their group's dead-letter "
                                "queue after their last delivery attempt, or at a client's request",
                                lambda: self.pop.dead_lettered)
        self.broker.add_metrics(self.metrics.collect)
        self.broker.add_counter("rocketstore_pop_auto_renewals", "Invisible times the broker extended for a "
                                "client consuming a message it received with auto_renew (push consumers)",
                                lambda: self.renew.renewals)

    async def stop(self, grace_s: float) -> None:
        """End Telemetry streams, release waiting receives, stop serving (other calls in flight get
        ``grace_s``), close the pop log."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._service is not None:
            self._service.close()
        if self._server is not None:
            self.pop.close_waiters()
            await self._server.stop(grace_s)
        await asyncio.to_thread(self.pop.close)

    async def _renew_loop(self) -> None:
        period_s = max(min(RENEW_PERIOD_S, self.renew.times.ahead_ms / 2000), 0.1)
        while True:
            await asyncio.sleep(period_s)
            try:
                self.renew.renew_due(now_ms())
            except Exception:  # one bad pass must not end renewing for good
                log.exception("auto renew pass failed; retrying at the next period")

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(POP_LOG_SYNC_INTERVAL_S)
            try:
                await asyncio.to_thread(self.pop.log.sync)
            except OSError:
                log.exception("fsync of the pop log failed; retrying at the next interval")


SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"
#: awaited with each parsed request before its method runs; aborts the call to refuse it
Check = Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]]


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


def _outcome(response: Any) -> str:
    """The v2 status code an answer carries, by name."""
    code = int(response.status.code)
    return pb.Code.Name(code) if code in pb.Code.values() else str(code)


def _failure(context: grpc.aio.ServicerContext, exc: BaseException) -> str:
    """The gRPC status code of a call that ended without an answer (aborted, cancelled, failed)."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "UNKNOWN"


def _unary(name: str, impl: Callable[..., Any], request_class: Any, check: Check | None,
           metrics: CallMetrics) -> Callable[..., Any]:
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            response = await impl(await _accepted(request_class, raw, context, check), context)
        except BaseException as exc:
            metrics.record(name, _failure(context, exc), time.perf_counter() - started)
            raise
        metrics.record(name, _outcome(response), time.perf_counter() - started)
        return response
    return call


def _server_stream(name: str, impl: Callable[..., Any], request_class: Any, check: Check | None,
                   metrics: CallMetrics) -> Callable[..., Any]:
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = time.perf_counter()
        outcome = ""
        try:
            async for response in impl(await _accepted(request_class, raw, context, check), context):
                if not outcome and response.HasField("status"):
                    outcome = _outcome(response)
                yield response
        except BaseException as exc:
            metrics.record(name, outcome or _failure(context, exc), time.perf_counter() - started)
            raise
        metrics.record(name, outcome or "OK", time.perf_counter() - started)
    return call


def _bidi_stream(name: str, impl: Callable[..., Any], request_class: Any, check: Check | None,
                 metrics: CallMetrics) -> Callable[..., Any]:
    async def call(raw_iterator: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        async def requests() -> AsyncIterator[Any]:
            async for raw in raw_iterator:
                yield await _accepted(request_class, raw, context, check)

        try:
            async for response in impl(requests(), context):
                yield response
        except BaseException as exc:
            metrics.record(name, _failure(context, exc), None)
            raise
        metrics.record(name, "OK", None)
    return call


def method_handlers(service: pb_grpc.MessagingServiceServicer, metrics: CallMetrics,
                    check: Check | None = None) -> grpc.GenericRpcHandler:
    """The handlers of every MessagingService method ``service`` implements (see the module docstring),
    each request passed to ``check`` first when one is given, each call counted in ``metrics``."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in pb.DESCRIPTOR.services_by_name["MessagingService"].methods:
        impl = getattr(type(service), method.name)
        if impl is getattr(pb_grpc.MessagingServiceServicer, method.name):
            continue  # not implemented: left to grpc's UNIMPLEMENTED
        bound = getattr(service, method.name)
        request_class = getattr(pb, method.input_type.name)
        serialize = getattr(pb, method.output_type.name).SerializeToString
        if method.client_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                _bidi_stream(method.name, bound, request_class, check, metrics), response_serializer=serialize)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _server_stream(method.name, bound, request_class, check, metrics), response_serializer=serialize)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(method.name, bound, request_class, check, metrics), response_serializer=serialize)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
