"""The Helm chart: one CRD source of truth, ``helm lint``, ``helm template`` validated by the real
API server (server-side dry-run), ``helm install`` against it, and least-privilege RBAC.

helm is built from the Go module proxy by tests/controlplane/helm.sh (cached by version).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_support import ROOT, free_port, wait_until

CHART = ROOT / "charts" / "rocketstore-operator"


def test_chart_crd_is_the_repository_crd() -> None:
    """crds/rocketstore.yaml is the source of truth; the chart must carry the same bytes."""
    assert (CHART / "crds" / "rocketstore.yaml").read_bytes() == (ROOT / "crds" / "rocketstore.yaml").read_bytes(), (
        "run: cp crds/rocketstore.yaml charts/rocketstore-operator/crds/rocketstore.yaml")


#: short names built into Kubernetes (kubectl api-resources); a CRD that claims one of them makes
#: `kubectl get <it>` ambiguous, and kubectl resolves it to whichever it finds first
BUILTIN_SHORT_NAMES = {
    "cm", "cs", "csr", "cj", "crd", "crds", "deploy", "ds", "ep", "ev", "hpa", "ing", "limits", "netpol", "no",
    "ns", "pc", "pdb", "po", "pv", "pvc", "quota", "rc", "rs", "sa", "sc", "sts", "svc",
}


def test_crd_short_names_are_not_kubernetes_own() -> None:
    names = yaml.safe_load((ROOT / "crds" / "rocketstore.yaml").read_text())["spec"]["names"]
    assert names["shortNames"] == ["rstore"]
    assert not set(names["shortNames"]) & BUILTIN_SHORT_NAMES


def test_example_is_a_valid_spec() -> None:
    from rocketstore.operator.model import parse_spec
    from rocketstore.operator.sizing import volume_size

    example = yaml.safe_load((CHART / "examples" / "rocketstore.yaml").read_text())
    spec = parse_spec(example["spec"])
    assert spec.brokers == 3 and volume_size(spec) == 17 * 1024**3


def test_chart_app_version_is_the_package_version() -> None:
    """The chart runs image rocketstore/rocketstore:<appVersion> as the operator, which defaults
    brokers to rocketstore/rocketstore:<its package version>: one release, one image."""
    import tomllib

    from rocketstore.operator.desired import IMAGE_REPOSITORY

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == package
    assert yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"] == IMAGE_REPOSITORY


def run_helm(helm: Path, *args: str, kubeconfig: Path | None = None) -> str:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/rs-helm/cache", "HELM_CONFIG_HOME": "/tmp/rs-helm/config",
           "HELM_DATA_HOME": "/tmp/rs-helm/data"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    out = subprocess.run([str(helm), *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.integration
def test_helm_lint(helm: Path) -> None:
    out = run_helm(helm, "lint", "--strict", str(CHART))
    assert "0 chart(s) failed" in out
    run_helm(helm, "lint", "--strict", str(CHART), "--set", "watch.namespaces={a,b}")


@pytest.mark.integration
@pytest.mark.parametrize("values", [[], ["--set", "watch.namespaces={team-a,team-b}"],
                                    ["--set", "networkPolicy.enabled=true", "--set-json",
                                     'networkPolicy.from=[{"namespaceSelector": {"matchLabels": {"team": "obs"}}}]']])
def test_helm_template_is_accepted_by_the_api_server(helm: Path, kube: Any, crd: Any, values: list[str]) -> None:
    from kubernetes import client, utils

    core = client.CoreV1Api(kube)
    for ns in ("rso-dry", "team-a", "team-b"):
        if ns not in {n.metadata.name for n in core.list_namespace().items}:
            core.create_namespace({"metadata": {"name": ns}})
    docs = [d for d in yaml.safe_load_all(run_helm(helm, "template", "rso", str(CHART), "-n", "rso-dry",
                                                    "--kube-version", "1.34.10", *values))
            if d]
    kinds = sorted(d["kind"] for d in docs if "helm.sh/hook" not in d["metadata"].get("annotations", {}))
    hooks = sorted(d["kind"] for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete")
    if "watch.namespaces={team-a,team-b}" in values:
        # one per watched namespace, and the leader election's in the release's
        assert kinds.count("Role") == 3 and kinds.count("RoleBinding") == 3
        # the uninstall hook's: the operator's Deployment in the release's, RocketStores in each watched
        assert hooks == ["Job", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "ServiceAccount"]
    elif values:
        assert kinds.count("NetworkPolicy") == 1
    else:
        assert {"ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount", "Service"} <= set(kinds)
        assert hooks == ["ClusterRole", "ClusterRoleBinding", "Job", "Role", "RoleBinding", "ServiceAccount"]
    # server-side dry-run: admission and schema validation of every object, nothing persisted
    utils.create_from_yaml(kube, yaml_objects=docs, namespace="rso-dry", dry_run="All")
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    assert ("--namespace=team-a" in args) if "watch.namespaces={team-a,team-b}" in values else (
        "--all-namespaces" in args)


@pytest.mark.integration
def test_helm_install_and_least_privilege(helm: Path, control_plane: Any, kube: Any, crd: Any) -> None:
    from kubernetes import client

    out = run_helm(helm, "install", "rso", str(CHART), "-n", "rso-system", "--create-namespace",
                   "--set", "tolerations[0].key=kwok.x-k8s.io/node", "--set", "tolerations[0].operator=Exists",
                   "--set", "nodeSelector.type=kwok", "--wait", "--timeout", "120s",
                   kubeconfig=control_plane.kubeconfig)
    assert "rocketstore-operator" in out and "STATUS: deployed" in out
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    dep = apps.read_namespaced_deployment("rso-rocketstore-operator", "rso-system")
    assert dep.status.ready_replicas == 2
    pod = wait_until("operator pod Running on kwok", lambda: [
        p for p in core.list_namespaced_pod("rso-system").items if p.status.phase == "Running"], 60)[0]
    assert pod.spec.service_account_name == "rso-rocketstore-operator"

    sa = "system:serviceaccount:rso-system:rso-rocketstore-operator"
    authz = client.AuthorizationV1Api(kube)

    def allowed(verb: str, resource: str, group: str = "", sub: str = "", ns: str = "anywhere",
                name: str = "") -> bool:
        review = {"spec": {"user": sa, "groups": ["system:serviceaccounts"], "resourceAttributes": {
            "namespace": ns, "verb": verb, "group": group, "resource": resource, "subresource": sub,
            "name": name}}}
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert allowed("watch", "rocketstores", "rocketstore.io")
    assert allowed("patch", "rocketstores", "rocketstore.io", "status")
    assert allowed("patch", "statefulsets", "apps") and allowed("delete", "statefulsets", "apps")
    assert allowed("patch", "persistentvolumeclaims") and allowed("create", "events")
    assert allowed("delete", "services") and allowed("delete", "configmaps")  # external access pruned
    assert allowed("delete", "pods")  # a Lease group's rolling restart (OnDelete), member by member
    # a RocketStore's NetworkPolicy, deleted once spec.networkPolicy is removed
    assert allowed("patch", "networkpolicies", "networking.k8s.io")
    assert allowed("delete", "networkpolicies", "networking.k8s.io")
    assert not allowed("delete", "persistentvolumeclaims")  # PVCs are never deleted by the operator
    assert not allowed("get", "secrets")
    assert not allowed("delete", "rocketstores", "rocketstore.io")
    assert not allowed("create", "clusterroles", "rbac.authorization.k8s.io")
    # replication.failover Lease: the brokers' Role and RoleBinding, which Kubernetes lets the
    # operator write only with the Lease verbs they grant; and the Leases listed for status
    for verb in ("create", "patch", "delete"):
        assert allowed(verb, "roles", "rbac.authorization.k8s.io")
        assert allowed(verb, "rolebindings", "rbac.authorization.k8s.io")
    for verb in ("get", "create", "update", "list", "watch"):
        assert allowed(verb, "leases", "coordination.k8s.io")
    assert not allowed("delete", "leases", "coordination.k8s.io")
    # leader election: its own Lease in its own namespace, nothing else
    lease = "rso-rocketstore-operator"
    assert allowed("patch", "leases", "coordination.k8s.io", ns="rso-system", name=lease)
    assert allowed("create", "leases", "coordination.k8s.io", ns="rso-system")
    assert not allowed("patch", "leases", "coordination.k8s.io", ns="rso-system", name="kube-scheduler")
    assert not allowed("patch", "leases", "coordination.k8s.io", ns="kube-system", name=lease)
    run_helm(helm, "uninstall", "rso", "-n", "rso-system", "--wait", kubeconfig=control_plane.kubeconfig)


@pytest.mark.integration
def test_reading_referenced_secrets_is_opt_in(helm: Path) -> None:
    def secret_rules(*values: str) -> list[dict[str, Any]]:
        docs = [d for d in yaml.safe_load_all(run_helm(helm, "template", "rso", str(CHART), "--kube-version", "1.34.10",
                                                                  *values)) if d]
        return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d.get("rules", [])
                if "secrets" in r["resources"]]

    assert secret_rules() == []
    assert secret_rules("--set", "rbac.readReferencedSecrets=true") == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    namespaced = secret_rules("--set", "rbac.readReferencedSecrets=true", "--set", "watch.namespaces={a,b}")
    assert len(namespaced) == 2


# -- values, overrides, packaging, helm test -------------------------------------------------------

def render(helm: Path, *values: str, api_versions: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    extra = [a for v in api_versions for a in ("--api-versions", v)]
    out = run_helm(helm, "template", "rso", str(CHART), "-n", "rso-system", "--kube-version", "1.34.10",
                   *extra, *values)
    return [d for d in yaml.safe_load_all(out) if d]


def helm_fails(helm: Path, *args: str) -> str:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/rs-helm/cache", "HELM_CONFIG_HOME": "/tmp/rs-helm/config",
           "HELM_DATA_HOME": "/tmp/rs-helm/data"}
    out = subprocess.run([str(helm), *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0, out.stdout
    return out.stdout + out.stderr


@pytest.mark.integration
@pytest.mark.parametrize(("value", "error"), [
    ("replicaCount=-1", "at '/replicaCount': minimum"),
    ("leaderElection.leaseDuration=0", "at '/leaderElection/leaseDuration'"),
    ("podAntiAffinity=required", "at '/podAntiAffinity'"),
    ("operator.livenessPort=70000", "at '/operator/livenessPort': maximum"),
    ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
    ("watch.namespaces={Team_A}", "at '/watch/namespaces/0'"),
    ("metrics.prometheusRule.for=soon", "at '/metrics/prometheusRule/for'"),
    ("metrics.prometheusRule.replicationLagBytes=0", "at '/metrics/prometheusRule/replicationLagBytes'"),
    ("metrics.prometheusRule.syncMasterWithoutSlaveFor=now", "at '/metrics/prometheusRule/syncMasterWithoutSlaveFor'"),
    ("metrics.serviceMonitor.enabled=yes", "at '/metrics/serviceMonitor/enabled'"),
    ("allowedBrokerImages={a b}", "at '/allowedBrokerImages/0'"),
    ("networkPolicy.enabled=yes", "at '/networkPolicy/enabled'"),
    ("networkPolicy.from[0].ipBlock.cidr=10.0.0.0", "at '/networkPolicy/from/0/ipBlock/cidr'"),
    ("networkPolicy.from[0].ipBlock.cidr=10.0.0.0/8,networkPolicy.from[0].podSelector.matchLabels.app=x",
     "at '/networkPolicy/from/0/podSelector'"),
    ("networkPolicy.from[0].ports[0]=80", "additional properties 'ports' not allowed"),
    ("operatr.interval=5", "additional properties 'operatr' not allowed"),
])
def test_values_schema_rejects_bad_values(helm: Path, value: str, error: str) -> None:
    for command in (["template", "rso", str(CHART), "--kube-version", "1.34.10"], ["lint", "--strict", str(CHART)]):
        assert error in helm_fails(helm, *command, "--set", value)


@pytest.mark.integration
def test_replicas_elect_a_leader_and_spread(helm: Path) -> None:
    docs = render(helm)
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["strategy"]["type"] == "RollingUpdate"
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"--leader-elect", "--leader-elect-lease=rso-rocketstore-operator", "--leader-elect-lease-duration=15",
            "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"} <= set(args)
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    term = deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    lease_rules = next(d for d in docs if d["kind"] == "Role")["rules"]
    assert lease_rules[0]["resourceNames"] == ["rso-rocketstore-operator"]

    single = render(helm, "--set", "replicaCount=1")
    assert "PodDisruptionBudget" not in {d["kind"] for d in single}
    assert "affinity" not in next(d for d in single if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}
    mine = render(helm, "--set-json", f"affinity={json.dumps(own)}")
    assert next(d for d in mine if d["kind"] == "Deployment")["spec"]["template"]["spec"]["affinity"] == own
    assert "leaderElection" in helm_fails(helm, "template", "rso", str(CHART), "--kube-version", "1.34.10",
                                          "--set", "leaderElection.renewDeadline=20")


@pytest.mark.integration
def test_name_overrides(helm: Path) -> None:
    docs = render(helm, "--set", "fullnameOverride=rs-op")
    assert {d["metadata"]["name"] for d in docs if d["kind"] in ("Deployment", "ServiceAccount")} == {
        "rs-op", "rs-op-uninstall"}  # the second: the uninstall hook's
    named = render(helm, "--set", "nameOverride=rso-ctl")
    deploy = next(d for d in named if d["kind"] == "Deployment")
    assert deploy["metadata"]["name"] == "rso-rso-ctl"
    assert deploy["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "rso-ctl"


@pytest.mark.integration
def test_operator_pod_options_and_probes(helm: Path) -> None:
    docs = render(helm, "--set-string", "podAnnotations.example\\.com/a=1", "--set", "podLabels.team=ops",
                  "--set", "extraArgs={--verbose}", "--set", "extraEnv[0].name=TZ", "--set", "extraEnv[0].value=UTC",
                  "--set", "brokerImage=registry.local/rocketstore:7", "--set", "priorityClassName=ops")
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    tpl = deploy["spec"]["template"]
    assert tpl["metadata"]["annotations"] == {"example.com/a": "1"}
    assert tpl["metadata"]["labels"]["team"] == "ops"
    assert tpl["metadata"]["labels"]["app.kubernetes.io/instance"] == "rso"
    assert tpl["spec"]["priorityClassName"] == "ops"
    c = tpl["spec"]["containers"][0]
    assert c["args"][-2:] == ["--broker-image=registry.local/rocketstore:7", "--verbose"]
    assert c["env"] == [{"name": "TZ", "value": "UTC"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe
    plain = next(d for d in render(helm) if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    # brokers default to the operator's own image, so a registry set for one holds both
    assert "--broker-image=rocketstore/rocketstore:0.1.0" in plain["args"]
    assert not any(a.startswith("--allowed-broker-images") for a in plain["args"])
    moved = next(d for d in render(helm, "--set", "image.repository=registry.local/rs", "--set-string", "image.tag=9")
                 if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert moved["image"] == "registry.local/rs:9" and "--broker-image=registry.local/rs:9" in moved["args"]
    assert "env" not in plain
    allowing = next(d for d in render(helm, "--set", "allowedBrokerImages={reg.local/rs:*,reg.local/rs-debug:7}")
                    if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--allowed-broker-images=reg.local/rs:*,reg.local/rs-debug:7" in allowing["args"]


@pytest.mark.integration
def test_operator_network_policy_is_opt_in_and_names_the_operator_pod(helm: Path) -> None:
    """The operator pod's NetworkPolicy: off by default; on, its health and metrics ports open to
    the peers in values and to the helm test pod only. The operator learns its own pods' labels
    and namespace, which every RocketStore's NetworkPolicy lets in: the Deployment's template
    carries those labels and the helm test pod does not."""
    assert not [d for d in render(helm) if d["kind"] == "NetworkPolicy"]
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    docs = render(helm, "--set", "networkPolicy.enabled=true", "--set", "operator.metricsPort=9090",
                  "--set-json", f"networkPolicy.from={json.dumps([monitoring])}")
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    template_labels = deploy["spec"]["template"]["metadata"]["labels"]
    operator_labels = policy["spec"]["podSelector"]["matchLabels"]
    assert operator_labels.items() <= template_labels.items()
    assert operator_labels["app.kubernetes.io/component"] == "operator"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    peers, test = policy["spec"]["ingress"]
    assert peers == {"from": [monitoring], "ports": [{"protocol": "TCP", "port": 8080},
                                                     {"protocol": "TCP", "port": 9090}]}
    test_pod = next(d for d in docs if d["kind"] == "Pod")
    assert test["from"][0]["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()
    assert test["ports"] == [{"protocol": "TCP", "port": 8080}]
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    selector_arg = next(a for a in args if a.startswith("--operator-pod-selector="))
    flag_labels = dict(pair.split("=") for pair in selector_arg.partition("=")[2].split(","))
    assert flag_labels == operator_labels
    assert not flag_labels.items() <= test_pod["metadata"]["labels"].items()
    assert "--operator-namespace=rso-system" in args
    # the operator may manage the RocketStores' NetworkPolicies, cluster-wide or per watched namespace
    for values in ((), ("--set", "watch.namespaces={a,b}")):
        roles = [d for d in render(helm, *values) if d["kind"] in ("ClusterRole", "Role")]
        granted = [r for d in roles for r in d["rules"] if "networkpolicies" in r["resources"]]
        assert len(granted) == (2 if values else 1)
        assert all(r["apiGroups"] == ["networking.k8s.io"] and {"create", "patch", "delete", "list"} <= set(r["verbs"])
                   for r in granted)


@pytest.mark.integration
def test_packaged_chart_installs_in_a_restricted_namespace_with_notes(
        helm: Path, control_plane: Any, kube: Any, crd: Any, tmp_path: Path) -> None:
    """The .tgz carries everything the templates read (dashboards/ for the ConfigMap); its
    NOTES render; the operator and `helm test` pods pass the restricted Pod Security Standard."""
    from kubernetes import client

    run_helm(helm, "package", str(CHART), "-d", str(tmp_path))
    (tgz,) = tmp_path.glob("rocketstore-operator-*.tgz")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": "rsp-system", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    out = run_helm(helm, "install", "rsp", str(tgz), "-n", "rsp-system", "--set", "fullnameOverride=rsp-op",
                   "--set", "tolerations[0].key=kwok.x-k8s.io/node", "--set", "tolerations[0].operator=Exists",
                   "--set", "nodeSelector.type=kwok", "--set", "metrics.dashboard.enabled=true",
                   "--wait", "--timeout", "120s", kubeconfig=control_plane.kubeconfig)
    assert "STATUS: deployed" in out
    assert "kind: RocketStore" in out and "helm test rsp -n rsp-system" in out  # NOTES
    assert "charts/rocketstore-operator" not in out  # no path into a source tree
    dashboard = core.read_namespaced_config_map("rsp-op-dashboard", "rsp-system")
    assert dashboard.metadata.labels["grafana_dashboard"] == "1"
    assert json.loads(dashboard.data["rocketstore.json"]) == json.loads(
        (CHART / "dashboards" / "rocketstore.json").read_text())
    # the helm test pod is admitted in the restricted namespace (kwok never runs its command, and
    # completes only Job pods: test_helm_test_pod_checks_the_operator_health runs the command)
    hooks = [d for d in yaml.safe_load_all(run_helm(
        helm, "get", "hooks", "rsp", "-n", "rsp-system", kubeconfig=control_plane.kubeconfig)) if d]
    test_pod = next(d for d in hooks if d["kind"] == "Pod")
    core.create_namespaced_pod("rsp-system", test_pod, dry_run="All")
    # and so is the pre-delete Job's pod (the uninstall below runs it)
    job = next(d for d in hooks if d["kind"] == "Job")
    core.create_namespaced_pod("rsp-system", {"metadata": {"name": "rsp-uninstall-check", **job["spec"]["template"][
        "metadata"]}, "spec": {**job["spec"]["template"]["spec"], "serviceAccountName": "default"}}, dry_run="All")
    run_helm(helm, "uninstall", "rsp", "-n", "rsp-system", "--wait", kubeconfig=control_plane.kubeconfig)


def _test_pod_command(helm: Path) -> list[str]:
    pod = next(d for d in render(helm) if d["kind"] == "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["containers"][0]["image"] == next(
        d for d in render(helm) if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    command: list[str] = pod["spec"]["containers"][0]["command"]
    assert command[-1] == "http://rso-rocketstore-operator-metrics.rso-system.svc:8080/healthz"
    return command


@pytest.mark.integration
def test_helm_test_pod_checks_the_operator_health(helm: Path, operator_process: dict[str, Any]) -> None:
    """The hook pod's own command, run here against the real operator's /healthz (the pod would
    reach the same endpoint through the metrics Service)."""
    python, flag, script, _url = _test_pod_command(helm)
    assert (python, flag) == ("python", "-c")
    live = f"http://127.0.0.1:{operator_process['liveness']}"
    ok = subprocess.run([sys.executable, "-c", script, f"{live}/healthz", "10"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert f"{live}/healthz 200" in ok.stdout
    bad = subprocess.run([sys.executable, "-c", script, f"http://127.0.0.1:{free_port()}/healthz", "2"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "Connection refused" in bad.stderr


# -- metrics wiring --------------------------------------------------------------------------------

MONITORING = ("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.podMonitor.enabled=true",
              "--set", "metrics.prometheusRule.enabled=true")


@pytest.mark.integration
def test_prometheus_operator_objects_need_the_flag_and_the_api(helm: Path) -> None:
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not kinds & {d["kind"] for d in render(helm, *MONITORING)}, "rendered without monitoring.coreos.com/v1"
    assert not kinds & {d["kind"] for d in render(helm, api_versions=("monitoring.coreos.com/v1",))}
    docs = render(helm, *MONITORING, api_versions=("monitoring.coreos.com/v1",))
    assert kinds <= {d["kind"] for d in docs}
    pm = next(d for d in docs if d["kind"] == "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "rocketstore",
                                                     "app.kubernetes.io/component": "broker"}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http"  # desired.HTTP_PORT_NAME
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    # the SYNC_MASTER alert tells groups apart by the pod label the operator sets (Prometheus
    # spells a pod label's name with every character but letters and digits as "_")
    from rocketstore.operator.desired import ROLE_LABEL

    meta_label = "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", ROLE_LABEL)
    assert {"sourceLabels": [meta_label], "targetLabel": "broker_role"} \
        in pm["spec"]["podMetricsEndpoints"][0]["relabelings"]
    sync_alert = next(r for g in next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"]
                      for r in g["rules"] if r["alert"] == "RocketStoreSyncMasterWithoutSlave")
    assert sync_alert["expr"] == 'rocketstore_ha_slaves_in_sync{broker_role="SYNC_MASTER"} == 0'
    scoped = render(helm, *MONITORING, "--set", "watch.namespaces={a}", api_versions=("monitoring.coreos.com/v1",))
    assert next(d for d in scoped if d["kind"] == "PodMonitor")["spec"]["namespaceSelector"] == {"matchNames": ["a"]}


def _rules(helm: Path) -> dict[str, Any]:
    docs = render(helm, *MONITORING, api_versions=("monitoring.coreos.com/v1",))
    spec: dict[str, Any] = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]
    return spec


@pytest.mark.integration
def test_alert_rules_pass_promtool(helm: Path, tmp_path: Path) -> None:
    from tool_support import require_executable, require_tool

    require_executable("apt-get", "promtool comes from the Debian package prometheus (tests/controlplane/promtool.sh)")
    built = subprocess.run([str(ROOT / "tests" / "controlplane" / "promtool.sh")], capture_output=True, text=True,
                           timeout=3600)
    require_tool("promtool", built.returncode == 0, f"tests/controlplane/promtool.sh failed: {built.stderr[-2000:]}")
    promtool = built.stdout.strip().splitlines()[-1]
    rules = _rules(helm)
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"RocketStoreDiskPressure", "RocketStoreDispatchLag", "RocketStoreConsumerLag",
            "RocketStoreBrokerNotReady", "RocketStoreReconcileErrors", "RocketStoreSyncMasterWithoutSlave",
            "RocketStoreReplicationLag", "RocketStoreReplicationLagSeconds", "RocketStoreSlaveDisconnected",
            "RocketStoreSlaveRefusedLog", "RocketStoreDegraded", "RocketStoreBrokerPodsNotReady"} <= alerts
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts)} rules found" in out.stdout
    # the store alerts on series: a store's master and slave StatefulSets short of ready pods fire,
    # another application's StatefulSet does not; Degraded from the operator's resource state
    tests = tmp_path / "tests.yaml"
    series = {"kube_statefulset_replicas": {"orders": 3, "orders-slave-1": 3, "other-app": 3},
              "kube_statefulset_status_replicas_ready": {"orders": 2, "orders-slave-1": 1, "other-app": 0}}
    state = {"Degraded": 1, "Ready": 0}
    tests.write_text(yaml.safe_dump({"rule_files": [path.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            *({"series": f'{metric}{{namespace="ns",statefulset="{sts}"}}', "values": f"{n}x30"}
              for metric, by_sts in series.items() for sts, n in by_sts.items()),
            *({"series": f'rocketstore_resource_state{{kind="RocketStore",name="orders",namespace="ns",'
                         f'condition="{c}"}}', "values": f"{v}x30"} for c, v in state.items())],
        "alert_rule_test": [
            {"eval_time": "20m", "alertname": "RocketStoreBrokerPodsNotReady", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "namespace": "ns", "statefulset": sts, "rocketstore": "orders"},
                 "exp_annotations": {"summary": f"{n} broker pods of StatefulSet ns/{sts} are not ready "
                                                "(kubectl describe pods: Pending, unschedulable, image pull)"}}
                for sts, n in (("orders", 1), ("orders-slave-1", 2))]},
            {"eval_time": "20m", "alertname": "RocketStoreDegraded", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "kind": "RocketStore", "name": "orders", "namespace": "ns",
                                "condition": "Degraded"},
                 "exp_annotations": {"summary": "RocketStore ns/orders is Degraded (kubectl describe rocketstore: "
                                                "the Degraded condition)"}}]},
        ]}]}))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    broken = {"groups": [{"name": "x", "rules": [{"alert": "X", "expr": "rate(rocketstore_ready[5m]"}]}]}
    path.write_text(yaml.safe_dump(broken))
    assert subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, timeout=60).returncode != 0


#: metric names in PromQL: the brokers' own, the rocketmq-exporter families, the process collector's
METRIC = re.compile(r"\b(?:rocketstore|rocketmq|process)_[a-z0-9_]+\b")


@pytest.mark.integration
def test_alerts_and_dashboard_query_published_metrics(helm: Path, operator_process: dict[str, Any], kube: Any,
                                                      tmp_path: Path) -> None:
    """Every metric an alert or the dashboard names is on a real broker's or the real operator's
    /metrics; the operator's reconcile histogram has observations once it reconciled an object.
    The broker runs with its per-queue series off (spec.metrics.perQueue false, what a large
    cluster sets), so no alert or panel depends on them."""
    from broker_process import Broker, published_metric_names
    from kubernetes import client

    broker = Broker(tmp_path, "metricsPerQueueEnable=false\n")
    broker.start()
    try:
        published = published_metric_names(broker.metrics())
    finally:
        broker.stop()
    ns = "rso-metrics"
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": ns}})
    wait_until("default SA", lambda: client.CoreV1Api(kube).read_namespaced_service_account("default", ns), 60)
    client.CustomObjectsApi(kube).create_namespaced_custom_object("rocketstore.io", "v1alpha1", ns, "rocketstores", {
        "apiVersion": "rocketstore.io/v1alpha1", "kind": "RocketStore", "metadata": {"name": "m"},
        "spec": {"storage": {"segments": 2}, "commitLog": {"segmentSize": "64Mi"}}})

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{operator_process['metrics']}/metrics", timeout=5) as r:
            return str(r.read().decode())

    text = wait_until("a create reconcile timed", lambda: (t := scrape()) and re.search(
        r'rocketstore_operator_reconcile_duration_seconds_count\{kind="create"\} [1-9]', t) and t, 60)
    published |= published_metric_names(text)
    exprs = [r["expr"] for g in _rules(helm)["groups"] for r in g["rules"]]
    dashboard = json.loads((CHART / "dashboards" / "rocketstore.json").read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert {"rocketstore_operator_errors_total", "rocketstore_operator_reconcile_duration_seconds_bucket",
            "rocketstore_disk_usage_ratio"} <= used
    assert sorted(used - published) == []
