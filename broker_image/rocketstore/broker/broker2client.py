"""Broker2Client: requests the broker sends to its consumers on an admin tool's behalf.

* :func:`reset_offset` (INVOKE_BROKER_TO_RESET_OFFSET, 222): the offset of each queue of the
  topic at ``timestamp`` (the queue's end for -1) is pushed one-way to every consumer of the
  group as RESET_CONSUMER_CLIENT_OFFSET (220). As in RocketMQ the broker does not commit it:
  the consumers adopt it and commit it themselves. Without ``force`` a queue only moves back.
  A group with no consumer online is CONSUMER_NOT_ONLINE, which tells mqadmin to fall back to
  committing offsets itself.
* :func:`consumer_status` (INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223): GET_CONSUMER_STATUS_FROM_CLIENT
  (221) to each consumer of the group (or the one named), their offsets collected by client id.
* :func:`call_consumer` (GET_CONSUMER_RUNNING_INFO 307, CONSUME_MESSAGE_DIRECTLY 309): the
  request forwarded to one consumer, its answer returned as the tool's response.

The offset computation is :func:`reset_offsets`, a pure function of the stores' answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.client_manager import ClientChannelInfo
from rocketstore.remoting.body import (
    GetConsumerStatusBody,
    MessageQueueData,
    MessageQueueForC,
    ResetOffsetBody,
    ResetOffsetBodyForC,
)
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import GetConsumerStatusRequestHeader, ResetOffsetRequestHeader

log = logging.getLogger(__name__)

#: MQVersion.Version ordinals below which RocketMQ refuses to ask a client
V3_0_7_SNAPSHOT = 28
V3_1_8_SNAPSHOT = 62
#: how long the broker waits for a client's answer (RocketMQ: 5 s)
CALL_CLIENT_TIMEOUT_S = 5.0


class ResetError(Exception):
    """The reset cannot be computed; ``code`` and the message are the response's."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


def reset_offsets(queue_ids: range, committed: Callable[[int], int], at_time: Callable[[int], int],
                  force: bool) -> dict[int, int]:
    """Queue id -> the offset to reset to: ``at_time(queue)`` (negative read as 0) when ``force``
    or when it is behind the committed offset, else the committed offset. A queue without a
    committed offset (-1) means the group never consumed the topic: ResetError."""
    table: dict[int, int] = {}
    for queue_id in queue_ids:
        current = committed(queue_id)
        if current == -1:
            raise ResetError(ResponseCode.SYSTEM_ERROR, "")
        target = max(at_time(queue_id), 0)
        table[queue_id] = target if force or target < current else current
    return table


def reset_offset(broker: BrokerContext, request: RemotingCommand, header: ResetOffsetRequestHeader,
                 is_c: bool) -> RemotingCommand:
    """Push RESET_CONSUMER_CLIENT_OFFSET to the group's consumers; the response to the tool (its
    code, remark and a ResetOffsetBody of the offsets sent). ``is_c``: the tool is a C++ client."""
    topic, group = header.topic, header.group
    config = broker.topic_config_manager.get(topic)
    if config is None:
        return request.response(ResponseCode.SYSTEM_ERROR,
                      f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
    store = broker.store
    offsets = broker.consumer_offset_manager
    try:
        by_queue = reset_offsets(
            range(config.write_queue_nums),
            lambda q: offsets.query_offset(group, topic, q),
            (lambda q: store.get_max_offset_in_queue(topic, q)) if header.timestamp == -1
            else (lambda q: store.get_offset_in_queue_by_time(topic, q, header.timestamp)),
            header.is_force)
    except ResetError as exc:
        return request.response(exc.code, f"THe consumer group <{group}> not exist")
    name = broker.broker_config.broker_name
    table = {MessageQueueData(topic=topic, broker_name=name, queue_id=q): offset for q, offset in by_queue.items()}
    body = (ResetOffsetBodyForC(offset_table=[
        MessageQueueForC(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id, offset=offset)
        for mq, offset in table.items()]) if is_c else ResetOffsetBody(offset_table=table)).encode()
    info = broker.consumer_manager.get(group)
    if info is None or not info.channels:
        return request.response(ResponseCode.CONSUMER_NOT_ONLINE,
                      f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                      f"Timestamp: {header.timestamp}")
    push = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=header.timestamp).to_ext_fields()
    for channel in list(info.channels.values()):
        if channel.version < V3_0_7_SNAPSHOT:
            return request.response(ResponseCode.SYSTEM_ERROR,
                          f"the client does not support this feature. version={channel.version}")
        channel.connection.notify(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, push, body)
        log.info("[reset-offset] topic=%s group=%s clientId=%s offsets=%s", topic, group, channel.client_id, by_queue)
    return request.response(ResponseCode.SUCCESS, body=ResetOffsetBody(offset_table=table).encode())


async def consumer_status(broker: BrokerContext, request: RemotingCommand,
                          header: GetConsumerStatusRequestHeader) -> RemotingCommand:
    """Ask the group's consumers (or the one ``clientAddr`` names) for their offsets of the topic."""
    info = broker.consumer_manager.get(header.group)
    if info is None or not info.channels:
        return request.response(ResponseCode.SYSTEM_ERROR,
                                f"No Any Consumer online in the consumer group: [{header.group}]")
    wanted = header.client_addr or ""
    ask = GetConsumerStatusRequestHeader(topic=header.topic, group=header.group).to_ext_fields()
    table: dict[str, dict[MessageQueueData, int]] = {}
    for channel in list(info.channels.values()):
        if channel.version < V3_0_7_SNAPSHOT:
            return request.response(ResponseCode.SYSTEM_ERROR,
                          f"the client does not support this feature. version={channel.version}")
        if wanted and wanted != channel.client_id:
            continue
        try:
            answer = await channel.connection.invoke(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ask, b"",
                                                     CALL_CLIENT_TIMEOUT_S)
            if answer.code == ResponseCode.SUCCESS and answer.body:
                table[channel.client_id] = GetConsumerStatusBody.decode(answer.body).message_queue_table
        except (TimeoutError, ConnectionError, ValueError) as exc:
            log.warning("[get-consumer-status] %s of %s: %s", channel.client_id, header.group, exc)
        if wanted:
            break
    return request.response(ResponseCode.SUCCESS, body=GetConsumerStatusBody(consumer_table=table).encode())


async def call_consumer(broker: BrokerContext, request: RemotingCommand, ext_fields: Mapping[str, str], body: bytes,
                        group: str, client_id: str) -> RemotingCommand:
    """Forward ``request`` (its code, with ``ext_fields`` and ``body``) to one consumer; its answer
    becomes the response to the tool (AdminBrokerProcessor.callConsumer)."""
    channel: ClientChannelInfo | None = broker.consumer_manager.find_channel(group, client_id)
    if channel is None:
        return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
    if channel.version < V3_1_8_SNAPSHOT:
        return request.response(ResponseCode.SYSTEM_ERROR,
                      f"The Consumer <{client_id}> Version <{channel.version}> too low to finish, "
                      "please upgrade it to V3_1_8_SNAPSHOT")
    try:
        answer = await channel.connection.invoke(request.code, dict(ext_fields), body, CALL_CLIENT_TIMEOUT_S)
    except TimeoutError:
        return request.response(ResponseCode.CONSUME_MSG_TIMEOUT,
                                f"consumer <{group}> <{client_id}> Timeout: no answer in {CALL_CLIENT_TIMEOUT_S:.0f} s")
    except ConnectionError as exc:
        return request.response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}")
    return request.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)
