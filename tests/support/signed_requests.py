"""Raw remoting requests signed as a client's ACL RPC hook signs them (AccessKey + HMAC-SHA1
Signature), for the tests of ACL 1.0 and of RocketMQ 5.3's authentication, which send requests a
stock client would never send (tampered, unsigned, unknown user)."""

from __future__ import annotations

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
