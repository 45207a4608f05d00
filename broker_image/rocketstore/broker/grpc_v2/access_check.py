"""The plain ACL on the gRPC endpoint (``aclEnable``): each request is checked before its method runs.

What a request needs is RocketMQ 5.x's ``PlainAccessResource.parse(GeneratedMessageV3, ...)``
(:func:`resources_of`), with groups named by their retry topic (``%RETRY%group``) as the remoting
side names them, so that they are checked against the account's ``groupPerms`` (RocketMQ's proxy
passes the bare group name, which its own check then reads as a topic). ChangeInvisibleDuration
needs what AckMessage needs (RocketMQ's list leaves it out, which would let any account hide any
group's messages). The signature (:mod:`rocketstore.broker.acl.mqv2_signature`) and the decision
(:func:`~rocketstore.broker.acl.plain_permission_manager.authenticate`, then ``authorize``) are the
plain ACL's own, over the table the remoting port uses, so a reloaded file counts for both.

Status codes: who the caller is (no or unknown access key, wrong signature, malformed or stale
header) fails UNAUTHENTICATED; what an authenticated account may not do fails PERMISSION_DENIED
(the code RocketMQ 5.1's proxy answers every AclException with). The details are the ACL's reason,
e.g. ``Check signature failed for accessKey=AK`` or ``No default permission for topic:T``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

import grpc

from rocketstore.broker.acl.mqv2_signature import SignatureError, needed_access
from rocketstore.broker.acl.permission import PUB, SUB
from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.acl.plain_permission_manager import authenticate, authorize
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.common.mix_all import retry_topic

log = logging.getLogger(__name__)

#: the request code a gRPC call stands for in the ACL's decision: none of the v2 methods is one of
#: the admin-only remoting codes, so an account's ``admin`` flag matters only through its resources
GRPC_REQUEST_CODE = 0


def resources_of(request: Any) -> dict[str, int]:
    """The topics (and ``%RETRY%group`` names) ``request`` touches, with the permission each needs."""
    needed: dict[str, int] = {}

    def topic(name: str, perm: int) -> None:
        if name:
            needed[name] = perm

    def group(name: str) -> None:
        if name:
            needed[retry_topic(name)] = SUB

    if isinstance(request, pb.SendMessageRequest):
        for message in request.messages:
            topic(message.topic.name, PUB)
    elif isinstance(request, pb.ReceiveMessageRequest):
        group(request.group.name)
        topic(request.message_queue.topic.name, SUB)
    elif isinstance(request, (pb.AckMessageRequest, pb.ChangeInvisibleDurationRequest,
                              pb.ForwardMessageToDeadLetterQueueRequest)):
        group(request.group.name)
        topic(request.topic.name, SUB)
    elif isinstance(request, (pb.PullMessageRequest, pb.GetOffsetRequest, pb.UpdateOffsetRequest)):
        group(request.group.name)
        topic(request.message_queue.topic.name, SUB)
    elif isinstance(request, pb.QueryOffsetRequest):
        topic(request.message_queue.topic.name, SUB)
    elif isinstance(request, pb.HeartbeatRequest):
        group(request.group.name)
    elif isinstance(request, pb.EndTransactionRequest):
        topic(request.topic.name, PUB)
    elif isinstance(request, pb.TelemetryCommand) and request.HasField("settings"):
        settings = request.settings
        if settings.HasField("publishing"):
            for resource in settings.publishing.topics:
                topic(resource.name, PUB)
        if settings.HasField("subscription"):
            group(settings.subscription.group.name)
            for entry in settings.subscription.subscriptions:
                topic(entry.topic.name, SUB)
    return needed


def peer_host(peer: str) -> str:
    """The client's address from grpc's peer string (``ipv4:10.0.0.1:5000``, ``ipv6:%5B::1%5D:5000``),
    without the port, as the white-address patterns match it."""
    kind, _, address = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return peer
    host = unquote(address).rpartition(":")[0]
    return host.removeprefix("[").removesuffix("]")


def refusal(validator: PlainAccessValidator, request: Any, metadata: dict[str, str], peer: str,
            now: datetime) -> tuple[grpc.StatusCode, str] | None:
    """The status and reason refusing ``request``, or None to let it through."""
    try:
        needed = needed_access(metadata, peer_host(peer), GRPC_REQUEST_CODE, resources_of(request), now)
    except SignatureError as exc:
        return grpc.StatusCode.UNAUTHENTICATED, str(exc)
    verdict = authenticate(validator.manager.table, needed)
    if isinstance(verdict, str):
        return grpc.StatusCode.UNAUTHENTICATED, verdict
    if verdict is not None:
        reason = authorize(needed, verdict)
        if reason is not None:
            return grpc.StatusCode.PERMISSION_DENIED, reason
    return None


class AccessCheck:
    """Awaited with each parsed request and its call's context; aborts the call when the ACL refuses
    it and counts the outcome with the remoting port's (``rocketstore_acl_*_requests_total``)."""

    def __init__(self, validator: PlainAccessValidator) -> None:
        self.validator = validator

    async def __call__(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = {key: value for key, value in context.invocation_metadata() or ()
                    if isinstance(value, str)}
        refused = refusal(self.validator, request, metadata, context.peer(), datetime.now(UTC))
        if refused is None:
            self.validator.allowed += 1
            return
        self.validator.denied += 1
        code, reason = refused
        log.debug("ACL refused gRPC %s from %s: %s", type(request).__name__, context.peer(), reason)
        await context.abort(code, reason)
