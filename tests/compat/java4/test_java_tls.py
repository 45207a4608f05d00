"""TLS on the remoting ports with the real RocketMQ 4.9.8 Java client's TLS switch.

The test makes a CA, a server certificate (for 127.0.0.1) and a client certificate with openssl.
The Java client runs with ``-Dtls.enable=true``, ``tls.test.mode.enable=false`` and
``tls.client.authServer=true`` trusting only that CA, so a connection succeeds only if the broker
really serves the configured certificate; with ``tls.enable`` the client speaks TLS to the name
server too, which therefore shares the broker's TLS settings. Server modes:

* enforcing: TLS clients are served, a plain client is disconnected (its sends fail);
* permissive: both are served on the same port (the first byte, 0x16 or not, decides), as the
  ``rocketstore_tls_connections`` / ``rocketstore_plain_connections`` counters show;
* ``tls.server.need.client.auth=require``: a client without a certificate is refused, one with a
  certificate signed by ``tls.server.trustCertPath`` is served;
* the certificate paths may come from the ``tls.config.file`` properties file instead of broker.conf.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from java_rocketmq import LIGHT_JVM, ClientDriver
from tls_certs import Certs, make_certs, tls_jvm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def start_broker(tmp_path: Path, java_client_built: None) -> Iterator[Callable[[str], Broker]]:
    started: list[Broker] = []

    def start(conf: str) -> Broker:
        workdir = tmp_path / f"b{len(started)}"
        workdir.mkdir()
        broker = Broker(workdir, conf)
        broker.start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        assert broker.stop() == 0
        assert "Traceback" not in broker.log_text(), broker.log_text()[-6000:]


def produce(broker: Broker, workdir: Path, topic: str, jvm: list[str]) -> tuple[int, list[dict[str, object]]]:
    driver = ClientDriver(broker.namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000,
                          jvm_args=[*LIGHT_JVM, *jvm])
    result = driver.run("produce", "-t", topic, "-c", 2, "--timeout", 20, check=False, timeout=90)
    return len(result.of("sent")), result.lines


def counter(broker: Broker, name: str) -> float:
    found = re.search(rf"^rocketstore_{name}_total (\S+)$", broker.metrics(), re.MULTILINE)
    assert found is not None, f"rocketstore_{name}_total missing from /metrics"
    return float(found.group(1))


def server_conf(certs: Certs, mode: str, extra: str = "") -> str:
    return (f"tls.server.mode={mode}\ntls.server.certPath={certs.server_cert}\n"
            f"tls.server.keyPath={certs.server_key}\ntls.config.file=/nonexistent/tls.properties\n{extra}")


def test_enforcing_serves_tls_clients_and_refuses_plain_ones(certs: Certs, start_broker: Callable[[str], Broker],
                                                             tmp_path: Path) -> None:
    broker = start_broker(server_conf(certs, "enforcing"))
    sent, lines = produce(broker, tmp_path / "tls", "TlsEnforcedTopic", tls_jvm(certs.ca))
    assert sent == 2, lines
    sent, lines = produce(broker, tmp_path / "plain", "TlsEnforcedTopic", [])
    assert sent == 0, lines
    assert counter(broker, "tls_refused_plain_connections") >= 1
    # a client trusting another CA does not accept the broker's certificate
    sent, lines = produce(broker, tmp_path / "other", "TlsEnforcedTopic", tls_jvm(certs.other_ca))
    assert sent == 0, lines


def test_permissive_serves_tls_and_plain_clients_on_one_port(certs: Certs, start_broker: Callable[[str], Broker],
                                                             tmp_path: Path) -> None:
    properties = tmp_path / "tls.properties"
    properties.write_text(f"# RocketMQ's tls.properties\ntls.server.certPath={certs.server_cert}\n"
                          f"tls.server.keyPath={certs.server_key}\n")
    # the certificate comes from the properties file, not from broker.conf
    broker = start_broker(f"tls.server.mode=permissive\ntls.config.file={properties}\n")
    sent, lines = produce(broker, tmp_path / "tls", "TlsPermissiveTopic", tls_jvm(certs.ca))
    assert sent == 2, lines
    sent, lines = produce(broker, tmp_path / "plain", "TlsPermissiveTopic", [])
    assert sent == 2, lines
    assert counter(broker, "tls_connections") >= 2  # name server and broker
    assert counter(broker, "plain_connections") >= 1
    assert counter(broker, "tls_refused_plain_connections") == 0


def test_required_client_certificate(certs: Certs, start_broker: Callable[[str], Broker], tmp_path: Path) -> None:
    broker = start_broker(server_conf(certs, "enforcing", f"tls.server.need.client.auth=require\n"
                                                          f"tls.server.trustCertPath={certs.ca}\n"))
    sent, lines = produce(broker, tmp_path / "anonymous", "TlsMutualTopic", tls_jvm(certs.ca))
    assert sent == 0, lines
    sent, lines = produce(broker, tmp_path / "with-cert", "TlsMutualTopic",
                          tls_jvm(certs.ca, certs.client_cert, certs.client_key))
    assert sent == 2, lines


def test_missing_certificate_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    broker = Broker(tmp_path, "tls.server.mode=enforcing\ntls.config.file=/nonexistent/tls.properties\n")
    with pytest.raises(Exception):  # noqa: B017 - the process exits before "ready"
        broker.start()
    assert "tls.server.certPath" in broker.log_text()
