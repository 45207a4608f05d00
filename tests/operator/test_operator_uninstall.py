"""Uninstalling in both orders on a REAL API server (conftest.py): RocketStores first, then the
chart; or the chart first, then the CRD. Nothing may stay ``Terminating``, and the PVCs follow
``storage.deleteClaim``.

The chart's operator pods are kwok's (they run nothing): the RocketStores are reconciled by the
session's operator process, and stopping it (SIGSTOP) is the chart's operator going away. kwok
completes Job pods without running them either, so the pre-delete Job's own command is run here,
with a token of the hook's own ServiceAccount bound to the hook's own RBAC (``helm get hooks``):
what the Job would do, with exactly its permissions. ``helm uninstall`` then runs the hooks as
Helm does (admission, the Job completing, their deletion).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException
from operator_support import ROOT, STORAGE_CLASS, standalone_stopped, wait_until, write_kubeconfig
from test_operator_chart import CHART, run_helm
from test_operator_cluster import G, P, V, create, get, make_ns, reconciled, store

from rocketstore.operator import FINALIZER

pytestmark = pytest.mark.integration

KWOK_POD = ("--set", "tolerations[0].key=kwok.x-k8s.io/node", "--set", "tolerations[0].operator=Exists",
            "--set", "nodeSelector.type=kwok")


def _install(helm: Path, control_plane: Any, release: str, watched: str | None) -> None:
    """The chart, watching ``watched`` (None: every namespace)."""
    scope = ("--set", f"watch.namespaces={{{watched}}}") if watched else ()
    out = run_helm(helm, "install", release, str(CHART), "-n", f"{release}-system", "--create-namespace",
                   *scope, *KWOK_POD, "--wait", "--timeout", "120s", kubeconfig=control_plane.kubeconfig)
    assert "STATUS: deployed" in out


def _stores(kube: Any, ns: str) -> None:
    """Two stores as kopf leaves them (its finalizer on each), their volumes claimed: one keeps
    its PVCs when deleted (the default), one deletes them (storage.deleteClaim)."""
    for name, delete_claim in (("keep", False), ("drop", True)):
        create(kube, ns, store(name, brokers=1, storage={"segments": 2, "storageClassName": STORAGE_CLASS,
                                                          "deleteClaim": delete_claim}))
    for name in ("keep", "drop"):
        wait_until(f"{name} reconciled", lambda: reconciled(kube, ns, name), 60)  # noqa: B023
        assert FINALIZER in get(kube, ns, name)["metadata"]["finalizers"]
    wait_until("both PVCs", lambda: len(_claims(kube, ns)) == 2, 60)


def _claims(kube: Any, ns: str) -> list[str]:
    return sorted(p.metadata.name for p in client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(ns).items)


def _run_pre_delete_hook(helm: Path, control_plane: Any, kube: Any, release: str,
                         tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The release's pre-delete Job's command, run here as its ServiceAccount with its RBAC."""
    hooks = [d for d in yaml.safe_load_all(run_helm(helm, "get", "hooks", release, "-n", f"{release}-system",
                                                    kubeconfig=control_plane.kubeconfig))
             if d and d["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"]
    job = next(d for d in hooks if d["kind"] == "Job")
    for obj in hooks:
        if obj["kind"] != "Job":
            utils.create_from_dict(kube, obj, namespace=obj["metadata"].get("namespace"))
    pod = job["spec"]["template"]["spec"]
    account, namespace = pod["serviceAccountName"], job["metadata"]["namespace"]
    token = client.CoreV1Api(kube).create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 600}}).status.token
    kubeconfig = write_kubeconfig(tmp_path / "hook.kubeconfig", control_plane.server, {"hook": {"token": token}},
                                  "hook")
    (container,) = pod["containers"]
    assert container["image"].startswith("rocketstore/rocketstore:") and container["args"][0] == "operator"
    return subprocess.run([sys.executable, "-m", "rocketstore.cli", *container["args"]], capture_output=True,
                          text=True, timeout=180, cwd=str(ROOT), env={**os.environ, "KUBECONFIG": str(kubeconfig)})


def _operator_stopped(kube: Any, release: str) -> None:
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    assert apps.read_namespaced_deployment(f"{release}-rocketstore-operator", f"{release}-system").spec.replicas == 0
    assert not core.list_namespaced_pod(f"{release}-system",
                                        label_selector="app.kubernetes.io/component=operator").items


def _uninstall(helm: Path, control_plane: Any, kube: Any, release: str) -> None:
    out = run_helm(helm, "uninstall", release, "-n", f"{release}-system", "--wait", "--timeout", "120s",
                   kubeconfig=control_plane.kubeconfig)
    assert "uninstalled" in out
    assert not client.AppsV1Api(kube).list_namespaced_deployment(f"{release}-system").items
    # the hook's objects are gone with it (hook-succeeded)
    assert not [s.metadata.name for s in client.CoreV1Api(kube).list_namespaced_service_account(
        f"{release}-system").items if s.metadata.name.endswith("-uninstall")]


def test_rocketstores_first_then_the_chart(helm: Path, control_plane: Any, kube: Any, operator_process: Any,
                                           tmp_path: Path) -> None:
    ns = make_ns(kube, "t-uninstall-stores-first")
    _install(helm, control_plane, "rsa", ns)
    _stores(kube, ns)
    apps = client.AppsV1Api(kube)
    for name in ("keep", "drop"):
        client.CustomObjectsApi(kube).delete_namespaced_custom_object(G, V, ns, P, name)
    wait_until("RocketStores gone", lambda: not client.CustomObjectsApi(kube).list_namespaced_custom_object(
        G, V, ns, P)["items"], 30)
    wait_until("StatefulSets collected", lambda: not apps.list_namespaced_stateful_set(ns).items, 60)
    wait_until("drop's PVC deleted", lambda: _claims(kube, ns) == ["store-keep-0"], 90)

    hook = _run_pre_delete_hook(helm, control_plane, kube, "rsa", tmp_path)
    assert hook.returncode == 0, hook.stderr
    assert "released 0 RocketStore(s)" in hook.stdout
    _operator_stopped(kube, "rsa")
    _uninstall(helm, control_plane, kube, "rsa")
    assert _claims(kube, ns) == ["store-keep-0"]


def test_the_chart_first_then_the_crd(helm: Path, control_plane: Any, kube: Any, operator_process: Any,
                                      crd: dict[str, Any], tmp_path: Path) -> None:
    """The chart watches every namespace, as the session's operator does: deleting the CRD deletes
    every RocketStore of the session, which the hook must all have released (the session's other
    modules' stores too: the CRD is created again at the end, their stores are not)."""
    ns = make_ns(kube, "t-uninstall-chart-first")
    _install(helm, control_plane, "rsb", None)
    _stores(kube, ns)
    apps, ext = client.AppsV1Api(kube), client.ApiextensionsV1Api(kube)
    objects = client.CustomObjectsApi(kube)
    with standalone_stopped(operator_process["proc"]):  # the chart's operator goes with the chart
        try:
            hook = _run_pre_delete_hook(helm, control_plane, kube, "rsb", tmp_path)
            assert hook.returncode == 0, hook.stderr
            assert f"{ns}/drop" in hook.stdout and f"{ns}/keep" in hook.stdout, hook.stdout
            _operator_stopped(kube, "rsb")
            # released, not deleted: the stores and their brokers stay; none of any namespace keeps it
            for name in ("keep", "drop"):
                assert get(kube, ns, name)["metadata"].get("finalizers") is None
            assert not [s["metadata"] for s in objects.list_cluster_custom_object(G, V, P)["items"]
                        if FINALIZER in (s["metadata"].get("finalizers") or [])]
            assert len(apps.list_namespaced_stateful_set(ns).items) == 2
            _uninstall(helm, control_plane, kube, "rsb")

            ext.delete_custom_resource_definition(crd["metadata"]["name"])

            def crd_gone() -> bool:
                try:
                    ext.read_custom_resource_definition(crd["metadata"]["name"])
                except ApiException as e:
                    return e.status == 404
                return False

            wait_until("CRD deleted, nothing Terminating", crd_gone, 120)
            wait_until("StatefulSets collected", lambda: not apps.list_namespaced_stateful_set(ns).items, 60)
            wait_until("drop's PVC deleted", lambda: _claims(kube, ns) == ["store-keep-0"], 90)
        finally:
            _restore_crd(kube, crd)


def _restore_crd(kube: Any, crd: dict[str, Any]) -> None:
    """The session's CRD back for the tests after this one (and its operator's watch)."""
    ext = client.ApiextensionsV1Api(kube)

    def established() -> bool:
        try:
            got = ext.read_custom_resource_definition(crd["metadata"]["name"])
        except ApiException as e:
            if e.status != 404:
                raise
            ext.create_custom_resource_definition(crd)
            return False
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_until("CRD back", established, 90)
