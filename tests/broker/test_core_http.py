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
from rocketstore.remoting.codes import RequestCode, ResponseCode

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
    # their sums, published whatever metricsPerQueueEnable says
    assert 'rocketstore_topic_max_offset{broker="broker-a",cluster="DefaultCluster",topic="Metered"} 3.0' in lines
    assert ('rocketstore_group_lag{broker="broker-a",cluster="DefaultCluster",group="CG",topic="Metered"} 2.0'
            in lines)
    assert "# TYPE rocketstore_deleted_files_total counter" in lines
    assert any(line.startswith("rocketstore_get_found_total") for line in lines)


def _series(text: str, family: str) -> dict[str, float]:
    """``family``'s samples in a /metrics page: label text -> value."""
    found = {}
    for line in text.splitlines():
        if line.startswith(family + "{"):
            labels, value = line[len(family):].rsplit(" ", 1)
            found[labels] = float(value)
    return found


def test_per_queue_series_switch(broker_factory: Callable[..., BrokerHandle]) -> None:
    """metricsPerQueueEnable=false leaves out the per-queue families but keeps their sums, which
    add up the queues (two groups, two topics, several queues); UPDATE_BROKER_CONFIG flips it live."""
    broker = broker_factory(metrics_per_queue_enable=False)
    assert broker.controller.http is not None
    port = broker.controller.http.port
    for topic, queue_id, count in (("Wide", 0, 4), ("Wide", 1, 3), ("Wide", 2, 5), ("Narrow", 0, 2)):
        for _ in range(count):
            assert broker.store.put_message(Message(topic=topic, body=b"x", queue_id=queue_id,
                                                    born_timestamp=int(time.time() * 1000))).ok
    broker.wait_dispatched()
    offsets = broker.controller.consumer_offset_manager
    for group, topic, queue_id, offset in (("CG1", "Wide", 0, 1), ("CG1", "Wide", 1, 3), ("CG1", "Wide", 2, 0),
                                           ("CG2", "Wide", 2, 4), ("CG2", "Narrow", 0, 2)):
        broker.call_soon(lambda g=group, t=topic, q=queue_id, o=offset: offsets.commit_offset(g, t, q, o))
    _, text = get(port, "/metrics")
    assert "# TYPE rocketstore_queue_max_offset " not in text
    assert "# TYPE rocketstore_consumer_lag " not in text
    assert "queue_id=" not in text
    cluster = 'broker="broker-a",cluster="DefaultCluster"'
    topic_max = _series(text, "rocketstore_topic_max_offset")
    assert topic_max[f'{{{cluster},topic="Wide"}}'] == 12
    assert topic_max[f'{{{cluster},topic="Narrow"}}'] == 2
    assert _series(text, "rocketstore_group_lag") == {
        f'{{{cluster},group="CG1",topic="Wide"}}': 3 + 0 + 5,
        f'{{{cluster},group="CG2",topic="Wide"}}': 1,
        f'{{{cluster},group="CG2",topic="Narrow"}}': 0,  # caught up: still there, at 0
    }

    client = broker.client()
    response = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"metricsPerQueueEnable=true\n")
    assert response.code == ResponseCode.SUCCESS
    _, text = get(port, "/metrics")
    per_queue = _series(text, "rocketstore_consumer_lag")
    assert per_queue['{group="CG1",queue_id="2",topic="Wide"}'] == 5
    assert len(per_queue) == 5
    assert len(_series(text, "rocketstore_queue_max_offset")) >= 4
    # the sums are the per-queue series added up
    lag = _series(text, "rocketstore_group_lag")
    assert lag[f'{{{cluster},group="CG1",topic="Wide"}}'] == sum(
        v for k, v in per_queue.items() if 'group="CG1"' in k and 'topic="Wide"' in k)

    response = client.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"metricsPerQueueEnable=false\n")
    assert response.code == ResponseCode.SUCCESS
    _, text = get(port, "/metrics")
    assert "queue_id=" not in text
    assert _series(text, "rocketstore_group_lag")[f'{{{cluster},group="CG1",topic="Wide"}}'] == 8


def test_deleted_files_by_cause(http_broker: tuple[BrokerHandle, int]) -> None:
    broker, port = http_broker
    broker.store.stats.record_deleted("expired", 2)
    _, text = get(port, "/metrics")
    assert 'rocketstore_deleted_files_total{cause="expired"} 2.0' in text.splitlines()


def test_http_off_by_zero_port(broker_factory: Callable[..., BrokerHandle]) -> None:
    assert broker_factory(http_listen_port=0).controller.http is None
