"""RocketMQ 5.3 authentication and authorization decisions (broker/auth), cases ported from Apache
RocketMQ 5.3.3's auth module tests (each test names the one it ports)."""

from __future__ import annotations

import pytest

from rocketstore.broker.auth.acl import Acl, AuthError, Decision, Policy, PolicyEntry, PolicyType, acl_from_info
from rocketstore.broker.auth.authentication_provider import AuthenticationContext, authenticate, parse_whitelist
from rocketstore.broker.auth.authorization_provider import AuthorizationContext, authorize
from rocketstore.broker.auth.resource import Action, Resource, ResourcePattern, ResourceType
from rocketstore.broker.auth.user import User, UserStatus, UserType


def entry(resource: str, actions: str, source_ip: str | None, decision: Decision) -> PolicyEntry:
    parsed = Resource.parse(resource)
    assert parsed is not None
    return PolicyEntry(parsed, tuple(a for a in (Action.by_name(n) for n in actions.split(",")) if a),
                       decision, (source_ip,) if source_ip else ())


def acl_of(*entries: PolicyEntry, policy_type: PolicyType = PolicyType.CUSTOM) -> Acl:
    return Acl("User:test", (Policy(policy_type, entries),))


class Metadata:
    """Users and ACLs as the metadata manager would hand them to the providers."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {"test": User("test", "test", UserType.NORMAL, UserStatus.ENABLE)}
        self.acl: Acl | None = None

    def put(self, *entries: PolicyEntry, policy_type: PolicyType = PolicyType.CUSTOM) -> None:
        """AuthorizationMetadataManager.updateAcl: merged into the existing ACL."""
        new = acl_of(*entries, policy_type=policy_type)
        self.acl = new if self.acl is None else self.acl.updated(new.policies)

    def check(self, resource: Resource, action: Action | tuple[Action, ...], source_ip: str = "192.168.0.1",
              user: str = "test", whitelist: frozenset[str] = frozenset()) -> str | None:
        actions = action if isinstance(action, tuple) else (action,)
        context = AuthorizationContext(user, resource, actions, source_ip, "10")
        return authorize(context, self.users.get, lambda subject: self.acl if subject == "User:test" else None,
                         whitelist)


def test_parse_resource() -> None:
    """Ports ResourceTest.parseResource."""
    assert Resource.parse("*") == Resource(ResourceType.ANY, None, ResourcePattern.ANY)
    assert Resource.parse("Topic:*") == Resource(ResourceType.TOPIC, None, ResourcePattern.ANY)
    assert Resource.parse("Topic:test-*") == Resource(ResourceType.TOPIC, "test-", ResourcePattern.PREFIXED)
    assert Resource.parse("Topic:test-1") == Resource(ResourceType.TOPIC, "test-1", ResourcePattern.LITERAL)
    assert Resource.parse("topic:x") == Resource(ResourceType.TOPIC, "x")  # type names ignore case
    assert Resource.parse("Queue:x") is None and Resource.parse(" ") is None
    for key in ("*", "Topic:*", "Topic:test-*", "Group:g1"):
        parsed = Resource.parse(key)
        assert parsed is not None and parsed.key == key


def test_group_resource_drops_retry_and_dlq_prefixes() -> None:
    """Ports Resource.ofGroup as DefaultAuthorizationContextBuilderTest relies on it."""
    assert Resource.of_group("%RETRY%g1") == Resource.of_group("g1") == Resource.of_group("%DLQ%g1")


def test_authenticate_with_the_users_password() -> None:
    """Ports AuthenticationEvaluatorTest.evaluate1-3: the right signature passes, an unknown user
    and a wrong signature are refused (with Apache's messages)."""
    users = {"test": User("test", "test", UserType.NORMAL, UserStatus.ENABLE)}
    good = AuthenticationContext("11", "test", "DJRRXBXlCVuKh6ULoN87847QX+Y=", b"test")
    assert authenticate(good, users.get) is None
    assert authenticate(good, {}.get) == "User:test is not found."
    bad = AuthenticationContext("11", "test", "test", b"test")
    assert authenticate(bad, users.get) == "check signature failed."
    assert authenticate(AuthenticationContext("11"), users.get) == "username cannot be null."


def test_authentication_whitelist_and_disabled_user() -> None:
    """Ports AuthenticationEvaluatorTest.evaluate4 (a whitelisted request code passes unchecked);
    a disabled user is refused even with the right signature (DefaultAuthenticationHandler)."""
    bad = AuthenticationContext("11", "test", "test", b"test")
    assert authenticate(bad, {}.get, parse_whitelist(" 11 ,12")) is None
    disabled = {"test": User("test", "test", UserType.NORMAL, UserStatus.DISABLE)}
    good = AuthenticationContext("11", "test", "DJRRXBXlCVuKh6ULoN87847QX+Y=", b"test")
    assert authenticate(good, disabled.get) == "User:test is disabled."


def test_prefix_pub_with_source_ips() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate1: a prefix ALLOW for Pub from a CIDR, then with
    no source IPs at all."""
    metadata = Metadata()
    metadata.put(entry("Topic:test*", "Pub", "192.168.0.0/24", Decision.ALLOW))
    assert metadata.check(Resource.of_topic("test"), Action.PUB) is None
    metadata.put(entry("Topic:test*", "Pub", None, Decision.ALLOW))
    assert metadata.check(Resource.of_topic("test"), Action.PUB, source_ip="10.0.0.1") is None


def test_topic_and_group_sub() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate2."""
    metadata = Metadata()
    metadata.put(entry("Topic:test*", "Sub", "192.168.0.0/24", Decision.ALLOW),
                 entry("Group:test*", "Sub", "192.168.0.0/24", Decision.ALLOW))
    assert metadata.check(Resource.of_topic("test"), Action.SUB) is None
    assert metadata.check(Resource.of_group("test"), Action.SUB) is None


def test_refusals() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate4: unknown user, resource, action, source IP, and a
    DENY decision are each refused, with Apache's remarks."""
    metadata = Metadata()
    metadata.put(entry("Topic:test*", "Pub", "192.168.0.0/24", Decision.ALLOW))
    assert metadata.check(Resource.of_topic("test"), Action.PUB, user="abc") == "User:abc not found."
    no_match = "User:test has no permission to access Topic:{} from {}, no matched policies."
    assert metadata.check(Resource.of_topic("abc"), Action.PUB) == no_match.format("abc", "192.168.0.1")
    assert metadata.check(Resource.of_topic("test"), Action.SUB) == no_match.format("test", "192.168.0.1")
    assert metadata.check(Resource.of_topic("test"), Action.PUB, "10.10.0.1") == no_match.format("test", "10.10.0.1")
    metadata.put(entry("Topic:test*", "Pub", "192.168.0.0/24", Decision.DENY))
    assert metadata.check(Resource.of_topic("test"), Action.PUB) == (
        "User:test has no permission to access Topic:test from 192.168.0.1, the decision is deny.")


def test_most_specific_entry_decides() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate5: ``*`` ALLOW, ``Topic:*`` DENY, ``Topic:test*``
    ALLOW, ``Topic:test-1`` DENY."""
    metadata = Metadata()
    metadata.put(entry("*", "Pub,Sub", "192.168.0.0/24", Decision.ALLOW))
    metadata.put(entry("Topic:*", "Pub,Sub", "192.168.0.0/24", Decision.DENY))
    metadata.put(entry("Topic:test*", "Pub,Sub", "192.168.0.0/24", Decision.ALLOW))
    metadata.put(entry("Topic:test-1", "Pub,Sub", "192.168.0.0/24", Decision.DENY))
    assert metadata.check(Resource.of_topic("test-1"), Action.PUB) is not None
    assert metadata.check(Resource.of_topic("test-2"), Action.PUB) is None
    assert metadata.check(Resource.of_topic("abc"), Action.PUB) is not None
    assert metadata.check(Resource.of_group("test-2"), Action.SUB) is None


def test_authorization_whitelist() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate6: a whitelisted code passes for an unknown user."""
    assert Metadata().check(Resource.of_topic("test"), Action.PUB, user="nobody", whitelist=frozenset({"10"})) is None


def test_default_policy_when_no_custom_entry_matches() -> None:
    """Ports AuthorizationEvaluatorTest.evaluate8: a CUSTOM DENY on test*, a DEFAULT ALLOW on
    ``Topic:*`` then lets ``abc`` through but not ``test``."""
    metadata = Metadata()
    metadata.put(entry("Topic:test*", "Pub", "192.168.0.0/24", Decision.DENY))
    assert metadata.check(Resource.of_topic("test"), Action.PUB) is not None
    assert metadata.check(Resource.of_topic("abc"), Action.PUB) is not None
    metadata.put(entry("Topic:*", "Pub", None, Decision.ALLOW), policy_type=PolicyType.DEFAULT)
    assert metadata.check(Resource.of_topic("abc"), Action.PUB) is None
    assert metadata.check(Resource.of_topic("test"), Action.PUB) is not None


def test_super_user_bypasses_and_all_grants_every_action() -> None:
    """UserAuthorizationHandler: a Super user needs no ACL; PolicyEntry.isMatchAction: ALL grants
    any action, and a request asking ANY is met by any entry."""
    metadata = Metadata()
    metadata.users["root"] = User("root", "secret", UserType.SUPER, UserStatus.ENABLE)
    assert metadata.check(Resource.of_topic("x"), Action.PUB, user="root") is None
    metadata.put(entry("Topic:x", "All", None, Decision.ALLOW))
    assert metadata.check(Resource.of_topic("x"), Action.DELETE) is None
    metadata.put(entry("Topic:y", "Get", None, Decision.ALLOW))
    assert metadata.check(Resource.of_topic("y"), Action.ANY) is None
    assert metadata.check(Resource.of_topic("y"), (Action.PUB, Action.SUB)) is not None


def test_acl_info_validation() -> None:
    """Ports AuthorizationMetadataManagerTest's refusals (AuthorizationMetadataManagerImpl.validate):
    no policies, an Any action, an invalid source IP, a missing decision."""
    def info(**overrides: object) -> dict[str, object]:
        entry_info = {"resource": "Topic:t", "actions": ["Pub"], "sourceIps": ["10.0.0.0/8"], "decision": "Allow"}
        entry_info.update(overrides)
        return {"subject": "User:test", "policies": [{"policyType": "Custom", "entries": [entry_info]}]}

    parsed = acl_from_info(info(), None)
    assert parsed.to_info() == info()
    with pytest.raises(AuthError, match="The policies is empty"):
        acl_from_info({"subject": "User:test", "policies": []}, None)
    with pytest.raises(AuthError, match="can not be Any"):
        acl_from_info(info(actions=["Any"]), None)
    with pytest.raises(AuthError, match="source ip is invalid"):
        acl_from_info(info(sourceIps=["10.0.0.300"]), None)
    with pytest.raises(AuthError, match="decision is null"):
        acl_from_info(info(decision="maybe"), None)


def test_acl_delete_entry_removes_empty_policy() -> None:
    """Ports AuthorizationMetadataManagerTest.deleteAcl: deleting a policy's last resource drops it."""
    acl = acl_of(entry("Topic:a", "Pub", None, Decision.ALLOW), entry("Topic:b", "Pub", None, Decision.ALLOW))
    topic_a = Resource.of_topic("a")
    after = acl.without(PolicyType.CUSTOM, topic_a)
    assert [e.resource.key for e in after.policies[0].entries] == ["Topic:b"]
    assert after.without(PolicyType.CUSTOM, Resource.of_topic("b")).policies == ()


def test_remoting_requests_map_to_resources_and_actions() -> None:
    """Ports DefaultAuthorizationContextBuilderTest.buildRemoting: a send needs the topic's Pub (a
    send to a retry topic the group's Sub), a pull the topic's and the group's Sub (no topic for a
    retry topic), an admin verb this broker's cluster, an unannotated code nothing."""
    from rocketstore.broker.auth.authorization_context_builder import build
    from rocketstore.remoting.codes import RequestCode
    from rocketstore.remoting.command import RemotingCommand

    def needs(code: int, ext: dict[str, str]) -> list[tuple[str, tuple[str, ...]]]:
        contexts = build(RemotingCommand(code=code, ext_fields={"AccessKey": "u", **ext}), "10.0.0.1", "c1")
        assert all(c.username == "u" and c.source_ip == "10.0.0.1" and c.rpc_code == str(code) for c in contexts)
        return [(c.resource.key, tuple(a.value for a in c.actions)) for c in contexts]

    assert needs(RequestCode.SEND_MESSAGE_V2, {"a": "g1", "b": "t1"}) == [("Topic:t1", ("Pub",))]
    assert needs(RequestCode.SEND_MESSAGE_V2, {"a": "g1", "b": "%RETRY%g1"}) == [("Group:g1", ("Sub",))]
    assert needs(RequestCode.PULL_MESSAGE, {"topic": "t1", "consumerGroup": "g1"}) == [
        ("Topic:t1", ("Sub",)), ("Group:g1", ("Sub",))]
    assert needs(RequestCode.PULL_MESSAGE, {"topic": "%RETRY%g1", "consumerGroup": "g1"}) == [("Group:g1", ("Sub",))]
    assert needs(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "t1"}) == [("Topic:t1", ("Pub", "Sub", "Get"))]
    assert needs(RequestCode.AUTH_CREATE_USER, {"username": "x"}) == [("Cluster:c1", ("Update",))]
    assert needs(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "t2"}) == [("Topic:t2", ("Create",))]
    assert needs(RequestCode.GET_BROKER_CLUSTER_INFO, {}) == []
