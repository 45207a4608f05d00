"""What the operator tests share besides fixtures: constants, the control-plane script and a free
port (both from tests/support/ports.py). A module of its own, not conftest, so that this tier runs in one
pytest call with others whose conftest has the same module name."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from polling import wait_until
from ports import controlplane, free_port

__all__ = [
    "AUTH_NAMESPACE",
    "AUTH_STORE",
    "BROKER_NAMESPACE",
    "BROKER_STORE",
    "EXTERNAL_NAMESPACE",
    "EXTERNAL_STORE",
    "GROUPS_NAMESPACE",
    "GROUPS_STORE",
    "OPERATOR_NAMESPACE",
    "OPERATOR_POD_LABELS",
    "ROOT",
    "SCALING_NAMESPACE",
    "SCALING_STORE",
    "SECURED_NAMESPACE",
    "SECURED_STORE",
    "SLAVE_HOST",
    "STORAGE_CLASS",
    "broker_lease_kubeconfig",
    "controlplane",
    "free_port",
    "namespaced_operator",
    "standalone_stopped",
    "wait_until",
    "write_kubeconfig",
]

ROOT = Path(__file__).resolve().parents[2]
STORAGE_CLASS = "rs-test"
BROKER_NAMESPACE = "brokers"
BROKER_STORE = "rsb"
#: the RocketStore of test_operator_secured_broker.py: its broker-0 runs with ACL and TLS enforcing
SECURED_NAMESPACE = "secured-ops"
SECURED_STORE = "guarded"
#: the RocketStore of test_operator_auth_broker.py: its broker-0 runs RocketMQ 5.3 auth
AUTH_NAMESPACE = "auth-ops"
AUTH_STORE = "authz"
#: the RocketStore of test_operator_external.py behind load balancers: its broker-0 is a real process
EXTERNAL_NAMESPACE = "external-lb"
EXTERNAL_STORE = "lb"
#: the RocketStore of test_operator_groups_cluster.py: broker groups, its masters pinned to loopback
#: where the test serves the masters' /metrics (the HA series) itself
GROUPS_NAMESPACE = "groups"
GROUPS_STORE = "rsg"
#: where its slaves are pinned, another loopback address: the test serves their /metrics there
SLAVE_HOST = "127.0.0.2"
#: the RocketStore of test_operator_scaling_cluster.py: both its brokers are real processes
SCALING_NAMESPACE = "scaling"
SCALING_STORE = "rss"
#: who the test operator (a process, not a pod) says it is: the pods every RocketStore's
#: NetworkPolicy lets in (--operator-pod-selector, --operator-namespace)
OPERATOR_NAMESPACE = "rso-system"
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "rocketstore-operator", "app.kubernetes.io/component": "operator"}


def namespaced_operator(kubeconfig: Path, namespace: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """An operator process of a test's own, watching only ``namespace`` and observing every second,
    its output appended to ``log``; ``args`` are further options. Run it inside
    :func:`standalone_stopped`."""
    cmd = [sys.executable, "-m", "rocketstore.cli", "operator", "--namespace", namespace,
           "--bind-address", "127.0.0.1", "--liveness-port", str(free_port()), "--metrics-port", "0",
           "--interval", "1", *args]
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=str(ROOT))


@contextlib.contextmanager
def standalone_stopped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """The session's operator (conftest's ``operator_process``, every namespace) stopped (SIGSTOP)
    for a test that runs operators of its own, which the session's would otherwise race; continued
    after."""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def write_kubeconfig(path: Path, server: str, users: dict[str, dict[str, Any]], current: str) -> Path:
    """A kubeconfig with one context per user, each named after it, on the same cluster."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [{"name": name, "context": {"cluster": "test", "user": name}} for name in users],
        "current-context": current,
    }))
    return path


def broker_lease_kubeconfig(kube: Any, server: str, owner: Any, path: Path) -> Path:
    """A kubeconfig with a token of ``owner``'s broker pods' ServiceAccount, bound to the Role the
    operator gives them for Leases (in ``owner.namespace``, which must exist), as a broker's
    Lease elector uses it."""
    from kubernetes import client

    from rocketstore.operator.desired import lease_role, lease_role_binding

    core, rbac = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    role, binding = lease_role(owner), lease_role_binding(owner)
    for obj in (role, binding):
        obj["metadata"].pop("ownerReferences")  # no RocketStore object here to own them
    account = binding["subjects"][0]["name"]
    core.create_namespaced_service_account(owner.namespace, {"metadata": {"name": account}})
    rbac.create_namespaced_role(owner.namespace, role)
    rbac.create_namespaced_role_binding(owner.namespace, binding)
    token = core.create_namespaced_service_account_token(account, owner.namespace,
                                                         {"spec": {"expirationSeconds": 3600}}).status.token
    return write_kubeconfig(path, server, {"broker": {"token": token}}, "broker")
