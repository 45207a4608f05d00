"""Fixtures for the operator's integration tests: a REAL control plane (no mocks of Kubernetes).

The control plane comes from tests/controlplane/controlplane.py (the same code smoke.sh runs):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback, built from Go
modules by build.sh (cached; about 26 min cold). The operator runs as a real ``rocketstore
operator`` subprocess against the test kubeconfig, with broker addressing pinned to loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from operator_support import (
    AUTH_NAMESPACE,
    AUTH_STORE,
    BROKER_NAMESPACE,
    BROKER_STORE,
    EXTERNAL_NAMESPACE,
    EXTERNAL_STORE,
    GROUPS_NAMESPACE,
    GROUPS_STORE,
    OPERATOR_NAMESPACE,
    OPERATOR_POD_LABELS,
    ROOT,
    SCALING_NAMESPACE,
    SCALING_STORE,
    SECURED_NAMESPACE,
    SECURED_STORE,
    SLAVE_HOST,
    STORAGE_CLASS,
    controlplane,
    free_port,
    wait_until,
)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Any]:
    t0 = time.monotonic()
    bin_dir = controlplane.build(control_plane_only=True)
    cp = controlplane.ControlPlane(bin_dir, keep=os.environ.get("CONTROLPLANE_KEEP") == "1")
    cp.start()
    print(f"\n[operator tests] build check {cp.timings.get('total', 0):.1f}s, total {time.monotonic() - t0:.1f}s",
          file=sys.stderr)
    cp.add_storage_class(STORAGE_CLASS, expandable=True)
    # PVCs outlive their RocketStores (the default keeps them) and volumes are Retain, so each
    # claim of the session takes one for good: 24 ran out once replication added slave claims,
    # 64 once the session reached 418 tests (the last stores' claims stayed Pending, their pods
    # unscheduled); volumes are API objects only, so there are plenty
    cp.add_volumes(192, "100Gi", STORAGE_CLASS)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built by tests/controlplane/helm.sh (cached by version): the chart's tests."""
    return Path(controlplane.build_helm())


@pytest.fixture(scope="session")
def kube(control_plane: Any) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture(scope="session")
def crd(kube: Any) -> dict[str, Any]:
    import yaml
    from kubernetes import client

    body = yaml.safe_load((ROOT / "crds" / "rocketstore.yaml").read_text())
    ext = client.ApiextensionsV1Api(kube)
    ext.create_custom_resource_definition(body)

    def established() -> bool:
        got = ext.read_custom_resource_definition(body["metadata"]["name"])
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_until("CRD Established", established, 30)
    return body


@pytest.fixture(scope="session")
def broker_port() -> int:
    """Remoting port of the test's broker process; the operator is pointed at it for BROKER_STORE-0."""
    return free_port()


@pytest.fixture(scope="session")
def secured_broker_port() -> int:
    """Remoting port of the ACL + TLS broker process; the operator is pointed at it for SECURED_STORE-0."""
    return free_port()


@pytest.fixture(scope="session")
def auth_broker_port() -> int:
    """Remoting port of the RocketMQ 5.3 auth broker process; the operator is pointed at it for AUTH_STORE-0."""
    return free_port()


@pytest.fixture(scope="session")
def external_broker_port() -> int:
    """Remoting port of the broker process behind load balancers; the operator is pointed at it for
    EXTERNAL_STORE-0."""
    return free_port()


@pytest.fixture(scope="session")
def scaling_broker_ports() -> list[int]:
    """Remoting ports of the two broker processes the operator is pointed at for SCALING_STORE-0 and -1."""
    return [free_port(), free_port()]


@pytest.fixture(scope="session")
def operator_process(control_plane: Any, crd: dict[str, Any], broker_port: int, secured_broker_port: int,
                     external_broker_port: int, scaling_broker_ports: list[int], auth_broker_port: int,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    live, metrics = free_port(), free_port()
    logfile = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)}
    cmd = [sys.executable, "-m", "rocketstore.cli", "operator", "--all-namespaces", "--bind-address", "127.0.0.1",
           "--allowed-broker-images", "registry.test/rocketstore:*",
           "--operator-pod-selector", ",".join(f"{k}={v}" for k, v in OPERATOR_POD_LABELS.items()),
           "--operator-namespace", OPERATOR_NAMESPACE,
           "--liveness-port", str(live), "--metrics-port", str(metrics), "--interval", "1",
           "--broker-address", f"{BROKER_NAMESPACE}/{BROKER_STORE}-0=127.0.0.1:{broker_port};"
           f"{SECURED_NAMESPACE}/{SECURED_STORE}-0=127.0.0.1:{secured_broker_port};"
           f"{EXTERNAL_NAMESPACE}/{EXTERNAL_STORE}-0=127.0.0.1:{external_broker_port};"
           f"{SCALING_NAMESPACE}/{SCALING_STORE}-0=127.0.0.1:{scaling_broker_ports[0]};"
           f"{SCALING_NAMESPACE}/{SCALING_STORE}-1=127.0.0.1:{scaling_broker_ports[1]};"
           f"{AUTH_NAMESPACE}/{AUTH_STORE}-0=127.0.0.1:{auth_broker_port};"
           # no broker listens there: the operator reads these masters' /metrics on the host of
           # its pinned address and the store's metrics port, where the test serves them
           f"{GROUPS_NAMESPACE}/{GROUPS_STORE}-0=127.0.0.1:{free_port()};"
           f"{GROUPS_NAMESPACE}/{GROUPS_STORE}-1=127.0.0.1:{free_port()};"
           f"{GROUPS_NAMESPACE}/{GROUPS_STORE}-slave-1-0={SLAVE_HOST}:{free_port()};"
           f"{GROUPS_NAMESPACE}/{GROUPS_STORE}-slave-1-1={SLAVE_HOST}:{free_port()}"]
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"operator exited {proc.returncode}:\n{logfile.read_text()[-3000:]}")
        with urllib.request.urlopen(f"http://127.0.0.1:{live}/healthz", timeout=2) as r:
            return bool(r.status == 200)

    t0 = time.monotonic()
    wait_until("operator /healthz", healthy, 60)
    print(f"\n[operator tests] operator healthy after {time.monotonic() - t0:.1f}s", file=sys.stderr)
    try:
        yield {"proc": proc, "log": logfile, "liveness": live, "metrics": metrics}
    finally:
        controlplane.terminate(proc, 15)
        if os.environ.get("OPERATOR_LOG"):
            print(logfile.read_text(), file=sys.stderr)
