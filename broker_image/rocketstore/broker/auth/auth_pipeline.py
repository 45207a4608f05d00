"""RocketMQ 5.3's AuthenticationPipeline and AuthorizationPipeline: every request, on the remoting
port and on the gRPC port, is checked before its handler runs.

Authentication first (when ``authenticationEnabled``): the user the request names must exist, be
enabled and have signed it (authentication_context_builder.py reads who and what from either port).
Then authorization (when ``authorizationEnabled``): each resource the request touches
(authorization_context_builder.py) is decided against the user's ACL. The decision is the same for
both ports (:meth:`AuthPipeline._reason`); only the reading of the request and the answer differ. A
refused remoting request is answered as Apache's broker answers it: NO_PERMISSION (16) with the
exception's message as remark; a refused gRPC request as Apache's proxy answers it (grpc_v2/auth_check.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from rocketstore.broker.acl.plain_access_resource import remote_host
from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.authentication_context_builder import (
    AuthenticationParseError,
    from_grpc_metadata,
    from_remoting,
    grpc_username,
)
from rocketstore.broker.auth.authentication_provider import AuthenticationContext, authenticate, parse_whitelist
from rocketstore.broker.auth.authorization_context_builder import AuthorizationParseError, build, build_grpc
from rocketstore.broker.auth.authorization_provider import AuthorizationContext, authorize
from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

DENIED_CODE: Final = ResponseCode.NO_PERMISSION


class AuthPipeline:
    """The hook; counts allowed and denied requests for /metrics."""

    def __init__(self, config: AuthConfig, manager: AuthMetadataManager, cluster_name: str) -> None:
        self.config = config
        self.manager = manager
        self.cluster_name = cluster_name
        self.authentication_whitelist = parse_whitelist(config.authentication_whitelist)
        self.authorization_whitelist = parse_whitelist(config.authorization_whitelist)
        self.allowed = 0
        self.denied = 0

    def check(self, request: RemotingCommand, remote_addr: str) -> RemotingCommand | None:
        """The remoting hook: None to let the request through, else the response refusing it."""
        reason = self._counted(self._reason(lambda: from_remoting(request),
                                            lambda: build(request, remote_host(remote_addr), self.cluster_name)))
        if reason is None:
            return None
        log.debug("auth refused request code %d from %s: %s", request.code, remote_addr, reason)
        return request.response(DENIED_CODE, reason)

    def grpc_reason(self, message: Any, metadata: Mapping[str, str], source_ip: str, now: datetime) -> str | None:
        """Why the gRPC request ``message`` (parsed), sent with ``metadata`` (lower-case keys) from
        ``source_ip`` at ``now`` (aware), is refused; None when it may proceed."""
        rpc_code = message.DESCRIPTOR.full_name
        return self._counted(self._reason(lambda: from_grpc_metadata(metadata, rpc_code, now),
                                          lambda: build_grpc(message, grpc_username(metadata), source_ip)))

    def _counted(self, reason: str | None) -> str | None:
        if reason is None:
            self.allowed += 1
        else:
            self.denied += 1
        return reason

    def _reason(self, presented: Callable[[], AuthenticationContext],
                touched: Callable[[], list[AuthorizationContext]]) -> str | None:
        """The decision of either port: ``presented`` reads who signed the request (only when
        authentication is on), ``touched`` what it touches (only when authorization is on)."""
        if self.config.authentication_enabled:
            try:
                context = presented()
            except AuthenticationParseError as exc:
                return str(exc)
            refused = authenticate(context, self.manager.get_user, self.authentication_whitelist)
            if refused is not None:
                return refused
        if self.config.authorization_enabled:
            try:
                contexts = touched()
            except AuthorizationParseError as exc:
                return str(exc)
            for authorization in contexts:
                refused = authorize(authorization, self.manager.get_user, self.manager.get_acl,
                                    self.authorization_whitelist)
                if refused is not None:
                    return refused
        return None
