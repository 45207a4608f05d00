"""ControllerElector against a stand-in for Apache RocketMQ 5.3.3's controller (our RemotingServer
answering the controller's request codes): the broker-id grant and its files, registration and
the write deadline. Apache's real controller:
tests/compat/apache_broker/test_controller_failover_against_rocketmq.py."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.controller_elector import BrokerMetadata, ControllerElector, sync_state_set_of
from rocketstore.broker.master_elector import RoleAssignment
from rocketstore.broker.server import Connection, RemotingServer
from rocketstore.remoting.body import SyncStateSet
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import ProtocolError, RemotingCommand
from rocketstore.remoting.headers import ApplyBrokerIdRequestHeader


class FakeController:
    """One controller that leads, grants ids from 1 and names ``master_id`` master of epoch 1."""

    def __init__(self, master_id: int | None = None) -> None:
        self.server = RemotingServer("127.0.0.1", 0)
        self.calls: Counter[int] = Counter()
        self.applied: list[ApplyBrokerIdRequestHeader] = []
        self.master_id = master_id
        for code in (RequestCode.CONTROLLER_GET_METADATA_INFO, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                     RequestCode.CONTROLLER_APPLY_BROKER_ID, RequestCode.CONTROLLER_REGISTER_BROKER,
                     RequestCode.CONTROLLER_GET_REPLICA_INFO, RequestCode.BROKER_HEARTBEAT):
            self.server.handlers[code] = self.handle

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def handle(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        self.calls[request.code] += 1
        code = request.code
        if code == RequestCode.BROKER_HEARTBEAT:
            return None
        if code == RequestCode.CONTROLLER_GET_METADATA_INFO:
            return request.response(ResponseCode.SUCCESS, ext_fields={"isLeader": "true"})
        if code == RequestCode.CONTROLLER_GET_NEXT_BROKER_ID:
            return request.response(ResponseCode.SUCCESS, ext_fields={"nextBrokerId": str(len(self.applied) + 1)})
        if code == RequestCode.CONTROLLER_APPLY_BROKER_ID:
            self.applied.append(ApplyBrokerIdRequestHeader.from_ext_fields(request.ext_fields))
            return request.response(ResponseCode.SUCCESS)
        fields = {} if self.master_id is None else {
            "masterBrokerId": str(self.master_id), "masterAddress": "127.0.0.1:20911", "masterEpoch": "1",
            "syncStateSetEpoch": "1"}
        body = SyncStateSet(sync_state_set=[] if self.master_id is None else [self.master_id],
                            sync_state_set_epoch=1).encode()
        return request.response(ResponseCode.SUCCESS, ext_fields=fields, body=body)


class StubReplica:
    def __init__(self, replica_id: int) -> None:
        self.replica_id = replica_id
        self.max_phy_offset = 100
        self.last_epoch = 0
        self.confirm_offset = 100
        self.assignments: list[RoleAssignment] = []

    async def apply_role(self, assignment: RoleAssignment) -> None:
        self.assignments.append(assignment)


def config(controller: str) -> BrokerConfig:
    cfg = BrokerConfig()
    cfg.broker_cluster_name, cfg.broker_name = "C", "g"
    cfg.enable_controller_mode = True
    cfg.controller_addr = controller
    cfg.broker_heartbeat_interval = 100
    cfg.controller_heart_beat_timeout_mills = 3000
    return cfg


def test_broker_metadata_is_5_3_3s_format() -> None:
    assert BrokerMetadata("C", "g", 2).encode() == "C#g#2"
    temp = BrokerMetadata.decode("C#g#3#10.0.0.1:10911;1700000000000")
    assert temp == BrokerMetadata("C", "g", 3, "10.0.0.1:10911;1700000000000")
    assert temp.encode() == "C#g#3#10.0.0.1:10911;1700000000000"
    with pytest.raises(ValueError):
        BrokerMetadata.decode("C#g")


def test_sync_state_set_body() -> None:
    assert sync_state_set_of(b'{"syncStateSet":[1,2],"syncStateSetEpoch":4}') == \
        SyncStateSet(sync_state_set=[1, 2], sync_state_set_epoch=4)
    with pytest.raises(ProtocolError):
        sync_state_set_of(b'{"syncStateSet":["x"]}')


def test_broker_id_is_granted_once_and_kept_in_the_store_root(tmp_path: Path) -> None:
    async def scenario() -> None:
        fake = FakeController()
        await fake.server.start()
        try:
            elector = ControllerElector(config(fake.addr), "127.0.0.1:10911")
            assert await elector.allocate_broker_id(tmp_path) == 1
            assert (tmp_path / "brokerIdentity").read_text() == "C#g#1"
            assert not (tmp_path / "brokerIdentity-temp").exists()
            assert fake.applied[0].register_check_code.startswith("127.0.0.1:10911;")
            # a restart reads the file: the controller is not asked again
            again = ControllerElector(config(fake.addr), "127.0.0.1:10911")
            assert await again.allocate_broker_id(tmp_path) == 1
            assert fake.calls[RequestCode.CONTROLLER_GET_NEXT_BROKER_ID] == 1
            # killed after the temp file was written: the same id is applied for with the same code
            other = tmp_path / "other"
            other.mkdir()
            (other / "brokerIdentity-temp").write_text("C#g#5#127.0.0.1:10912;42")
            crashed = ControllerElector(config(fake.addr), "127.0.0.1:10912")
            assert await crashed.allocate_broker_id(other) == 5
            assert (fake.applied[-1].applied_broker_id, fake.applied[-1].register_check_code) == \
                (5, "127.0.0.1:10912;42")
            # another group's identity is refused
            with pytest.raises(ValueError):
                cfg = config(fake.addr)
                cfg.broker_name = "h"
                await ControllerElector(cfg, "127.0.0.1:10911").allocate_broker_id(tmp_path)
        finally:
            await fake.server.stop(0)

    asyncio.run(scenario())


def test_write_deadline_follows_confirmed_heartbeats_and_the_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        fake = FakeController(master_id=1)
        await fake.server.start()
        elector = ControllerElector(config(fake.addr), "127.0.0.1:20911")
        replica = StubReplica(1)
        try:
            await elector.start(replica)
            deadline = time.monotonic() + 10
            while not (replica.assignments and elector.write_deadline() > time.monotonic()):
                assert time.monotonic() < deadline, "never became master with a deadline"
                await asyncio.sleep(0.05)
            assert replica.assignments[0].master_replica_id == 1
            assert elector.write_deadline() <= time.monotonic() + 3.0
            assert fake.calls[RequestCode.BROKER_HEARTBEAT] >= 1
        finally:
            await fake.server.stop(0)
        # the controller's side of the connection is gone: no more acknowledgements at once
        deadline = time.monotonic() + 5
        while elector.write_deadline() != 0.0:
            assert time.monotonic() < deadline, "the deadline outlived the connection"
            await asyncio.sleep(0.05)
        await elector.stop()

    asyncio.run(scenario())


def test_a_slave_has_no_write_deadline(tmp_path: Path) -> None:
    async def scenario() -> None:
        fake = FakeController(master_id=2)
        await fake.server.start()
        elector = ControllerElector(config(fake.addr), "127.0.0.1:20912")
        replica = StubReplica(1)
        try:
            await elector.start(replica)
            deadline = time.monotonic() + 10
            while fake.calls[RequestCode.CONTROLLER_GET_REPLICA_INFO] < 2:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert replica.assignments[0].master_replica_id == 2
            assert replica.assignments[0].master_ha_address == "127.0.0.1:20912"
            assert elector.write_deadline() == 0.0
        finally:
            await elector.stop()
            await fake.server.stop(0)

    asyncio.run(scenario())
