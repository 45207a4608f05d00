"""What a request presents to authentication, as RocketMQ 5.3's DefaultAuthenticationContextBuilder
reads it from either port: an :class:`AuthenticationContext` (who, the signature, the signed content).

Remoting (:func:`from_remoting`): the ``AccessKey`` and ``Signature`` ext fields, the content ACL 1.0's
AclClientRPCHook signs (the other ext fields sorted by key, then the body).

gRPC (:func:`from_grpc_metadata`): the ``authorization`` header
``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=HEX`` and the ``x-mq-date-time``
it signs. The request code is the request message's full name (``apache.rocketmq.v2.SendMessageRequest``),
which is what ``authenticationWhitelist`` names for gRPC. As in Apache: no header presents no user
(refused "username cannot be null." unless whitelisted); the user is the part of ``Credential``
before a ``/``; the hex signature becomes Base64, the form the remoting signature has, and the
content is the date-time's text. A header Apache cannot read is refused with Apache's message
(:class:`AuthenticationParseError`). One check Apache does not make: the date-time must be current
(:func:`~rocketstore.broker.acl.mqv2_signature.check_date_time`, the window the plain ACL's gRPC check
uses), so that a recorded header does not open the broker for ever.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from rocketstore.broker.acl.mqv2_signature import (
    AUTHORIZATION_HEADER,
    DATE_TIME_HEADER,
    SignatureError,
    check_date_time,
)
from rocketstore.broker.auth.authentication_provider import AuthenticationContext
from rocketstore.remoting.acl_signer import ACCESS_KEY, SIGNATURE, request_content
from rocketstore.remoting.command import RemotingCommand

#: Apache's message for a header its builder fails on otherwise (e.g. a signature that is not hex)
CONTEXT_ERROR: Final = "create authentication context error."


class AuthenticationParseError(ValueError):
    """The request's credentials cannot be read; the message is Apache's (the refusal's reason)."""


def from_remoting(request: RemotingCommand) -> AuthenticationContext:
    ext = request.ext_fields
    if ACCESS_KEY not in ext:
        return AuthenticationContext(str(request.code))
    return AuthenticationContext(str(request.code), ext[ACCESS_KEY], ext.get(SIGNATURE),
                                 request_content(ext, request.body))


def from_grpc_metadata(metadata: Mapping[str, str], rpc_code: str, now: datetime) -> AuthenticationContext:
    """The context of a gRPC call with ``metadata`` (lower-case keys) at ``now`` (aware); raises
    AuthenticationParseError."""
    authorization = metadata.get(AUTHORIZATION_HEADER)
    if not authorization:
        return AuthenticationContext(rpc_code)
    date_time = metadata.get(DATE_TIME_HEADER)
    if not date_time:
        raise AuthenticationParseError("datetime is null.")
    items = _items(authorization)
    signature = items.get("Signature")
    if signature is not None:
        try:
            signature = base64.b64encode(binascii.unhexlify(signature)).decode("ascii")
        except (binascii.Error, ValueError):
            raise AuthenticationParseError(CONTEXT_ERROR) from None
    try:
        check_date_time(date_time, now)
    except SignatureError as exc:
        raise AuthenticationParseError(str(exc)) from None
    return AuthenticationContext(rpc_code, _username(items), signature, date_time.encode("utf-8"))


def grpc_username(metadata: Mapping[str, str]) -> str | None:
    """The user a gRPC call names (its ``Credential``), whether or not the header is otherwise sound:
    the subject authorization checks (authentication, when on, has verified it first)."""
    try:
        return _username(_items(metadata.get(AUTHORIZATION_HEADER) or ""))
    except AuthenticationParseError:
        return None


def _items(authorization: str) -> dict[str, str]:
    """The ``key=value`` items after the algorithm (Apache splits at the first space, then at commas,
    and does not look at the algorithm's name)."""
    _, space, rest = authorization.partition(" ")
    if not space:
        raise AuthenticationParseError("authentication header is incorrect.")
    parts = rest.split(",")
    while rest and parts and not parts[-1]:  # Java's String.split drops trailing empty strings
        parts.pop()
    items: dict[str, str] = {}
    for item in parts:
        key, equals, value = item.strip().partition("=")
        if not equals:
            raise AuthenticationParseError("authentication keyValues length is incorrect, actual length=1.")
        items[key] = value
    return items


def _username(items: Mapping[str, str]) -> str | None:
    credential = items.get("Credential")
    return None if credential is None else credential.split("/", 1)[0]
