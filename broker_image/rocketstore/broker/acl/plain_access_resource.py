"""Both sides of RocketMQ's ``PlainAccessResource``: what a request needs, and what an account owns.

:func:`parse_request` is ``PlainAccessValidator.parse``: the client's address (port dropped), its
access key and signature, the signed content, and the resources the request code touches with the
permission each needs. Groups are resources too, named by their retry topic (``%RETRY%group``):

=========================  ==============================================================
SEND_MESSAGE(_V2)          the topic PUB; a send to ``%RETRY%...`` needs the group's SUB
CONSUMER_SEND_MSG_BACK     the group SUB
PULL_MESSAGE               the topic SUB and the group SUB
QUERY_MESSAGE              the topic SUB
HEART_BEAT                 each consumer group SUB and each subscribed topic SUB
UNREGISTER_CLIENT          the consumer group SUB
GET_CONSUMER_LIST_BY_GROUP the consumer group SUB
UPDATE_CONSUMER_OFFSET     the group SUB and the topic SUB
anything else              no resource (only the signature, and admin for the admin codes)
=========================  ==============================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketstore.broker.acl.permission import PUB, SUB
from rocketstore.broker.acl.remote_address_strategy import RemoteAddressStrategy
from rocketstore.common.mix_all import RETRY_GROUP_TOPIC_PREFIX, retry_topic
from rocketstore.remoting.acl_signer import ACCESS_KEY, SIGNATURE, request_content
from rocketstore.remoting.body import HeartbeatData
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand


class AclParseError(ValueError):
    """The request's resources could not be read (e.g. a heartbeat body that does not decode)."""


@dataclass(frozen=True, slots=True)
class NeededAccess:
    """What one request asks for."""

    request_code: int
    remote_address: str
    access_key: str | None = None
    signature: str | None = None
    content: bytes = b""
    #: resource (topic, or ``%RETRY%group`` for a group) -> needed permission bits
    resources: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlainAccount:
    """One ``accounts`` entry of plain_acl.yml, parsed (RocketMQ's buildPlainAccessResource)."""

    access_key: str
    secret_key: str
    white_remote_address: RemoteAddressStrategy
    admin: bool = False
    default_topic_perm: int = 1  # DENY, as RocketMQ defaults an absent defaultTopicPerm
    default_group_perm: int = 1
    #: topic or ``%RETRY%group`` -> owned permission bits; None when neither list is given
    resources: Mapping[str, int] | None = None


def is_retry_topic(resource: str) -> bool:
    return resource.startswith(RETRY_GROUP_TOPIC_PREFIX)


def print_resource(resource: str) -> str:
    """``topic:T`` or ``group:G``, as RocketMQ's remarks name a resource."""
    if is_retry_topic(resource):
        return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}"
    return f"topic:{resource}"


def remote_host(remote_addr: str) -> str:
    """``host:port`` -> ``host`` (RocketMQ cuts at the last ':')."""
    return remote_addr[: remote_addr.rindex(":")] if ":" in remote_addr else remote_addr


def parse_request(request: RemotingCommand, remote_addr: str) -> NeededAccess:
    """What ``request`` from ``remote_addr`` (host:port) needs; raises AclParseError on a bad body."""
    ext = request.ext_fields
    resources: dict[str, int] = {}

    def need(resource: str | None, perm: int) -> None:
        if resource is not None:
            resources[resource] = perm

    def group(name: str | None) -> str | None:
        return None if name is None else retry_topic(name)

    code = request.code
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
        topic_key, group_key = ("topic", "group") if code == RequestCode.SEND_MESSAGE else ("b", "a")
        topic = ext.get(topic_key)
        if topic is not None and is_retry_topic(topic):
            need(group(ext.get(group_key)), SUB)
        else:
            need(topic, PUB)
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        need(group(ext.get("group")), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        need(ext.get("topic"), SUB)
        need(group(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        need(ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT:
        try:
            heartbeat = HeartbeatData.decode(request.body)
        except Exception as exc:
            raise AclParseError(f"heartbeat body: {exc}") from exc
        for consumer in heartbeat.consumer_data_set:
            need(group(consumer.group_name), SUB)
            for subscription in consumer.subscription_data_set:
                need(subscription.topic, SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        need(group(ext.get("consumerGroup")), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        need(group(ext.get("consumerGroup")), SUB)
        need(ext.get("topic"), SUB)
    return NeededAccess(
        request_code=code,
        remote_address=remote_host(remote_addr),
        access_key=ext.get(ACCESS_KEY),
        signature=ext.get(SIGNATURE),
        content=request_content(ext, request.body),
        resources=resources,
    )

