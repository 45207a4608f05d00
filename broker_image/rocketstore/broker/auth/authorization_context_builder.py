"""What a remoting request touches, as RocketMQ 5.3's DefaultAuthorizationContextBuilder reads it:
one :class:`AuthorizationContext` per resource, each with the actions the request needs there.

Two sources, as in Apache. The client request codes are read field by field (:func:`build`):

=========================================  ========================================================
GET_ROUTEINFO_BY_TOPIC                     the topic Pub|Sub|Get (a retry topic: its group Sub|Get)
SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH  the topic Pub; a send to a retry topic: the group Sub
END_TRANSACTION                            the topic Pub, when the header names one
CONSUMER_SEND_MSG_BACK                     the group Sub
PULL_MESSAGE                               the topic Sub (not a retry topic) and the group Sub
QUERY_MESSAGE                              the topic Sub|Get
HEART_BEAT                                 each consumer group Sub and its subscribed topics Sub
UNREGISTER_CLIENT                          the consumer group Sub, when named
GET_CONSUMER_LIST_BY_GROUP                 the group Sub|Get
QUERY_CONSUMER_OFFSET                      the topic (not retry) and the group Sub|Get
UPDATE_CONSUMER_OFFSET                     the topic (not retry) and the group Sub|Update
LOCK_BATCH_MQ, UNLOCK_BATCH_MQ             the group Sub, each queue's topic (not retry) Sub
=========================================  ========================================================

Every other code is read from Apache's header annotations (``@RocketMQAction`` /
``@RocketMQResource``), transcribed into :data:`_ANNOTATED` for the codes this broker knows: the
header fields naming a topic or group become resources with the code's actions (a retry topic
named as a topic is its group); a Cluster-typed code naming none is this broker's cluster. A code
with neither (e.g. GET_BROKER_CLUSTER_INFO, UPDATE_BROKER_CONFIG: no annotated header in 5.3.3)
needs no authorization beyond authentication, as in Apache. A request whose body or header does
not decode is refused ("parse authorization context error.").

A gRPC request (:func:`build_grpc`) is read by its message type, as Apache's builder reads it:

================================  ===========================================================
SendMessage                       the first message's topic Pub
EndTransaction                    the topic Pub
Heartbeat                         a consumer's group Sub (lite ones too; a producer's: nothing)
ReceiveMessage                    the group Sub and the queue's topic Sub
AckMessage, ForwardMessageToDLQ   the group Sub and the topic Sub
ChangeInvisibleDuration           the group Sub
NotifyClientTermination           the group Sub, when named
QueryRoute                        the topic Pub or Sub
QueryAssignment                   the group Sub and the topic Sub
Telemetry settings                each publishing topic Pub; the subscription's group and topics Sub
PullMessage, GetOffset,           the group Sub and the queue's topic Sub; QueryOffset the topic Sub
UpdateOffset, QueryOffset         (Apache 5.3.3's proxy does not serve them: checked as ReceiveMessage)
================================  ===========================================================

A resource the request must name and does not (a blank topic or group, no message, no queue) is
refused with Apache's message ("topic is null.", "group is null.", "message is null.",
"messageQueue is null."); so is a settings command with neither publishing nor subscription.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from rocketstore.broker.auth.authorization_provider import AuthorizationContext
from rocketstore.broker.auth.resource import Action, Resource, ResourceType
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.common.mix_all import RETRY_GROUP_TOPIC_PREFIX
from rocketstore.remoting.acl_signer import ACCESS_KEY
from rocketstore.remoting.body import HeartbeatData, LockBatchRequestBody, UnlockBatchRequestBody
from rocketstore.remoting.codes import RequestCode as C
from rocketstore.remoting.command import RemotingCommand

PARSE_ERROR: Final = "parse authorization context error."


class AuthorizationParseError(ValueError):
    """The request could not be read into contexts; Apache refuses it with :data:`PARSE_ERROR`."""


@dataclass(frozen=True, slots=True)
class _Annotated:
    """A header's ``@RocketMQAction`` (resource type, actions) and its ``@RocketMQResource`` fields."""

    actions: tuple[Action, ...]
    fields: tuple[tuple[str, ResourceType, str], ...] = ()  # (ext field, type, splitter or "")
    cluster: bool = False  # resource = CLUSTER: the broker's cluster when no field names a resource


_G, _T = ResourceType.GROUP, ResourceType.TOPIC
_GET, _SUB, _PUB, _UPDATE = (Action.GET,), (Action.SUB,), (Action.PUB,), (Action.UPDATE,)


def _cluster(*actions: Action) -> _Annotated:
    return _Annotated(actions, cluster=True)


_ANNOTATED: Final[Mapping[int, _Annotated]] = {
    C.ADD_WRITE_PERM_OF_BROKER: _cluster(Action.UPDATE),
    C.AUTH_CREATE_USER: _cluster(Action.UPDATE), C.AUTH_UPDATE_USER: _cluster(Action.UPDATE),
    C.AUTH_DELETE_USER: _cluster(Action.UPDATE), C.AUTH_GET_USER: _cluster(Action.GET),
    C.AUTH_LIST_USER: _cluster(Action.GET), C.AUTH_CREATE_ACL: _cluster(Action.UPDATE),
    C.AUTH_UPDATE_ACL: _cluster(Action.UPDATE), C.AUTH_DELETE_ACL: _cluster(Action.UPDATE),
    C.AUTH_GET_ACL: _cluster(Action.GET), C.AUTH_LIST_ACL: _cluster(Action.GET),
    C.CHECK_TRANSACTION_STATE: _Annotated(_PUB, (("topic", _T, ""),)),
    C.CLONE_GROUP_OFFSET: _Annotated(_UPDATE, (("destGroup", _G, ""), ("topic", _T, ""))),
    C.CONSUME_MESSAGE_DIRECTLY: _Annotated(_SUB, (("consumerGroup", _G, ""), ("topic", _T, ""))),
    C.DELETE_KV_CONFIG: _cluster(Action.UPDATE),
    C.DELETE_SUBSCRIPTIONGROUP: _Annotated((Action.DELETE,), (("groupName", _G, ""),)),
    C.DELETE_TOPIC_IN_BROKER: _Annotated((Action.DELETE,), (("topic", _T, ""),)),
    C.DELETE_TOPIC_IN_NAMESRV: _Annotated(_UPDATE, (("clusterName", ResourceType.CLUSTER, ""),), cluster=True),
    C.GET_BROKER_CONSUME_STATS: _cluster(Action.GET),
    C.GET_CONSUMER_CONNECTION_LIST: _Annotated(_GET, (("consumerGroup", _G, ""),)),
    C.GET_CONSUMER_RUNNING_INFO: _Annotated(_GET, (("consumerGroup", _G, ""),)),
    C.GET_CONSUME_STATS: _Annotated(_GET, (("consumerGroup", _G, ""), ("topic", _T, ""), ("topicList", _T, ";"))),
    C.GET_EARLIEST_MSG_STORETIME: _Annotated(_GET, (("topic", _T, ""),)),
    C.GET_KVLIST_BY_NAMESPACE: _cluster(Action.GET),
    C.GET_KV_CONFIG: _cluster(Action.GET),
    C.GET_MAX_OFFSET: _Annotated(_GET, (("topic", _T, ""),)),
    C.GET_MIN_OFFSET: _Annotated(_GET, (("topic", _T, ""),)),
    C.GET_PRODUCER_CONNECTION_LIST: _cluster(Action.GET),
    C.GET_TOPIC_STATS_INFO: _Annotated(_GET, (("topic", _T, ""),)),
    C.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: _Annotated(_GET, (("topic", _T, ""), ("group", _G, ""))),
    C.INVOKE_BROKER_TO_RESET_OFFSET: _Annotated(_UPDATE, (("group", _G, ""), ("topic", _T, ""))),
    C.NOTIFY_CONSUMER_IDS_CHANGED: _Annotated(_SUB, (("consumerGroup", _G, ""),)),
    C.PUSH_REPLY_MESSAGE_TO_CLIENT: _Annotated(_SUB, (("producerGroup", _G, ""), ("topic", _T, ""))),
    C.PUT_KV_CONFIG: _cluster(Action.UPDATE),
    C.QUERY_CONSUME_QUEUE: _Annotated(_GET, (("topic", _T, ""), ("consumerGroup", _G, ""))),
    C.QUERY_CONSUME_TIME_SPAN: _Annotated(_GET, (("topic", _T, ""), ("group", _G, ""))),
    C.QUERY_CORRECTION_OFFSET: _Annotated(_GET, (("filterGroups", _G, ","), ("compareGroup", _G, ""),
                                                 ("topic", _T, ""))),
    C.QUERY_DATA_VERSION: _Annotated(_GET, (("clusterName", ResourceType.CLUSTER, ""),), cluster=True),
    C.QUERY_TOPIC_CONSUME_BY_WHO: _Annotated(_GET, (("topic", _T, ""),)),
    C.REGISTER_BROKER: _Annotated(_UPDATE, (("clusterName", ResourceType.CLUSTER, ""),), cluster=True),
    C.SEARCH_OFFSET_BY_TIMESTAMP: _Annotated(_GET, (("topic", _T, ""),)),
    C.UNREGISTER_BROKER: _Annotated(_UPDATE, (("clusterName", ResourceType.CLUSTER, ""),), cluster=True),
    C.UPDATE_AND_CREATE_TOPIC: _Annotated((Action.CREATE,), (("topic", _T, ""),)),
    C.VIEW_BROKER_STATS_DATA: _cluster(Action.GET),
    C.VIEW_MESSAGE_BY_ID: _Annotated(_GET, (("topic", _T, ""),)),
    C.WIPE_WRITE_PERM_OF_BROKER: _cluster(Action.UPDATE),
}


def build(request: RemotingCommand, source_ip: str, cluster_name: str) -> list[AuthorizationContext]:
    """The contexts of ``request`` from ``source_ip``; raises AuthorizationParseError."""
    ext = request.ext_fields
    if not ext:
        return []
    username = ext.get(ACCESS_KEY)
    rpc_code = str(request.code)
    result: list[AuthorizationContext] = []

    def need(resource: Resource, *actions: Action) -> None:
        result.append(AuthorizationContext(username, resource, actions, source_ip, rpc_code))

    def send(topic_key: str, group_key: str) -> None:
        topic = _required(ext, topic_key)
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            need(Resource.of_group(ext.get(group_key) or topic), Action.SUB)
        else:
            need(Resource.of_topic(topic), Action.PUB)

    def topic_unless_retry(topic: str | None, *actions: Action) -> None:
        if topic is not None and not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            need(Resource.of_topic(topic), *actions)

    code = request.code
    try:
        if code == C.GET_ROUTEINFO_BY_TOPIC:
            topic = _required(ext, "topic")
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                need(Resource.of_group(topic), Action.SUB, Action.GET)
            else:
                need(Resource.of_topic(topic), Action.PUB, Action.SUB, Action.GET)
        elif code == C.SEND_MESSAGE:
            send("topic", "group")
        elif code in (C.SEND_MESSAGE_V2, C.SEND_BATCH_MESSAGE):
            send("b", "a")
        elif code == C.END_TRANSACTION:
            if ext.get("topic", "").strip():
                need(Resource.of_topic(ext["topic"]), Action.PUB)
        elif code == C.CONSUMER_SEND_MSG_BACK:
            need(Resource.of_group(_required(ext, "group")), Action.SUB)
        elif code == C.PULL_MESSAGE:
            topic_unless_retry(_required(ext, "topic"), Action.SUB)
            need(Resource.of_group(_required(ext, "consumerGroup")), Action.SUB)
        elif code == C.QUERY_MESSAGE:
            need(Resource.of_topic(_required(ext, "topic")), Action.SUB, Action.GET)
        elif code == C.HEART_BEAT:
            for consumer in HeartbeatData.decode(request.body).consumer_data_set:
                need(Resource.of_group(consumer.group_name), Action.SUB)
                for subscription in consumer.subscription_data_set:
                    topic_unless_retry(subscription.topic, Action.SUB)
        elif code == C.UNREGISTER_CLIENT:
            if ext.get("consumerGroup", "").strip():
                need(Resource.of_group(ext["consumerGroup"]), Action.SUB)
        elif code == C.GET_CONSUMER_LIST_BY_GROUP:
            need(Resource.of_group(_required(ext, "consumerGroup")), Action.SUB, Action.GET)
        elif code in (C.QUERY_CONSUMER_OFFSET, C.UPDATE_CONSUMER_OFFSET):
            second = Action.GET if code == C.QUERY_CONSUMER_OFFSET else Action.UPDATE
            topic_unless_retry(_required(ext, "topic"), Action.SUB, second)
            need(Resource.of_group(_required(ext, "consumerGroup")), Action.SUB, second)
        elif code in (C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ):
            body_type = LockBatchRequestBody if code == C.LOCK_BATCH_MQ else UnlockBatchRequestBody
            body = body_type.decode(request.body)
            need(Resource.of_group(body.consumer_group), Action.SUB)
            for queue in body.mq_set:
                topic_unless_retry(queue.topic, Action.SUB)
        elif code in _ANNOTATED:
            _by_annotation(_ANNOTATED[code], ext, cluster_name, need)
    except AuthorizationParseError:
        raise
    except Exception as exc:  # a body or header Apache's decoding would throw on
        raise AuthorizationParseError(PARSE_ERROR) from exc
    return result


def _by_annotation(annotated: _Annotated, ext: Mapping[str, str], cluster_name: str, need: _Need) -> None:
    named = False
    for field, resource_type, splitter in annotated.fields:
        value = ext.get(field)
        if value is None:
            continue
        for name in ([part for part in value.split(splitter) if part] if splitter else [value]):
            named = True
            if resource_type is ResourceType.TOPIC and name.startswith(RETRY_GROUP_TOPIC_PREFIX):
                need(Resource.of_group(name), *annotated.actions)
            else:
                need(Resource(resource_type, name), *annotated.actions)
    if not named and annotated.cluster:
        need(Resource.of_cluster(cluster_name), *annotated.actions)


class _Need(Protocol):
    """The callback :func:`build` hands the annotation reader."""

    def __call__(self, resource: Resource, *actions: Action) -> None: ...


def _required(ext: Mapping[str, str], key: str) -> str:
    value = ext.get(key)
    if value is None:
        raise AuthorizationParseError(PARSE_ERROR)
    return value


def build_grpc(message: Any, username: str | None, source_ip: str) -> list[AuthorizationContext]:
    """The contexts of the gRPC request ``message`` of ``username`` from ``source_ip`` (the table in
    the module docstring); raises AuthorizationParseError naming a missing resource."""
    rpc_code = message.DESCRIPTOR.full_name
    result: list[AuthorizationContext] = []

    def topic(resource: Any, action: Action) -> None:
        if not resource.name.strip():
            raise AuthorizationParseError("topic is null.")
        result.append(AuthorizationContext(username, Resource.of_topic(resource.name), (action,), source_ip,
                                           rpc_code))

    def group(resource: Any) -> None:
        if not resource.name.strip():
            raise AuthorizationParseError("group is null.")
        result.append(AuthorizationContext(username, Resource.of_group(resource.name), (Action.SUB,), source_ip,
                                           rpc_code))

    def queue(request: Any) -> Any:
        if not request.HasField("message_queue"):
            raise AuthorizationParseError("messageQueue is null.")
        return request.message_queue.topic

    if isinstance(message, pb.SendMessageRequest):
        if not message.messages:
            raise AuthorizationParseError("message is null.")
        topic(message.messages[0].topic, Action.PUB)
    elif isinstance(message, pb.EndTransactionRequest):
        topic(message.topic, Action.PUB)
    elif isinstance(message, pb.HeartbeatRequest):
        if message.client_type in _CONSUMER_TYPES:
            group(message.group)
    elif isinstance(message, (pb.ReceiveMessageRequest, pb.PullMessageRequest, pb.GetOffsetRequest,
                              pb.UpdateOffsetRequest)):
        queue_topic = queue(message)
        group(message.group)
        topic(queue_topic, Action.SUB)
    elif isinstance(message, pb.QueryOffsetRequest):
        topic(queue(message), Action.SUB)
    elif isinstance(message, (pb.AckMessageRequest, pb.ForwardMessageToDeadLetterQueueRequest,
                              pb.QueryAssignmentRequest)):
        group(message.group)
        topic(message.topic, Action.SUB)
    elif isinstance(message, pb.ChangeInvisibleDurationRequest):
        group(message.group)
    elif isinstance(message, pb.NotifyClientTerminationRequest):
        if message.group.name.strip():
            group(message.group)
    elif isinstance(message, pb.QueryRouteRequest):
        if not message.topic.name.strip():
            raise AuthorizationParseError("topic is null.")
        result.append(AuthorizationContext(username, Resource.of_topic(message.topic.name),
                                           (Action.PUB, Action.SUB), source_ip, rpc_code))
    elif isinstance(message, pb.TelemetryCommand) and message.HasField("settings"):
        settings = message.settings
        if not settings.HasField("publishing") and not settings.HasField("subscription"):
            raise AuthorizationParseError("settings command doesn't have publishing or subscription.")
        for published in settings.publishing.topics:
            topic(published, Action.PUB)
        if settings.HasField("subscription"):
            group(settings.subscription.group)
            for entry in settings.subscription.subscriptions:
                topic(entry.topic, Action.SUB)
    return result


#: Apache 5.3.3 knows the first three; the lite consumers (later protocol) join a group as well
_CONSUMER_TYPES: Final = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER, pb.PULL_CONSUMER, pb.LITE_PUSH_CONSUMER,
                                    pb.LITE_SIMPLE_CONSUMER})
