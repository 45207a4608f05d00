"""The operator against a REAL API server (etcd, kube-apiserver, controller-manager, scheduler,
kwok fake nodes): schema validation, reconciliation, spec edits as patches, refused changes,
storage growth, deletion keeping PVCs. Broker-side scenarios are in test_operator_brokers.py."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_support import OPERATOR_NAMESPACE, OPERATOR_POD_LABELS, STORAGE_CLASS, wait_until

from rocketstore.operator.model import format_quantity, parse_spec
from rocketstore.operator.sizing import volume_size

pytestmark = pytest.mark.integration

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}


def make_ns(kube: Any, name: str) -> str:
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    wait_until(f"default SA in {name}", lambda: client.CoreV1Api(kube).read_namespaced_service_account(
        "default", name), 60)
    return name


def store(name: str, **spec: Any) -> dict[str, Any]:
    base = {"brokers": 2, "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
            "commitLog": {"segmentSize": "64Mi"}, "scheduling": KWOK}
    base.update(spec)
    return {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": name}, "spec": base}


def create(kube: Any, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, ns, P, body)
    return obj


def get(kube: Any, ns: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(G, V, ns, P, name)
    return obj


def patch_spec(kube: Any, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        G, V, ns, P, name, {"spec": spec})
    return obj


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return None


def reconciled(kube: Any, ns: str, name: str) -> dict[str, Any] | None:
    obj = get(kube, ns, name)
    st = obj.get("status", {})
    return obj if st.get("observedGeneration") == obj["metadata"]["generation"] and "volumeSize" in st else None


# -- schema validation by the API server -----------------------------------------------------------

@pytest.mark.parametrize(("spec", "expected"), [
    ({"brokers": 0}, "spec.brokers: Invalid value: 0: spec.brokers in body should be greater than or equal to 1"),
    ({"retention": {"policy": "sometimes"}}, 'spec.retention.policy: Unsupported value: "sometimes"'),
    ({"retention": {"deleteWhen": "4am"}}, "spec.retention.deleteWhen in body should match"),
    ({"retention": {"diskSpaceCleanForciblyRatio": 0.95}},
     "diskSpaceCleanForciblyRatio must be below diskSpaceWarningLevelRatio"),
    ({"retention": {"diskMaxUsedSpaceRatio": 90}},
     "diskMaxUsedSpaceRatio (percent) must not exceed diskSpaceCleanForciblyRatio"),
    ({"commitLog": {"segmentSize": "3Gi"}}, "spec.commitLog.segmentSize in body should match"),
    ({"storage": {"size": "10GB"}}, "storage.size must be a whole binary quantity"),
    ({"flushDiskType": "SOMETIMES"}, 'spec.flushDiskType: Unsupported value: "SOMETIMES"'),
    ({"brokers": "three"}, "spec.brokers: Invalid value"),
    ({"acl": {"key": "plain_acl.yml"}}, "spec.acl.secretName: Required value"),
    ({"acl": {"secretName": "Bad_Name"}}, "spec.acl.secretName in body should match"),
    ({"acl": {"secretName": "a", "key": "..data"}}, "spec.acl.key in body should match"),
    ({"tls": {"secretName": "t", "mode": "strict"}}, 'spec.tls.mode: Unsupported value: "strict"'),
    ({"tls": {"secretName": "t", "clientAuth": "always"}}, 'spec.tls.clientAuth: Unsupported value: "always"'),
    ({"tls": {"secretName": "t", "clientAuth": "require"}}, "clientAuth optional or require needs trustCertKey"),
    ({"tls": {"secretName": "t", "certKey": "pem", "keyKey": "pem"}},
     "certKey, keyKey and trustCertKey must name different Secret keys"),
    ({"tls": {"secretName": "t", "trustCertKey": "tls.key"}},
     "certKey, keyKey and trustCertKey must name different Secret keys"),
    ({"networkPolicy": {"from": [{}]}},
     'spec.networkPolicy.from[0]: Invalid value: "object": a peer needs a podSelector, a namespaceSelector or an '
     'ipBlock'),
    ({"networkPolicy": {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}},
     'spec.networkPolicy.from[0]: Invalid value: "object": ipBlock may not be combined with podSelector'),
    ({"networkPolicy": {"metricsFrom": [{"ipBlock": {"cidr": "10.1.2.3"}}]}},
     "spec.networkPolicy.metricsFrom[0].ipBlock.cidr in body should match"),
    ({"networkPolicy": {"from": [{"namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}]}},
     'spec.networkPolicy.from[0].namespaceSelector.matchExpressions[0]: Invalid value: "object": In and NotIn '
     'need values'),
    ({"networkPolicy": {"from": [{"podSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}]}},
     'spec.networkPolicy.from[0].podSelector.matchExpressions[0].operator: Unsupported value: "Gt"'),
])
def test_invalid_rocketstores_are_rejected_by_the_api_server(kube: Any, crd: Any, spec: dict[str, Any],
                                                             expected: str) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "bad"}, "spec": spec}
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body)
    assert e.value.status == 422
    message = json.loads(e.value.body)["message"]
    assert expected in message, message


def test_defaults_are_filled_in_by_the_api_server(kube: Any, crd: Any) -> None:
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "defaults"}, "spec": {}}
    obj = client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body, dry_run="All")
    spec = obj["spec"]
    assert spec["brokers"] == 1 and spec["storage"]["segments"] == 10 and spec["commitLog"]["segmentSize"] == "1Gi"
    assert spec["retention"] == {"fileReservedTime": 72, "deleteWhen": "04", "diskMaxUsedSpaceRatio": 75,
                                 "diskSpaceCleanForciblyRatio": 0.85, "diskSpaceWarningLevelRatio": 0.9,
                                 "policy": "fixed", "minFileReservedTime": 6, "adaptiveMargin": 0.05}
    assert spec["metrics"] == {"enabled": True, "port": 10925, "perQueue": True}
    assert parse_spec(spec) == parse_spec({})
    # the schema keeps perQueue (a field it lacked would be pruned, silently)
    body["spec"] = {"metrics": {"perQueue": False}}
    obj = client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, "default", P, body, dry_run="All")
    assert parse_spec(obj["spec"]).metrics.per_queue is False


def test_secret_reference_defaults_are_filled_in_by_the_api_server(kube: Any, crd: Any) -> None:
    def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "secured"}, "spec": spec}
        obj: Any = client.CustomObjectsApi(kube).create_namespaced_custom_object(
            G, V, "default", P, body, dry_run="All")
        return dict(obj["spec"])

    asked = {"acl": {"secretName": "rs-acl"}, "tls": {"secretName": "rs-tls"}}
    spec = defaulted(asked)
    assert spec["acl"] == {"secretName": "rs-acl", "key": "plain_acl.yml"}
    assert spec["tls"] == {"secretName": "rs-tls", "certKey": "tls.crt", "keyKey": "tls.key", "mode": "permissive",
                           "clientAuth": "none", "caKey": "ca.crt"}
    assert parse_spec(spec) == parse_spec(asked)
    # what the schema accepts, the operator accepts: client auth with a CA key
    client_auth = {"secretName": "rs-tls", "trustCertKey": "ca.crt", "clientAuth": "require"}
    tls = parse_spec(defaulted({"tls": client_auth})).tls
    assert tls is not None and tls.trust_cert_key == "ca.crt" and tls.client_auth == "require"


# -- reconciliation ----------------------------------------------------------------------------------

def test_create_builds_everything_and_reports_status(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-create")
    body = store("rs")
    created = create(kube, ns, body)
    obj = wait_until("reconciled status", lambda: reconciled(kube, ns, "rs"), 60)
    uid = created["metadata"]["uid"]
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    size = format_quantity(volume_size(parse_spec(obj["spec"])))
    assert size == "2Gi"  # 2 x 64Mi segments + 2 index files, under 75%

    sts = apps.read_namespaced_stateful_set("rs", ns)
    assert sts.spec.replicas == 2 and sts.spec.service_name == "rs-headless"
    assert sts.metadata.owner_references[0].uid == uid
    assert sts.spec.volume_claim_templates[0].spec.resources.requests["storage"] == size
    assert core.read_namespaced_service("rs-headless", ns).spec.cluster_ip == "None"
    assert core.read_namespaced_service("rs", ns).spec.ports[0].port == 10911
    conf = core.read_namespaced_config_map("rs-config", ns).data["broker.conf"]
    assert "brokerClusterName=rs\n" in conf and "fileReservedTime=72\n" in conf
    assert f"mappedFileSizeCommitLog={64 * 1024 * 1024}\n" in conf
    assert client.PolicyV1Api(kube).read_namespaced_pod_disruption_budget("rs", ns).spec.max_unavailable == 1
    assert core.read_namespaced_service_account("rs-broker", ns).automount_service_account_token is False

    def pvcs_bound() -> list[Any] | None:
        items = core.list_namespaced_persistent_volume_claim(ns).items
        ok = len(items) == 2 and all(p.status.phase == "Bound" for p in items)
        return items if ok else None

    pvcs = wait_until("PVCs bound", pvcs_bound, 60)
    assert sorted(p.metadata.name for p in pvcs) == ["store-rs-0", "store-rs-1"]
    assert all(p.spec.resources.requests["storage"] == size for p in pvcs)

    def pods_running() -> bool:
        pods = core.list_namespaced_pod(ns).items
        return len(pods) == 2 and all(p.status.phase == "Running" and p.spec.node_name == "kwok-node-0"
                                      for p in pods)

    wait_until("broker pods Running on the kwok node", pods_running, 60)
    obj = wait_until("Ready condition", lambda: (o := get(kube, ns, "rs")) and
                     (condition(o, "Ready") or {}).get("status") == "True" and o, 60)
    st = obj["status"]
    assert st["brokersReadyText"] == "2/2" and st["volumeSize"] == "2Gi" and st["retention"] == "72h"
    for t in ("Ready", "Progressing", "Degraded", "DiskPressure"):
        c = condition(obj, t)
        assert c is not None and c["reason"] and c["lastTransitionTime"], t
    # kwok pods have no broker process behind them: honest Degraded, with the brokers named
    degraded = condition(obj, "Degraded")
    assert degraded is not None and degraded["reason"] == "BrokerUnreachable", degraded
    assert [b["name"] for b in st["brokers"]] == ["rs-0", "rs-1"]
    assert st["brokers"][0]["address"] == "rs-0.rs-headless.t-create.svc:10911"

    def reasons() -> set[str]:
        return {e.reason for e in client.CoreV1Api(kube).list_namespaced_event(ns).items
                if e.involved_object.name == "rs" and e.involved_object.kind == "RocketStore"}

    wait_until("Reconciled event", lambda: "Reconciled" in reasons(), 30)


def test_spec_edits_are_patches_not_recreations(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-edit")
    create(kube, ns, store("rs"))
    wait_until("first reconcile", lambda: reconciled(kube, ns, "rs"), 60)
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    wait_until("pods", lambda: len(core.list_namespaced_pod(ns).items) == 2, 60)
    sts_uid = apps.read_namespaced_stateful_set("rs", ns).metadata.uid
    cm_uid = core.read_namespaced_config_map("rs-config", ns).metadata.uid
    pod_uids = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(ns).items}
    template = apps.read_namespaced_stateful_set("rs", ns).spec.template.metadata.annotations

    obj = patch_spec(kube, ns, "rs", {"retention": {"fileReservedTime": 24, "deleteWhen": "03"}, "brokers": 3})
    gen = obj["metadata"]["generation"]
    wait_until("generation observed", lambda: get(kube, ns, "rs").get("status", {}).get("observedGeneration") == gen)
    sts = apps.read_namespaced_stateful_set("rs", ns)
    assert sts.metadata.uid == sts_uid and sts.spec.replicas == 3
    assert sts.spec.template.metadata.annotations == template  # retention is live: no rolling restart
    cm = core.read_namespaced_config_map("rs-config", ns)
    assert cm.metadata.uid == cm_uid and "fileReservedTime=24\n" in cm.data["broker.conf"]
    assert "deleteWhen=03\n" in cm.data["broker.conf"] and "rs-2@rs-2.rs-headless.t-edit.svc" in cm.data["broker.conf"]
    wait_until("third pod", lambda: len(core.list_namespaced_pod(ns).items) == 3, 60)
    # the new broker waits for the store's topics (no broker runs behind kwok's pods to copy them)
    assert get(kube, ns, "rs")["status"].get("topicCopyPending") == ["rs-2"]
    still = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(ns).items}
    assert all(still[n] == u for n, u in pod_uids.items())

    # a GitOps tool's label on the StatefulSet is not fought over (server-side apply, own fields only)
    apps.patch_namespaced_stateful_set("rs", ns, {"metadata": {"labels": {"team": "payments"}}})
    patch_spec(kube, ns, "rs", {"retention": {"fileReservedTime": 12}})
    wait_until("fileReservedTime=12", lambda: "fileReservedTime=12\n" in core.read_namespaced_config_map(
        "rs-config", ns).data["broker.conf"])
    assert apps.read_namespaced_stateful_set("rs", ns).metadata.labels["team"] == "payments"

    # scale down is refused without scaling.allowScaleDown
    patch_spec(kube, ns, "rs", {"brokers": 1})
    obj = wait_until("ScaleDownRefused", lambda: (o := get(kube, ns, "rs")) and
                     (condition(o, "Degraded") or {}).get("reason") == "ScaleDownRefused" and o, 60)
    assert apps.read_namespaced_stateful_set("rs", ns).spec.replicas == 3
    # allowed, it drains first: no broker runs behind these (kwok) pods, so the leaving brokers'
    # backlog is unknown and the drain waits until its deadline
    patch_spec(kube, ns, "rs", {"brokers": 1, "scaling": {"allowScaleDown": True, "drainTimeoutSeconds": 5}})
    obj = wait_until("Draining", lambda: (o := get(kube, ns, "rs")) and (
        condition(o, "Draining") or {}).get("status") == "True" and o, 60)
    drain = obj["status"]["drain"]
    assert (drain["targetBrokers"], drain["brokers"], drain["phase"]) == (1, ["rs-1", "rs-2"], "Draining"), drain
    assert drain["unreachable"] == ["rs-1", "rs-2"], drain
    assert "backlog unknown on rs-1, rs-2" in condition(obj, "Draining")["message"]  # type: ignore[index]
    assert apps.read_namespaced_stateful_set("rs", ns).spec.replicas == 3
    wait_until("scaled down at the drain's deadline",
               lambda: apps.read_namespaced_stateful_set("rs", ns).spec.replicas == 1, 150)
    assert len(core.list_namespaced_persistent_volume_claim(ns).items) == 3  # PVCs of removed brokers kept
    # the drain is over: its record and condition go
    obj = wait_until("drain cleared", lambda: (o := get(kube, ns, "rs")) and not o["status"].get("drain") and
                     condition(o, "Draining") is None and o, 90)
    assert not obj["status"].get("topicCopyPending")  # rs-2 is gone: nothing to copy to


def test_invalid_spec_becomes_a_condition_not_a_crash(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-invalid")
    create(kube, ns, store("rs", brokerConfig={"listenPort": "1"}))  # schema-valid, operator-owned key
    obj = wait_until("InvalidSpec", lambda: (o := get(kube, ns, "rs")) and
                     (condition(o, "Degraded") or {}).get("reason") == "InvalidSpec" and o, 60)
    assert "spec.brokerConfig.listenPort" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    assert operator_process["proc"].poll() is None
    # fixing the spec recovers
    patch_spec(kube, ns, "rs", {"brokerConfig": None})
    wait_until("recovered", lambda: reconciled(kube, ns, "rs") and
               (condition(get(kube, ns, "rs"), "Degraded") or {}).get("reason") != "InvalidSpec", 60)


def test_an_image_outside_the_allow_list_is_refused_and_an_allowed_one_runs(kube: Any,
                                                                            operator_process: Any) -> None:
    """The test operator allows ``ALLOWED_IMAGES`` besides its default image: another spec.image
    gets ImageNotAllowed and no StatefulSet; an image matching the pattern runs."""
    ns = make_ns(kube, "t-image")
    apps = client.AppsV1Api(kube)
    create(kube, ns, store("rs", brokers=1, image="attacker.example/miner:1"))
    obj = wait_until("ImageNotAllowed", lambda: (o := get(kube, ns, "rs")) and
                     (condition(o, "Degraded") or {}).get("reason") == "ImageNotAllowed" and o, 60)
    assert "'attacker.example/miner:1' is not an allowed broker image" in condition(obj, "Degraded")["message"]  # type: ignore[index]
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_stateful_set("rs", ns)
    assert missing.value.status == 404
    patch_spec(kube, ns, "rs", {"image": "registry.test/rocketstore:2.0"})
    wait_until("recovered", lambda: reconciled(kube, ns, "rs") and
               (condition(get(kube, ns, "rs"), "Degraded") or {}).get("reason") != "ImageNotAllowed", 60)
    assert (apps.read_namespaced_stateful_set("rs", ns).spec.template.spec.containers[0].image
            == "registry.test/rocketstore:2.0")


def test_missing_secret_or_key_is_reported_and_clears_when_fixed(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-secret")
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    create(kube, ns, store("rs", brokers=1, tls={"secretName": "rs-tls", "trustCertKey": "ca.crt"}))

    def degraded_reason(reason: str) -> dict[str, Any] | None:
        obj = get(kube, ns, "rs")
        c = condition(obj, "Degraded") or {}
        return c if c.get("reason") == reason else None

    c = wait_until("SecretNotFound", lambda: degraded_reason("SecretNotFound"), 60)
    assert "spec.tls.secretName: Secret rs-tls not found in t-secret" in c["message"], c
    # the objects are applied all the same: the pods start once the Secret exists
    volumes = apps.read_namespaced_stateful_set("rs", ns).spec.template.spec.volumes
    assert [v.secret.secret_name for v in volumes if v.secret is not None] == ["rs-tls"]

    core.create_namespaced_secret(ns, {"metadata": {"name": "rs-tls"}, "type": "Opaque",
                                       "stringData": {"tls.crt": "c", "tls.key": "k"}})
    c = wait_until("SecretKeyMissing", lambda: degraded_reason("SecretKeyMissing"), 30)
    assert "Secret rs-tls has no key ca.crt" in c["message"], c
    core.patch_namespaced_secret("rs-tls", ns, {"stringData": {"ca.crt": "a"}})
    # kwok pods run no broker: Degraded stays, for the brokers only
    wait_until("the Secret problem cleared", lambda: degraded_reason("BrokerUnreachable"), 30)


def test_storage_grows_in_place_and_never_shrinks(kube: Any, operator_process: Any) -> None:
    ns = make_ns(kube, "t-grow")
    create(kube, ns, store("rs", brokers=1))
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    wait_until("PVC bound", lambda: [p for p in core.list_namespaced_persistent_volume_claim(ns).items
                                     if p.status.phase == "Bound"], 60)
    wait_until("pod", lambda: core.list_namespaced_pod(ns).items, 60)
    pod_uid = core.list_namespaced_pod(ns).items[0].metadata.uid
    old_sts = apps.read_namespaced_stateful_set("rs", ns).metadata.uid

    patch_spec(kube, ns, "rs", {"storage": {"segments": 40}})  # 2Gi -> 5Gi
    want = format_quantity(volume_size(parse_spec(store("rs", storage={"segments": 40})["spec"])))
    assert want == "5Gi"
    wait_until("PVC expanded", lambda: core.read_namespaced_persistent_volume_claim(
        "store-rs-0", ns).spec.resources.requests["storage"] == want, 60)
    sts = wait_until("new template", lambda: (s := apps.read_namespaced_stateful_set("rs", ns)) and
                     s.spec.volume_claim_templates[0].spec.resources.requests["storage"] == want and s, 60)
    assert sts.metadata.uid != old_sts  # templates are immutable: recreated...
    assert core.list_namespaced_pod(ns).items[0].metadata.uid == pod_uid  # ...with the pod orphaned, not killed

    patch_spec(kube, ns, "rs", {"storage": {"segments": 2}})
    obj = wait_until("StorageShrinkRefused", lambda: (o := get(kube, ns, "rs")) and
                     (condition(o, "Degraded") or {}).get("reason") == "StorageShrinkRefused" and o, 60)
    assert obj["status"]["volumeSize"] == "5Gi"
    assert apps.read_namespaced_stateful_set("rs", ns).spec.volume_claim_templates[0].spec.resources.requests[
        "storage"] == "5Gi"


@pytest.mark.parametrize("delete_claim", [False, True])
def test_delete_keeps_pvcs_unless_delete_claim(kube: Any, operator_process: Any, delete_claim: bool) -> None:
    ns = make_ns(kube, f"t-delete-{str(delete_claim).lower()}")
    create(kube, ns, store("rs", brokers=1, storage={"segments": 2, "storageClassName": STORAGE_CLASS,
                                                      "deleteClaim": delete_claim}))
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    wait_until("PVC", lambda: core.list_namespaced_persistent_volume_claim(ns).items, 60)
    wait_until("pod running", lambda: [p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"])
    client.CustomObjectsApi(kube).delete_namespaced_custom_object(G, V, ns, P, "rs")

    def sts_gone() -> bool:
        try:
            apps.read_namespaced_stateful_set("rs", ns)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until("StatefulSet garbage-collected", sts_gone, 60)
    if delete_claim:
        wait_until("PVC deleted", lambda: not core.list_namespaced_persistent_volume_claim(ns).items, 90)
    else:
        wait_until("pods gone", lambda: not core.list_namespaced_pod(ns).items, 60)
        assert [p.metadata.name for p in core.list_namespaced_persistent_volume_claim(ns).items] == ["store-rs-0"]


def test_operator_metrics_and_liveness(operator_process: Any) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator_process['metrics']}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert "rocketstore_operator_reconciles_total" in text
    assert "rocketstore_operator_tuning_actions_total" in text
    assert "rocketstore_operator_errors_total" in text


def test_network_policy_selects_the_stores_pods_and_goes_with_the_field(kube: Any, operator_process: Any) -> None:
    """spec.networkPolicy -> one NetworkPolicy the API server accepts (ports ranges included),
    owned by the RocketStore, selecting every pod of the store, masters and slaves; the operator's
    pods (as --operator-pod-selector names them) let in to remoting and HTTP; removing the field
    deletes it, and neither step touches the brokers' pod template.

    The test control plane has no network plugin, so nothing enforces the policy here: this checks
    what the operator asks for; whether packets are dropped is the cluster's CNI's business."""
    ns = make_ns(kube, "t-netpol")
    apps, core, net = client.AppsV1Api(kube), client.CoreV1Api(kube), client.NetworkingV1Api(kube)
    clients = {"namespaceSelector": {"matchLabels": {"team": "payments"}}}
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    outside = {"ipBlock": {"cidr": "203.0.113.0/24", "except": ["203.0.113.128/25"]}}
    # brokers on node ports 32300 + i, their slaves on 32364 + i (a port range per StatefulSet)
    obj = create(kube, ns, store("rs", brokers=2, replication={"replicasPerGroup": 2},
                                 externalAccess={"basePort": 32300, "namesrvNodePort": 32290},
                                 networkPolicy={"from": [clients, outside], "metricsFrom": [prometheus]}))
    policy = wait_until("NetworkPolicy", lambda: _network_policy(net, ns, "rs"), 60)
    wait_until("reconciled", lambda: reconciled(kube, ns, "rs"), 60)
    assert [(r.kind, r.name, r.uid, r.controller) for r in policy.metadata.owner_references] == [
        ("RocketStore", "rs", obj["metadata"]["uid"], True)]
    assert policy.spec.policy_types == ["Ingress"]
    # the policy's pods are the store's: every pod of its StatefulSets, masters and slaves
    selected = wait_until("the store's 4 pods", lambda: (pods := {p.metadata.name for p in core.list_namespaced_pod(
        ns, label_selector=_selector(policy.spec.pod_selector.match_labels)).items}) and len(pods) == 4 and pods, 90)
    assert selected == {"rs-0", "rs-1", "rs-slave-1-0", "rs-slave-1-1"}
    owned = {p.metadata.name for s in apps.list_namespaced_stateful_set(ns).items
             for p in core.list_namespaced_pod(ns, label_selector=_selector(s.spec.selector.match_labels)).items}
    assert owned == selected
    # as the API server stored it, in its own spelling
    ingress = kube.sanitize_for_serialization(policy)["spec"]["ingress"]

    def ports(peers: list[dict[str, Any]]) -> list[tuple[int, int | None]] | None:
        (rule,) = [r for r in ingress if r["from"] == peers]
        return None if "ports" not in rule else [(p["port"], p.get("endPort")) for p in rule["ports"]]

    remoting = [(32300, 32301), (32364, 32365)]
    assert ports([clients, outside]) == [*remoting, (9876, None), (8081, None)]
    assert ports([prometheus]) == [(10925, None)]
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}},
                "podSelector": {"matchLabels": OPERATOR_POD_LABELS}}
    assert ports([operator]) == [*remoting, (10925, None)]
    # the store's own pods: every port (HA on listenPort + 1, registration with the peers' name servers)
    assert ports([{"podSelector": {"matchLabels": policy.spec.pod_selector.match_labels}}]) is None
    assert len(ingress) == 4
    def templates() -> dict[str, Any]:
        return {s.metadata.name: kube.sanitize_for_serialization(s.spec.template)
                for s in apps.list_namespaced_stateful_set(ns).items}

    before = templates()
    # removing the field deletes the policy; the brokers' pods are left alone
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(G, V, ns, P, "rs", {"spec": {"networkPolicy": None}})
    wait_until("NetworkPolicy deleted", lambda: _network_policy(net, ns, "rs") is None, 60)
    wait_until("reconciled", lambda: reconciled(kube, ns, "rs"), 60)
    assert templates() == before


def _network_policy(net: Any, ns: str, name: str) -> Any:
    try:
        return net.read_namespaced_network_policy(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())
