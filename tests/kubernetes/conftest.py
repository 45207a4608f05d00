"""Fixtures for RocketStore on a REAL cluster: the chart's operator and the brokers run as containers.

Two targets, one scenario:

* By default, the test control plane (tests/controlplane/controlplane.py) with one real node
  joined to it (tests/controlplane/node.py: kubelet, kube-proxy, CoreDNS, Debian's containerd,
  runc and CNI plugins). The project's image is built from the top-level Dockerfile by the local
  Docker engine (tests/image/dockerd.sh and build_base_image.sh, as the image tests do) and copied
  into the node's containerd: there is no registry. Needs root, the control plane build (cached)
  and Debian's docker.io, debootstrap, containerd, runc and containernetworking-plugins; without
  them the tests fail under CI and are skipped elsewhere, naming what is missing.
* With ``ROCKETSTORE_TEST_KUBECONFIG`` set, the cluster that kubeconfig reaches (kind, minikube, a
  real one): the image ``rocketstore/rocketstore:<version>`` must already be on its nodes (``kind
  load docker-image``) or pullable, PersistentVolumes come from ``ROCKETSTORE_TEST_STORAGE_CLASS``
  (the cluster's default class if unset), and this machine must reach the nodes' addresses (the
  stores publish node ports 30876-30877, 30911-30913 and 30950, and 9876 and 30960 on the balancer
  addresses the LoadBalancer test gives its Services); the Lease failover test's clients reach its
  pods and its client Service's cluster IP directly (the brokers publish no gRPC port outside the
  cluster), which this machine does on our own node, and on a given cluster only from a machine on
  its pod and Service networks; its kill -9 cycle needs our own node's containerd and is left out
  elsewhere. The namespaces the scenario uses
  must not exist yet; everything it creates is deleted at the end, the CRD too (the second order
  of uninstalling deletes it after the chart; the next ``helm install`` creates it again).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_engine import build_base_image, docker_engine
from node_support import IMAGE, ROOT, Target, controlplane, node_module
from tool_support import require_executable, require_tool

#: the default target's StorageClass: pre-created ``local`` volumes on the node
LOCAL_CLASS = "local-node"


def _docker(env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 1800) -> None:
    proc = subprocess.run(["docker", *args], env=env, input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"docker {' '.join(args[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def _own_node() -> Iterator[Target]:
    """The test control plane with one real node, the image built and loaded into it."""
    require_tool("root", os.geteuid() == 0, "a real node runs kubelet, containerd and iptables")
    missing = node_module.missing_host_tools()
    require_tool(" ".join(missing), not missing, f"a real node needs the Debian packages {' '.join(missing)}")
    for tool in ("docker", "dockerd", "debootstrap"):
        require_executable(tool, "the node tests build the image with Debian's docker.io and debootstrap")
    with docker_engine() as (env, _started):
        build_base_image(env)
        _docker(env, "build", "-q", "-t", IMAGE, str(ROOT))
        # the pod sandbox only has to hold the pod's namespaces: any blocking process does
        _docker(env, "build", "-q", "-t", "rocketstore/pause:local", "-",
                stdin='FROM python:3.11-slim\nSTOPSIGNAL SIGKILL\nENTRYPOINT ["sleep", "infinity"]\n')
        before = node_module.Node.leftovers()
        os.environ["DOCKER_HOST"] = env.get("DOCKER_HOST", "")  # Node.load_image runs `docker save`
        cp = controlplane.ControlPlane(controlplane.build(), keep=os.environ.get("CONTROLPLANE_KEEP") == "1",
                                       node_ip=node_module.NODE_IP)
        cp.start()
        node = node_module.Node(cp)
        try:
            node.start()
            node.load_image(IMAGE)
            cp.add_storage_class(LOCAL_CLASS, expandable=False)
            yield Target(cp.kubeconfig, LOCAL_CLASS, {node.name},
                         lambda n: node.add_local_volumes(n, "100Gi", LOCAL_CLASS),
                         node.kill_container)
        finally:
            node.stop()
            cp.stop()
        after = node_module.Node.leftovers()
        assert after == before, f"the node left things behind: before {before}, after {after}"


def _given_cluster(kubeconfig: str) -> Target:
    """The cluster ``ROCKETSTORE_TEST_KUBECONFIG`` names, as it is."""
    from kubernetes import client, config

    path = Path(kubeconfig).expanduser()
    if not path.is_file():
        pytest.fail(f"ROCKETSTORE_TEST_KUBECONFIG={kubeconfig}: no such file", pytrace=False)
    api = config.new_client_from_config(config_file=str(path))
    nodes = {n.metadata.name for n in client.CoreV1Api(api).list_node().items}
    return Target(path, os.environ.get("ROCKETSTORE_TEST_STORAGE_CLASS") or None, nodes)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Target]:
    """The cluster the scenario runs on (module docstring): the one given, or our own real node."""
    given = os.environ.get("ROCKETSTORE_TEST_KUBECONFIG")
    if given:
        yield _given_cluster(given)
    else:
        yield from _own_node()


@pytest.fixture(scope="session")
def kube(cluster: Target) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    path: Path = controlplane.build_helm()
    return path
