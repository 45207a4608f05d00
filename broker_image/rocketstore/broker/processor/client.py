"""Client membership: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
CHECK_CLIENT_CONFIG (46) — RocketMQ's ClientManageProcessor and getConsumerListByGroup.

A heartbeat registers every producer and consumer group the client runs on this connection (see
client_manager.py), and compiles the SQL92 subscriptions among them (filter/consumer_filter_manager.py).
For each consumer group it also makes sure the group's subscription config
and its retry topic ``%RETRY%{group}`` exist (retryQueueNums queues, read/write), as RocketMQ
does, so the consumer's route query for the retry topic finds it.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.client_manager import ClientChannelInfo
from rocketstore.broker.filter.consumer_filter_manager import compile_expression
from rocketstore.broker.server import Connection, Handler
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.filter import SelectorSyntaxError, is_tag_type
from rocketstore.common.mix_all import retry_topic
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.remoting.body import GetConsumerListByGroupResponseBody, HeartbeatData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader

# TopicSysFlag.buildSysFlag(false, true): the unit-sub flag a unit-mode consumer's retry topic gets.
_UNIT_SUB_FLAG = 0x2

# ConsumeType, MessageModel and ConsumeFromWhere constants in ordinal order. The C++ client (and
# the Python client built on it) sends these ConsumerData fields as numbers; RocketMQ's fastjson
# reads a number into an enum by ordinal, so its broker holds (and its admin answers show) names.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                      "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                      "CONSUME_FROM_TIMESTAMP")


def enum_name(value: str | None, names: tuple[str, ...]) -> str | None:
    """``value`` as an enum constant name: a number is an ordinal into ``names``; names pass as they are."""
    if value is not None and value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return value


class ClientManageProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> Mapping[int, Handler]:
        return {
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
        }

    def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.decode(request.body)
        broker = self.broker
        info = ClientChannelInfo(conn, data.client_id, request.language, request.version)
        for consumer in data.consumer_data_set:
            group_config = broker.subscription_group_manager.find_subscription_group_config(consumer.group_name)
            notify = True
            if group_config is not None:
                notify = group_config.notify_consumer_ids_changed_enable
                broker.topic_config_manager.create_topic_in_send_back(
                    retry_topic(consumer.group_name), group_config.retry_queue_nums, PERM_READ | PERM_WRITE,
                    _UNIT_SUB_FLAG if consumer.unit_mode else 0)
            broker.consumer_manager.register(
                consumer.group_name, info, enum_name(consumer.consume_type, CONSUME_TYPES),
                enum_name(consumer.message_model, MESSAGE_MODELS),
                enum_name(consumer.consume_from_where, CONSUME_FROM_WHERE), consumer.subscription_data_set, notify)
            broker.consumer_filter_manager.register(consumer.group_name, consumer.subscription_data_set)
        for producer in data.producer_data_set:
            broker.producer_manager.register(producer.group_name, info)
        return request.response(ResponseCode.SUCCESS)

    def unregister_client(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        broker = self.broker
        if header.producer_group is not None:
            broker.producer_manager.unregister(header.producer_group, conn)
        if header.consumer_group is not None:
            group_config = broker.subscription_group_manager.find_subscription_group_config(header.consumer_group)
            notify = group_config.notify_consumer_ids_changed_enable if group_config is not None else True
            broker.consumer_manager.unregister(header.consumer_group, conn, notify)
        return request.response(ResponseCode.SUCCESS)

    def consumer_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
        info = self.broker.consumer_manager.get(header.consumer_group)
        ids = info.client_ids() if info is not None else []
        if not ids:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}")
        return request.response(ResponseCode.SUCCESS, body=GetConsumerListByGroupResponseBody(
            consumer_id_list=ids).encode())

    def check_client_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """What a consumer asks at start for each non-tag subscription (the Java client's
        checkClientInBroker; its start() fails with the code and remark when not SUCCESS).

        As RocketMQ's ClientManageProcessor.checkClientConfig: a tag subscription (or none) is
        fine; any other type is refused with SYSTEM_ERROR unless ``enablePropertyFilter``; then
        an expression that does not compile answers SUBSCRIPTION_PARSE_FAILED with the reason.
        """
        sub: object = None
        if request.body:
            try:
                body = parse_fastjson(request.body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                return request.response(ResponseCode.SYSTEM_ERROR, "CHECK_CLIENT_CONFIG body does not parse")
            sub = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(sub, dict):
            return request.response(ResponseCode.SUCCESS)
        expression_type = sub.get("expressionType")
        if is_tag_type(expression_type if isinstance(expression_type, str) else None):
            return request.response(ResponseCode.SUCCESS)
        if not self.broker.broker_config.enable_property_filter:
            return request.response(ResponseCode.SYSTEM_ERROR,
                                    f"The broker does not support consumer to filter message by {expression_type}")
        expression = sub.get("subString")
        try:
            compile_expression(str(expression_type), expression if isinstance(expression, str) else None)
        except SelectorSyntaxError as exc:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc))
        return request.response(ResponseCode.SUCCESS)
