"""migrateAuthFromV1Enabled (broker/auth/auth_migrator.py): plain_acl.yml accounts made RocketMQ 5.3
users and ACLs, ported from Apache 5.3.3's AuthMigratorTest, and their effective permissions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from inprocess_broker import BrokerHandle

from rocketstore.broker.auth.acl import Decision, PolicyType
from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.auth.auth_metadata_manager import AuthMetadataManager
from rocketstore.broker.auth.auth_migrator import migrate, migrated
from rocketstore.broker.auth.authorization_provider import AuthorizationContext, authorize
from rocketstore.broker.auth.resource import Action, Resource
from rocketstore.broker.auth.user import UserType
from rocketstore.remoting.acl_signer import cal_signature, request_content
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

PLAIN_ACL = """
globalWhiteRemoteAddresses: [10.10.103.*]
accounts:
- accessKey: RocketMQ
  secretKey: "12345678"
  whiteRemoteAddress:
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
  groupPerms: [groupA=DENY, groupB=PUB|SUB]
- accessKey: rocketmq2
  secretKey: "12345678"
  admin: true
"""


def test_no_accounts_migrates_nothing(tmp_path: Path) -> None:
    """Ports AuthMigratorTest.testMigrateNoAclConfigDoesNothing."""
    manager = AuthMetadataManager(tmp_path)
    assert migrate(manager, [("plain_acl.yml", {"accounts": []}), ("empty.yml", None)]) == 0
    assert manager.list_users(None) == []


def test_accounts_become_users_and_acls(tmp_path: Path) -> None:
    """Ports AuthMigratorTest.testMigrateWithAclConfigCreatesUserAndAcl, with Apache's mapping of
    each permission, and that an existing user is left as it is."""
    manager = AuthMetadataManager(tmp_path)
    assert migrate(manager, [("plain_acl.yml", yaml.safe_load(PLAIN_ACL))]) == 2
    admin = manager.get_user("rocketmq2")
    assert admin is not None and admin.user_type is UserType.SUPER and manager.get_acl("User:rocketmq2") is None
    acl = manager.get_acl("User:RocketMQ")
    assert acl is not None
    custom, default = acl.policy(PolicyType.CUSTOM), acl.policy(PolicyType.DEFAULT)
    assert custom is not None and default is not None
    assert [(e.resource.key, [a.value for a in e.actions], e.decision) for e in custom.entries] == [
        ("Topic:topicA", ["All"], Decision.DENY), ("Topic:topicB", ["Pub", "Sub"], Decision.ALLOW),
        ("Topic:topicC", ["Sub"], Decision.ALLOW), ("Group:groupA", ["All"], Decision.DENY),
        ("Group:groupB", ["Pub", "Sub"], Decision.ALLOW)]
    assert [(e.resource.key, [a.value for a in e.actions], e.decision) for e in default.entries] == [
        ("Topic:*", ["All"], Decision.DENY), ("Group:*", ["Sub"], Decision.ALLOW)]
    assert migrate(manager, [("plain_acl.yml", yaml.safe_load(PLAIN_ACL))]) == 0


def test_a_failing_account_does_not_stop_the_others(tmp_path: Path) -> None:
    """Ports AuthMigratorTest.testMigrateExceptionInMigrateLogsError: an account without a secret
    cannot be a user; the next account is migrated all the same."""
    manager = AuthMetadataManager(tmp_path)
    accounts = {"accounts": [{"accessKey": "nosecret"},
                             {"accessKey": "fine", "secretKey": "s", "topicPerms": ["t=PUB"]}]}
    assert migrate(manager, [("plain_acl.yml", accounts)]) == 1
    assert manager.get_user("nosecret") is None and manager.get_user("fine") is not None


def test_same_effective_permissions() -> None:
    """What the v1 account allowed, the migrated ACL allows (white addresses aside, which are not
    migrated): PUB on topicB, SUB on topicC, not PUB on topicC, nothing on an unlisted topic, SUB on
    an unlisted group, nothing on groupA."""
    user, acl = migrated(yaml.safe_load(PLAIN_ACL)["accounts"][0])

    def allowed(resource: Resource, action: Action) -> bool:
        context = AuthorizationContext(user.username, resource, (action,), "127.0.0.1", "10")
        return authorize(context, {user.username: user}.get, {user.subject_key: acl}.get) is None

    assert allowed(Resource.of_topic("topicB"), Action.PUB) and allowed(Resource.of_topic("topicC"), Action.SUB)
    assert not allowed(Resource.of_topic("topicC"), Action.PUB)
    assert not allowed(Resource.of_topic("topicA"), Action.SUB) and not allowed(Resource.of_topic("other"), Action.PUB)
    assert allowed(Resource.of_group("anyGroup"), Action.SUB) and not allowed(Resource.of_group("groupA"), Action.SUB)


@pytest.mark.integration
def test_broker_migrates_its_plain_acl_at_start(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "plain_acl.yml").write_text(PLAIN_ACL)
    auth = AuthConfig(authentication_enabled=True, authorization_enabled=True, migrate_auth_from_v1_enabled=True)
    broker = broker_factory(auth_config=auth, rocketmq_home=str(home))
    client = broker.client()
    fields = {"AccessKey": "rocketmq2"}
    fields["Signature"] = cal_signature(request_content(fields, b""), "12345678")
    reply = client.receive(client.send(RemotingCommand(code=RequestCode.AUTH_LIST_USER, ext_fields=fields)))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert sorted(u["username"] for u in json.loads(reply.body)) == ["RocketMQ", "rocketmq2"]
