"""Operator upgrades: which stores without spec.image move to a new default broker image now, and
which keep the image they run until a slot frees (:mod:`rocketstore.operator.upgrade`), first
without a cluster, then an operator upgraded over three stores on a REAL API server."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from operator_support import controlplane, namespaced_operator, standalone_stopped, wait_until
from test_operator_cluster import G, P, V, condition, create, get, make_ns, reconciled, store

from rocketstore.operator.upgrade import (
    StatefulSetRollout,
    StoreRollout,
    UpgradeGate,
    broker_image,
    statefulset_rollout,
    statefulset_settled,
    store_rollout,
)

OLD, NEW = "rocketstore/rocketstore:1", "rocketstore/rocketstore:2"


def _sts(name: str, image: str, *, replicas: int = 3, updated: int = 3, ready: int = 3, same_revision: bool = True,
         observed: int = 4) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": 4},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "sidecar", "image": "proxy:1"}, {"name": "broker", "image": image}]}}},
            "status": {"observedGeneration": observed, "updatedReplicas": updated, "readyReplicas": ready,
                       "currentRevision": "r1" if same_revision else "r0", "updateRevision": "r1"}}


def test_a_statefulset_is_settled_once_every_replica_runs_the_update_revision_and_is_ready() -> None:
    assert statefulset_rollout(_sts("a", NEW)) == StatefulSetRollout("a", NEW, True)
    assert not statefulset_rollout(_sts("a", NEW, observed=3)).settled  # the controller has not seen the spec
    assert not statefulset_rollout(_sts("a", NEW, updated=2)).settled
    assert not statefulset_rollout(_sts("a", NEW, ready=2)).settled
    assert not statefulset_rollout(_sts("a", NEW, same_revision=False)).settled


def test_a_store_shows_its_masters_image_and_is_settled_when_every_statefulset_is() -> None:
    assert store_rollout("a", [StatefulSetRollout("a-slave-1", NEW, True), StatefulSetRollout("a", OLD, True)]) \
        == StoreRollout(OLD, True)
    assert store_rollout("a", [StatefulSetRollout("a-slave-1", NEW, False), StatefulSetRollout("a", NEW, True)]) \
        == StoreRollout(NEW, False)
    assert store_rollout("a", []) == StoreRollout(None, True)


def test_new_and_current_stores_run_the_default_image() -> None:
    stores = {"ns/a": StoreRollout(NEW, False)}
    assert broker_image("ns/new", stores, NEW, 1) == (NEW, False)  # no StatefulSet yet: nothing to roll
    assert broker_image("ns/a", stores, NEW, 1) == (NEW, False)  # mid-rollout on the new image already


def test_stores_start_one_at_a_time_each_after_the_last_settled() -> None:
    stores = {"ns/a": StoreRollout(OLD, True), "ns/b": StoreRollout(OLD, True), "other/c": StoreRollout(OLD, True)}
    assert broker_image("ns/b", stores, NEW, 1) == (NEW, True)
    stores["ns/b"] = StoreRollout(NEW, False)
    assert broker_image("ns/a", stores, NEW, 1) == (OLD, False)
    assert broker_image("other/c", stores, NEW, 1) == (OLD, False)
    stores["ns/b"] = StoreRollout(NEW, True)
    assert broker_image("other/c", stores, NEW, 1) == (NEW, True)


def test_the_concurrency_is_the_number_of_stores_rolling_at_once() -> None:
    stores = {k: StoreRollout(OLD, True) for k in ("ns/a", "ns/b", "ns/c")}
    stores["ns/a"] = StoreRollout(NEW, False)
    assert broker_image("ns/b", stores, NEW, 2) == (NEW, True)
    stores["ns/b"] = StoreRollout(NEW, False)
    assert broker_image("ns/c", stores, NEW, 2) == (OLD, False)


def test_a_started_store_holds_its_slot_before_its_statefulset_shows_it() -> None:
    stores = {"ns/a": StoreRollout(OLD, True), "ns/b": StoreRollout(OLD, True)}
    gate = UpgradeGate(max_concurrent=1)
    assert gate.image("ns/a", stores, NEW) == (NEW, True)
    # the apply's watch event has not arrived: a still shows the old image, and keeps its slot
    assert gate.image("ns/b", stores, NEW) == (OLD, False)
    assert gate.image("ns/a", stores, NEW) == (NEW, False)  # its own next reconcile keeps the new image
    stores["ns/a"] = StoreRollout(NEW, False)
    assert gate.image("ns/b", stores, NEW) == (OLD, False)
    stores["ns/a"] = StoreRollout(NEW, True)
    assert gate.image("ns/b", stores, NEW) == (NEW, True)
    assert gate.started == {"ns/b"}


def test_a_deleted_store_frees_its_slot() -> None:
    gate = UpgradeGate(max_concurrent=1)
    stores = {"ns/a": StoreRollout(OLD, True), "ns/b": StoreRollout(OLD, True)}
    assert gate.image("ns/a", stores, NEW) == (NEW, True)
    del stores["ns/a"]
    assert gate.image("ns/b", stores, NEW) == (NEW, True)


def test_a_store_that_never_becomes_ready_holds_the_queue() -> None:
    stores = {"ns/a": StoreRollout(NEW, False), "ns/b": StoreRollout(OLD, True)}
    for _ in range(3):
        assert broker_image("ns/b", stores, NEW, 1) == (OLD, False)


def test_a_waiting_store_shows_what_it_waits_for_until_it_starts() -> None:
    gate = UpgradeGate(max_concurrent=1)
    stores = {"ns/a": StoreRollout(OLD, True), "ns/b": StoreRollout(OLD, True), "ns/c": StoreRollout(NEW, True)}
    assert gate.image("ns/a", stores, NEW) == (NEW, True)
    assert gate.queued(NEW, stores, NEW) is None  # a starts: not waiting
    image, starts = gate.image("ns/b", stores, NEW)
    assert (image, starts) == (OLD, False)
    queued = gate.queued(image, stores, NEW)
    assert queued is not None and (queued.type, queued.status, queued.reason) == (
        "UpgradeQueued", True, "WaitingForUpgradeSlot")
    # the slot's holder is named (the settled ns/c holds none), and both images
    assert "rolling: ns/a" in queued.message and "ns/c" not in queued.message
    assert f"runs {OLD}" in queued.message and f"roll to {NEW}" in queued.message
    stores["ns/a"] = StoreRollout(NEW, True)
    image, starts = gate.image("ns/b", stores, NEW)
    assert (image, starts) == (NEW, True) and gate.queued(image, stores, NEW) is None


# -- an operator upgrade on a real API server ----------------------------------------------------------

def _operator(kubeconfig: Path, ns: str, image: str, log: Path) -> subprocess.Popen[bytes]:
    return namespaced_operator(kubeconfig, ns, log, "--broker-image", image, "--max-concurrent-upgrades", "1")


def _images(apps: Any, ns: str) -> dict[str, tuple[str, bool]]:
    """Each store's StatefulSet: its broker image and whether it is settled."""
    out = {}
    for sts in apps.list_namespaced_stateful_set(ns).items:
        body = client.ApiClient().sanitize_for_serialization(sts)
        out[sts.metadata.name] = (statefulset_rollout(body).image, statefulset_settled(body))
    return out


def _rollout_state(kube: Any, ns: str) -> str:
    """What a rollout that did not settle is waiting for: each StatefulSet's status counts and each
    pod's phase and readiness (a failure message's detail)."""
    sets = [(s.metadata.name, s.status.replicas, s.status.ready_replicas, s.status.updated_replicas,
             s.status.current_revision == s.status.update_revision)
            for s in client.AppsV1Api(kube).list_namespaced_stateful_set(ns).items]
    pods = [(p.metadata.name, p.status.phase, p.spec.node_name,
             [(c.type, c.status) for c in p.status.conditions or []])
            for p in client.CoreV1Api(kube).list_namespaced_pod(ns).items]
    claims = [(c.metadata.name, c.status.phase) for c in client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
        ns).items]
    return f"statefulsets (name, replicas, ready, updated, at update revision): {sets}; pods: {pods}; PVCs: {claims}"


def _all_settled_on(apps: Any, ns: str, names: tuple[str, ...], image: str) -> bool:
    seen = _images(apps, ns)
    return set(seen) == set(names) and all(i == image and settled for i, settled in seen.values())


@pytest.mark.integration
def test_an_operator_upgrade_rolls_the_stores_one_at_a_time(
        kube: Any, control_plane: Any, operator_process: Any, tmp_path: Path) -> None:
    names = ("s1", "s2", "s3")
    log = tmp_path / "operator.log"
    apps = client.AppsV1Api(kube)
    with standalone_stopped(operator_process["proc"]):
        ns = make_ns(kube, "t-upgrade")
        old = _operator(control_plane.kubeconfig, ns, OLD, log)
        new = None
        try:
            for name in names:
                create(kube, ns, store(name, brokers=2))
            for name in names:
                wait_until(f"{name} reconciled", lambda name=name: reconciled(kube, ns, name), 60)
            try:  # six pods made ready one after the other by kwok: slow on a busy machine
                wait_until("every store rolled out", lambda: _all_settled_on(apps, ns, names, OLD), 180)
            except AssertionError as e:
                raise AssertionError(f"{e}; {_rollout_state(kube, ns)}") from None
            controlplane.terminate(old, 15)

            # the upgraded operator: a new default image
            new = _operator(control_plane.kubeconfig, ns, NEW, log)
            started: dict[str, float] = {}
            settled_at: dict[str, float] = {}
            most_rolling = 0
            #: UpgradeQueued messages of stores seen still on OLD while another rolled
            queued: dict[str, str] = {}
            deadline = time.monotonic() + 300
            while len(settled_at) < len(names) and time.monotonic() < deadline:
                seen = _images(apps, ns)
                now = time.monotonic()
                rolling = [n for n, (image, settled) in seen.items() if image == NEW and not settled]
                most_rolling = max(most_rolling, len(rolling))
                for n in names:
                    waits = condition(get(kube, ns, n), "UpgradeQueued")
                    if rolling and waits and waits["status"] == "True" and seen.get(n, (None,))[0] == OLD:
                        queued[n] = waits["message"]
                for n, (image, settled) in seen.items():
                    if image == NEW:
                        started.setdefault(n, now)
                        if settled:
                            settled_at.setdefault(n, now)
                time.sleep(0.1)
            assert set(settled_at) == set(names), (started, settled_at, _rollout_state(kube, ns),
                                                   log.read_text()[-3000:])
            assert most_rolling == 1
            order = sorted(names, key=lambda n: started[n])
            for before, after in itertools.pairwise(order):
                assert started[after] >= settled_at[before], (before, after, started, settled_at)
            events = [e.reason for e in client.CoreV1Api(kube).list_namespaced_event(ns).items
                      if e.involved_object.kind == "RocketStore"]
            assert events.count("BrokerImageUpgrade") == len(names)
            # the stores that waited said so, naming the store holding the slot; none says it after
            assert len(queued) >= 1, queued
            assert all(f"roll to {NEW}" in m and f"rolling: {ns}/" in m for m in queued.values()), queued
            wait_until("no store queued any more", lambda: not any(
                condition(get(kube, ns, n), "UpgradeQueued") for n in names), 20)

            # the stores go while an operator runs (it removes kopf's finalizer), within seconds even
            # when a store's timer is mid-run: kopf's default 60 s look at an exiting timer made
            # this wait time out once
            objs = client.CustomObjectsApi(kube)
            for name in names:
                objs.delete_namespaced_custom_object(G, V, ns, P, name)
            wait_until("stores deleted", lambda: not objs.list_namespaced_custom_object(G, V, ns, P)["items"], 20)
        finally:
            controlplane.terminate(old, 15)
            if new is not None:
                controlplane.terminate(new, 15)
            if os.environ.get("OPERATOR_LOG"):
                print(log.read_text(), file=sys.stderr)
