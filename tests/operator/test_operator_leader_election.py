"""Operator high availability: ``rocketstore operator --leader-elect`` replicas on a REAL API server.

The rules first (:func:`rocketstore.operator.leader.decide`, no cluster), then real operator
processes: the leader killed with SIGKILL halfway through creating a store's children, the
standby taking the Lease within the lease duration and finishing that reconcile; a graceful stop
handing the Lease over at once; a leader whose Lease another took exiting; a leader cut off from
the API server (its connections through a proxy cut) exiting within its renew deadline, before
the standby may take over.

The session's standalone operator (conftest's ``operator_process``, every namespace) would
reconcile this test's store too, so it is stopped (SIGSTOP) while this test runs and continued
after; the replicas here watch only the test's namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_support import ROOT, controlplane, free_port, standalone_stopped, wait_until
from test_operator_cluster import G, P, V, create, get, make_ns, reconciled, store

from rocketstore.operator.leader import LOST_EXIT_CODE, Action, ElectionConfig, LeaseRecord, decide
from rocketstore.operator.main import OperatorOptions, election_config

LEASE_NAMESPACE = "rso-ha"
LEASE = "rocketstore-operator-ha"
#: short timings so the test waits seconds, in the proportions of the defaults (15 / 10 / 2)
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0


# -- the rules ---------------------------------------------------------------------------------------

def _record(holder: str | None, duration: float = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration=duration, transitions=2, resource_version="41")


def test_a_candidate_creates_a_missing_lease_and_renews_its_own() -> None:
    assert decide(None, "a", 0) is Action.CREATE
    assert decide(_record("a"), "a", 0) is Action.RENEW
    assert decide(_record("a"), "a", 100) is Action.RENEW


def test_a_live_lease_of_another_is_waited_for_until_unchanged_for_its_duration() -> None:
    assert decide(_record("b"), "a", 0) is Action.WAIT
    assert decide(_record("b"), "a", 14.9) is Action.WAIT
    assert decide(_record("b"), "a", 15) is Action.TAKE
    assert decide(_record("b", duration=5), "a", 6) is Action.TAKE


def test_a_released_lease_is_taken_at_once() -> None:
    assert decide(_record(None), "a", 0) is Action.TAKE


def test_timings_that_could_let_two_leaders_overlap_are_refused() -> None:
    assert ElectionConfig("ns", "l", "a").problem() is None
    assert "lease duration" in str(ElectionConfig("ns", "l", "a", lease_duration=10, renew_deadline=10).problem())
    assert "renew deadline" in str(ElectionConfig("ns", "l", "a", renew_deadline=2, retry_period=2).problem())
    assert "positive" in str(ElectionConfig("ns", "l", "a", retry_period=0).problem())


def test_election_options() -> None:
    assert election_config(OperatorOptions(), {}) is None
    with pytest.raises(ValueError, match="namespace"):
        election_config(OperatorOptions(leader_elect=True), {})
    cfg = election_config(OperatorOptions(leader_elect=True), {"POD_NAMESPACE": "ops"})
    assert cfg is not None and cfg.namespace == "ops" and cfg.name == "rocketstore-operator"
    assert cfg.identity.startswith(socket.gethostname() + "_")
    other = election_config(OperatorOptions(leader_elect=True), {"POD_NAMESPACE": "ops"})
    assert other is not None and other.identity != cfg.identity  # a restarted process is another candidate
    with pytest.raises(ValueError, match="renew deadline"):
        election_config(OperatorOptions(leader_elect=True, operator_namespace="ops", leader_elect_lease_duration=5,
                                        leader_elect_renew_deadline=6), {})


# -- real replicas -----------------------------------------------------------------------------------

class Replica:
    def __init__(self, identity: str, kubeconfig: Path, namespace: str, broker_port: int, log: Path,
                 lease_namespace: str = LEASE_NAMESPACE) -> None:
        self.identity = identity
        self.liveness = free_port()
        self.log = log
        cmd = [sys.executable, "-m", "rocketstore.cli", "operator", "--namespace", namespace,
               "--bind-address", "127.0.0.1", "--liveness-port", str(self.liveness), "--metrics-port", "0",
               "--interval", "1", "--operator-namespace", lease_namespace,
               "--broker-address", f"{namespace}/ha-0=127.0.0.1:{broker_port}",
               "--leader-elect", "--leader-elect-lease", LEASE, "--leader-elect-identity", identity,
               "--leader-elect-lease-duration", str(LEASE_DURATION),
               "--leader-elect-renew-deadline", str(RENEW_DEADLINE),
               "--leader-elect-retry-period", str(RETRY_PERIOD)]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=str(ROOT))

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.identity} exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def _holder(kube: Any, namespace: str = LEASE_NAMESPACE) -> str | None:
    try:
        lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, namespace)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return str(lease.spec.holder_identity or "") or None


def _events_by_instance(kube: Any, ns: str) -> list[tuple[str, str, float]]:
    """(reportingInstance, reason, time) of the events about RocketStore ha."""
    out = []
    for e in client.CoreV1Api(kube).list_namespaced_event(ns).items:
        if e.involved_object.kind == "RocketStore" and e.involved_object.name == "ha":
            at = e.last_timestamp or e.event_time or e.first_timestamp
            out.append((str(e.reporting_instance), str(e.reason), at.timestamp()))
    return out


def _reconciled_by(kube: Any, ns: str, identity: str) -> list[tuple[str, str, float]] | None:
    """The events, once ``identity`` posted a Reconciled one."""
    events = _events_by_instance(kube, ns)
    return events if (identity, "Reconciled") in {(i, r) for i, r, _ in events} else None


@pytest.mark.integration
def test_the_standby_takes_over_a_killed_leader_mid_reconcile(
        kube: Any, control_plane: Any, operator_process: Any, tmp_path: Path) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": LEASE_NAMESPACE}})
    # broker ha-0 answers nothing (a listener that never accepts): each observation of it waits for
    # the admin client's timeout, which holds the create handler between applying the children and
    # writing the status, the window the leader is killed in
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)
    replicas: list[Replica] = []
    with standalone_stopped(operator_process["proc"]), silent:
        ns = make_ns(kube, "t-ha")
        port = silent.getsockname()[1]

        def start(identity: str) -> Replica:
            replicas.append(Replica(identity, control_plane.kubeconfig, ns, port, tmp_path / f"{identity}.log"))
            return replicas[-1]

        try:
            a = start("op-a")
            wait_until("op-a leads", lambda: _holder(kube) == "op-a", 60)
            wait_until("op-a healthy", a.healthy, 60)
            b = start("op-b")
            # the standby is alive (its probes pass) without leading or reconciling
            wait_until("op-b healthy as a standby", b.healthy, 60)
            time.sleep(2 * RETRY_PERIOD)
            assert _holder(kube) == "op-a"

            create(kube, ns, store("ha", brokers=1))
            apps = client.AppsV1Api(kube)
            wait_until("op-a applied the StatefulSet", lambda: apps.read_namespaced_stateful_set("ha", ns), 30)
            assert reconciled(kube, ns, "ha") is None, "the create handler had already finished: not mid-reconcile"
            a.proc.kill()
            killed = time.time()
            a.proc.wait()
            silent.close()  # from now on the broker is refused at once: no more waiting on it

            wait_until("op-b leads", lambda: _holder(kube) == "op-b", LEASE_DURATION + 2 * RETRY_PERIOD + 5)
            took_over = time.time() - killed
            assert took_over <= LEASE_DURATION + 2 * RETRY_PERIOD + 3, took_over
            lease = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, LEASE_NAMESPACE)
            assert lease.spec.lease_transitions == 1
            wait_until("op-b finished the reconcile", lambda: reconciled(kube, ns, "ha"), 40)
            assert get(kube, ns, "ha")["status"]["replicas"] == 1

            # one reconciler at a time: whatever op-b posted, it posted after op-a was dead
            events = wait_until("op-b's Reconciled event", lambda: _reconciled_by(kube, ns, "op-b"), 20)
            assert {i for i, _, _ in events} <= {"op-a", "op-b"}, events
            assert all(at >= killed - 1 for i, _, at in events if i == "op-b"), events
            assert all(at <= killed + 1 for i, _, at in events if i == "op-a"), events

            # a graceful stop (SIGTERM: an upgrade, a drain) releases the Lease: the next standby
            # takes over at its next retry, not after a whole lease duration
            c = start("op-c")
            wait_until("op-c healthy as a standby", c.healthy, 60)
            b.proc.send_signal(signal.SIGTERM)
            assert b.proc.wait(30) == 0, b.log.read_text()[-3000:]
            stopped = time.time()
            wait_until("op-c leads", lambda: _holder(kube) == "op-c", LEASE_DURATION)
            assert time.time() - stopped < LEASE_DURATION, "op-c waited for the Lease to expire: not released"

            # the store goes while a leader runs (it removes kopf's finalizer)
            objs = client.CustomObjectsApi(kube)
            objs.delete_namespaced_custom_object(G, V, ns, P, "ha")
            wait_until("store deleted", lambda: not _store_exists(objs, ns), 30)

            # a leader whose Lease another took stops reconciling: it exits
            client.CoordinationV1Api(kube).patch_namespaced_lease(LEASE, LEASE_NAMESPACE, {
                "spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 3600}})
            assert c.proc.wait(RENEW_DEADLINE + 5) == LOST_EXIT_CODE
            assert "leadership lost: Lease rso-ha/rocketstore-operator-ha is held by intruder" in c.log.read_text()
        finally:
            for r in replicas:
                controlplane.terminate(r.proc, 15)
            if os.environ.get("OPERATOR_LOG"):
                for r in replicas:
                    print(f"--- {r.identity}\n{r.log.read_text()}", file=sys.stderr)
            core.delete_namespace("t-ha")
            core.delete_namespace(LEASE_NAMESPACE)


def _store_exists(objs: Any, ns: str) -> bool:
    try:
        objs.get_namespaced_custom_object(G, V, ns, P, "ha")
    except client.ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


class CuttableProxy:
    """A TCP forwarder to the API server whose connections can be cut at once: a network
    partition between one operator and the API server, nobody else affected."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # cut
            up = socket.create_connection(self.upstream)
            with self.lock:
                self.sockets += [conn, up]
            for src, dst in ((conn, up), (up, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


@pytest.mark.integration
def test_a_leader_cut_off_from_the_api_server_exits_before_a_standby_takes_over(
        kube: Any, control_plane: Any, operator_process: Any, tmp_path: Path) -> None:
    core = client.CoreV1Api(kube)
    lease_ns = "rso-ha-cut"
    core.create_namespace({"metadata": {"name": lease_ns}})
    upstream = urllib.parse.urlsplit(control_plane.server)
    proxy = CuttableProxy((str(upstream.hostname), int(upstream.port or 443)))
    config = json.loads(Path(control_plane.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    proxied = tmp_path / "kubeconfig-proxied"
    proxied.write_text(json.dumps(config))
    replicas: list[Replica] = []
    with standalone_stopped(operator_process["proc"]):
        ns = make_ns(kube, "t-ha-cut")
        try:
            a = Replica("cut-a", proxied, ns, free_port(), tmp_path / "cut-a.log", lease_ns)
            replicas.append(a)
            wait_until("cut-a leads", lambda: _holder(kube, lease_ns) == "cut-a", 60)
            b = Replica("cut-b", control_plane.kubeconfig, ns, free_port(), tmp_path / "cut-b.log", lease_ns)
            replicas.append(b)
            wait_until("cut-b healthy as a standby", b.healthy, 60)

            proxy.cut()
            cut = time.monotonic()
            assert a.proc.wait(RENEW_DEADLINE + RETRY_PERIOD + 5) == LOST_EXIT_CODE
            exited = time.monotonic()
            assert "not renewed for" in a.log.read_text()
            wait_until("cut-b leads", lambda: _holder(kube, lease_ns) == "cut-b", LEASE_DURATION + 10)
            took_over = time.monotonic()
            # the cut-off leader stopped within its renew deadline, before the standby could lead
            assert exited - cut <= RENEW_DEADLINE + RETRY_PERIOD + 1, exited - cut
            assert exited < took_over
        finally:
            proxy.cut()
            for r in replicas:
                controlplane.terminate(r.proc, 15)
            if os.environ.get("OPERATOR_LOG"):
                for r in replicas:
                    print(f"--- {r.identity}\n{r.log.read_text()}", file=sys.stderr)
            core.delete_namespace(ns)
            core.delete_namespace(lease_ns)
