"""BrokerController core: start/stop, system topics, topic and group auto-creation, live config,
client membership over real sockets, and a remoting listener that survives bad input."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import BrokerHandle, RawClient

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig, ClusterPeer, load_config, split_properties
from rocketstore.common.java_properties import parse_properties
from rocketstore.common.perm_name import PERM_INHERIT, PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.remoting.body import ConsumerData, HeartbeatData, ProducerData, SubscriptionData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.store.config import ConfigError, StoreConfig

# -- BrokerConfig (unit) -----------------------------------------------------------------------


def test_broker_config_defaults_are_rocketmq_4_9_8() -> None:
    cfg = BrokerConfig()
    props = cfg.to_properties()
    assert props["brokerClusterName"] == "DefaultCluster"
    assert props["brokerId"] == "0"
    assert props["listenPort"] == "10911"
    assert props["defaultTopicQueueNums"] == "8"
    assert props["brokerPermission"] == "6"
    assert props["autoCreateTopicEnable"] == "true"
    assert props["autoCreateSubscriptionGroup"] == "true"
    assert props["shortPollingTimeMills"] == "1000"
    assert props["flushConsumerOffsetInterval"] == "5000"
    assert props["namesrvListenPort"] == "9876"
    assert props["httpListenPort"] == "10925"
    assert props["listenHost"] == "0.0.0.0"
    # RocketMQ's setter spelling, not the camelCase of our field name
    assert "brokerIP1" in props and "brokerIp1" not in props
    assert cfg.broker_name  # the host name


def test_load_config_splits_store_and_broker_keys_and_ignores_unknown(caplog: pytest.LogCaptureFixture) -> None:
    text = ("brokerClusterName=C1\nbrokerName=b-0\nlistenPort=20911\nfileReservedTime=48\n"
            "deleteWhen=04;10\nserverWorkerThreads=8\nclusterPeers=b-1@10.0.0.2:10911, b-2@10.0.0.3:10911\n")
    broker_config, store_config = load_config(parse_properties(text))
    assert (broker_config.broker_cluster_name, broker_config.broker_name, broker_config.listen_port) == (
        "C1", "b-0", 20911)
    assert store_config.file_reserved_time == 48
    assert store_config.delete_when == "04;10"
    assert broker_config.cluster_peer_list() == [ClusterPeer("b-1", "10.0.0.2:10911"),
                                                  ClusterPeer("b-2", "10.0.0.3:10911")]
    assert "serverWorkerThreads" in caplog.text


@pytest.mark.parametrize(("key", "value"), [
    ("brokerId", "zero"), ("listenPort", "99999999999"), ("clusterPeers", "b-1:10911"), ("clusterPeers", "b@h:x"),
])
def test_bad_broker_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig.from_properties({key: value})
    assert err.value.key == key


def test_split_properties() -> None:
    store, broker, unknown = split_properties({"fileReservedTime": "1", "brokerName": "x", "nope": "1"})
    assert (store, broker, unknown) == ({"fileReservedTime": "1"}, {"brokerName": "x"}, {"nope": "1"})


# -- a broker controller without sockets (loop not needed for these) -----------------------------


def _controller(tmp_path: Path, **broker: Any) -> BrokerController:
    values = {"broker_name": "bk", "broker_ip1": "127.0.0.1", "listen_port": 0, "namesrv_listen_port": 0,
              "http_listen_port": 0, "grpc_listen_port": 0, **broker}
    return BrokerController(BrokerConfig(**values), StoreConfig(store_path_root_dir=str(tmp_path / "store")))


def test_system_topics_as_rocketmq_creates_them(tmp_path: Path) -> None:
    controller = _controller(tmp_path)
    controller.topic_config_manager.load()
    controller.subscription_group_manager.load()
    table = controller.topic_config_manager.table()
    assert table["TBW102"].perm == PERM_INHERIT | PERM_READ | PERM_WRITE
    assert table["TBW102"].write_queue_nums == 8
    assert table["SELF_TEST_TOPIC"].write_queue_nums == 1
    assert table["DefaultCluster"].perm == PERM_INHERIT | PERM_READ | PERM_WRITE
    assert table["bk"].read_queue_nums == 1
    assert table["SCHEDULE_TOPIC_XXXX"].write_queue_nums == 18
    assert "DefaultCluster_REPLY_TOPIC" in table
    topics = controller.topic_config_manager
    assert topics.is_system_topic("bk") and topics.is_system_topic("rmq_sys_x")
    assert not topics.is_system_topic("Orders")
    assert controller.subscription_group_manager.get("TOOLS_CONSUMER") is not None


def test_no_tbw102_without_auto_create(tmp_path: Path) -> None:
    controller = _controller(tmp_path, auto_create_topic_enable=False)
    controller.topic_config_manager.load()
    assert controller.topic_config_manager.get("TBW102") is None
    assert controller.topic_config_manager.topic_config_for_send("Orders", "TBW102", 4, 0) is None


def test_topic_config_for_send_inherits_from_default_topic(tmp_path: Path) -> None:
    controller = _controller(tmp_path, default_topic_queue_nums=6)
    controller.topic_config_manager.load()
    created = controller.topic_config_manager.topic_config_for_send("Orders", "TBW102", 4, 0)
    assert created == TopicConfig("Orders", read_queue_nums=4, write_queue_nums=4, perm=PERM_READ | PERM_WRITE)
    # capped by the default topic's write queues
    assert controller.topic_config_manager.topic_config_for_send("Big", "TBW102", 64, 0).write_queue_nums == 6  # type: ignore[union-attr]
    # existing topic returned unchanged
    assert controller.topic_config_manager.topic_config_for_send("Orders", "TBW102", 1, 0) is created
    # a default topic without PERM_INHERIT creates nothing
    assert controller.topic_config_manager.topic_config_for_send("X", "SELF_TEST_TOPIC", 4, 0) is None
    assert controller.topic_config_manager.topic_config_for_send("X", "NoSuchDefault", 4, 0) is None
    # TBW102 loaded from an old file stops inheriting once autoCreateTopicEnable is off
    controller.broker_config.auto_create_topic_enable = False
    assert controller.topic_config_manager.topic_config_for_send("Y", "TBW102", 4, 0) is None


def test_send_back_topic_and_subscription_group_auto_creation(tmp_path: Path) -> None:
    controller = _controller(tmp_path)
    controller.topic_config_manager.load()
    retry = controller.topic_config_manager.create_topic_in_send_back("%RETRY%g", 1, PERM_READ | PERM_WRITE, 0)
    assert (retry.write_queue_nums, retry.perm) == (1, PERM_READ | PERM_WRITE)
    assert controller.topic_config_manager.create_topic_in_send_back("%RETRY%g", 5, 2, 0) is retry
    groups = controller.subscription_group_manager
    assert groups.find_subscription_group_config("g1") is not None
    controller.broker_config.auto_create_subscription_group = False
    assert groups.find_subscription_group_config("g2") is None
    assert groups.find_subscription_group_config("g1") is not None  # existing stays
    assert groups.find_subscription_group_config("CID_RMQ_SYS_x") is not None  # system groups always


def test_update_config_is_all_or_nothing(tmp_path: Path) -> None:
    controller = _controller(tmp_path)
    before_version = controller.configuration.data_version.counter
    changed = controller.configuration.update({"fileReservedTime": "1", "brokerPermission": "4"})
    assert changed == {"fileReservedTime": "1", "brokerPermission": "4"}
    assert controller.store_config.file_reserved_time == 1
    assert controller.broker_config.broker_permission == 4
    assert controller.configuration.data_version.counter == before_version + 1
    for bad in ({"fileReservedTime": "2", "brokerPermission": "x"},
                {"fileReservedTime": "x", "brokerPermission": "2"},
                {"fileReservedTime": "2", "noSuchKey": "1"}):
        with pytest.raises(ConfigError):
            controller.configuration.update(bad)
        assert controller.store_config.file_reserved_time == 1
        assert controller.broker_config.broker_permission == 4


# -- over real sockets -------------------------------------------------------------------------


def _heartbeat(client: RawClient, client_id: str, group: str, topic: str = "Orders",
               producer: str | None = None) -> RemotingCommand:
    data = HeartbeatData(
        client_id=client_id,
        consumer_data_set=[ConsumerData(
            group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=[SubscriptionData(topic=topic, sub_string="*", sub_version=1)])],
        producer_data_set=[ProducerData(group_name=producer)] if producer else [],
    )
    return client.call(RequestCode.HEART_BEAT, body=data.encode())


def _consumer_ids(client: RawClient, group: str) -> list[str] | None:
    resp = client.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if resp.code != ResponseCode.SUCCESS:
        return None
    ids: list[str] = json.loads(resp.body)["consumerIdList"]
    return sorted(ids)


class NotifiedClient(RawClient):
    """RawClient that keeps the broker's own requests (notifications) apart from responses:
    their opaques come from the broker's counter and can equal one of ours."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.requests: list[RemotingCommand] = []

    def _read_once(self, timeout: float) -> bool:
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(1 << 16)
        except TimeoutError:
            return False
        if not data:
            raise ConnectionError("broker closed the connection")
        for cmd in self.decoder.feed(data):
            if cmd.is_response:
                self.pending[cmd.opaque] = cmd
            else:
                self.requests.append(cmd)
        return True

    def receive(self, opaque: int, timeout: float = 10.0) -> RemotingCommand:
        deadline = time.monotonic() + timeout
        while opaque not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no response to opaque {opaque} within {timeout} s")
            self._read_once(left)
        return self.pending.pop(opaque)

    def notifications(self, timeout: float) -> list[RemotingCommand]:
        """Broker requests received so far, waiting up to ``timeout`` for the first one."""
        deadline = time.monotonic() + timeout
        while not self.requests and time.monotonic() < deadline:
            self._read_once(deadline - time.monotonic())
        out, self.requests = self.requests, []
        return out


def _client(broker: BrokerHandle) -> NotifiedClient:
    c = NotifiedClient("127.0.0.1", broker.port)
    broker.clients.append(c)
    return c


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.integration
def test_heartbeat_membership_and_consumer_ids_changed(broker: BrokerHandle) -> None:
    first = _client(broker)
    assert _heartbeat(first, "10.0.0.1@1", "CG").code == ResponseCode.SUCCESS
    # the heartbeat created the group's retry topic and subscription config
    assert broker.controller.topic_config_manager.get("%RETRY%CG") is not None
    assert broker.controller.subscription_group_manager.get("CG") is not None
    assert _consumer_ids(first, "CG") == ["10.0.0.1@1"]
    # the first consumer's own registration notified it (RocketMQ notifies every member)
    assert [n.code for n in first.notifications(5.0)] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]

    second = _client(broker)
    assert _heartbeat(second, "10.0.0.2@1", "CG").code == ResponseCode.SUCCESS
    notes = first.notifications(5.0)
    assert [(n.code, n.ext_fields.get("consumerGroup"), n.is_oneway) for n in notes] == [
        (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, "CG", True)]
    assert _consumer_ids(first, "CG") == ["10.0.0.1@1", "10.0.0.2@1"]

    # a repeated heartbeat changes nothing and notifies nobody
    assert _heartbeat(second, "10.0.0.2@1", "CG").code == ResponseCode.SUCCESS
    assert first.notifications(0.5) == []

    # the second disconnects: it is removed and the first is told
    second.close()
    assert _wait_for(lambda: broker.call_soon(
        lambda: broker.controller.consumer_manager.get("CG").client_ids()) == ["10.0.0.1@1"])  # type: ignore[union-attr]
    notes = first.notifications(5.0)
    assert [n.code for n in notes] == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]

    # UNREGISTER_CLIENT removes the last member, and with it the group
    resp = first.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.1@1", "consumerGroup": "CG"})
    assert resp.code == ResponseCode.SUCCESS
    assert _consumer_ids(first, "CG") is None


@pytest.mark.integration
def test_notifications_off_when_disabled(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(notify_consumer_ids_changed_enable=False)
    first = _client(broker)
    _heartbeat(first, "a@1", "CG")
    second = _client(broker)
    _heartbeat(second, "b@1", "CG")
    assert first.notifications(1.0) == []
    assert _consumer_ids(first, "CG") == ["a@1", "b@1"]


@pytest.mark.integration
def test_producers_registered_and_expired_clients_dropped(broker: BrokerHandle) -> None:
    client = broker.client()
    _heartbeat(client, "c@1", "CG", producer="PG")
    controller = broker.controller
    assert broker.call_soon(lambda: "PG" in controller.producer_manager.groups)
    # nothing has expired yet
    broker.call_soon(controller.scan_expired_clients)
    assert broker.call_soon(lambda: controller.consumer_manager.get("CG") is not None)
    # with a zero expiry every member is stale: dropped, and its connection closed
    controller.channel_expired_timeout_ms = -1
    broker.call_soon(controller.scan_expired_clients)
    assert broker.call_soon(lambda: controller.consumer_manager.get("CG") is None)
    assert broker.call_soon(lambda: "PG" not in controller.producer_manager.groups)
    client.sock.settimeout(5)
    assert client.sock.recv(65536) == b""


@pytest.mark.integration
def test_check_client_config(client: RawClient) -> None:
    tag = json.dumps({"clientId": "c", "group": "g", "subscriptionData": {"topic": "t", "expressionType": "TAG"}})
    assert client.call(RequestCode.CHECK_CLIENT_CONFIG, body=tag.encode()).code == ResponseCode.SUCCESS
    sql = json.dumps({"clientId": "c", "group": "g", "subscriptionData": {"topic": "t", "expressionType": "SQL92"}})
    resp = client.call(RequestCode.CHECK_CLIENT_CONFIG, body=sql.encode())
    assert resp.code == ResponseCode.SYSTEM_ERROR
    assert "SQL92" in (resp.remark or "")


@pytest.mark.integration
def test_unknown_request_code_keeps_the_connection(client: RawClient) -> None:
    resp = client.call(9999)
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert client.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS


def _closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.integration
@pytest.mark.parametrize("payload", [
    pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="garbage"),
    pytest.param(struct.pack(">ii", 6, 100) + b"{}", id="header-longer-than-frame"),
    pytest.param(struct.pack(">ii", 7, (1 << 24) | 3) + b"abc", id="binary-header-truncated"),
    pytest.param(struct.pack(">i", 16 * 1024 * 1024 + 1), id="frame-over-16MiB"),
    pytest.param(struct.pack(">ii", 6, 2) + b"{}", id="json-header-missing-code"),
])
def test_bad_frames_close_only_that_connection(broker: BrokerHandle, payload: bytes) -> None:
    bystander = broker.client()
    assert bystander.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS
    bad = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    try:
        bad.sendall(payload)
        assert _closed_by_peer(bad)
    finally:
        bad.close()
    assert bystander.call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS
    assert broker.client().call(9999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


@pytest.mark.integration
def test_truncated_frame_then_hangup_leaves_broker_serving(broker: BrokerHandle) -> None:
    frame = RemotingCommand(code=RequestCode.GET_BROKER_RUNTIME_INFO).encode()
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as half:
        half.sendall(frame[: len(frame) // 2])
    assert broker.client().call(RequestCode.GET_BROKER_RUNTIME_INFO).code == ResponseCode.SUCCESS


@pytest.mark.integration
def test_stop_persists_tables_and_offsets_and_restart_reads_them(tmp_path: Path,
                                                                 broker_factory: Callable[..., BrokerHandle]) -> None:
    root = tmp_path / "persist"
    broker = broker_factory(root)
    client = broker.client()
    _heartbeat(client, "c@1", "CG")
    broker.call_soon(lambda: broker.controller.consumer_offset_manager.commit_offset("CG", "Orders", 0, 42))
    broker.stop()
    offsets = json.loads((root / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["Orders@CG"] == {"0": 42}
    topics = json.loads((root / "config" / "topics.json").read_text())
    assert "%RETRY%CG" in topics["topicConfigTable"]
    assert not (root / "abort").exists()

    again = broker_factory(root)
    assert again.controller.topic_config_manager.get("%RETRY%CG") is not None
    assert again.controller.consumer_offset_manager.query_offset("CG", "Orders", 0) == 42


@pytest.mark.integration
def test_topic_table_written_soon_after_a_change(broker: BrokerHandle) -> None:
    controller = broker.controller
    broker.call_soon(lambda: controller.topic_config_manager.topic_config_for_send("Fresh", "TBW102", 4, 0))
    path = controller.topic_config_manager.path
    assert _wait_for(lambda: path.exists() and "Fresh" in path.read_text())


@pytest.mark.integration
def test_offsets_flushed_periodically(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(flush_consumer_offset_interval=200)
    controller = broker.controller
    broker.call_soon(lambda: controller.consumer_offset_manager.commit_offset("G", "T", 3, 7))
    path = controller.consumer_offset_manager.path
    assert _wait_for(lambda: path.exists() and '"T@G"' in path.read_text())


@pytest.mark.integration
def test_store_locked_by_another_broker_fails_start_cleanly(tmp_path: Path,
                                                            broker_factory: Callable[..., BrokerHandle]) -> None:
    root = tmp_path / "shared"
    broker_factory(root)
    with pytest.raises(Exception, match="lock"):
        broker_factory(root)
