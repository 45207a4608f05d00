"""Raw remoting requests signed as a client's ACL RPC hook signs them (AccessKey + HMAC-SHA1
Signature), and gRPC metadata signed as a 5.x client signs its calls (``MQv2-HMAC-SHA1``), for the
tests of ACL 1.0 and of RocketMQ 5.3's authentication, which send requests a stock client would
never send (tampered, unsigned, unknown user, stale date)."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

from rocketstore.remoting.acl_signer import cal_signature, request_content
from rocketstore.remoting.command import RemotingCommand


def signed(code: int, ext: dict[str, str], body: bytes, access_key: str, secret: str) -> RemotingCommand:
    """``code`` with ``ext`` and ``body``, signed by ``access_key`` with ``secret``."""
    fields = {**ext, "AccessKey": access_key}
    fields["Signature"] = cal_signature(request_content(fields, body), secret)
    return RemotingCommand(code=code, ext_fields=fields, body=body)


def send_fields(topic: str) -> dict[str, str]:
    """SEND_MESSAGE_V2's short header fields for one message to queue 0 of ``topic``."""
    return {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": "",
            "j": "0", "k": "false", "m": "false"}


def grpc_signed(access_key: str, secret_key: str, at: datetime | None = None) -> list[tuple[str, str]]:
    """A 5.x client's signature metadata for a call at ``at`` (now), upper-case hex as the Java client writes it."""
    date = (at or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    digest = hmac.new(secret_key.encode(), date.encode(), hashlib.sha1).hexdigest().upper()
    return [("x-mq-date-time", date), ("authorization", f"MQv2-HMAC-SHA1 Credential={access_key}, "
                                                        f"SignedHeaders=x-mq-date-time, Signature={digest}")]
