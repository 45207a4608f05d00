"""The operator's scaling calls (rocketstore.operator.brokers.Brokers) against REAL broker processes,
configured as the operator configures a store's masters (clusterPeers naming each other): wiping a
leaving broker's write permission on every embedded name server moves a producer's sends to the
other broker; its consume stats give the drain's backlog; a new broker is given the store's topics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from polling import wait_until

from rocketstore.client.admin import BrokerAdmin
from rocketstore.client.producer import Producer
from rocketstore.client.remoting_client import MessageQueue, NameServerClient, RemotingClient
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.operator.brokers import BrokerAddressing, Brokers, HeldMessages
from rocketstore.operator.scaling import Backlog, backlog, topics_to_copy

pytestmark = pytest.mark.integration

QUEUES = 2


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Broker]]:
    """rs-0 and rs-1, peers of each other; rs-2 new, with no topics of the store."""
    brokers = [Broker(tmp_path_factory.mktemp(f"rs-{i}")) for i in range(3)]
    for i, b in enumerate(brokers):
        peers = ",".join(f"rs-{j}@{p.addr}" for j, p in enumerate(brokers[:2]) if j != i)
        b.conf.write_text(b.conf.read_text() + f"brokerClusterName=rs\nbrokerName=rs-{i}\nclusterPeers={peers}\n")
    started: list[Broker] = []
    try:
        for b in brokers:
            b.start()
            started.append(b)
        for b in brokers[:2]:
            with BrokerAdmin(b.addr) as admin:
                admin.create_topic("Orders", QUEUES, QUEUES)
                admin.create_subscription_group(SubscriptionGroupConfig(group_name="billing"))
        yield brokers
    finally:
        for b in started:
            b.stop()


def _perms(namesrv: str, topic: str) -> dict[str, int]:
    client = RemotingClient(timeout=5.0)
    try:
        route = NameServerClient(namesrv, client).get_route(topic)
        return {q.broker_name: q.perm for q in route.queue_datas}
    finally:
        client.close()


def _send(namesrv: str, n: int) -> dict[str, int]:
    """Sends ``n`` messages with a fresh producer (a fresh route); how many went to each broker."""
    counts: dict[str, int] = {}
    with Producer(namesrv, "scaling-test") as producer:
        for i in range(n):
            result = producer.send("Orders", f"m{i}".encode())
            counts[result.broker_name] = counts.get(result.broker_name, 0) + 1
    return counts


def test_wipe_moves_sends_and_consume_stats_measure_the_drain(store: list[Broker]) -> None:
    rs0, rs1, _ = store
    brokers = Brokers(BrokerAddressing())
    namesrvs = [asyncio.run(brokers.namesrv_address(b.addr)) for b in (rs0, rs1)]
    assert namesrvs == [rs0.namesrv, rs1.namesrv]
    before = _send(rs0.namesrv, 20)
    assert before.get("rs-1", 0) > 0, before

    for ns in namesrvs:
        assert asyncio.run(brokers.write_perm(ns, "rs-1", add=False)) > 0
        assert _perms(ns, "Orders") == {"rs-0": 6, "rs-1": 4}
    after = _send(rs1.namesrv, 20)
    assert after == {"rs-0": 20}

    # billing consumed part of rs-1's queues: the drain's backlog is the rest
    held = {q: 0 for q in range(QUEUES)}
    with BrokerAdmin(rs1.addr) as admin:
        for stat in admin.topic_stats("Orders"):
            held[stat.queue.queue_id] = stat.max_offset
        admin.update_consumer_offset("billing", MessageQueue("Orders", "rs-1", 0), 1)
        admin.update_consumer_offset("billing", MessageQueue("Orders", "rs-1", 1), 0)
    assert sum(held.values()) == before["rs-1"]
    seen = backlog(asyncio.run(brokers.consume_stats(rs1.addr)))
    assert seen == Backlog(messages=before["rs-1"] - 1, queues=sum(1 for q, n in held.items() if n > (q == 0)),
                           groups=("billing",))
    with BrokerAdmin(rs1.addr) as admin:
        for q, n in held.items():
            admin.update_consumer_offset("billing", MessageQueue("Orders", "rs-1", q), n)
    assert backlog(asyncio.run(brokers.consume_stats(rs1.addr))) == Backlog()

    # the scale-down was called off: rs-1 takes sends again
    for ns in namesrvs:
        assert asyncio.run(brokers.write_perm(ns, "rs-1", add=True)) > 0
        assert _perms(ns, "Orders") == {"rs-0": 6, "rs-1": 6}
    assert _send(rs0.namesrv, 20).get("rs-1", 0) > 0


def test_new_broker_is_given_the_stores_topics(store: list[Broker]) -> None:
    rs0, _, rs2 = store
    brokers = Brokers(BrokerAddressing())
    have = asyncio.run(brokers.topic_configs(rs0.addr))
    new = asyncio.run(brokers.topic_configs(rs2.addr))
    assert "Orders" in have and "Orders" not in new
    copies = topics_to_copy(have, new, {"rs", "rs-0", "rs-1", "rs-2"})
    assert [c.topic_name for c in copies] == ["Orders"]
    asyncio.run(brokers.create_topics(rs2.addr, copies))
    created = asyncio.run(brokers.topic_configs(rs2.addr))["Orders"]
    assert (created.read_queue_nums, created.write_queue_nums, created.perm) == (QUEUES, QUEUES, 6)
    assert topics_to_copy(have, asyncio.run(brokers.topic_configs(rs2.addr)), {"rs", "rs-0", "rs-1", "rs-2"}) == []



def test_a_brokers_delayed_timer_and_half_messages_are_what_a_drain_waits_for(tmp_path: Path) -> None:
    """What the drain reads of a leaving broker besides its consume stats: a delayed message
    (level 18, 2 h), a timer message (1 h) and a half message nobody commits, each held by the
    broker that stored it, none of them in a group's backlog."""
    broker = Broker(tmp_path, "brokerClusterName=rs\nbrokerName=rs-9\n")
    brokers = Brokers(BrokerAddressing())
    http = f"{broker.listen_host}:{broker.http_port}"
    with broker.running():
        with BrokerAdmin(broker.addr) as admin:
            admin.create_topic("Later", 1, 1)
        assert asyncio.run(brokers.held(http)) == HeldMessages()
        with Producer(broker.namesrv, "held-test") as producer:
            producer.send("Later", b"delayed", properties={"DELAY": "18"})
            producer.send("Later", b"timer", properties={"TIMER_DELAY_SEC": "3600"})
            producer.send("Later", b"half", properties={"TRAN_MSG": "true", "PGROUP": "held-test"})
        held = wait_until("all three held", lambda: (h := asyncio.run(brokers.held(http))) == HeldMessages(1, 1, 1)
                          and h, 30)
        assert held.total == 3
        with BrokerAdmin(broker.addr) as admin:
            stats, _ = admin.broker_consume_stats()
        assert backlog(stats) == Backlog()  # consumers see none of them yet
