"""The pure parts of the plain ACL: signature, permission bits, white address patterns, the decision.

The signatures below were printed by RocketMQ 4.9.8's own ``AclClientRPCHook.doBeforeRequest``
(the Java driver's ``acl-sign`` mode), so :func:`request_content` + :func:`cal_signature` are
checked against Apache's code, not against a re-reading of it. The decision is checked by
examples taken from RocketMQ's rules and by properties that must hold for any account and request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.broker.acl.permission import ANY, DENY, PUB, SUB, check_permission, parse_perm
from rocketstore.broker.acl.plain_access_resource import NeededAccess, parse_request
from rocketstore.broker.acl.plain_permission_manager import (
    AclTable,
    acl_files,
    build_table,
    check_resource_perms,
    document_version,
    updated_account,
    validate,
    with_next_version,
)
from rocketstore.broker.acl.remote_address_strategy import AclConfigError, parse_strategy
from rocketstore.remoting.acl_signer import cal_signature, request_content
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand

# (ext fields as the hook leaves them, body, secret key, the Signature RocketMQ's hook computed)
JAVA_SIGNED = [
    ({"AccessKey": "RocketMQ", "a": "b", "topic": "T"}, b"hello", "12345678", "CAHoIphdbvuxSfZX/mJnBZmeUps="),
    ({"AccessKey": "AK_unicode", "Z": "1", "consumerGroup": "组", "queueId": "3"}, b"", "sk-ünïcødé-9",
     "cle2k+Dj2Kr50NK5+skNvDOnbOg="),
    ({"AccessKey": "rocketmq2"}, b"", "12345678", "Ou1T58RIcyZWaTIwzkhJZWn/Zvs="),
]


@pytest.mark.parametrize(("fields", "body", "secret", "expected"), JAVA_SIGNED)
def test_signature_matches_rocketmqs_aclclientrpchook(fields: dict[str, str], body: bytes, secret: str,
                                                      expected: str) -> None:
    assert cal_signature(request_content(fields, body), secret) == expected
    # the broker leaves Signature (and _UNIQUE_KEY_QUERY) out of what it recomputes
    signed = {**fields, "Signature": expected, "_UNIQUE_KEY_QUERY": "true"}
    assert cal_signature(request_content(signed, body), secret) == expected


def test_signature_depends_on_every_value_and_the_body() -> None:
    fields, body, secret, expected = JAVA_SIGNED[0]
    assert cal_signature(request_content({**fields, "topic": "U"}, body), secret) != expected
    assert cal_signature(request_content(fields, body + b"!"), secret) != expected
    assert cal_signature(request_content(fields, body), secret + "x") != expected


def test_permission_bits_as_rocketmq_compares_them() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB) and not check_permission(SUB, PUB)
    assert check_permission(ANY, PUB) and check_permission(ANY, SUB) and not check_permission(ANY, DENY)
    assert not check_permission(PUB, DENY | PUB)  # DENY wins
    assert [parse_perm(t) for t in ("PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY", " PUB ", "pub", None)] == \
        [PUB, SUB, PUB | SUB, PUB | SUB, DENY, PUB, DENY, DENY]


@pytest.mark.parametrize(("pattern", "inside", "outside"), [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.1.*", ["192.168.1.0", "192.168.1.255"], ["192.168.2.1", "10.168.1.1"]),
    ("192.168.1.1-5", ["192.168.1.1", "192.168.1.5"], ["192.168.1.0", "192.168.1.6"]),
    ("192.168.*.*", ["192.168.0.1", "192.168.200.7"], ["192.169.0.1"]),
    ("192.168.3-5.*", ["192.168.3.9", "192.168.5.0"], ["192.168.6.1", "192.168.2.255"]),
    ("192.168.1.{1,2,30}", ["192.168.1.2", "192.168.1.30"], ["192.168.1.3", "192.168.2.1"]),
    ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2", "not an address"]),
    ("::1", ["0:0:0:0:0:0:0:1", "::1"], ["::2", "127.0.0.1"]),
    ("2001:db8:0:0:0:0:0:*", ["2001:db8::1", "2001:db8::ffff"], ["2001:db8::1:0", "2001:db9::1", "10.0.0.1"]),
    ("2001:db8:0:0:0:0:0:10-ff", ["2001:db8::10", "2001:db8::ff"], ["2001:db8::f", "2001:db8::100"]),
    ("2001:db8:0:0:0:0:a-c:*", ["2001:db8::a:1", "2001:db8::c:ffff"], ["2001:db8::d:1", "2001:db8::9:0"]),
    # RocketMQ's expandIP leaves a '::' right before the range empty: the range is the fourth group
    ("2001:db8::10-ff", ["2001:db8:0:10::", "2001:db8:0:ff:1::1"], ["2001:db8::10", "2001:db8:1:10::"]),
])
def test_white_remote_address_forms(pattern: str, inside: list[str], outside: list[str]) -> None:
    strategy = parse_strategy(pattern)
    assert all(strategy.match(a) for a in inside), [a for a in inside if not strategy.match(a)]
    assert not any(strategy.match(a) for a in outside), [a for a in outside if strategy.match(a)]


@pytest.mark.parametrize("pattern", ["192.168.1", "300.1.1.*", "1.2.3.9-2", "a.b.c.d", "1.2.3.{x}", "2001:*:1",
                                     "2001:db8::1-g", "2001:1-2::1", "1:2:3:5-1"])
def test_white_remote_address_rejects_what_rocketmq_rejects(pattern: str) -> None:
    with pytest.raises(AclConfigError, match="remote address pattern"):
        parse_strategy(pattern)


@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255))
def test_range_pattern_matches_exactly_its_range(low: int, high: int, last: int) -> None:
    low, high = min(low, high), max(low, high)
    if high == 0:  # RocketMQ reads a range ending at 0 as no range at all
        return
    strategy = parse_strategy(f"10.1.2.{low}-{high}")
    assert strategy.match(f"10.1.2.{last}") == (low <= last <= high)
    assert not strategy.match(f"10.1.3.{last}")


# -- the decision --------------------------------------------------------------------------------

SECRET = "secret-12345"


def account(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"accessKey": "account1", "secretKey": SECRET, "defaultTopicPerm": "DENY",
                             "defaultGroupPerm": "SUB", "topicPerms": ["TopicA=PUB|SUB", "TopicB=SUB"],
                             "groupPerms": ["GroupX=DENY"]}
    entry.update(overrides)
    return entry


def table(*accounts: dict[str, Any], white: list[str] | None = None) -> AclTable:
    return build_table([("plain_acl.yml", {"accounts": list(accounts), "globalWhiteRemoteAddresses": white or []})])


def signed(code: int, ext: dict[str, str], *, body: bytes = b"", ak: str = "account1", sk: str = SECRET,
           addr: str = "10.9.8.7:4444") -> NeededAccess:
    fields = {**ext, "AccessKey": ak}
    fields["Signature"] = cal_signature(request_content(fields, body), sk)
    return parse_request(RemotingCommand(code=code, ext_fields=fields, body=body), addr)


def send(topic: str, **kw: Any) -> NeededAccess:
    return signed(RequestCode.SEND_MESSAGE_V2, {"a": "ProducerGroup", "b": topic, "c": "TBW102"}, **kw)


def pull(topic: str, group: str, **kw: Any) -> NeededAccess:
    return signed(RequestCode.PULL_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": "0"}, **kw)


def test_decisions_follow_rocketmqs_rules() -> None:
    acl = table(account())
    assert validate(acl, send("TopicA")) is None
    assert validate(acl, send("TopicB")) == "No default permission for topic:TopicB"
    assert validate(acl, send("Other")) == "No default permission for topic:Other"  # defaultTopicPerm DENY
    assert validate(acl, pull("TopicB", "AnyGroup")) is None  # topic SUB, group by defaultGroupPerm SUB
    assert validate(acl, pull("TopicB", "GroupX")) == "No default permission for group:GroupX"
    assert validate(acl, send("TopicA", sk="not-the-secret")) == "Check signature failed for accessKey=account1"
    assert validate(acl, send("TopicA", ak="nobody1")) == "No acl config for nobody1"
    unsigned = parse_request(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={"topic": "TopicA"}),
                             "1.2.3.4:5")
    assert validate(acl, unsigned) == "No accessKey is configured"
    # a send back to %RETRY%group needs the group's SUB, not the retry topic's PUB
    assert validate(acl, send("%RETRY%ProducerGroup")) is None
    assert validate(acl, signed(RequestCode.SEND_MESSAGE_V2, {"a": "GroupX", "b": "%RETRY%GroupX"})) is not None
    # message traces may always be sent
    assert validate(acl, send("RMQ_SYS_TRACE_TOPIC")) is None


def test_admin_codes_need_an_admin_account() -> None:
    acl = table(account(), account(accessKey="admin01", admin=True, topicPerms=None, groupPerms=None))
    create = {"topic": "NewTopic", "readQueueNums": "8"}
    code = int(RequestCode.UPDATE_AND_CREATE_TOPIC)
    assert validate(acl, signed(code, create)) == \
        f"Need admin permission for request code={code}, but accessKey=account1 is not"
    assert validate(acl, signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create, ak="admin01")) is None
    # an admin with neither list owns every resource
    assert validate(acl, send("Anything", ak="admin01")) is None


def test_white_addresses_skip_signature_and_permissions() -> None:
    acl = table(account(whiteRemoteAddress="10.9.8.*"))
    assert validate(acl, send("Other", sk="wrong-secret")) is None  # the account's white address
    assert validate(acl, send("Other", sk="wrong-secret", addr="10.9.9.1:1")) is not None
    everyone = table(account(), white=["10.9.*.*"])
    unsigned = parse_request(RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={"topic": "X"}), "10.9.1.1:7")
    assert validate(everyone, unsigned) is None


def test_heartbeat_needs_every_group_and_subscribed_topic() -> None:
    body = (b'{"clientID":"c","producerDataSet":[],"consumerDataSet":[{"groupName":"G1","consumeType":'
            b'"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
            b'"subscriptionDataSet":[{"topic":"TopicB","subString":"*"},{"topic":"Secret","subString":"*"}],'
            b'"unitMode":false}]}')
    needed = signed(RequestCode.HEART_BEAT, {}, body=body)
    assert dict(needed.resources) == {"%RETRY%G1": SUB, "TopicB": SUB, "Secret": SUB}
    assert validate(table(account()), needed) == "No default permission for topic:Secret"


def test_bad_files_are_refused_naming_what_is_wrong() -> None:
    with pytest.raises(AclConfigError, match="longer than 6"):
        table(account(secretKey="short"))
    with pytest.raises(AclConfigError, match="Parse resource permission failed for topic:TopicA"):
        table(account(topicPerms=["TopicA"]))
    with pytest.raises(AclConfigError, match="not a mapping"):
        build_table([("f.yml", ["a list"])])


def test_first_file_defining_an_access_key_wins() -> None:
    first = {"accounts": [account(defaultTopicPerm="PUB")]}
    second = {"accounts": [account()], "globalWhiteRemoteAddresses": ["192.168.0.1"]}
    acl = build_table([("a.yml", first), ("b.yml", second)])
    assert acl.accounts["account1"].default_topic_perm == PUB
    assert len(acl.global_white) == 1


perms = st.sampled_from(["PUB", "SUB", "PUB|SUB", "DENY", None])
names = st.sampled_from(["TopicA", "TopicB", "TopicC"])


@given(default_topic=perms, topic_perms=st.dictionaries(names, perms.filter(lambda p: p is not None), max_size=3),
       topic=names, admin=st.booleans())
def test_send_allowed_exactly_when_the_topic_permission_has_pub(default_topic: str | None,
                                                               topic_perms: dict[str, str], topic: str,
                                                               admin: bool) -> None:
    entry = account(defaultTopicPerm=default_topic, topicPerms=[f"{t}={p}" for t, p in topic_perms.items()],
                    groupPerms=None, admin=admin)
    acl = table(entry)
    owned = topic_perms.get(topic, default_topic)
    admin_owns_all = admin and not topic_perms
    expected = admin_owns_all or owned in ("PUB", "PUB|SUB")
    assert (validate(acl, send(topic)) is None) == expected
    # whatever the permissions, a wrong signature is always refused and an unknown key too
    assert validate(acl, send(topic, sk="x" + SECRET)) == "Check signature failed for accessKey=account1"
    assert validate(acl, send(topic, ak="unknown-key")) == "No acl config for unknown-key"


@given(ext=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=6),
       body=st.binary(max_size=32))
def test_any_request_signed_with_the_right_secret_passes_the_signature_check(ext: dict[str, str],
                                                                            body: bytes) -> None:
    ext.pop("AccessKey", None)
    ext.pop("Signature", None)
    ext.pop("_UNIQUE_KEY_QUERY", None)
    acl = table(account(admin=True, topicPerms=None, groupPerms=None))
    needed = signed(0, ext, body=body)  # code 0: no resource, no admin code
    assert validate(acl, needed) is None
    assert validate(acl, signed(0, ext, body=body + b"x")) is None
    tampered = NeededAccess(request_code=0, remote_address=needed.remote_address, access_key="account1",
                            signature=needed.signature, content=needed.content + b"x")
    assert validate(acl, tampered) == "Check signature failed for accessKey=account1"


# -- mqadmin's edits, on a file's document ------------------------------------------------------


def test_updated_account_keeps_what_the_change_leaves_out() -> None:
    existing = account(whiteRemoteAddress="10.0.0.*")
    entry = updated_account(existing, {"accessKey": "account1", "secretKey": "", "whiteRemoteAddress": None,
                                       "admin": True, "defaultTopicPerm": "PUB", "defaultGroupPerm": None,
                                       "topicPerms": None, "groupPerms": ["G=SUB"]})
    assert entry["secretKey"] == SECRET and entry["whiteRemoteAddress"] == "10.0.0.*"
    assert entry["admin"] is True and entry["defaultTopicPerm"] == "PUB" and entry["defaultGroupPerm"] == "SUB"
    assert entry["topicPerms"] == existing["topicPerms"] and entry["groupPerms"] == ["G=SUB"]
    with pytest.raises(AclConfigError, match="accessKey=short"):
        updated_account(None, {"accessKey": "short"})


def test_resource_perms_of_an_update_are_checked() -> None:
    check_resource_perms(["a=PUB", "b=SUB|PUB", "c=DENY"])
    with pytest.raises(AclConfigError, match="'Res=Perm'"):
        check_resource_perms(["a"])
    with pytest.raises(AclConfigError, match="expected permissions"):
        check_resource_perms(["a=WRITE"])


def test_each_edit_counts_the_data_version_up() -> None:
    first = with_next_version({"accounts": []})
    assert first["dataVersion"][0]["counter"] == 1
    assert document_version(with_next_version(first)).counter == 2
    assert document_version({"dataVersion": "nonsense"}).counter == 0


def test_acl_files_skip_hidden_entries(tmp_path: Path) -> None:
    """A Kubernetes Secret volume: visible links into a hidden ``..<timestamp>`` directory."""
    acl_dir = tmp_path / "conf" / "acl"
    hidden = acl_dir / "..2026_11_24_03_00_00.123"
    hidden.mkdir(parents=True)
    (hidden / "team.yml").write_text("accounts: []\n")
    (acl_dir / "..data").symlink_to(hidden.name)
    (acl_dir / "team.yml").symlink_to("..data/team.yml")
    (acl_dir / "notes.txt").write_text("not an ACL file")
    default = tmp_path / "conf" / "plain_acl.yml"
    default.write_text("accounts: []\n")
    assert acl_files(tmp_path, default) == [acl_dir / "team.yml", default]
