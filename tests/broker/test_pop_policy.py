"""The pop receive's rules (rocketstore.broker.grpc_v2.pop_policy), without a broker: which in-flight
messages go out again, which go to the dead-letter queue, what a FIFO queue holds back, and what a
store read of a queue turns into. Through a broker and a gRPC client: test_grpc_endpoint.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.broker.grpc_v2.pop_log import Cursor, InFlight, Invisible, PopState, apply
from rocketstore.broker.grpc_v2.pop_policy import (
    DEFAULT_RETRY_MAX_TIMES,
    DeliveryPolicy,
    Redelivery,
    fifo_holds_new,
    queue_order,
    redelivery,
    redelivery_candidates,
    take_new_messages,
)
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.store.status import GetMessageStatus

FIFO = DeliveryPolicy(max_attempts=3, fifo=True)
PLAIN = DeliveryPolicy(max_attempts=3, fifo=False)
NOW = 1_000


def test_the_policy_follows_the_subscription_group_config() -> None:
    assert DeliveryPolicy.of(None) == DeliveryPolicy(max_attempts=DEFAULT_RETRY_MAX_TIMES + 1, fifo=False)
    orderly = SubscriptionGroupConfig("g", retry_max_times=2, consume_message_orderly=True)
    assert DeliveryPolicy.of(orderly) == DeliveryPolicy(max_attempts=3, fifo=True)
    assert DeliveryPolicy.of(SubscriptionGroupConfig("g", retry_max_times=0)) == DeliveryPolicy(1, fifo=False)


def test_a_due_message_of_a_plain_group_goes_out_alone() -> None:
    held = InFlight(NOW, 1)
    others = {0: held, 1: InFlight(NOW + 50, 1), 2: InFlight(NOW - 5, 2)}
    assert redelivery_candidates(PLAIN, 4, 0, held, others, set(), NOW) == [(0, held)]


def test_a_fifo_queue_waits_while_any_of_its_messages_is_invisible() -> None:
    entries = {3: InFlight(NOW, 1), 5: InFlight(NOW + 1, 1)}
    assert redelivery_candidates(FIFO, 0, 3, entries[3], entries, set(), NOW) is None


def test_a_fifo_queue_goes_out_again_whole_in_offset_order_once_all_are_due() -> None:
    entries = {9: InFlight(NOW - 10, 2), 3: InFlight(NOW, 1), 5: InFlight(NOW - 1, 1)}
    assert redelivery_candidates(FIFO, 0, 9, entries[9], entries, set(), NOW) == [
        (3, entries[3]), (5, entries[5]), (9, entries[9])]
    # those this receive took already stay out (a second due item of the same queue)
    assert redelivery_candidates(FIFO, 0, 9, entries[9], entries, {(0, 3), (0, 5), (1, 9)}, NOW) == [
        (9, entries[9])]


@given(st.dictionaries(st.integers(0, 50), st.builds(InFlight, st.integers(NOW - 20, NOW + 20), st.integers(1, 5)),
                       min_size=1, max_size=8),
       st.sets(st.integers(0, 50), max_size=4), st.data())
def test_fifo_candidates_are_the_whole_queue_in_order_or_nothing(entries: dict[int, InFlight], taken_offsets: set[int],
                                                                 data: st.DataObject) -> None:
    offset = data.draw(st.sampled_from(sorted(entries)))
    taken = {(7, o) for o in taken_offsets}
    candidates = redelivery_candidates(FIFO, 7, offset, entries[offset], entries, taken, NOW)
    if any(held.visible_at_ms > NOW for held in entries.values()):
        assert candidates is None
    else:
        assert candidates is not None
        assert [o for o, _ in candidates] == sorted(set(entries) - taken_offsets)
        assert all(entries[o] is held for o, held in candidates)


def test_a_message_gone_from_the_store_is_dropped_whatever_its_attempt() -> None:
    assert redelivery(False, 1, PLAIN) is Redelivery.GONE
    assert redelivery(False, 99, PLAIN) is Redelivery.GONE


@pytest.mark.parametrize(("attempt", "fate"), [(1, Redelivery.AGAIN), (2, Redelivery.AGAIN),
                                               (3, Redelivery.DEAD_LETTER), (4, Redelivery.DEAD_LETTER)])
def test_a_message_delivered_max_attempts_times_goes_to_the_dead_letter_queue(attempt: int, fate: Redelivery) -> None:
    assert redelivery(True, attempt, PLAIN) is fate


@given(st.integers(1, 20), st.integers(1, 40))
def test_no_message_is_delivered_more_than_max_attempts_times(max_attempts: int, attempt: int) -> None:
    fate = redelivery(True, attempt, DeliveryPolicy(max_attempts, fifo=False))
    assert (fate is Redelivery.AGAIN) == (attempt + 1 <= max_attempts)


def test_a_fifo_queue_with_messages_in_flight_gives_no_new_one() -> None:
    assert fifo_holds_new(FIFO, {4: InFlight(NOW, 1)})
    assert not fifo_holds_new(FIFO, {})
    assert not fifo_holds_new(FIFO, None)
    assert not fifo_holds_new(PLAIN, {4: InFlight(NOW, 1)})


def test_the_queues_are_read_from_the_rotating_first_one_on() -> None:
    assert queue_order(0, 4) == [0, 1, 2, 3]
    assert queue_order(6, 4) == [2, 3, 0, 1]
    assert queue_order(3, 0) == []


def test_found_messages_go_out_invisible_at_their_first_attempt() -> None:
    new = take_new_messages("g", "t", 1, 10, 10, GetMessageStatus.FOUND, 13, [(10, "a"), (11, None), (12, "c")], 500)
    first, third = Invisible("g", "t", 1, 10, 500, 1), Invisible("g", "t", 1, 12, 500, 1)
    assert new.deliveries == [(first, "a"), (third, "c")]
    assert new.records == [first, third]  # the cursor follows the last delivery: no Cursor record
    assert new.touched


def test_a_new_group_logs_where_it_starts() -> None:
    new = take_new_messages("g", "t", 0, None, 7, GetMessageStatus.NO_MESSAGE_IN_QUEUE, 7, [], 500)
    assert new.records == [Cursor("g", "t", 0, 7)]
    assert new.deliveries == []
    assert not new.touched


def test_messages_filtered_away_move_the_cursor_past_them() -> None:
    new = take_new_messages("g", "t", 0, 4, 4, GetMessageStatus.NO_MATCHED_MESSAGE, 9, [], 500)
    assert new.records == [Cursor("g", "t", 0, 9)]
    assert new.touched


def test_a_queue_that_ends_before_the_cursor_moves_it_back() -> None:
    new = take_new_messages("g", "t", 2, 30, 30, GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0, [], 500)
    assert new.records == [Cursor("g", "t", 2, 0)]
    assert new.deliveries == []
    assert new.touched


@given(st.integers(0, 100), st.one_of(st.none(), st.integers(0, 100)), st.integers(0, 20),
       st.sampled_from([s for s in GetMessageStatus if s is not GetMessageStatus.OFFSET_OVERFLOW_BADLY]),
       st.lists(st.booleans(), max_size=6), st.integers(0, 10))
def test_a_read_moves_the_cursor_to_the_furthest_offset_seen(cursor: int, logged: int | None, gap: int,
                                                             status: GetMessageStatus, messages: list[bool],
                                                             beyond: int) -> None:
    """Applied to the pop log's state, a read's records leave the cursor past every delivery and
    at least at the store's next offset, never behind where the read started; each delivery is
    in flight at its first attempt."""
    found = [(cursor + gap + i, f"m{i}" if present else None) for i, present in enumerate(messages)]
    if status is not GetMessageStatus.FOUND:
        found = []
    next_begin = cursor + beyond + (len(found) + gap if found else 0)
    state = PopState()
    if logged is not None:
        apply(state, Cursor("g", "t", 0, logged))
    new = take_new_messages("g", "t", 0, logged, cursor, status, next_begin, found, 500)
    for record in new.records:
        apply(state, record)
    delivered = [offset for offset, message in found if message is not None]
    assert [(r.offset, m) for r, m in new.deliveries] == [(o, m) for o, m in found if m is not None]
    assert state.cursors[("g", "t", 0)] == max([cursor, next_begin, *(o + 1 for o in delivered)])
    assert {o: held.attempt for o, held in state.in_flight.get(("g", "t", 0), {}).items()} == dict.fromkeys(
        delivered, 1)
    assert new.touched == (next_begin > cursor or status is GetMessageStatus.FOUND)
