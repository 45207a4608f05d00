"""The remoting server's authentication and authorization step (RocketMQ 5.3's AuthenticationPipeline
and AuthorizationPipeline): every request is checked before its handler runs.

Authentication first (when ``authenticationEnabled``): the request's ``AccessKey`` names the user
and its ``Signature`` is checked over the same content ACL 1.0's AclClientRPCHook signs. Then
authorization (when ``authorizationEnabled``): each resource the request touches
(authorization_context_builder.py) is decided against the user's ACL. A refusal is answered as
Apache's pipelines answer it: NO_PERMISSION (16) with the exception's message as remark.
"""

from __future__ import annotations

import logging
from typing import Final

from rocketstore.broker.acl.plain_access_resource import remote_host
from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.authentication_provider import AuthenticationContext, authenticate, parse_whitelist
from rocketstore.broker.auth.authorization_context_builder import AuthorizationParseError, build
from rocketstore.broker.auth.authorization_provider import authorize
from rocketstore.remoting.acl_signer import ACCESS_KEY, SIGNATURE, request_content
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
        """None to let the request through, else the response refusing it."""
        reason = self.reason(request, remote_addr)
        if reason is None:
            self.allowed += 1
            return None
        self.denied += 1
        log.debug("auth refused request code %d from %s: %s", request.code, remote_addr, reason)
        return request.response(DENIED_CODE, reason)

    def reason(self, request: RemotingCommand, remote_addr: str) -> str | None:
        ext = request.ext_fields
        if self.config.authentication_enabled:
            presented = AuthenticationContext(str(request.code), ext.get(ACCESS_KEY), ext.get(SIGNATURE),
                                              request_content(ext, request.body) if ACCESS_KEY in ext else b"")
            refused = authenticate(presented, self.manager.get_user, self.authentication_whitelist)
            if refused is not None:
                return refused
        if self.config.authorization_enabled:
            try:
                contexts = build(request, remote_host(remote_addr), self.cluster_name)
            except AuthorizationParseError as exc:
                return str(exc)
            for context in contexts:
                refused = authorize(context, self.manager.get_user, self.manager.get_acl,
                                    self.authorization_whitelist)
                if refused is not None:
                    return refused
        return None
