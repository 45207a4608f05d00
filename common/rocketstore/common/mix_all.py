"""MixAll: the naming conventions RocketMQ derives from consumer groups and clusters."""

from __future__ import annotations

from typing import Final

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
CID_RMQ_SYS_PREFIX: Final = "CID_RMQ_SYS_"
#: The group whose offsets on the half and op topics record how far transaction checks got.
CID_SYS_RMQ_TRANS: Final = "CID_RMQ_SYS_TRANS"
MASTER_ID: Final = 0


def retry_topic(group: str) -> str:
    """The topic a group's failed messages are sent back to (MixAll.getRetryTopic)."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """The topic a group's messages go to after their last retry (MixAll.getDLQTopic)."""
    return DLQ_GROUP_TOPIC_PREFIX + group
