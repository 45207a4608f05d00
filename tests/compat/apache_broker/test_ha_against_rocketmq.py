"""Master/slave replication between our broker and Apache RocketMQ 4.9.7's, both ways.

* An Apache slave (brokerRole=SLAVE, brokerId=1, haMasterAddress) replicates from our master.
* Our slave (``rocketstore broker`` with brokerRole=SLAVE, haMasterAddress) replicates from an
  Apache master.

In both the Java client produces to the master; then the slave's CommitLog files hold exactly the
master's bytes up to the master's max offset, and every message is pulled back from the slave
itself (PULL_MESSAGE at the slave's address, so a master answering in its place cannot pass; the
slaves have slaveReadEnable, without which a 4.9.7 slave answers every pull PULL_RETRY_IMMEDIATELY).

Both brokers set haListenPort to listenPort + 1 whatever broker.conf says (our broker follows
Apache's BrokerStartup there), so the brokers here get a listen port whose neighbour is free.

The slaves are given haMasterAddress (learning it from the name server's registration answer is
the broker's part), and the pulls go to the slave's address directly, so the name server's view
of the pair does not matter here. JVMs: the Apache slave registers with our master's embedded
name server (one JVM); the Apache master comes with its own name server, which our slave joins.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from commit_log_files import read_commit_log
from java_rocketmq import AnchorError, ClientDriver, RocketMQAnchor
from polling import wait_until
from ports import free_port

from rocketstore.client.admin import BrokerAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.remoting_client import (
    BrokerRoutes,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    RemotingError,
)
from rocketstore.remoting.body import TopicRouteData

pytestmark = pytest.mark.integration

SEGMENT = 131072  # broker_process.Broker's mappedFileSizeCommitLog: both sides must cut segments alike
BROKER_NAME = "ha-pair"
MESSAGES = 60
TOPIC_TO_APACHE = "HaToApacheSlave"


def start_anchor(anchor: RocketMQAnchor) -> RocketMQAnchor:
    try:
        return anchor.start()
    except AnchorError as exc:
        pytest.fail(str(exc), pytrace=False)


def our_broker(tmp: Path, listen_port: int, extra: str) -> Broker:
    tmp.mkdir(parents=True, exist_ok=True)
    return Broker(tmp, f"brokerName={BROKER_NAME}\nhaListenPort={listen_port + 1}\n{extra}", listen_port=listen_port)


class SlaveRoutes:
    """The topic's route from the name server with the slave's address in place of the broker's
    addresses: pulls go to the slave itself, never to the master."""

    def __init__(self, namesrv: str, client: RemotingClient, slave_addr: str) -> None:
        self.names = NameServerClient(namesrv, client)
        self.slave_addr = slave_addr

    def get_route(self, topic: str) -> TopicRouteData:
        route = self.names.get_route(topic)
        for data in route.broker_datas:
            data.broker_addrs = {1: self.slave_addr}
        return route


def runtime_offsets(addr: str) -> tuple[int, int]:
    """(commitLogMinOffset, commitLogMaxOffset) as the broker at ``addr`` reports them."""
    with BrokerAdmin(addr) as admin:
        info = admin.get_runtime_info()
    return int(info["commitLogMinOffset"]), int(info["commitLogMaxOffset"])


def assert_replicated(master_addr: str, master_log: Path, slave_addr: str, slave_log: Path) -> None:
    """The slave holds the master's CommitLog byte for byte, up to the master's max offset."""
    _, master_max = runtime_offsets(master_addr)
    assert master_max > 0
    wait_until("the slave to reach the master's max offset",
               lambda: runtime_offsets(slave_addr)[1] == master_max, timeout=60)
    slave_min, _ = runtime_offsets(slave_addr)
    assert slave_min == 0
    assert read_commit_log(slave_log, SEGMENT, 0, master_max) == read_commit_log(master_log, SEGMENT, 0, master_max)


def pull_from_slave(namesrv: str, slave_addr: str, topic: str, group: str) -> list[str]:
    """Every message body of ``topic``, pulled from the slave at ``slave_addr``."""
    bodies: list[str] = []
    with RemotingClient() as client:
        consumer = PullConsumer(None, group, client=client, routes=SlaveRoutes(namesrv, client, slave_addr))
        queues = consumer.queues(topic)
        assert queues
        for mq in queues:
            assert consumer.broker_addr(mq) == slave_addr
            offset = 0
            while True:
                result = consumer.pull(MessageQueue(topic, mq.broker_name, mq.queue_id), offset, 32)
                if result.status is not PullStatus.FOUND:
                    break
                bodies += [m.body.decode() for m in result.messages]
                offset = result.next_begin_offset
    return bodies


def produce(namesrv: str, workdir: Path, topic: str) -> list[str]:
    java = ClientDriver(namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000)
    sent = java.produce(topic, MESSAGES).of("sent")
    assert len(sent) == MESSAGES
    assert {line["brokerName"] for line in sent} == {BROKER_NAME}
    return sorted(line["body"] for line in sent)


def seed_topic(store_dir: Path, topic: str) -> None:
    """Give an Apache broker ``topic`` (4 queues) before it starts, in its config/topics.json.

    An Apache slave refuses topic changes and takes its master's topics by SlaveSynchronize,
    which needs the name server to tell it its master (the registration answer): that is the
    broker's side of replication, not what this module tests.
    """
    config = {"topicName": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
              "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    (store_dir / "config").mkdir(parents=True, exist_ok=True)
    (store_dir / "config" / "topics.json").write_text(json.dumps(
        {"topicConfigTable": {topic: config}, "dataVersion": {"counter": 1, "timestamp": 0}}))


def slave_has_topic(addr: str, topic: str) -> bool:
    with RemotingClient() as client:
        try:
            return bool(BrokerRoutes(addr, client).get_route(topic).queue_datas)
        except RemotingError:
            return False


def create_topic_on(addrs: list[str], topic: str) -> None:
    for addr in addrs:
        with BrokerAdmin(addr) as admin:
            admin.create_topic(topic, 4, 4)


# -- an Apache slave of our master ---------------------------------------------------------


@pytest.fixture(scope="module")
def our_master_apache_slave(java_client_built: None,
                            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, RocketMQAnchor]]:
    port = free_port(also=(1,))
    master = our_broker(tmp_path_factory.mktemp("our-master"), port, "brokerRole=ASYNC_MASTER\n")
    with master.running():
        workdir = tmp_path_factory.mktemp("apache-slave")
        seed_topic(workdir / "store", TOPIC_TO_APACHE)
        slave = RocketMQAnchor(
            workdir, heap="384m", external_namesrv=master.namesrv,
            broker_name=BROKER_NAME, cluster="TestCluster",
            broker_config={"brokerId": "1", "brokerRole": "SLAVE", "haMasterAddress": f"127.0.0.1:{port + 1}",
                           "haSendHeartbeatInterval": "1000", "mappedFileSizeCommitLog": str(SEGMENT),
                           "slaveReadEnable": "true"})
        start_anchor(slave)
        try:
            yield master, slave
        finally:
            slave.stop()


def test_an_apache_slave_replicates_from_our_master(our_master_apache_slave: tuple[Broker, RocketMQAnchor],
                                                     tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    master, slave = our_master_apache_slave
    topic = TOPIC_TO_APACHE
    create_topic_on([master.addr], topic)
    sent = produce(master.namesrv, tmp_path / "java", topic)
    assert_replicated(master.addr, master.store / "commitlog", slave.broker_addr, slave.store_dir / "commitlog")
    assert sorted(pull_from_slave(master.namesrv, slave.broker_addr, topic, unique_name("cg"))) == sent


# -- our slave of an Apache master -----------------------------------------------------------


@pytest.fixture(scope="module")
def apache_master_our_slave(java_client_built: None,
                            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Broker, RocketMQAnchor]]:
    """Apache's name server and master, and our slave registered with that name server."""
    master = RocketMQAnchor(tmp_path_factory.mktemp("apache-master"), heap="384m", broker_name=BROKER_NAME,
                            cluster="TestCluster", broker_config={"mappedFileSizeCommitLog": str(SEGMENT)})
    start_anchor(master)
    try:
        slave = our_broker(tmp_path_factory.mktemp("our-slave"), free_port(also=(1,)),
                           f"brokerId=1\nbrokerRole=SLAVE\nhaMasterAddress=127.0.0.1:{master.broker_port + 1}\n"
                           f"haSendHeartbeatInterval=1000\nslaveReadEnable=true\n"
                           f"namesrvListenPort=0\nnamesrvAddr={master.namesrv_addr}\n")
        with slave.running():
            yield slave, master
    finally:
        master.stop()


def test_our_slave_replicates_from_an_apache_master(apache_master_our_slave: tuple[Broker, RocketMQAnchor],
                                                    tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    slave, master = apache_master_our_slave
    topic = unique_name("ha_from_apache")
    # on the master only: our slave refuses topic changes, as RocketMQ's does, and copies the
    # Apache master's topics by SlaveSynchronize (the master named in Apache's registration answer)
    create_topic_on([master.broker_addr], topic)
    wait_until("the topic synchronized to our slave", lambda: slave_has_topic(slave.addr, topic), timeout=60)
    sent = produce(master.namesrv_addr, tmp_path / "java", topic)
    assert_replicated(master.broker_addr, master.store_dir / "commitlog", slave.addr, slave.store / "commitlog")
    assert sorted(pull_from_slave(master.namesrv_addr, slave.addr, topic, unique_name("cg"))) == sent
