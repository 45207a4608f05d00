"""RocketMQ 5.3's ``DefaultAuthenticationProvider``: is the request signed by an enabled user?

The decision is a pure function of the request's :class:`AuthenticationContext` and a user lookup,
returning Apache's AuthenticationException message (the NO_PERMISSION remark) or None. Order, as
AbstractAuthenticationStrategy and DefaultAuthenticationHandler check:

1. a request code listed in ``authenticationWhitelist`` passes unchecked;
2. no access key: "username cannot be null."; an unknown one: "User:NAME is not found.";
3. a disabled user: "User:NAME is disabled.";
4. the signature (HMAC-SHA1 of the signed content with the user's password, as ACL 1.0's
   AclClientRPCHook computes it) must match: "check signature failed.".
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection
from dataclasses import dataclass

from rocketstore.broker.auth.user import User
from rocketstore.remoting.acl_signer import cal_signature


@dataclass(frozen=True, slots=True)
class AuthenticationContext:
    """What a request presents (DefaultAuthenticationContext)."""

    rpc_code: str
    username: str | None = None
    signature: str | None = None
    content: bytes = b""


def authenticate(context: AuthenticationContext, get_user: Callable[[str], User | None],
                 whitelist: Collection[str] = ()) -> str | None:
    """The reason to refuse the request, or None when it may proceed."""
    if context.rpc_code in whitelist:
        return None
    if not context.username:
        return "username cannot be null."
    user = get_user(context.username)
    if user is None:
        return f"User:{context.username} is not found."
    if user.is_disabled:
        return f"User:{context.username} is disabled."
    expected = cal_signature(context.content, user.password or "").encode("utf-8")
    if context.signature is None or not hmac.compare_digest(expected, context.signature.encode("utf-8")):
        return "check signature failed."
    return None


def parse_whitelist(text: str | None) -> frozenset[str]:
    """``authenticationWhitelist`` / ``authorizationWhitelist``: request codes, comma separated."""
    return frozenset(code.strip() for code in (text or "").split(",") if code.strip())
