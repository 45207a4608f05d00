"""RocketMQ 5.3 users and ACLs of ``spec.auth``, converged on every broker of a store.

The decision is pure: :func:`desired_users` and :func:`desired_acls` turn the spec (and the
passwords read from its Secrets) into UserInfo / AclInfo documents, :func:`plan` compares them
with what one broker lists (AUTH_LIST_USER, AUTH_LIST_ACL) and answers the admin operations that
converge it. :func:`converge` is the thin I/O around it, one broker at a time, over the operator's
admin connection signed as the inner client (a Super user the broker creates at start from
``innerClientAuthenticationCredentials``).

Each broker keeps its own users.json / acls.json, so each is listed and converged on its own: a
broker that was down while the spec changed catches up at the next observation.

What is not declared is left alone unless ``spec.auth.prune``; the inner client and the initial
user are never pruned (the operator would lock itself, or the administrator, out).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from rocketstore.operator.model import Auth

if TYPE_CHECKING:
    from rocketstore.operator.brokers import AdminClient, BrokerAccess, Brokers

__all__ = ["AuthOperation", "converge", "desired_acls", "desired_users", "plan", "protected_users", "user_passwords"]

CREATE_USER: Final = "createUser"
UPDATE_USER: Final = "updateUser"
DELETE_USER: Final = "deleteUser"
CREATE_ACL: Final = "createAcl"
DELETE_ACL: Final = "deleteAcl"

#: the UserInfo fields the operator owns (a broker answers exactly these)
_USER_FIELDS: Final = ("password", "userType", "userStatus")


@dataclass(frozen=True)
class AuthOperation:
    """One admin request: ``target`` is a username (user verbs) or a subject (ACL verbs);
    ``document`` the UserInfo / AclInfo to send; ``policy_type`` / ``resource`` name one ACL entry
    to delete (both None: the subject's whole ACL)."""

    verb: str
    target: str
    document: Mapping[str, Any] | None = field(default=None, repr=False)
    policy_type: str | None = None
    resource: str | None = None

    def describe(self) -> str:
        entry = f" {self.policy_type} {self.resource}" if self.resource else ""
        return f"{self.verb} {self.target}{entry}"

    def send(self, client: AdminClient) -> None:
        """Sends this operation over a broker admin connection (brokers.py runs it in a worker
        thread); the verb decides the admin request, so brokers.py needs to know none of them."""
        if self.verb == CREATE_USER and self.document is not None:
            client.create_user(self.document)
        elif self.verb == UPDATE_USER and self.document is not None:
            client.update_user(self.document)
        elif self.verb == DELETE_USER:
            client.delete_user(self.target)
        elif self.verb == CREATE_ACL and self.document is not None:
            client.create_acl(self.document)
        elif self.verb == DELETE_ACL:
            client.delete_acl(self.target, self.policy_type, self.resource)
        else:
            raise ValueError(f"unknown auth operation {self.describe()}")


def user_passwords(auth: Auth, secrets: Mapping[str, Mapping[str, bytes]]) -> tuple[dict[str, str], list[str]]:
    """Each declared user's password from its Secret key (surrounding whitespace stripped: a Secret
    made from a file often ends in a newline), and what is missing, as spec paths."""
    passwords: dict[str, str] = {}
    missing: list[str] = []
    for i, user in enumerate(auth.users):
        ref = user.password
        data = secrets.get(ref.secret_name)
        value = None if data is None else data.get(ref.key)
        text = None if value is None else value.decode("utf-8", "replace").strip()
        if not text:
            what = (f"Secret {ref.secret_name} not found" if data is None
                    else f"Secret {ref.secret_name} has no key {ref.key}")
            missing.append(f"spec.auth.users[{i}].passwordSecretKeyRef: {what}")
            continue
        passwords[user.name] = text
    return passwords, missing


def desired_users(auth: Auth, passwords: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """UserInfo of each declared user whose password is known, by name."""
    return {u.name: {"username": u.name, "password": passwords[u.name], "userType": u.user_type,
                     "userStatus": u.state}
            for u in auth.users if u.name in passwords}


def desired_acls(auth: Auth) -> dict[str, dict[str, Any]]:
    """AclInfo of each declared ACL, by subject: one policy per type, one entry per resource (a
    resource named twice in one policy type: the later entry wins, as the broker's merge does)."""
    out: dict[str, dict[str, Any]] = {}
    for acl in auth.acls:
        by_type: dict[str, dict[str, dict[str, Any]]] = {}
        for policy in acl.policies:
            for resource in policy.resources:
                entry: dict[str, Any] = {"resource": resource, "actions": list(policy.actions)}
                if policy.source_ips:
                    entry["sourceIps"] = list(policy.source_ips)
                entry["decision"] = policy.decision
                by_type.setdefault(policy.policy_type, {})[resource] = entry
        out[acl.subject] = {"subject": acl.subject, "policies": [
            {"policyType": kind, "entries": list(entries.values())} for kind, entries in by_type.items()]}
    return out


def protected_users(auth: Auth, secrets: Mapping[str, Mapping[str, bytes]]) -> frozenset[str]:
    """Users prune never deletes: the inner client and the initial user (by the names in their
    Secrets; unreadable, nothing is known to protect and :func:`plan` is not run with prune)."""
    names: set[str] = set()
    for creds in (auth.inner_client, auth.initial_user):
        if creds is None:
            continue
        value = secrets.get(creds.secret_name, {}).get(creds.access_key_key)
        if value:
            names.add(value.decode("utf-8", "replace").strip())
    return frozenset(names)


def _entries(acl_info: Mapping[str, Any]) -> dict[tuple[str, str], tuple[tuple[str, ...], str, tuple[str, ...]]]:
    """An AclInfo as (policyType, resource) -> (actions, decision, sourceIps), order-free."""
    out: dict[tuple[str, str], tuple[tuple[str, ...], str, tuple[str, ...]]] = {}
    for policy in acl_info.get("policies") or ():
        kind = str(policy.get("policyType") or "Custom")
        for entry in policy.get("entries") or ():
            out[(kind, str(entry.get("resource")))] = (
                tuple(sorted(str(a) for a in entry.get("actions") or ())), str(entry.get("decision") or ""),
                tuple(sorted(str(ip) for ip in entry.get("sourceIps") or ())))
    return out


def _subject_user(subject: str) -> str:
    return subject.partition(":")[2]


def plan(users: Mapping[str, Mapping[str, Any]], acls: Mapping[str, Mapping[str, Any]],
         actual_users: Iterable[Mapping[str, Any]], actual_acls: Iterable[Mapping[str, Any]], *,
         prune: bool = False, protected: frozenset[str] = frozenset(),
         unknown: frozenset[str] = frozenset()) -> list[AuthOperation]:
    """The admin operations that turn one broker's users and ACLs (``actual_*``, as it lists them)
    into the declared ones, in an order the broker accepts: users first (an ACL's subject must
    exist), then ACL entries deleted before the merge that adds or changes the others (so an
    entry never lingers), then pruned users (their ACLs go with them).

    ``unknown``: declared users whose password could not be read; neither created nor pruned."""
    ops: list[AuthOperation] = []
    have_users = {str(u.get("username")): u for u in actual_users}
    for name, want in users.items():
        have = have_users.get(name)
        if have is None:
            ops.append(AuthOperation(CREATE_USER, name, want))
        elif any(have.get(k) != want.get(k) for k in _USER_FIELDS):
            ops.append(AuthOperation(UPDATE_USER, name, want))
    pruned = ({n for n in have_users if n not in users and n not in protected and n not in unknown}
              if prune else set())
    have_acls = {str(a.get("subject")): a for a in actual_acls}
    for subject, want_acl in acls.items():
        want_entries, have_entries = _entries(want_acl), _entries(have_acls.get(subject, {}))
        for kind, resource in sorted(have_entries.keys() - want_entries.keys()):
            ops.append(AuthOperation(DELETE_ACL, subject, policy_type=kind, resource=resource))
        changed = [key for key in want_entries if have_entries.get(key) != want_entries[key]]
        if changed:
            ops.append(AuthOperation(CREATE_ACL, subject, _only(want_acl, set(changed))))
    if prune:
        for subject in sorted(have_acls.keys() - acls.keys()):
            name = _subject_user(subject)
            if name not in pruned and name not in protected and name not in unknown:
                ops.append(AuthOperation(DELETE_ACL, subject))
        ops.extend(AuthOperation(DELETE_USER, name) for name in sorted(pruned))
    return ops


def _only(acl_info: Mapping[str, Any], keys: set[tuple[str, str]]) -> dict[str, Any]:
    """The AclInfo restricted to the entries ``keys`` names (the broker merges by resource)."""
    policies = []
    for policy in acl_info["policies"]:
        kind = policy["policyType"]
        entries = [e for e in policy["entries"] if (kind, e["resource"]) in keys]
        if entries:
            policies.append({"policyType": kind, "entries": entries})
    return {"subject": acl_info["subject"], "policies": policies}


async def converge(brokers: Brokers, access: BrokerAccess, auth: Auth, secrets: Mapping[str, Mapping[str, bytes]],
                   targets: Iterable[tuple[str, str]]) -> tuple[list[dict[str, str]], list[str]]:
    """Converge each broker of ``targets`` (pod name, address) to the declared users and ACLs;
    returns (problems for the Degraded condition, the operations done, described).

    A broker that refuses or fails a step is reported and the next broker is still converged: one
    broker down must not freeze the others' ACLs."""
    from rocketstore.operator.brokers import BrokerError

    passwords, missing = user_passwords(auth, secrets)
    problems = [{"reason": "SecretNotFound", "message": f"{m}; that user is not converged"} for m in missing]
    users, acls = desired_users(auth, passwords), desired_acls(auth)
    unknown = frozenset(u.name for u in auth.users if u.name not in passwords)
    protected = protected_users(auth, secrets)
    # without the inner client's name, prune could delete the operator's own user
    prune = auth.prune and auth.inner_client.secret_name in secrets
    done: list[str] = []
    for pod, addr in targets:
        try:
            actual_users, actual_acls = await brokers.auth_state(addr, access)
            for op in plan(users, acls, actual_users, actual_acls, prune=prune, protected=protected, unknown=unknown):
                await brokers.apply_auth(addr, access, op)
                done.append(f"{pod}: {op.describe()}")
        except BrokerError as e:
            hint = ("; the inner client (spec.auth.innerClient) must be a Super user of the broker"
                    if e.denied else "")
            problems.append({"reason": "AuthNotConverged", "message": f"{pod}: {e}{hint}"})
    return problems, done
