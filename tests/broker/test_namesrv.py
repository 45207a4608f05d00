"""The embedded name-server role over real sockets: routes, cluster info, topic lists, KV misses."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from inprocess_broker import BrokerHandle, RawClient
from ports import free_port

from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.perm_name import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocketstore.remoting.body import ClusterInfo, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


def _namesrv(broker_factory: Callable[..., BrokerHandle], **overrides: object) -> tuple[BrokerHandle, RawClient]:
    broker = broker_factory(namesrv_listen_port=free_port(), **overrides)
    assert broker.controller.namesrv is not None
    client = RawClient("127.0.0.1", broker.controller.namesrv.port)
    broker.clients.append(client)
    return broker, client


def test_route_lists_this_broker_and_its_peers(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker, ns = _namesrv(broker_factory, broker_cluster_name="C1",
                          cluster_peers="broker-b@10.1.0.2:10911,broker-c@10.1.0.3:10911")
    resp = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
    assert resp.code == ResponseCode.SUCCESS
    # brokerAddrs keys are bare integers, as fastjson writes Map<Long, String>
    assert b'"brokerAddrs":{0:"127.0.0.1:' in resp.body
    raw = parse_fastjson(resp.body.decode())
    assert raw["brokerDatas"][0]["brokerAddrs"] == {"0": broker.controller.broker_addr}
    route = TopicRouteData.decode(resp.body)
    assert [(b.cluster, b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("C1", "broker-a", {0: f"127.0.0.1:{broker.port}"}),
        ("C1", "broker-b", {0: "10.1.0.2:10911"}),
        ("C1", "broker-c", {0: "10.1.0.3:10911"}),
    ]
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        (name, 8, 8, PERM_INHERIT | PERM_READ | PERM_WRITE) for name in ("broker-a", "broker-b", "broker-c")]


def test_unknown_topic_is_topic_not_exist(broker_factory: Callable[..., BrokerHandle]) -> None:
    _, ns = _namesrv(broker_factory)
    resp = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert (resp.remark or "").startswith("No topic route info in name server for the topic: NoSuchTopic")
    # the connection stays usable
    assert ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_retry_and_auto_created_topics_get_routes(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker, ns = _namesrv(broker_factory)
    assert ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%CG"}).code == ResponseCode.TOPIC_NOT_EXIST
    topics = broker.controller.topic_config_manager
    broker.call_soon(lambda: topics.create_topic_in_send_back("%RETRY%CG", 1, PERM_READ | PERM_WRITE, 0))
    broker.call_soon(lambda: topics.topic_config_for_send("Orders", "TBW102", 4, 0))
    retry = TopicRouteData.decode(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%CG"}).body)
    assert [(q.write_queue_nums, q.perm) for q in retry.queue_datas] == [(1, PERM_READ | PERM_WRITE)]
    orders = TopicRouteData.decode(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}).body)
    assert [(q.write_queue_nums, q.perm) for q in orders.queue_datas] == [(4, PERM_READ | PERM_WRITE)]


def test_broker_permission_overrides_topic_perm(broker_factory: Callable[..., BrokerHandle]) -> None:
    _, ns = _namesrv(broker_factory, broker_permission=PERM_READ)
    route = TopicRouteData.decode(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).body)
    assert [q.perm for q in route.queue_datas] == [PERM_READ]


def test_cluster_info_and_topic_lists(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker, ns = _namesrv(broker_factory, broker_cluster_name="C1", cluster_peers="broker-b@10.1.0.2:10911")
    info = ClusterInfo.decode(ns.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info.cluster_addr_table == {"C1": ["broker-a", "broker-b"]}
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: broker.controller.broker_addr}
    assert info.broker_addr_table["broker-b"].broker_addrs == {0: "10.1.0.2:10911"}

    topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
    assert {"TBW102", "SELF_TEST_TOPIC", "C1", "broker-a"} <= set(topics)
    by_cluster = json.loads(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C1"}).body)["topicList"]
    assert set(by_cluster) == set(topics)
    other = json.loads(ns.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "Other"}).body)["topicList"]
    assert other == []
    system = json.loads(ns.call(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body)
    assert set(system["topicList"]) == {"C1", "broker-a", "broker-b"}


def test_kv_config_is_not_found(broker_factory: Callable[..., BrokerHandle]) -> None:
    _, ns = _namesrv(broker_factory)
    resp = ns.call(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "Orders"})
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    assert resp.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: Orders"
    assert ns.call(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "x"}).code == ResponseCode.QUERY_NOT_FOUND


def test_name_server_port_does_not_serve_broker_requests(broker_factory: Callable[..., BrokerHandle]) -> None:
    _, ns = _namesrv(broker_factory)
    assert ns.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_namesrv_role_off_by_zero_port(broker: BrokerHandle) -> None:
    assert broker.controller.namesrv is None
