"""Changing the number of broker groups without losing messages or leaving topics behind.

Scale-down (``spec.brokers`` below the running count, with ``scaling.allowScaleDown``) removes the
highest ordinals, and with them whatever their CommitLogs hold that no consumer has read yet. So
the StatefulSets keep their size while the leaving brokers drain:

1. the operator wipes the leaving brokerNames' write permission on every name server of the store
   (WIPE_WRITE_PERM_OF_BROKER, what ``mqadmin wipeWritePerm`` sends), every pass, so a name server
   that restarted has it again; producers move their sends to the other brokers at their next
   route refresh (30 s by default);
2. it reads each leaving master's consume stats (GET_BROKER_CONSUME_STATS: every group's consumer
   offset against the broker's max offset per queue) into a :class:`Backlog`;
3. it reads from each leaving master's ``/metrics`` what it holds for later
   (:class:`~rocketstore.operator.brokers.HeldMessages`): delayed messages in
   ``SCHEDULE_TOPIC_XXXX``, timer messages in the timer wheel, transaction half messages not yet
   committed or rolled back. RocketMQ delivers and checks those on the broker that stored them
   only: its ScheduleMessageService and timer wheel put a due message on its topic in that
   broker's own CommitLog, and its transaction check asks the producer about a half message and
   writes the outcome there too. So none of them is in a consumer group's backlog yet, and none
   would ever reach a consumer if the broker went first. The drain waits for them like for the
   backlog: they become backlog when due, then consumers read them;
4. the drain is over (``Drained``) once no leaving broker holds an unconsumed or held message and
   :data:`ROUTE_REFRESH_GRACE_S` have passed since it began (a producer with an older route may
   still send until then), or at its deadline (``DeadlineExceeded``, ``scaling.drainTimeoutSeconds``
   after it began), which leaves what is still there on the removed brokers' volumes: the status,
   the condition and a Warning event name it, held messages by kind. Only then does the apply
   step lower the StatefulSets (:func:`scale_down_replicas`). The PVCs stay, as every scale-down
   keeps them: raising spec.brokers again brings those brokers back on them, which then deliver.

The drain lives in ``status.drain`` from one pass to the next (:func:`drain_step` computes the next
one from the last) and is reported by the ``Draining`` condition (:func:`drain_condition`). A drain
whose target changes starts over for the new set of leaving brokers; brokers that no longer leave
(spec.brokers raised again) get their write permission back (ADD_WRITE_PERM_OF_BROKER).

Scale-up: a new broker starts with the system topics only, so the topics the store already has are
copied to it from a running broker (GET_ALL_TOPIC_CONFIG there, UPDATE_AND_CREATE_TOPIC on the new
one), as rocketmq-operator does, once its pod is ready: :func:`topics_to_copy`. The same pass adds
back the write permission of its brokerName on every name server, in case a drain wiped that name
before.

Everything here is pure; :mod:`rocketstore.operator.reconcile` does the reads and the calls.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rocketstore.client.admin import GroupConsumeStats
from rocketstore.common.mix_all import (
    CID_RMQ_SYS_PREFIX,
    DLQ_GROUP_TOPIC_PREFIX,
    REPLY_TOPIC_POSTFIX,
    RETRY_GROUP_TOPIC_PREFIX,
)
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import is_system_topic
from rocketstore.operator.brokers import HeldMessages
from rocketstore.operator.conditions import Condition
from rocketstore.operator.desired import pod_name

__all__ = [
    "DRAIN_CONDITION",
    "ROUTE_REFRESH_GRACE_S",
    "Backlog",
    "backlog",
    "drain_condition",
    "drain_step",
    "leaving_brokers",
    "scale_down_replicas",
    "topics_to_copy",
]

DRAIN_CONDITION: Final = "Draining"
#: two of a RocketMQ client's route refreshes (pollNameServerInterval, 30 s): a producer sends to
#: a wiped broker until its next refresh, so an empty backlog earlier proves nothing
ROUTE_REFRESH_GRACE_S: Final = 60.0
DRAINING, DRAINED, DEADLINE_EXCEEDED = "Draining", "Drained", "DeadlineExceeded"
#: how many groups with a backlog the status names
NAMED_GROUPS: Final = 10


@dataclass(frozen=True)
class Backlog:
    """What consumer groups have not consumed yet on the leaving brokers."""

    messages: int = 0
    queues: int = 0
    groups: tuple[str, ...] = ()


def backlog(stats: Iterable[GroupConsumeStats]) -> Backlog:
    """The unconsumed messages in ``stats`` (GET_BROKER_CONSUME_STATS of the leaving brokers):
    per queue, the broker's max offset less the group's committed offset. The broker's own groups
    (``CID_RMQ_SYS_*``: its transaction checks) and system topics are its business, not a
    consumer's."""
    messages = queues = 0
    groups: set[str] = set()
    for entry in stats:
        if entry.group.startswith(CID_RMQ_SYS_PREFIX):
            continue
        for offset in entry.stats.offsets:
            if is_system_topic(offset.queue.topic) or offset.diff <= 0:
                continue
            messages += offset.diff
            queues += 1
            groups.add(entry.group)
    return Backlog(messages, queues, tuple(sorted(groups)))


def leaving_brokers(name: str, running: int, wanted: int) -> list[str]:
    """The brokerNames a scale-down from ``running`` to ``wanted`` groups removes (the highest ordinals)."""
    return [pod_name(name, i) for i in range(wanted, running)]


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _same_drain(previous: Mapping[str, Any] | None, leaving: Sequence[str], target: int) -> bool:
    return previous is not None and previous.get("targetBrokers") == target and \
        sorted(previous.get("brokers") or []) == sorted(leaving)


def drain_step(previous: Mapping[str, Any] | None, leaving: Sequence[str], target: int, seen: Backlog,
               unreachable: Sequence[str], now: datetime.datetime, timeout_s: int,
               grace_s: float = ROUTE_REFRESH_GRACE_S, held: HeldMessages | None = None) -> dict[str, Any]:
    """The next ``status.drain`` of a scale-down to ``target`` groups that removes ``leaving``.

    ``previous`` is the last one: it goes on when it drained the same brokers to the same target,
    else this one starts now. ``seen`` is the backlog read this pass, ``held`` what the leaving
    brokers hold for later delivery on themselves, ``unreachable`` the leaving brokers whose stats
    or held messages could not be read: those are unknown, so the drain waits for them, up to its
    deadline. A drain that ended stays as it ended: the apply step acts on it at the next pass."""
    held = held or HeldMessages()
    kept = previous if _same_drain(previous, leaving, target) else None
    if kept is not None and kept.get("phase") in (DRAINED, DEADLINE_EXCEEDED):
        return dict(kept)
    started = _time(kept["startedAt"]) if kept is not None else now
    deadline = started + datetime.timedelta(seconds=timeout_s)
    if not unreachable and seen.messages == 0 and held.total == 0 and (now - started).total_seconds() >= grace_s:
        phase = DRAINED
    elif now >= deadline:
        phase = DEADLINE_EXCEEDED
    else:
        phase = DRAINING
    return {
        "targetBrokers": target,
        "brokers": list(leaving),
        "phase": phase,
        "startedAt": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "deadline": deadline.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "messagesPending": seen.messages,
        "queuesPending": seen.queues,
        "groupsPending": list(seen.groups[:NAMED_GROUPS]),
        "delayedPending": held.delayed,
        "timerPending": held.timers,
        "halfPending": held.half,
        "unreachable": list(unreachable),
    }


def drain_done(drain: Mapping[str, Any] | None, leaving: Sequence[str], target: int) -> bool:
    """Whether ``drain`` (``status.drain``) lets the StatefulSets shrink to ``target`` groups."""
    return drain is not None and _same_drain(drain, leaving, target) and drain.get("phase") in (DRAINED,
                                                                                                 DEADLINE_EXCEEDED)


def scale_down_replicas(name: str, running: int, wanted: int, drain: Mapping[str, Any] | None,
                        timeout_s: int) -> int:
    """How many groups the StatefulSets keep when ``wanted`` < ``running`` is allowed: ``running``
    until the drain to ``wanted`` has ended, ``wanted`` then (and at once with ``timeout_s`` 0,
    which turns draining off)."""
    if wanted >= running or timeout_s == 0:
        return wanted
    return wanted if drain_done(drain, leaving_brokers(name, running, wanted), wanted) else running


def drain_condition(drain: Mapping[str, Any]) -> Condition:
    """``Draining``: True while a drain holds a scale-down, False with how it ended."""
    target, brokers = drain.get("targetBrokers"), ", ".join(drain.get("brokers") or [])
    phase = drain.get("phase")
    pending = (f"{drain.get('messagesPending', 0)} messages in {drain.get('queuesPending', 0)} queues not consumed"
               + (f" by {', '.join(drain.get('groupsPending') or [])}" if drain.get("groupsPending") else "")
               + _held_text(drain))
    if phase == DRAINED:
        return Condition(DRAIN_CONDITION, False, DRAINED,
                         f"{brokers}: every consumer group consumed what they hold, and they hold no delayed, "
                         f"timer or transaction half message; scaling down to {target}")
    if phase == DEADLINE_EXCEEDED:
        return Condition(DRAIN_CONDITION, False, DEADLINE_EXCEEDED, (
            f"{brokers}: deadline {drain.get('deadline')} passed with {pending}; scaling down to {target}"
            + ("; held messages stay undelivered on the removed brokers' volumes until they run again"
               if _held_counts(drain) else "")))
    unreachable = drain.get("unreachable") or []
    return Condition(DRAIN_CONDITION, True, "WaitingForConsumers", (
        f"{brokers} take no new messages; {pending}"
        + (f"; backlog unknown on {', '.join(unreachable)}" if unreachable else "")
        + f"; scaling down to {target} when drained or at {drain.get('deadline')}"))


def _held_counts(drain: Mapping[str, Any]) -> list[str]:
    kinds = (("delayedPending", "delayed"), ("timerPending", "timer"), ("halfPending", "transaction half"))
    return [f"{drain[key]} {kind}" for key, kind in kinds if drain.get(key)]


def _held_text(drain: Mapping[str, Any]) -> str:
    """The held messages of ``status.drain``, for the condition: '' when there are none."""
    counts = _held_counts(drain)
    return f"; held for delivery on these brokers only: {', '.join(counts)} messages" if counts else ""


def topics_to_copy(source: Mapping[str, TopicConfig], target: Mapping[str, TopicConfig],
                   broker_topics: Iterable[str] = ()) -> list[TopicConfig]:
    """The topics of ``source`` (a running broker's table) that a new broker (``target``: its
    table) lacks, by name. Left out: system topics, every broker's own (``broker_topics``: the
    cluster's and brokers' names, which each broker creates for itself), the reply topic, and the
    groups' retry and dead-letter topics, which a broker creates when a consumer needs them there."""
    skip = set(broker_topics)
    return [config for topic, config in sorted(source.items())
            if topic not in target and topic not in skip and not is_system_topic(topic)
            and not topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
            and not topic.endswith(REPLY_TOPIC_POSTFIX)]
