"""Delay levels in the store: the pure rules (parsing, the rewrite, tagsCode, the delivered
message) and the service on a real store directory, without a broker."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rocketstore.common.message import HostAddress, Message, StoredMessage, SysFlag
from rocketstore.common.topic_validator import RMQ_SYS_SCHEDULE_TOPIC
from rocketstore.store.commit_log import MessageBatch
from rocketstore.store.config import ConfigError, StoreConfig
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.schedule_message_service import (
    consume_queue_tags_code,
    deliver_timestamp,
    message_timeup,
    parse_delay_levels,
    schedule,
)
from rocketstore.store.status import PutMessageStatus

DEFAULT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def test_default_levels_parse_to_rocketmqs_table() -> None:
    levels = parse_delay_levels(DEFAULT)
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000)
    assert levels[-2:] == (3_600_000, 7_200_000)
    assert parse_delay_levels("2d 0s") == (172_800_000, 0)


@pytest.mark.parametrize("text", ["", "1s  5s", "1x", "s", "1.5s", "-1s", "\uff11s", "1s 5"])
def test_bad_level_tables_are_refused_naming_the_item(text: str) -> None:
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        parse_delay_levels(text)


def _msg(**fields: object) -> Message:
    values: dict[str, object] = {"topic": "T", "body": b"b", "queue_id": 3, "properties": {"DELAY": "2", "K": "v"}}
    values.update(fields)
    return Message(**values)  # type: ignore[arg-type]


def test_schedule_rewrites_topic_queue_and_properties() -> None:
    held = schedule(_msg(), max_level=18)
    assert (held.topic, held.queue_id) == (RMQ_SYS_SCHEDULE_TOPIC, 1)
    assert held.properties == {"DELAY": "2", "K": "v", "REAL_TOPIC": "T", "REAL_QID": "3"}
    clamped = schedule(_msg(properties={"DELAY": "+40"}), max_level=18)
    assert clamped.queue_id == 17 and clamped.properties["DELAY"] == "18"


@pytest.mark.parametrize("props", [{}, {"DELAY": "0"}, {"DELAY": "-2"}])
def test_no_positive_level_means_no_rewrite(props: dict[str, str]) -> None:
    msg = _msg(properties=props)
    assert schedule(msg, max_level=18) is msg


@pytest.mark.parametrize("tx", [SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK])
def test_half_and_rollback_records_are_never_scheduled(tx: int) -> None:
    msg = _msg(sys_flag=tx)
    assert schedule(msg, max_level=18) is msg


@pytest.mark.parametrize("value", ["soon", "", " 2", "2_0", "99999999999"])
def test_a_level_java_cannot_parse_is_an_error(value: str) -> None:
    with pytest.raises(ValueError, match="DELAY"):
        schedule(_msg(properties={"DELAY": value}), max_level=18)


def test_tags_code_is_the_delivery_time_only_on_the_schedule_topic() -> None:
    levels = (1000, 5000)
    assert consume_queue_tags_code(RMQ_SYS_SCHEDULE_TOPIC, "tg", "2", 100, levels) == 5100
    assert consume_queue_tags_code(RMQ_SYS_SCHEDULE_TOPIC, "tg", "9", 100, levels) == 5100  # clamped
    tag_hash = consume_queue_tags_code("T", "tg", None, 100, levels)
    assert tag_hash == consume_queue_tags_code("T", "tg", "2", 100, levels) != 5100
    assert consume_queue_tags_code(RMQ_SYS_SCHEDULE_TOPIC, "tg", "0", 100, levels) == tag_hash
    assert consume_queue_tags_code(RMQ_SYS_SCHEDULE_TOPIC, "tg", "x", 100, levels) == tag_hash
    assert deliver_timestamp(levels, 0, 100) == 1100  # RocketMQ's one-second default
    assert deliver_timestamp(levels, 2, 2**63 - 1) == -(2**63) + 4999  # a Java long wraps


def test_timeup_message_keeps_the_record_and_names_the_real_queue() -> None:
    host = HostAddress("10.0.0.1", 10911)
    held = StoredMessage(
        total_size=0, magic=0, body_crc=0, queue_id=1, flag=9, queue_offset=0, physical_offset=0, sys_flag=0,
        born_timestamp=5, born_host=HostAddress("10.0.0.2", 1), store_timestamp=6, store_host=host,
        reconsume_times=2, prepared_transaction_offset=0, body=b"x", topic=RMQ_SYS_SCHEDULE_TOPIC,
        properties={"DELAY": "2", "REAL_TOPIC": "Orders", "REAL_QID": "4", "UNIQ_KEY": "U"},
    )
    msg = message_timeup(held)
    assert msg is not None
    assert (msg.topic, msg.queue_id, msg.reconsume_times, msg.flag, msg.born_timestamp) == ("Orders", 4, 2, 9, 5)
    assert msg.properties == held.properties  # DELAY stays in the record, as RocketMQ writes it
    for broken in ({"REAL_QID": "4"}, {"REAL_TOPIC": "Orders"}, {"REAL_TOPIC": "Orders", "REAL_QID": "x"},
                   {"REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0"}):
        held.properties = broken
        assert message_timeup(held) is None


def test_store_holds_delivers_and_refuses_delayed_batches(tmp_path: Path) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path), message_delay_level="1s 2s",
                         mapped_file_size_commit_log=64 * 1024)
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    try:
        put = store.put_message(Message(topic="T", body=b"d", queue_id=0, properties={"DELAY": "1"}))
        assert put.status is PutMessageStatus.PUT_OK
        batch = MessageBatch(topic="T", queue_id=0, items=[(b"a", 0, "")], properties={"DELAY": "1"})
        assert store.put_messages(batch).status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.put_message(Message(topic="T", body=b"d", properties={"DELAY": "x"})).status \
            is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.reput_service.wait_caught_up(5)
        assert store.get_max_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, 0) == 1
        assert store.get_max_offset_in_queue("T", 0) == 0
        assert store.schedule_message_service.pending() == {1: 1}
        deadline = time.monotonic() + 5
        while store.get_max_offset_in_queue("T", 0) == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.get_max_offset_in_queue("T", 0) == 1
        assert store.schedule_message_service.pending() == {1: 0}
    finally:
        store.shutdown()
    assert json.loads((tmp_path / "config" / "delayOffset.json").read_text()) == {"offsetTable": {"1": 1}}
