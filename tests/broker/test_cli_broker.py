"""``rocketstore broker`` as a real subprocess: listen addresses on stdout, SIGTERM -> clean exit."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RawClient

from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "rocketstore.cli", "broker", *args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.stderr = ""
        self._ready = threading.Event()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.strip() == "ready":
                self._ready.set()

    def wait_ready(self, timeout: float = 30.0) -> dict[str, str]:
        if not self._ready.wait(timeout):
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"broker not ready; stdout={self.lines} stderr={err}")
        return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in self.lines if " " in line}

    def terminate(self, timeout: float = 30.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        _, self.stderr = self.proc.communicate(timeout=timeout)
        return self.proc.returncode


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    yield {**os.environ, "HOME": str(tmp_path / "home")}


def _port(address: str) -> int:
    match = re.match(r"\S+:(\d+)", address)
    assert match, address
    return int(match.group(1))


def test_broker_command_serves_and_stops_cleanly(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "store"
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=cli-broker\nbrokerIP1=127.0.0.1\nmappedFileSizeCommitLog=262144\n"
                    "flushConsumerOffsetInterval=60000\nserverWorkerThreads=8\n")
    ns_port, http_port = free_port(), free_port()
    broker = BrokerProcess(["-c", str(conf), "--store-dir", str(store), "--listen-port", "0", "--host", "127.0.0.1",
                            "--namesrv-port", str(ns_port), "--http-port", str(http_port)], env)
    try:
        listening = broker.wait_ready()
        assert listening["store"] == str(store)
        assert listening["namesrv"] == f"127.0.0.1:{ns_port}"
        assert listening["http"] == f"127.0.0.1:{http_port}"
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
        code = broker.terminate()
    assert code == 0, broker.stderr
    assert not (store / "abort").exists()
    offsets = json.loads((store / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["TBW102@CG"] == {"0": 0}
    assert "serverWorkerThreads" in broker.stderr  # unknown key logged, not fatal


def test_sigint_also_stops_cleanly(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "s"
    broker = BrokerProcess(["--store-dir", str(store), "--listen-port", "0", "--namesrv-port", "0",
                            "--http-port", "0", "--host", "127.0.0.1"], env)
    try:
        listening = broker.wait_ready()
        assert "namesrv" not in listening and "http" not in listening
    finally:
        broker.proc.send_signal(signal.SIGINT)
        broker.proc.communicate(timeout=30)
    assert broker.proc.returncode == 0
    assert not (store / "abort").exists()


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def test_no_arguments_uses_home_store_and_default_ports(tmp_path: Path, env: dict[str, str]) -> None:
    if not all(_port_free(p) for p in (10911, 9876, 10925)):
        pytest.skip("a default port (10911, 9876 or 10925) is in use on this machine")
    broker = BrokerProcess([], env)
    try:
        listening = broker.wait_ready()
        assert listening["store"] == str(tmp_path / "home" / "store")
        assert listening["remoting"].startswith("0.0.0.0:10911 ")
        assert listening["namesrv"] == "0.0.0.0:9876"
        assert listening["http"] == "0.0.0.0:10925"
    finally:
        code = broker.terminate()
    assert code == 0, broker.stderr
    assert (tmp_path / "home" / "store" / "config" / "topics.json").is_file()
    assert not (tmp_path / "home" / "store" / "abort").exists()


def test_bad_config_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("listenPort=ten\n")
    result = subprocess.run([sys.executable, "-m", "rocketstore.cli", "broker", "-c", str(conf)], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "listenPort" in result.stderr


def test_store_in_use_exits_2(tmp_path: Path, env: dict[str, str]) -> None:
    store = tmp_path / "locked"
    first = BrokerProcess(["--store-dir", str(store), "--listen-port", "0", "--namesrv-port", "0",
                           "--http-port", "0", "--host", "127.0.0.1"], env)
    try:
        first.wait_ready()
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "rocketstore.cli", "broker", "--store-dir", str(store),
                                 "--listen-port", "0", "--namesrv-port", "0", "--http-port", "0"],
                                cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert "cannot start" in result.stderr
        assert time.monotonic() - started < 30
    finally:
        assert first.terminate() == 0
