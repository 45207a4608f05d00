"""RocketMQ 5.3's ``AuthMigrator`` (``migrateAuthFromV1Enabled``): plain_acl.yml accounts (ACL 1.0)
made into users and ACLs, once per account, at start.

The files read are ACL 1.0's (plain_permission_manager.py: ``HOME/conf/acl/**`` and the default
file ``rocketmq.acl.plain.file``). For each account whose access key is not a user yet:

* a user of that access key and secret key, Super for ``admin: true``, else Normal;
* a CUSTOM policy with an entry per ``topicPerms`` / ``groupPerms`` item (``name=PERM``; items of
  another form are skipped), and a DEFAULT policy with ``Topic:*`` for ``defaultTopicPerm`` and
  ``Group:*`` for ``defaultGroupPerm`` when given. A permission maps to actions and a decision as
  Apache's does: PUB -> Pub, SUB -> Sub, PUB|SUB (either order) -> Pub and Sub, all Allow; DENY,
  and anything else, -> All with Deny for DENY and Allow otherwise.

``whiteRemoteAddress`` and ``globalWhiteRemoteAddresses`` are not migrated (Apache drops them too).
An account that fails (e.g. no secret key) is logged and skipped; the others go on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from rocketstore.broker.auth.acl import Acl, AuthError, Decision, Policy, PolicyEntry, PolicyType
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.resource import Action, Resource, ResourcePattern, ResourceType
from rocketstore.broker.auth.user import User, UserType

log = logging.getLogger(__name__)

_ACTIONS: dict[str, tuple[Action, ...]] = {
    "PUB": (Action.PUB,), "SUB": (Action.SUB,), "PUB|SUB": (Action.PUB, Action.SUB),
    "SUB|PUB": (Action.PUB, Action.SUB),
}


def entry_of(resource: Resource, perm: str) -> PolicyEntry:
    """One v1 permission on ``resource`` as a policy entry (AuthMigrator.parseActions/parseDecision)."""
    perm = perm.strip()
    decision = Decision.DENY if perm == "DENY" or not perm else Decision.ALLOW
    return PolicyEntry(resource, _ACTIONS.get(perm, (Action.ALL,)), decision)


def migrated(account: Mapping[str, Any]) -> tuple[User, Acl | None]:
    """The user and ACL (None when the account names no permission) of one plain_acl.yml account."""
    access_key = str(account.get("accessKey") or "")
    secret = account.get("secretKey")
    admin = str(account.get("admin", False)).strip().lower() == "true"
    user = User(access_key, None if secret is None else str(secret), UserType.SUPER if admin else UserType.NORMAL)
    custom: list[PolicyEntry] = []
    for key, resource_of in (("topicPerms", Resource.of_topic), ("groupPerms", Resource.of_group)):
        for item in account.get(key) or []:
            parts = [part for part in str(item).split("=") if part]
            if len(parts) == 2:
                custom.append(entry_of(resource_of(parts[0].strip()), parts[1]))
    default: list[PolicyEntry] = []
    for key, resource_type in (("defaultTopicPerm", ResourceType.TOPIC), ("defaultGroupPerm", ResourceType.GROUP)):
        perm = account.get(key)
        if perm is not None and str(perm).strip():
            default.append(entry_of(Resource(resource_type, None, ResourcePattern.ANY), str(perm)))
    policies = tuple(Policy(kind, tuple(entries)) for kind, entries in
                     ((PolicyType.CUSTOM, custom), (PolicyType.DEFAULT, default)) if entries)
    return user, (Acl(user.subject_key, policies) if policies else None)


def migrate(manager: AuthMetadataManager, documents: Iterable[tuple[str, Any]]) -> int:
    """Every account of the parsed ACL files (name, YAML document) whose user does not exist yet;
    returns how many were migrated."""
    count = 0
    for source, document in documents:
        accounts = document.get("accounts") if isinstance(document, Mapping) else None
        for account in accounts if isinstance(accounts, list) else []:
            if not isinstance(account, Mapping):
                continue
            user, acl = migrated(account)
            if manager.get_user(user.username) is not None:
                continue
            try:
                manager.create_user(user)
                if acl is not None:
                    manager.create_acl(acl)
            except AuthError as exc:
                log.error("[ACL MIGRATE] %s: account %s not migrated: %s", source, user.username or "(no accessKey)",
                          exc)
                continue
            count += 1
    return count
