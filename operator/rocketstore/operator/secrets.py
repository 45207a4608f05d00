"""Reading the Secrets a RocketStore references (ACL file, operator credentials, TLS material).

:func:`read_secret` is the operator's only read of a Secret, and the only place this module
touches the Kube object (its ``get``); everything else works on the decoded ``dict[str, bytes]``.
"""

from __future__ import annotations

import base64

from rocketstore.operator.kube import Kube

__all__ = ["SecretNotFound", "read_secret"]


class SecretNotFound(LookupError):
    """The Secret does not exist (yet): a status problem, not an operator failure."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"Secret {name} not found in {namespace}")
        self.namespace = namespace
        self.name = name


async def read_secret(kube: Kube, namespace: str, name: str) -> dict[str, bytes]:
    """The Secret's ``data``, base64-decoded; raises :class:`SecretNotFound`, and ``ApiError`` for
    anything else the API server answers (403 without RBAC to read Secrets)."""
    secret = await kube.get("v1", "Secret", namespace, name)
    if secret is None:
        raise SecretNotFound(namespace, name)
    return {key: base64.b64decode(value or "") for key, value in (secret.get("data") or {}).items()}
