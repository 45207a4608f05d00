"""Joining an existing RocketMQ cluster, with Apache RocketMQ 4.9.7's own name server and broker.

* ``rocketstore broker`` with ``namesrvAddr`` set and no embedded name server registers with
  Apache's name server; the Java 4.9.8 client, given only that name server, produces to and
  consumes from it; stopping it unregisters it (UNREGISTER_BROKER, as Apache's name server logs).
* Apache's broker registers with our embedded name server, and one topic spread over both
  brokers is produced and consumed by one Java client through it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from java_rocketmq import AnchorError, ClientDriver, RocketMQAnchor
from polling import wait_until

from rocketstore.client.admin import BrokerAdmin
from rocketstore.client.remoting_client import NameServerClient, RemotingClient, RemotingError
from rocketstore.remoting.body import TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


def driver(namesrv: str, workdir: Path) -> ClientDriver:
    return ClientDriver(namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000, rebalance_interval_ms=1000)


def route_or_none(namesrv: str, topic: str) -> TopicRouteData | None:
    with RemotingClient() as client:
        try:
            return NameServerClient(namesrv, client).get_route(topic)
        except RemotingError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                return None
            raise


def store_port(offset_msg_id: str) -> int:
    """The store host's port in an offsetMsgId (16 bytes hex: IPv4, port, CommitLog offset)."""
    return int(offset_msg_id[8:16], 16)


def start_anchor(anchor: RocketMQAnchor) -> RocketMQAnchor:
    try:
        return anchor.start()
    except AnchorError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def apache_namesrv(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RocketMQAnchor]:
    """Apache RocketMQ 4.9.7's name server alone."""
    anchor = start_anchor(RocketMQAnchor(tmp_path_factory.mktemp("apache-namesrv"), heap="256m", with_broker=False))
    yield anchor
    anchor.stop()


def our_broker(tmp: Path, name: str, namesrv_addr: str, extra: str = "") -> Broker:
    """``rocketstore broker`` registered with ``namesrv_addr``, without an embedded name server."""
    tmp.mkdir(parents=True, exist_ok=True)
    return Broker(tmp, f"brokerName={name}\nnamesrvListenPort=0\nnamesrvAddr={namesrv_addr}\n{extra}")


def test_our_broker_serves_the_java_client_through_apaches_name_server(
        apache_namesrv: RocketMQAnchor, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    broker = our_broker(tmp_path / "broker", "rs-behind-apache", apache_namesrv.namesrv_addr)
    broker.start()
    try:
        # registered during start: the broker's own topic (a system topic) is routed by Apache
        route = route_or_none(apache_namesrv.namesrv_addr, "rs-behind-apache")
        assert route is not None
        assert [(d.cluster, d.broker_name, d.broker_addrs) for d in route.broker_datas] == [
            ("TestCluster", "rs-behind-apache", {0: broker.addr})]

        topic = unique_name("joined")
        java = driver(apache_namesrv.namesrv_addr, tmp_path / "java")
        # the topic does not exist yet: the producer goes through TBW102's route to our broker,
        # which creates it and registers again at once, so the consumer finds it by name
        sent = java.produce(topic, 20).of("sent")
        assert len(sent) == 20
        assert {line["brokerName"] for line in sent} == {"rs-behind-apache"}
        topic_route = route_or_none(apache_namesrv.namesrv_addr, topic)
        assert topic_route is not None and [q.broker_name for q in topic_route.queue_datas] == ["rs-behind-apache"]
        received = java.push_consume(topic, unique_name("cg"), 20, timeout_s=60).of("received")
        assert sorted(line["body"] for line in received) == sorted(line["body"] for line in sent)
        assert {store_port(line["offsetMsgId"]) for line in received} == {broker.listen_port}
    finally:
        assert broker.stop() == 0


def test_our_broker_unregisters_on_shutdown(apache_namesrv: RocketMQAnchor, tmp_path: Path) -> None:
    # compressedRegister: Apache's name server reads our zlib-packed RegisterBrokerBody
    broker = our_broker(tmp_path / "broker", "rs-leaving", apache_namesrv.namesrv_addr, "compressedRegister=true\n")
    broker.start()
    route = route_or_none(apache_namesrv.namesrv_addr, "rs-leaving")
    assert route is not None and [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [("rs-leaving", 1)]
    assert "registerBroker Exception" not in apache_namesrv.namesrv_log.read_text(errors="replace")
    assert broker.stop() == 0
    # gone at once, and by UNREGISTER_BROKER (a closed connection alone logs "channel destroyed")
    assert route_or_none(apache_namesrv.namesrv_addr, "rs-leaving") is None
    wait_until("Apache's name server logs the unregistration",
               lambda: f"unregisterBroker, remove from brokerLiveTable OK, {broker.addr}"
               in apache_namesrv.namesrv_log.read_text(errors="replace"), timeout=10)


@pytest.fixture(scope="module")
def mixed_cluster(java_client_built: None,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, RocketMQAnchor]]:
    """Our broker with its embedded name server, and Apache's broker registered with that name server
    (in the compressed form, so that our name server reads Java's zlib-packed RegisterBrokerBody, and
    with forceRegister=false, so that its periodic registration asks QUERY_DATA_VERSION first)."""
    broker = Broker(tmp_path_factory.mktemp("our-broker"), "brokerName=rs-broker\n")
    broker.start()
    anchor = RocketMQAnchor(tmp_path_factory.mktemp("apache-broker"), heap="384m", external_namesrv=broker.namesrv,
                            broker_name="apache-broker",
                            broker_config={"compressedRegister": "true", "forceRegister": "false"})
    try:
        start_anchor(anchor)
        try:
            yield broker, anchor
        finally:
            anchor.stop()
    finally:
        broker.stop()


def test_apache_broker_is_routed_by_our_name_server(mixed_cluster: tuple[Broker, RocketMQAnchor], tmp_path: Path,
                                                    unique_name: Callable[[str], str]) -> None:
    broker, anchor = mixed_cluster
    wait_until("Apache's broker registered", lambda: route_or_none(broker.namesrv, "apache-broker") is not None)
    with RemotingClient() as client:
        info = NameServerClient(broker.namesrv, client).cluster_info()
    assert info.broker_addr_table["apache-broker"].broker_addrs == {0: anchor.broker_addr}
    assert info.cluster_addr_table["DefaultCluster"] == ["apache-broker"]
    assert info.cluster_addr_table["TestCluster"] == ["rs-broker"]

    topic = unique_name("on_apache")
    with BrokerAdmin(anchor.broker_addr) as admin:
        admin.create_topic(topic, 4, 4)  # Apache's broker registers the new topic at once
    wait_until("the topic's route", lambda: route_or_none(broker.namesrv, topic) is not None)
    java = driver(broker.namesrv, tmp_path / "java")
    sent = java.produce(topic, 10).of("sent")
    assert {line["brokerName"] for line in sent} == {"apache-broker"}
    received = java.push_consume(topic, unique_name("cg"), 10, timeout_s=60).of("received")
    assert sorted(line["body"] for line in received) == sorted(line["body"] for line in sent)
    assert {store_port(line["offsetMsgId"]) for line in received} == {anchor.broker_port}


def test_one_topic_over_both_brokers(mixed_cluster: tuple[Broker, RocketMQAnchor], tmp_path: Path,
                                     unique_name: Callable[[str], str]) -> None:
    broker, anchor = mixed_cluster
    topic = unique_name("spread")
    for addr in (broker.addr, anchor.broker_addr):
        with BrokerAdmin(addr) as admin:
            admin.create_topic(topic, 2, 2)
    wait_until("both brokers in the topic's route",
               lambda: len((route_or_none(broker.namesrv, topic) or TopicRouteData()).queue_datas) == 2)
    java = driver(broker.namesrv, tmp_path / "java")
    sent = java.produce(topic, 40).of("sent")
    assert {line["brokerName"] for line in sent} == {"rs-broker", "apache-broker"}
    received = java.push_consume(topic, unique_name("cg"), 40, timeout_s=60, linger_ms=1000).of("received")
    assert sorted({line["body"] for line in received}) == sorted(line["body"] for line in sent)
    assert {store_port(line["offsetMsgId"]) for line in received} == {broker.listen_port, anchor.broker_port}


#: Apache's broker's log line of one QUERY_DATA_VERSION (BrokerOuterAPI.needRegister): whether it
#: found its table changed, its own data version and the one our name server answered
_DATA_VERSION_QUERY = re.compile(r"Query data version from name server \S+ OK,changed (true|false), "
                                 r"broker DataVersion\[([^]]*)\],name server DataVersion\[([^]]*)\]")


def test_apache_broker_asks_our_name_server_for_its_data_version(mixed_cluster: tuple[Broker, RocketMQAnchor]) -> None:
    """Apache's periodic registration (10 s after start) with forceRegister=false: our QUERY_DATA_VERSION
    answer parses in Java, and the broker finds its table changed exactly when its data version
    differs from the one we answer. A query right after another test of this module created a
    topic on Apache's broker may find it changed (stop 33's CI saw counter 4 against our 3); an
    answer it could not read would count as changed whatever the versions."""
    _, anchor = mixed_cluster
    log = anchor.workdir / "home" / "broker.log"
    wait_until("Apache's broker queried the data version",
               lambda: "Query data version from name server" in log.read_text(errors="replace"), timeout=30)
    lines = [line for line in log.read_text(errors="replace").splitlines() if "Query data version" in line]
    queries = [_DATA_VERSION_QUERY.search(line) for line in lines]
    assert all(queries), lines
    for line, query in zip(lines, queries, strict=True):
        assert query is not None
        changed, broker_version, our_version = query.groups()
        assert (changed == "true") == (broker_version != our_version), line


def test_order_topic_config_from_apaches_name_server_is_applied(apache_namesrv: RocketMQAnchor, tmp_path: Path,
                                                                unique_name: Callable[[str], str]) -> None:
    """A name server's ORDER_TOPIC_CONFIG KV table comes back with each periodic registration (the
    first 10 s after start) and sets the listed topics' ``order`` flag, as RocketMQ's broker does."""
    broker = our_broker(tmp_path / "broker", "rs-ordered", apache_namesrv.namesrv_addr)
    broker.start()
    try:
        ordered, plain = unique_name("ordered"), unique_name("plain")
        with BrokerAdmin(broker.addr) as admin:
            admin.create_topic(ordered, 2, 2)
            admin.create_topic(plain, 2, 2)
        with RemotingClient() as client:  # mqadmin updateOrderConf: PUT_KV_CONFIG (100)
            client.call(apache_namesrv.namesrv_addr, 100,
                        {"namespace": "ORDER_TOPIC_CONFIG", "key": ordered, "value": "rs-ordered:2"})

        def order_flags() -> dict[str, bool]:
            with RemotingClient() as client:
                table = client.call(broker.addr, RequestCode.GET_ALL_TOPIC_CONFIG).body
            configs = json.loads(table)["topicConfigTable"]
            return {name: configs[name]["order"] for name in (ordered, plain)}

        assert order_flags() == {ordered: False, plain: False}
        wait_until("the order flag from the name server", lambda: order_flags()[ordered], timeout=30)
        assert order_flags() == {ordered: True, plain: False}
    finally:
        assert broker.stop() == 0
