"""peer_routes.py: which members of each group of a store an embedded name server lists, and with
which queue data (pure functions, no broker)."""

from __future__ import annotations

from rocketstore.broker.broker_config import ClusterPeer
from rocketstore.broker.peer_routes import live_groups, merge_topic_route
from rocketstore.remoting.body import BrokerData, QueueData

OWN = BrokerData(cluster="store", broker_name="store-0", broker_addrs={0: "a0:10911", 1: "a1:10911"})
PEERS = [ClusterPeer("store-0", "a0:10911"), ClusterPeer("store-1", "b0:10911"), ClusterPeer("store-2", "c0:10911")]


def group(name: str, **addrs: str) -> BrokerData:
    """BrokerData of ``name`` with brokerIds given as ``m0="host:port"``."""
    return BrokerData(cluster="store", broker_name=name, broker_addrs={int(k[1:]): v for k, v in addrs.items()})


def queue(name: str, queues: int = 4, perm: int = 6) -> QueueData:
    return QueueData(broker_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm, topic_sys_flag=0)


def members(groups: list[BrokerData]) -> list[tuple[str, dict[int, str]]]:
    return [(g.broker_name, g.broker_addrs) for g in groups]


def test_before_any_peer_registered_the_cluster_peers_masters_are_listed() -> None:
    assert members(live_groups(OWN, PEERS, {})) == [
        ("store-0", {0: "a0:10911", 1: "a1:10911"}), ("store-1", {0: "b0:10911"}), ("store-2", {0: "c0:10911"})]


def test_a_registered_group_replaces_its_cluster_peers_entry_with_its_live_members() -> None:
    registered = {"store-1": group("store-1", m1="b1:10911", m0="b0:10911")}
    assert members(live_groups(OWN, PEERS, registered)) == [
        ("store-0", {0: "a0:10911", 1: "a1:10911"}), ("store-1", {0: "b0:10911", 1: "b1:10911"}),
        ("store-2", {0: "c0:10911"})]


def test_a_group_whose_master_is_gone_is_listed_with_its_slave_alone() -> None:
    registered = {"store-1": group("store-1", m1="b1:10911")}
    assert members(live_groups(OWN, PEERS, registered))[1] == ("store-1", {1: "b1:10911"})


def test_the_own_group_is_never_replaced_by_a_registration_of_its_name() -> None:
    registered = {"store-0": group("store-0", m2="elsewhere:10911")}
    assert members(live_groups(OWN, PEERS, registered))[0] == ("store-0", {0: "a0:10911", 1: "a1:10911"})


def test_a_peer_listed_twice_is_listed_once() -> None:
    assert [g.broker_name for g in live_groups(OWN, [*PEERS, ClusterPeer("store-1", "other:1")], {})] == [
        "store-0", "store-1", "store-2"]


def test_a_peer_that_registered_its_topic_table_is_routed_with_its_own_queue_data() -> None:
    groups = live_groups(OWN, PEERS, {"store-1": group("store-1", m0="b0:10911")})
    assumed = {g.broker_name: queue(g.broker_name) for g in groups}
    queues, brokers = merge_topic_route(groups, assumed, [queue("store-1", 16, perm=4)], [groups[1]])
    assert [(q.broker_name, q.read_queue_nums, q.perm) for q in queues] == [
        ("store-0", 4, 6), ("store-1", 16, 4), ("store-2", 4, 6)]
    assert [b.broker_name for b in brokers] == ["store-0", "store-1", "store-2"]


def test_a_peer_whose_slave_alone_registered_is_routed_with_the_assumed_queue_data() -> None:
    """A name server started after the peer's master died: the slave's registration carries no
    topic table (only masters' are kept), so its queues are assumed like this broker's."""
    groups = live_groups(OWN, PEERS, {"store-1": group("store-1", m1="b1:10911")})
    assumed = {g.broker_name: queue(g.broker_name) for g in groups}
    queues, brokers = merge_topic_route(groups, assumed, [], [])
    assert [q.broker_name for q in queues] == ["store-0", "store-1", "store-2"]
    assert brokers[1].broker_addrs == {1: "b1:10911"}


def test_a_topic_this_broker_lacks_lists_only_the_groups_that_registered_it() -> None:
    groups = live_groups(OWN, PEERS, {"store-1": group("store-1", m0="b0:10911", m1="b1:10911"),
                                      "other-0": group("other-0", m0="x:1")})
    queues, brokers = merge_topic_route(groups, {}, [queue("store-1"), queue("other-0")],
                                        [group("store-1", m0="b0:10911", m1="b1:10911"), group("other-0", m0="x:1")])
    assert [q.broker_name for q in queues] == ["store-1", "other-0"]
    assert members(brokers) == [("store-1", {0: "b0:10911", 1: "b1:10911"}), ("other-0", {0: "x:1"})]


def test_the_own_group_keeps_its_own_queue_data_and_falls_back_to_its_masters_registration() -> None:
    groups = live_groups(OWN, [], {})
    mine = queue("store-0", 8)
    assert merge_topic_route(groups, {"store-0": mine}, [queue("store-0", 2)], [group("store-0", m0="a0:10911")]
                             ) == ([mine], groups)
    # a slave's name server, before the slave has copied a topic its master registered here
    queues, brokers = merge_topic_route(groups, {}, [queue("store-0", 2)], [group("store-0", m0="a0:10911")])
    assert [q.read_queue_nums for q in queues] == [2] and brokers == groups


def test_registered_groups_that_are_no_peer_follow_the_listed_ones() -> None:
    groups = live_groups(OWN, PEERS, {})
    assumed = {g.broker_name: queue(g.broker_name) for g in groups}
    queues, brokers = merge_topic_route(groups, assumed, [queue("apache-a")], [group("apache-a", m0="x:1")])
    assert [q.broker_name for q in queues] == ["store-0", "store-1", "store-2", "apache-a"]
    assert [b.broker_name for b in brokers] == ["store-0", "store-1", "store-2", "apache-a"]
