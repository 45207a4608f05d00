"""TopicValidator: which topic names are legal, which are the system's, and which no client may send to.

The names and rules are RocketMQ 4.9.8's, shared by the broker (which enforces them), the store's
offline tools (the schedule topic's tagsCode is a delivery time) and the client (TBW102 routes).
"""

from __future__ import annotations

import functools
from typing import Final

AUTO_CREATE_TOPIC_KEY_TOPIC: Final = "TBW102"
RMQ_SYS_SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
RMQ_SYS_BENCHMARK_TOPIC: Final = "BenchmarkTest"
RMQ_SYS_TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
RMQ_SYS_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
RMQ_SYS_TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RMQ_SYS_SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
RMQ_SYS_OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
#: RocketMQ 5's TimerMessageStore.TIMER_TOPIC: timed messages wait there (store.timer_message_store)
RMQ_SYS_TIMER_TOPIC: Final = SYSTEM_TOPIC_PREFIX + "wheel_timer"
#: SCHEDULE_TOPIC_XXXX has one queue per delay level (messageDelayLevel has 18 by default).
SCHEDULE_TOPIC_QUEUE_NUM: Final = 18
TOPIC_MAX_LENGTH: Final = 127

#: Topics every broker treats as its own (TopicValidator.SYSTEM_TOPIC_SET).
SYSTEM_TOPICS: Final = frozenset({
    AUTO_CREATE_TOPIC_KEY_TOPIC, RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_BENCHMARK_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRACE_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_SELF_TEST_TOPIC,
    RMQ_SYS_OFFSET_MOVED_EVENT,
})
#: Topics no client may send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET, plus the timer topic:
#: a record put there directly would skip the checks a timer send goes through).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset({
    RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_TRANS_HALF_TOPIC, RMQ_SYS_TRANS_OP_HALF_TOPIC,
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, RMQ_SYS_SELF_TEST_TOPIC, RMQ_SYS_OFFSET_MOVED_EVENT, RMQ_SYS_TIMER_TOPIC,
})
_VALID_TOPIC_CHARS: Final = frozenset("%|-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic without a broker's own extra names (cluster, broker, reply)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


@functools.lru_cache(maxsize=4096)
def validate_topic(topic: str) -> str | None:
    """None if ``topic`` is a usable name, else RocketMQ's remark (answered with SYSTEM_ERROR).

    Cached: every send asks, about the few topics a broker serves, and the check is per character.
    """
    if not topic or not topic.strip():
        return "The specified topic is blank."
    if any(ch not in _VALID_TOPIC_CHARS for ch in topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    if len(topic) > TOPIC_MAX_LENGTH:
        return "The specified topic is longer than topic max length."
    return None
