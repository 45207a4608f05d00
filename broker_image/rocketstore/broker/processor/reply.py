"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): a responder's reply to a request, pushed
to the requester with PUSH_REPLY_MESSAGE_TO_CLIENT (326), as RocketMQ 4.9.8's ReplyMessageProcessor does.

Request-reply ("RPC over MQ"): ``DefaultMQProducer.request()`` sends an ordinary message carrying
``CORRELATION_ID``, ``REPLY_TO_CLIENT`` (the requester's client id) and ``TTL``; the broker adds
``CLUSTER`` as on every send. A consumer answers with ``MessageUtil.createReplyMessage``: a message
to ``{cluster}_REPLY_TOPIC`` with ``MSG_TYPE=reply`` and the request's three properties, which the
client sends with code 324 (long header names) or 325 (SendMessageRequestHeaderV2's one-letter names).

The broker then, in RocketMQ's order:

1. runs the send checks (``msgCheck``: topic name, permissions, the topic's config, queue id);
2. pushes the reply to the connection of the producer client named by ``REPLY_TO_CLIENT``
   (ProducerManager.find_channel: the requester registered it with its heartbeat) with a
   :class:`ReplyMessageRequestHeader` whose properties gain ``PUSH_REPLY_TIME``, and waits up to
   :data:`PUSH_REPLY_TIMEOUT_S` for the client's answer;
3. when ``storeReplyMessageEnable`` (the default) stores the reply in the reply topic exactly as
   sent: the client's properties string unchanged (no ``CLUSTER``, no ``PUSH_REPLY_TIME``).

The response's code is the push's outcome, not the put's: SUCCESS when the requester took the
reply; SYSTEM_ERROR with RocketMQ's remarks when ``REPLY_TO_CLIENT`` is missing, when no connection
of that client is known (the requester is gone) or when the push failed or timed out. A failed
put is only logged, as in RocketMQ; a successful one puts its msgId / queueOffset in the response
header (else ``msgId`` "0" and offset 0, which RocketMQ sets so the client can decode it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.processor.send import SendMessageProcessor, SendOutcome, put_waits, random_queue_id
from rocketstore.broker.server import Connection, Handler, Reply
from rocketstore.common.clock import now_ms
from rocketstore.common.message import HostAddress, Message, properties_to_string, string_to_properties
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)

log = logging.getLogger(__name__)

#: MessageConst.PROPERTY_MESSAGE_REPLY_TO_CLIENT: the requester's client id.
PROPERTY_MESSAGE_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
#: MessageConst.PROPERTY_PUSH_REPLY_TIME: when the broker pushed the reply (only in the pushed copy).
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
#: Broker2Client.callClient's invokeSync timeout.
PUSH_REPLY_TIMEOUT_S = 10.0


def java_host_port(address: HostAddress) -> str:
    """``getAddress().getHostAddress() + ":" + getPort()``: IPv6 without brackets, as RocketMQ writes it."""
    return f"{address.host}:{address.port}"


def push_header(header: SendMessageRequestHeader, properties: str, born_host: HostAddress,
                store_host: HostAddress, store_timestamp: int) -> ReplyMessageRequestHeader:
    """The PUSH_REPLY_MESSAGE_TO_CLIENT header for a reply sent with ``header`` (pushReplyMessage)."""
    return ReplyMessageRequestHeader(
        producer_group=header.producer_group, topic=header.topic, default_topic=header.default_topic,
        default_topic_queue_nums=header.default_topic_queue_nums, queue_id=header.queue_id,
        sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, flag=header.flag, properties=properties,
        reconsume_times=header.reconsume_times, unit_mode=header.unit_mode,
        born_host=java_host_port(born_host), store_host=java_host_port(store_host), store_timestamp=store_timestamp,
    )


class ReplyMessageProcessor(SendMessageProcessor):
    """Codes 324 and 325. A SendMessageProcessor for its checks (both are RocketMQ
    AbstractSendMessageProcessors), with a push before the put and the push deciding the answer."""

    def __init__(self, broker: BrokerContext) -> None:
        super().__init__(broker)
        #: replies the requester took (pushed and answered SUCCESS)
        self.pushed = 0
        #: replies whose requester was unknown (no REPLY_TO_CLIENT or no connection of that client)
        self.no_requester = 0
        #: replies the requester's connection failed to take (error answer, timeout, closed)
        self.push_failed = 0
        broker.add_gauge("rocketstore_reply_messages_pushed", "Reply messages pushed to their requester "
                         "(a count since start)", lambda: self.pushed)
        broker.add_gauge("rocketstore_reply_messages_without_requester", "Reply messages whose requester was "
                         "not connected (a count since start)", lambda: self.no_requester)
        broker.add_gauge("rocketstore_reply_messages_push_failed", "Reply messages the requester's connection "
                         "failed to take (a count since start)", lambda: self.push_failed)

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.SEND_REPLY_MESSAGE: self.handle, RequestCode.SEND_REPLY_MESSAGE_V2: self.handle}

    def handle(self, conn: Connection, request: RemotingCommand) -> Reply:
        if request.code == RequestCode.SEND_REPLY_MESSAGE:
            header = SendMessageRequestHeader.from_ext_fields(request.ext_fields)
        else:
            header = SendMessageRequestHeader.from_v2_ext_fields(request.ext_fields)
        start_accept = self.broker.broker_config.start_accept_send_request_time_stamp
        if now_ms() < start_accept:
            return self._fail(request, ResponseCode.SYSTEM_ERROR, f"broker unable to service, until {start_accept}")
        checked = self._check(conn.peer, header)
        if isinstance(checked, SendOutcome):
            return self.respond(request, checked)
        queue_id = header.queue_id if header.queue_id >= 0 else random_queue_id(checked.write_queue_nums)
        properties = string_to_properties(header.properties or "")
        msg = Message(
            topic=header.topic, body=request.body, queue_id=queue_id, flag=header.flag, properties=properties,
            sys_flag=header.sys_flag, born_timestamp=header.born_timestamp, born_host=conn.peer_host,
            store_host=self.broker.store_host, reconsume_times=header.reconsume_times or 0,
        )
        return self._push_then_store(conn, request, header, msg)

    async def _push_then_store(self, conn: Connection, request: RemotingCommand, header: SendMessageRequestHeader,
                               msg: Message) -> RemotingCommand:
        push_error = await self._push(conn, header, msg)
        fields = self._response_fields()
        if push_error is None:
            code, remark = ResponseCode.SUCCESS, None
            fields.update(SendMessageResponseHeader(msg_id="0", queue_id=msg.queue_id, queue_offset=0).to_ext_fields())
        else:
            code, remark = ResponseCode.SYSTEM_ERROR, push_error
        if self.broker.broker_config.store_reply_message_enable:
            fields.update(await self._store(request, msg))
        return request.response(code, remark, fields)

    async def _push(self, conn: Connection, header: SendMessageRequestHeader, msg: Message) -> str | None:
        """Push the reply to its requester; None when it took it, else the remark RocketMQ answers."""
        sender_id = msg.properties.get(PROPERTY_MESSAGE_REPLY_TO_CLIENT)
        if sender_id is None:
            self.no_requester += 1
            log.warning("%s is null, can not reply message", PROPERTY_MESSAGE_REPLY_TO_CLIENT)
            return f"reply message properties[{PROPERTY_MESSAGE_REPLY_TO_CLIENT}] is null"
        requester = self.broker.producer_manager.find_channel(sender_id)
        if requester is None:
            self.no_requester += 1
            remark = f"push reply message fail, channel of <{sender_id}> not found."
            log.warning("%s", remark)
            return remark
        pushed_properties = dict(msg.properties)  # the stored copy keeps the client's properties
        pushed_properties[PROPERTY_PUSH_REPLY_TIME] = str(now_ms())
        push = push_header(header, properties_to_string(pushed_properties), conn.peer_host,
                           self.broker.store_host, now_ms())
        failure = f"push reply message to {sender_id}fail."  # RocketMQ's remark, its missing space included
        try:
            answer = await requester.invoke(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.to_ext_fields(),
                                            msg.body, PUSH_REPLY_TIMEOUT_S)
        except (TimeoutError, ConnectionError) as exc:
            self.push_failed += 1
            log.warning("push reply message to <%s> fail (%s): %r", sender_id, requester.peer, exc)
            return failure
        if answer.code != ResponseCode.SUCCESS:
            self.push_failed += 1
            log.warning("push reply message to <%s> return fail, response remark: %s", sender_id, answer.remark)
            return failure
        self.pushed += 1
        return None

    async def _store(self, request: RemotingCommand, msg: Message) -> dict[str, str]:
        """Put the reply in the reply topic; its response-header fields when stored, else none (logged)."""
        result = self.broker.store.put_message(msg, wait_flush=False)
        flush, replica = put_waits(self.broker.store_config, msg.properties)
        outcome = await self._outcome_when_stored(result, msg.topic, msg.queue_id, batch=False, flush=flush,
                                                  replica=replica)
        stored = self.respond(request, outcome)
        if not result.ok:
            log.warning("reply message to %s not stored: %s %s", msg.topic, result.status.value, stored.remark or "")
            return {}
        return {name: stored.ext_fields[name] for name in ("msgId", "queueId", "queueOffset")}
