"""The request signature of RocketMQ's ``AclClientRPCHook`` (AclUtils.combineRequestContent + AclSigner).

One implementation for both sides: the client signs with :func:`sign_request`
(rocketstore.client.acl_hook) and the broker's plain ACL checks with :func:`request_content` and
:func:`cal_signature` (rocketstore.broker.acl), so the two cannot drift apart.

The client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's ext fields,
concatenates the values of all ext fields sorted by key (``Signature`` left out), appends the body,
and signs the bytes with HMAC-SHA1 keyed by the secret key (UTF-8), Base64-encoded. The broker
recomputes it over the fields it received, leaving out ``Signature`` and ``_UNIQUE_KEY_QUERY``
(PlainAccessValidator.parse), and compares.

Java's TreeMap orders keys by UTF-16 code units, Python's ``sorted`` by code points: the two
differ only between keys with characters above U+FFFF and keys with U+E000..U+FFFF, which no
RocketMQ header has.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

SIGNATURE: Final = "Signature"
ACCESS_KEY: Final = "AccessKey"
SECURITY_TOKEN: Final = "SecurityToken"
#: MixAll.UNIQUE_MSG_QUERY_FLAG: set on a QUERY_MESSAGE after the client signed it, so never signed.
UNIQUE_MSG_QUERY_FLAG: Final = "_UNIQUE_KEY_QUERY"
_UNSIGNED: Final = frozenset({SIGNATURE, UNIQUE_MSG_QUERY_FLAG})


def request_content(ext_fields: Mapping[str, str], body: bytes | None) -> bytes:
    """The bytes the broker checks the signature over: sorted ext field values, then the body."""
    values = "".join(value for key, value in sorted(ext_fields.items()) if key not in _UNSIGNED)
    return values.encode("utf-8") + (body or b"")


def cal_signature(content: bytes, secret_key: str) -> str:
    """Base64 of HMAC-SHA1(secret_key, content) (AclUtils.calSignature)."""
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_request(ext_fields: dict[str, str], body: bytes | None, access_key: str, secret_key: str,
                 security_token: str | None = None) -> None:
    """AclClientRPCHook.doBeforeRequest on ``ext_fields`` (in place): add ``AccessKey`` (and
    ``SecurityToken``), then ``Signature`` computed over all of them and the body."""
    ext_fields[ACCESS_KEY] = access_key
    if security_token is not None:
        ext_fields[SECURITY_TOKEN] = security_token
    ext_fields[SIGNATURE] = cal_signature(request_content(ext_fields, body), secret_key)
