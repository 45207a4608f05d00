"""/metrics of our broker process while the real RocketMQ 4.9.8 Java client produces and a push
consumer consumes: the per-topic and per-group totals and the rocketmq-exporter families a
RocketMQ dashboard reads show exactly that traffic."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from recording_broker import RocketStoreBroker, java_driver

pytestmark = pytest.mark.integration

COUNT = 20


def scrape(broker: RocketStoreBroker) -> list[Sample]:
    return [s for family in text_string_to_metric_families(broker.metrics()) for s in family.samples]


def matching(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s.name == name and labels.items() <= s.labels.items()]


def test_java_traffic_in_the_metrics(java_client_built: None, rocketstore_broker: RocketStoreBroker,
                                     tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    driver = java_driver(rocketstore_broker, tmp_path)
    topic, group = unique_name("Metrics"), unique_name("MetricsGroup")
    driver.produce(topic, COUNT)
    consumer = driver.start_push_consume(topic, group, COUNT, linger_ms=20_000)
    try:
        # while the consumer lingers online: everything pulled, and its committed offsets caught up
        deadline = time.monotonic() + 60
        while True:
            samples = scrape(rocketstore_broker)
            diff = matching(samples, "rocketmq_group_diff", group=group, topic=topic)
            got = matching(samples, "rocketstore_group_get_messages_total", topic=topic, group=group)
            if diff and diff[0].value == 0 and got and got[0].value == COUNT:
                break
            assert time.monotonic() < deadline, f"diff {diff}, pulled {got}"
            time.sleep(0.5)
    finally:
        consumer.wait(timeout=120)

    assert diff[0].labels["countOfOnlineConsumers"] == "1" and diff[0].labels["msgModel"] == "1"
    assert [s.value for s in matching(samples, "rocketstore_topic_put_messages_total", topic=topic)] == [COUNT]
    assert [s.value for s in matching(samples, "rocketmq_producer_offset", topic=topic)] == [COUNT]
    assert [s.value for s in matching(samples, "rocketmq_consumer_offset", topic=topic, group=group)] == [COUNT]
    assert [s.value for s in matching(samples, "rocketmq_group_get_latency_by_storetime", topic=topic,
                                      group=group)] == [0]
    # the sends and pulls of the last minute, as the exporter's per-second gauges
    assert matching(samples, "rocketmq_producer_tps", topic=topic)[0].value > 0
    assert matching(samples, "rocketmq_consumer_tps", topic=topic, group=group)[0].value > 0
    online = matching(samples, "rocketmq_group_count", group=group)
    assert [s.value for s in online] == [1] and "@" in online[0].labels["localaddr"]  # the client id
