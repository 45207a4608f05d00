"""TLS on the broker's remoting port, with Python's ssl module as the client (real sockets).

tests/compat/java4/test_java_tls.py does the same with the Java client's TLS switch; here are what a client
library does not show: both kinds of connection on one permissive port, plain ones closed by
enforcing, a client certificate required, and certificate files replaced while the broker runs
(picked up for new connections, as a renewed Kubernetes Secret would be).
"""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import BrokerHandle, RawClient
from polling import wait_until
from tls_certs import Certs, make_certs, renew_from_other_ca

from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def tls_client(port: int, trust: Path, cert: Path | None = None, key: Path | None = None) -> RawClient:
    """A RawClient whose socket speaks TLS, verifying the broker against ``trust``."""
    client = RawClient("127.0.0.1", port)
    context = ssl.create_default_context(cafile=str(trust))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    return client


def works(client: RawClient) -> bool:
    try:
        return client.call(RequestCode.GET_BROKER_CONFIG, timeout=5).code == ResponseCode.SUCCESS
    except (OSError, ConnectionError):
        return False
    finally:
        client.close()


def tls_broker(factory: Callable[..., BrokerHandle], certs: Certs, mode: str, **extra: Any) -> BrokerHandle:
    return factory(tls_server_mode=mode, tls_server_cert_path=str(certs.server_cert),
                   tls_server_key_path=str(certs.server_key), tls_config_file="/nonexistent/tls.properties",
                   **extra)


def test_permissive_port_serves_tls_and_plain(broker_factory: Callable[..., BrokerHandle], certs: Certs) -> None:
    broker = tls_broker(broker_factory, certs, "permissive")
    assert works(tls_client(broker.port, certs.ca))
    assert works(RawClient("127.0.0.1", broker.port))
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_client(broker.port, certs.other_ca)
    metrics = broker.metrics()
    assert "rocketstore_tls_connections_total 1.0" in metrics  # the failed verification never got served
    assert "rocketstore_plain_connections_total 1.0" in metrics


def test_enforcing_port_closes_plain_connections(broker_factory: Callable[..., BrokerHandle], certs: Certs) -> None:
    broker = tls_broker(broker_factory, certs, "enforcing")
    assert not works(RawClient("127.0.0.1", broker.port))
    assert works(tls_client(broker.port, certs.ca))
    assert "rocketstore_tls_refused_plain_connections_total 1.0" in broker.metrics()


def test_required_client_certificate(broker_factory: Callable[..., BrokerHandle], certs: Certs) -> None:
    broker = tls_broker(broker_factory, certs, "enforcing", tls_server_need_client_auth="require",
                        tls_server_trust_cert_path=str(certs.ca))
    try:
        anonymous = works(tls_client(broker.port, certs.ca))
    except ssl.SSLError:  # TLS 1.2 fails the handshake; TLS 1.3 the first read
        anonymous = False
    assert not anonymous
    assert works(tls_client(broker.port, certs.ca, certs.client_cert, certs.client_key))


def test_replaced_certificate_is_served_to_new_connections(broker_factory: Callable[..., BrokerHandle],
                                                           certs: Certs, tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(certs.server_cert, live / "tls.crt")
    shutil.copy(certs.server_key, live / "tls.key")
    broker = broker_factory(tls_server_mode="enforcing", tls_server_cert_path=str(live / "tls.crt"),
                            tls_server_key_path=str(live / "tls.key"), tls_config_file="/nonexistent")
    assert works(tls_client(broker.port, certs.ca))
    # renewed: a certificate from the other CA replaces the files
    renew_from_other_ca(certs, tmp_path, live)
    # the files are looked at again as clients connect, at most once a second
    wait_until("the renewed certificate served", lambda: works(tls_client(broker.port, certs.other_ca)),
               timeout=10, interval=0.3)
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_client(broker.port, certs.ca)
    assert "rocketstore_tls_certificate_reloads_total 1.0" in broker.metrics()
    assert "rocketstore_tls_certificate_reload_failures_total 0.0" in broker.metrics()
    # files that do not load leave the renewed certificate in use: every connection until the broker
    # has tried them (and counted the failure) and the one after are served the renewed certificate
    (live / "tls.crt").write_text("not a certificate\n")
    served: list[bool] = []

    def connect_until_tried() -> bool:
        try:
            served.append(works(tls_client(broker.port, certs.other_ca)))
        except ssl.SSLError:
            served.append(False)
        return not served[-1] or "rocketstore_tls_certificate_reload_failures_total 1.0" in broker.metrics()

    wait_until("the broken files tried", connect_until_tried, timeout=10, interval=0.3)
    assert all(served) and works(tls_client(broker.port, certs.other_ca))
    assert "rocketstore_tls_certificate_reloads_total 1.0" in broker.metrics()
