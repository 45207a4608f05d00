"""The ACL hook in a running broker, over real sockets: signed requests from a raw client.

Complements tests/compat/java4/test_java_acl.py (the Java client) with what a client library would not
send: unsigned and tampered requests, a heartbeat body that does not decode (answered, the
connection kept), a missing ACL file (every request refused) and a bad one (the broker does not
start). Also the TLS settings' parsing, which needs no certificate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess_broker import BrokerHandle
from signed_requests import send_fields
from signed_requests import signed as signed_request

from rocketstore.broker.acl.remote_address_strategy import AclConfigError
from rocketstore.broker.tls_system_config import TlsMode, TlsSettings, load_tls_settings, read_properties
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

AK, SK = "rawClient", "raw-secret"
ACL = f"""accounts:
- accessKey: {AK}
  secretKey: {SK}
  defaultTopicPerm: PUB
  defaultGroupPerm: SUB
  topicPerms: [ReadOnly=SUB]
"""
EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "


def home_with(tmp_path: Path, text: str | None) -> Path:
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    if text is not None:
        (home / "conf" / "plain_acl.yml").write_text(text)
    return home


def signed(code: int, ext: dict[str, str], body: bytes = b"", secret: str = SK) -> RemotingCommand:
    return signed_request(code, ext, body, AK, secret)


@pytest.mark.integration
def test_signed_unsigned_and_tampered_requests(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    broker = broker_factory(acl_enable=True, rocketmq_home=str(home_with(tmp_path, ACL)))
    client = broker.client()
    ok = client.receive(client.send(signed(RequestCode.SEND_MESSAGE_V2, send_fields("AclRaw"), b"hello")))
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    denied = client.receive(client.send(signed(RequestCode.SEND_MESSAGE_V2, send_fields("ReadOnly"), b"x")))
    assert (denied.code, denied.remark) == (ResponseCode.SYSTEM_ERROR,
                                            EXCEPTION + "No default permission for topic:ReadOnly")
    tampered = signed(RequestCode.SEND_MESSAGE_V2, send_fields("AclRaw"), b"hello")
    tampered.body = b"hellO"
    reply = client.receive(client.send(tampered))
    assert reply.remark == EXCEPTION + f"Check signature failed for accessKey={AK}"
    assert client.call(RequestCode.GET_BROKER_CONFIG).remark == EXCEPTION + "No accessKey is configured"
    # a heartbeat whose body does not decode is answered; the connection stays usable
    reply = client.receive(client.send(signed(RequestCode.HEART_BEAT, {}, b"{not json")))
    assert reply.code == ResponseCode.SYSTEM_ERROR and (reply.remark or "").startswith(EXCEPTION + "heartbeat body")
    again = client.receive(client.send(signed(RequestCode.GET_BROKER_CONFIG, {})))
    assert again.code == ResponseCode.SUCCESS
    metrics = broker.metrics()
    assert "rocketstore_acl_denied_requests_total 4.0" in metrics
    assert "rocketstore_acl_allowed_requests_total 2.0" in metrics


@pytest.mark.integration
def test_missing_file_refuses_everyone(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    broker = broker_factory(acl_enable=True, rocketmq_home=str(home_with(tmp_path, None)))
    client = broker.client()
    reply = client.receive(client.send(signed(RequestCode.GET_BROKER_CONFIG, {})))
    assert reply.remark == EXCEPTION + f"No acl config for {AK}"


@pytest.mark.integration
def test_bad_file_stops_the_start_naming_it(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    home = home_with(tmp_path, "accounts:\n- accessKey: abc\n  secretKey: def\n")
    with pytest.raises(AclConfigError, match=r"plain_acl\.yml.*longer than 6"):
        broker_factory(acl_enable=True, rocketmq_home=str(home))


@pytest.mark.integration
def test_acl_plain_file_key_moves_the_file(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.yml"
    elsewhere.write_text(ACL)
    broker = broker_factory(acl_enable=True, rocketmq_home=str(home_with(tmp_path, None)),
                            acl_plain_file=str(elsewhere))
    client = broker.client()
    reply = client.receive(client.send(signed(RequestCode.GET_BROKER_CONFIG, {})))
    assert reply.code == ResponseCode.SUCCESS, reply.remark


def test_tls_properties_file_overrides_broker_conf(tmp_path: Path) -> None:
    props = tmp_path / "tls.properties"
    props.write_text("# comment\ntls.server.certPath = /a/cert.pem\ntls.server.need.client.auth:require\n"
                     "tls.server.mode=enforcing\n")
    assert read_properties(props)["tls.server.certPath"] == "/a/cert.pem"
    base = TlsSettings(mode=TlsMode.PERMISSIVE, cert_path="/b/cert.pem", key_path="/b/key.pem")
    merged = load_tls_settings(base, str(props))
    assert (merged.cert_path, merged.key_path, merged.need_client_auth) == ("/a/cert.pem", "/b/key.pem", "require")
    assert merged.mode is TlsMode.PERMISSIVE  # as in RocketMQ, the file does not set the mode
    assert load_tls_settings(base, str(tmp_path / "absent")) == base
    assert [TlsMode.parse(t) for t in ("disabled", "enforcing", "permissive", "bogus")] == \
        [TlsMode.DISABLED, TlsMode.ENFORCING, TlsMode.PERMISSIVE, TlsMode.PERMISSIVE]


@pytest.mark.integration
def test_acl_edits_fail_cleanly(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    """Without aclEnable there is nothing to edit; a file that cannot be written makes an edit fail
    with the OSError as remark (here the default file is a directory; in Kubernetes, a read-only
    Secret mount); the broker keeps serving."""
    plain = broker_factory()
    client = plain.client()
    reply = client.call(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "whoever1"})
    assert reply.code == ResponseCode.DELETE_ACL_CONFIG_FAILED and "aclEnable=false" in (reply.remark or "")

    home = home_with(tmp_path, None)
    (home / "conf" / "acl").mkdir()
    (home / "conf" / "acl" / "accounts.yml").write_text(ACL)
    (home / "conf" / "plain_acl.yml").mkdir()  # the default file, where a new account goes
    broker = broker_factory(acl_enable=True, rocketmq_home=str(home))
    client = broker.client()
    create = {"accessKey": "another1", "secretKey": "another-secret", "admin": "false"}
    reply = client.receive(client.send(signed(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, create)))
    assert reply.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert "Is a directory" in (reply.remark or ""), reply.remark
    # an account of conf/acl/ is updated in its own file
    update = {"accessKey": AK, "secretKey": SK, "topicPerms": "ReadOnly=PUB"}
    reply = client.receive(client.send(signed(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, update)))
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert "ReadOnly=PUB" in (home / "conf" / "acl" / "accounts.yml").read_text()
    sent = client.receive(client.send(signed(RequestCode.SEND_MESSAGE_V2, send_fields("ReadOnly"), b"x")))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
