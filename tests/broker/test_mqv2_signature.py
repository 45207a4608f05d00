"""The pure parts of gRPC authentication: the ``MQv2-HMAC-SHA1`` header, the date window, and the
plain ACL's decision over what they yield (rocketstore.broker.acl.mqv2_signature), plus the
resources each v2 request needs and grpc's peer strings (rocketstore.broker.grpc_v2.access_check).

The known signature was computed with ``printf %s 20261124T095000Z | openssl dgst -sha1 -hmac
rocketmq2``, not with the code under test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
import yaml

from rocketstore.broker.acl.mqv2_signature import (
    SignatureError,
    check_date_time,
    needed_access,
    parse_authorization,
    parse_date_time,
)
from rocketstore.broker.acl.permission import PUB, SUB
from rocketstore.broker.acl.plain_access_validator import PlainAccessValidator
from rocketstore.broker.acl.plain_permission_manager import build_table, validate
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2.access_check import peer_host, refusal, resources_of

DATE = "20261124T095000Z"
SIGNED_AT = datetime(2026, 11, 24, 9, 50, 0, tzinfo=UTC)
SECRET = "rocketmq2"
HEX = "f776bf44e58498e96ae68f76ff8ff8f165c2c11b"  # openssl's HMAC-SHA1(SECRET, DATE)
ACL = {"accounts": [
    {"accessKey": "RocketMQ", "secretKey": SECRET, "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
     "topicPerms": ["Orders=PUB|SUB", "ReadOnly=SUB"]},
    {"accessKey": "AdminKey", "secretKey": "admin-secret", "admin": True},
]}
TABLE = build_table([("plain_acl.yml", ACL)])


def header(signature: str = HEX, credential: str = "RocketMQ") -> str:
    return f"MQv2-HMAC-SHA1 Credential={credential}, SignedHeaders=x-mq-date-time, Signature={signature}"


def metadata(signature: str = HEX, credential: str = "RocketMQ", date: str = DATE) -> dict[str, str]:
    return {"authorization": header(signature, credential), "x-mq-date-time": date}


@pytest.mark.parametrize("signature", [HEX, HEX.upper()])
def test_both_hex_cases_verify(signature: str) -> None:
    """Python clients send lower-case hex, Java and Node upper-case: both are the same digest."""
    needed = needed_access(metadata(signature), "10.0.0.1", 0, {"Orders": PUB}, SIGNED_AT)
    assert needed.access_key == "RocketMQ"
    assert needed.content == DATE.encode()
    assert validate(TABLE, needed) is None


def test_a_wrong_signature_unknown_key_or_no_header_is_refused() -> None:
    wrong = HEX[:-1] + ("0" if HEX[-1] != "0" else "1")
    assert validate(TABLE, needed_access(metadata(wrong), "10.0.0.1", 0, {}, SIGNED_AT)) == \
        "Check signature failed for accessKey=RocketMQ"
    # signed with another secret over the same date
    other = "eb0d7e8c8d2a0cbe5b3a3e1f8a1c10b9f0b4c3d2"
    assert validate(TABLE, needed_access(metadata(other), "10.0.0.1", 0, {}, SIGNED_AT)) is not None
    assert validate(TABLE, needed_access(metadata(credential="Nobody123"), "10.0.0.1", 0, {}, SIGNED_AT)) == \
        "No acl config for Nobody123"
    assert validate(TABLE, needed_access({}, "10.0.0.1", 0, {}, SIGNED_AT)) == "No accessKey is configured"
    # the Python client signs with an empty Credential when it has no keys
    assert validate(TABLE, needed_access(metadata(credential=""), "10.0.0.1", 0, {}, SIGNED_AT)) == \
        "No accessKey is configured"


def test_the_signature_covers_the_date() -> None:
    """The same header with another date is a wrong signature (the date is what is signed)."""
    later = "20261124T095001Z"
    needed = needed_access(metadata(date=later), "10.0.0.1", 0, {}, SIGNED_AT)
    assert validate(TABLE, needed) == "Check signature failed for accessKey=RocketMQ"


def test_permissions_are_the_plain_acls() -> None:
    def reason(resources: dict[str, int]) -> str | None:
        return validate(TABLE, needed_access(metadata(), "10.0.0.1", 0, resources, SIGNED_AT))

    assert reason({"Orders": PUB}) is None
    assert reason({"ReadOnly": PUB}) == "No default permission for topic:ReadOnly"
    assert reason({"Other": SUB}) == "No default permission for topic:Other"
    assert reason({"%RETRY%AnyGroup": SUB, "ReadOnly": SUB}) is None


@pytest.mark.parametrize(("value", "problem"), [
    ("Bearer abc", "algorithm"),
    ("MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=x-mq-date-time", "no Signature"),
    ("MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=x-mq-date-time, Signature", "not key=value"),
    ("MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=host, Signature=" + HEX, "does not name x-mq-date-time"),
    ("MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=x-mq-date-time, Signature=xyz", "not 40 hex digits"),
    ("MQv2-HMAC-SHA1 Credential=RocketMQ, SignedHeaders=x-mq-date-time, Signature=" + HEX + "00",
     "not 40 hex digits"),
    ("MQv2-HMAC-SHA1 SignedHeaders=x-mq-date-time, Signature=" + HEX, "no Credential"),
])
def test_a_malformed_header_names_its_problem(value: str, problem: str) -> None:
    with pytest.raises(SignatureError, match=problem):
        parse_authorization(value)


def test_credential_scope_after_a_slash_is_ignored() -> None:
    """RocketMQ's AuthorizationHeader reads ``AK/region/channel`` and keeps the part before '/'."""
    assert parse_authorization(header(credential="RocketMQ/cn/ch")).access_key == "RocketMQ"


@pytest.mark.parametrize("value", ["2026-11-24T09:50:00Z", "20261124T095000", "20261324T095000Z", ""])
def test_a_malformed_date_is_refused(value: str) -> None:
    with pytest.raises(SignatureError, match="is not a date-time yyyyMMdd'T'HHmmss'Z'"):
        parse_date_time(value)
    with pytest.raises(SignatureError):
        needed_access(metadata(date=value), "10.0.0.1", 0, {}, SIGNED_AT)


def test_a_missing_date_is_refused() -> None:
    with pytest.raises(SignatureError, match="no x-mq-date-time"):
        needed_access({"authorization": header()}, "10.0.0.1", 0, {}, SIGNED_AT)


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(hours=8), timedelta(hours=-5),
                                    timedelta(hours=14, minutes=10), timedelta(hours=-12, minutes=-10)])
def test_local_times_of_every_zone_are_current(offset: timedelta) -> None:
    """Clients write their local time with a 'Z': UTC+8's client is 8 h 'ahead' and still current."""
    check_date_time((SIGNED_AT + offset).strftime("%Y%m%dT%H%M%SZ"), SIGNED_AT)


@pytest.mark.parametrize(("offset", "problem"), [(timedelta(hours=-12, minutes=-16), "too old"),
                                                  (timedelta(days=-2), "too old"),
                                                  (timedelta(hours=14, minutes=16), "in the future")])
def test_a_stale_or_future_date_is_refused(offset: timedelta, problem: str) -> None:
    value = (SIGNED_AT + offset).strftime("%Y%m%dT%H%M%SZ")
    with pytest.raises(SignatureError, match=problem):
        check_date_time(value, SIGNED_AT)
    # a correctly signed header is refused as well when its date is that far from the broker's now
    with pytest.raises(SignatureError, match=problem):
        needed_access(metadata(), "10.0.0.1", 0, {}, SIGNED_AT - offset)


def test_resources_of_each_request() -> None:
    def res(name: str) -> pb.Resource:
        return pb.Resource(name=name)

    assert resources_of(pb.SendMessageRequest(messages=[pb.Message(topic=res("T"))])) == {"T": PUB}
    assert resources_of(pb.ReceiveMessageRequest(group=res("G"), message_queue=pb.MessageQueue(topic=res("T")))) \
        == {"%RETRY%G": SUB, "T": SUB}
    for request_class in (pb.AckMessageRequest, pb.ChangeInvisibleDurationRequest,
                          pb.ForwardMessageToDeadLetterQueueRequest):
        assert resources_of(request_class(group=res("G"), topic=res("T"))) == {"%RETRY%G": SUB, "T": SUB}
    assert resources_of(pb.HeartbeatRequest()) == {}
    assert resources_of(pb.HeartbeatRequest(group=res("G"))) == {"%RETRY%G": SUB}
    assert resources_of(pb.EndTransactionRequest(topic=res("T"))) == {"T": PUB}
    publishing = pb.Settings(publishing=pb.Publishing(topics=[res("P"), res("Q")]))
    assert resources_of(pb.TelemetryCommand(settings=publishing)) == {"P": PUB, "Q": PUB}
    subscription = pb.Settings(subscription=pb.Subscription(group=res("G"),
                                                             subscriptions=[pb.SubscriptionEntry(topic=res("S"))]))
    assert resources_of(pb.TelemetryCommand(settings=subscription)) == {"%RETRY%G": SUB, "S": SUB}
    assert resources_of(pb.QueryRouteRequest(topic=res("T"))) == {}


@pytest.mark.parametrize(("peer", "host"), [("ipv4:10.1.2.3:5000", "10.1.2.3"), ("ipv6:%5B::1%5D:5000", "::1"),
                                            ("ipv6:[2001:db8::5]:80", "2001:db8::5"), ("unix:/tmp/s", "unix:/tmp/s")])
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_refusal_codes(tmp_path: Path) -> None:
    """Who the caller is: UNAUTHENTICATED; what the account may not do: PERMISSION_DENIED."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "plain_acl.yml").write_text(yaml.safe_dump(ACL))
    validator = PlainAccessValidator(tmp_path, None)
    validator.manager.load()
    send = pb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="ReadOnly"))])
    peer = "ipv4:10.0.0.1:4000"
    assert refusal(validator, send, metadata(), peer, SIGNED_AT) == \
        (grpc.StatusCode.PERMISSION_DENIED, "No default permission for topic:ReadOnly")
    assert refusal(validator, send, metadata(HEX.replace("f", "e")), peer, SIGNED_AT) == \
        (grpc.StatusCode.UNAUTHENTICATED, "Check signature failed for accessKey=RocketMQ")
    code, reason = refusal(validator, send, metadata(), peer, SIGNED_AT + timedelta(days=1)) or (None, "")
    assert code == grpc.StatusCode.UNAUTHENTICATED and "too old" in reason
    allowed = pb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="Orders"))])
    assert refusal(validator, allowed, metadata(), peer, SIGNED_AT) is None
