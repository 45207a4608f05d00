"""RocketMQ 5.3 authentication and authorization on the gRPC port.

The pure parts: the authentication context of a call's metadata (Apache 5.3.3's
DefaultAuthenticationContextBuilder, its messages for headers it cannot read), the resources each
request touches (its DefaultAuthorizationContextBuilder for gRPC), and the pipeline's decision on
them. Then a broker process with the users and ACLs of a Super user, called with raw signed
requests on both gRPC transports (the native front and grpcio): the answers Apache's proxy gives
(the method's response with status UNAUTHORIZED and the reason, a Telemetry stream ended after it),
and what the Java 5.x client cannot send (no signature, a stale date, a tampered header).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from broker_process import Broker
from signed_requests import grpc_signed, signed

from rocketstore.broker.auth.acl import acl_from_info
from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.auth_pipeline import AuthPipeline
from rocketstore.broker.auth.authentication_context_builder import AuthenticationParseError, from_grpc_metadata
from rocketstore.broker.auth.authorization_context_builder import AuthorizationParseError, build_grpc
from rocketstore.broker.auth.resource import Action
from rocketstore.broker.auth.user import User
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin
from rocketstore.client.remoting_client import RemotingClient
from rocketstore.remoting.codes import RequestCode, ResponseCode

NOW = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)
ROOT, ROOT_SECRET = "rocketmq2", "root-secret-1"
ALICE, ALICE_SECRET = "alice", "alice-secret-1"
TOPIC, OTHER_TOPIC, GROUP = "GrpcAuthOrders", "GrpcAuthPayments", "GrpcAuthGroup"
SEND = "apache.rocketmq.v2.SendMessageRequest"
#: Pub and Sub on TOPIC, Sub on GROUP, Sub only on OTHER_TOPIC
ALICE_ACL = {"subject": f"User:{ALICE}", "policies": [{"policyType": "Custom", "entries": [
    {"resource": f"Topic:{TOPIC}", "actions": ["Pub", "Sub"], "decision": "Allow"},
    {"resource": f"Group:{GROUP}", "actions": ["Sub"], "decision": "Allow"},
    {"resource": f"Topic:{OTHER_TOPIC}", "actions": ["Sub"], "decision": "Allow"}]}]}


def metadata(user: str, secret: str, at: datetime = NOW) -> dict[str, str]:
    return dict(grpc_signed(user, secret, at))


# -- the authentication context -------------------------------------------------------------------


def test_the_authentication_context_is_the_credential_the_hex_signature_in_base64_and_the_date() -> None:
    date = "20261127T120000Z"
    digest = hmac.new(b"secret", date.encode(), hashlib.sha1)
    header = f"MQv2-HMAC-SHA1 Credential=alice/region/ns, SignedHeaders=x-mq-date-time, Signature={digest.hexdigest()}"
    context = from_grpc_metadata({"authorization": header, "x-mq-date-time": date}, SEND, NOW)
    assert (context.rpc_code, context.username, context.content) == (SEND, "alice", date.encode())
    assert context.signature == base64.b64encode(digest.digest()).decode()
    assert from_grpc_metadata({}, SEND, NOW).username is None  # nobody: "username cannot be null." later


@pytest.mark.parametrize(("meta", "message"), [
    ({"authorization": "MQv2-HMAC-SHA1 Credential=a, Signature=00"}, "datetime is null."),
    ({"authorization": "MQv2-HMAC-SHA1", "x-mq-date-time": "20261127T120000Z"},
     "authentication header is incorrect."),
    ({"authorization": "MQv2-HMAC-SHA1 Credential=a, Signature", "x-mq-date-time": "20261127T120000Z"},
     "authentication keyValues length is incorrect, actual length=1."),
    ({"authorization": "MQv2-HMAC-SHA1 Credential=a, Signature=XYZ", "x-mq-date-time": "20261127T120000Z"},
     "create authentication context error."),
])
def test_a_header_apache_cannot_read_is_refused_with_its_message(meta: dict[str, str], message: str) -> None:
    with pytest.raises(AuthenticationParseError) as refused:
        from_grpc_metadata(meta, SEND, NOW)
    assert str(refused.value) == message


def test_a_date_out_of_every_time_zones_window_is_refused() -> None:
    with pytest.raises(AuthenticationParseError, match="too old"):
        from_grpc_metadata(metadata(ALICE, ALICE_SECRET, NOW - timedelta(hours=13)), SEND, NOW)
    with pytest.raises(AuthenticationParseError, match="in the future"):
        from_grpc_metadata(metadata(ALICE, ALICE_SECRET, NOW + timedelta(hours=15)), SEND, NOW)
    # a client in UTC+14 writes its local time followed by Z: still accepted
    assert from_grpc_metadata(metadata(ALICE, ALICE_SECRET, NOW + timedelta(hours=14)), SEND, NOW).username == ALICE


# -- what each request touches --------------------------------------------------------------------


def touched(message: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(c.resource.key, tuple(a.value for a in c.actions)) for c in build_grpc(message, ALICE, "10.0.0.1")]


def res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def queue(topic: str) -> pb.MessageQueue:
    return pb.MessageQueue(topic=res(topic))


def test_each_request_touches_what_apaches_builder_says() -> None:
    assert touched(pb.SendMessageRequest(messages=[pb.Message(topic=res("T"))])) == [("Topic:T", ("Pub",))]
    assert touched(pb.EndTransactionRequest(topic=res("T"))) == [("Topic:T", ("Pub",))]
    assert touched(pb.QueryRouteRequest(topic=res("T"))) == [("Topic:T", ("Pub", "Sub"))]
    sub_both = [("Group:G", ("Sub",)), ("Topic:T", ("Sub",))]
    assert touched(pb.ReceiveMessageRequest(group=res("G"), message_queue=queue("T"))) == sub_both
    assert touched(pb.AckMessageRequest(group=res("G"), topic=res("T"))) == sub_both
    assert touched(pb.ForwardMessageToDeadLetterQueueRequest(group=res("G"), topic=res("T"))) == sub_both
    assert touched(pb.QueryAssignmentRequest(group=res("G"), topic=res("T"))) == sub_both
    assert touched(pb.PullMessageRequest(group=res("G"), message_queue=queue("T"))) == sub_both
    assert touched(pb.UpdateOffsetRequest(group=res("G"), message_queue=queue("T"))) == sub_both
    assert touched(pb.QueryOffsetRequest(message_queue=queue("T"))) == [("Topic:T", ("Sub",))]
    # a retry group is its group; ChangeInvisibleDuration touches only the group
    assert touched(pb.ChangeInvisibleDurationRequest(group=res("%RETRY%G"), topic=res("T"))) == [("Group:G", ("Sub",))]
    assert touched(pb.HeartbeatRequest(group=res("G"), client_type=pb.SIMPLE_CONSUMER)) == [("Group:G", ("Sub",))]
    assert touched(pb.HeartbeatRequest(client_type=pb.PRODUCER)) == []
    assert touched(pb.NotifyClientTerminationRequest()) == []
    assert touched(pb.NotifyClientTerminationRequest(group=res("G"))) == [("Group:G", ("Sub",))]
    producer = pb.Settings(publishing=pb.Publishing(topics=[res("T"), res("U")]))
    assert touched(pb.TelemetryCommand(settings=producer)) == [("Topic:T", ("Pub",)), ("Topic:U", ("Pub",))]
    consumer = pb.Settings(subscription=pb.Subscription(group=res("G"), subscriptions=[
        pb.SubscriptionEntry(topic=res("T"))]))
    assert touched(pb.TelemetryCommand(settings=consumer)) == sub_both
    assert touched(pb.TelemetryCommand(thread_stack_trace=pb.ThreadStackTrace())) == []
    contexts = build_grpc(pb.QueryRouteRequest(topic=res("T")), ALICE, "10.0.0.1")
    assert [(c.username, c.source_ip, c.rpc_code) for c in contexts] == [
        (ALICE, "10.0.0.1", "apache.rocketmq.v2.QueryRouteRequest")]
    assert contexts[0].actions == (Action.PUB, Action.SUB)


@pytest.mark.parametrize(("message", "reason"), [
    (pb.SendMessageRequest(), "message is null."),
    (pb.SendMessageRequest(messages=[pb.Message()]), "topic is null."),
    (pb.ReceiveMessageRequest(group=res("G")), "messageQueue is null."),
    (pb.AckMessageRequest(topic=res("T")), "group is null."),
    (pb.QueryRouteRequest(), "topic is null."),
    (pb.TelemetryCommand(settings=pb.Settings()), "settings command doesn't have publishing or subscription."),
])
def test_a_request_without_the_resource_it_needs_is_refused(message: Any, reason: str) -> None:
    with pytest.raises(AuthorizationParseError) as refused:
        build_grpc(message, ALICE, "10.0.0.1")
    assert str(refused.value) == reason


# -- the decision ---------------------------------------------------------------------------------


@pytest.fixture
def pipeline(tmp_path: Path) -> AuthPipeline:
    manager = AuthMetadataManager(tmp_path)
    manager.load()
    manager.create_user(User.from_info({"username": ALICE, "password": ALICE_SECRET}))
    manager.create_acl(acl_from_info(ALICE_ACL, None))
    config = AuthConfig(authentication_enabled=True, authorization_enabled=True,
                        authentication_whitelist="apache.rocketmq.v2.QueryRouteRequest")
    return AuthPipeline(config, manager, "AuthCluster")


def send(topic: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(messages=[pb.Message(topic=res(topic), body=b"x")])


def test_the_pipeline_decides_grpc_requests_as_remoting_ones(pipeline: AuthPipeline) -> None:
    alice = metadata(ALICE, ALICE_SECRET)
    assert pipeline.grpc_reason(send(TOPIC), alice, "127.0.0.1", NOW) is None
    assert pipeline.grpc_reason(send(TOPIC), {}, "127.0.0.1", NOW) == "username cannot be null."
    assert pipeline.grpc_reason(send(TOPIC), metadata("ghost", "x"), "127.0.0.1", NOW) == "User:ghost is not found."
    assert pipeline.grpc_reason(send(TOPIC), metadata(ALICE, "wrong"), "127.0.0.1", NOW) == "check signature failed."
    assert pipeline.grpc_reason(send(OTHER_TOPIC), alice, "127.0.0.1", NOW) == (
        f"User:{ALICE} has no permission to access Topic:{OTHER_TOPIC} from 127.0.0.1, no matched policies.")
    # the authentication whitelist names gRPC requests by their message's full name
    assert pipeline.grpc_reason(pb.QueryRouteRequest(topic=res(TOPIC)), metadata(ALICE, "wrong"), "127.0.0.1",
                                NOW) is None
    assert (pipeline.allowed, pipeline.denied) == (2, 4)


# -- a broker process -----------------------------------------------------------------------------

AUTH_CONF = (
    "brokerClusterName=AuthCluster\nauthenticationEnabled=true\nauthorizationEnabled=true\n"
    f"initAuthenticationUser={json.dumps({'username': ROOT, 'password': ROOT_SECRET})}\n"
)


def as_root(client: RemotingClient, addr: str, code: int, ext: dict[str, str], info: dict[str, Any]) -> None:
    reply = client.invoke(addr, signed(code, ext, json.dumps(info).encode(), ROOT, ROOT_SECRET), timeout=10)
    assert reply.code == ResponseCode.SUCCESS, reply.remark


@pytest.fixture(scope="module", params=["native", "grpcio"])
def auth_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker with auth on, alice with ALICE_ACL, both topics; gRPC served by the native front or grpcio."""
    front = "" if request.param == "native" else "grpcNativeFront=false\n"
    with Broker(tmp_path_factory.mktemp(f"grpc-auth-{request.param}"), AUTH_CONF + front).running() as b:
        with RemotingClient() as client:
            as_root(client, b.addr, RequestCode.AUTH_CREATE_USER, {"username": ALICE},
                    {"username": ALICE, "password": ALICE_SECRET})
            as_root(client, b.addr, RequestCode.AUTH_CREATE_ACL, {"subject": f"User:{ALICE}"}, ALICE_ACL)
        with BrokerAdmin(b.addr, rpc_hook=AclClientRPCHook(SessionCredentials(ROOT, ROOT_SECRET))) as admin:
            for topic in (TOPIC, OTHER_TOPIC):
                admin.create_topic(topic, 1, 1)
        yield b


@pytest.fixture(scope="module")
def stub(auth_broker: Broker) -> Iterator[pb_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(auth_broker.grpc_endpoint) as channel:
        yield pb_grpc.MessagingServiceStub(channel)


def unauthorized(message: str) -> tuple[int, str]:
    return pb.UNAUTHORIZED, message


def message(topic: str, body: bytes) -> pb.Message:
    return pb.Message(topic=res(topic), body=body, system_properties=pb.SystemProperties(
        message_id=f"01{body.hex().upper():0>24}", body_encoding=pb.IDENTITY, message_type=pb.NORMAL))


def denied_count(broker: Broker) -> float:
    return next(float(line.split()[1]) for line in broker.metrics().splitlines()
                if line.startswith("rocketstore_auth_denied_requests_total "))


@pytest.mark.integration
def test_refusals_are_the_methods_response_with_status_unauthorized(auth_broker: Broker,
                                                                    stub: pb_grpc.MessagingServiceStub) -> None:
    alice = grpc_signed(ALICE, ALICE_SECRET)
    denied_before = denied_count(auth_broker)

    def status(answer: Any) -> tuple[int, str]:
        return answer.status.code, answer.status.message

    route = pb.QueryRouteRequest(topic=res(TOPIC))
    assert stub.QueryRoute(route, metadata=alice, timeout=10).status.code == pb.OK
    assert status(stub.QueryRoute(route, timeout=10)) == unauthorized("username cannot be null.")
    assert status(stub.QueryRoute(route, metadata=grpc_signed(ALICE, "not-her-secret"), timeout=10)) == \
        unauthorized("check signature failed.")
    assert status(stub.QueryRoute(route, metadata=grpc_signed("ghost", "x"), timeout=10)) == \
        unauthorized("User:ghost is not found.")
    stale = stub.QueryRoute(route, metadata=grpc_signed(ALICE, ALICE_SECRET, datetime.now(UTC) - timedelta(days=1)),
                            timeout=10)
    assert stale.status.code == pb.UNAUTHORIZED and "too old" in stale.status.message

    sent = stub.SendMessage(pb.SendMessageRequest(messages=[message(TOPIC, b"allowed")]), metadata=alice, timeout=10)
    assert [e.status.code for e in sent.entries] == [pb.OK], sent
    denied = stub.SendMessage(pb.SendMessageRequest(messages=[message(OTHER_TOPIC, b"denied")]), metadata=alice,
                              timeout=10)
    assert status(denied) == unauthorized(
        f"User:{ALICE} has no permission to access Topic:{OTHER_TOPIC} from 127.0.0.1, no matched policies.")
    assert not denied.entries

    # a receive refused: one response with the status, then the stream ends
    receive = pb.ReceiveMessageRequest(group=res("NotHerGroup"), message_queue=queue(TOPIC), batch_size=1,
                                       auto_renew=False)
    answers = list(stub.ReceiveMessage(receive, metadata=alice, timeout=10))
    assert [status(a) for a in answers] == [unauthorized(
        f"User:{ALICE} has no permission to access Group:NotHerGroup from 127.0.0.1, no matched policies.")]

    # the allowed user receives what she sent
    receive = pb.ReceiveMessageRequest(group=res(GROUP), message_queue=queue(TOPIC), batch_size=4,
                                       auto_renew=False)
    receive.invisible_duration.FromSeconds(30)
    receive.long_polling_timeout.FromSeconds(2)
    bodies = [a.message.body for a in stub.ReceiveMessage(receive, metadata=alice, timeout=20)
              if a.WhichOneof("content") == "message"]
    assert bodies == [b"allowed"]
    assert denied_count(auth_broker) - denied_before == 6  # counted with the remoting port's
    # and in the per-method call counts, by the status answered
    assert 'rocketstore_grpc_requests_total{code="UNAUTHORIZED",method="ReceiveMessage"} 1.0' in \
        auth_broker.metrics()


@pytest.mark.integration
def test_a_refused_telemetry_command_is_answered_and_ends_the_stream(stub: pb_grpc.MessagingServiceStub) -> None:
    def commands(topic: str) -> Iterator[pb.TelemetryCommand]:
        yield pb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[res(topic)])))

    allowed = stub.Telemetry(commands(TOPIC), metadata=grpc_signed(ALICE, ALICE_SECRET), timeout=10)
    assert next(allowed).status.code == pb.OK
    allowed.cancel()
    refused = list(stub.Telemetry(commands(OTHER_TOPIC), metadata=grpc_signed(ALICE, ALICE_SECRET), timeout=10))
    assert [(c.status.code, c.status.message) for c in refused] == [unauthorized(
        f"User:{ALICE} has no permission to access Topic:{OTHER_TOPIC} from 127.0.0.1, no matched policies.")]
