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

A plaintext port is served by the native HTTP/2 front end instead (native_front.py, the Rust
``GrpcFront``) when the extension is loaded and ``grpcNativeFront`` is not false: grpcio's hand-overs
between its threads cost more CPU per call than the broker's work. Both run the same per-call
logic (call_logic.py).

With ``tls.server.mode`` enforcing or permissive the port serves TLS (server_credentials.py), on grpcio.

Either server gets the port's limits (transport_limits.py): the largest request tied to the store's
``maxMessageSize``, streams per connection, connections, the idle timeout.

With ``aclEnable=true`` every parsed request (each command of a Telemetry stream too) goes
through the plain ACL before its method sees it (:class:`~rocketstore.broker.grpc_v2.access_check.AccessCheck`:
``MQv2-HMAC-SHA1`` signatures, the accounts and permissions of the remoting port); with RocketMQ 5.3's
``authenticationEnabled`` / ``authorizationEnabled``, through the users and ACLs of the remoting port
(:class:`~rocketstore.broker.grpc_v2.auth_check.AuthCheck`: the same decision, Apache's proxy's answers).

The pop log is opened (replayed, compacted, held against the store) in a worker thread before
the port opens, fsynced every :data:`POP_LOG_SYNC_INTERVAL_S` and closed after the server stopped.
Auto renew (auto_renew.py) runs its pass on the loop every
:data:`~rocketstore.broker.grpc_v2.auto_renew.RENEW_PERIOD_S`, or twice within ``renewAheadTimeMillis``
when that is shorter (a delivery must not end between two passes).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import grpc

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.access_check import AccessCheck
from rocketstore.broker.grpc_v2.auth_check import AuthCheck
from rocketstore.broker.grpc_v2.auto_renew import RENEW_PERIOD_S, AutoRenew, RenewTimes
from rocketstore.broker.grpc_v2.call_logic import SERVICE_NAME, Answer, Check, methods
from rocketstore.broker.grpc_v2.call_metrics import CallMetrics
from rocketstore.broker.grpc_v2.native_front import NativeFront
from rocketstore.broker.grpc_v2.pop_log import PopLog
from rocketstore.broker.grpc_v2.pop_service import PopService
from rocketstore.broker.grpc_v2.server_credentials import ReloadingCredentials
from rocketstore.broker.grpc_v2.service import (
    MessagingService,
    advertised_grpc_port,
    dead_letter_forwarder,
    endpoints_of,
)
from rocketstore.broker.grpc_v2.transport_limits import TransportLimits, grpcio_options, transport_limits
from rocketstore.broker.tls_system_config import TlsMode, TlsSettings, broker_tls_settings
from rocketstore.common.clock import now_ms
from rocketstore.common.native import NATIVE

log = logging.getLogger(__name__)

#: how often appended pop-log records are fsynced (what a power loss may take back: see pop_log.py)
POP_LOG_SYNC_INTERVAL_S: Final = 1.0
#: the pop log's folder under the store's root directory
POP_DIR: Final = "pop"


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
        self.metrics = CallMetrics()
        self._server: grpc.aio.Server | None = None
        self._front: NativeFront | None = None
        self._service: MessagingService | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Replay the pop log, then listen; OSError when the port cannot be bound."""
        await asyncio.to_thread(self.pop.open)
        self.pop.attach()
        service = self._service = MessagingService(self.broker, self.pop, self.renew,
                                                   self._own_endpoint)
        check = access_check(self.broker)
        tls = broker_tls_settings(self.broker.broker_config)
        limits = transport_limits(self.broker.broker_config, self.broker.store_config)
        front_class = native_front_class(self.broker.broker_config.grpc_native_front, tls.enabled)
        if front_class is not None:
            try:
                self._front = front = NativeFront(front_class, methods(service, self.metrics, check), self.host,
                                                  self.port, limits)
            except OSError as exc:
                raise OSError(f"grpcListenPort: {exc}") from exc
            self.port = front.port
            front.start()
            log.info("gRPC port %s served by the native HTTP/2 front end", self.port)
            self._add_front_metrics(front)
        else:
            await self._start_grpcio(service, check, tls, limits)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._sync_loop(), name="pop-log-sync"),
                       loop.create_task(self._renew_loop(), name="pop-auto-renew")]
        self.broker.add_gauge("rocketstore_pop_messages_in_flight", "Messages received over gRPC and not acked yet",
                              lambda: self.pop.log.state.in_flight_count())
        self.broker.add_gauge("rocketstore_grpc_long_polling_calls", "gRPC receives and pulls waiting in long "
                              "polling for a message", lambda: self.pop.waiting_count)
        self.broker.add_counter("rocketstore_pop_redeliveries", "Messages delivered again after their invisible "
                                "time passed", lambda: self.pop.redeliveries)
        self.broker.add_counter("rocketstore_pop_dead_lettered", "Messages moved to their group's dead-letter "
                                "queue after their last delivery attempt, or at a client's request",
                                lambda: self.pop.dead_lettered)
        self.broker.add_counter("rocketstore_pop_auto_renewals", "Invisible times the broker extended for a "
                                "client consuming a message it received with auto_renew (push consumers)",
                                lambda: self.renew.renewals)
        self.broker.add_metrics(self.metrics.collect)

    def _own_endpoint(self) -> pb.Endpoints:
        """This broker's gRPC endpoint as clients reach it: brokerIP1 on the port it listens on,
        or its remoting port plus grpcAdvertisedPortOffset (a port its external Service publishes)."""
        host = self.broker.store_host
        return endpoints_of(host.host, advertised_grpc_port(host.port, self.port,
                                                            self.broker.broker_config.grpc_advertised_port_offset))

    def _add_front_metrics(self, front: NativeFront) -> None:
        """What the native front's limits refused or closed (grpcio does not count them)."""
        self.broker.add_gauge("rocketstore_grpc_connections", "Open gRPC connections",
                              lambda: front.stats().open_connections)
        for name, doc, field in (
            ("refused_connections", "gRPC connections closed as they arrived: grpcMaxConnections were open",
             "refused_connections"),
            ("idle_closed_connections", "gRPC connections closed after grpcClientIdleTimeMills without a call",
             "idle_closed"),
            ("reset_flood_closed_connections", "gRPC connections closed for resetting calls faster than allowed "
             "(GOAWAY ENHANCE_YOUR_CALM)", "reset_flood_closed"),
            ("request_budget_refused_calls", "gRPC calls refused RESOURCE_EXHAUSTED: their connection had too many "
             "request bytes in unfinished messages", "request_budget_refused"),
            ("slow_reader_reset_calls", "gRPC calls reset ENHANCE_YOUR_CALM: their connection had too many response "
             "bytes waiting for the client to read", "slow_reader_reset"),
        ):
            self.broker.add_counter(f"rocketstore_grpc_{name}", doc, functools.partial(_front_stat, front, field))

    async def _start_grpcio(self, service: MessagingService, check: Check | None, tls: TlsSettings,
                            limits: TransportLimits) -> None:
        # grpc sets SO_REUSEPORT by default: a second broker on the same port would then share it
        # silently (each taking some of the connections) instead of failing to start
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0), *grpcio_options(limits)])
        server.add_generic_rpc_handlers((method_handlers(service, self.metrics, check),))
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
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
        if self._front is not None:
            self.pop.close_waiters()
            await self._front.stop(grace_s)
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


def access_check(broker: BrokerContext) -> Check | None:
    """The check of every request: RocketMQ 5.3's auth when either switch is on, else the plain ACL
    when ``aclEnable`` is (the broker refuses to start with both), else none. Both are set at start,
    before the port opens."""
    if broker.auth_pipeline is not None:
        return AuthCheck(broker.auth_pipeline)
    if broker.access_validator is not None:
        return AccessCheck(broker.access_validator)
    return None


def _front_stat(front: NativeFront, field: str) -> float:
    return float(getattr(front.stats(), field))


def native_front_class(wanted: bool, tls: bool) -> Any:
    """The extension's GrpcFront when ``grpcNativeFront`` asks for it, the extension is loaded
    (not ``ROCKETSTORE_NATIVE=0``) and has it, and the port is plaintext (TLS stays on grpcio)."""
    if not wanted or tls or NATIVE is None:
        return None
    return getattr(NATIVE, "GrpcFront", None)


def method_handlers(service: pb_grpc.MessagingServiceServicer, metrics: CallMetrics,
                    check: Check | None = None) -> grpc.GenericRpcHandler:
    """:func:`methods` as grpcio handlers."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in methods(service, metrics, check):
        if method.client_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(
                method.behaviour, response_serializer=method.serialize)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                method.behaviour, response_serializer=method.serialize)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _awaited(method.behaviour), response_serializer=method.serialize)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _awaited(behaviour: Callable[[bytes, grpc.aio.ServicerContext], Answer]) -> Callable[..., Any]:
    """A unary behaviour as grpc.aio runs it: a coroutine function (an inline answer is returned as is)."""
    async def call(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        answer = behaviour(raw, context)
        return await answer if asyncio.iscoroutine(answer) else answer
    return call
