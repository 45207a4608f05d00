"""NOTIFY_BROKER_ROLE_CHANGED (RocketMQ 5's request code 1008 and its header) on brokers in
controller mode with no elector: the test plays Apache's controller.

A group of two replicas registering with a name server process of its own: the notification makes
one master (brokerId 0 in the name server's routes within a second, and in its own gRPC QueryRoute;
sends acknowledged) and the other its slave; a
second notification, epoch 2, swaps them without a restart, and the old master's CommitLog then
equals the new master's byte for byte. A stale notification (older epoch) changes nothing.

The replicas run in this process (``BrokerController`` without an elector): ``rocketstore broker``
refuses controller mode without controllerAddr or controllerLeaseEnable (nothing would make it
master), so only an embedding caller can leave the roles to notifications.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from broker_process import Broker
from inprocess_broker import BrokerHandle, RawClient
from polling import wait_until
from ports import free_port

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2 import messaging_pb2_grpc as pb_grpc
from rocketstore.client import RemotingClient
from rocketstore.client.remoting_client import NameServerClient
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import NotifyBrokerRoleChangedRequestHeader

pytestmark = pytest.mark.integration

TOPIC = "FailoverNotify"


@dataclass
class Replica:
    """An in-process replica as this test addresses it."""

    handle: BrokerHandle
    #: its store root
    store: Path

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.handle.port}"

    @property
    def grpc_endpoint(self) -> str:
        assert self.handle.controller.grpc is not None
        return f"127.0.0.1:{self.handle.controller.grpc.port}"


@pytest.fixture
def replicas(tmp_path: Path, broker_factory: Callable[..., BrokerHandle]) -> Iterator[tuple[str, dict[int, Replica]]]:
    (tmp_path / "ns").mkdir()
    with Broker(tmp_path / "ns", "brokerName=namesrv-only\n").running() as ns:
        brokers: dict[int, Replica] = {}
        for replica_id in (1, 2):
            root = tmp_path / f"r{replica_id}"
            # the HA port is listenPort + 1, which the notification's master address implies
            handle = broker_factory(root, broker_name="failover-a", broker_ip2="127.0.0.1", namesrv_addr=ns.namesrv,
                                    enable_controller_mode=True, broker_id=replica_id, ha_send_heartbeat_interval=500,
                                    listen_port=free_port(also=(1,)), grpc_listen_port=free_port())
            brokers[replica_id] = Replica(handle, root)
        try:
            yield ns.namesrv, brokers
        finally:
            for replica in brokers.values():
                replica.handle.stop()  # before the name server they unregister from


def notify(broker: Replica, master: Replica, master_id: int, epoch: int, members: list[int]) -> None:
    header = NotifyBrokerRoleChangedRequestHeader(master_address=master.addr, master_epoch=epoch,
                                                  sync_state_set_epoch=epoch, master_broker_id=master_id)
    body = json.dumps({"syncStateSet": members, "syncStateSetEpoch": epoch}).encode()
    with RemotingClient() as client:
        response = client.call(broker.addr, RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body)
    assert response.code == ResponseCode.SUCCESS


def route_ids(namesrv: str) -> dict[int, str]:
    with RemotingClient() as client:
        route = NameServerClient(namesrv, client).get_route("TBW102")  # every broker's (autoCreateTopicEnable)
    return {int(k): v for k, v in next(b for b in route.broker_datas if b.broker_name == "failover-a")
            .broker_addrs.items()}


def grpc_ids(broker: Replica) -> set[int]:
    """The brokerIds of failover-a in the gRPC QueryRoute of ``broker`` (RocketMQ 5 clients' route)."""
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        route = pb_grpc.MessagingServiceStub(channel).QueryRoute(
            pb.QueryRouteRequest(topic=pb.Resource(name="TBW102")), timeout=5)
    return {q.broker.id for q in route.message_queues if q.broker.name == "failover-a"}


def send_all(master: Replica, texts: list[str]) -> None:
    """Sends straight to the master (the name server's own broker carries TBW102 as well, so a
    route-following producer would spread an auto-created topic over both)."""
    host, _, port = master.addr.rpartition(":")
    client = RawClient(host, int(port))
    try:
        for text in texts:
            assert client.send_message(TOPIC, text.encode()).code == ResponseCode.SUCCESS
    finally:
        client.close()


def test_role_changes_by_notification_without_restart(replicas: tuple[str, dict[int, Replica]]) -> None:
    namesrv, brokers = replicas
    one, two = brokers[1], brokers[2]
    notify(one, one, 1, 1, [1])
    notified = time.monotonic()
    notify(two, one, 1, 1, [1])
    wait_until("routes name replica 1 as the master", lambda: route_ids(namesrv).get(0) == one.addr, 5)
    assert time.monotonic() - notified < 1.0
    assert 0 in grpc_ids(one)
    send_all(one, [f"epoch-1-{i}" for i in range(5)])
    # a clean hand-over: replica 2 has everything before it is made master
    wait_until("replica 2 caught up", lambda: _log(two) == _log(one), 15)

    notify(two, two, 2, 2, [2])
    notified = time.monotonic()
    notify(one, two, 2, 2, [2])
    wait_until("routes name replica 2 as the master", lambda: route_ids(namesrv).get(0) == two.addr, 5)
    assert time.monotonic() - notified < 1.0
    assert 0 in grpc_ids(two) and 2 not in grpc_ids(two)  # itself, as brokerId 0 now
    send_all(two, [f"epoch-2-{i}" for i in range(5)])

    notify(one, one, 1, 1, [1])  # a stale notification: replica 1 stays a slave
    wait_until("replica 1 has replica 2's log", lambda: _log(one) == _log(two) and b"epoch-2-4" in _log(one), 15)
    assert all(f"epoch-{e}-{i}".encode() in _log(one) for e in (1, 2) for i in range(5))
    assert (one.store / "epochFileCheckpoint").read_text() == (two.store / "epochFileCheckpoint").read_text()
    assert route_ids(namesrv).get(0) == two.addr and route_ids(namesrv).get(1) == one.addr


def _log(broker: Replica) -> bytes:
    """The whole CommitLog, segment files as they are (equal logs have equal files: the unwritten
    rest of a segment is zeros on both)."""
    directory = broker.store / "commitlog"
    return b"".join(f.read_bytes() for f in sorted(directory.iterdir())) if directory.exists() else b""
