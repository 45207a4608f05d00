"""What the operator tests share besides fixtures: constants, the control-plane script and a free
port (both from tests/support/ports.py). A module of its own, not conftest, so that this tier runs in one
pytest call with others whose conftest has the same module name."""

from __future__ import annotations

from pathlib import Path

from polling import wait_until
from ports import controlplane, free_port

__all__ = ["AUTH_NAMESPACE", "AUTH_STORE",
           "BROKER_NAMESPACE", "BROKER_STORE", "EXTERNAL_NAMESPACE", "EXTERNAL_STORE", "GROUPS_NAMESPACE",
           "GROUPS_STORE", "OPERATOR_NAMESPACE", "OPERATOR_POD_LABELS", "ROOT",
           "SECURED_NAMESPACE", "SECURED_STORE", "STORAGE_CLASS", "controlplane", "free_port",
           "wait_until"]

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
#: who the test operator (a process, not a pod) says it is: the pods every RocketStore's
#: NetworkPolicy lets in (--operator-pod-selector, --operator-namespace)
OPERATOR_NAMESPACE = "rso-system"
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "rocketstore-operator", "app.kubernetes.io/component": "operator"}
