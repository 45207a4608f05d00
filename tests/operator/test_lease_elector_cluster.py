"""The Lease elector (rocketstore.broker.lease_elector) against the REAL kube-apiserver and etcd.

Electors run in this process, each with its own API client, under a ServiceAccount that has only
the Role the operator gives broker pods (desired.lease_role: get, create, update Leases), with
the design's timing (D 3 s, R 1 s, m 0.15 s). A master is "killed" by cutting its client (it stops
renewing and cannot release), or partitioned from the API server by a TCP relay that stops
passing bytes. In one process all electors share one monotonic clock, so a master's write
deadline and its successor's takeover are compared directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_support import broker_lease_kubeconfig
from polling import wait_until

from rocketstore.broker.lease_elector import (
    Action,
    Candidate,
    KubeLeaseClient,
    LeaseConflict,
    LeaseElector,
    LeaseTiming,
    decide,
    observe,
)
from rocketstore.broker.master_elector import RoleAssignment
from rocketstore.common.replica_lease import ReplicaInfo, lease_body, lease_name, parse_lease
from rocketstore.operator.desired import Owner
from rocketstore.operator.status import masters_status

pytestmark = pytest.mark.integration

NS = "leases"
STORE = "fo"
TIMING = LeaseTiming(duration=3.0, renew_interval=1.0, margin=0.15)
#: how late past D + R a takeover may come on this shared two-core machine
SLACK = 2.0


@pytest.fixture(scope="module")
def namespace(kube: Any) -> str:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": NS}})
    wait_until(f"default SA in {NS}", lambda: bool(core.list_namespaced_service_account(NS).items), 60)
    return NS


@pytest.fixture(scope="module")
def broker_config(control_plane: Any, kube: Any, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with a token of the broker pods' ServiceAccount, bound to the operator's Role."""
    return broker_lease_kubeconfig(kube, control_plane.server, Owner(STORE, namespace, "0"),
                                   tmp_path_factory.mktemp("lease") / "broker.kubeconfig")


@dataclass
class RecordingReplica:
    """Stands in for the broker (its replicas manager): records each role it is told to take."""

    replica_id: int
    max_phy_offset: int = 0
    #: every slave holds the whole (empty) log: a stopping master hands over at once
    acked_offsets: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(1, 4), 0))
    applied: list[tuple[float, RoleAssignment]] = field(default_factory=list)

    async def apply_role(self, assignment: RoleAssignment) -> None:
        self.applied.append((time.monotonic(), assignment))

    def master_since(self, epoch: int) -> float | None:
        """When this replica was told it is master of ``epoch``."""
        return next((t for t, a in self.applied if a.master_replica_id == self.replica_id
                     and a.master_epoch == epoch), None)

    @property
    def last(self) -> RoleAssignment | None:
        return self.applied[-1][1] if self.applied else None


class Cuttable:
    """A real :class:`KubeLeaseClient` that records when each successful write was sent, and that
    can be cut: from then on every call fails, as for a process killed with -9."""

    def __init__(self, inner: KubeLeaseClient) -> None:
        self.inner = inner
        self.cut = False
        self.writes: list[float] = []

    def _check(self) -> None:
        if self.cut:
            raise ConnectionError("cut")

    async def read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self._check()
        return await self.inner.read(namespace, name)

    async def _write(self, call: Callable[[], Any]) -> Mapping[str, Any]:
        self._check()
        sent = time.monotonic()
        out: Mapping[str, Any] = await call()
        self.writes.append(sent)
        return out

    async def create(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return await self._write(lambda: self.inner.create(body))

    async def replace(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        return await self._write(lambda: self.inner.replace(body))

    async def close(self) -> None:
        await self.inner.close()


class Relay:
    """A TCP relay to the API server that can stop passing bytes (a network partition): its open
    connections are dropped and new ones are accepted and left hanging."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.partitioned = False
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if self.partitioned:
            return  # accepted, never answered
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers.append(up_writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if self.partitioned:
                        return
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def partition(self) -> None:
        self.partitioned = True
        for w in self._writers:
            w.transport.abort()
        self._writers.clear()

    def heal(self) -> None:
        self.partitioned = False

    async def close(self) -> None:
        self.partition()
        if self._server is not None:
            self._server.close()


def elector(config: Path | str, replica_id: int, group: str) -> tuple[LeaseElector, Cuttable]:
    c = Cuttable(KubeLeaseClient(str(config)))
    e = LeaseElector(c, namespace=NS, cluster=STORE, broker_name=group, address=f"10.0.0.{replica_id}:10911",
                     ha_address=f"10.0.0.{replica_id}:10912", timing=TIMING)
    return e, c


async def until(what: str, check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)


def read_lease(kube: Any, group: str) -> dict[str, Any]:
    answer = client.CoordinationV1Api(kube).read_namespaced_lease(lease_name(STORE, group), NS,
                                                                   _preload_content=False)
    out: dict[str, Any] = json.loads(answer.data)
    return out


@contextlib.asynccontextmanager
async def stopped_at_end(*electors: LeaseElector) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for e in electors:
            await e.stop()


def report(line: str) -> None:
    print(f"\n[lease elector] {line}", file=sys.stderr)


# -- the scenarios ------------------------------------------------------------------------------------

def test_first_master_then_an_in_sync_slave_takes_over_a_killed_one_and_an_outsider_never(
        kube: Any, broker_config: Path) -> None:
    group = "fo-kill"

    async def scenario() -> None:
        (a, ca), (b, _), (c, _) = (elector(broker_config, i, group) for i in (1, 2, 3))
        ra, rb, rc = RecordingReplica(1), RecordingReplica(2), RecordingReplica(3)
        async with stopped_at_end(a, b, c):
            await a.start(ra)
            await until("replica 1 master of epoch 1", lambda: ra.master_since(1) is not None, 10)
            assert a.write_deadline() > time.monotonic()
            await b.start(rb)
            await c.start(rc)
            await until("2 and 3 follow 1", lambda: all(r.last is not None and r.last.master_replica_id == 1
                                                        for r in (rb, rc)), 10)
            assert rb.last is not None and rb.last.master_ha_address == "10.0.0.1:10912"
            assert b.write_deadline() == 0.0 and c.write_deadline() == 0.0
            # the master widens its SyncStateSet to replica 2 only
            assert await a.alter_sync_state_set(frozenset({1, 2}), 1) == 2
            assert await a.alter_sync_state_set(frozenset({1, 2, 3}), 1) is None  # from a stale set
            await until("2 learns the SyncStateSet", lambda: rb.last is not None
                        and rb.last.sync_state_set == {1, 2}, 5)

            ca.cut = True  # kill -9: no renewal, no release
            await until("2 master of epoch 2", lambda: rb.master_since(2) is not None,
                        TIMING.duration + TIMING.renew_interval + SLACK + 3)
            took = rb.master_since(2)
            assert took is not None
            # read after the takeover: a renewal in flight at the cut may still have succeeded
            last_renewal, deadline = ca.writes[-1], a.write_deadline()
            report(f"kill: last renewal to the new master's apply_role {took - last_renewal:.2f} s "
                   f"(D {TIMING.duration} s, R {TIMING.renew_interval} s); old master's deadline "
                   f"{took - deadline:.2f} s before")
            assert deadline < took
            assert TIMING.duration <= took - last_renewal <= TIMING.duration + TIMING.renew_interval + SLACK
            await until("3 follows 2", lambda: rc.last is not None and rc.last.master_replica_id == 2, 5)
            assert rc.master_since(2) is None and all(x.master_replica_id != 3 for _, x in rc.applied)
            lease = parse_lease(read_lease(kube, group))
            assert (lease.info.master_replica_id, lease.info.master_epoch, lease.info.sync_state_set) == \
                (2, 2, frozenset({2}))
            assert lease.info.master_address == "10.0.0.2:10911"
            assert masters_status([read_lease(kube, group)])[0]["masterReplicaId"] == 2
            # replica 3, outside the SyncStateSet, stays a slave however long 2 is gone
            await b.stop()
            await asyncio.sleep(TIMING.duration + 2 * TIMING.renew_interval)
            assert all(x.master_replica_id != 3 for _, x in rc.applied)
            assert parse_lease(read_lease(kube, group)).info.master_replica_id is None

    asyncio.run(scenario())


def test_a_stopping_master_hands_over_at_once(kube: Any, broker_config: Path) -> None:
    group = "fo-stop"

    async def scenario() -> None:
        (a, _), (b, _) = (elector(broker_config, i, group) for i in (1, 2))
        ra, rb = RecordingReplica(1), RecordingReplica(2)
        async with stopped_at_end(a, b):
            await a.start(ra)
            await until("1 master", lambda: ra.master_since(1) is not None, 10)
            await b.start(rb)
            assert await a.alter_sync_state_set(frozenset({1, 2}), 1) == 2
            await until("2 follows", lambda: rb.last is not None and rb.last.sync_state_set == {1, 2}, 5)
            stopped = time.monotonic()
            await a.stop()
            assert a.write_deadline() == 0.0
            await until("2 master of epoch 2", lambda: rb.master_since(2) is not None, 2 * TIMING.renew_interval + 1)
            took = rb.master_since(2)
            assert took is not None
            report(f"stop: release to the new master's apply_role {took - stopped:.2f} s")
            assert took - stopped < TIMING.duration

    asyncio.run(scenario())


def test_two_candidates_racing_for_an_expired_lease_exactly_one_wins(kube: Any, broker_config: Path) -> None:
    group = "fo-race"
    async def swap_race() -> None:
        """The same read, decided by both at once after D, written concurrently: one 409."""
        clients = [KubeLeaseClient(str(broker_config)) for _ in range(2)]
        try:
            # a master (replica 9) that renewed once, long ago; a renewTime with no fraction
            await clients[0].create(lease_body(
                NS, STORE, group, ReplicaInfo(9, "gone:1", "gone:2", 7, frozenset({1, 2, 9}), 4),
                lease_duration_seconds=3, renew_time="2026-01-01T00:00:00.000000Z", acquire_time=None,
                resource_version=None))
            with pytest.raises(LeaseConflict):  # created once only
                await clients[1].create(lease_body(
                    NS, STORE, group, ReplicaInfo(2, "h:1", "h:2", 1, frozenset({2}), 1), lease_duration_seconds=3,
                    renew_time=None, acquire_time=None, resource_version=None))
            obj = await clients[0].read(NS, lease_name(STORE, group))
            assert obj is not None
            lease = parse_lease(obj)
            bodies = []
            for i in (1, 2):
                me = Candidate(i, f"h{i}:1", f"h{i}:2")
                d = decide(lease, me, None, observe(lease, None, 0.0), TIMING.duration, TIMING)
                assert d.action is Action.TAKE and d.info is not None
                bodies.append(lease_body(NS, STORE, group, d.info, lease_duration_seconds=3,
                                         renew_time="2026-01-01T00:00:01.000000Z", acquire_time=None,
                                         resource_version=lease.resource_version))
            results = await asyncio.gather(*(c.replace(b) for c, b in zip(clients, bodies, strict=True)),
                                           return_exceptions=True)
            wins = [r for r in results if not isinstance(r, BaseException)]
            assert len(wins) == 1 and sum(isinstance(r, LeaseConflict) for r in results) == 1, results
            assert parse_lease(wins[0]).info.master_epoch == 8
        finally:
            for c in clients:
                await c.close()

    asyncio.run(swap_race())

    async def electors_race() -> None:
        """Two electors started together on an expired Lease: one master of the next epoch."""
        (a, _), (b, _) = (elector(broker_config, i, group) for i in (1, 2))
        ra, rb = RecordingReplica(1), RecordingReplica(2)
        async with stopped_at_end(a, b):
            await asyncio.gather(a.start(ra), b.start(rb))
            await until("a master of epoch 9", lambda: any(r.master_since(9) for r in (ra, rb)),
                        TIMING.duration + TIMING.renew_interval + SLACK + 3)
            await asyncio.sleep(2 * TIMING.renew_interval)
            masters = [r.replica_id for r in (ra, rb) for _, x in r.applied if x.master_replica_id == r.replica_id]
            assert len(masters) == 1, (ra.applied, rb.applied)
            loser = rb if masters == [1] else ra
            assert loser.last is not None and loser.last.master_replica_id == masters[0]
            assert parse_lease(read_lease(kube, group)).info.master_epoch == 9

    asyncio.run(electors_race())


def test_a_partitioned_master_stops_acknowledging_before_anyone_takes_over(
        control_plane: Any, kube: Any, broker_config: Path, tmp_path: Path) -> None:
    group = "fo-partition"
    host, _, port = control_plane.server.removeprefix("https://").rpartition(":")

    async def scenario() -> None:
        relay = Relay(host, int(port))
        relayed = broker_config.read_text().replace(control_plane.server, f"https://127.0.0.1:{await relay.start()}")
        (tmp_path / "relayed.kubeconfig").write_text(relayed)
        (a, ca), (b, _) = elector(tmp_path / "relayed.kubeconfig", 1, group), elector(broker_config, 2, group)
        ra, rb = RecordingReplica(1), RecordingReplica(2)
        try:
            async with stopped_at_end(a, b):
                await a.start(ra)
                await until("1 master", lambda: ra.master_since(1) is not None, 10)
                await b.start(rb)
                assert await a.alter_sync_state_set(frozenset({1, 2}), 1) == 2
                await until("2 follows", lambda: rb.last is not None and rb.last.sync_state_set == {1, 2}, 5)
                await asyncio.sleep(TIMING.renew_interval)
                relay.partition()
                await until("1's deadline passes", lambda: a.write_deadline() <= time.monotonic(), TIMING.duration)
                assert rb.master_since(2) is None, "taken over while the old master could still acknowledge"
                await until("2 master of epoch 2", lambda: rb.master_since(2) is not None,
                            TIMING.duration + TIMING.renew_interval + SLACK + 3)
                took = rb.master_since(2)
                last_renewal, deadline = ca.writes[-1], a.write_deadline()
                assert took is not None and 0 < deadline < took
                report(f"partition: last renewal to the new master's apply_role {took - last_renewal:.2f} s; "
                       f"old master stopped acknowledging {took - deadline:.2f} s before")
                relay.heal()
                await until("1 follows 2", lambda: ra.last is not None and ra.last.master_replica_id == 2,
                            4 * TIMING.renew_interval + 2 * TIMING.renew_interval)
                assert a.write_deadline() == 0.0
        finally:
            await relay.close()

    asyncio.run(scenario())
