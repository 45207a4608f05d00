"""Our client's AclClientRPCHook against Apache RocketMQ 4.9.7's own broker with ``aclEnable=true``:
the signature bytes are RocketMQ's, so Apache's PlainAccessValidator accepts our signed admin
requests (reads, and the admin-only UPDATE_BROKER_CONFIG the operator sends) and refuses a wrong
secret, a non-admin account and an unsigned request with its own remarks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from java_rocketmq import AnchorError, BuildError, RocketMQAnchor, build_anchor, plain_acl_anchor

from rocketstore.client import AclClientRPCHook, BrokerAdmin, RemotingError, SessionCredentials

pytestmark = pytest.mark.integration

ADMIN_AK, ADMIN_SK = "pythonAdmin", "python-admin-secret"
USER_AK, USER_SK = "pythonUser", "python-user-secret"
ACL_FILE = f"""\
accounts:
- accessKey: {ADMIN_AK}
  secretKey: {ADMIN_SK}
  admin: true
- accessKey: {USER_AK}
  secretKey: {USER_SK}
  admin: false
  defaultTopicPerm: SUB
  defaultGroupPerm: SUB
"""
EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


@pytest.fixture(scope="module")
def acl_anchor(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQAnchor]:
    try:
        build_anchor()
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    anchor = plain_acl_anchor(tmp_path_factory.mktemp("acl-anchor-python"), ACL_FILE)
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield anchor
    finally:
        print(f"anchor stopped: {anchor.stop()}", file=sys.stderr)


def admin(anchor: RocketMQAnchor, credentials: SessionCredentials | None) -> BrokerAdmin:
    return BrokerAdmin(anchor.broker_addr, timeout=10,
                       rpc_hook=None if credentials is None else AclClientRPCHook(credentials))


def test_signed_requests_are_served_by_rocketmqs_broker(acl_anchor: RocketMQAnchor) -> None:
    with admin(acl_anchor, SessionCredentials(ADMIN_AK, ADMIN_SK)) as a:
        assert a.get_broker_config()["aclEnable"] == "true"
        a.update_broker_config({"fileReservedTime": "47"})  # admin-only, with a body in the signature
        assert a.get_broker_config()["fileReservedTime"] == "47"
        assert a.delete_expired_commit_log() is True


def test_rocketmqs_broker_refuses_wrong_secret_non_admin_and_unsigned(acl_anchor: RocketMQAnchor) -> None:
    with admin(acl_anchor, SessionCredentials(ADMIN_AK, "wrong-secret")) as a, pytest.raises(RemotingError) as wrong:
        a.get_broker_config()
    assert wrong.value.remark.startswith(EXCEPTION + f"Check signature failed for accessKey={ADMIN_AK}")
    with admin(acl_anchor, SessionCredentials(USER_AK, USER_SK)) as a, pytest.raises(RemotingError) as user:
        a.update_broker_config({"fileReservedTime": "48"})
    assert user.value.remark.startswith(EXCEPTION + "Need admin permission for request code=25")
    with admin(acl_anchor, None) as a, pytest.raises(RemotingError) as unsigned:
        a.get_broker_config()
    assert unsigned.value.remark.startswith(EXCEPTION + "No accessKey is configured")
