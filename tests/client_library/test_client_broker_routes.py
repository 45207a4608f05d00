"""BrokerRoutes: routes asked of the brokers themselves, used by Producer, PullConsumer and MQAdmin
in place of a name server, against real brokers whose name-server role is switched off."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_broker import start_broker

from rocketstore.client import BrokerAdmin, MessageQueue, MQAdmin, Producer, PullConsumer, RemotingClient, RemotingError
from rocketstore.client.consumer import PullStatus
from rocketstore.client.remoting_client import (
    BrokerRoutes,
    NameServerClient,
    RemotingClientError,
    RemotingConnectError,
    route_source_for,
    writable_queues,
)
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[str]]:
    """broker-a and broker-b without a name server (namesrvListenPort 0); broker-b is read-only."""
    handles = [start_broker(tmp_path / "a", broker_name="broker-a"),
               start_broker(tmp_path / "b", broker_name="broker-b", broker_permission=4)]
    try:
        assert all(h.controller.namesrv is None for h in handles)
        yield [f"127.0.0.1:{h.port}" for h in handles]
    finally:
        for h in handles:
            h.stop()


def test_routes_from_the_brokers_serve_producer_consumer_and_admin(brokers: list[str],
                                                                   remoting: RemotingClient) -> None:
    a, b = brokers
    BrokerAdmin(a, client=remoting).create_topic("Routed", read_queues=3, write_queues=3)
    BrokerAdmin(b, client=remoting).create_topic("Routed", read_queues=2, write_queues=2)
    BrokerAdmin(a, client=remoting).create_topic("OnlyA", read_queues=1, write_queues=1)
    routes = BrokerRoutes(f"{a},{b}", remoting, timeout=5.0)

    route = routes.get_route("Routed")
    assert [(d.broker_name, d.cluster, d.broker_addrs) for d in route.broker_datas] == [
        ("broker-a", "DefaultCluster", {0: a}), ("broker-b", "DefaultCluster", {0: b})]
    # broker-b publishes its own read-only permission for every topic, as it would to a name server
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 3, 3, 6), ("broker-b", 2, 2, 4)]
    assert {q.broker_name for q in writable_queues("Routed", route)} == {"broker-a"}
    only_a = routes.get_route("OnlyA")
    assert [d.broker_name for d in only_a.broker_datas] == [q.broker_name for q in only_a.queue_datas] == ["broker-a"]
    with pytest.raises(RemotingError) as info:
        routes.get_route("NoSuchTopic")
    assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopic" in str(info.value) and a in str(info.value) and b in str(info.value)

    # the three clients take the same route source instead of a name server
    producer = Producer(None, "PG", client=remoting, routes=routes)
    sent = {producer.send("Routed", f"m{i}".encode()).queue for i in range(12)}
    assert {mq.broker_name for mq in sent} == {"broker-a"} and len(sent) == 3
    consumer = PullConsumer(None, "CG", client=remoting, routes=routes)
    assert consumer.queues("Routed") == [MessageQueue("Routed", "broker-a", i) for i in range(3)] + [
        MessageQueue("Routed", "broker-b", i) for i in range(2)]
    bodies = []
    for mq in consumer.queues("Routed"):
        result = consumer.pull(mq, 0, 32)
        if result.status is PullStatus.FOUND:
            bodies.extend(m.body for m in result.messages)
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(12))
    admin = MQAdmin(client=remoting, routes=routes)
    stats = admin.topic_status("Routed")
    assert [s.queue.broker_name for s in stats] == ["broker-a"] * 3 + ["broker-b"] * 2
    assert sum(s.max_offset for s in stats) == 12
    assert admin.query_msg_by_offset("Routed", "broker-a", stats[0].queue.queue_id, 0) is not None
    with pytest.raises(RemotingClientError, match="topic_list asks a name server"):
        admin.topic_list()


def test_route_source_choice_and_bad_brokers(brokers: list[str], remoting: RemotingClient) -> None:
    a, _ = brokers
    routes = BrokerRoutes(a, remoting)
    assert route_source_for(None, routes, remoting, 1.0) is routes
    assert isinstance(route_source_for("127.0.0.1:1", None, remoting, 1.0), NameServerClient)
    with pytest.raises(ValueError, match="not both"):
        route_source_for("127.0.0.1:1", routes, remoting, 1.0)
    with pytest.raises(ValueError, match="is required"):
        PullConsumer(None, "CG", client=remoting)
    with pytest.raises(ValueError, match="no broker address"):
        BrokerRoutes(" ; ", remoting)
    with pytest.raises(RemotingClientError, match=re.escape(f"brokers {a} and {a} are both broker-a")):
        BrokerRoutes([a, a], remoting).get_route("TBW102")
    with pytest.raises(RemotingConnectError, match=re.escape("cannot talk to 127.0.0.1:1:")):
        BrokerRoutes(f"{a};127.0.0.1:1", remoting, timeout=2.0).get_route("TBW102")
