"""The HTTP side port over a real socket: /healthz, /readyz, /metrics."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle
from ports import free_port

from rocketstore.common.message import Message

pytestmark = pytest.mark.integration


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def http_broker(broker_factory: Callable[..., BrokerHandle]) -> tuple[BrokerHandle, int]:
    broker = broker_factory(http_listen_port=free_port())
    assert broker.controller.http is not None
    return broker, broker.controller.http.port


def test_health_and_readiness(http_broker: tuple[BrokerHandle, int]) -> None:
    broker, port = http_broker
    assert get(port, "/healthz") == (200, "ok\n")
    assert get(port, "/readyz")[0] == 200
    assert get(port, "/nope")[0] == 404
    # what stop() sets first: not ready any more, still alive
    broker.call_soon(lambda: setattr(broker.controller, "ready", False))
    assert get(port, "/readyz")[0] == 503
    assert get(port, "/healthz")[0] == 200
    broker.call_soon(lambda: setattr(broker.controller, "ready", True))


def test_metrics(http_broker: tuple[BrokerHandle, int]) -> None:
    broker, port = http_broker
    for _ in range(3):
        assert broker.store.put_message(Message(topic="Metered", body=b"x" * 10, queue_id=1,
                                                born_timestamp=int(time.time() * 1000))).ok
    broker.wait_dispatched()
    broker.call_soon(lambda: broker.controller.consumer_offset_manager.commit_offset("CG", "Metered", 1, 1))
    status, text = get(port, "/metrics")
    assert status == 200
    lines = text.splitlines()

    def value(prefix: str) -> float:
        matches = [line for line in lines if line.startswith(prefix + " ") or line.startswith(prefix + "{")]
        assert matches, f"{prefix} missing"
        return float(matches[0].rsplit(" ", 1)[1])

    assert value("rocketstore_put_messages_total") == 3
    assert value("rocketstore_put_bytes_total") > 30
    assert value("rocketstore_commitlog_min_offset_bytes") == 0
    assert value("rocketstore_commitlog_max_offset_bytes") > 0
    assert value("rocketstore_dispatch_behind_bytes") == 0
    assert 0 < value("rocketstore_disk_usage_ratio") < 1
    assert value("rocketstore_disk_full") == 0
    assert value("rocketstore_ready") == 1
    assert 'rocketstore_queue_max_offset{queue_id="1",topic="Metered"} 3.0' in lines
    assert 'rocketstore_consumer_lag{group="CG",queue_id="1",topic="Metered"} 2.0' in lines
    assert "# TYPE rocketstore_deleted_files_total counter" in lines
    assert any(line.startswith("rocketstore_get_found_total") for line in lines)


def test_deleted_files_by_cause(http_broker: tuple[BrokerHandle, int]) -> None:
    broker, port = http_broker
    broker.store.stats.record_deleted("expired", 2)
    _, text = get(port, "/metrics")
    assert 'rocketstore_deleted_files_total{cause="expired"} 2.0' in text.splitlines()


def test_http_off_by_zero_port(broker_factory: Callable[..., BrokerHandle]) -> None:
    assert broker_factory(http_listen_port=0).controller.http is None
