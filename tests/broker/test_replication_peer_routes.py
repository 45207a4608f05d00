"""A store of two replicated groups, each a master and a slave, all four serving their embedded
name servers and registering with each other's (``namesrvPeers``), as the operator configures
them: any pod's name server lists every group's live members.

Group ``gb``'s master is killed with SIGKILL: the name server of group ``ga`` (which until then
listed ``gb`` with master and slave) lists ``gb`` with its slave alone as soon as the master's
registering connection closes, so a consumer routed there reads ``gb``'s messages from its slave
(with clusterPeers alone it kept routing to the dead master, and never named the slave), and
producers, 4.x through the name server and 5.x through the gRPC route, choose ``gb`` no more.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from java_rocketmq import ClientDriver
from polling import wait_until
from ports import free_port
from tool_support import require_executable

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client import BrokerAdmin, Producer, PullConsumer, RemotingClient, SendStatus
from rocketstore.client.consumer import PullStatus
from rocketstore.client.producer import SendResult
from rocketstore.client.remoting_client import MessageQueue, NameServerClient, RemotingError
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.remoting.codes import RequestCode

pytestmark = pytest.mark.integration

TOPIC = "PeerRoutes"
QUEUES = 4
#: connection close -> the registration is dropped at once; this bounds the test's patience
MASTER_GONE_S = 10.0


@dataclass
class Store:
    ga: tuple[Broker, Broker]
    gb: tuple[Broker, Broker]

    @property
    def brokers(self) -> list[Broker]:
        return [*self.ga, *self.gb]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """Masters first (SYNC_MASTER), then the slaves, each registering with its master's name
    server (namesrvAddr) and, like every broker, with all four (namesrvPeers)."""
    brokers: dict[str, Broker] = {}
    for name in ("ga-master", "ga-slave", "gb-master", "gb-slave"):
        (tmp_path / name).mkdir()
        # haListenPort is listenPort + 1 (BrokerStartup's rule): both must be free
        brokers[name] = Broker(tmp_path / name, listen_port=free_port(also=(1,)))
    peers = f"ga@{brokers['ga-master'].addr},gb@{brokers['gb-master'].addr}"
    namesrv_peers = ";".join(b.namesrv for b in brokers.values())
    for name, broker in brokers.items():
        group, role = name.split("-")
        conf = (f"brokerName={group}\nbrokerIP2=127.0.0.1\nclusterPeers={peers}\nnamesrvPeers={namesrv_peers}\n"
                "registerNameServerPeriod=10000\n")
        if role == "master":
            conf += "brokerRole=SYNC_MASTER\n"
        else:
            conf += (f"brokerRole=SLAVE\nbrokerId=1\nslaveReadEnable=true\n"
                     f"namesrvAddr={brokers[f'{group}-master'].namesrv}\n")
        with broker.conf.open("a") as f:
            f.write(conf)
    s = Store((brokers["ga-master"], brokers["ga-slave"]), (brokers["gb-master"], brokers["gb-slave"]))
    try:
        for broker in s.brokers:
            broker.start()
        yield s
    finally:
        for broker in reversed(s.brokers):
            if broker.process is not None and broker.proc.poll() is None:
                broker.stop()


def members(namesrv: str) -> dict[str, dict[int, str]]:
    """brokerName -> brokerAddrs of TOPIC's route at ``namesrv`` ({} while it has none)."""
    with RemotingClient() as client:
        try:
            route = NameServerClient(namesrv, client).get_route(TOPIC)
        except RemotingError:
            return {}
    return {b.broker_name: dict(b.broker_addrs) for b in route.broker_datas}


def grpc_members(endpoint: str) -> dict[str, set[tuple[int, str]]]:
    """brokerName -> (brokerId, host) of TOPIC's gRPC QueryRoute at ``endpoint`` (RocketMQ 5 clients)."""
    with grpc.insecure_channel(endpoint) as channel:
        route = pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=10)
    assert route.status.code == pb.OK, route.status
    listed: dict[str, set[tuple[int, str]]] = {}
    for q in route.message_queues:
        listed.setdefault(q.broker.name, set()).add((q.broker.id, q.broker.endpoints.addresses[0].host))
    return listed


def topics_of(addr: str) -> set[str]:
    with RemotingClient() as client:
        body = client.call(addr, RequestCode.GET_ALL_TOPIC_CONFIG).body
    return set(parse_fastjson(body.decode())["topicConfigTable"])


def both_groups_whole(s: Store) -> dict[str, dict[int, str]]:
    return {"ga": {0: s.ga[0].addr, 1: s.ga[1].addr}, "gb": {0: s.gb[0].addr, 1: s.gb[1].addr}}


def send_to_both_groups(s: Store) -> list[SendResult]:
    """The topic on both masters, and the slaves' copies; 40 messages through ga's name server,
    SEND_OK (SYNC_MASTER: each is on its group's slave) on both groups."""
    for master in (s.ga[0], s.gb[0]):
        with BrokerAdmin(master.addr) as admin:
            admin.create_topic(TOPIC, QUEUES, QUEUES)
    # the slaves' copies of the topic (SlaveSynchronize, every 10 s: a slave serves a topic it holds),
    # then every name server of the store lists both groups with both members
    for slave in (s.ga[1], s.gb[1]):
        wait_until(f"{TOPIC} on {slave.addr}", lambda b=slave: TOPIC in topics_of(b.addr), 60)
    for broker in s.brokers:
        wait_until(f"{broker.namesrv} listing both groups whole", lambda b=broker: members(b.namesrv) ==
                   both_groups_whole(s), 60)
    with Producer(s.ga[0].namesrv, "peer-routes-producers") as producer:
        sent = [wait_until(f"SEND_OK for m{i}", lambda i=i: (r := producer.send(TOPIC, f"m{i}".encode(), timeout=10)
                                                            ).status is SendStatus.SEND_OK and r, 60)
                for i in range(40)]
    assert {r.broker_name for r in sent} == {"ga", "gb"}
    return sent


def test_a_group_whose_master_is_killed_is_routed_to_its_slave_by_every_name_server(store: Store) -> None:
    s = store
    sent = send_to_both_groups(s)
    assert members(s.ga[0].namesrv) == both_groups_whole(s)
    assert grpc_members(s.ga[0].grpc_endpoint) == {"ga": {(0, "127.0.0.1")},
                                                   "gb": {(0, "127.0.0.1"), (1, "127.0.0.1")}}

    s.gb[0].stop(signal.SIGKILL)
    killed = time.monotonic()
    # the registering connections close with the process: every name server forgets gb's master
    want = {"ga": {0: s.ga[0].addr, 1: s.ga[1].addr}, "gb": {1: s.gb[1].addr}}
    for broker in (s.ga[0], s.ga[1], s.gb[1]):
        seen: list[dict[str, dict[int, str]]] = []
        try:
            wait_until(f"{broker.namesrv} listing gb's slave alone",
                       lambda b=broker, seen=seen: seen.append(members(b.namesrv)) or seen[-1] == want,
                       MASTER_GONE_S)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it listed {seen[-1]}") from None
    assert time.monotonic() - killed < MASTER_GONE_S
    # the gRPC route of ga's master too: gb's slave alone, so 5.x clients send to gb no more
    assert grpc_members(s.ga[0].grpc_endpoint) == {"ga": {(0, "127.0.0.1")}, "gb": {(1, "127.0.0.1")}}

    # a consumer routed by ga's master's name server reads gb's messages (sent before the kill)
    # from gb's slave: the route's only member of gb
    on_gb = [r for r in sent if r.broker_name == "gb"]
    with PullConsumer(s.ga[0].namesrv, "peer-routes-readers") as consumer:
        got = []
        for r in on_gb:
            mq = MessageQueue(TOPIC, "gb", r.queue_id)
            assert consumer.pull_addr(mq) == s.gb[1].addr
            result = consumer.pull(mq, r.queue_offset, 1)
            assert result.status is PullStatus.FOUND, result.status
            got.append(result.messages[0].properties["UNIQ_KEY"])
    assert got == [r.msg_id for r in on_gb]

    # producers asking ga's name server no longer choose gb: it has no master in the route
    with Producer(s.ga[0].namesrv, "peer-routes-producers") as producer:
        after = [producer.send(TOPIC, f"after-{i}".encode(), timeout=10) for i in range(8)]
    assert {(r.status, r.broker_name) for r in after} == {(SendStatus.SEND_OK, "ga")}


def test_java_4x_consumer_routed_by_another_groups_name_server_reads_from_the_slave(store: Store,
                                                                                    tmp_path: Path) -> None:
    """Apache's 4.x client (rocketmq-client 4.9.8), given ga's master's name server only, consumes
    every message of both groups after gb's master is killed: gb's from gb's slave."""
    require_executable("java", "runs Apache RocketMQ's 4.x Java client (tests/support/drivers/java4)")
    require_executable("mvn", "builds the Java client driver")
    s = store
    sent = send_to_both_groups(s)
    s.gb[0].stop(signal.SIGKILL)
    wait_until("ga's name server listing gb's slave alone",
               lambda: members(s.ga[0].namesrv).get("gb") == {1: s.gb[1].addr}, MASTER_GONE_S)
    driver = ClientDriver(s.ga[0].namesrv, tmp_path / "java", poll_namesrv_ms=1000, heartbeat_ms=1000,
                          rebalance_interval_ms=1000)
    consumed = driver.push_consume(TOPIC, "java-peer-routes", len(sent), timeout_s=90).of("received")
    assert {line["msgId"] for line in consumed} == {r.msg_id for r in sent}
