"""Master/slave broker groups as RocketMQ 4.9.7 runs them, with real broker processes and clients.

One name server for the module (a broker process of its own that registers nowhere, so stopping
a group's master never takes the name server with it); each test builds its group (a brokerName
of its own) of a master and a slave registering there:

* the group registers as one brokerName with brokerAddrs {0: master, 1: slave}, the slave learning
  its master's HA address from the registration answer;
* SYNC_MASTER answers SLAVE_NOT_AVAILABLE without a slave, SEND_OK once one is in sync, and
  FLUSH_SLAVE_TIMEOUT when the slave stops acknowledging;
* the slave copies the master's topics, subscription groups, consumer and delay offsets
  (SlaveSynchronize) and refuses admin changes and sends;
* reads: the master suggests the slave to a consumer far behind; the slave serves pulls and takes
  offset commits while the master is down, and the consumer's offsets reach the master when it
  returns;
* /metrics and GET_BROKER_HA_STATUS show each slave's lag;
* kill -9 of the master under SYNC_MASTER load: every SEND_OK message is on the slave;
* Apache's 4.x Java client consumes from the slave while the master is down.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from java_rocketmq import ClientDriver
from polling import wait_until
from ports import free_port
from prometheus_client.parser import text_string_to_metric_families
from tool_support import require_executable

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client import BrokerAdmin, MQAdmin, Producer, PullConsumer, RemotingClient, SendStatus
from rocketstore.client.consumer import PullStatus, decode_messages
from rocketstore.client.remoting_client import MessageQueue, RemotingError
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.common.message import StoredMessage
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.remoting.body import HARuntimeInfo, TopicRouteData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import PullMessageRequestHeader, PullMessageResponseHeader, PullSysFlag

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A broker process serving only as the group's name server (it registers with none)."""
    with Broker(tmp_path_factory.mktemp("namesrv"), "brokerName=namesrv-only\n").running() as ns:
        yield ns.namesrv


class Group:
    """A master and a slave of ``name`` registering with ``namesrv`` (not started)."""

    def __init__(self, tmp: Path, namesrv: str, name: str, *, master_conf: str = "", slave_conf: str = "") -> None:
        common = (f"brokerName={name}\nbrokerIP2=127.0.0.1\nnamesrvAddr={namesrv}\nslaveReadEnable=true\n"
                  "registerNameServerPeriod=10000\n")
        (tmp / "master").mkdir()
        (tmp / "slave").mkdir()
        # haListenPort is listenPort + 1 (BrokerStartup's rule): both must be free
        self.master = Broker(tmp / "master", common + "brokerRole=SYNC_MASTER\n" + master_conf,
                             listen_port=free_port(also=(1,)))
        self.slave = Broker(tmp / "slave", common + "brokerRole=SLAVE\nbrokerId=1\n" + slave_conf,
                            listen_port=free_port(also=(1,)))
        self.namesrv = namesrv
        self.name = name
        #: the test's topic, of this group alone (groups of earlier tests may linger in the name server)
        self.topic = f"Replicated-{name}"

    def stop(self) -> None:
        for broker in (self.master, self.slave):
            if broker.process is not None and broker.proc.poll() is None:
                broker.stop()


_GROUP_NUMBERS = itertools.count()


@pytest.fixture
def group(tmp_path: Path, namesrv: str, request: pytest.FixtureRequest) -> Iterator[Group]:
    """A Group of a brokerName of its own; ``indirect`` parametrization passes its extra confs."""
    g = Group(tmp_path, namesrv, f"group-{next(_GROUP_NUMBERS)}", **getattr(request, "param", {}))
    try:
        yield g
    finally:
        g.stop()


def metric(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def slave_in_sync(g: Group) -> bool:
    return metric(g.master.metrics(), "rocketstore_ha_slaves_in_sync") == 1


def pull_from(addr: str, topic: str, queue_id: int, offset: int, group: str = "reader",
              max_nums: int = 32) -> tuple[int, int, list[StoredMessage]]:
    """One PULL_MESSAGE straight to the broker at ``addr``: (response code, suggestWhichBrokerId,
    messages); the next offset is the last message's queue offset + 1."""
    header = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0, suspend_timeout_millis=0, subscription="*",
        sub_version=0, expression_type="TAG")
    with RemotingClient() as client:
        response = client.call(addr, RequestCode.PULL_MESSAGE, header, accept=(
            ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_OFFSET_MOVED,
            ResponseCode.PULL_RETRY_IMMEDIATELY))
    rh = PullMessageResponseHeader.from_ext_fields(response.ext_fields)
    messages = decode_messages(response.body) if response.code == ResponseCode.SUCCESS and response.body else []
    return response.code, rh.suggest_which_broker_id, messages


def stored_keys(addr: str, topic: str, queues: int = 8) -> set[str]:
    """Every UNIQ_KEY of ``topic`` on the broker at ``addr``, read from it alone."""
    keys: set[str] = set()
    for queue_id in range(queues):
        offset = 0
        while True:
            code, _, messages = pull_from(addr, topic, queue_id, offset)
            if code != ResponseCode.SUCCESS or not messages:
                break
            keys.update(m.properties["UNIQ_KEY"] for m in messages)
            offset = messages[-1].queue_offset + 1
    return keys


def route_members(namesrv: str, topic: str, name: str) -> dict[int, str]:
    with MQAdmin(namesrv) as admin:
        route: TopicRouteData = admin.route(topic)
    return next((dict(d.broker_addrs) for d in route.broker_datas if d.broker_name == name), {})


def slave_topics(g: Group) -> set[str]:
    with RemotingClient() as client:
        body = client.call(g.slave.addr, RequestCode.GET_ALL_TOPIC_CONFIG).body
    return set(parse_fastjson(body.decode())["topicConfigTable"])


def create_topic(g: Group, queues: int = 4) -> None:
    """The group's topic on the master, its route at the name server, and (a running slave) the
    slave's copy of it: a slave serves a topic once SlaveSynchronize has copied it (3 s after start,
    then every 10 s)."""
    topic = g.topic
    with BrokerAdmin(g.master.addr) as admin:
        admin.create_topic(topic, queues, queues)
    wait_until(f"route of {topic}", lambda: 0 in route_members(g.namesrv, topic, g.name), timeout=30)
    if g.slave.process is not None:
        wait_until(f"{topic} on the slave", lambda: topic in slave_topics(g), timeout=30)


def slave_offset(g: Group, group: str, queue_id: int) -> int | None:
    """The slave's committed offset of ``group`` on the group's topic (None when it has none)."""
    with RemotingClient() as client:
        offsets = parse_fastjson(client.call(g.slave.addr, RequestCode.GET_ALL_CONSUMER_OFFSET).body.decode())
    return offsets["offsetTable"].get(f"{g.topic}@{group}", {}).get(str(queue_id))


def ha_status(addr: str) -> HARuntimeInfo:
    with RemotingClient() as client:
        return HARuntimeInfo.decode(client.call(addr, RequestCode.GET_BROKER_HA_STATUS).body)


def test_sync_master_answers_slave_not_available_until_its_slave_is_in_sync(group: Group) -> None:
    g = group
    g.master.start()
    assert g.master.process is not None
    assert f"published as 127.0.0.1:{g.master.listen_port + 1}" in g.master.process.wait_ready()["ha"]
    create_topic(g)
    with Producer(g.namesrv, "p-sync") as producer:
        alone = producer.send(g.topic, b"before the slave", queue_id=0)
        assert alone.status == SendStatus.SLAVE_NOT_AVAILABLE  # stored, but on one broker only
        assert metric(g.master.metrics(), "rocketstore_ha_slaves_in_sync") == 0

        g.slave.start()
        master_ha = f"127.0.0.1:{g.master.listen_port + 1}"  # brokerIP2:haListenPort, listenPort + 1
        # one brokerName, two members: the name server lists both, the slave under its brokerId
        assert wait_until("both members in the route",
                          lambda: route_members(g.namesrv, g.topic, g.name) == {0: g.master.addr, 1: g.slave.addr})
        wait_until("the slave in sync", lambda: slave_in_sync(g))
        replicated = producer.send(g.topic, b"with the slave", queue_id=0)
        assert replicated.status == SendStatus.SEND_OK

    # the slave learnt its master's HA address from the registration answer, and has both messages
    slave_status = ha_status(g.slave.addr)
    assert not slave_status.master and slave_status.ha_client_runtime_info.master_addr == master_ha
    assert slave_status.ha_client_runtime_info.activated
    assert wait_until("both messages on the slave",
                      lambda: stored_keys(g.slave.addr, g.topic, 4) == {alone.msg_id, replicated.msg_id})

    master_status = ha_status(g.master.addr)
    assert master_status.master and master_status.in_sync_slave_nums == 1
    [conn] = master_status.ha_connection_info
    assert conn.in_sync and conn.slave_ack_offset > 0
    page = g.master.metrics()
    assert metric(page, "rocketstore_ha_slave_lag_bytes", slave=conn.addr) is not None
    assert metric(page, "rocketstore_ha_slave_lag_seconds", slave=conn.addr) is not None
    slave_page = g.slave.metrics()
    assert metric(slave_page, "rocketstore_ha_master_connected") == 1
    assert metric(slave_page, "rocketstore_ha_slave_behind_refused") == 0

    def admin_ha_status() -> dict[int, dict[str, object]]:
        out = subprocess.run([sys.executable, "-m", "rocketstore.cli", "admin", "-n", g.namesrv, "haStatus",
                              "-c", "TestCluster", "--json"], capture_output=True, text=True, timeout=60, check=True)
        return {row["brokerId"]: row for row in json.loads(out.stdout)["members"] if row["brokerName"] == g.name}

    members = wait_until("rocketstore admin haStatus with the slave caught up",
                         lambda: (rows := admin_ha_status()) and rows[1]["lagBytes"] == 0 and rows)
    assert members[0]["role"] == "MASTER" and members[0]["addr"] == g.master.addr and members[0]["inSync"] == 1
    assert members[1]["role"] == "SLAVE" and members[1]["addr"] == g.slave.addr and members[1]["inSync"] is True
    assert members[1]["maxOffset"] == members[0]["maxOffset"]


@pytest.mark.parametrize("group", [{"master_conf": "slaveTimeout=1500\n"}], indirect=True)
def test_sync_master_answers_flush_slave_timeout_when_the_slave_stops_acknowledging(group: Group) -> None:
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    wait_until("the slave in sync", lambda: slave_in_sync(g))
    with Producer(g.namesrv, "p-timeout") as producer:
        assert producer.send(g.topic, b"acknowledged").status == SendStatus.SEND_OK
        g.slave.proc.send_signal(signal.SIGSTOP)  # connected, in sync, but silent
        try:
            begin = time.monotonic()
            late = producer.send(g.topic, b"not acknowledged in time", timeout=10)
            waited = time.monotonic() - begin
        finally:
            g.slave.proc.send_signal(signal.SIGCONT)
        assert late.status == SendStatus.FLUSH_SLAVE_TIMEOUT
        assert 1.4 <= waited < 5, waited  # slaveTimeout, not syncFlushTimeout or the client's timeout
        assert wait_until("SEND_OK again", lambda: producer.send(g.topic, b"again").status == SendStatus.SEND_OK)
    # the late message is stored, and replicated once the slave runs again
    assert wait_until("the late message on the slave", lambda: late.msg_id in stored_keys(g.slave.addr, g.topic, 4))


def test_slave_copies_the_masters_tables_and_refuses_to_change_them(group: Group) -> None:
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    group_config = SubscriptionGroupConfig(group_name="synced-group", retry_max_times=3)
    mq = MessageQueue("SyncedTopic", g.name, 1)
    with BrokerAdmin(g.master.addr) as master:
        master.create_topic("SyncedTopic", 3, 3)
        master.create_subscription_group(group_config)
        master.update_consumer_offset("synced-group", mq, 7)
        with Producer(g.namesrv, "p-delay") as producer:  # a delayed message moves the delay offsets
            producer.send(g.topic, b"delayed", properties={"DELAY": "1"})

        def master_delay_offsets() -> dict[str, object]:
            offsets = parse_fastjson(master._call(RequestCode.GET_ALL_DELAY_OFFSET).body.decode())
            return offsets if offsets.get("offsetTable") else {}

        delay_offsets = wait_until("the delayed message delivered", master_delay_offsets)
    with BrokerAdmin(g.slave.addr) as slave:
        def synced() -> bool:
            topics = parse_fastjson(slave._call(RequestCode.GET_ALL_TOPIC_CONFIG).body.decode())
            groups = parse_fastjson(slave._call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body.decode())
            offsets = parse_fastjson(slave._call(RequestCode.GET_ALL_CONSUMER_OFFSET).body.decode())
            delay = parse_fastjson(slave._call(RequestCode.GET_ALL_DELAY_OFFSET).body.decode())
            return ("SyncedTopic" in topics["topicConfigTable"]
                    and groups["subscriptionGroupTable"].get("synced-group", {}).get("retryMaxTimes") == 3
                    and offsets["offsetTable"].get("SyncedTopic@synced-group") == {"1": 7}
                    and delay == delay_offsets)

        wait_until("the slave's copy of the master's tables", synced, timeout=40)
        for change in (lambda: slave.create_topic("SlaveTopic", 1, 1),
                       lambda: slave.create_subscription_group(SubscriptionGroupConfig(group_name="slave-group")),
                       lambda: slave.delete_topic("SyncedTopic")):
            with pytest.raises(RemotingError) as refused:
                change()
            assert refused.value.code == ResponseCode.SYSTEM_ERROR
            assert "Can't modify topic or subscription group from slave broker" in str(refused.value)

    # the slave's gRPC port routes 5.x clients to the master, as RocketMQ 5's proxy does: the route
    # lists both members by brokerId (the master at its host, on the same grpcListenPort: the
    # proxy's assumption), and only the master's queues are assigned
    with grpc.insecure_channel(g.slave.grpc_endpoint) as channel:
        stub = pb_grpc.MessagingServiceStub(channel)
        route = stub.QueryRoute(pb.QueryRouteRequest(topic=pb.Resource(name="SyncedTopic")), timeout=5)
        assignment = stub.QueryAssignment(pb.QueryAssignmentRequest(
            topic=pb.Resource(name="SyncedTopic"), group=pb.Resource(name="synced-group")), timeout=5)
        [popped] = list(stub.ReceiveMessage(pb.ReceiveMessageRequest(
            group=pb.Resource(name="synced-group"), batch_size=1,
            message_queue=pb.MessageQueue(topic=pb.Resource(name="SyncedTopic"), id=-1)), timeout=5))
    assert popped.status.code == pb.FORBIDDEN  # pop state is the master's: a slave pops nothing
    assert route.status.code == pb.OK
    members = {(q.broker.id, q.broker.endpoints.addresses[0].host, q.broker.endpoints.addresses[0].port)
               for q in route.message_queues}
    assert members == {(0, "127.0.0.1", g.slave.grpc_port), (1, "127.0.0.1", g.slave.grpc_port)}
    assert assignment.status.code == pb.OK and assignment.assignments
    assert {a.message_queue.broker.id for a in assignment.assignments} == {0}


@pytest.mark.parametrize("group", [{"master_conf": "accessMessageInMemoryMaxRatio=0\n"}], indirect=True)
def test_master_sends_a_consumer_far_behind_to_the_slave(group: Group) -> None:
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    wait_until("the slave in sync", lambda: slave_in_sync(g))
    with Producer(g.namesrv, "p-behind") as producer:
        for i in range(40):
            assert producer.send(g.topic, f"m{i}".encode(), queue_id=0).status == SendStatus.SEND_OK
    # with no memory to spare (ratio 0) any backlog is "far behind": the master answers the pull
    # and suggests whichBrokerWhenConsumeSlowly (1, the slave), as slaveReadEnable allows
    code, suggest, messages = pull_from(g.master.addr, g.topic, 0, 0, max_nums=4)
    assert code == ResponseCode.SUCCESS and len(messages) == 4 and suggest == 1
    with PullConsumer(g.namesrv, "far-behind") as consumer:
        mq = MessageQueue(g.topic, g.name, 0)
        first = consumer.pull(mq, 0, max_nums=4)
        assert first.status is PullStatus.FOUND and first.suggest_which_broker_id == 1
        assert consumer.pull_addr(mq) == g.slave.addr  # the next pull goes to the slave
        bodies = [m.body for m in first.messages]
        offset = first.next_begin_offset
        while len(bodies) < 40:
            more = consumer.pull(mq, offset)
            assert more.status is PullStatus.FOUND
            bodies += [m.body for m in more.messages]
            offset = more.next_begin_offset
        assert bodies == [f"m{i}".encode() for i in range(40)]


def test_consumers_read_and_commit_on_the_slave_while_the_master_is_down(group: Group) -> None:
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    wait_until("the slave in sync", lambda: slave_in_sync(g))
    with Producer(g.namesrv, "p-down") as producer:
        sent = [producer.send(g.topic, f"d{i}".encode(), queue_id=2) for i in range(10)]
    assert {r.status for r in sent} == {SendStatus.SEND_OK}
    mq = MessageQueue(g.topic, g.name, 2)
    with PullConsumer(g.namesrv, "reads-slave") as consumer:  # the group's progress on the master: 3
        consumer.commit_offset(mq, 3)
    wait_until("the slave's copy of the offset", lambda: slave_offset(g, "reads-slave", 2) == 3, timeout=30)

    assert g.master.stop() == 0
    wait_until("the route without the master", lambda: route_members(g.namesrv, g.topic, g.name) == {1: g.slave.addr})
    with PullConsumer(g.namesrv, "reads-slave") as consumer:
        assert consumer.fetch_offset(mq) == 3  # the slave's copy of the master's offsets
        result = consumer.pull(mq, consumer.fetch_offset(mq))
        assert [m.body for m in result.messages] == [f"d{i}".encode() for i in range(3, 10)]
        consumer.commit_offset(mq, result.next_begin_offset)  # to the slave: the only member left
        assert consumer.fetch_offset(mq) == 10
        with BrokerAdmin(g.slave.addr) as slave:  # the slave still refuses sends
            with pytest.raises(RemotingError) as refused:
                slave.create_topic("WhileDown", 1, 1)
            assert refused.value.code == ResponseCode.SYSTEM_ERROR

    # the consumer stops while the master is down; the master comes back with its old offset (3)
    g.master.start()
    wait_until("the master back in the route", lambda: route_members(g.namesrv, g.topic, g.name).get(0))
    # the slave hands the offset committed to it to the master at its next sync pass, so a consumer
    # started now (nothing of the old one's memory) starts where the old one stopped
    with PullConsumer(g.namesrv, "reads-slave") as restarted:
        assert restarted.broker_addr(mq) == g.master.addr
        assert wait_until("the master has the offset committed to the slave",
                          lambda: restarted.fetch_offset(mq) == 10, timeout=40)
        assert restarted.pull(mq, restarted.fetch_offset(mq)).status is PullStatus.NO_NEW_MSG
    # and the slave's copy keeps it after its next sync passes with the master
    passes = metric(g.slave.metrics(), "rocketstore_slave_synchronize_passes_total") or 0
    wait_until("a sync pass with the master back",
               lambda: (metric(g.slave.metrics(), "rocketstore_slave_synchronize_passes_total") or 0) > passes + 1,
               timeout=40)
    assert slave_offset(g, "reads-slave", 2) == 10


def test_kill_9_of_the_master_under_sync_master_load_loses_no_acknowledged_message(group: Group) -> None:
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    wait_until("the slave in sync", lambda: slave_in_sync(g))
    acknowledged: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with Producer(g.namesrv, "p-kill", send_timeout=3.0, retries=0) as producer:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    result = producer.send(g.topic, f"k{i}".encode())
                except Exception as exc:  # the master is down: the producer fails and tries again
                    failures.append(type(exc).__name__)
                    time.sleep(0.05)
                    continue
                if result.status == SendStatus.SEND_OK:
                    acknowledged.append(result.msg_id)

    def more_acknowledged(what: str) -> None:
        target = len(acknowledged) + 50
        wait_until(what, lambda: len(acknowledged) >= target, timeout=30)

    sender = threading.Thread(target=load, name="sync-master-load")
    sender.start()
    try:
        for round_ in range(3):
            more_acknowledged(f"sends acknowledged in round {round_}")
            g.master.stop(signal.SIGKILL)
            time.sleep(0.5)
            g.master.start()
            wait_until("the slave in sync again", lambda: slave_in_sync(g), timeout=30)
        more_acknowledged("sends acknowledged after the last restart")
    finally:
        stop.set()
        sender.join(30)
    assert metric(g.slave.metrics(), "rocketstore_ha_slave_behind_refused") == 0
    with contextlib.suppress(Exception):
        g.master.stop(signal.SIGKILL)  # the slave alone must have them
    on_slave = wait_until("every acknowledged message on the slave",
                          lambda: (keys := stored_keys(g.slave.addr, g.topic, 4)) >= set(acknowledged) and keys)
    assert len(acknowledged) >= 200 and set(acknowledged) <= on_slave


def test_java_4x_client_consumes_from_the_slave_while_the_master_is_down(group: Group, tmp_path: Path) -> None:
    """Apache's 4.x client (rocketmq-client 4.9.8): SYNC_MASTER sends acknowledged SEND_OK, then the
    master crashes; a push consumer reads every message from the slave and commits its offsets there.
    The master comes back: the slave hands it those offsets, and a new consumer of the group gets
    nothing again."""
    require_executable("java", "runs Apache RocketMQ's 4.x Java client (tests/support/drivers/java4)")
    require_executable("mvn", "builds the Java client driver")
    g = group
    g.master.start()
    g.slave.start()
    create_topic(g)
    wait_until("the slave in sync", lambda: slave_in_sync(g))
    driver = ClientDriver(g.namesrv, tmp_path / "java", poll_namesrv_ms=1000, heartbeat_ms=1000,
                          rebalance_interval_ms=1000)
    sent = driver.produce(g.topic, 40).of("sent")
    assert {line["status"] for line in sent} == {"SEND_OK"}

    g.master.stop(signal.SIGKILL)
    wait_until("the route without the master", lambda: route_members(g.namesrv, g.topic, g.name) == {1: g.slave.addr})
    consumed = driver.push_consume(g.topic, "java-on-slave", 40, timeout_s=90).of("received")
    assert {line["msgId"] for line in consumed} == {line["msgId"] for line in sent}
    # the consumer committed its offsets to the slave (at shutdown at the latest), the route's only member
    def committed(addr: str) -> int:
        with RemotingClient() as client:
            offsets = parse_fastjson(client.call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET).body.decode())
        return sum(offsets["offsetTable"].get(f"{g.topic}@java-on-slave", {}).values())

    assert committed(g.slave.addr) == 40

    g.master.start()
    wait_until("the master has the offsets committed to the slave", lambda: committed(g.master.addr) == 40,
               timeout=60)
    # waits 12 s for a first message (none comes: the run "times out", which is the point)
    again = driver.push_consume(g.topic, "java-on-slave", 1, timeout_s=12, check=False)
    assert again.of("received") == [] and again.summary["consumed"] == 0 and again.summary["timedOut"]
