"""The scaling decisions (rocketstore.operator.scaling), pure: when a scale-down's drain ends, how
many groups the StatefulSets keep meanwhile, what a consumer backlog is, which topics a new broker
is given. The broker side of the same calls runs against real brokers in test_operator_scaling_brokers.py."""

from __future__ import annotations

import datetime

from rocketstore.client.admin import ConsumeStats, GroupConsumeStats, OffsetWrapper
from rocketstore.client.remoting_client import MessageQueue
from rocketstore.common.topic_config import TopicConfig
from rocketstore.operator.brokers import HeldMessages, parse_held_metrics
from rocketstore.operator.scaling import (
    Backlog,
    backlog,
    drain_condition,
    drain_step,
    leaving_brokers,
    scale_down_replicas,
    topics_to_copy,
)

T0 = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
LEAVING = ["rs-2", "rs-3"]


def _at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def _offsets(group: str, topic: str, *pairs: tuple[int, int]) -> GroupConsumeStats:
    return GroupConsumeStats(group, ConsumeStats([OffsetWrapper(MessageQueue(topic, "rs-2", q), broker, consumer, 0)
                                                  for q, (broker, consumer) in enumerate(pairs)]))


def test_backlog_counts_unconsumed_messages_of_consumer_groups_only() -> None:
    seen = backlog([
        _offsets("g1", "Orders", (10, 10), (7, 3)),
        _offsets("g2", "Orders", (10, 0)),
        _offsets("g3", "%RETRY%g3", (2, 1)),
        _offsets("g4", "Orders", (5, 5)),
        # the broker's own group on a system topic: not a consumer's backlog
        _offsets("CID_RMQ_SYS_TRANS", "RMQ_SYS_TRANS_HALF_TOPIC", (9, 0)),
        _offsets("g5", "SCHEDULE_TOPIC_XXXX", (9, 0)),
    ])
    assert seen == Backlog(messages=4 + 10 + 1, queues=3, groups=("g1", "g2", "g3"))
    assert backlog([]) == Backlog()


def test_leaving_brokers_are_the_highest_ordinals() -> None:
    assert leaving_brokers("rs", 4, 2) == LEAVING
    assert leaving_brokers("rs", 2, 2) == []


def test_drain_waits_for_the_backlog_and_the_route_refresh_grace() -> None:
    first = drain_step(None, LEAVING, 2, Backlog(5, 1, ("g1",)), [], T0, 600)
    assert first["phase"] == "Draining" and first["startedAt"] == "2026-01-01T12:00:00Z"
    assert first["deadline"] == "2026-01-01T12:10:00Z"
    assert (first["messagesPending"], first["queuesPending"], first["groupsPending"]) == (5, 1, ["g1"])
    # consumed, but producers may still hold a route naming the wiped brokers
    early = drain_step(first, LEAVING, 2, Backlog(), [], _at(30), 600)
    assert early["phase"] == "Draining" and early["startedAt"] == first["startedAt"]
    done = drain_step(early, LEAVING, 2, Backlog(), [], _at(61), 600)
    assert done["phase"] == "Drained" and done["messagesPending"] == 0
    # an ended drain stays ended (the apply step shrinks the StatefulSets at its next pass)
    assert drain_step(done, LEAVING, 2, Backlog(3, 1, ("late",)), [], _at(90), 600)["phase"] == "Drained"


def test_drain_ends_at_its_deadline_with_what_is_left() -> None:
    first = drain_step(None, LEAVING, 2, Backlog(5, 1, ("g1",)), [], T0, 120)
    late = drain_step(first, LEAVING, 2, Backlog(4, 1, ("g1",)), [], _at(120), 120)
    assert late["phase"] == "DeadlineExceeded" and late["messagesPending"] == 4
    condition = drain_condition(late)
    assert (condition.status, condition.reason) == (False, "DeadlineExceeded")
    assert "4 messages in 1 queues not consumed by g1" in condition.message


def test_drain_waits_for_delayed_timer_and_half_messages_held_on_the_leaving_brokers() -> None:
    """They are delivered (or checked) on the broker that stored them only: consumed backlog and
    the grace are not enough while a leaving broker still holds any."""
    held = HeldMessages(delayed=2, timers=1, half=3)
    first = drain_step(None, LEAVING, 2, Backlog(), [], T0, 600, held=held)
    waiting = drain_step(first, LEAVING, 2, Backlog(), [], _at(300), 600, held=held)
    assert waiting["phase"] == "Draining"
    assert (waiting["delayedPending"], waiting["timerPending"], waiting["halfPending"]) == (2, 1, 3)
    condition = drain_condition(waiting)
    assert condition.status is True
    assert "held for delivery on these brokers only: 2 delayed, 1 timer, 3 transaction half messages" \
        in condition.message
    # one kind left still holds the drain
    assert drain_step(waiting, LEAVING, 2, Backlog(), [], _at(400), 600,
                      held=HeldMessages(half=1))["phase"] == "Draining"
    # delivered, consumed: drained
    done = drain_step(waiting, LEAVING, 2, Backlog(), [], _at(500), 600, held=HeldMessages())
    assert done["phase"] == "Drained" and done["delayedPending"] == 0
    assert "no delayed, timer or transaction half message" in drain_condition(done).message
    # at the deadline the held ones are named as left behind
    late = drain_step(waiting, LEAVING, 2, Backlog(), [], _at(600), 600, held=HeldMessages(delayed=2))
    assert late["phase"] == "DeadlineExceeded"
    message = drain_condition(late).message
    assert "2 delayed messages" in message and "stay undelivered on the removed brokers' volumes" in message


def test_held_messages_are_read_from_the_brokers_metrics() -> None:
    text = "\n".join([
        "# TYPE rocketstore_delayed_messages_pending gauge",
        'rocketstore_delayed_messages_pending{level="3"} 4.0',
        'rocketstore_delayed_messages_pending{level="18"} 1.0',
        "# TYPE rocketstore_timer_messages_pending gauge",
        "rocketstore_timer_messages_pending 2.0",
        "# TYPE rocketstore_transaction_half_messages_pending gauge",
        "rocketstore_transaction_half_messages_pending 3.0",
        "# TYPE rocketstore_transaction_half_messages_total counter",
        "rocketstore_transaction_half_messages_total 9.0",
        "",
    ])
    assert parse_held_metrics(text) == HeldMessages(delayed=5, timers=2, half=3)
    assert parse_held_metrics("") == HeldMessages()
    assert HeldMessages(1, 2, 3) + HeldMessages(1, 0, 0) == HeldMessages(2, 2, 3)


def test_unreadable_broker_keeps_the_drain_waiting() -> None:
    first = drain_step(None, LEAVING, 2, Backlog(), ["rs-3"], T0, 600)
    later = drain_step(first, LEAVING, 2, Backlog(), ["rs-3"], _at(300), 600)
    assert later["phase"] == "Draining" and later["unreachable"] == ["rs-3"]
    assert "backlog unknown on rs-3" in drain_condition(later).message
    assert drain_condition(later).status is True


def test_new_target_starts_a_new_drain() -> None:
    first = drain_step(None, LEAVING, 2, Backlog(), [], T0, 600)
    done = drain_step(first, LEAVING, 2, Backlog(), [], _at(61), 600)
    assert done["phase"] == "Drained"
    again = drain_step(done, ["rs-1", "rs-2", "rs-3"], 1, Backlog(), [], _at(70), 600)
    assert again["phase"] == "Draining" and again["startedAt"] == "2026-01-01T12:01:10Z"


def test_statefulsets_keep_their_size_until_the_drain_to_that_target_ended() -> None:
    assert scale_down_replicas("rs", 4, 2, None, 600) == 4
    draining = drain_step(None, LEAVING, 2, Backlog(1, 1, ("g",)), [], T0, 600)
    assert scale_down_replicas("rs", 4, 2, draining, 600) == 4
    done = drain_step(draining, LEAVING, 2, Backlog(), [], _at(61), 600)
    assert scale_down_replicas("rs", 4, 2, done, 600) == 2
    # the drain went to 2; spec now wants 1: rs-1 has not drained
    assert scale_down_replicas("rs", 4, 1, done, 600) == 4
    late = drain_step(draining, LEAVING, 2, Backlog(1, 1, ("g",)), [], _at(600), 600)
    assert scale_down_replicas("rs", 4, 2, late, 600) == 2
    # drainTimeoutSeconds 0: no drain, as before there was one
    assert scale_down_replicas("rs", 4, 2, None, 0) == 2
    assert scale_down_replicas("rs", 2, 3, None, 600) == 3


def test_topics_to_copy_skips_system_broker_and_group_topics() -> None:
    source = {name: TopicConfig(name, read_queue_nums=4, write_queue_nums=4) for name in (
        "Orders", "Payments", "TBW102", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer", "rs", "rs-0", "rs-1",
        "%RETRY%g1", "%DLQ%g1", "rs_REPLY_TOPIC", "Existing")}
    source["Ordered"] = TopicConfig("Ordered", read_queue_nums=2, write_queue_nums=2, perm=4, order=True)
    target = {"Existing": TopicConfig("Existing", read_queue_nums=1, write_queue_nums=1)}
    copies = topics_to_copy(source, target, {"rs", "rs-0", "rs-1"})
    assert [c.topic_name for c in copies] == ["Ordered", "Orders", "Payments"]
    assert copies[0] == source["Ordered"]  # queues, permission and order as the source has them
