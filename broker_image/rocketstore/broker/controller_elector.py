"""ControllerElector: Apache RocketMQ 5.3.3's controller as a broker group's source of truth (off Kubernetes).

With ``enableControllerMode=true`` and ``controllerAddr`` a broker speaks the broker side of 5.3.3's
controller protocol (Apache's ReplicasManager and BrokerOuterAPI), so an unchanged
``rocketmq-controller`` (standalone, or embedded in Apache's name server) elects our masters:

* **the leader**: CONTROLLER_GET_METADATA_INFO to each address of ``controllerAddr`` until one
  says it leads or names the leader; asked again whenever a request fails;
* **the broker id** (:func:`allocate_broker_id`, before the broker is built, since the store's HA
  handshake carries it): ``brokerIdentity`` in the store root holds ``cluster#name#id`` once the
  controller granted the id; until then ``brokerIdentity-temp`` holds ``cluster#name#id#checkCode``
  (``address;millis``), so a broker killed between CONTROLLER_GET_NEXT_BROKER_ID and
  CONTROLLER_APPLY_BROKER_ID claims the same id again with the same check code;
* **registration**: CONTROLLER_REGISTER_BROKER, whose answer names the group's master; when
  there is none, CONTROLLER_ELECT_MASTER (the broker-triggered election);
* **heartbeats**: BROKER_HEARTBEAT (one-way) every ``brokerHeartbeatInterval`` to every
  controller address, with this replica's last epoch, max offset, confirm offset, election
  priority and ``controllerHeartBeatTimeoutMills`` (how long the controller waits before it deems
  this broker dead and elects another);
* **role changes**: the controller's NOTIFY_BROKER_ROLE_CHANGED reaches the replicas manager
  through the admin processor; CONTROLLER_GET_REPLICA_INFO, asked after every heartbeat, applies
  any changed decision too (Apache asks every ``syncBrokerMetadataPeriod``; we ask each heartbeat
  because the answer also renews the write deadline), and elects when the group has no master;
* **the SyncStateSet**: CONTROLLER_ALTER_SYNC_STATE_SET, the new set's epoch or None when refused.

The write deadline (docs/failover.md's timing argument with the controller's heartbeat timeout
``T`` as the lease): a heartbeat sent at ``t`` and followed, on the same connection, by a
CONTROLLER_GET_REPLICA_INFO that the leader answered naming this replica master, reached the
controller before that answer was written; the controller deems this broker alive until at least
``t + T`` on its clock and elects no one else before. So the master acknowledges until
``t + T - m`` (``m``: the clock-rate margin) and no longer unless a later heartbeat was confirmed.
A master cut off from the controller stops acknowledging on its own within ``T``.

5.3.3's controller also elects at once when it sees a broker's connection close
(onBrokerChannelClose), without waiting for ``T``: that is why a kill -9 fails over in well under a
second. So the deadline also ends as soon as this broker sees the connection its confirmed
heartbeat went over close. What no heartbeat-based fence closes: a connection the controller
sees closed before this broker does (torn down on the controller's side only) leaves a window
until this broker's next heartbeat or request on it fails (at most ``brokerHeartbeatInterval``
plus the TCP error's arrival). Apache's
broker does not do this (its controller mode keeps a partitioned master writing, and only the
SyncStateSet waits slow it down); ours does because the new master elected after ``T`` would
otherwise acknowledge in the same interval. Not covered: a master elected by an operator
(``mqadmin electMaster``) while the old one is alive and connected ends the old deadline only at
its next GET_REPLICA_INFO (within ``brokerHeartbeatInterval``), as a notification does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.master_elector import Replica, RoleAssignment
from rocketstore.broker.replicas_manager import ha_address_of
from rocketstore.client.remoting_client import RemotingClient, RemotingClientError, RemotingError, split_namesrv_addr
from rocketstore.common.fastjson import parse_fastjson
from rocketstore.remoting.body import SyncStateSet
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import ProtocolError, RemotingCommand
from rocketstore.remoting.header_codec import Header
from rocketstore.remoting.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader,
    ElectMasterResponseHeader,
    GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader,
    GetNextBrokerIdResponseHeader,
    GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader,
    RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
)

log = logging.getLogger(__name__)

#: BrokerOuterAPI's fixed timeout of every controller request but the heartbeat
CONTROLLER_TIMEOUT_S = 3.0
#: the write deadline's margin for clock-rate drift between the broker and the controller
CLOCK_DRIFT = 0.05


class ControllerUnavailable(Exception):
    """No controller of ``controllerAddr`` answered, or none leads."""


@dataclass(frozen=True)
class BrokerMetadata:
    """``brokerIdentity`` (granted) or ``brokerIdentity-temp`` (applied for, with its check code)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str | None = None

    def encode(self) -> str:
        fields = [self.cluster_name, self.broker_name, str(self.broker_id)]
        return "#".join(fields if self.register_check_code is None else [*fields, self.register_check_code])

    @classmethod
    def decode(cls, text: str) -> BrokerMetadata:
        parts = text.strip().split("#")
        if len(parts) not in (3, 4) or not parts[2].lstrip("-").isdigit():
            raise ValueError(f"broker metadata {text!r} is not cluster#name#id[#checkCode]")
        return cls(parts[0], parts[1], int(parts[2]), parts[3] if len(parts) == 4 else None)


def broker_identity_path(store_root: Path) -> Path:
    """MessageStoreConfig.getStorePathBrokerIdentity's default: ``brokerIdentity`` in the store root."""
    return store_root / "brokerIdentity"


def _read_metadata(path: Path, broker_config: BrokerConfig) -> BrokerMetadata | None:
    if not path.exists():
        return None
    metadata = BrokerMetadata.decode(path.read_text())
    if (metadata.cluster_name, metadata.broker_name) != (broker_config.broker_cluster_name, broker_config.broker_name):
        raise ValueError(f"{path} belongs to {metadata.cluster_name}/{metadata.broker_name}, not "
                         f"{broker_config.broker_cluster_name}/{broker_config.broker_name}")
    return metadata


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def sync_state_set_of(body: bytes) -> SyncStateSet:
    """The SyncStateSet JSON body of a controller answer (fastjson may leave keys unquoted)."""
    value = parse_fastjson(body.decode("utf-8")) if body else {}
    if not isinstance(value, dict):
        raise ProtocolError(f"SyncStateSet body {body!r} is not an object")
    members = value.get("syncStateSet") or []
    epoch = value.get("syncStateSetEpoch") or 0
    if not isinstance(members, list) or not all(isinstance(m, int) for m in members) or not isinstance(epoch, int):
        raise ProtocolError(f"SyncStateSet body {body!r} is malformed")
    return SyncStateSet(sync_state_set=members, sync_state_set_epoch=epoch)


class ControllerElector:
    """Implements :class:`~rocketstore.broker.master_elector.MasterElector` against Apache's controller."""

    def __init__(self, broker_config: BrokerConfig, broker_addr: str, client: RemotingClient | None = None) -> None:
        self.broker_config = broker_config
        self.broker_addr = broker_addr
        self.addrs = split_namesrv_addr(broker_config.controller_addr, "controller")
        self.client = client or RemotingClient(timeout=CONTROLLER_TIMEOUT_S)
        self.leader: str | None = None
        self.broker_id: int | None = None
        self.replica: Replica | None = None
        #: the last decision seen from the controller (its master epoch guards the write deadline)
        self.assignment: RoleAssignment | None = None
        self._deadline = 0.0
        #: the connection to the leader the last confirmed heartbeat went over
        self._channel: object | None = None
        self._task: asyncio.Task[None] | None = None

    # -- the controller's leader ---------------------------------------------------------------
    async def _call(self, code: int, header: Header, body: bytes = b"", *,
                    accept: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """A request to the leader, found again once when it fails or says it no longer leads."""
        for attempt in range(2):
            leader = self.leader or await self.find_leader()
            try:
                response = await self.client.invoke_async(leader, self.client.request(code, header, body),
                                                          CONTROLLER_TIMEOUT_S)
            except RemotingClientError:
                self.leader = None
                if attempt:
                    raise
                continue
            if response.code == ResponseCode.CONTROLLER_NOT_LEADER and not attempt:
                self.leader = None
                continue
            if response.code not in accept:
                raise RemotingError(response.code, response.remark, leader)
            return response
        raise ControllerUnavailable("no controller leader answered")

    async def find_leader(self) -> str:
        """CONTROLLER_GET_METADATA_INFO to each address until one leads or names the leader."""
        for addr in self.addrs:
            try:
                response = await self.client.call_async(addr, RequestCode.CONTROLLER_GET_METADATA_INFO,
                                                        timeout=CONTROLLER_TIMEOUT_S)
                meta = GetMetaDataResponseHeader.from_ext_fields(response.ext_fields)
            except (RemotingClientError, ProtocolError) as exc:
                log.debug("controller %s: %s", addr, exc)
                continue
            leader = addr if meta.is_leader else meta.controller_leader_address
            if leader:
                if leader != self.leader:
                    log.info("controller leader: %s", leader)
                self.leader = leader
                return leader
        raise ControllerUnavailable(f"no controller of {';'.join(self.addrs)} leads")

    # -- the broker id -------------------------------------------------------------------------
    async def allocate_broker_id(self, store_root: Path) -> int:
        """This broker's id in its group: from ``brokerIdentity``, else applied for at the controller
        (GET_NEXT_BROKER_ID, ``brokerIdentity-temp``, APPLY_BROKER_ID, ``brokerIdentity``)."""
        cfg = self.broker_config
        path = broker_identity_path(store_root)
        temp = path.with_name(path.name + "-temp")
        granted = _read_metadata(path, cfg)
        if granted is not None:
            self.broker_id = granted.broker_id
            return granted.broker_id
        store_root.mkdir(parents=True, exist_ok=True)
        applied = _read_metadata(temp, cfg)
        if applied is None:
            response = await self._call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, GetNextBrokerIdRequestHeader(
                cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name))
            next_id = GetNextBrokerIdResponseHeader.from_ext_fields(response.ext_fields).next_broker_id
            if next_id is None:
                raise ProtocolError("CONTROLLER_GET_NEXT_BROKER_ID answered no nextBrokerId")
            applied = BrokerMetadata(cfg.broker_cluster_name, cfg.broker_name, next_id,
                                     f"{self.broker_addr};{int(time.time() * 1000)}")
            _write_atomically(temp, applied.encode())
        assert applied.register_check_code is not None
        try:
            await self._call(RequestCode.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(
                cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                applied_broker_id=applied.broker_id, register_check_code=applied.register_check_code))
        except RemotingError:
            temp.unlink(missing_ok=True)  # taken by another broker: the next attempt asks for the next id
            raise
        _write_atomically(path, BrokerMetadata(cfg.broker_cluster_name, cfg.broker_name, applied.broker_id).encode())
        temp.unlink(missing_ok=True)
        self.broker_id = applied.broker_id
        log.info("broker id %d granted by the controller (%s)", applied.broker_id, path)
        return applied.broker_id

    # -- MasterElector -------------------------------------------------------------------------
    async def start(self, replica: Replica) -> None:
        self.replica = replica
        self.broker_id = replica.replica_id
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller-elector")

    async def stop(self) -> None:
        self._deadline = 0.0
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.client.close()

    def write_deadline(self) -> float:
        """The confirmed heartbeat's deadline, while the connection it went over stays open: the
        controller elects another master as soon as it sees that connection close (5.3.3's
        onBrokerChannelClose), without waiting for the heartbeat timeout."""
        leader = self.leader
        if leader is None or self.client.live_connection(leader) is not self._channel:
            return 0.0
        return self._deadline

    def wake(self) -> None:
        """Nothing to do: Apache's controller tells the broker of a new master itself
        (NOTIFY_BROKER_ROLE_CHANGED), and the heartbeat's SYNC answer follows within its interval."""

    async def alter_sync_state_set(self, members: frozenset[int], sync_state_set_epoch: int) -> int | None:
        current = self.assignment
        if current is None or current.master_replica_id != self.broker_id:
            return None
        header = AlterSyncStateSetRequestHeader(broker_name=self.broker_config.broker_name,
                                                master_broker_id=current.master_replica_id,
                                                master_epoch=current.master_epoch, invoke_time=int(time.time() * 1000))
        body = SyncStateSet(sync_state_set=sorted(members), sync_state_set_epoch=sync_state_set_epoch).encode()
        try:
            response = await self._call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, header, body)
            accepted = sync_state_set_of(response.body)
        except (RemotingClientError, ProtocolError, ControllerUnavailable) as exc:
            log.warning("ALTER_SYNC_STATE_SET %s refused or unanswered: %s", sorted(members), exc)
            return None
        self.assignment = RoleAssignment(current.master_replica_id, current.master_address, current.master_ha_address,
                                         current.master_epoch, frozenset(accepted.sync_state_set),
                                         accepted.sync_state_set_epoch)
        return accepted.sync_state_set_epoch

    # -- the loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        """Register (retrying as Apache's startBasicService does), then heartbeat and sync."""
        interval = max(self.broker_config.broker_heartbeat_interval, 100) / 1000
        while True:
            try:
                await self._register()
                break
            except (RemotingClientError, ProtocolError, ControllerUnavailable) as exc:
                log.warning("registering with the controller failed (retrying): %s", exc)
                await asyncio.sleep(interval)
        while True:
            try:
                await self._tick()
            except (RemotingClientError, ProtocolError, ControllerUnavailable) as exc:
                log.warning("controller: %s", exc)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller elector tick failed")
            await asyncio.sleep(interval)

    async def _register(self) -> None:
        cfg = self.broker_config
        assert self.broker_id is not None
        response = await self._call(RequestCode.CONTROLLER_REGISTER_BROKER, RegisterBrokerToControllerRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_id=self.broker_id,
            broker_address=self.broker_addr, invoke_time=int(time.time() * 1000)))
        answer = RegisterBrokerToControllerResponseHeader.from_ext_fields(response.ext_fields)
        self._heartbeat()
        if answer.master_broker_id is None or not answer.master_address or answer.master_epoch is None:
            await self._elect()
            return
        members = sync_state_set_of(response.body)
        await self._apply(answer.master_broker_id, answer.master_address, answer.master_epoch,
                          frozenset(members.sync_state_set),
                          answer.sync_state_set_epoch or members.sync_state_set_epoch)

    async def _elect(self) -> None:
        """CONTROLLER_ELECT_MASTER as a broker triggers it: the controller picks among the alive
        members of the SyncStateSet (this one only when it qualifies)."""
        cfg = self.broker_config
        assert self.broker_id is not None
        response = await self._call(RequestCode.CONTROLLER_ELECT_MASTER, ElectMasterRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, broker_id=self.broker_id,
            invoke_time=int(time.time() * 1000)),
            accept=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST))
        answer = ElectMasterResponseHeader.from_ext_fields(response.ext_fields)
        if answer.master_broker_id is None or not answer.master_address or answer.master_epoch is None:
            return
        members = sync_state_set_of(response.body)
        await self._apply(answer.master_broker_id, answer.master_address, answer.master_epoch,
                          frozenset(members.sync_state_set), answer.sync_state_set_epoch or 0)

    def _heartbeat(self) -> float:
        """BROKER_HEARTBEAT to every controller (one-way); returns when it was sent."""
        cfg = self.broker_config
        replica = self.replica
        assert replica is not None
        header = BrokerHeartbeatRequestHeader(
            cluster_name=cfg.broker_cluster_name, broker_addr=self.broker_addr, broker_name=cfg.broker_name,
            broker_id=self.broker_id, epoch=replica.last_epoch, max_offset=replica.max_phy_offset,
            confirm_offset=replica.confirm_offset, heartbeat_timeout_mills=cfg.controller_heart_beat_timeout_mills,
            election_priority=cfg.broker_election_priority)
        sent = time.monotonic()
        targets = self.addrs if self.leader is None or self.leader in self.addrs else [*self.addrs, self.leader]
        for addr in targets:
            try:
                self.client.invoke_oneway(addr, self.client.request(RequestCode.BROKER_HEARTBEAT, header))
            except (RemotingClientError, OSError) as exc:
                log.debug("heartbeat to controller %s: %s", addr, exc)
        return sent

    async def _tick(self) -> None:
        """One heartbeat, then CONTROLLER_GET_REPLICA_INFO: applies a newer decision, elects when the
        group has no master, and renews the write deadline when the answer names this replica."""
        sent = self._heartbeat()
        leader = self.leader
        channel = self.client.live_connection(leader) if leader is not None else None
        response = await self._call(RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                    GetReplicaInfoRequestHeader(broker_name=self.broker_config.broker_name),
                                    accept=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST))
        if response.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
            await self._register()
            return
        info = GetReplicaInfoResponseHeader.from_ext_fields(response.ext_fields)
        members = sync_state_set_of(response.body)
        if info.master_broker_id is None or not info.master_address or info.master_epoch is None:
            self._deadline = 0.0
            await self._elect()
            return
        if (info.master_broker_id == self.broker_id and channel is not None and leader is not None
                and self.leader == leader and self.client.live_connection(leader) is channel):
            timeout = self.broker_config.controller_heart_beat_timeout_mills / 1000
            self._deadline = sent + timeout * (1 - CLOCK_DRIFT)
            self._channel = channel
        else:
            self._deadline = 0.0
        current = self.assignment
        decision = (info.master_broker_id, info.master_address, info.master_epoch, members.sync_state_set_epoch)
        if current is None or decision != (current.master_replica_id, current.master_address, current.master_epoch,
                                           current.sync_state_set_epoch):
            # only a changed decision: applying the same one again would undo the replica's
            # correction of the master's HA address (ReplicasManager.registered)
            await self._apply(info.master_broker_id, info.master_address, info.master_epoch,
                              frozenset(members.sync_state_set), members.sync_state_set_epoch)

    async def _apply(self, master_id: int, master_address: str, master_epoch: int, members: frozenset[int],
                     sync_state_set_epoch: int) -> None:
        assert self.replica is not None
        assignment = RoleAssignment(master_id, master_address, ha_address_of(master_address), master_epoch, members,
                                    sync_state_set_epoch)
        self.assignment = assignment
        await self.replica.apply_role(assignment)
