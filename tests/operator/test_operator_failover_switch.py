"""Switching a running replicated store to Lease failover, and back, against a REAL API server
(kwok nodes; no broker answers, so no member's role is known).

On: every StatefulSet takes ``updateStrategy: OnDelete`` (the masters' one drops the
rolling-update partition the observer had set), the brokers' Lease Role appears, nothing is
refused or failed, and no pod is deleted: with no Lease naming a master and no member's role known, the
operator cannot tell which member holds every acknowledged message, the one that must take the
Lease first (rollout.lease_group_restart). Off again: refused (Degraded, FailoverOffRefused), the
Lease failover stays applied."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from operator_support import wait_until
from test_operator_cluster import condition, create, get, make_ns, patch_spec, store

pytestmark = pytest.mark.integration

NAME = "sw"


def _strategies(apps: Any, ns: str) -> dict[str, Any]:
    return {s.metadata.name: client.ApiClient().sanitize_for_serialization(s.spec.update_strategy)
            for s in apps.list_namespaced_stateful_set(ns).items}


def _settled(kube: Any, ns: str) -> dict[str, Any] | None:
    obj = get(kube, ns, NAME)
    status = obj.get("status", {})
    degraded = condition(obj, "Degraded")
    if status.get("observedGeneration") != obj["metadata"]["generation"] or degraded is None:
        return None
    return obj


def test_switching_failover_on_and_off(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-switch")
    apps, core, rbac = client.AppsV1Api(kube), client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    create(kube, ns, store(NAME, brokers=1, replication={"replicasPerGroup": 2}))
    wait_until("pods", lambda: len(core.list_namespaced_pod(ns).items) == 2, 60)
    wait_until("masters partitioned", lambda: "rollingUpdate" in _strategies(apps, ns).get(NAME, {}), 60)
    uids = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(ns).items}
    # the partition as the observer moves it (a patch, not part of the applied object) while a master
    # waits for its slaves
    apps.patch_namespaced_stateful_set(NAME, ns, {"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}},
                                       field_manager="rocketstore-operator")

    patch_spec(kube, ns, NAME, {"replication": {"failover": {"mode": "Lease"}}})
    wait_until("every StatefulSet OnDelete", lambda: _strategies(apps, ns) == {
        NAME: {"type": "OnDelete"}, f"{NAME}-slave-1": {"type": "OnDelete"}}, 60)
    obj = wait_until("reconciled", lambda: _settled(kube, ns), 60)
    degraded = condition(obj, "Degraded")
    # applied without a refusal or an API error; kwok's ready pods run no broker to answer
    assert degraded is not None and degraded["reason"] in ("AsExpected", "BrokerUnreachable"), degraded
    rbac.read_namespaced_role(f"{NAME}-broker", ns)
    group = wait_until("status.groups", lambda: next(iter(get(kube, ns, NAME)["status"].get("groups") or []), None),
                       30)
    assert group["mode"] == "Lease" and "master" not in group, group
    time.sleep(3)  # several observations (--interval 1): still no member restarted
    assert {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(ns).items} == uids

    # off again: refused, named in Degraded; Lease failover stays applied
    patch_spec(kube, ns, NAME, {"replication": {"failover": {"mode": "None"}}})
    obj = wait_until("FailoverOffRefused", lambda: (o := get(kube, ns, NAME)) and (
        c := condition(o, "Degraded")) and c["reason"] == "FailoverOffRefused" and o, 60)
    degraded = condition(obj, "Degraded")
    assert degraded is not None and "Lease failover stays" in degraded["message"], degraded
    assert _strategies(apps, ns)[NAME] == {"type": "OnDelete"} and rbac.read_namespaced_role(f"{NAME}-broker", ns)
