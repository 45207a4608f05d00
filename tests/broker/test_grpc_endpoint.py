"""The gRPC v2 endpoint of a broker process, called with the stubs generated from our own protocol:
status codes for bad requests, FIFO placement, timed delivery, receipt handles. The real 5.x
client's view is in tests/compat/python5/test_python_5x_client.py."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest
from broker_process import Broker
from polling import wait_until
from prometheus_client.parser import text_string_to_metric_families
from signed_requests import grpc_signed

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client.acl_hook import AclClientRPCHook, SessionCredentials
from rocketstore.client.admin import BrokerAdmin, MQAdmin
from rocketstore.client.remoting_client import RemotingError
from rocketstore.common.message import java_string_hash
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.store.config import ConfigError

pytestmark = pytest.mark.integration

TOPIC = "GrpcEndpoint"
QUEUES = 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    # segments large enough for the 3 MiB messages of the large-request test
    conf = ("minInvisibleTimeMillsForRecv=1000\nmappedFileSizeCommitLog=8388608\nenablePropertyFilter=true\n"
            # auto renew in seconds: an auto_renew receive is invisible 3 s, renewed by 3 s when
            # less than 2 s are left
            "defaultInvisibleTimeMills=3000\nrenewAheadTimeMillis=2000\nrenewSliceTimeMillis=3000\n")
    with Broker(tmp_path_factory.mktemp("grpc-endpoint"), conf).running() as b:
        with MQAdmin(b.namesrv) as admin:
            admin.create_topic(TOPIC, QUEUES, QUEUES)
        yield b


@pytest.fixture(scope="module")
def stub(broker: Broker) -> Iterator[pb_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        yield pb_grpc.MessagingServiceStub(channel)


def _message(body: bytes, **system: object) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=TOPIC), body=body, system_properties=pb.SystemProperties(
        message_id=f"id-{body.decode()}", body_encoding=pb.IDENTITY, **system))


def _receive(stub: pb_grpc.MessagingServiceStub, group: str, *, invisible_s: int = 30, polling_s: int = 1,
             batch: int = 32, topic: str = TOPIC, attempt_id: str | None = None) -> list[pb.ReceiveMessageResponse]:
    request = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=batch,
                                       message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
                                       attempt_id=attempt_id)
    request.invisible_duration.FromSeconds(invisible_s)
    request.long_polling_timeout.FromSeconds(polling_s)
    return list(stub.ReceiveMessage(request, timeout=polling_s + 5))


def _messages(responses: list[pb.ReceiveMessageResponse]) -> list[pb.Message]:
    return [r.message for r in responses if r.HasField("message")]


def _collect(stub: pb_grpc.MessagingServiceStub, group: str, want: Callable[[pb.Message], bool], count: int = 1,
             timeout: float = 15, **receive: Any) -> list[pb.Message]:
    """Receive until ``count`` wanted messages came (or ``timeout``): a sent message becomes visible
    once dispatch has indexed it, and a receive answers as soon as it has any message (a new group
    first gets everything sent to the topic before)."""
    found: list[pb.Message] = []
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        found += [m for m in _messages(_receive(stub, group, **receive)) if want(m)]
    return found


def _body(body: bytes) -> Callable[[pb.Message], bool]:
    return lambda m: m.body == body


def test_route_lists_every_queue_with_this_endpoint(stub: pb_grpc.MessagingServiceStub, broker: Broker) -> None:
    route = stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)))
    assert route.status.code == pb.OK
    assert [q.id for q in route.message_queues] == list(range(QUEUES))
    queue = route.message_queues[0]
    assert queue.permission == pb.READ_WRITE
    assert set(queue.accept_message_types) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
    assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [("127.0.0.1", broker.grpc_port)]


def test_route_lists_the_cluster_peers_at_their_hosts(tmp_path_factory: pytest.TempPathFactory) -> None:
    """clusterPeers brokers carry the same topics; each listens on the same gRPC port at its own host."""
    broker = Broker(tmp_path_factory.mktemp("grpc-peers"), "clusterPeers=broker-b@10.1.2.3:10911\n")
    with broker.running() as b, grpc.insecure_channel(b.grpc_endpoint) as channel:
        route = pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=5)
    brokers = {(q.broker.name, q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port)
               for q in route.message_queues}
    assert brokers == {("broker-a", "127.0.0.1", b.grpc_port), ("broker-b", "10.1.2.3", b.grpc_port)}
    assert len(route.message_queues) == 2 * 8


def test_route_advertises_the_external_grpc_ports_with_an_offset(tmp_path_factory: pytest.TempPathFactory) -> None:
    """grpcAdvertisedPortOffset (the operator's external access): this broker and each peer are
    listed at their advertised host on their remoting port plus the offset, not on the port this
    broker listens on, which clients outside the cluster cannot reach."""
    broker = Broker(tmp_path_factory.mktemp("grpc-external"),
                    "grpcAdvertisedPortOffset=1170\nclusterPeers=broker-b@198.51.100.9:30912\n",
                    publish_host="203.0.113.7")
    with broker.running() as b, grpc.insecure_channel(b.grpc_endpoint) as channel:
        route = pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=5)
    brokers = {(q.broker.name, q.broker.endpoints.scheme, q.broker.endpoints.addresses[0].host,
                q.broker.endpoints.addresses[0].port) for q in route.message_queues}
    assert brokers == {("broker-a", pb.IPv4, "203.0.113.7", b.listen_port + 1170),
                       ("broker-b", pb.IPv4, "198.51.100.9", 30912 + 1170)}


def test_an_offset_past_the_last_port_stops_the_start() -> None:
    config, _ = BrokerConfig.from_properties({"listenPort": "31000", "grpcAdvertisedPortOffset": "-30999"})
    assert config.grpc_advertised_port_offset == -30999
    for offset in ("34536", "-31000"):  # 65536 and 0 are not ports
        with pytest.raises(ConfigError) as err:
            BrokerConfig.from_properties({"listenPort": "31000", "grpcAdvertisedPortOffset": offset})
        assert err.value.key == "grpcAdvertisedPortOffset"


def test_route_drops_the_write_permission_the_name_server_wiped(tmp_path_factory: pytest.TempPathFactory) -> None:
    """WIPE_WRITE_PERM_OF_BROKER at the embedded name server (a drain) reaches 5.x clients too:
    the wiped group's queues are read-only in QueryRoute until ADD_WRITE_PERM_OF_BROKER."""
    broker = Broker(tmp_path_factory.mktemp("grpc-wiped"), "clusterPeers=broker-b@10.1.2.3:10911\n")
    with broker.running() as b, grpc.insecure_channel(b.grpc_endpoint) as channel, \
            MQAdmin(b.namesrv) as admin:
        stub = pb_grpc.MessagingServiceStub(channel)

        def permissions() -> dict[str, set[int]]:
            route = stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=5)
            out: dict[str, set[int]] = {}
            for q in route.message_queues:
                out.setdefault(q.broker.name, set()).add(q.permission)
            return out

        assert permissions() == {"broker-a": {pb.READ_WRITE}, "broker-b": {pb.READ_WRITE}}
        assert admin.wipe_write_perm("broker-b")[b.namesrv] > 0
        assert permissions() == {"broker-a": {pb.READ_WRITE}, "broker-b": {pb.READ}}
        admin.add_write_perm("broker-b")
        assert permissions() == {"broker-a": {pb.READ_WRITE}, "broker-b": {pb.READ_WRITE}}


def test_unknown_topic_and_bad_requests_get_v2_codes(stub: pb_grpc.MessagingServiceStub) -> None:
    assert stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"))).status.code \
        == pb.TOPIC_NOT_FOUND
    assert stub.QueryRoute(pb.QueryRouteRequest()).status.code == pb.ILLEGAL_TOPIC
    assert _receive(stub, "G", topic="NoSuchTopic")[0].status.code == pb.TOPIC_NOT_FOUND
    assert _receive(stub, "G", invisible_s=0)[0].status.code == pb.ILLEGAL_INVISIBLE_TIME
    assert _receive(stub, "")[0].status.code == pb.ILLEGAL_CONSUMER_GROUP
    sent = stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"")]))
    assert sent.entries[0].status.code == pb.MESSAGE_BODY_EMPTY
    reserved = _message(b"r")
    reserved.user_properties["UNIQ_KEY"] = "x"
    assert stub.SendMessage(pb.SendMessageRequest(messages=[reserved])).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY
    ack = stub.AckMessage(pb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name=TOPIC),
                                               entries=[pb.AckMessageEntry(receipt_handle="forged")]))
    assert ack.status.code == pb.INVALID_RECEIPT_HANDLE


def test_a_send_of_several_messages_answers_each_and_sums_them_up(stub: pb_grpc.MessagingServiceStub) -> None:
    """Each message gets its own entry, in order; the top-level status is theirs when they agree,
    else MULTIPLE_RESULTS (a refused message does not stop the ones after it)."""
    both = stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"m1"), _message(b"m2")]))
    assert both.status.code == pb.OK and both.status.message == "OK"
    assert [(e.status.code, e.message_id) for e in both.entries] == [(pb.OK, "id-m1"), (pb.OK, "id-m2")]
    mixed = stub.SendMessage(pb.SendMessageRequest(messages=[_message(b""), _message(b"m3")]))
    assert mixed.status.code == pb.MULTIPLE_RESULTS
    empty, stored = mixed.entries
    assert (empty.status.code, empty.message_id) == (pb.MESSAGE_BODY_EMPTY, "id-")
    assert "empty" in empty.status.message
    assert (stored.status.code, stored.message_id) == (pb.OK, "id-m3")
    assert stored.offset >= 0


def test_undecodable_protobuf_is_refused_and_the_endpoint_keeps_serving(broker: Broker,
                                                                        stub: pb_grpc.MessagingServiceStub) -> None:
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        raw = channel.unary_unary("/apache.rocketmq.v2.MessagingService/QueryRoute")
        with pytest.raises(grpc.RpcError) as error:
            raw(b"\xff\xff\xff\xff", timeout=5)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "apache.rocketmq.v2.QueryRouteRequest" in (error.value.details() or "")
    assert stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))).status.code == pb.OK


def test_a_method_not_served_yet_is_unimplemented(stub: pb_grpc.MessagingServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as error:
        stub.RecallMessage(pb.RecallMessageRequest(), timeout=5)
    assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED


def _end(stub: pb_grpc.MessagingServiceStub, message_id: str, transaction_id: str,
         resolution: pb.TransactionResolution) -> pb.Status:
    response: pb.EndTransactionResponse = stub.EndTransaction(pb.EndTransactionRequest(
        topic=pb.Resource(name=TOPIC), message_id=message_id, transaction_id=transaction_id, resolution=resolution,
        source=pb.SOURCE_CLIENT), timeout=5)
    return response.status


def test_a_transactional_message_waits_for_its_commit(stub: pb_grpc.MessagingServiceStub) -> None:
    """A TRANSACTION send stores a half message (not delivered); EndTransaction COMMIT delivers it,
    ROLLBACK never; an id that names no half message of the topic is refused."""
    sent = stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"txn-commit", message_type=pb.TRANSACTION),
                                                            _message(b"txn-rollback", message_type=pb.TRANSACTION)]))
    assert sent.status.code == pb.OK
    commit, rollback = sent.entries
    assert commit.transaction_id and rollback.transaction_id and commit.transaction_id != rollback.transaction_id
    _receive(stub, "GroupTxn", polling_s=0)  # the group starts here
    assert not _collect(stub, "GroupTxn", lambda m: m.body.startswith(b"txn-"), timeout=2)
    assert _end(stub, rollback.message_id, commit.transaction_id, pb.TRANSACTION_RESOLUTION_UNSPECIFIED).code \
        == pb.BAD_REQUEST
    assert _end(stub, "x", "not-an-id", pb.COMMIT).code == pb.INVALID_TRANSACTION_ID
    other_topic = stub.EndTransaction(pb.EndTransactionRequest(
        topic=pb.Resource(name="OtherTopic"), message_id=commit.message_id, transaction_id=commit.transaction_id,
        resolution=pb.COMMIT, source=pb.SOURCE_CLIENT), timeout=5).status
    assert other_topic.code == pb.INVALID_TRANSACTION_ID and "producer group" in other_topic.message
    assert _end(stub, rollback.message_id, rollback.transaction_id, pb.ROLLBACK).code == pb.OK
    assert _end(stub, commit.message_id, commit.transaction_id, pb.COMMIT).code == pb.OK
    received = _collect(stub, "GroupTxn", lambda m: m.body.startswith(b"txn-"), count=2, timeout=4)
    assert [m.body for m in received] == [b"txn-commit"]
    assert received[0].system_properties.message_type == pb.TRANSACTION
    assert received[0].system_properties.message_id == "id-txn-commit"


def test_a_producers_telemetry_stream_joins_its_topics_producer_group(broker: Broker,
                                                                      stub: pb_grpc.MessagingServiceStub) -> None:
    """Where the transaction check looks for a producer: listed (as admin tools show it) while its
    stream is open, gone once the client ends it."""
    done = threading.Event()

    def commands() -> Iterator[pb.TelemetryCommand]:
        yield pb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(
            topics=[pb.Resource(name=TOPIC)])))
        done.wait(30)

    stream = stub.Telemetry(commands(), timeout=30, metadata=[("x-mq-client-id", "py-producer-1"),
                                                               ("x-mq-language", "GOLANG")])
    try:
        assert next(stream).status.code == pb.OK
        with BrokerAdmin(broker.addr) as admin:
            [connection] = admin.producer_connection(TOPIC)
        assert (connection.client_id, connection.language, connection.version) == ("py-producer-1", "GO", 413)
    finally:
        done.set()
    assert list(stream) == []  # the client ended its side: the broker ends the stream
    with BrokerAdmin(broker.addr) as admin, pytest.raises(RemotingError, match="not exist"):
        admin.producer_connection(TOPIC)


def _renewed_receive(stub: pb_grpc.MessagingServiceStub, group: str, client_id: str,
                     body: bytes) -> pb.Message:
    """The message ``body`` received with auto_renew (as a push consumer receives) by ``client_id``."""
    request = pb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=32, auto_renew=True,
                                       message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC)))
    request.long_polling_timeout.FromSeconds(1)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        responses = stub.ReceiveMessage(request, timeout=6, metadata=[("x-mq-client-id", client_id)])
        found = [m for m in _messages(list(responses)) if m.body == body]
        if found:
            return found[0]
    raise AssertionError(f"{body!r} never arrived")


def test_auto_renew_keeps_a_message_invisible_until_its_client_acks(stub: pb_grpc.MessagingServiceStub,
                                                                   broker: Broker) -> None:
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"renewed")])).status.code == pb.OK
    received = _renewed_receive(stub, "GroupRenew", "client-renew", b"renewed")
    assert received.system_properties.invisible_duration.ToMilliseconds() == 3000
    # three times its invisible time: without renewal it would have come back twice by now
    assert not _collect(stub, "GroupRenew", _body(b"renewed"), timeout=9, invisible_s=30)
    [renewals] = [float(line.split()[1]) for line in broker.metrics().splitlines()
                  if line.startswith("rocketstore_pop_auto_renewals_total ")]
    assert renewals >= 2
    # the client acks with the handle it received, which the renewals replaced
    ack = stub.AckMessage(pb.AckMessageRequest(group=pb.Resource(name="GroupRenew"), topic=pb.Resource(name=TOPIC),
                                               entries=[pb.AckMessageEntry(
                                                   message_id=received.system_properties.message_id,
                                                   receipt_handle=received.system_properties.receipt_handle)]))
    assert ack.entries[0].status.code == pb.OK, ack
    assert not _collect(stub, "GroupRenew", _body(b"renewed"), timeout=5, invisible_s=30)


def test_a_terminating_client_releases_what_the_broker_renews_for_it(stub: pb_grpc.MessagingServiceStub) -> None:
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"released")])).status.code == pb.OK
    _renewed_receive(stub, "GroupRelease", "client-gone", b"released")
    ended = stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(group=pb.Resource(name="GroupRelease")),
                                         metadata=[("x-mq-client-id", "client-gone")], timeout=5)
    assert ended.status.code == pb.OK
    started = time.monotonic()
    again = _collect(stub, "GroupRelease", _body(b"released"), timeout=5, invisible_s=30)
    assert again and again[0].system_properties.delivery_attempt == 2
    assert time.monotonic() - started < 2.5  # visible a second after the client left, not after 3 s


def test_a_body_digest_is_upper_case_md5(stub: pb_grpc.MessagingServiceStub) -> None:
    """As RocketMQ's proxy sends it, and every client checks it alike (a CRC32 digest with a leading
    zero, as b"again-0" has, is formatted differently by the Java and the Python client)."""
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"again-0")])).status.code == pb.OK
    received = _collect(stub, "GroupDigest", _body(b"again-0"))
    assert received[0].system_properties.body_digest == pb.Digest(
        type=pb.MD5, checksum=hashlib.md5(b"again-0").hexdigest().upper())


def test_a_fifo_group_stays_in_one_queue(stub: pb_grpc.MessagingServiceStub) -> None:
    messages = [_message(f"fifo-{i}".encode(), message_group="order-42", message_type=pb.FIFO) for i in range(6)]
    assert stub.SendMessage(pb.SendMessageRequest(messages=messages)).status.code == pb.OK
    received = _collect(stub, "GroupFifo", lambda m: m.body.startswith(b"fifo-"), 6)
    assert len(received) == 6
    assert {m.system_properties.queue_id for m in received} == {java_string_hash("order-42") % QUEUES}
    assert {m.system_properties.message_group for m in received} == {"order-42"}


def test_a_delivery_timestamp_holds_the_message_until_then(stub: pb_grpc.MessagingServiceStub) -> None:
    timed = _message(b"timed", message_type=pb.DELAY)
    due_ms = int(time.time() * 1000) + 3000
    timed.system_properties.delivery_timestamp.FromMilliseconds(due_ms)
    assert stub.SendMessage(pb.SendMessageRequest(messages=[timed])).status.code == pb.OK
    _receive(stub, "GroupTimed", polling_s=0)  # the group starts here: everything earlier is taken now
    deadline = time.monotonic() + 15
    found: list[pb.Message] = []
    while not found and time.monotonic() < deadline:
        found = [m for m in _messages(_receive(stub, "GroupTimed", polling_s=1)) if m.body == b"timed"]
    assert found, "the timed message never arrived"
    assert time.time() * 1000 >= due_ms - 50
    assert found[0].system_properties.delivery_timestamp.ToMilliseconds() == due_ms


def test_a_stale_receipt_handle_cannot_ack_a_redelivered_message(stub: pb_grpc.MessagingServiceStub) -> None:
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"stale")])).status.code == pb.OK
    group = pb.Resource(name="GroupStale")
    first = _collect(stub, "GroupStale", _body(b"stale"), invisible_s=1)
    old_handle = first[0].system_properties.receipt_handle
    second = _collect(stub, "GroupStale", _body(b"stale"))  # once its invisible second has passed
    assert second[0].system_properties.delivery_attempt == 2
    topic = pb.Resource(name=TOPIC)
    stale = stub.AckMessage(pb.AckMessageRequest(group=group, topic=topic,
                                                 entries=[pb.AckMessageEntry(receipt_handle=old_handle)]))
    assert stale.status.code == pb.INVALID_RECEIPT_HANDLE
    current = pb.AckMessageEntry(receipt_handle=second[0].system_properties.receipt_handle)
    assert stub.AckMessage(pb.AckMessageRequest(group=group, topic=topic, entries=[current])).status.code == pb.OK


def test_with_acl_calls_are_checked_against_the_plain_acl(tmp_path_factory: pytest.TempPathFactory) -> None:
    """aclEnable: a signed call of an account with the permission is served; a wrong secret, a stale
    date or no signature is UNAUTHENTICATED; a send without PUB on the topic is PERMISSION_DENIED."""
    tmp = tmp_path_factory.mktemp("grpc-acl")
    (tmp / "conf").mkdir()
    (tmp / "conf" / "plain_acl.yml").write_text(
        "accounts:\n"
        "- {accessKey: GrpcWriter, secretKey: writer-secret, defaultTopicPerm: DENY, defaultGroupPerm: SUB,"
        " topicPerms: [AclTopic=PUB|SUB]}\n"
        "- {accessKey: GrpcReader, secretKey: reader-secret, defaultTopicPerm: DENY, topicPerms: [AclTopic=SUB]}\n"
        "- {accessKey: GrpcAdmin1, secretKey: admin-secret, admin: true}\n")
    b = Broker(tmp, f"aclEnable=true\nrocketmqHome={tmp}\n")
    b.start()
    try:
        with BrokerAdmin(b.addr, rpc_hook=AclClientRPCHook(SessionCredentials("GrpcAdmin1", "admin-secret"))) as admin:
            admin.create_topic("AclTopic", 1, 1)
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            route = pb.QueryRouteRequest(topic=pb.Resource(name="AclTopic"))
            send = pb.SendMessageRequest(messages=[pb.Message(
                topic=pb.Resource(name="AclTopic"), body=b"x",
                system_properties=pb.SystemProperties(message_id="01ACL", body_encoding=pb.IDENTITY))])

            def refused(call: Callable[..., Any], request: Any, metadata: list[tuple[str, str]]) -> grpc.RpcError:
                with pytest.raises(grpc.RpcError) as error:
                    call(request, metadata=metadata, timeout=5)
                return error.value

            writer = grpc_signed("GrpcWriter", "writer-secret")
            assert stub.QueryRoute(route, metadata=writer, timeout=5).status.code == pb.OK
            sent = stub.SendMessage(send, metadata=grpc_signed("GrpcWriter", "writer-secret"), timeout=5)
            assert [entry.status.code for entry in sent.entries] == [pb.OK]

            wrong = refused(stub.QueryRoute, route, grpc_signed("GrpcWriter", "not-the-secret"))
            assert (wrong.code(), wrong.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                       "Check signature failed for accessKey=GrpcWriter")
            unknown = refused(stub.QueryRoute, route, grpc_signed("Stranger1", "whatever-secret"))
            assert (unknown.code(), unknown.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                           "No acl config for Stranger1")
            stale = refused(stub.QueryRoute, route, grpc_signed("GrpcWriter", "writer-secret",
                                                           datetime.now(UTC) - timedelta(days=1)))
            assert stale.code() == grpc.StatusCode.UNAUTHENTICATED and "too old" in (stale.details() or "")
            unsigned = refused(stub.QueryRoute, route, [])
            assert (unsigned.code(), unsigned.details()) == (grpc.StatusCode.UNAUTHENTICATED,
                                                             "No accessKey is configured")
            denied = refused(stub.SendMessage, send, grpc_signed("GrpcReader", "reader-secret"))
            assert (denied.code(), denied.details()) == (grpc.StatusCode.PERMISSION_DENIED,
                                                         "No default permission for topic:AclTopic")
            # an admin account without resource lists owns every topic
            assert stub.SendMessage(send, metadata=grpc_signed("GrpcAdmin1", "admin-secret"), timeout=5) \
                .entries[0].status.code == pb.OK
        assert "rocketstore_acl_denied_requests_total 5" in b.metrics()
    finally:
        b.stop()


def test_a_second_broker_on_the_same_grpc_port_fails_to_start(broker: Broker,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """grpc would share the port (SO_REUSEPORT) and split the clients between two brokers."""
    tmp = tmp_path_factory.mktemp("grpc-port-taken")
    second = Broker(tmp)
    second.conf.write_text(second.conf.read_text() + f"grpcListenPort={broker.grpc_port}\n")
    with pytest.raises(AssertionError, match="broker not ready"):
        second.start()
    assert "grpcListenPort: cannot listen on" in second.log_text()


def test_open_telemetry_streams_do_not_hold_up_a_stop(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A 5.x client keeps its Telemetry stream open for good; the broker ends it when it stops
    instead of waiting out its 10 s grace period."""
    b = Broker(tmp_path_factory.mktemp("grpc-stop"))
    b.start()
    done = threading.Event()

    def commands() -> Iterator[pb.TelemetryCommand]:
        yield pb.TelemetryCommand(settings=pb.Settings(client_type=pb.PRODUCER))
        done.wait(60)  # the client's side of the stream stays open

    try:
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            stream = pb_grpc.MessagingServiceStub(channel).Telemetry(commands(), timeout=60)
            first = next(stream)
            assert first.status.code == pb.OK and first.settings.publishing.max_body_size > 0
            started = time.monotonic()
            assert b.stop() == 0
            assert time.monotonic() - started < 5, b.log_text()[-2000:]
    finally:
        done.set()


def test_the_last_delivery_attempt_moves_a_message_to_its_dlq(stub: pb_grpc.MessagingServiceStub,
                                                               broker: Broker) -> None:
    """retryMaxTimes=1: two deliveries, then %DLQ%group instead of a third."""
    with MQAdmin(broker.namesrv) as admin:
        admin.broker(broker.addr).create_subscription_group(SubscriptionGroupConfig(group_name="GroupDlq",
                                                                                    retry_max_times=1))
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"dlq")])).status.code == pb.OK
    found = _collect(stub, "GroupDlq", _body(b"dlq"), 2, invisible_s=1, polling_s=3)
    assert [m.system_properties.delivery_attempt for m in found] == [1, 2]
    # when the second delivery's invisible time has passed, the next receive dead-letters the message
    # instead of delivering it a third time
    dead_lettered = _sample(broker.metrics(), "rocketstore_pop_dead_lettered_total")
    third: list[pb.Message] = []

    def receive_until_dead_lettered() -> bool:
        third.extend(m for m in _messages(_receive(stub, "GroupDlq")) if m.body == b"dlq")
        return bool(third) or _sample(broker.metrics(), "rocketstore_pop_dead_lettered_total") > dead_lettered

    wait_until("the message dead-lettered", receive_until_dead_lettered, timeout=15, interval=0.05)
    assert third == []
    dead = _collect(stub, "DlqReader", _body(b"dlq"), topic="%DLQ%GroupDlq")
    assert len(dead) == 1 and dead[0].system_properties.message_id == "id-dlq"


def test_a_client_can_forward_a_message_to_the_dlq(stub: pb_grpc.MessagingServiceStub) -> None:
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"fwd")])).status.code == pb.OK
    found = _collect(stub, "GroupFwd", _body(b"fwd"))
    request = pb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="GroupFwd"), topic=pb.Resource(name=TOPIC),
        receipt_handle=found[0].system_properties.receipt_handle, delivery_attempt=1, max_delivery_attempts=1)
    assert stub.ForwardMessageToDeadLetterQueue(request).status.code == pb.OK
    assert stub.ForwardMessageToDeadLetterQueue(request).status.code == pb.INVALID_RECEIPT_HANDLE  # done already
    assert len(_collect(stub, "DlqReader", _body(b"fwd"), topic="%DLQ%GroupFwd")) == 1


def test_a_retried_receive_gets_what_its_first_attempt_took(stub: pb_grpc.MessagingServiceStub) -> None:
    """Same attempt_id (the client retries a receive whose answer it lost): the same deliveries."""
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"retry")])).status.code == pb.OK
    assert _collect(stub, "GroupRetry", _body(b"retry"))  # the group starts: everything up to here is taken
    assert stub.SendMessage(pb.SendMessageRequest(messages=[_message(b"retry-2")])).status.code == pb.OK
    first = _collect(stub, "GroupRetry", _body(b"retry-2"), attempt_id="attempt-1")
    assert [m.body for m in first] == [b"retry-2"]
    again = _messages(_receive(stub, "GroupRetry", attempt_id="attempt-1"))
    assert [(m.body, m.system_properties.receipt_handle) for m in again] == \
        [(b"retry-2", first[0].system_properties.receipt_handle)]
    assert _messages(_receive(stub, "GroupRetry", attempt_id="attempt-2", polling_s=0)) == []


def test_the_largest_message_fits_the_request_limit(broker: Broker, stub: pb_grpc.MessagingServiceStub) -> None:
    """A body of maxMessageSize (4 MiB, grpc's own default request limit) with 16 KiB of user
    properties fits the limit maxMessageSize sets (transport_limits.py); two 3 MiB bodies in one
    request do not (the store bounds a remoting batch's whole body by maxMessageSize too)."""
    body = b"\x01" * (4 * 1024 * 1024)
    properties = {f"k{i}": "v" * 100 for i in range(160)}
    message = pb.Message(topic=pb.Resource(name=TOPIC), body=body, user_properties=properties,
                         system_properties=pb.SystemProperties(message_id="id-big", body_encoding=pb.IDENTITY))
    assert stub.SendMessage(pb.SendMessageRequest(messages=[message]), timeout=30).status.code == pb.OK
    # a response as large takes more than grpc's default limit on the client's side too
    with grpc.insecure_channel(broker.grpc_endpoint, options=[("grpc.max_receive_message_length", -1)]) as channel:
        received = _collect(pb_grpc.MessagingServiceStub(channel), "GroupBig",
                            lambda m: m.system_properties.message_id == "id-big", 1)
    assert [m.body for m in received] == [body]
    batch = [pb.Message(topic=pb.Resource(name=TOPIC), body=bytes([i]) * (3 * 1024 * 1024)) for i in (1, 2)]
    with pytest.raises(grpc.RpcError) as refused:
        stub.SendMessage(pb.SendMessageRequest(messages=batch), timeout=30)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_store_that_lost_its_tail_does_not_make_new_messages_skipped(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The pop log remembers offsets the store no longer has (here: its message files removed while
    it was down, as a power loss can take their unsynced tail): new messages reuse those offsets
    and must still be delivered, not skipped as if already received."""
    b = Broker(tmp_path_factory.mktemp("grpc-lost-tail"), "minInvisibleTimeMillsForRecv=1000\n")
    b.start()
    try:
        with MQAdmin(b.namesrv) as admin:
            admin.create_topic("LostTail", 1, 1)
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            old = [pb.Message(topic=pb.Resource(name="LostTail"), body=f"old-{i}".encode()) for i in range(3)]
            assert stub.SendMessage(pb.SendMessageRequest(messages=old)).status.code == pb.OK
            assert len(_collect(stub, "GroupLost", lambda m: True, 3, topic="LostTail")) == 3
        b.stop()
        for name in ("commitlog", "consumequeue", "index", "checkpoint"):
            path = b.store / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        b.start()
        with grpc.insecure_channel(b.grpc_endpoint) as channel:
            stub = pb_grpc.MessagingServiceStub(channel)
            new = pb.Message(topic=pb.Resource(name="LostTail"), body=b"new-0")
            assert stub.SendMessage(pb.SendMessageRequest(messages=[new])).status.code == pb.OK
            assert [m.body for m in _collect(stub, "GroupLost", lambda m: True, topic="LostTail")] == [b"new-0"]
        assert "the store lost its tail" in b.log_text()
    finally:
        b.stop()


def _queue(topic: str, queue_id: int) -> pb.MessageQueue:
    return pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id)


def _ack(stub: pb_grpc.MessagingServiceStub, group: str, topic: str, *messages: pb.Message) -> None:
    entries = [pb.AckMessageEntry(message_id=m.system_properties.message_id,
                                  receipt_handle=m.system_properties.receipt_handle) for m in messages]
    answer = stub.AckMessage(pb.AckMessageRequest(group=pb.Resource(name=group), topic=pb.Resource(name=topic),
                                                  entries=entries))
    assert answer.status.code == pb.OK, answer


def _settings_of(stub: pb_grpc.MessagingServiceStub, group: str) -> pb.Settings:
    command = pb.TelemetryCommand(settings=pb.Settings(
        client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group))))
    stream = stub.Telemetry(iter([command]), timeout=5)
    answer = next(stream)
    stream.cancel()
    return answer.settings


def test_a_fifo_group_gets_a_queue_in_order_one_batch_at_a_time(stub: pb_grpc.MessagingServiceStub,
                                                                 broker: Broker) -> None:
    """consumeMessageOrderly: nothing after a queue's messages in flight until they are acked, and a
    nacked one comes back before anything after it; a group without the flag is not held."""
    topic = "GrpcOrderly"
    with MQAdmin(broker.namesrv) as admin:
        admin.create_topic(topic, QUEUES, QUEUES)
        admin.broker(broker.addr).create_subscription_group(
            SubscriptionGroupConfig(group_name="GroupOrderly", consume_message_orderly=True))
    assert _settings_of(stub, "GroupOrderly").subscription.fifo
    assert not _settings_of(stub, "GroupConcurrent").subscription.fifo
    messages = [pb.Message(topic=pb.Resource(name=topic), body=f"o-{i}".encode(), system_properties=pb.SystemProperties(
        message_id=f"id-o-{i}", body_encoding=pb.IDENTITY, message_group="order-7", message_type=pb.FIFO))
        for i in range(5)]
    assert stub.SendMessage(pb.SendMessageRequest(messages=messages)).status.code == pb.OK
    # a send is answered once stored; receives see a message once dispatch has indexed it, maybe a moment
    # later. A FIFO group that got only o-0 would then (rightly) wait for its ack before o-1: let all five
    # be visible first, so that the batches below are whole
    with BrokerAdmin(broker.addr) as admin:
        wait_until("the five messages dispatched", lambda: sum(q.max_offset for q in admin.topic_stats(topic)) == 5,
                   timeout=10, interval=0.05)

    def bodies(group: str, polling_s: int = 0) -> list[bytes]:
        return [m.body for m in _messages(_receive(stub, group, batch=2, topic=topic, polling_s=polling_s))]

    first = _collect(stub, "GroupOrderly", lambda m: True, 2, topic=topic, batch=2)
    assert [m.body for m in first] == [b"o-0", b"o-1"]
    assert bodies("GroupOrderly") == []  # held: o-0 and o-1 are in flight
    assert bodies("GroupConcurrent", polling_s=3) == [b"o-0", b"o-1"]
    assert bodies("GroupConcurrent") == [b"o-2", b"o-3"]  # not held
    _ack(stub, "GroupOrderly", topic, first[0])
    assert bodies("GroupOrderly") == []  # o-1 still in flight
    nack = stub.ChangeInvisibleDuration(pb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="GroupOrderly"), topic=pb.Resource(name=topic),
        receipt_handle=first[1].system_properties.receipt_handle, message_id="id-o-1"))
    assert nack.status.code == pb.OK
    again = _messages(_receive(stub, "GroupOrderly", batch=2, topic=topic, polling_s=2))
    assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"o-1", 2)]
    _ack(stub, "GroupOrderly", topic, *again)
    rest = _collect(stub, "GroupOrderly", lambda m: True, 2, topic=topic, batch=2)
    assert [m.body for m in rest] == [b"o-2", b"o-3"]


def test_offset_based_pull_get_query_and_update_offsets(stub: pb_grpc.MessagingServiceStub, broker: Broker) -> None:
    """PullMessage reads a queue from the offset the client names (long polling at its end);
    UpdateOffset commits the group's offset, which GetOffset reads and a pop receive continues from."""
    topic, group = "GrpcPull", "GroupPull"
    with MQAdmin(broker.namesrv) as admin:
        admin.create_topic(topic, 2, 2)
    queue_id = java_string_hash("pull") % 2
    queue = _queue(topic, queue_id)

    def send(*bodies: str) -> None:
        messages = [pb.Message(topic=pb.Resource(name=topic), body=b.encode(), system_properties=pb.SystemProperties(
            message_id=f"id-{b}", body_encoding=pb.IDENTITY, message_group="pull", message_type=pb.FIFO))
            for b in bodies]
        assert stub.SendMessage(pb.SendMessageRequest(messages=messages)).status.code == pb.OK

    def pull(offset: int, batch: int = 32, polling_ms: int = 0) -> tuple[int, list[bytes], int]:
        request = pb.PullMessageRequest(group=pb.Resource(name=group), message_queue=queue, offset=offset,
                                        batch_size=batch)
        request.long_polling_timeout.FromMilliseconds(polling_ms)
        responses = list(stub.PullMessage(request, timeout=polling_ms / 1000 + 5))
        assert responses[0].HasField("status") and responses[-1].HasField("next_offset")
        return responses[0].status.code, [r.message.body for r in responses if r.HasField("message")], \
            responses[-1].next_offset

    def query(policy: int, **extra: Any) -> int:
        answer = stub.QueryOffset(pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=policy, **extra))
        assert answer.status.code == pb.OK, answer
        return answer.offset

    assert (query(pb.BEGINNING), query(pb.END)) == (0, 0)
    send("p-0", "p-1", "p-2", "p-3", "p-4")
    wait_until("the five messages dispatched", lambda: query(pb.END) >= 5, timeout=10, interval=0.05)
    assert (query(pb.BEGINNING), query(pb.END)) == (0, 5)
    assert pull(0, batch=3) == (pb.OK, [b"p-0", b"p-1", b"p-2"], 3)
    assert pull(3) == (pb.OK, [b"p-3", b"p-4"], 5)
    assert pull(5) == (pb.MESSAGE_NOT_FOUND, [], 5)
    later = threading.Timer(1.0, send, ("p-5",))
    later.start()
    started = time.monotonic()
    assert pull(5, polling_ms=8000) == (pb.OK, [b"p-5"], 6)
    assert time.monotonic() - started < 6  # answered when p-5 arrived, not at the end of the polling
    later.join()
    code, bodies, next_offset = pull(99)
    assert (code, bodies, next_offset) == (pb.ILLEGAL_OFFSET, [], 6)
    by_time = pb.QueryOffsetRequest(message_queue=queue, query_offset_policy=pb.TIMESTAMP)
    by_time.timestamp.FromMilliseconds(int(time.time() * 1000) - 3_600_000)
    assert stub.QueryOffset(by_time).offset == 0
    by_time.timestamp.FromMilliseconds(int(time.time() * 1000) + 60_000)
    assert stub.QueryOffset(by_time).offset == 5  # past the newest: its offset, as RocketMQ answers

    get = pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=queue)
    assert stub.GetOffset(get).status.code == pb.OFFSET_NOT_FOUND
    update = pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=queue, offset=4)
    assert stub.UpdateOffset(update).status.code == pb.OK
    assert (stub.GetOffset(get).status.code, stub.GetOffset(get).offset) == (pb.OK, 4)
    received = _collect(stub, group, lambda m: True, 2, topic=topic)
    assert sorted(m.body for m in received) == [b"p-4", b"p-5"]  # pop continues from the committed offset
    too_far = pb.UpdateOffsetRequest(group=pb.Resource(name=group), message_queue=queue, offset=99)
    assert stub.UpdateOffset(too_far).status.code == pb.ILLEGAL_OFFSET
    assert stub.GetOffset(pb.GetOffsetRequest(group=pb.Resource(name=group), message_queue=_queue(topic, 7))) \
        .status.code == pb.BAD_REQUEST
    assert stub.GetOffset(pb.GetOffsetRequest(group=pb.Resource(name="NoSuchGroup"), message_queue=queue)) \
        .status.code == pb.OFFSET_NOT_FOUND  # autoCreateSubscriptionGroup (on by default) made the group


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one series of a /metrics page (0 when it is absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_calls_are_counted_by_method_and_outcome(stub: pb_grpc.MessagingServiceStub, broker: Broker) -> None:
    """/metrics counts calls by the v2 code of their answer (or the gRPC code of a refusal) and times them."""
    before = broker.metrics()
    assert stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"))).status.code \
        == pb.TOPIC_NOT_FOUND
    assert stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC))).status.code == pb.OK
    assert _receive(stub, "GroupMetrics", topic="NoSuchTopic")[0].status.code == pb.TOPIC_NOT_FOUND
    with grpc.insecure_channel(broker.grpc_endpoint) as channel, pytest.raises(grpc.RpcError):
        channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage")(b"\xff\xff", timeout=5)
    requests = "rocketstore_grpc_requests_total"

    def grew_in(after: str, name: str, **labels: str) -> float:
        return _sample(after, name, **labels) - _sample(before, name, **labels)

    # an aborted call is counted once the abort has ended the call on the server, which can be
    # after the client has its status (a CI run read /metrics in between)
    def counted() -> str | None:
        page = broker.metrics()
        return page if grew_in(page, requests, method="SendMessage", code="INVALID_ARGUMENT") else None

    after = wait_until("the aborted SendMessage counted", counted, 10)

    def grew(name: str, **labels: str) -> float:
        return grew_in(after, name, **labels)

    assert grew(requests, method="QueryRoute", code="TOPIC_NOT_FOUND") == 1
    assert grew(requests, method="QueryRoute", code="OK") == 1
    assert grew(requests, method="ReceiveMessage", code="TOPIC_NOT_FOUND") == 1
    assert grew(requests, method="SendMessage", code="INVALID_ARGUMENT") == 1
    assert grew("rocketstore_grpc_request_latency_seconds_count", method="QueryRoute") == 2


def test_sql92_filters_select_by_properties_on_receive_and_pull(stub: pb_grpc.MessagingServiceStub,
                                                               broker: Broker) -> None:
    """A SQL92 expression (enablePropertyFilter) delivers only the messages whose properties match;
    one that does not parse is ILLEGAL_FILTER_EXPRESSION."""
    topic = "GrpcSql"
    with MQAdmin(broker.namesrv) as admin:
        admin.create_topic(topic, 1, 1)
    messages = [pb.Message(topic=pb.Resource(name=topic), body=f"{color}-{i}".encode(),
                           user_properties={"color": color, "n": str(i)},
                           system_properties=pb.SystemProperties(message_id=f"id-sql-{i}", body_encoding=pb.IDENTITY))
                for i, color in enumerate(["red", "blue", "red", "green", "red"])]
    assert stub.SendMessage(pb.SendMessageRequest(messages=messages)).status.code == pb.OK

    def receive(expression: str) -> list[pb.ReceiveMessageResponse]:
        request = pb.ReceiveMessageRequest(group=pb.Resource(name="GroupSql"), batch_size=32,
                                           message_queue=_queue(topic, 0),
                                           filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression))
        request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromSeconds(2)
        return list(stub.ReceiveMessage(request, timeout=10))

    red = [m.body for m in _messages(receive("color = 'red' AND n > 0"))]
    assert red == [b"red-2", b"red-4"]
    assert receive("color = = 'red'")[0].status.code == pb.ILLEGAL_FILTER_EXPRESSION
    pull = pb.PullMessageRequest(group=pb.Resource(name="GroupSqlPull"), message_queue=_queue(topic, 0), offset=0,
                                 batch_size=32, filter_expression=pb.FilterExpression(type=pb.SQL,
                                                                                      expression="color <> 'red'"))
    responses = list(stub.PullMessage(pull, timeout=10))
    assert [r.message.body for r in responses if r.HasField("message")] == [b"blue-1", b"green-3"]
    assert responses[-1].next_offset == 5

