"""RocketMQ's ``AclClientRPCHook`` for this client: every request signed with an account of plain ACL.

A broker with ``aclEnable=true`` refuses unsigned requests. Give a :class:`RemotingClient`
``rpc_hook=AclClientRPCHook(SessionCredentials(access_key, secret_key))`` and each request it sends
carries ``AccessKey`` (and ``SecurityToken`` when set) and the ``Signature`` RocketMQ's Java
client computes; the bytes signed are :func:`rocketstore.remoting.acl_signer.sign_request`'s, the
same function the broker verifies with. Responses the client sends back to a broker (for
requests the broker initiates) are not signed, as RocketMQ signs only outgoing requests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

from rocketstore.remoting.acl_signer import sign_request
from rocketstore.remoting.command import RemotingCommand

__all__ = ["ACCESS_KEY_ENV", "SECRET_KEY_ENV", "AclClientRPCHook", "SessionCredentials"]

#: where ``rocketstore admin`` (and :meth:`SessionCredentials.from_env`) find credentials
ACCESS_KEY_ENV: Final = "ROCKETSTORE_ACCESS_KEY"
SECRET_KEY_ENV: Final = "ROCKETSTORE_SECRET_KEY"


@dataclass(frozen=True)
class SessionCredentials:
    """An account of the broker's plain_acl.yml (RocketMQ's SessionCredentials)."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("ACL credentials need both an access key and a secret key")

    @classmethod
    def from_env(cls) -> SessionCredentials | None:
        """Credentials from ROCKETSTORE_ACCESS_KEY / ROCKETSTORE_SECRET_KEY; None when neither is set."""
        access, secret = os.environ.get(ACCESS_KEY_ENV), os.environ.get(SECRET_KEY_ENV)
        if not access and not secret:
            return None
        if not access or not secret:
            raise ValueError(f"set both {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}, not only one")
        return cls(access, secret)


class AclClientRPCHook:
    """Called by :class:`~rocketstore.client.remoting_client.RemotingClient` on each request before
    it is encoded: adds the credentials' AccessKey and the request's Signature."""

    __slots__ = ("credentials",)

    def __init__(self, credentials: SessionCredentials) -> None:
        self.credentials = credentials

    def __call__(self, request: RemotingCommand) -> None:
        c = self.credentials
        sign_request(request.ext_fields, request.body, c.access_key, c.secret_key, c.security_token)

    def __repr__(self) -> str:
        return f"AclClientRPCHook({self.credentials.access_key})"
