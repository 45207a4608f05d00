"""The Helm chart: one CRD source of truth, ``helm lint``, ``helm template`` validated by the real
API server (server-side dry-run), ``helm install`` against it, and least-privilege RBAC.

helm is built from the Go module proxy by operator/controlplane/helm.sh (cached by version).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, controlplane, wait_until

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


@pytest.fixture(scope="session")
def helm() -> Path:
    return Path(controlplane.build_helm())


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
@pytest.mark.parametrize("values", [[], ["--set", "watch.namespaces={team-a,team-b}"]])
def test_helm_template_is_accepted_by_the_api_server(helm: Path, kube: Any, crd: Any, values: list[str]) -> None:
    from kubernetes import client, utils

    core = client.CoreV1Api(kube)
    for ns in ("rso-dry", "team-a", "team-b"):
        if ns not in {n.metadata.name for n in core.list_namespace().items}:
            core.create_namespace({"metadata": {"name": ns}})
    docs = [d for d in yaml.safe_load_all(run_helm(helm, "template", "rso", str(CHART), "-n", "rso-dry",
                                                    "--kube-version", "1.34.10", *values))
            if d]
    kinds = sorted(d["kind"] for d in docs)
    if values:
        assert kinds.count("Role") == 2 and kinds.count("RoleBinding") == 2
    else:
        assert {"ClusterRole", "ClusterRoleBinding", "Deployment", "ServiceAccount", "Service"} <= set(kinds)
    # server-side dry-run: admission and schema validation of every object, nothing persisted
    utils.create_from_yaml(kube, yaml_objects=docs, namespace="rso-dry", dry_run="All")
    deploy = next(d for d in docs if d["kind"] == "Deployment")
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    assert ("--namespace=team-a" in args) if values else ("--all-namespaces" in args)


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
    assert dep.status.ready_replicas == 1
    pod = wait_until("operator pod Running on kwok", lambda: [
        p for p in core.list_namespaced_pod("rso-system").items if p.status.phase == "Running"], 60)[0]
    assert pod.spec.service_account_name == "rso-rocketstore-operator"

    sa = "system:serviceaccount:rso-system:rso-rocketstore-operator"
    authz = client.AuthorizationV1Api(kube)

    def allowed(verb: str, resource: str, group: str = "", sub: str = "", ns: str = "anywhere") -> bool:
        review = {"spec": {"user": sa, "groups": ["system:serviceaccounts"], "resourceAttributes": {
            "namespace": ns, "verb": verb, "group": group, "resource": resource, "subresource": sub}}}
        return bool(authz.create_subject_access_review(review).status.allowed)

    assert allowed("watch", "rocketstores", "rocketstore.io")
    assert allowed("patch", "rocketstores", "rocketstore.io", "status")
    assert allowed("patch", "statefulsets", "apps") and allowed("delete", "statefulsets", "apps")
    assert allowed("patch", "persistentvolumeclaims") and allowed("create", "events")
    assert not allowed("delete", "persistentvolumeclaims")  # PVCs are never deleted by the operator
    assert not allowed("get", "secrets")
    assert not allowed("delete", "rocketstores", "rocketstore.io")
    assert not allowed("create", "clusterroles", "rbac.authorization.k8s.io")
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
