"""Drift, no cluster: which differences between a desired child object and the one on the API
server are the operator's to repair, and which belong to others."""

from __future__ import annotations

import copy
from typing import Any

from rocketstore.operator.desired import Owner, Plan, all_objects, statefulset
from rocketstore.operator.drift import drifted_fields
from rocketstore.operator.model import parse_spec
from rocketstore.operator.sizing import volume_size

OWNER = Owner(name="rs", namespace="ns", uid="1234")


def objects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    s = parse_spec(spec)
    return all_objects(Plan(OWNER, s, s.brokers, volume_size(s)))


def by_kind(kind: str, name: str = "rs") -> dict[str, Any]:
    return next(o for o in objects({"brokers": 2}) if o["kind"] == kind and o["metadata"]["name"] == name)


def test_an_object_as_applied_has_not_drifted() -> None:
    for obj in objects({"brokers": 3, "networkPolicy": {}, "externalAccess": {"type": "NodePort"}}):
        assert drifted_fields(obj, copy.deepcopy(obj)) == [], obj["kind"]


def test_a_missing_object_has_drifted() -> None:
    assert drifted_fields(by_kind("ConfigMap", "rs-config"), None) == ["(missing)"]


def test_what_the_api_server_and_other_tools_add_is_not_drift() -> None:
    svc = by_kind("Service")
    current = copy.deepcopy(svc)
    current["metadata"].update(uid="u", resourceVersion="7")
    current["metadata"].setdefault("annotations", {})["other.tool/seen"] = "yes"
    current["metadata"]["labels"]["team"] = "payments"
    current["spec"]["clusterIP"] = "10.0.0.7"
    current["spec"]["ports"].append({"name": "debug", "port": 5005, "protocol": "TCP"})
    current["status"] = {"loadBalancer": {}}
    assert drifted_fields(svc, current) == []
    sts = by_kind("StatefulSet")
    current = copy.deepcopy(sts)
    template = current["spec"]["template"]
    template["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "2026-11-27T00:00:00Z"
    template["spec"]["containers"].insert(0, {"name": "mesh-proxy", "image": "proxy:1"})
    template["spec"]["containers"][1]["terminationMessagePath"] = "/dev/termination-log"
    template["spec"]["containers"][1]["env"].append({"name": "INJECTED", "value": "1"})
    assert drifted_fields(sts, current) == []


def test_our_fields_edited_or_removed_are_drift() -> None:
    cm = by_kind("ConfigMap", "rs-config")
    current = copy.deepcopy(cm)
    current["data"]["broker.conf"] = "brokerClusterName=other\n"
    assert drifted_fields(cm, current) == ["data.broker.conf"]
    svc = by_kind("Service")
    current = copy.deepcopy(svc)
    current["spec"]["ports"][0]["port"] = 10999
    del current["spec"]["selector"]
    assert drifted_fields(svc, current) == ["spec.selector", "spec.ports[remoting].port"]
    sts = by_kind("StatefulSet")
    current = copy.deepcopy(sts)
    current["spec"]["replicas"] = 5
    current["spec"]["template"]["spec"]["containers"] = []
    assert drifted_fields(sts, current) == ["spec.replicas", "spec.template.spec.containers[broker]"]
    sa = by_kind("ServiceAccount", "rs-broker")
    current = copy.deepcopy(sa)
    current["automountServiceAccountToken"] = True
    assert drifted_fields(sa, current) == ["automountServiceAccountToken"]


def test_ignored_fields_are_not_compared() -> None:
    s = parse_spec({"brokers": 2, "replication": {"replicasPerGroup": 2}})
    sts = statefulset(Plan(OWNER, s, s.brokers, volume_size(s), master_partition=0))
    current = copy.deepcopy(sts)
    current["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = 2
    partition = ("spec", "updateStrategy", "rollingUpdate", "partition")
    assert drifted_fields(sts, current) == ["spec.updateStrategy.rollingUpdate.partition"]
    assert drifted_fields(sts, current, {partition}) == []
    current["spec"]["updateStrategy"]["type"] = "OnDelete"
    assert drifted_fields(sts, current, {partition}) == ["spec.updateStrategy.type"]
