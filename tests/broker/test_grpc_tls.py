"""TLS on the gRPC v2 port of a broker process (grpc_v2/server.py), called with the stubs generated
from our own protocol: ``tls.server.mode=enforcing`` serves TLS only with the broker's certificate,
``tls.server.need.client.auth=require`` demands a client certificate the trust file verifies,
``permissive`` serves TLS too (grpcio cannot take both on one port), an encrypted key stops the start,
changed certificate files are served to new connections. The real Go 5.x client
(which only speaks TLS) is in tests/compat/go5/test_go_5x_client.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from polling import wait_until
from tls_certs import Certs, make_certs, renew_from_other_ca

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client import client_ssl_context
from rocketstore.client.admin import BrokerAdmin

pytestmark = pytest.mark.integration

TOPIC = "GrpcTls"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("grpc-tls-certs"))


def tls_broker(tmp: Path, certs: Certs, mode: str, extra: str = "") -> Broker:
    """A broker with ``tls.server.mode=mode`` and the test certificate; no tls.properties unless ``extra`` names one."""
    return Broker(tmp, f"tls.server.mode={mode}\ntls.server.certPath={certs.server_cert}\n"
                       f"tls.server.keyPath={certs.server_key}\ntls.config.file=/nonexistent/tls.properties\n{extra}")


@pytest.fixture(scope="module")
def enforcing(certs: Certs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    b = tls_broker(tmp_path_factory.mktemp("grpc-tls-enforcing"), certs, "enforcing")
    b.start()
    try:
        with BrokerAdmin(b.addr, ssl_context=client_ssl_context(trust_cert=certs.ca)) as admin:
            admin.create_topic(TOPIC, 2, 2)
        yield b
    finally:
        b.stop()


def query_route(channel: grpc.Channel) -> pb.QueryRouteResponse:
    stub = pb_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]  # protoc writes no annotations
    response: pb.QueryRouteResponse = stub.QueryRoute(
        pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=5)
    return response


def tls_channel(broker: Broker, certs: Certs, *, client_cert: bool = False) -> grpc.Channel:
    """A channel verifying the broker against the test CA (its certificate names 127.0.0.1)."""
    creds = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes() if client_cert else None,
        certificate_chain=certs.client_cert.read_bytes() if client_cert else None)
    return grpc.secure_channel(broker.grpc_endpoint, creds)


def test_enforcing_serves_the_brokers_certificate_and_refuses_plain_calls(enforcing: Broker, certs: Certs) -> None:
    with tls_channel(enforcing, certs) as channel:
        route = query_route(channel)
    assert route.status.code == pb.OK and [q.id for q in route.message_queues] == [0, 1]
    with grpc.insecure_channel(enforcing.grpc_endpoint) as plain, pytest.raises(grpc.RpcError) as refused:
        query_route(plain)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


def test_require_demands_a_client_certificate_the_trust_file_verifies(certs: Certs, tmp_path: Path) -> None:
    b = tls_broker(tmp_path, certs, "enforcing",
                   f"tls.server.need.client.auth=require\ntls.server.trustCertPath={certs.ca}\n")
    b.start()
    try:
        with tls_channel(b, certs) as channel, pytest.raises(grpc.RpcError) as refused:
            query_route(channel)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        with tls_channel(b, certs, client_cert=True) as channel:
            # the handshake passed: the call reaches the service, which knows no such topic here
            assert query_route(channel).status.code == pb.TOPIC_NOT_FOUND
    finally:
        b.stop()


def test_permissive_serves_tls_on_the_grpc_port(certs: Certs, tmp_path: Path) -> None:
    """grpcio cannot serve TLS and plain connections on one port: a permissive broker's gRPC port
    serves TLS (what the Go client needs and the Java client does by default)."""
    b = tls_broker(tmp_path, certs, "permissive")
    b.start()
    try:
        with tls_channel(b, certs) as channel:
            assert query_route(channel).status.code == pb.TOPIC_NOT_FOUND
        with grpc.insecure_channel(b.grpc_endpoint) as plain, pytest.raises(grpc.RpcError) as refused:
            query_route(plain)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        b.stop()


def test_a_replaced_certificate_is_served_to_new_connections(certs: Certs, tmp_path: Path) -> None:
    """Renewed files (another CA's certificate) reach new handshakes without a restart, as on the
    remoting port."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(certs.server_cert, live / "tls.crt")
    shutil.copy(certs.server_key, live / "tls.key")
    (tmp_path / "broker").mkdir()
    b = Broker(tmp_path / "broker", f"tls.server.mode=enforcing\ntls.server.certPath={live / 'tls.crt'}\n"
                                    f"tls.server.keyPath={live / 'tls.key'}\n"
                                    "tls.config.file=/nonexistent/tls.properties\n")
    b.start()
    try:
        with tls_channel(b, certs) as channel:
            assert query_route(channel).status.code == pb.TOPIC_NOT_FOUND
        renew_from_other_ca(certs, tmp_path, live)
        renewed = grpc.ssl_channel_credentials(root_certificates=certs.other_ca.read_bytes())

        def served_renewed() -> bool:
            try:
                with grpc.secure_channel(b.grpc_endpoint, renewed) as channel:
                    return query_route(channel).status.code == pb.TOPIC_NOT_FOUND
            except grpc.RpcError:
                return False

        wait_until("the renewed certificate on the gRPC port", served_renewed, timeout=10, interval=0.3)
        with tls_channel(b, certs) as channel, pytest.raises(grpc.RpcError):
            query_route(channel)
    finally:
        b.stop()


def test_an_encrypted_key_stops_the_start_naming_the_key(certs: Certs, tmp_path: Path) -> None:
    """grpcio cannot decrypt a key; the remoting port could, so the start must say which port cannot."""
    (tmp_path / "tls.properties").write_text("tls.server.keyPassword=secret\n")
    b = tls_broker(tmp_path, certs, "enforcing", f"tls.config.file={tmp_path / 'tls.properties'}\n")
    with pytest.raises(AssertionError, match="broker not ready"):
        b.start()
    assert "'tls.server.keyPassword'" in b.log_text() and "grpcListenPort" in b.log_text()
