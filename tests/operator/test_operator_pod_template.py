"""Broker pods: the "restricted" Pod Security Standard, default resources, the pod template
override and the operator-supplied default image.

The pure tests check the builders; the integration tests check the same objects against the real
API server: PodSecurity admission (built into kube-apiserver) in a namespace labelled
``pod-security.kubernetes.io/enforce=restricted``, the CRD's schema rejecting bad overrides, and
the running operator filling in its default image.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from operator_support import STORAGE_CLASS, wait_until

from rocketstore.operator.desired import (
    DEFAULT_RESOURCES,
    Owner,
    Plan,
    default_broker_image,
    statefulset,
)
from rocketstore.operator.model import SpecError, parse_spec
from rocketstore.operator.sizing import volume_size

OWNER = Owner(name="rs", namespace="ns", uid="1234")
G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}
ZONE_SPREAD = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}


def pod_spec_of(spec: dict[str, Any], **plan: Any) -> dict[str, Any]:
    s = parse_spec(spec)
    sts = statefulset(Plan(OWNER, s, s.brokers, volume_size(s), **plan))
    template: dict[str, Any] = sts["spec"]["template"]
    return template


# -- pure: the builders ----------------------------------------------------------------------------

def test_broker_pod_meets_the_restricted_standard() -> None:
    tpl = pod_spec_of({})
    pod = tpl["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]["securityContext"]
    assert c == {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "readOnlyRootFilesystem": True,
                 "capabilities": {"drop": ["ALL"]}}
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # a read-only root: every place the broker writes is a volume
    for path in ("/tmp", "/var/run/rocketstore"):
        assert "emptyDir" in volumes[mounts[path]]
    assert mounts["/home/rocketmq/store"] == "store"


def test_image_user_is_the_pods_user() -> None:
    from operator_support import ROOT

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--uid 10001" in dockerfile and "USER 10001" in dockerfile


def test_default_resources_apply_only_without_spec_resources() -> None:
    assert pod_spec_of({})["spec"]["containers"][0]["resources"] == DEFAULT_RESOURCES
    mine = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}
    assert pod_spec_of({"resources": mine})["spec"]["containers"][0]["resources"] == mine


def test_pod_template_override_is_merged_under_the_operators_keys() -> None:
    tpl = pod_spec_of({
        "podTemplate": {
            "metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/owner": "ops"}},
            "env": [{"name": "TZ", "value": "UTC"},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        },
        "scheduling": {"priorityClassName": "brokers", "topologySpreadConstraints": [ZONE_SPREAD],
                       "nodeSelector": {"disk": "ssd"}, "tolerations": [{"key": "k", "operator": "Exists"}]},
    })
    meta, pod = tpl["metadata"], tpl["spec"]
    assert meta["labels"]["team"] == "payments" and meta["labels"]["app.kubernetes.io/instance"] == "rs"
    assert meta["annotations"]["example.com/owner"] == "ops" and "rocketstore.io/config-hash" in meta["annotations"]
    env = pod["containers"][0]["env"]
    assert [e["name"] for e in env][:4] == ["POD_NAME", "POD_NAMESPACE", "CONF_DIR", "RUN_DIR"]
    assert env[4:] == [{"name": "TZ", "value": "UTC"},
                       {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    assert pod["priorityClassName"] == "brokers"
    assert pod["nodeSelector"] == {"disk": "ssd"} and pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    # no labelSelector given: the constraint counts this RocketStore's brokers
    assert pod["topologySpreadConstraints"] == [{
        **ZONE_SPREAD,
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "rocketstore", "app.kubernetes.io/instance": "rs"}},
    }]
    own = {"matchLabels": {"tier": "x"}}
    pod2 = pod_spec_of({"scheduling": {"topologySpreadConstraints": [{**ZONE_SPREAD, "labelSelector": own}]}})["spec"]
    assert pod2["topologySpreadConstraints"][0]["labelSelector"] == own


def test_no_override_means_no_extra_fields() -> None:
    pod = pod_spec_of({})["spec"]
    assert not {"priorityClassName", "topologySpreadConstraints", "tolerations", "nodeSelector",
                "imagePullSecrets"} & pod.keys()


def test_image_pull_secrets_reach_the_pods() -> None:
    pod = pod_spec_of({"imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}]})["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    with pytest.raises(SpecError) as e:
        parse_spec({"imagePullSecrets": [{"name": "Not_A_Secret"}]})
    assert e.value.field == "imagePullSecrets[0].name"


def test_pod_template_changes_roll_the_pods() -> None:
    assert pod_spec_of({}) != pod_spec_of({"podTemplate": {"metadata": {"annotations": {"a": "b"}}}})


@pytest.mark.parametrize(("spec", "field"), [
    ({"podTemplate": {"metadata": {"labels": {"app.kubernetes.io/instance": "other"}}}},
     "podTemplate.metadata.labels.app.kubernetes.io/instance"),
    ({"podTemplate": {"metadata": {"annotations": {"rocketstore.io/config-hash": "x"}}}},
     "podTemplate.metadata.annotations.rocketstore.io/config-hash"),
    ({"podTemplate": {"env": [{"name": "POD_NAME", "value": "x"}]}}, "podTemplate.env[0].name"),
    ({"podTemplate": {"env": [{"value": "x"}]}}, "podTemplate.env[0].name"),
])
def test_reserved_pod_template_keys_are_refused(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert e.value.field == field


def test_the_operator_supplies_the_default_image() -> None:
    from importlib.metadata import version

    assert parse_spec({}).image is None
    assert default_broker_image() == f"rocketstore/rocketstore:{version('rocketstore')}"
    assert pod_spec_of({})["spec"]["containers"][0]["image"] == default_broker_image()
    assert pod_spec_of({}, default_image="reg.local/rs:9")["spec"]["containers"][0]["image"] == "reg.local/rs:9"
    pinned = pod_spec_of({"image": "mine:1"}, default_image="reg.local/rs:9")
    assert pinned["spec"]["containers"][0]["image"] == "mine:1"


def test_operator_default_image_flag_then_env_then_version() -> None:
    from rocketstore.operator.main import BROKER_IMAGE_ENV, OperatorOptions, broker_image

    env = {BROKER_IMAGE_ENV: "env/rs:2"}
    assert broker_image(OperatorOptions(broker_image="flag/rs:1"), env) == "flag/rs:1"
    assert broker_image(OperatorOptions(), env) == "env/rs:2"
    assert broker_image(OperatorOptions(), {}) == default_broker_image()


# -- against the real API server -------------------------------------------------------------------

def _store(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"brokers": 2, "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
                            "commitLog": {"segmentSize": "64Mi"}, "scheduling": dict(KWOK)}
    base.update(spec)
    return {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": name}, "spec": base}


def _namespace(kube: Any, name: str, labels: dict[str, str] | None = None) -> str:
    from kubernetes import client

    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    wait_until(f"default SA in {name}", lambda: client.CoreV1Api(kube).read_namespaced_service_account(
        "default", name), 60)
    return name


@pytest.mark.integration
def test_restricted_namespace_admits_and_runs_the_brokers(kube: Any, crd: Any, operator_process: Any) -> None:
    """PodSecurity admission runs in kube-apiserver: a pod that breaks "restricted" is refused
    there and the StatefulSet shows FailedCreate instead of pods."""
    from kubernetes import client

    ns = _namespace(kube, "psa-restricted", {"pod-security.kubernetes.io/enforce": "restricted",
                                             "pod-security.kubernetes.io/enforce-version": "latest"})
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    # the namespace really enforces: a pod without the restricted settings is refused
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(ns, {"metadata": {"name": "plain"}, "spec": {
            "containers": [{"name": "c", "image": "x"}], **KWOK}})
    assert refused.value.status == 403 and "restricted" in refused.value.body
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, ns, P, _store(
        "psa", podTemplate={"metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/o": "ops"}},
                            "env": [{"name": "TZ", "value": "UTC"}]},
        scheduling={**KWOK, "topologySpreadConstraints": [ZONE_SPREAD]}, imagePullSecrets=[{"name": "regcred"}]))

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/instance=psa").items
        if len(pods) == 2 and all(p.status.phase == "Running" for p in pods):
            return pods
        # raised, not returned: wait_until names the last state, so a timeout says where it stuck
        events = [f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
                  for e in core.list_namespaced_event(ns).items[-8:]]
        claims = [(c.metadata.name, c.status.phase)
                  for c in core.list_namespaced_persistent_volume_claim(ns).items]
        raise AssertionError(f"pods {[(p.metadata.name, p.status.phase) for p in pods]}, "
                             f"claims {claims}, events {events}")

    # 180 s: 20 s alone, but the whole Kubernetes phase on 2 busy cores once took over 90 s
    pods = wait_until("2 broker pods Running in the restricted namespace", running, 180)
    sts = apps.read_namespaced_stateful_set("psa", ns)
    tpl = sts.spec.template
    assert tpl.metadata.labels["team"] == "payments" and tpl.metadata.annotations["example.com/o"] == "ops"
    assert {"name": "TZ", "value": "UTC"} in [{"name": e.name, "value": e.value} for e in tpl.spec.containers[0].env]
    assert tpl.spec.topology_spread_constraints[0].topology_key == "topology.kubernetes.io/zone"
    for pod in pods:
        assert pod.metadata.labels["team"] == "payments"
        assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        assert pod.spec.containers[0].security_context.read_only_root_filesystem is True
        assert [r.name for r in pod.spec.image_pull_secrets] == ["regcred"]
    # no spec.image: nothing stored, the StatefulSet runs the operator's default
    stored = client.CustomObjectsApi(kube).get_namespaced_custom_object(G, V, ns, P, "psa")
    assert "image" not in stored["spec"]
    assert tpl.spec.containers[0].image == default_broker_image()


@pytest.mark.integration
@pytest.mark.parametrize(("override", "expected"), [
    ({"podTemplate": {"metadata": {"labels": {"app.kubernetes.io/instance": "x"}}}},
     "app.kubernetes.io/* labels are set by the operator"),
    ({"podTemplate": {"metadata": {"annotations": {"rocketstore.io/config-hash": "x"}}}},
     "rocketstore.io/* annotations are set by the operator"),
    ({"podTemplate": {"metadata": {"labels": {"team": "pay ments"}}}},
     "spec.podTemplate.metadata.labels.team in body should match"),
    ({"podTemplate": {"env": [{"name": "RUN_DIR", "value": "/"}]}}, "are set by the operator"),
    ({"podTemplate": {"env": [{"value": "x"}]}}, "spec.podTemplate.env[0].name: Required value"),
    ({"imagePullSecrets": [{}]}, "spec.imagePullSecrets[0].name: Required value"),
    ({"podTemplate": {"env": [{"name": "1BAD", "value": "x"}]}}, "spec.podTemplate.env[0].name in body should match"),
    ({"scheduling": {"priorityClassName": "Not_A_Name"}}, "spec.scheduling.priorityClassName in body should match"),
    ({"scheduling": {"topologySpreadConstraints": [{**ZONE_SPREAD, "whenUnsatisfiable": "Sometimes"}]}},
     'spec.scheduling.topologySpreadConstraints[0].whenUnsatisfiable: Unsupported value: "Sometimes"'),
    ({"scheduling": {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z",
                                                    "whenUnsatisfiable": "ScheduleAnyway"}]}},
     "spec.scheduling.topologySpreadConstraints[0].maxSkew in body should be greater than or equal to 1"),
    ({"scheduling": {"topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"}]}},
     "spec.scheduling.topologySpreadConstraints[0].topologyKey: Required value"),
])
def test_bad_overrides_are_rejected_by_the_schema(kube: Any, crd: Any, override: dict[str, Any],
                                                  expected: str) -> None:
    from kubernetes import client

    if "bad-overrides" not in {n.metadata.name for n in client.CoreV1Api(kube).list_namespace().items}:
        _namespace(kube, "bad-overrides")
    with pytest.raises(client.ApiException) as e:
        client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "bad-overrides", P,
                                                                      _store("bad", **override))
    assert e.value.status == 422
    message = json.loads(e.value.body)["message"]
    assert expected in message, message
