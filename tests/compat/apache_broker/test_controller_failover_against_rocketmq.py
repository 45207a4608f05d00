"""Failover of OUR brokers by Apache RocketMQ 5.3.3's controller (issue 25 step 4).

Apache's name server runs its embedded controller (enableControllerInNamesrv, one DLedger node);
two of our broker processes in one group point controllerAddr at it. The controller grants their
ids and elects one master; kill -9 of that master makes the controller elect the in-sync slave
(at once: it sees the dead master's connection close); sends are acknowledged by the new master,
every acknowledged message is in its log, and the old master rejoins as a slave with its
unacknowledged tail cut: its log ends as the new master's, byte for byte.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from java_rocketmq import AnchorError, RocketMQAnchor, embedded_controller_config
from polling import wait_until
from ports import free_port
from replica_log import commit_log, pulled, send

from rocketstore.broker.controller_elector import sync_state_set_of
from rocketstore.client.remoting_client import RemotingClient
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import (
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    SendMessageRequestHeader,
)

pytestmark = pytest.mark.integration

GROUP = "ctrl-group"
TOPIC = "CtrlFailoverTopic"
HEARTBEAT_TIMEOUT_MS = 3000


@pytest.fixture
def controller(java_client_built: None, tmp_path: Path) -> Iterator[str]:
    workdir = tmp_path / "apache"
    workdir.mkdir()
    port = free_port()
    anchor = RocketMQAnchor(workdir, version="5.3.3", with_broker=False, namesrv_config={
        **embedded_controller_config(workdir, port, "ctrl"),
        "scanNotActiveBrokerInterval": "1000", "scanInactiveMasterInterval": "1000"})
    try:
        anchor.start()
    except AnchorError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        anchor.stop()


def _broker(tmp: Path, name: str, controller: str) -> Broker:
    (tmp / name).mkdir()
    return Broker(tmp / name, f"brokerName={GROUP}\nenableControllerMode=true\ncontrollerAddr={controller}\n"
                  f"controllerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS}\nbrokerHeartbeatInterval=500\n"
                  "allAckInSyncStateSet=true\nbrokerIP2=127.0.0.1\nhaSendHeartbeatInterval=500\n"
                  "autoCreateTopicEnable=true\n")


def _send(broker: Broker, body: bytes) -> int:
    """A send's answer code (-1: no answer)."""
    return send(broker, TOPIC, body)


def _send_unanswered(broker: Broker, bodies: list[bytes]) -> None:
    """One-way sends: stored by the master, never acknowledged to anyone."""
    with RemotingClient() as remoting:
        for body in bodies:
            header = SendMessageRequestHeader(producer_group="PG", topic=TOPIC, default_topic="TBW102",
                                              default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                              born_timestamp=int(time.time() * 1000), flag=0, properties="")
            remoting.invoke_oneway(broker.addr, remoting.request(RequestCode.SEND_MESSAGE_V2,
                                                                 header.to_v2_ext_fields(), body))


def _replica_info(controller: str) -> tuple[int | None, list[int]]:
    """The controller's view: the master's broker id and the SyncStateSet."""
    with RemotingClient() as remoting:
        response = remoting.call(controller, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                 GetReplicaInfoRequestHeader(broker_name=GROUP))
    info = GetReplicaInfoResponseHeader.from_ext_fields(response.ext_fields)
    return info.master_broker_id, sorted(sync_state_set_of(response.body).sync_state_set)


def test_apache_controller_fails_our_brokers_over(controller: str, tmp_path: Path) -> None:
    a, b = _broker(tmp_path, "a", controller), _broker(tmp_path, "b", controller)
    a.start()
    b.start()
    try:
        # the controller granted ids 1 and 2 (brokerIdentity in each store root) and elected one
        ids = {x: int((x.store / "brokerIdentity").read_text().split("#")[2]) for x in (a, b)}
        assert sorted(ids.values()) == [1, 2]
        master_id = wait_until("a master", lambda: _replica_info(controller)[0], 60)
        master, slave = (a, b) if ids[a] == master_id else (b, a)
        wait_until("the master sends acknowledged", lambda: _send(master, b"probe") == ResponseCode.SUCCESS, 30)
        acked = []
        for i in range(20):
            body = f"acknowledged-before-kill-{i}".encode()
            assert _send(master, body) == ResponseCode.SUCCESS
            acked.append(body)
        # the master proposed the caught-up slave into the SyncStateSet (ALTER_SYNC_STATE_SET)
        wait_until("both in the SyncStateSet", lambda: _replica_info(controller) == (master_id, [1, 2]), 30)
        assert _send(slave, b"refused") == ResponseCode.SERVICE_NOT_AVAILABLE
        # an unacknowledged tail: stored by the master while its slave is frozen; more than the
        # loopback socket buffers between them hold, so its end reaches the master's log only
        slave.proc.send_signal(signal.SIGSTOP)
        try:
            _send_unanswered(master, [bytes([65 + i % 26]) * 60_000 for i in range(40)] + [b"never-acknowledged-tail"])
            wait_until("the tail stored by the master", lambda: b"never-acknowledged-tail" in commit_log(master), 20)
            killed = time.monotonic()
            master.stop(signal.SIGKILL)
        finally:
            slave.proc.send_signal(signal.SIGCONT)
        first = wait_until("the slave is elected and acknowledges", lambda: _send(
            slave, b"acknowledged-after-kill") == ResponseCode.SUCCESS and time.monotonic(), 30, interval=0.05)
        print(f"\nkill -9 to first acknowledged send: {first - killed:.2f} s "
              f"(controllerHeartBeatTimeoutMills={HEARTBEAT_TIMEOUT_MS})")
        assert _replica_info(controller)[0] == ids[slave]
        assert first - killed < HEARTBEAT_TIMEOUT_MS / 1000  # within the controller's heartbeat timeout
        readable = wait_until("every acknowledged message readable from the new master",
                              lambda: (bodies := pulled(slave, TOPIC)) and set(acked) <= set(bodies) and bodies, 30)
        assert b"acknowledged-after-kill" in readable
        master.start()
        wait_until("the old master rejoins as a slave with the new master's log",
                   lambda: commit_log(master) == commit_log(slave), 60)
        assert _send(master, b"refused") == ResponseCode.SERVICE_NOT_AVAILABLE
        assert b"never-acknowledged-tail" not in commit_log(slave)  # never copied: the rejoin cut it
        assert b"never-acknowledged-tail" not in commit_log(master)
    finally:
        for x in (a, b):
            if x.process is not None and x.proc.poll() is None:
                x.stop()
