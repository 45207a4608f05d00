"""Delay levels through a real broker: where a delayed message waits, when it is delivered, what
the delivered record holds, and that progress survives a restart (delayOffset.json).

The levels are shortened by ``messageDelayLevel`` so the tests wait seconds, not minutes; the
default table's parsing is checked in tests/store/test_schedule_message_service.py.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.common.message import StoredMessage
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

LEVELS = "1s 2s 3s"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def _pull_all(client: RawClient, topic: str, queue_id: int) -> list[StoredMessage]:
    resp = client.pull(topic, queue_id, 0, group="reader")
    if resp.code != ResponseCode.SUCCESS:
        return []
    return decode_records(resp.body)


def _wait_for(client: RawClient, topic: str, queue_id: int, count: int, timeout: float) -> list[StoredMessage]:
    deadline = time.monotonic() + timeout
    while True:
        found = _pull_all(client, topic, queue_id)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_delayed_message_waits_on_the_schedule_topic_and_arrives_when_due(
    broker_factory: Callable[..., BrokerHandle],
) -> None:
    broker = broker_factory(message_delay_level=LEVELS)
    client = broker.client()
    sent = client.send_message("DelayTopic", b"later", properties={"DELAY": "2", "UNIQ_KEY": "D1", "TAGS": "tg"},
                               queue_id=1)
    assert sent.code == ResponseCode.SUCCESS
    assert sent.ext_fields["queueId"] == "1"  # the answer names the queue the producer chose
    broker.wait_dispatched()

    [held] = _wait_for(client, SCHEDULE, 1, 1, 5)  # level 2 -> queue 1
    assert held.topic == SCHEDULE and held.queue_id == 1
    assert (held.properties["REAL_TOPIC"], held.properties["REAL_QID"], held.properties["DELAY"]) == (
        "DelayTopic", "1", "2")
    # the ConsumeQueue entry's tagsCode is the delivery time, not the tag hash
    assert broker.store.get_tags_code(SCHEDULE, 1, 0) == held.store_timestamp + 2000
    assert _pull_all(client, "DelayTopic", 1) == []

    [delivered] = _wait_for(client, "DelayTopic", 1, 1, 6)
    due = held.store_timestamp + 2000
    assert due <= delivered.store_timestamp <= due + 1000
    assert delivered.body == b"later" and delivered.topic == "DelayTopic" and delivered.queue_id == 1
    assert delivered.uniq_key == "D1" and delivered.tags == "tg"
    # the record keeps the scheduled properties string as it was, DELAY included (as RocketMQ's)
    assert delivered.properties == held.properties
    assert broker.store.get_tags_code("DelayTopic", 1, 0) != delivered.store_timestamp  # a tag hash again
    metrics = broker.metrics()
    assert re.search(r'^rocketstore_delayed_messages_delivered_total\{level="2"\} 1\.0$', metrics, re.M)
    assert re.search(r'^rocketstore_delayed_messages_pending\{level="2"\} 0\.0$', metrics, re.M)


def test_levels_above_the_table_are_clamped_and_bad_levels_refused(
    broker_factory: Callable[..., BrokerHandle],
) -> None:
    broker = broker_factory(message_delay_level=LEVELS)
    client = broker.client()
    assert client.send_message("DelayTopic", b"far", properties={"DELAY": "40"}, queue_id=0).code == 0
    broker.wait_dispatched()
    [held] = _wait_for(client, SCHEDULE, 2, 1, 5)  # clamped to the last level, 3
    assert held.properties["DELAY"] == "3"
    assert 'rocketstore_delayed_messages_pending{level="3"} 1.0' in broker.metrics()

    bad = client.send_message("DelayTopic", b"x", properties={"DELAY": "soon"}, queue_id=0)
    assert bad.code == ResponseCode.MESSAGE_ILLEGAL, (bad.code, bad.remark)
    # DELAY=0 and negative levels are not delays: stored on the topic at once
    assert client.send_message("DelayTopic", b"now", properties={"DELAY": "0"}, queue_id=0).code == 0
    assert client.send_message("DelayTopic", b"now2", properties={"DELAY": "-1"}, queue_id=0).code == 0
    broker.wait_dispatched()
    assert [m.body for m in _pull_all(client, "DelayTopic", 0)] == [b"now", b"now2"]


def test_progress_persists_and_pending_messages_survive_a_restart(
    broker_factory: Callable[..., BrokerHandle],
) -> None:
    broker = broker_factory(message_delay_level=LEVELS)
    root = broker.controller.store_config.root_dir()
    client = broker.client()
    assert client.send_message("DelayTopic", b"first", properties={"DELAY": "1"}, queue_id=0).code == 0
    assert _wait_for(client, "DelayTopic", 0, 1, 5)  # delivered: level 1 moved to offset 1
    assert client.send_message("DelayTopic", b"second", properties={"DELAY": "3"}, queue_id=0).code == 0
    broker.wait_dispatched()
    client.close()
    broker.stop()
    table = json.loads((root / "config" / "delayOffset.json").read_text())["offsetTable"]
    assert table["1"] == 1 and table.get("3", 0) == 0  # fastjson keys are the level numbers

    again = broker_factory(root, message_delay_level=LEVELS)
    client = again.client()
    bodies = [m.body for m in _wait_for(client, "DelayTopic", 0, 2, 8)]
    assert bodies == [b"first", b"second"]  # the first is not delivered twice, the second arrives
    time.sleep(1.2)  # a look at every level later: still nothing delivered twice
    assert len(_pull_all(client, "DelayTopic", 0)) == 2
