"""RocketMQ 5.3's authentication and authorization on the gRPC port (``authenticationEnabled`` /
``authorizationEnabled``): each parsed request, each command of a Telemetry stream too, goes through
the remoting port's decision (:meth:`~rocketstore.broker.auth.auth_pipeline.AuthPipeline.grpc_reason`)
before its method sees it.

A refusal is answered as Apache 5.3.3's proxy answers it: not by ending the call with a gRPC error,
but with the method's own response whose status is ``UNAUTHORIZED`` (40100) and the reason as its
message, for a refused authentication and a refused authorization alike (the proxy's ResponseBuilder
maps both exceptions to that code; ``FORBIDDEN`` is never used). A refused ReceiveMessage gets that
one response and ends; a refused Telemetry command ends the stream after it, as the proxy's
ResponseWriter completes it. The 5.x clients read the status as they read any other
(the Java client raises UnauthorizedException).

The client's address is the connection's peer (never a header a client could write: Apache's proxy
takes ``rpc-remote-address`` from the metadata when the client sent one).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import grpc

from rocketstore.broker.auth.auth_pipeline import AuthPipeline
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2.access_check import peer_host
from rocketstore.broker.grpc_v2.call_logic import Refused

log = logging.getLogger(__name__)


class AuthCheck:
    """A call_logic Check: raises :class:`~rocketstore.broker.grpc_v2.call_logic.Refused` with the
    UNAUTHORIZED status when the pipeline refuses the request."""

    def __init__(self, pipeline: AuthPipeline) -> None:
        self.pipeline = pipeline

    async def __call__(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        reason = self.pipeline.grpc_reason(request, metadata, peer_host(context.peer()), datetime.now(UTC))
        if reason is None:
            return
        log.debug("auth refused gRPC %s from %s: %s", type(request).__name__, context.peer(), reason)
        raise Refused(pb.Status(code=pb.UNAUTHORIZED, message=reason))
