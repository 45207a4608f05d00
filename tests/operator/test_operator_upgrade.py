"""Operator upgrades, no cluster: which stores without spec.image move to a new default broker
image now, and which keep the image they run until a slot frees (:mod:`rocketstore.operator.upgrade`)."""

from __future__ import annotations

from typing import Any

from rocketstore.operator.upgrade import (
    StatefulSetRollout,
    StoreRollout,
    UpgradeGate,
    broker_image,
    statefulset_rollout,
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
