"""fetchNamesrvAddrByAddressServer: the broker takes its name-server list from an HTTP address server
(RocketMQ's TopAddressing) and follows it when it changes.

A real ``http.server`` on loopback plays the address server; two real brokers serve the embedded name
servers the list points at, one after the other. The broker's fetch delay and period (10 s, 2 min as
in RocketMQ) are shortened for the test.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from inprocess_broker import BrokerHandle, RawClient
from ports import free_port

from rocketstore.broker.top_addressing import clear_new_line, fetch_ns_addr, ws_addr
from rocketstore.remoting.body import ClusterInfo
from rocketstore.remoting.codes import RequestCode


@dataclass
class AddressServer:
    """What the address server answers now, and the paths it was asked for."""

    body: str = ""
    status: int = 200
    paths: list[str] = field(default_factory=list)
    port: int = 0


@pytest.fixture
def address_server() -> Iterator[AddressServer]:
    state = AddressServer()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.paths.append(self.path)
            data = state.body.encode()
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def test_ws_addr_and_clear_new_line_follow_rocketmq() -> None:
    assert ws_addr() == "http://jmenv.tbsite.net:8080/rocketmq/nsaddr"
    assert ws_addr("ns.example", "blue") == "http://ns.example:8080/rocketmq/blue"
    assert ws_addr("ns.example:80", "blue") == "http://ns.example:80/rocketmq/blue"
    assert clear_new_line("  a:1;b:2\r\nc:3\n") == "a:1;b:2"
    assert clear_new_line("a:1\nb:2") == "a:1"


def test_fetch_takes_only_a_200_answer(address_server: AddressServer) -> None:
    url = ws_addr(f"127.0.0.1:{address_server.port}")
    address_server.body = "10.0.0.1:9876;10.0.0.2:9876\n"
    assert fetch_ns_addr(url) == "10.0.0.1:9876;10.0.0.2:9876"
    address_server.status = 500
    assert fetch_ns_addr(url) is None
    assert address_server.paths == ["/rocketmq/nsaddr"] * 2
    assert fetch_ns_addr(f"http://127.0.0.1:{free_port()}/rocketmq/nsaddr", timeout_s=1) is None


def _registered(namesrv_port: int, broker_name: str) -> bool:
    client = RawClient("127.0.0.1", namesrv_port)
    try:
        info = ClusterInfo.decode(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    finally:
        client.close()
    return broker_name in info.broker_addr_table


def _wait(what: str, check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.integration
def test_broker_registers_with_the_address_servers_list_and_follows_it(
        broker_factory: Callable[..., BrokerHandle], address_server: AddressServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rocketstore.broker.register_broker_service.NAMESRV_ADDR_REFRESH_DELAY_S", 0.2)
    monkeypatch.setattr("rocketstore.broker.register_broker_service.NAMESRV_ADDR_REFRESH_INTERVAL_S", 0.5)
    first = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="NA", broker_name="ns-first")
    second = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="NB", broker_name="ns-second")
    assert first.controller.namesrv is not None and second.controller.namesrv is not None
    first_ns, second_ns = first.controller.namesrv.port, second.controller.namesrv.port
    address_server.body = f"127.0.0.1:{first_ns}\n"
    fetching = broker_factory(namesrv_addr=None, fetch_namesrv_addr_by_address_server=True,
                              namesrv_domain=f"127.0.0.1:{address_server.port}", namesrv_domain_subgroup="blue",
                              namesrv_listen_port=0, broker_cluster_name="NC", broker_name="fetching")
    _wait("registration with the first name server", lambda: _registered(first_ns, "fetching"))
    assert not _registered(second_ns, "fetching")
    assert set(address_server.paths) == {"/rocketmq/blue"}

    # the list changes (a second line is ignored, as TopAddressing cuts at the first line break)
    address_server.body = f"127.0.0.1:{second_ns}\r\n127.0.0.1:{first_ns}\n"
    _wait("registration with the second name server", lambda: _registered(second_ns, "fetching"))
    api = fetching.controller.register_broker_service.broker_outer_api
    assert api is not None and api.addrs == [f"127.0.0.1:{second_ns}"]

    # a failing address server or a malformed list keeps the list in use
    asked = len(address_server.paths)
    address_server.status = 503
    _wait("two more fetches", lambda: len(address_server.paths) >= asked + 2)
    address_server.status, address_server.body = 200, "not an address"
    _wait("two more fetches", lambda: len(address_server.paths) >= asked + 4)
    assert api.addrs == [f"127.0.0.1:{second_ns}"]
