"""RocketMQ 5.3's ``Resource``: what a policy entry covers and what a request touches, and ``Action``.

A resource is a type (Cluster, Namespace, Topic, Group, or Any for everything) and a name matched
LITERAL (equal), PREFIXED (the name starts with it) or ANY (every name of the type). Its text form,
used by mqadmin and in the persisted ACLs, is the resource key: ``*`` (any type, any name),
``Topic:*``, ``Topic:order-`` + ``*`` for a prefix, ``Group:g1`` for a literal. Type names compare
case-insensitively on parsing, as Apache's ``getByName``; a key naming no known type is None.

A group is named without its retry or dead-letter prefix: a request touching ``%RETRY%g`` touches
``Group:g`` (Resource.ofGroup).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rocketstore.common.mix_all import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

ASTERISK = "*"


class ResourceType(enum.Enum):
    """Apache's ResourceType; the value is the name mqadmin and the stored keys use."""

    ANY = "Any"
    CLUSTER = "Cluster"
    NAMESPACE = "Namespace"
    TOPIC = "Topic"
    GROUP = "Group"

    @classmethod
    def by_name(cls, name: str) -> ResourceType | None:
        return next((member for member in cls if member.value.lower() == name.strip().lower()), None)


class ResourcePattern(enum.Enum):
    ANY = "ANY"
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Action(enum.Enum):
    """Apache's Action (common module). ALL in an entry grants every action; ANY is only ever asked
    for (a request any granted action satisfies) and cannot be granted."""

    ALL = "All"
    ANY = "Any"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"

    @classmethod
    def by_name(cls, name: str) -> Action | None:
        return next((member for member in cls if member.value.lower() == name.strip().lower()), None)


def is_retry_or_dlq(name: str) -> bool:
    return name.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def without_retry_and_dlq(name: str) -> str:
    """``%RETRY%g`` / ``%DLQ%g`` -> ``g`` (NamespaceUtil.withOutRetryAndDLQ, no namespaces here)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource; ``name`` is None for the ANY pattern, the prefix (without ``*``) for PREFIXED."""

    type: ResourceType
    name: str | None
    pattern: ResourcePattern = ResourcePattern.LITERAL

    @classmethod
    def of_topic(cls, topic: str) -> Resource:
        return cls(ResourceType.TOPIC, topic)

    @classmethod
    def of_group(cls, group: str) -> Resource:
        return cls(ResourceType.GROUP, without_retry_and_dlq(group))

    @classmethod
    def of_cluster(cls, cluster: str) -> Resource:
        return cls(ResourceType.CLUSTER, cluster)

    @classmethod
    def parse(cls, key: str | None) -> Resource | None:
        """A resource key (see the module docstring); None when blank or of an unknown type."""
        if key is None or not key.strip():
            return None
        if key == ASTERISK:
            return cls(ResourceType.ANY, None, ResourcePattern.ANY)
        type_name, _, name = key.partition(":")
        resource_type = ResourceType.by_name(type_name)
        if resource_type is None:
            return None
        if name == ASTERISK:
            return cls(resource_type, None, ResourcePattern.ANY)
        if name.endswith(ASTERISK):
            return cls(resource_type, name[: name.index(ASTERISK)], ResourcePattern.PREFIXED)
        return cls(resource_type, name)

    @property
    def key(self) -> str:
        if self.type is ResourceType.ANY:
            return ASTERISK
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:{ASTERISK}"
        suffix = ASTERISK if self.pattern is ResourcePattern.PREFIXED else ""
        return f"{self.type.value}:{self.name}{suffix}"

    def matches(self, requested: Resource) -> bool:
        """Whether this (granted) resource covers ``requested`` (a literal one)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not requested.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.PREFIXED:
            return requested.name is not None and self.name is not None and requested.name.startswith(self.name)
        return requested.name == self.name
