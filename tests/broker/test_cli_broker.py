"""``rocketstore broker`` as a real subprocess: listen addresses on stdout, SIGTERM -> clean exit."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from inprocess_broker import RawClient
from ports import free_port

from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

def run_broker(tmp_path: Path, args: list[str]) -> BrokerProcess:
    """``rocketstore broker ARGS`` logging under ``tmp_path``, whose ``home`` is its HOME (BrokerProcess's
    default), so the default store directory ~/store is ``tmp_path/home/store``."""
    return BrokerProcess(args, tmp_path / f"broker-{time.monotonic_ns()}.log")


def exit_code(broker: BrokerProcess, timeout: float = 60) -> int:
    """Wait for a broker that is expected to exit by itself."""
    broker.proc.wait(timeout)
    return broker.stop()


def _port(address: str) -> int:
    match = re.match(r"\S+:(\d+)", address)
    assert match, address
    return int(match.group(1))


def test_broker_command_serves_and_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=cli-broker\nbrokerIP1=127.0.0.1\nmappedFileSizeCommitLog=262144\n"
                    "flushConsumerOffsetInterval=60000\nserverWorkerThreads=8\n")
    ns_port, http_port, grpc_port = free_port(), free_port(), free_port()
    broker = run_broker(tmp_path, ["-c", str(conf), "--store-dir", str(store), "--listen-port", "0", "--host",
                                   "127.0.0.1", "--namesrv-port", str(ns_port), "--http-port", str(http_port),
                                   "--grpc-port", str(grpc_port)])
    try:
        listening = broker.wait_ready()
        assert listening["store"] == str(store)
        assert listening["namesrv"] == f"127.0.0.1:{ns_port}"
        assert listening["http"] == f"127.0.0.1:{http_port}"
        assert listening["grpc"] == f"127.0.0.1:{grpc_port}"
        remoting_port = _port(listening["remoting"])
        assert f"published as 127.0.0.1:{remoting_port}" in listening["remoting"]
        assert (store / "abort").exists()  # a running store

        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=10) as resp:
            assert resp.status == 200
        ns = RawClient("127.0.0.1", ns_port)
        route = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert route.code == ResponseCode.SUCCESS
        assert f'"127.0.0.1:{remoting_port}"'.encode() in route.body
        ns.close()

        client = RawClient("127.0.0.1", remoting_port)
        resp = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "CG", "topic": "TBW102", "queueId": "0", "commitOffset": "0"})
        assert resp.code == ResponseCode.SUCCESS
        config = client.call(RequestCode.GET_BROKER_CONFIG).body.decode()
        assert "brokerName=cli-broker\n" in config
        client.close()
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert not (store / "abort").exists()
    offsets = json.loads((store / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["TBW102@CG"] == {"0": 0}
    assert "serverWorkerThreads" in broker.log_text()  # unknown key logged, not fatal


def test_sigint_also_stops_cleanly(tmp_path: Path) -> None:
    store = tmp_path / "s"
    broker = run_broker(tmp_path, ["--store-dir", str(store), "--listen-port", "0", "--namesrv-port", "0",
                                   "--http-port", "0", "--grpc-port", "0", "--host", "127.0.0.1"])
    try:
        listening = broker.wait_ready()
        assert "namesrv" not in listening and "http" not in listening and "grpc" not in listening
    finally:
        code = broker.stop(signal.SIGINT)
    assert code == 0, broker.log_text()
    assert not (store / "abort").exists()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_no_arguments_uses_home_store_and_default_ports(tmp_path: Path) -> None:
    if not all(_port_free(p) for p in (10911, 9876, 10925, 8081)):
        pytest.skip("a default port (10911, 9876, 10925 or 8081) is in use on this machine")
    broker = run_broker(tmp_path, [])
    try:
        listening = broker.wait_ready()
        assert listening["store"] == str(tmp_path / "home" / "store")
        assert listening["remoting"].startswith("0.0.0.0:10911 ")
        assert listening["namesrv"] == "0.0.0.0:9876"
        assert listening["http"] == "0.0.0.0:10925"
        assert listening["grpc"] == "0.0.0.0:8081"
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert (tmp_path / "home" / "store" / "config" / "topics.json").is_file()
    assert not (tmp_path / "home" / "store" / "abort").exists()


def test_bad_config_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("listenPort=ten\n")
    broker = run_broker(tmp_path, ["-c", str(conf)])
    assert exit_code(broker) == 2
    assert "listenPort" in broker.log_text()


def test_controller_mode_without_a_source_of_truth_exits_2_naming_the_keys(tmp_path: Path) -> None:
    """enableControllerMode=true with neither controllerAddr nor controllerLeaseEnable=true: nothing
    would ever make the broker master, so it refuses to start (Apache's broker starts and retries an
    empty controller list for ever; docs/failover.md)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"enableControllerMode=true\nbrokerId=1\nstorePathRootDir={tmp_path / 'store'}\n"
                    "listenPort=0\nnamesrvListenPort=0\nhttpListenPort=0\ngrpcListenPort=0\n")
    broker = run_broker(tmp_path, ["-c", str(conf)])
    assert exit_code(broker) == 2
    error = broker.log_text().strip().splitlines()[-1]
    assert error.startswith("rocketstore broker: error: enableControllerMode=true"), error
    assert "controllerAddr" in error and "controllerLeaseEnable=true" in error
    assert not (tmp_path / "store").exists()  # refused before anything was opened


def test_store_in_use_exits_2(tmp_path: Path) -> None:
    store = tmp_path / "locked"
    first = run_broker(tmp_path, ["--store-dir", str(store), "--listen-port", "0", "--namesrv-port", "0",
                                  "--http-port", "0", "--grpc-port", "0", "--host", "127.0.0.1"])
    try:
        first.wait_ready()
        started = time.monotonic()
        second = run_broker(tmp_path, ["--store-dir", str(store), "--listen-port", "0", "--namesrv-port", "0",
                                       "--http-port", "0", "--grpc-port", "0"])
        assert exit_code(second) == 2, second.log_text()
        assert "cannot start" in second.log_text()
        assert time.monotonic() - started < 30
    finally:
        assert first.stop() == 0
