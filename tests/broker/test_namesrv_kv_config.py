"""The embedded name server's KV config over real sockets: PUT_KV_CONFIG (100), GET_KV_CONFIG
(101), DELETE_KV_CONFIG (102), GET_KVLIST_BY_NAMESPACE (219), kept in kvConfig.json across a
restart; UPDATE_NAMESRV_CONFIG (318) refusing bad input and kept in namesrv.properties across a
restart; the unit topic lists (311-313)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from inprocess_broker import BrokerHandle, RawClient
from ports import free_port

from rocketstore.common.java_properties import parse_properties
from rocketstore.remoting.body import KVTable, TopicList
from rocketstore.remoting.codes import RequestCode, ResponseCode


def _start(broker_factory: Callable[..., BrokerHandle], root: Path) -> tuple[BrokerHandle, RawClient]:
    broker = broker_factory(root, namesrv_listen_port=free_port())
    assert broker.controller.namesrv is not None
    client = RawClient("127.0.0.1", broker.controller.namesrv.port)
    broker.clients.append(client)
    return broker, client


def test_kv_config_survives_restart(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    broker, ns = _start(broker_factory, tmp_path / "b")
    get = {"namespace": "NS", "key": "k1"}
    missing = ns.call(RequestCode.GET_KV_CONFIG, get)
    assert (missing.code, missing.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: k1")
    for key, value in (("k1", "v1"), ("k2", "v=2")):
        put = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": key, "value": value})
        assert put.code == ResponseCode.SUCCESS
    assert ns.call(RequestCode.GET_KV_CONFIG, get).ext_fields["value"] == "v1"
    kv_file = tmp_path / "b" / "config" / "kvConfig.json"
    assert kv_file.read_text() == '{"configTable":{"NS":{"k1":"v1","k2":"v=2"}}}'
    assert ns.call(RequestCode.DELETE_KV_CONFIG, {"namespace": "NS", "key": "k2"}).code == ResponseCode.SUCCESS
    broker.stop()

    _, ns = _start(broker_factory, tmp_path / "b")
    listed = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "NS"})
    assert KVTable.decode(listed.body).table == {"k1": "v1"}
    none = ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "Other"})
    assert (none.code, none.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: Other")
    bad = ns.call(RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": "k3"})
    assert bad.code != ResponseCode.SUCCESS and "value" in (bad.remark or "")


def test_update_namesrv_config_checks_input(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    _, ns = _start(broker_factory, tmp_path / "b")
    refused = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"configStorePath=/tmp/x\n")
    assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "Can not update config in black list.")
    bad = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=maybe\n")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "orderMessageEnable" in (bad.remark or "")
    ok = ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"productEnvName=test\nunknownKey=1\n")
    assert ok.code == ResponseCode.SUCCESS
    text = ns.call(RequestCode.GET_NAMESRV_CONFIG).body.decode()
    assert "productEnvName=test\n" in text and "orderMessageEnable=false\n" in text
    assert "unknownKey" not in text


def test_update_namesrv_config_survives_restart(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    broker, ns = _start(broker_factory, tmp_path / "b")
    update = b"orderMessageEnable=true\nproductEnvName=blue env=1\n"
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=update).code == ResponseCode.SUCCESS
    stored = tmp_path / "b" / "config" / "namesrv.properties"
    assert parse_properties(stored.read_text()) == {"clusterTest": "false", "orderMessageEnable": "true",
                                                     "productEnvName": "blue env=1"}
    assert ns.call(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"clusterTest=true\n").code == ResponseCode.SUCCESS
    assert parse_properties((stored.parent / "namesrv.properties.bak").read_text())["clusterTest"] == "false"
    broker.stop()

    _, ns = _start(broker_factory, tmp_path / "b")
    config = parse_properties(ns.call(RequestCode.GET_NAMESRV_CONFIG).body.decode())
    assert (config["orderMessageEnable"], config["productEnvName"], config["clusterTest"]) == (
        "true", "blue env=1", "true")
    assert config["configStorePath"] == str(stored)


def test_unusable_namesrv_config_file_falls_back_to_its_backup(broker_factory: Callable[..., BrokerHandle],
                                                               tmp_path: Path) -> None:
    config_dir = tmp_path / "b" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "namesrv.properties").write_text("orderMessageEnable=perhaps\n")
    (config_dir / "namesrv.properties.bak").write_text("productEnvName=from-backup\n")
    _, ns = _start(broker_factory, tmp_path / "b")
    config = parse_properties(ns.call(RequestCode.GET_NAMESRV_CONFIG).body.decode())
    assert config["productEnvName"] == "from-backup"


def test_unit_topic_lists(broker_factory: Callable[..., BrokerHandle], tmp_path: Path) -> None:
    """GET_UNIT_TOPIC_LIST (311), GET_HAS_UNIT_SUB_TOPIC_LIST (312),
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313): topics by TopicSysFlag's unit bits."""
    broker, ns = _start(broker_factory, tmp_path / "b")
    admin = broker.client()
    for topic, sys_flag in (("TUnit", 1), ("TUnitSub", 2), ("TBoth", 3), ("TPlain", 0)):
        fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                  "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": str(sys_flag), "order": "false"}
        assert admin.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields).code == ResponseCode.SUCCESS

    def topics(code: int) -> list[str]:
        return TopicList.decode(ns.call(code).body).topic_list

    assert topics(RequestCode.GET_UNIT_TOPIC_LIST) == ["TBoth", "TUnit"]
    assert topics(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST) == ["TBoth", "TUnitSub"]
    assert topics(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == ["TUnitSub"]
