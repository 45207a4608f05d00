"""TopicConfig: a topic's queues, permissions and filter type, as RocketMQ 4.9.8 writes them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from rocketstore.common.fastjson import Fields, as_bool, as_int, as_object, as_str
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE


class TopicFilterType(Enum):
    SINGLE_TAG = "SINGLE_TAG"
    MULTI_TAG = "MULTI_TAG"


@dataclass(frozen=True)
class TopicConfig:
    """RocketMQ 4.9.8 ``TopicConfig``; immutable so a change always goes through ``put``."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: TopicFilterType = TopicFilterType.SINGLE_TAG
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def table_key(self) -> str:
        return self.topic_name

    def to_dict(self) -> dict[str, Any]:
        # fastjson's order: properties sorted by name.
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type.name,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, value: object) -> TopicConfig:
        """Missing properties take RocketMQ's defaults; unknown ones (5.x additions) are ignored."""
        data = as_object(value, "topic config")
        name = as_str(data.get("topicName"), "topicName")
        read = Fields(data, name).read
        filter_name = read("topicFilterType", "SINGLE_TAG", as_str)
        if filter_name not in TopicFilterType.__members__:
            raise ValueError(f"{name}.topicFilterType: unknown value {filter_name!r}")
        return cls(
            topic_name=name,
            read_queue_nums=read("readQueueNums", 16, as_int),
            write_queue_nums=read("writeQueueNums", 16, as_int),
            perm=read("perm", PERM_READ | PERM_WRITE, as_int),
            topic_filter_type=TopicFilterType[filter_name],
            topic_sys_flag=read("topicSysFlag", 0, as_int),
            order=read("order", False, as_bool),
        )
