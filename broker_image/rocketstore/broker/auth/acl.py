"""RocketMQ 5.3's ``Acl``: a subject's policies, each a list of entries (resource, actions, source
IPs, decision), and their JSON form (Apache's ``AclInfo`` / ``PolicyInfo`` / ``PolicyEntryInfo``).

An ACL has at most one policy per type: CUSTOM (what mqadmin writes unless told otherwise) and
DEFAULT (consulted only when no CUSTOM entry matches a request). Within a policy an entry is
identified by its resource: writing an entry for a resource already present replaces its actions,
source IPs and decision (Policy.updateEntry); creating an ACL for a subject that has one merges
the same way (AuthorizationMetadataManagerImpl.createAcl).

Source IPs are addresses (equal text) or CIDR blocks; an entry without any matches every client.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rocketstore.broker.auth.resource import Action, Resource
from rocketstore.broker.auth.user import member_by_name


class AuthError(ValueError):
    """A request Apache answers with an AuthenticationException / AuthorizationException: the
    message is the response remark (NO_PERMISSION)."""


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(enum.Enum):
    CUSTOM = "Custom"
    DEFAULT = "Default"


def is_valid_ip_or_cidr(text: str) -> bool:
    """IPAddressUtils.isValidIPOrCidr: an IPv4/IPv6 address, or one with a prefix length in range."""
    try:
        if "/" in text:
            address, _, prefix = text.partition("/")
            parsed = ipaddress.ip_address(address)
            return prefix.isdigit() and 0 <= int(prefix) <= parsed.max_prefixlen
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def ip_in_range(ip: str, source: str) -> bool:
    """IPAddressUtils.isIPInRange: ``source`` without ``/`` matches equal text, else the CIDR block
    (host bits of the block's address ignored) contains ``ip``."""
    if "/" not in source:
        return ip == source
    try:
        network = ipaddress.ip_network(source, strict=False)
        return ipaddress.ip_address(ip) in network
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    resource: Resource
    actions: tuple[Action, ...]
    decision: Decision
    source_ips: tuple[str, ...] = ()

    def matches_actions(self, requested: Iterable[Action]) -> bool:
        """PolicyEntry.isMatchAction: a request asking ANY is met by any entry with actions; else
        one requested action must be granted, ALL granting every one."""
        if not self.actions:
            return False
        wanted = tuple(requested)
        if Action.ANY in wanted:
            return True
        return any(action in self.actions or Action.ALL in self.actions for action in wanted)

    def matches_source(self, source_ip: str | None) -> bool:
        if not self.source_ips:
            return True
        if not source_ip:
            return False
        return any(ip_in_range(source_ip, source) for source in self.source_ips)

    def to_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"resource": self.resource.key, "actions": [a.value for a in self.actions]}
        if self.source_ips:
            info["sourceIps"] = list(self.source_ips)
        info["decision"] = self.decision.value
        return info


@dataclass(frozen=True, slots=True)
class Policy:
    policy_type: PolicyType
    entries: tuple[PolicyEntry, ...]

    def updated(self, new_entries: Iterable[PolicyEntry]) -> Policy:
        """Entries of the same resource replaced in place, new resources appended."""
        entries = list(self.entries)
        for new in new_entries:
            index = next((i for i, e in enumerate(entries) if e.resource == new.resource), None)
            if index is None:
                entries.append(new)
            else:
                entries[index] = new
        return replace(self, entries=tuple(entries))

    def without(self, resource: Resource) -> Policy:
        return replace(self, entries=tuple(e for e in self.entries if e.resource != resource))

    def to_info(self) -> dict[str, Any]:
        return {"policyType": self.policy_type.value, "entries": [e.to_info() for e in self.entries]}


@dataclass(frozen=True, slots=True)
class Acl:
    subject: str  # the subject key, ``User:name``
    policies: tuple[Policy, ...]

    def policy(self, policy_type: PolicyType) -> Policy | None:
        return next((p for p in self.policies if p.policy_type is policy_type), None)

    def updated(self, policies: Iterable[Policy]) -> Acl:
        """Acl.updatePolicy: each policy merged into this ACL's policy of its type, or added."""
        result = list(self.policies)
        for new in policies:
            index = next((i for i, p in enumerate(result) if p.policy_type is new.policy_type), None)
            if index is None:
                result.append(new)
            else:
                result[index] = result[index].updated(new.entries)
        return replace(self, policies=tuple(result))

    def without(self, policy_type: PolicyType, resource: Resource) -> Acl:
        """Acl.deletePolicy: the resource's entry removed, and the policy if that emptied it."""
        result: list[Policy] = []
        for policy in self.policies:
            if policy.policy_type is policy_type:
                policy = policy.without(resource)
                if not policy.entries:
                    continue
            result.append(policy)
        return replace(self, policies=tuple(result))

    def to_info(self) -> dict[str, Any]:
        return {"subject": self.subject, "policies": [p.to_info() for p in self.policies]}


def acl_from_info(info: Mapping[str, Any], subject: str | None) -> Acl:
    """An ACL from an AclInfo document (AclConverter.convertAcl), validated as
    AuthorizationMetadataManagerImpl.validate does before a create or update; raises AuthError with
    Apache's message. ``subject`` (the request header's) is used when the document names none.
    A policy without a type is CUSTOM (initAcl); unknown action names are dropped, as Apache's."""
    policies: list[Policy] = []
    for policy_info in _list(info.get("policies")):
        if not isinstance(policy_info, Mapping):
            raise AuthError("The policies is empty.")
        entry_infos = _list(policy_info.get("entries"))
        if not entry_infos:
            continue
        entries = tuple(_entry_from_info(entry) for entry in entry_infos)
        policies.append(Policy(member_by_name(PolicyType, policy_info.get("policyType")) or PolicyType.CUSTOM, entries))
    subject_key = info.get("subject") or subject
    if not subject_key or not isinstance(subject_key, str):
        raise AuthError("The subject type is null.")
    if not policies:
        raise AuthError("The policies is empty.")
    return Acl(subject_key, tuple(policies))


def _entry_from_info(info: Any) -> PolicyEntry:
    if not isinstance(info, Mapping):
        raise AuthError("The resource is null.")
    resource = Resource.parse(info.get("resource") if isinstance(info.get("resource"), str) else None)
    if resource is None:
        raise AuthError("The resource is null.")
    actions = tuple(a for a in (Action.by_name(str(name)) for name in _list(info.get("actions"))) if a is not None)
    if not actions:
        raise AuthError("The actions is empty.")
    if Action.ANY in actions:
        raise AuthError("The actions can not be Any.")
    source_ips = tuple(str(ip) for ip in _list(info.get("sourceIps")))
    for ip in source_ips:
        if not ip.strip():
            raise AuthError("The source ip is empty.")
        if not is_valid_ip_or_cidr(ip):
            raise AuthError("The source ip is invalid.")
    decision = member_by_name(Decision, info.get("decision"))
    if decision is None:
        raise AuthError("The decision is null or illegal.")
    return PolicyEntry(resource, actions, decision, source_ips)


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list) else []
