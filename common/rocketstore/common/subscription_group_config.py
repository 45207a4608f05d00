"""SubscriptionGroupConfig: a consumer group's settings, as RocketMQ 4.9.8 writes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocketstore.common.fastjson import Fields, as_bool, as_int, as_object, as_str


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """RocketMQ 4.9.8 ``SubscriptionGroupConfig`` (consumer group settings), plus 5.x's
    ``consumeMessageOrderly``: the group consumes FIFO over gRPC (pop hands out a queue's messages
    only after the previous ones are acked). It is written only when set, so the tables of a
    store without FIFO groups stay byte for byte what 4.9.8 writes (4.9.8 ignores the key)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0  # MixAll.MASTER_ID
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_message_orderly: bool = False

    @property
    def table_key(self) -> str:
        return self.group_name

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }
        if self.consume_message_orderly:
            data["consumeMessageOrderly"] = True
        return dict(sorted(data.items()))

    @classmethod
    def from_dict(cls, value: object) -> SubscriptionGroupConfig:
        data = as_object(value, "subscription group")
        name = as_str(data.get("groupName"), "groupName")
        read = Fields(data, name).read
        return cls(
            group_name=name,
            consume_enable=read("consumeEnable", True, as_bool),
            consume_from_min_enable=read("consumeFromMinEnable", True, as_bool),
            consume_broadcast_enable=read("consumeBroadcastEnable", True, as_bool),
            retry_queue_nums=read("retryQueueNums", 1, as_int),
            retry_max_times=read("retryMaxTimes", 16, as_int),
            broker_id=read("brokerId", 0, as_int),
            which_broker_when_consume_slowly=read("whichBrokerWhenConsumeSlowly", 1, as_int),
            notify_consumer_ids_changed_enable=read("notifyConsumerIdsChangedEnable", True, as_bool),
            consume_message_orderly=read("consumeMessageOrderly", False, as_bool),
        )
