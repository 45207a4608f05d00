"""The pop log (rocketstore.broker.grpc_v2.pop_log): record format, replay semantics, torn tails,
compaction; and receipt handles. Through a restarted broker process: tests/compat/python5/test_python_5x_client.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.broker.grpc_v2 import pop_log, receipt_handle
from rocketstore.broker.grpc_v2.pop_log import Ack, Cursor, InFlight, Invisible, PopLog, PopState, Record

names = st.text(min_size=1, max_size=20)
records = st.one_of(
    st.builds(Invisible, names, names, st.integers(0, 1023), st.integers(0, 2**40), st.integers(0, 2**50),
              st.integers(1, 100)),
    st.builds(Ack, names, names, st.integers(0, 1023), st.integers(0, 2**40)),
    st.builds(Cursor, names, names, st.integers(0, 1023), st.integers(0, 2**40)),
)


@given(st.lists(records, max_size=20))
def test_records_round_trip(batch: list[Record]) -> None:
    data = b"".join(pop_log.encode_record(r) for r in batch)
    assert pop_log.decode_records(data) == (batch, len(data))


@given(st.lists(records, min_size=1, max_size=10), st.data())
def test_a_torn_tail_ends_the_replay_at_the_last_whole_record(batch: list[Record], data: st.DataObject) -> None:
    frames = [pop_log.encode_record(r) for r in batch]
    whole = b"".join(frames[:-1])
    cut = data.draw(st.integers(0, len(frames[-1]) - 1))
    assert pop_log.decode_records(whole + frames[-1][:cut]) == (batch[:-1], len(whole))


def test_a_corrupt_record_ends_the_replay() -> None:
    first, second = Cursor("g", "t", 0, 5), Cursor("g", "t", 1, 7)
    data = bytearray(pop_log.encode_record(first) + pop_log.encode_record(second))
    data[-1] ^= 0xFF  # the CRC no longer matches
    assert pop_log.decode_records(bytes(data)) == ([first], len(pop_log.encode_record(first)))


def test_apply_receive_redeliver_ack() -> None:
    state = PopState()
    pop_log.apply(state, Invisible("g", "t", 0, 3, 1000, 1))
    assert state.cursors[("g", "t", 0)] == 4
    assert state.in_flight[("g", "t", 0)] == {3: InFlight(1000, 1)}
    pop_log.apply(state, Invisible("g", "t", 0, 3, 2000, 2))  # delivered again
    assert state.in_flight[("g", "t", 0)][3] == InFlight(2000, 2)
    pop_log.apply(state, Ack("g", "t", 0, 3))
    assert ("g", "t", 0) not in state.in_flight
    pop_log.apply(state, Ack("g", "t", 0, 3))  # acked twice: no change, no error
    assert state.cursors[("g", "t", 0)] == 4
    pop_log.apply(state, Invisible("g", "t", 0, 1, 3000, 1))  # an earlier offset again: the cursor stays
    assert state.cursors[("g", "t", 0)] == 4
    pop_log.apply(state, Cursor("g", "t", 0, 2))  # set, back too (the store lost its tail)
    assert state.cursors[("g", "t", 0)] == 2


@given(st.lists(records, max_size=40))
def test_snapshot_rebuilds_the_same_state(batch: list[Record]) -> None:
    state = PopState()
    for record in batch:
        pop_log.apply(state, record)
    rebuilt = PopState()
    for record in pop_log.snapshot(state):
        pop_log.apply(rebuilt, record)
    assert rebuilt == state


def test_the_file_survives_reopening_and_cuts_a_torn_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = PopLog(tmp_path)
    log.open()
    log.append([Invisible("g", "t", 0, 0, 5000, 1), Invisible("g", "t", 0, 1, 5000, 1)])
    log.append([Ack("g", "t", 0, 0)])
    log.close()
    with (tmp_path / pop_log.LOG_NAME).open("ab") as f:  # a crash in the middle of an append
        f.write(pop_log.encode_record(Ack("g", "t", 0, 1))[:-3])
    again = PopLog(tmp_path)
    again.open()
    assert "do not decode" in caplog.text
    assert again.state.in_flight == {("g", "t", 0): {1: InFlight(5000, 1)}}
    assert again.state.cursors == {("g", "t", 0): 2}
    again.append([Ack("g", "t", 0, 1)])  # appended after the cut, so the next replay sees it
    again.close()
    third = PopLog(tmp_path)
    third.open()
    assert third.state.in_flight == {}
    third.close()


def test_compaction_keeps_the_file_proportional_to_the_live_state(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pop_log, "COMPACT_MIN_BYTES", 4096)
    log = PopLog(tmp_path)
    log.open()
    for offset in range(2000):
        log.append([Invisible("group", "topic", 0, offset, 10_000, 1)])
        log.append([Ack("group", "topic", 0, offset)])
    log.append([Invisible("group", "topic", 0, 2000, 10_000, 1)])
    assert log.size <= 4096 + 100  # compacted on the way: 4,000 records would be ~180 KB
    log.close()
    assert (tmp_path / pop_log.LOG_NAME).stat().st_size == log.size
    again = PopLog(tmp_path)
    again.open()
    assert again.state.in_flight == {("group", "topic", 0): {2000: InFlight(10_000, 1)}}
    assert again.state.cursors == {("group", "topic", 0): 2001}
    again.close()


def test_receipt_handles() -> None:
    handle = receipt_handle.ReceiptHandle(3, 42, 1_700_000_000_123)
    assert receipt_handle.decode(handle.encode()) == handle
    for bad in ("", "rs1_1_2", "rs2_1_2_3", "rs1_a_2_3", "rs1_-1_2_3"):
        with pytest.raises(ValueError, match="receipt handle"):
            receipt_handle.decode(bad)


small_records = st.one_of(  # few groups, queues and offsets, so records meet the same entries
    st.builds(Invisible, st.sampled_from("gh"), st.just("t"), st.integers(0, 3), st.integers(0, 30),
              st.integers(0, 100), st.integers(1, 5)),
    st.builds(Ack, st.sampled_from("gh"), st.just("t"), st.integers(0, 3), st.integers(0, 30)),
    st.builds(Cursor, st.sampled_from("gh"), st.just("t"), st.integers(0, 3), st.integers(0, 30)),
)


@given(st.lists(small_records, max_size=200), st.integers(0, 100))
def test_the_indexes_agree_with_the_state(batch: list[Record], now: int) -> None:
    """What a receive and an ack read off the indexes (oldest offset of a queue, earliest visible time,
    the due messages earliest first) is what a scan of the whole state gives."""
    state = PopState()
    for record in batch:
        pop_log.apply(state, record)
    assert state.in_flight_count() == sum(len(entries) for entries in state.in_flight.values())
    for key, entries in state.in_flight.items():
        assert state.oldest_in_flight(key) == min(entries)
    for group in "gh":
        held = sorted((h.visible_at_ms, q, o) for (g, _, q), entries in state.in_flight.items() if g == group
                      for o, h in entries.items())
        assert state.earliest_visible(group, "t") == (held[0][0] if held else None)
        taken = []
        while (due := state.pop_due(group, "t", now)) is not None:
            queue_id, offset, entry = due
            taken.append((entry.visible_at_ms, queue_id, offset))
        assert taken == [item for item in held if item[0] <= now]
        for _, queue_id, offset in taken:  # put back, they come off again in the same order
            state.rearm(group, "t", queue_id, offset)
        again = []
        while (due := state.pop_due(group, "t", now)) is not None:
            again.append((due[2].visible_at_ms, due[0], due[1]))
        assert again == taken
