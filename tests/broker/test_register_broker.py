"""Joining a cluster: a broker with namesrvAddr registers with those name servers (REGISTER_BROKER,
re-registration, UNREGISTER_BROKER), and the embedded name server accepts registrations.

Two real brokers over real sockets: broker-a serves the embedded name server, broker-b has
``namesrvAddr`` pointing at it. The Apache side of the same protocol is tests/compat/apache_broker/test_join_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess_broker import BrokerHandle, RawClient
from polling import wait_until
from ports import free_port

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.common.data_version import DataVersion
from rocketstore.common.message import body_crc
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import ClusterInfo, KVTable, TopicList, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import RegisterBrokerRequestHeader
from rocketstore.remoting.register_broker_body import RegisterBrokerBody, TopicConfigSerializeWrapper
from rocketstore.store.config import ConfigError

pytestmark = pytest.mark.integration


Factory = Callable[..., BrokerHandle]


def _pair(broker_factory: Factory, **b_overrides: object) -> tuple[BrokerHandle, BrokerHandle, RawClient]:
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-a")
    assert a.controller.namesrv is not None
    b = broker_factory(namesrv_addr=f"127.0.0.1:{a.controller.namesrv.port}", broker_cluster_name="C1",
                       broker_name="broker-b", **b_overrides)
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    return a, b, ns


def _route(ns: RawClient, topic: str) -> TopicRouteData | None:
    resp = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if resp.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return TopicRouteData.decode(resp.body)


def _wait_route(ns: RawClient, topic: str, present: bool, timeout: float = 10.0) -> TopicRouteData | None:
    deadline = time.monotonic() + timeout
    while (route := _route(ns, topic)) is None if present else route is not None:
        assert time.monotonic() < deadline, f"route of {topic} still {'absent' if present else route}"
        time.sleep(0.05)
    return route


def _create_topic(broker: BrokerHandle, name: str, queues: int) -> None:
    controller = broker.controller

    def put() -> None:
        controller.topic_config_manager.put(TopicConfig(name, read_queue_nums=queues, write_queue_nums=queues))
        controller.config_persist_service.tables_changed(controller.topic_config_manager)
    broker.call_soon(put)


def test_registered_broker_is_routed_beside_the_embedded_one(broker_factory: Factory,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    a, b, ns = _pair(broker_factory)
    # registered in start(): the system topics of broker-b are routed at once
    route = _route(ns, "broker-b")
    assert route is not None
    assert [(d.cluster, d.broker_name, d.broker_addrs) for d in route.broker_datas] == [
        ("C1", "broker-b", {0: b.controller.broker_addr})]

    # a topic created on broker-b afterwards is registered one way at once, not after 30 s
    _create_topic(b, "OnlyOnB", 3)
    only_b = _wait_route(ns, "OnlyOnB", present=True)
    assert only_b is not None
    assert [(q.broker_name, q.write_queue_nums) for q in only_b.queue_datas] == [("broker-b", 3)]

    # a topic on both brokers: one route, both brokers
    _create_topic(a, "Shared", 2)
    _create_topic(b, "Shared", 5)
    deadline = time.monotonic() + 10
    while len((shared := _route(ns, "Shared") or TopicRouteData()).queue_datas) < 2:
        assert time.monotonic() < deadline, shared
        time.sleep(0.05)
    assert sorted((q.broker_name, q.write_queue_nums) for q in shared.queue_datas) == [("broker-a", 2),
                                                                                        ("broker-b", 5)]
    assert {d.broker_name: d.broker_addrs[0] for d in shared.broker_datas} == {
        "broker-a": a.controller.broker_addr, "broker-b": b.controller.broker_addr}

    info = ClusterInfo.decode(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info.cluster_addr_table == {"C1": ["broker-a", "broker-b"]}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: b.controller.broker_addr}
    topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert {"OnlyOnB", "Shared", "broker-a", "broker-b"} <= set(topics)
    by_cluster = json.loads(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"}).body)["topicList"]
    assert "OnlyOnB" in by_cluster
    assert "rocketstore_namesrv_registered_brokers 1.0" in a.metrics()
    assert "rocketstore_broker_registrations_total" in b.metrics()

    # shutdown unregisters (UNREGISTER_BROKER, not just the connection closing): routes go at once
    with caplog.at_level(logging.INFO, logger="rocketstore.broker.route_info_manager"):
        b.stop()
    assert any("unregister broker" in r.getMessage() and "was live" in r.getMessage() for r in caplog.records)
    assert _route(ns, "OnlyOnB") is None
    shared_after = _route(ns, "Shared")
    assert shared_after is not None
    assert [q.broker_name for q in shared_after.queue_datas] == ["broker-a"]
    info = ClusterInfo.decode(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info.cluster_addr_table == {"C1": ["broker-a"]}


def test_compressed_registration(broker_factory: Factory) -> None:
    _, b, ns = _pair(broker_factory, compressed_register=True)
    _create_topic(b, "Zipped", 6)
    route = _wait_route(ns, "Zipped", present=True)
    assert route is not None
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [("broker-b", 6, 6)]


def test_force_register_false_registers_only_when_the_table_changed(broker_factory: Factory) -> None:
    a, b, _ = _pair(broker_factory, force_register=False)
    assert a.controller.namesrv is not None
    namesrv = a.controller.namesrv
    before = namesrv.register_requests
    assert before == 1  # start() registers whatever forceRegister says
    periodic = dict(check_order_config=True, oneway=False, force=False)
    b.run(b.controller.register_broker_service.register_broker_all(**periodic))
    assert namesrv.register_requests == before  # QUERY_DATA_VERSION said unchanged
    b.call_soon(lambda: b.controller.topic_config_manager.put(TopicConfig("Quiet", read_queue_nums=1,
                                                                          write_queue_nums=1)))
    b.run(b.controller.register_broker_service.register_broker_all(**periodic))
    assert namesrv.register_requests == before + 1


def test_bad_registrations_are_refused_and_the_connection_kept(broker_factory: Factory) -> None:
    a = broker_factory(namesrv_listen_port=free_port())
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    wrapper = TopicConfigSerializeWrapper({"T1": TopicConfig("T1")}, DataVersion(1, 1))
    body = RegisterBrokerBody(wrapper).encode()
    header = RegisterBrokerRequestHeader(broker_name="x", broker_addr="127.0.0.1:1", cluster_name="X",
                                         ha_server_addr="", broker_id=0, body_crc32=body_crc(body) ^ 1)
    resp = ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

    garbage = zlib.compress(b"\x00\x00\x00\x05{}")
    header = RegisterBrokerRequestHeader(broker_name="x", broker_addr="127.0.0.1:1", cluster_name="X",
                                         ha_server_addr="", broker_id=0, compressed=True)
    resp = ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), garbage)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "RegisterBrokerBody" in (resp.remark or "")

    resp = ns.call(RequestCode.REGISTER_BROKER, {"brokerName": "x"}, body)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "brokerAddr" in (resp.remark or "")
    assert _route(ns, "T1") is None  # nothing of the refused registrations was kept

    # the same connection still registers a good one
    header = RegisterBrokerRequestHeader(broker_name="x", broker_addr="127.0.0.1:1", cluster_name="X",
                                         ha_server_addr="", broker_id=0, body_crc32=body_crc(body))
    assert ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body).code == ResponseCode.SUCCESS
    assert _route(ns, "T1") is not None


def test_periodic_registration_without_changes(broker_factory: Factory, monkeypatch: pytest.MonkeyPatch) -> None:
    # RocketMQ's schedule (10 s, then registerNameServerPeriod clamped to 10-60 s), shortened
    monkeypatch.setattr("rocketstore.broker.register_broker_service.REGISTER_INITIAL_DELAY_S", 0.2)
    monkeypatch.setattr("rocketstore.broker.register_broker_service.REGISTER_PERIOD_MIN_MS", 100)
    a, _, _ = _pair(broker_factory, register_name_server_period=300)
    assert a.controller.namesrv is not None
    namesrv = a.controller.namesrv
    deadline = time.monotonic() + 10
    while namesrv.register_requests < 4:
        assert time.monotonic() < deadline, f"{namesrv.register_requests} registrations"
        time.sleep(0.05)


def test_silent_broker_expires_and_its_connection_is_closed(broker_factory: Factory,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # RouteInfoManager forgets a broker two minutes after its last registration; shortened here
    monkeypatch.setattr("rocketstore.broker.route_info_manager.BROKER_CHANNEL_EXPIRED_TIME_MS", 300)
    monkeypatch.setattr("rocketstore.broker.namesrv.SCAN_NOT_ACTIVE_DELAY_S", 0.1)
    monkeypatch.setattr("rocketstore.broker.namesrv.SCAN_NOT_ACTIVE_INTERVAL_S", 0.1)
    a = broker_factory(namesrv_listen_port=free_port())
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    wrapper = TopicConfigSerializeWrapper({"Silent": TopicConfig("Silent")}, DataVersion(1, 1))
    body = RegisterBrokerBody(wrapper).encode()
    header = RegisterBrokerRequestHeader(broker_name="quiet", broker_addr="127.0.0.1:2", cluster_name="X",
                                         ha_server_addr="", broker_id=0, body_crc32=body_crc(body))
    assert ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body).code == ResponseCode.SUCCESS
    other = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(other)
    assert _route(other, "Silent") is not None
    deadline = time.monotonic() + 10
    while _route(other, "Silent") is not None:
        assert time.monotonic() < deadline, "the silent broker was never expired"
        time.sleep(0.05)
    ns.sock.settimeout(5)
    assert ns.sock.recv(1) == b""  # the name server closed the silent broker's connection


def test_closing_the_registering_connection_forgets_the_broker(broker_factory: Factory) -> None:
    a = broker_factory(namesrv_listen_port=free_port())
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"Gone": TopicConfig("Gone")}, DataVersion(1, 1))).encode()
    header = RegisterBrokerRequestHeader(broker_name="gone", broker_addr="127.0.0.1:3", cluster_name="X",
                                         ha_server_addr="", broker_id=0)
    assert ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body).code == ResponseCode.SUCCESS
    other = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(other)
    assert _route(other, "Gone") is not None
    ns.close()
    deadline = time.monotonic() + 5
    while _route(other, "Gone") is not None:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_live_broker_permission_update_is_registered_at_once(broker_factory: Factory) -> None:
    _, b, ns = _pair(broker_factory)
    admin = b.client()
    resp = admin.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    deadline = time.monotonic() + 5  # well before the first periodic registration (10 s)
    while [q.perm for q in (_route(ns, "broker-b") or TopicRouteData()).queue_datas] != [4]:
        assert time.monotonic() < deadline, _route(ns, "broker-b")
        time.sleep(0.05)


def test_live_namesrv_addr_update_moves_the_registration(broker_factory: Factory,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rocketstore.broker.register_broker_service.NAMESRV_ADDR_REFRESH_DELAY_S", 0.1)
    monkeypatch.setattr("rocketstore.broker.register_broker_service.NAMESRV_ADDR_REFRESH_INTERVAL_S", 0.1)
    _, b, _ = _pair(broker_factory)
    c = broker_factory(namesrv_listen_port=free_port(), broker_name="broker-c")
    assert c.controller.namesrv is not None
    other_ns = RawClient("127.0.0.1", c.controller.namesrv.port)
    c.clients.append(other_ns)
    assert _route(other_ns, "broker-b") is None
    resp = b.client().call(RequestCode.UPDATE_BROKER_CONFIG,
                           body=f"namesrvAddr=127.0.0.1:{c.controller.namesrv.port}\n".encode())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    # the address list is read again; the next registration goes to the new one
    moved = f"127.0.0.1:{c.controller.namesrv.port}"
    registration = b.controller.register_broker_service
    wait_until("the new name server address in use", lambda: b.call_soon(
        lambda: registration.broker_outer_api is not None and registration.broker_outer_api.addrs == [moved]),
        timeout=10, interval=0.05)
    _create_topic(b, "AfterMove", 1)
    _wait_route(other_ns, "AfterMove", present=True)


def test_registration_under_a_peer_name_routes_topics_the_peer_alone_has(broker_factory: Factory) -> None:
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1",
                       cluster_peers="broker-p@10.9.0.1:10911")
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    table = {"TBW102": TopicConfig("TBW102", 4, 4), "PeerOnly": TopicConfig("PeerOnly", 2, 2)}
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1))).encode()
    header = RegisterBrokerRequestHeader(broker_name="broker-p", broker_addr="10.9.0.1:10911", cluster_name="C1",
                                         ha_server_addr="", broker_id=0)
    assert ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body).code == ResponseCode.SUCCESS
    shared = _route(ns, "TBW102")
    # broker-p once, in clusterPeers order, with the queues it registered: its own topic table
    # supersedes the assumption that a peer is configured like this broker
    assert shared is not None
    assert [(q.broker_name, q.write_queue_nums) for q in shared.queue_datas] == [("broker-a", 8), ("broker-p", 4)]
    peer_only = _route(ns, "PeerOnly")
    assert peer_only is not None
    assert [(q.broker_name, q.write_queue_nums) for q in peer_only.queue_datas] == [("broker-p", 2)]
    assert [d.broker_addrs for d in peer_only.broker_datas] == [{0: "10.9.0.1:10911"}]


def test_malformed_namesrv_addr_is_refused_naming_the_key(broker_factory: Factory) -> None:
    with pytest.raises(ConfigError, match="namesrvAddr"):
        BrokerConfig.from_properties({"namesrvAddr": "10.0.0.1;nohost:"})
    assert BrokerConfig.from_properties({"namesrvAddr": "10.0.0.1:9876;10.0.0.2:9876"})[0].namesrv_addr
    b = broker_factory()
    resp = b.client().call(RequestCode.UPDATE_BROKER_CONFIG, body=b"namesrvAddr=not-an-address\n")
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "namesrvAddr" in (resp.remark or "")


def test_namesrv_peers_updated_live_are_registered_with_at_once(broker_factory: Factory) -> None:
    """namesrvPeers, pushed live (the operator's scale-up), reaches the new peers' name servers at
    once, not at the next period; a list naming this broker's own name server (one list for every
    pod) leaves no registration of itself there."""
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-a")
    b = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-b")
    assert a.controller.namesrv is not None and b.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    assert _route(ns, "broker-b") is None
    peers = f"127.0.0.1:{a.controller.namesrv.port};127.0.0.1:{b.controller.namesrv.port}"
    begin = time.monotonic()
    resp = b.client().call(RequestCode.UPDATE_BROKER_CONFIG, body=f"namesrvPeers={peers}\n".encode())
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    route = _wait_route(ns, "broker-b", present=True)
    assert time.monotonic() - begin < 5  # the period is 30 s, the first periodic registration after 10 s
    assert route is not None and [d.broker_addrs for d in route.broker_datas] == [{0: b.controller.broker_addr}]
    registered = b.controller.register_broker_service.peer_outer_api
    assert registered is not None
    wait_until("answers of a's name server and its own", lambda: registered.registrations >= 2, timeout=5)
    assert "rocketstore_broker_peer_registrations_total" in b.metrics()
    assert b.call_soon(lambda: dict(b.controller.namesrv.routes.broker_live_table)) == {}  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="namesrvPeers"):
        BrokerConfig.from_properties({"namesrvPeers": "10.0.0.1:9876;nohost:"})
    resp = b.client().call(RequestCode.UPDATE_BROKER_CONFIG, body=b"namesrvPeers=not-an-address\n")
    assert resp.code == ResponseCode.SYSTEM_ERROR and "namesrvPeers" in (resp.remark or "")


def test_a_dead_name_server_does_not_keep_the_others_from_hearing(broker_factory: Factory) -> None:
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1", broker_name="broker-a")
    assert a.controller.namesrv is not None
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    begin = time.monotonic()
    b = broker_factory(namesrv_addr=f"{dead};127.0.0.1:{a.controller.namesrv.port}", broker_name="broker-b")
    assert time.monotonic() - begin < 6  # start waits at most registerBrokerTimeoutMills
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    assert _route(ns, "broker-b") is not None
    api = b.controller.register_broker_service.broker_outer_api
    assert api is not None
    assert (api.registrations, api.registration_failures) == (1, 1)
    assert "rocketstore_broker_registration_failures_total 1.0" in b.metrics()


def _register_raw(ns: RawClient, broker_name: str, addr: str, cluster: str,
                  table: dict[str, TopicConfig]) -> bytes:
    """Registers a broker by hand; the answer's body (the ORDER_TOPIC_CONFIG KVTable, if any)."""
    body = RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1, 1))).encode()
    header = RegisterBrokerRequestHeader(broker_name=broker_name, broker_addr=addr, cluster_name=cluster,
                                         ha_server_addr="", broker_id=0, body_crc32=body_crc(body))
    resp = ns.call(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return bytes(resp.body)


def test_register_answer_carries_the_order_topic_config(broker_factory: Factory) -> None:
    """DefaultRequestProcessor.registerBrokerWithFilterServer answers the KV namespace ORDER_TOPIC_CONFIG;
    a registering broker checking its order config marks those topics ordered."""
    _, b, ns = _pair(broker_factory)
    assert _register_raw(ns, "x", "127.0.0.1:7", "X", {}) == b""  # no such namespace yet
    put = {"namespace": "ORDER_TOPIC_CONFIG", "key": "Ordered", "value": "broker-b:4"}
    assert ns.call(RequestCode.PUT_KV_CONFIG, put).code == ResponseCode.SUCCESS
    answer = _register_raw(ns, "x", "127.0.0.1:7", "X", {})
    assert KVTable.decode(answer).table == {"Ordered": "broker-b:4"}

    _create_topic(b, "Ordered", 4)
    _create_topic(b, "Unordered", 4)
    b.run(b.controller.register_broker_service.register_broker_all(check_order_config=True, oneway=False, force=True))
    table = b.controller.topic_config_manager.table()
    assert (table["Ordered"].order, table["Unordered"].order) == (True, False)


def test_delete_topic_in_namesrv_drops_registered_routes(broker_factory: Factory) -> None:
    """RouteInfoManager.deleteTopic: with a clusterName only that cluster's brokers lose the topic."""
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1")
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    _register_raw(ns, "x", "127.0.0.1:7", "X", {"Gone": TopicConfig("Gone"), "Kept": TopicConfig("Kept")})
    _register_raw(ns, "y", "127.0.0.1:8", "Y", {"Gone": TopicConfig("Gone")})

    resp = ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Gone", "clusterName": "X"})
    assert resp.code == ResponseCode.SUCCESS
    route = _route(ns, "Gone")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["y"]
    assert ns.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Gone"}).code == ResponseCode.SUCCESS
    assert _route(ns, "Gone") is None
    assert _route(ns, "Kept") is not None
    topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert "Gone" not in topics and "Kept" in topics


def test_topic_lists_include_registered_brokers_topics(broker_factory: Factory) -> None:
    """GET_UNIT_TOPIC_LIST family (311-313), GET_ALL_TOPIC_LIST_FROM_NAMESERVER and
    GET_TOPICS_BY_CLUSTER: the registered brokers' topics beside this broker's."""
    a = broker_factory(namesrv_listen_port=free_port(), broker_cluster_name="C1")
    assert a.controller.namesrv is not None
    ns = RawClient("127.0.0.1", a.controller.namesrv.port)
    a.clients.append(ns)
    table = {name: TopicConfig(name, topic_sys_flag=flag)
             for name, flag in (("RUnit", 1), ("RUnitSub", 2), ("RBoth", 3), ("RPlain", 0))}
    _register_raw(ns, "x", "127.0.0.1:7", "X", table)

    def topics(code: int, fields: dict[str, str] | None = None) -> set[str]:
        return set(TopicList.decode(ns.call(code, fields).body).topic_list)

    assert topics(RequestCode.GET_UNIT_TOPIC_LIST) == {"RBoth", "RUnit"}
    assert topics(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST) == {"RBoth", "RUnitSub"}
    assert topics(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST) == {"RUnitSub"}
    assert set(table) <= topics(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert topics(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "X"}) == set(table)
    own = topics(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"})
    assert "TBW102" in own and not own & set(table)


def test_stop_registering_returns_when_a_change_and_the_stop_come_together(tmp_path: Path) -> None:
    """A topic-table change that wakes the registration loops in the same loop pass as their
    cancellation must not swallow the cancellation: Python 3.11's ``asyncio.wait_for`` returns
    the finished wait instead of raising, and ``stop_registering`` then waited forever (seen as
    a broker whose stop hung in the register-broker-peers task)."""
    from rocketstore.broker.register_broker_service import RegisterBrokerService
    from rocketstore.broker.topic_config_manager import TopicConfigManager

    async def scenario() -> None:
        cfg = BrokerConfig()
        topics = TopicConfigManager(tmp_path, cfg, lambda _: None)
        service = RegisterBrokerService(cfg, topics, lambda: "127.0.0.1:1", lambda *_: None,
                                        ha_server_addr=lambda: "127.0.0.1:2", on_registered=lambda _: None)
        await service.start()
        for _ in range(3):  # the peer loop's first (empty) registration, then its wait
            await asyncio.sleep(0)
        loops = list(service._tasks)
        service.topics_changed(topics)  # wakes the waiting loop in the step that cancels it
        stopping = asyncio.ensure_future(service.stop_registering())
        await asyncio.sleep(0)
        # asyncio.wait does not cancel what is still pending after its timeout (asyncio.wait_for
        # would, and a cancellation from outside would end the loop and hide the hang)
        done, _ = await asyncio.wait(loops, timeout=5)
        assert set(done) == set(loops), "a registration loop outlived its cancellation"
        await stopping

    asyncio.run(scenario())
