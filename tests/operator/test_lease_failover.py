"""Failover of broker PROCESSES by the Kubernetes Lease elector, against the REAL kube-apiserver
(issue 25 step 3 wired; the same scenario as the compat test with Apache's controller,
tests/compat/apache_broker/test_controller_failover_against_rocketmq.py).

Two ``rocketstore broker`` processes of one group run with ``enableControllerMode=true``,
``controllerLeaseEnable=true`` and ``allAckInSyncStateSet=true``, each with a kubeconfig holding a
token of the broker pods' ServiceAccount (only the operator's Lease Role). One takes the Lease;
kill -9 of it makes the in-sync slave take over after D (3 s) of unchanged renewals; the killed
one restarts, rejoins as a slave, cuts any unacknowledged tail and ends with the new master's
CommitLog byte for byte. A kill loop repeats that and counts acknowledged and consumed messages;
a SIGSTOP longer than D checks that a paused master acknowledges nothing once it resumes. A
SIGTERM of the master while a sender sends without pause is the planned hand-over (a rolling
restart, a drain): the master fences, hands the Lease to the slave holding its log, and the
longest gap between two acknowledged sends is the write pause docs/failover.md reports. An admin's
hand-over request (CONTROLLER_ELECT_MASTER to the master) does the same without the exit: the old
master stays up, follows the new one and rejoins its SyncStateSet.
Run under ``flock /tmp/rocketstore-k8s.lock`` (it starts the control plane).
"""

from __future__ import annotations

import collections
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from inprocess_broker import RawClient
from kubernetes import client
from lease_group import commit_log, group_conf, lease_view, pulled, send, send_unanswered
from operator_support import broker_lease_kubeconfig
from polling import wait_until
from replica_log import acknowledged_sends, first_acknowledged

from rocketstore.client import BrokerAdmin, RemotingError
from rocketstore.operator.desired import Owner
from rocketstore.remoting.codes import ResponseCode

pytestmark = pytest.mark.integration

NS = "lease-failover"
TOPIC = "LeaseFailoverTopic"
#: a new master acknowledges within this of a kill -9: D 3 s + R 1 s + room for a busy CI machine
#: (the design's goal of 5 s is measured by bench/run_failover_bench.py, where it holds with little room)
TAKEOVER_LIMIT_S = 8.0
#: kill/rejoin cycles of the loop (each about 10 s): the 20 issue 25 asks of CI, as
#: bench/run_failover_bench.py runs them (LEASE_FAILOVER_CYCLES=2 for a quick look)
KILL_CYCLES = int(os.environ.get("LEASE_FAILOVER_CYCLES", "20"))
#: SIGTERM/rejoin cycles of the hand-over test; bench/run_failover_bench.py --handover sets 20
HANDOVER_CYCLES = int(os.environ.get("LEASE_HANDOVER_CYCLES", "3"))
#: the longest write pause a hand-over may cause in this test: the goal is 1 s (R plus the
#: promotion, measured by the bench); the rest is room for a busy CI machine
HANDOVER_PAUSE_LIMIT_S = 5.0


@pytest.fixture(scope="module")
def kubeconfig(control_plane: Any, kube: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with a token of the broker pods' ServiceAccount, bound to the operator's Role."""
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": NS}})
    wait_until(f"default SA in {NS}", lambda: bool(core.list_namespaced_service_account(NS).items), 60)
    return broker_lease_kubeconfig(kube, control_plane.server, Owner("fo", NS, "0"),
                                   tmp_path_factory.mktemp("lease-failover") / "broker.kubeconfig")


def _group(tmp: Path, group: str, kubeconfig: Path, replicas: int = 2) -> list[Broker]:
    brokers = []
    for replica_id in range(1, replicas + 1):
        (tmp / f"{group}-{replica_id}").mkdir()
        brokers.append(Broker(tmp / f"{group}-{replica_id}",
                              group_conf(group, replica_id, NS, kubeconfig, "127.0.0.1")))
    return brokers


@pytest.fixture
def group(request: pytest.FixtureRequest, kubeconfig: Path, tmp_path: Path) -> Iterator[tuple[str, list[Broker]]]:
    name = f"lfo-{request.node.name.removeprefix('test_')[:20].replace('_', '-')}"
    brokers = _group(tmp_path, name, kubeconfig)
    for broker in brokers:
        broker.start()
    try:
        yield name, brokers
    finally:
        for broker in brokers:
            if broker.process is not None and broker.proc.poll() is None:
                broker.proc.send_signal(signal.SIGCONT)  # a paused one stops too
                broker.stop()


def _lease(kube: Any, group: str) -> tuple[int | None, list[int]]:
    """The Lease's view: the master's replica id and the SyncStateSet."""
    master, _, sync_state_set = lease_view(kube, NS, group)
    return master, sync_state_set


def _send(broker: Broker, body: bytes) -> int:
    return send(broker, TOPIC, body)


def _master(kube: Any, group: str, brokers: list[Broker]) -> tuple[Broker, Broker]:
    """(master, slave) once the Lease names a master and both are in its SyncStateSet."""
    master_id = wait_until("a master with both replicas in sync",
                           lambda: (lease := _lease(kube, group)) and lease[1] == [1, 2] and lease[0], 60)
    master, slave = brokers[master_id - 1], brokers[2 - master_id]
    wait_until("the master acknowledges",
               lambda: _send(master, f"probe-{time.monotonic_ns()}".encode()) == ResponseCode.SUCCESS, 30)
    return master, slave


def _kill_and_take_over(master: Broker, slave: Broker, label: str) -> tuple[float, bytes]:
    """kill -9 the master; the seconds until the slave acknowledged a send, and that send's body."""
    killed = time.monotonic()
    master.stop(signal.SIGKILL)
    return _take_over(slave, label, killed)


def _take_over(slave: Broker, label: str, killed: float) -> tuple[float, bytes]:
    """The seconds from ``killed`` until ``slave`` acknowledged a send, and that send's body."""
    body = first_acknowledged(slave.addr, TOPIC, label, 30)
    return time.monotonic() - killed, body


def _rejoin(kube: Any, group: str, brokers: list[Broker], old: Broker, new: Broker,
            cycle: int) -> tuple[Broker, Broker]:
    """Restart the lost master ``old``, wait until it follows ``new`` with its log, and return the
    group's (master, slave) as the Lease names them for the next cycle."""
    old.start()
    wait_until(f"cycle {cycle}: the old master rejoins with the new master's log",
               lambda: commit_log(old) == commit_log(new), 60)
    return _master(kube, group, brokers)


def _consumed(master: Broker) -> tuple[list[bytes], int]:
    """Every body a consumer pulls from ``master``, and how many of them came more than once."""
    consumed = pulled(master, TOPIC)
    return consumed, sum(n - 1 for n in collections.Counter(consumed).values() if n > 1)


def test_kill_9_of_the_master_hands_the_lease_to_the_in_sync_slave(kube: Any, group: tuple[str, list[Broker]]) -> None:
    name, brokers = group
    master, slave = _master(kube, name, brokers)
    assert _send(slave, b"refused") == ResponseCode.SERVICE_NOT_AVAILABLE
    acked = [f"acknowledged-before-kill-{i}".encode() for i in range(20)]
    for body in acked:
        assert _send(master, body) == ResponseCode.SUCCESS
    # an unacknowledged tail: stored by the master while its slave is frozen; more than the
    # loopback socket buffers between them hold, so its end reaches the master's log only
    slave.proc.send_signal(signal.SIGSTOP)
    host, _, port = master.addr.rpartition(":")
    raw = RawClient(host, int(port))
    try:
        send_unanswered(raw, TOPIC, [bytes([65 + i % 26]) * 60_000 for i in range(40)] + [b"never-acknowledged-tail"])
        wait_until("the tail stored by the master", lambda: b"never-acknowledged-tail" in commit_log(master), 20)
        killed = time.monotonic()
        master.stop(signal.SIGKILL)
    finally:
        raw.close()
        slave.proc.send_signal(signal.SIGCONT)
    took, first = _take_over(slave, "kill", killed)
    print(f"\nkill -9 to first acknowledged send: {took:.2f} s (D 3 s, R 1 s)")
    assert took <= TAKEOVER_LIMIT_S
    assert _lease(kube, name)[0] == brokers.index(slave) + 1
    readable = wait_until("every acknowledged message readable from the new master",
                          lambda: (bodies := pulled(slave, TOPIC)) and set(acked) | {first} <= set(bodies)
                          and bodies, 30)
    assert len(readable) == len(set(readable))
    master.start()
    wait_until("the old master rejoins as a slave with the new master's log",
               lambda: commit_log(master) == commit_log(slave), 60)
    assert _send(master, b"refused") == ResponseCode.SERVICE_NOT_AVAILABLE
    assert b"never-acknowledged-tail" not in commit_log(slave)  # never copied: the rejoin cut it
    assert b"never-acknowledged-tail" not in commit_log(master)


def test_kill_loop_loses_no_acknowledged_message(kube: Any, group: tuple[str, list[Broker]]) -> None:
    name, brokers = group
    master, slave = _master(kube, name, brokers)
    acked: list[bytes] = []
    takeovers = []
    for cycle in range(KILL_CYCLES):
        acked += acknowledged_sends(master.addr, TOPIC, f"cycle-{cycle}")
        took, first = _kill_and_take_over(master, slave, f"cycle-{cycle}")
        takeovers.append(took)
        acked.append(first)
        master, slave = _rejoin(kube, name, brokers, master, slave, cycle)
    consumed, duplicates = _consumed(master)
    print(f"\n{KILL_CYCLES} kills: takeovers {', '.join(f'{t:.2f}' for t in takeovers)} s; "
          f"acknowledged {len(acked)}, consumed {len(consumed)} (probes included), duplicates {duplicates}")
    assert set(acked) <= set(consumed)
    # each body was sent once and the producer never retried one: a duplicate would be a record
    # copied twice into the log, which rejoining by truncation must never do
    assert duplicates == 0
    assert max(takeovers) <= TAKEOVER_LIMIT_S


def test_a_master_paused_past_d_acknowledges_nothing_on_resume(kube: Any, group: tuple[str, list[Broker]]) -> None:
    name, brokers = group
    master, slave = _master(kube, name, brokers)
    master.proc.send_signal(signal.SIGSTOP)
    try:
        wait_until("the slave takes over the paused master's Lease",
                   lambda: _send(slave, b"acknowledged-during-pause") == ResponseCode.SUCCESS, 30, interval=0.1)
        assert _lease(kube, name)[0] == brokers.index(slave) + 1
    finally:
        master.proc.send_signal(signal.SIGCONT)
    # its write deadline passed while it was stopped: not one acknowledgement after it resumes
    assert _send(master, b"after-resume") != ResponseCode.SUCCESS
    wait_until("the paused master rejoins as a slave with the new master's log",
               lambda: commit_log(master) == commit_log(slave), 60)
    assert b"after-resume" not in commit_log(slave)
    assert _send(master, b"refused") == ResponseCode.SERVICE_NOT_AVAILABLE


class Sender(threading.Thread):
    """Sends one message after another, each to the broker that acknowledged the last one, and
    on any other answer to the other broker: a producer that follows the master at once (its
    route refresh is not what the hand-over is measured by). Records when each acknowledgement
    came back."""

    def __init__(self, brokers: list[Broker], label: str) -> None:
        super().__init__(name=f"sender {label}", daemon=True)
        self.brokers, self.label = brokers, label
        self.acked: list[tuple[float, bytes]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        target, n = 0, 0
        while not self.halt.is_set():
            n += 1
            body = f"{self.label}-{n}".encode()  # one body per attempt: a refused one is never counted
            if _send(self.brokers[target], body) == ResponseCode.SUCCESS:
                self.acked.append((time.monotonic(), body))
            else:
                target = 1 - target
                time.sleep(0.005)

    def longest_pause(self, since: float) -> float:
        """The longest gap between two acknowledgements from the last one before ``since`` on."""
        times = [t for t, _ in self.acked]
        before = [t for t in times if t <= since]
        kept = before[-1:] + [t for t in times if t > since]
        return max(b - a for a, b in itertools.pairwise(kept))


def test_sigterm_of_the_master_hands_over_with_a_short_write_pause(kube: Any,
                                                                   group: tuple[str, list[Broker]]) -> None:
    name, brokers = group
    master, slave = _master(kube, name, brokers)
    acked: list[bytes] = []
    pauses = []
    for cycle in range(HANDOVER_CYCLES):
        sender = Sender(brokers, f"handover-{cycle}")
        sender.start()
        wait_until(f"cycle {cycle}: the sender's first acknowledgements", lambda: len(sender.acked) >= 20, 30)  # noqa: B023
        terminated = time.monotonic()
        assert master.stop(signal.SIGTERM) == 0
        wait_until(f"cycle {cycle}: acknowledgements from the new master",
                   lambda: any(t > terminated + 0.5 for t, _ in sender.acked), 30)  # noqa: B023
        sender.halt.set()
        sender.join(10)
        pause = sender.longest_pause(terminated)
        pauses.append(pause)
        acked.extend(body for _, body in sender.acked)
        assert _lease(kube, name)[0] == brokers.index(slave) + 1, "the slave holds the Lease"
        bodies = set(pulled(slave, TOPIC))
        lost = [b for _, b in sender.acked if b not in bodies]
        assert not lost, f"cycle {cycle}: acknowledged but not readable from the new master: {lost[:5]}"
        master, slave = _rejoin(kube, name, brokers, master, slave, cycle)
    consumed, duplicates = _consumed(master)
    print(f"\n{HANDOVER_CYCLES} hand-overs: write pauses {', '.join(f'{p:.3f}' for p in pauses)} s; "
          f"acknowledged {len(acked)}, consumed {len(consumed)} (probes included), duplicates {duplicates}")
    assert set(acked) <= set(consumed)
    assert duplicates == 0
    assert max(pauses) < HANDOVER_PAUSE_LIMIT_S


def test_an_admin_hand_over_moves_the_master_and_the_old_one_stays_up_as_its_slave(
        kube: Any, group: tuple[str, list[Broker]]) -> None:
    name, brokers = group
    master, slave = _master(kube, name, brokers)
    with BrokerAdmin(slave.addr) as admin, pytest.raises(RemotingError) as refused:
        admin.hand_over_master()
    assert refused.value.code == ResponseCode.CONTROLLER_INVALID_MASTER, refused.value
    assert f"the master is {master.addr}" in refused.value.remark
    with BrokerAdmin(master.addr) as admin, pytest.raises(RemotingError) as refused:
        admin.hand_over_master(to=7)
    assert refused.value.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED, refused.value
    assert "replica 7 is not in the SyncStateSet [1, 2]" in refused.value.remark
    _, epoch, _ = lease_view(kube, NS, name)
    acked = [f"before-admin-hand-over-{i}".encode() for i in range(10)]
    for body in acked:
        assert _send(master, body) == ResponseCode.SUCCESS

    asked = time.monotonic()
    with BrokerAdmin(master.addr) as admin:
        admin.hand_over_master(to=brokers.index(slave) + 1)
    took, first = _take_over(slave, "admin", asked)
    print(f"\nadmin hand-over to first acknowledged send: {took:.2f} s (D 3 s, R 1 s)")
    assert took < HANDOVER_PAUSE_LIMIT_S
    assert lease_view(kube, NS, name)[:2] == (brokers.index(slave) + 1, epoch + 1)
    assert master.proc.poll() is None, "the old master keeps running"
    assert _send(master, b"refused-after-hand-over") == ResponseCode.SERVICE_NOT_AVAILABLE
    # it follows the new master and is back in its SyncStateSet, its log the new master's
    wait_until("the old master back in the SyncStateSet", lambda: _lease(kube, name)[1] == [1, 2], 30)
    wait_until("the old master holds the new master's log", lambda: commit_log(master) == commit_log(slave), 30)
    assert set(acked) | {first} <= set(pulled(slave, TOPIC))
    assert b"refused-after-hand-over" not in commit_log(slave)
    with BrokerAdmin(master.addr) as admin, pytest.raises(RemotingError) as refused:
        admin.hand_over_master()
    assert refused.value.code == ResponseCode.CONTROLLER_INVALID_MASTER, refused.value
