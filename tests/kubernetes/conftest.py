"""Fixtures for RocketStore on a REAL node: the chart's operator and the brokers run as containers.

The cluster is the test control plane (operator/controlplane/controlplane.py) with one real node
joined to it (operator/controlplane/node.py: kubelet, kube-proxy, CoreDNS, Debian's containerd,
runc and CNI plugins). The project's image is built from the top-level Dockerfile by the local
Docker engine (tests/image/dockerd.sh and build_base_image.sh, as the image tests do) and copied
into the node's containerd: there is no registry. Needs root, the control plane build (cached) and
Debian's docker.io, debootstrap, containerd, runc and containernetworking-plugins; without them the
tests fail under CI and are skipped elsewhere, naming what is missing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_engine import build_base_image, docker_engine
from node_support import IMAGE, ROOT, STORAGE_CLASS, controlplane, node_module
from tool_support import require_executable, require_tool


@pytest.fixture(scope="session")
def docker_env() -> Iterator[dict[str, str]]:
    """A Docker engine for building the image (started by dockerd.sh when none answers)."""
    for tool in ("docker", "dockerd", "debootstrap"):
        require_executable(tool, "the node tests build the image with Debian's docker.io and debootstrap")
    with docker_engine() as (env, _started):
        yield env


def _docker(env: dict[str, str], *args: str, stdin: str | None = None, timeout: float = 1800) -> None:
    proc = subprocess.run(["docker", *args], env=env, input=stdin, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        pytest.fail(f"docker {' '.join(args[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="session")
def images(docker_env: dict[str, str]) -> list[str]:
    """The project's image (the chart's default tag) and the node's sandbox image, built locally."""
    build_base_image(docker_env)
    _docker(docker_env, "build", "-q", "-t", IMAGE, str(ROOT))
    # the pod sandbox only has to hold the pod's namespaces: any blocking process does
    _docker(docker_env, "build", "-q", "-t", "rocketstore/pause:local", "-",
            stdin='FROM python:3.11-slim\nSTOPSIGNAL SIGKILL\nENTRYPOINT ["sleep", "infinity"]\n')
    return [IMAGE]


@pytest.fixture(scope="session")
def cluster(images: list[str], docker_env: dict[str, str]) -> Iterator[Any]:
    """The control plane with one real node; yields the Node (``.cp`` is the ControlPlane)."""
    require_tool("root", os.geteuid() == 0, "a real node runs kubelet, containerd and iptables")
    missing = node_module.missing_host_tools()
    require_tool(" ".join(missing), not missing, f"a real node needs the Debian packages {' '.join(missing)}")
    before = node_module.Node.leftovers()
    os.environ["DOCKER_HOST"] = docker_env.get("DOCKER_HOST", "")  # Node.load_image runs `docker save`
    cp = controlplane.ControlPlane(controlplane.build(), keep=os.environ.get("CONTROLPLANE_KEEP") == "1",
                                   node_ip=node_module.NODE_IP)
    cp.start()
    node = node_module.Node(cp)
    try:
        node.start()
        for image in images:
            node.load_image(image)
        cp.add_storage_class(STORAGE_CLASS, expandable=False)
        yield node
    finally:
        node.stop()
        cp.stop()
    after = node_module.Node.leftovers()
    assert after == before, f"the node left things behind: before {before}, after {after}"


@pytest.fixture(scope="session")
def kube(cluster: Any) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(cluster.cp.kubeconfig))


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    path: Path = controlplane.build_helm()
    return path
