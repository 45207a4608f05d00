"""Timed messages (RocketMQ 5's TIMER_* properties) in the store: the rewrite rules, and the
timer table on a real store directory across a restart."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from polling import wait_until

from rocketstore.common.message import Message, SysFlag
from rocketstore.common.topic_validator import RMQ_SYS_TIMER_TOPIC
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import PutMessageStatus
from rocketstore.store.timer_message_store import TimerIllegal, TimerNotEnabled, timer

NOW = 1_700_000_000_000
DAY_MS = 86_400_000


def _msg(props: dict[str, str], **fields: object) -> Message:
    return Message(topic="Orders", body=b"b", queue_id=2, properties=props, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("props", "due"), [
    ({"TIMER_DELIVER_MS": str(NOW + 5000)}, NOW + 5000),
    ({"TIMER_DELAY_MS": "1500"}, NOW + 1500),
    ({"TIMER_DELAY_SEC": "3"}, NOW + 3000),
    # RocketMQ's order: DELAY_SEC, then DELAY_MS, then DELIVER_MS
    ({"TIMER_DELIVER_MS": str(NOW + 9000), "TIMER_DELAY_MS": "2000", "TIMER_DELAY_SEC": "1"}, NOW + 1000),
    ({"TIMER_DELIVER_MS": str(NOW + 9000), "TIMER_DELAY_MS": "2000"}, NOW + 2000),
])
def test_a_future_timer_goes_to_the_timer_topic(props: dict[str, str], due: int) -> None:
    held = timer(_msg(props), NOW, enabled=True, max_delay_ms=3 * DAY_MS)
    assert (held.topic, held.queue_id) == (RMQ_SYS_TIMER_TOPIC, 0)
    assert held.properties == {**props, "TIMER_OUT_MS": str(due), "REAL_TOPIC": "Orders", "REAL_QID": "2"}


def test_what_is_not_a_future_timer_is_left_alone() -> None:
    for msg in (_msg({}), _msg({"TIMER_DELIVER_MS": str(NOW)}), _msg({"TIMER_DELAY_MS": "-5"}),
                _msg({"TIMER_DELAY_MS": "100", "TIMER_OUT_MS": "1"}),  # already converted once
                _msg({"TIMER_DELAY_MS": "100"}, sys_flag=SysFlag.TRANSACTION_PREPARED)):
        assert timer(msg, NOW, enabled=True, max_delay_ms=DAY_MS) is msg


def test_a_delay_level_wins_over_timer_properties() -> None:
    held = timer(_msg({"DELAY": "3", "TIMER_DELAY_MS": "100", "K": "v"}), NOW, enabled=True, max_delay_ms=DAY_MS)
    assert held.topic == "Orders" and held.properties == {"DELAY": "3", "K": "v"}


@pytest.mark.parametrize(("props", "words"), [
    ({"TIMER_DELAY_MS": "soon"}, "TIMER_DELAY_MS='soon' is not a number"),
    ({"TIMER_DELAY_SEC": str(4 * 86_400)}, "more than timerMaxDelaySec"),
    ({"TIMER_DELAY_MS": "100", "TIMER_DEL_UNIQKEY": "x"}, "not supported"),
    ({"TIMER_DELIVER_MS": "1", "TIMER_DEL_UNIQKEY": "x"}, "must be due in the future"),
])
def test_refused_timers_say_why(props: dict[str, str], words: str) -> None:
    with pytest.raises(TimerIllegal, match=words):
        timer(_msg(props), NOW, enabled=True, max_delay_ms=3 * DAY_MS)
    with pytest.raises(TimerNotEnabled, match="timerWheelEnable"):
        timer(_msg({"TIMER_DELAY_MS": "100"}), NOW, enabled=False, max_delay_ms=DAY_MS)


def _open(root: Path, **overrides: object) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                                            **overrides))  # type: ignore[arg-type]
    store.load()
    store.start()
    return store


def test_timers_wait_in_the_table_survive_a_restart_and_arrive_on_time(tmp_path: Path) -> None:
    store = _open(tmp_path)
    try:
        now = int(time.time() * 1000)
        early = store.put_message(Message(topic="T", body=b"soon", properties={"TIMER_DELIVER_MS": str(now + 800),
                                                                              "UNIQ_KEY": "A"}))
        late = store.put_message(Message(topic="T", body=b"later", properties={"TIMER_DELAY_MS": "2500",
                                                                              "UNIQ_KEY": "B"}))
        assert early.ok and late.ok
        refused = store.put_message(Message(topic="T", body=b"x", properties={"TIMER_DELAY_SEC": "999999"}))
        assert refused.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        assert store.reput_service.wait_caught_up(5)
        assert store.get_max_offset_in_queue(RMQ_SYS_TIMER_TOPIC, 0) == 2
        delivered = store.get_max_offset_in_queue("T", 0)
        if int(time.time() * 1000) < now + 800:  # looked before it was due (a busy machine may be later)
            assert delivered == 0
        wait_until("the first timer delivered", lambda: store.get_max_offset_in_queue("T", 0) == 1, 10, 0.01)
        [entry] = store.get_consume_queue("T", 0).entries(0, 1)  # type: ignore[union-attr]
        first = store.look_message_by_offset(entry.commit_log_offset, entry.size)
        assert first is not None and first.body == b"soon"
        assert now + 800 <= first.store_timestamp <= now + 800 + 1000
        props = first.properties
        assert (props["REAL_TOPIC"], props["REAL_QID"], props["TIMER_OUT_MS"]) == ("T", "0", str(now + 800))
        assert int(props["TIMER_ENQUEUE_MS"]) <= int(props["TIMER_DEQUEUE_MS"]) <= first.store_timestamp
        # the row goes once the put is done
        wait_until("the delivered timer's row removed", lambda: store.timer_message_store.pending() == 1, 10, 0.01)
    finally:
        store.shutdown()
    # the second timer is a row in the table, not something held in memory
    with sqlite3.connect(tmp_path / "timer" / "timers.db") as db:
        assert db.execute("SELECT COUNT(*), MIN(delivering) FROM timers").fetchone() == (1, 0)

    store = _open(tmp_path)
    opened_ms = int(time.time() * 1000)
    try:
        assert store.timer_message_store.pending() == 1
        wait_until("the second timer delivered", lambda: store.get_max_offset_in_queue("T", 0) == 2, 10, 0.01)
        [entry] = store.get_consume_queue("T", 0).entries(1, 1)  # type: ignore[union-attr]
        second = store.look_message_by_offset(entry.commit_log_offset, entry.size)
        assert second is not None and second.body == b"later"
        due = int(second.properties["TIMER_OUT_MS"])
        # on time; or, if it fell due while the store was closed (a slow machine), promptly after it opened
        assert due <= second.store_timestamp <= max(due, opened_ms) + 1000
        wait_until("the delivered timer's row removed", lambda: store.timer_message_store.pending() == 0, 10, 0.01)
        assert store.get_max_offset_in_queue("T", 0) == 2
    finally:
        store.shutdown()


def test_timers_are_refused_when_the_wheel_is_disabled(tmp_path: Path) -> None:
    store = _open(tmp_path, timer_wheel_enable=False)
    try:
        put = store.put_message(Message(topic="T", body=b"x", properties={"TIMER_DELAY_MS": "500"}))
        assert put.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE
        assert store.put_message(Message(topic="T", body=b"y")).ok
    finally:
        store.shutdown()
