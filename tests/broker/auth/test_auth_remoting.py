"""RocketMQ 5.3 authentication and authorization in a running broker, over real sockets: signed
requests from a raw client, the user and ACL admin codes, and which broker.conf auth keys start.

Complements tests/compat/mqadmin (Apache's mqadmin) and the Java 4.x client test with what a
client library would not send: unsigned, unknown-user and tampered requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess_broker import BrokerHandle
from signed_requests import send_fields
from signed_requests import signed as signed_request

from rocketstore.broker.auth.auth_config import AuthConfig
from rocketstore.broker.broker_config import load_config
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.store.config import ConfigError

ROOT, ROOT_SECRET = "rocketmq2", "12345678"
AUTH = AuthConfig(authentication_enabled=True, authorization_enabled=True,
                  init_authentication_user=json.dumps({"username": ROOT, "password": ROOT_SECRET}))


def signed(code: int, ext: dict[str, str], body: bytes = b"", user: str = ROOT,
           secret: str = ROOT_SECRET) -> RemotingCommand:
    return signed_request(code, ext, body, user, secret)


@pytest.mark.integration
def test_users_acls_and_decisions(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(auth_config=AUTH, auto_create_topic_enable=True)
    client = broker.client()

    def call(request: RemotingCommand) -> RemotingCommand:
        return client.receive(client.send(request))

    # unsigned, unknown and tampered requests: NO_PERMISSION with Apache 5.3.3's remarks
    assert (client.call(RequestCode.GET_BROKER_CONFIG).code, client.call(RequestCode.GET_BROKER_CONFIG).remark) \
        == (ResponseCode.NO_PERMISSION, "username cannot be null.")
    assert call(signed(RequestCode.GET_BROKER_CONFIG, {}, user="ghost")).remark == "User:ghost is not found."
    assert call(signed(RequestCode.GET_BROKER_CONFIG, {}, secret="wrong")).remark == "check signature failed."
    # the init user is Super: it creates a Normal user and an ACL for it
    alice = {"username": "alice", "password": "alice-secret"}
    reply = call(signed(RequestCode.AUTH_CREATE_USER, {"username": "alice"}, json.dumps(alice).encode()))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    acl = {"subject": "User:alice", "policies": [{"policyType": "Custom", "entries": [
        {"resource": "Topic:orders", "actions": ["Pub"], "sourceIps": ["127.0.0.1"], "decision": "Allow"}]}]}
    reply = call(signed(RequestCode.AUTH_CREATE_ACL, {"subject": "User:alice"}, json.dumps(acl).encode()))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    users = json.loads(call(signed(RequestCode.AUTH_LIST_USER, {})).body)
    assert sorted((u["username"], u["userType"]) for u in users) == [("alice", "Normal"), (ROOT, "Super")]
    listed = json.loads(call(signed(RequestCode.AUTH_GET_ACL, {"subject": "User:alice"})).body)
    assert listed == acl
    # alice may publish to orders, not to payments, and may not administer users
    ok = call(signed(RequestCode.SEND_MESSAGE_V2, send_fields("orders"), b"hi", "alice", "alice-secret"))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    denied = call(signed(RequestCode.SEND_MESSAGE_V2, send_fields("payments"), b"hi", "alice", "alice-secret"))
    assert (denied.code, denied.remark) == (ResponseCode.NO_PERMISSION, "User:alice has no permission to access "
                                            "Topic:payments from 127.0.0.1, no matched policies.")
    admin = call(signed(RequestCode.AUTH_LIST_USER, {}, user="alice", secret="alice-secret"))
    assert admin.code == ResponseCode.NO_PERMISSION
    assert admin.remark == ("User:alice has no permission to access Cluster:DefaultCluster from 127.0.0.1, "
                            "no matched policies.")
    # a disabled user is refused at authentication; deleting the user deletes its ACL
    update = {"username": "alice", "userStatus": "disable"}
    assert call(signed(RequestCode.AUTH_UPDATE_USER, {"username": "alice"},
                       json.dumps(update).encode())).code == ResponseCode.SUCCESS
    again = call(signed(RequestCode.SEND_MESSAGE_V2, send_fields("orders"), b"hi", "alice", "alice-secret"))
    assert again.remark == "User:alice is disabled."
    assert call(signed(RequestCode.AUTH_DELETE_USER, {"username": "alice"})).code == ResponseCode.SUCCESS
    assert call(signed(RequestCode.AUTH_LIST_ACL, {})).body == b""
    metrics = broker.metrics()
    assert "rocketstore_auth_denied_requests_total 7.0" in metrics


@pytest.mark.integration
def test_users_survive_a_restart(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = broker_factory(root, auth_config=AUTH)
    client = first.client()
    body = json.dumps({"username": "bob", "password": "bob-secret"}).encode()
    assert client.receive(client.send(signed(RequestCode.AUTH_CREATE_USER, {"username": "bob"}, body))).code == 0
    first.stop()
    second = broker_factory(root, auth_config=AUTH)
    client = second.client()
    reply = client.receive(client.send(signed(RequestCode.GET_BROKER_CONFIG, {}, user="bob", secret="bob-secret")))
    assert reply.code == ResponseCode.SUCCESS, reply.remark


def test_auth_keys_start_or_refuse() -> None:
    """Apache's switches and default classes start; a custom provider, or a switch Java would read
    as false, still refuses, naming the key."""
    apache = {
        "authenticationEnabled": "true", "authorizationEnabled": "TRUE",
        "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
        "authenticationMetadataProvider":
            "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
        "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
        "authorizationMetadataProvider":
            "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
        "initAuthenticationUser": '{"username":"rocketmq","password":"12345678"}',
        "authenticationWhitelist": "10,11",
    }
    load_config(apache)
    config = AuthConfig.from_properties(apache)
    assert config.authentication_enabled and config.authorization_enabled
    assert config.authentication_whitelist == "10,11"
    for key, value in (("authenticationProvider", "com.example.MyProvider"), ("authorizationEnabled", "yes"),
                       ("migrateAuthFromV1Enabled", "1")):
        with pytest.raises(ConfigError, match=key):
            load_config({**apache, key: value})


def test_auth_refuses_the_plain_acl_beside_it(tmp_path: Path) -> None:
    """The plain ACL cannot run beside it (RocketMQ 5.3 has no ACL 1.0): the start is refused."""
    from inprocess_broker import start_broker

    with pytest.raises(ConfigError, match="aclEnable"):
        start_broker(tmp_path / "b", auth_config=AUTH, acl_enable=True)
