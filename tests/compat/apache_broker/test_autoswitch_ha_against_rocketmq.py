"""Controller-mode replication from an Apache RocketMQ 5.3.3 master to our slave (AutoSwitch protocol).

Apache's name server runs its embedded controller (enableControllerInNamesrv, a one-node DLedger
group, which serves the controller's requests on its DLedger port); Apache's broker, in controller
mode, registers with it and is elected master of epoch 1. Our broker, in controller mode too, is
told by NOTIFY_BROKER_ROLE_CHANGED (as Apache's controller would tell it, once our broker speaks
the controller protocol: issue 25 step 4) to follow that master. It then speaks Apache's
AutoSwitchHAConnection's protocol: its handshake, the epoch entries, the 36-byte transfer headers.
Proof: our CommitLog holds Apache's bytes, and our epoch file Apache's epochs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess_broker import RawClient, start_broker
from java_rocketmq import AnchorError, RocketMQAnchor, embedded_controller_config
from polling import wait_until
from ports import free_port

from rocketstore.client.remoting_client import RemotingClient
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import NotifyBrokerRoleChangedRequestHeader
from rocketstore.store.epoch_file import decode_epoch_file

pytestmark = pytest.mark.integration

SEGMENT = 131072  # both sides must cut segments alike
BROKER_NAME = "autoswitch-pair"
MESSAGES = 40


@pytest.fixture
def apache_master(java_client_built: None, tmp_path: Path) -> Iterator[RocketMQAnchor]:
    workdir = tmp_path / "apache"
    workdir.mkdir()
    dledger_port = free_port()
    anchor = RocketMQAnchor(
        workdir, version="5.3.3", broker_name=BROKER_NAME,
        namesrv_config=embedded_controller_config(workdir, dledger_port, "autoswitch"),
        broker_config={"enableControllerMode": "true", "mappedFileSizeCommitLog": str(SEGMENT),
                       "brokerIP2": "127.0.0.1"})
    anchor.broker_config["controllerAddr"] = f"127.0.0.1:{dledger_port}"  # the controller answers on its DLedger port
    anchor.broker_port = free_port(also=(-2, 1))
    anchor.broker_config["haListenPort"] = str(anchor.broker_port + 1)
    try:
        anchor.start()
    except AnchorError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield anchor
    finally:
        anchor.stop()


def apache_epochs(anchor: RocketMQAnchor) -> list[tuple[int, int]]:
    path = anchor.store_dir / "epochFileCheckpoint"
    return [(e.epoch, e.start_offset) for e in decode_epoch_file(path.read_text())] if path.exists() else []


def test_our_slave_replicates_an_apache_controller_mode_master(apache_master: RocketMQAnchor, tmp_path: Path) -> None:
    anchor = apache_master
    # Apache's broker registers with its controller and elects itself: epoch 1 from offset 0
    wait_until("Apache's broker is master of epoch 1", lambda: apache_epochs(anchor)[-1:] == [(1, 0)], 60)
    host, _, port = anchor.broker_addr.rpartition(":")
    client = RawClient(host, int(port))
    try:
        for i in range(MESSAGES):
            assert client.send_message("AutoSwitchTopic", f"apache-master-{i}".encode() * 20).code == \
                ResponseCode.SUCCESS
    finally:
        client.close()

    # in this process, with no elector: ``rocketstore broker`` refuses controller mode without
    # controllerAddr or controllerLeaseEnable, and the notification plays the controller here
    ours_store = tmp_path / "ours"
    ours = start_broker(ours_store, broker_name=BROKER_NAME, enable_controller_mode=True, broker_id=7,
                        broker_ip2="127.0.0.1", ha_send_heartbeat_interval=1000, mapped_file_size_commit_log=SEGMENT)
    try:
        header = NotifyBrokerRoleChangedRequestHeader(master_address=anchor.broker_addr, master_epoch=1,
                                                      sync_state_set_epoch=1, master_broker_id=1)
        body = json.dumps({"syncStateSet": [1], "syncStateSetEpoch": 1}).encode()
        with RemotingClient() as remoting:
            answer = remoting.call(f"127.0.0.1:{ours.port}", RequestCode.NOTIFY_BROKER_ROLE_CHANGED, header, body)
        assert answer.code == ResponseCode.SUCCESS
        apache_log = anchor.store_dir / "commitlog" / f"{0:020d}"
        our_log = ours_store / "commitlog" / f"{0:020d}"
        wait_until("our CommitLog holds Apache's bytes",
                   lambda: our_log.exists() and our_log.read_bytes() == apache_log.read_bytes(), 60)
        assert b"apache-master-39" in our_log.read_bytes()
        ours_epochs = [(e.epoch, e.start_offset)
                       for e in decode_epoch_file((ours_store / "epochFileCheckpoint").read_text())]
        assert ours_epochs == apache_epochs(anchor)
    finally:
        ours.stop()
