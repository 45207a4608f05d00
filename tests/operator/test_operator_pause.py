"""The pause-reconciliation annotation on a REAL API server (see conftest.py; the test operator
runs with --interval 1, so drift repair would undo a hand edit within a second or two): while it
is set nothing of the store changes, spec edits and drift included; removing it (or another
value) reconciles."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from operator_support import wait_until
from test_operator_cluster import G, P, V, condition, create, get, make_ns, patch_spec, reconciled, store

from rocketstore.operator.pause import PAUSE_ANNOTATION

pytestmark = pytest.mark.integration


def _annotate(kube: Any, ns: str, name: str, value: str | None) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        G, V, ns, P, name, {"metadata": {"annotations": {PAUSE_ANNOTATION: value}}})


def _reasons(kube: Any, ns: str) -> list[str]:
    return [e.reason for e in client.CoreV1Api(kube).list_namespaced_event(ns).items
            if e.involved_object.kind == "RocketStore"]


def _paused(kube: Any, ns: str) -> bool:
    cond = condition(get(kube, ns, "rs"), "ReconciliationPaused")
    return cond is not None and cond["status"] == "True" and cond["reason"] == "PauseAnnotation"


def test_a_paused_store_is_left_alone_and_resumes_when_unpaused(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-pause")
    create(kube, ns, store("rs", brokers=1))
    wait_until("reconciled", lambda: reconciled(kube, ns, "rs"), 60)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)

    _annotate(kube, ns, "rs", "true")
    wait_until("ReconciliationPaused", lambda: _paused(kube, ns), 20)
    repaired_before = _reasons(kube, ns).count("DriftRepaired")
    # hand edits the timer would repair within a second, and a spec edit
    core.patch_namespaced_config_map("rs-config", ns, {"data": {"broker.conf": "brokerClusterName=by-hand\n"}})
    core.delete_namespaced_service("rs", ns)
    generation = patch_spec(kube, ns, "rs", {"brokers": 2})["metadata"]["generation"]
    sts_generation = apps.read_namespaced_stateful_set("rs", ns).metadata.generation
    time.sleep(5)  # five timer periods

    assert core.read_namespaced_config_map("rs-config", ns).data["broker.conf"] == "brokerClusterName=by-hand\n"
    assert "rs" not in {s.metadata.name for s in core.list_namespaced_service(ns).items}
    sts = apps.read_namespaced_stateful_set("rs", ns)
    assert sts.spec.replicas == 1 and sts.metadata.generation == sts_generation
    status = get(kube, ns, "rs")["status"]
    assert status["observedGeneration"] < generation and status["replicas"] == 1
    assert _reasons(kube, ns).count("DriftRepaired") == repaired_before
    assert _paused(kube, ns)

    # removing the annotation resumes at the next timer run (the test operator runs one a second)
    _annotate(kube, ns, "rs", None)
    wait_until("spec applied", lambda: reconciled(kube, ns, "rs"), 20)
    assert apps.read_namespaced_stateful_set("rs", ns).spec.replicas == 2
    assert "brokerClusterName=rs\n" in core.read_namespaced_config_map("rs-config", ns).data["broker.conf"]
    assert core.read_namespaced_service("rs", ns).spec.ports
    assert condition(get(kube, ns, "rs"), "ReconciliationPaused") is None

    # created paused: nothing is created until the pause ends
    body = store("held", brokers=1)
    body["metadata"]["annotations"] = {PAUSE_ANNOTATION: "True"}
    create(kube, ns, body)
    wait_until("created paused", lambda: condition(get(kube, ns, "held"), "ReconciliationPaused"), 20)
    time.sleep(2)
    assert "held" not in {s.metadata.name for s in apps.list_namespaced_stateful_set(ns).items}
    _annotate(kube, ns, "held", "false")
    wait_until("held reconciled", lambda: reconciled(kube, ns, "held"), 30)
    assert apps.read_namespaced_stateful_set("held", ns).spec.replicas == 1
    client.CoreV1Api(kube).delete_namespace(ns)
