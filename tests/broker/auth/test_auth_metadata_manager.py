"""Users and ACLs kept by broker/auth/auth_metadata_manager.py: Apache 5.3.3's manager semantics
(cases ported from AuthenticationMetadataManagerTest / AuthorizationMetadataManagerTest) and
RocketStore's persistence in JSON files."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore.broker.auth.acl import AuthError, PolicyType, acl_from_info
from rocketstore.broker.auth.auth_metadata_manager import ACLS_FILE, USERS_FILE, AuthMetadataManager
from rocketstore.broker.auth.resource import Resource
from rocketstore.broker.auth.user import User, UserStatus, UserType


def acl_info(subject: str, *resources: str, decision: str = "Allow") -> dict[str, object]:
    return {"subject": subject, "policies": [{"policyType": "Custom", "entries": [
        {"resource": r, "actions": ["Pub", "Sub"], "decision": decision} for r in resources]}]}


def test_create_update_delete_user(tmp_path: Path) -> None:
    """Ports AuthenticationMetadataManagerTest.createUser/updateUser/deleteUser: defaults Normal and
    enabled, a second create refused, an update changes only what it names."""
    manager = AuthMetadataManager(tmp_path)
    manager.create_user(User("test", "test"))
    assert manager.get_user("test") == User("test", "test", UserType.NORMAL, UserStatus.ENABLE)
    with pytest.raises(AuthError, match="The user is existed"):
        manager.create_user(User("test", "other"))
    with pytest.raises(AuthError, match="password can not be blank"):
        manager.create_user(User("nopass"))
    manager.update_user(User("test", user_status=UserStatus.DISABLE))
    assert manager.get_user("test") == User("test", "test", UserType.NORMAL, UserStatus.DISABLE)
    with pytest.raises(AuthError, match="The user is not exist"):
        manager.update_user(User("ghost", "x"))
    manager.delete_user("test")
    assert manager.get_user("test") is None


def test_list_users_by_substring_in_name_order(tmp_path: Path) -> None:
    """Ports AuthenticationMetadataManagerTest.listUser."""
    manager = AuthMetadataManager(tmp_path)
    for name in ("test-2", "abc", "test-1"):
        manager.create_user(User(name, "pw"))
    assert [u.username for u in manager.list_users(None)] == ["abc", "test-1", "test-2"]
    assert [u.username for u in manager.list_users("test")] == ["test-1", "test-2"]


def test_acl_needs_its_user_merges_and_goes_with_it(tmp_path: Path) -> None:
    """Ports AuthorizationMetadataManagerTest.createAcl/updateAcl/deleteAcl: an ACL for an unknown
    user is refused, a second one merges by resource, deleting the user deletes the ACL."""
    manager = AuthMetadataManager(tmp_path)
    with pytest.raises(AuthError, match=r"The subject of User:test is not exist\."):
        manager.create_acl(acl_from_info(acl_info("User:test", "Topic:a"), None))
    manager.create_user(User("test", "test"))
    manager.create_acl(acl_from_info(acl_info("User:test", "Topic:a", "Topic:b"), None))
    manager.update_acl(acl_from_info(acl_info("User:test", "Topic:a", decision="Deny"), None))
    acl = manager.get_acl("User:test")
    assert acl is not None
    assert [(e.resource.key, e.decision.value) for e in acl.policies[0].entries] == [
        ("Topic:a", "Deny"), ("Topic:b", "Allow")]
    manager.delete_acl("User:test", PolicyType.CUSTOM, Resource.of_topic("a"))
    assert [len(p.entries) for p in manager.list_acls(None, None)[0].policies] == [1]
    assert manager.list_acls(None, "Topic:zzz") == []
    manager.delete_user("test")
    assert manager.get_acl("User:test") is None
    with pytest.raises(AuthError, match=r"The subject is not exist\."):
        manager.delete_acl("User:test", None, None)


def test_survives_restart_through_atomic_files(tmp_path: Path) -> None:
    """RocketStore's persistence: both files written at each edit, read back by a new manager; the
    previous version is kept as ``.bak`` and used when the file itself is damaged."""
    manager = AuthMetadataManager(tmp_path)
    manager.create_user(User("alice", "secret-1"))
    manager.create_acl(acl_from_info(acl_info("User:alice", "Topic:orders"), None))
    manager.create_user(User("bob", "secret-2", UserType.SUPER))
    assert (tmp_path / USERS_FILE).is_file() and (tmp_path / ACLS_FILE).is_file()
    again = AuthMetadataManager(tmp_path)
    again.load()
    assert again.get_user("bob") == User("bob", "secret-2", UserType.SUPER, UserStatus.ENABLE)
    assert again.get_acl("User:alice") == manager.get_acl("User:alice")
    (tmp_path / USERS_FILE).write_text("{half")
    damaged = AuthMetadataManager(tmp_path)
    damaged.load()
    assert damaged.get_user("alice") is not None and damaged.get_user("bob") is None  # the .bak: before bob


def test_init_users(tmp_path: Path) -> None:
    """AuthenticationMetadataManagerImpl.initUser: initAuthenticationUser is made Super, the inner
    client's credentials become a Super user; neither overwrites an existing user."""
    manager = AuthMetadataManager(tmp_path)
    manager.init_users('{"username":"rocketmq","password":"12345678"}',
                       '{"accessKey":"inner","secretKey":"inner-secret"}')
    assert manager.get_user("rocketmq") == User("rocketmq", "12345678", UserType.SUPER, UserStatus.ENABLE)
    assert manager.get_user("inner") == User("inner", "inner-secret", UserType.SUPER, UserStatus.ENABLE)
    manager.update_user(User("rocketmq", "changed"))
    manager.init_users('{"username":"rocketmq","password":"12345678"}', None)
    user = manager.get_user("rocketmq")
    assert user is not None and user.password == "changed"
    with pytest.raises(AuthError, match="initAuthenticationUser is not JSON"):
        manager.init_users("{username:", None)
