"""CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume.

As RocketMQ 4.9.8's SendMessageProcessor.asyncConsumerSendMsgBack: the original record is read
by its CommitLog offset and re-put with ``reconsumeTimes + 1``

* into ``%RETRY%{group}`` (created on first use with the group's ``retryQueueNums``, random
  queue), or
* into ``%DLQ%{group}`` (one queue, ``DELAY=0``) once the original's reconsumeTimes reached the
  maximum — the header's ``maxReconsumeTimes`` for clients from V3_4_9 on, else the group's
  ``retryMaxTimes`` (16) — or when the client asks for it with a negative ``delayLevel``.

Properties are kept, plus ``RETRY_TOPIC`` (the original topic, unless already set by an earlier
retry), ``ORIGIN_MESSAGE_ID`` (the first offset message id, kept across retries) and
``WAIT=false``; body, flag, sysFlag, born timestamp, born host and store host are the
original's. A group with ``retryQueueNums <= 0`` drops the message and answers SUCCESS. Any put
status but PUT_OK answers SYSTEM_ERROR with the status name.

Back-off: a retry is put with ``DELAY`` = the client's ``delayLevel``, or ``3 + reconsumeTimes``
when it sends 0 (10 s, 30 s, 1 min, 2 min, ... with the default ``messageDelayLevel``), so the
store holds it on SCHEDULE_TOPIC_XXXX until its schedule service delivers it to the retry queue.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.processor.send import (
    DLQ_NUMS_PER_GROUP,
    PROPERTY_WAIT_STORE_MSG_OK,
    VERSION_V3_4_9,
    random_queue_id,
)
from rocketstore.broker.server import Connection, Handler
from rocketstore.common.message import PROPERTY_DELAY_TIME_LEVEL, Message, StoredMessage
from rocketstore.common.mix_all import dlq_topic, retry_topic
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import ConsumerSendMsgBackRequestHeader
from rocketstore.store.status import PutMessageStatus

PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"


def retry_delay_level(delay_level: int, reconsume_times: int) -> int:
    """The delay level RocketMQ would schedule a retry with (0 from the client means automatic)."""
    return 3 + reconsume_times if delay_level == 0 else delay_level


def build_send_back_message(
    original: StoredMessage, topic: str, queue_id: int, *, to_dlq: bool, delay_level: int
) -> Message:
    """The record a send-back puts: the original with retry bookkeeping (see the module docstring)."""
    props = dict(original.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
    props[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    props[PROPERTY_DELAY_TIME_LEVEL] = "0" if to_dlq else str(delay_level)
    if not props.get(PROPERTY_ORIGIN_MESSAGE_ID, "").strip():
        props[PROPERTY_ORIGIN_MESSAGE_ID] = original.msg_id
    return Message(
        topic=topic, body=original.body, queue_id=queue_id, flag=original.flag, properties=props,
        sys_flag=original.sys_flag, born_timestamp=original.born_timestamp, born_host=original.born_host,
        store_host=original.store_host, reconsume_times=original.reconsume_times + 1,
    )


class ConsumerSendMsgBackProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back}

    def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        broker = self.broker
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        group = broker.subscription_group_manager.find_subscription_group_config(header.group)
        if group is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                    f"subscription group not exist, {header.group}")
        if not broker.broker_config.broker_permission & PERM_WRITE:
            return request.response(ResponseCode.NO_PERMISSION,
                                    f"the broker[{broker.store_host.host}] sending message is forbidden")
        if group.retry_queue_nums <= 0:
            return request.response(ResponseCode.SUCCESS)
        topic = retry_topic(header.group)
        queue_id = random_queue_id(group.retry_queue_nums)
        topic_sys_flag = 0x2 if header.unit_mode else 0  # TopicSysFlag unit-sub
        topic_config = broker.topic_config_manager.create_topic_in_send_back(topic, group.retry_queue_nums,
                                                                             PERM_WRITE | PERM_READ, topic_sys_flag)
        if not topic_config.perm & PERM_WRITE:
            return request.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        original = broker.store.look_message_by_offset(header.offset)
        if original is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {header.offset}")

        max_reconsume = group.retry_max_times
        if request.version >= VERSION_V3_4_9 and header.max_reconsume_times is not None:
            max_reconsume = header.max_reconsume_times
        to_dlq = original.reconsume_times >= max_reconsume or header.delay_level < 0
        if to_dlq:
            topic = dlq_topic(header.group)
            queue_id = random_queue_id(DLQ_NUMS_PER_GROUP)
            broker.topic_config_manager.create_topic_in_send_back(topic, DLQ_NUMS_PER_GROUP, PERM_WRITE | PERM_READ, 0)

        msg = build_send_back_message(original, topic, queue_id, to_dlq=to_dlq,
                                      delay_level=retry_delay_level(header.delay_level, original.reconsume_times))
        # WAIT=false: the put never waits for a sync flush, so it stays on the loop
        result = broker.store.put_message(msg)
        if result.status is PutMessageStatus.PUT_OK:
            # SNDBCK_PUT_NUMS by the message's first topic (a retried message's RETRY_TOPIC)
            broker.broker_stats_manager.inc_send_back(header.group,
                                                      original.properties.get(PROPERTY_RETRY_TOPIC, original.topic))
            return request.response(ResponseCode.SUCCESS)
        return request.response(ResponseCode.SYSTEM_ERROR, result.status.value)
