"""spec.auth (RocketMQ 5.3 users and ACLs), no cluster: parsing, rendering, and the pure
decision that converges one broker's users and ACLs (:func:`rocketstore.operator.auth.plan`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from rocketstore.client import SessionCredentials
from rocketstore.operator.auth import AuthOperation, converge, desired_acls, desired_users, plan
from rocketstore.operator.brokers import BrokerAccess, BrokerError
from rocketstore.operator.desired import AUTH_DIR, Owner, Plan, broker_conf, statefulset
from rocketstore.operator.model import SpecError, parse_spec
from rocketstore.operator.reconcile import broker_access
from rocketstore.operator.sizing import volume_size

OWNER = Owner(name="rs", namespace="ns", uid="1234")
ALICE_ACL: dict[str, Any] = {"subject": "User:alice", "policies": [{"resources": [
    {"type": "Topic", "name": "orders"}, {"type": "Group", "name": "billing-", "patternType": "PREFIXED"}],
    "actions": ["Pub", "Sub"]}]}


def _auth(**extra: Any) -> dict[str, Any]:
    return {"innerClient": {"secretName": "inner"},
            "users": [{"name": "alice", "passwordSecretKeyRef": {"name": "pw", "key": "alice"}}],
            "acls": [ALICE_ACL], **extra}


SECRETS = {"inner": {"accessKey": b"operator\n", "secretKey": b"inner-secret"}, "pw": {"alice": b"alice-pw\n"}}


def test_auth_parses_users_acls_and_resource_patterns() -> None:
    spec = parse_spec({"auth": _auth(prune=True)})
    assert spec.auth is not None and spec.auth.prune
    assert spec.auth.users[0].user_type == "Normal" and spec.auth.users[0].state == "enable"
    assert desired_acls(spec.auth)["User:alice"] == {"subject": "User:alice", "policies": [{
        "policyType": "Custom", "entries": [
            {"resource": "Topic:orders", "actions": ["Pub", "Sub"], "decision": "Allow"},
            {"resource": "Group:billing-*", "actions": ["Pub", "Sub"], "decision": "Allow"}]}]}
    any_topic = parse_spec({"auth": _auth(acls=[{"subject": "User:alice", "policies": [
        {"resources": [{"type": "Topic", "patternType": "ANY"}, {"type": "Any"}], "actions": ["Sub"],
         "decision": "Deny", "sourceIps": ["10.0.0.0/8"]}]}])})
    assert any_topic.auth is not None
    entries = desired_acls(any_topic.auth)["User:alice"]["policies"][0]["entries"]
    assert [e["resource"] for e in entries] == ["Topic:*", "*"]
    assert entries[0]["sourceIps"] == ["10.0.0.0/8"] and entries[0]["decision"] == "Deny"


@pytest.mark.parametrize(("auth", "field"), [
    ({"users": [{"name": "a b", "passwordSecretKeyRef": {"name": "pw", "key": "k"}}]}, "auth.users[0].name"),
    ({"users": [{"name": "bob", "password": "inline"}]}, "auth.users[0].passwordSecretKeyRef"),
    ({"acls": [{"subject": "alice", "policies": ALICE_ACL["policies"]}]}, "auth.acls[0].subject"),
    ({"acls": [{"subject": "User:a", "policies": [{"resources": [{"name": "t"}], "actions": ["Publish"]}]}]},
     "auth.acls[0].policies[0].actions"),
    ({"acls": [{"subject": "User:a", "policies": [{"resources": [{"name": "t*"}], "actions": ["Pub"]}]}]},
     "auth.acls[0].policies[0].resources[0].name"),
    ({"acls": [{"subject": "User:a", "policies": [{"resources": [{"name": "t", "patternType": "REGEX"}],
                                                   "actions": ["Pub"]}]}]},
     "auth.acls[0].policies[0].resources[0].patternType"),
])
def test_invalid_auth_names_the_field(auth: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"auth": {"innerClient": {"secretName": "inner"}, **auth}})
    assert e.value.field == field


def test_auth_and_plain_acl_are_exclusive() -> None:
    with pytest.raises(SpecError) as e:
        parse_spec({"auth": _auth(), "acl": {"secretName": "acl"}})
    assert e.value.field == "auth"
    with pytest.raises(SpecError) as e:
        parse_spec({"auth": _auth(), "brokerConfig": {"authorizationEnabled": "false"}})
    assert e.value.field == "brokerConfig.authorizationEnabled"


def test_broker_conf_has_the_switches_and_credentials_only_at_pod_start() -> None:
    spec = parse_spec({"auth": _auth(authorizationEnabled=False, initialUser={"secretName": "admin"})})
    plan = Plan(OWNER, spec, 1, volume_size(spec), "img")
    conf = broker_conf(plan)
    assert conf["authenticationEnabled"] == "true" and conf["authorizationEnabled"] == "false"
    assert not any("Credentials" in k or "initAuthentication" in k for k in conf)
    sts = statefulset(plan)
    pod = sts["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"][2]
    assert f"{AUTH_DIR}/inner/accessKey" in command and f"{AUTH_DIR}/init/password" in command
    assert command.index("innerClientAuthenticationCredentials") < command.index("exec rocketstore broker")
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets["auth-inner"] == "inner" and secrets["auth-init"] == "admin"


def test_the_operator_signs_as_the_inner_client() -> None:
    spec = parse_spec({"auth": _auth()})
    assert broker_access(spec, SECRETS).credentials == SessionCredentials("operator", "inner-secret")


USERS = {"alice": {"username": "alice", "password": "pw", "userType": "Normal", "userStatus": "enable"}}


def _acls(auth_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    auth = parse_spec({"auth": auth_spec}).auth
    assert auth is not None
    return desired_acls(auth)


def test_plan_creates_what_is_missing_users_first() -> None:
    acls = _acls(_auth())
    ops = plan(USERS, acls, [], [])
    assert [(o.verb, o.target) for o in ops] == [("createUser", "alice"), ("createAcl", "User:alice")]
    assert ops[1].document == acls["User:alice"]


def test_plan_is_empty_when_the_broker_matches_whatever_the_order() -> None:
    acls = _acls(_auth())
    listed = {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
        {"resource": "Group:billing-*", "actions": ["Sub", "Pub"], "decision": "Allow"},
        {"resource": "Topic:orders", "actions": ["Pub", "Sub"], "decision": "Allow"}]}]}
    assert plan(USERS, acls, [USERS["alice"]], [listed]) == []


def test_plan_updates_a_changed_user_and_only_the_changed_acl_entries() -> None:
    acls = _acls(_auth())
    listed = {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
        {"resource": "Topic:orders", "actions": ["Sub"], "decision": "Allow"},
        {"resource": "Group:billing-*", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"resource": "Topic:old", "actions": ["Pub"], "decision": "Allow"}]}]}
    ops = plan(USERS, acls, [{**USERS["alice"], "password": "old"}], [listed])
    assert ops[0] == AuthOperation("updateUser", "alice", USERS["alice"])
    assert ops[1] == AuthOperation("deleteAcl", "User:alice", policy_type="Custom", resource="Topic:old")
    assert ops[2].verb == "createAcl"
    assert ops[2].document == {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
        {"resource": "Topic:orders", "actions": ["Pub", "Sub"], "decision": "Allow"}]}]}


def test_undeclared_users_and_acls_stay_unless_prune_which_spares_the_protected() -> None:
    listed_users = [USERS["alice"], {"username": "operator", "userType": "Super"}, {"username": "legacy"},
                    {"username": "bob"}]
    listed_acls = [{"subject": "User:legacy", "policies": []}, {"subject": "User:bob", "policies": []},
                   {"subject": "User:carol", "policies": []}]
    assert [o for o in plan(USERS, {}, listed_users, listed_acls) if o.verb.startswith("delete")] == []
    ops = plan(USERS, {}, listed_users, listed_acls, prune=True, protected=frozenset({"operator"}),
               unknown=frozenset({"bob"}))
    # legacy's ACL goes with the user; carol has an ACL and no user; bob's password is unknown
    assert [(o.verb, o.target) for o in ops] == [("deleteAcl", "User:carol"), ("deleteUser", "legacy")]


class FakeBrokers:
    """Brokers' auth calls on dicts, one per address; ``down``: addresses that fail."""

    def __init__(self, down: set[str]) -> None:
        self.state: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
        self.down = down
        self.applied: list[tuple[str, str]] = []

    async def auth_state(self, addr: str, access: BrokerAccess) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if addr in self.down:
            raise BrokerError(f"{addr}: NO_PERMISSION: check signature failed.", denied=True)
        return self.state.get(addr, ([], []))

    async def apply_auth(self, addr: str, access: BrokerAccess, op: AuthOperation) -> None:
        self.applied.append((addr, op.describe()))


def _converge(secrets: Mapping[str, Mapping[str, bytes]], down: set[str]) -> tuple[FakeBrokers, list[dict[str, str]]]:
    auth = parse_spec({"auth": _auth()}).auth
    assert auth is not None
    fake = FakeBrokers(down)
    problems, _ = asyncio.run(converge(fake, BrokerAccess(), auth, secrets,  # type: ignore[arg-type]
                                       [("rs-0", "a0"), ("rs-1", "a1")]))
    return fake, problems


def test_converge_goes_on_past_a_refusing_broker_and_names_it() -> None:
    fake, problems = _converge(SECRETS, {"a0"})
    assert fake.applied == [("a1", "createUser alice"), ("a1", "createAcl User:alice")]
    assert problems[0]["reason"] == "AuthNotConverged" and problems[0]["message"].startswith("rs-0:")
    assert "innerClient" in problems[0]["message"]


def test_a_missing_password_secret_names_the_user_and_skips_it() -> None:
    fake, problems = _converge({"inner": SECRETS["inner"]}, set())
    assert problems == [{"reason": "SecretNotFound", "message": (
        "spec.auth.users[0].passwordSecretKeyRef: Secret pw not found; that user is not converged")}]
    assert ("a0", "createUser alice") not in fake.applied


def test_desired_users_use_the_stripped_secret_password() -> None:
    auth = parse_spec({"auth": _auth()}).auth
    assert auth is not None
    assert desired_users(auth, {"alice": "alice-pw"})["alice"]["password"] == "alice-pw"
