"""GrpcServer: the gRPC v2 endpoint inside the broker process, on the broker's event loop.

grpc.aio runs its server on the running asyncio loop (uvloop included: its completion queue is
polled from a thread of grpc's own and results come back as loop callbacks), so the servicer's
coroutines share the loop with the remoting server and call the broker's objects directly, with
no thread boundary. The pop log is opened (replayed, compacted) in a worker thread before the
port opens, fsynced every :data:`POP_LOG_SYNC_INTERVAL_S` and closed after the server stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Final

import grpc

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.broker.grpc_v2.pop_log import PopLog
from rocketstore.broker.grpc_v2.pop_service import PopService
from rocketstore.broker.grpc_v2.service import MessagingService, endpoints_of

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
        self.pop = PopService(broker, PopLog(Path(broker.store_config.root_dir()) / POP_DIR))
        self._server: grpc.aio.Server | None = None
        self._sync_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Replay the pop log, then listen; OSError when the port cannot be bound."""
        await asyncio.to_thread(self.pop.open)
        self.pop.attach()
        server = grpc.aio.server()
        service = MessagingService(self.broker, self.pop, lambda: endpoints_of(self.broker.store_host.host, self.port))
        pb_grpc.add_MessagingServiceServicer_to_server(service, server)  # type: ignore[no-untyped-call]
        address = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        try:
            bound = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio raises, rather than returning 0, when the bind fails
            raise OSError(f"grpcListenPort: cannot listen on {address}: {exc}") from exc
        if bound == 0:
            raise OSError(f"grpcListenPort: cannot listen on {address}")
        self.port = bound
        await server.start()
        self._server = server
        self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop(), name="pop-log-sync")
        self.broker.add_gauge("rocketstore_pop_messages_in_flight", "Messages received over gRPC and not acked yet",
                              lambda: self.pop.log.state.in_flight_count())
        self.broker.add_counter("rocketstore_pop_redeliveries", "Messages delivered again after their invisible "
                                "time passed", lambda: self.pop.redeliveries)

    async def stop(self, grace_s: float) -> None:
        """Release waiting receives, stop serving (calls in flight get ``grace_s``), close the pop log."""
        if self._sync_task is not None:
            self._sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sync_task
        if self._server is not None:
            self.pop.close_waiters()
            await self._server.stop(grace_s)
        await asyncio.to_thread(self.pop.close)

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(POP_LOG_SYNC_INTERVAL_S)
            try:
                await asyncio.to_thread(self.pop.log.sync)
            except OSError:
                log.exception("fsync of the pop log failed; retrying at the next interval")
