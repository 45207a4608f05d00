"""RocketMQ 5.3's ``DefaultAuthorizationProvider``: may this user do this action on this resource?

Pure: :func:`authorize` takes one :class:`AuthorizationContext` (a request yields one per
resource it touches) and lookups of users and ACLs, and returns Apache's AuthorizationException
message (the NO_PERMISSION remark) or None. Order (AbstractAuthorizationStrategy, then the
UserAuthorizationHandler and AclAuthorizationHandler chain):

1. a request code listed in ``authorizationWhitelist`` passes;
2. the user must exist ("User:NAME not found."); a Super user passes;
3. the entries of the user's CUSTOM policy matching the resource, one of the actions and the
   client's address are candidates; when there are none, its DEFAULT policy's are; none at all:
   "User:NAME has no permission to access RESOURCE from IP, no matched policies.";
4. the most specific candidate decides; DENY refuses ("..., the decision is deny.").

Most specific, as Apache ranks them: a typed resource before the Any type (``*``); then a
LITERAL name before a PREFIXED one before the ANY pattern (``Topic:*``); between two PREFIXED ones,
the shorter prefix first (Apache 5.3.3 sorts by ascending prefix length, so ``Topic:a*`` outranks
``Topic:ab*``; kept, so that the same metadata decides the same here and there); at equal rank,
DENY first. Apache's comparator is not a consistent order between an ANY-pattern entry and a
LITERAL/PREFIXED one of the same type (its result there depends on the order the entries were
written); here the LITERAL/PREFIXED entry always decides, which is what Apache decides when the
entries were written in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from rocketstore.broker.auth.acl import Acl, Decision, PolicyEntry, PolicyType
from rocketstore.broker.auth.resource import Action, Resource, ResourcePattern, ResourceType
from rocketstore.broker.auth.user import User

#: the remark Apache's strategy gives a failure that is not an AuthorizationException (a request
#: without an access key reaching the handlers, a NullPointerException there)
AUTHORIZATION_FAILED = "Authorization failed. Please verify your access rights and try again."

_PATTERN_RANK = {ResourcePattern.LITERAL: 0, ResourcePattern.PREFIXED: 1, ResourcePattern.ANY: 2}


@dataclass(frozen=True, slots=True)
class AuthorizationContext:
    """One resource a request touches and the actions it needs there (DefaultAuthorizationContext);
    ``username`` None when the request carries no access key."""

    username: str | None
    resource: Resource
    actions: tuple[Action, ...]
    source_ip: str
    rpc_code: str


def authorize(context: AuthorizationContext, get_user: Callable[[str], User | None],
              get_acl: Callable[[str], Acl | None], whitelist: Collection[str] = ()) -> str | None:
    """The reason to refuse ``context``, or None when it is allowed."""
    if context.rpc_code in whitelist:
        return None
    if context.username is None:
        return AUTHORIZATION_FAILED
    user = get_user(context.username)
    if user is None:
        return f"User:{context.username} not found."
    if user.is_super:
        return None
    acl = get_acl(user.subject_key)
    entry = None if acl is None else decisive_entry(acl, context)
    if entry is None:
        return _denial(context, "no matched policies.")
    if entry.decision is Decision.DENY:
        return _denial(context, "the decision is deny.")
    return None


def decisive_entry(acl: Acl, context: AuthorizationContext) -> PolicyEntry | None:
    """The entry that decides ``context`` (steps 3 and 4 of the module docstring), None if none matches."""
    for policy_type in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        policy = acl.policy(policy_type)
        candidates = [] if policy is None else matching_entries(policy.entries, context)
        if candidates:
            return min(candidates, key=rank)
    return None


def matching_entries(entries: Sequence[PolicyEntry], context: AuthorizationContext) -> list[PolicyEntry]:
    return [entry for entry in entries
            if entry.resource.matches(context.resource) and entry.matches_actions(context.actions)
            and entry.matches_source(context.source_ip)]


def rank(entry: PolicyEntry) -> tuple[int, int, int, int]:
    """Lower is more specific (see the module docstring)."""
    resource = entry.resource
    prefix = len(resource.name or "") if resource.pattern is ResourcePattern.PREFIXED else 0
    return (1 if resource.type is ResourceType.ANY else 0, _PATTERN_RANK[resource.pattern], prefix,
            0 if entry.decision is Decision.DENY else 1)


def _denial(context: AuthorizationContext, detail: str) -> str:
    return (f"User:{context.username} has no permission to access {context.resource.key} "
            f"from {context.source_ip}, {detail}")
