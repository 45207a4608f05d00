"""The Docker engine the image and node tiers build with: started by tests/image/dockerd.sh when
none answers, stopped again only if it was started here; and the Dockerfile's base image made
locally by tests/image/build_base_image.sh (there is no registry)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

IMAGE_DIR = Path(__file__).resolve().parents[1] / "image"


@contextmanager
def docker_engine() -> Iterator[tuple[dict[str, str], bool]]:
    """Yield (the environment whose DOCKER_HOST reaches an engine, whether this started it).

    dockerd.sh's default state dir is short (unix socket path limit) and fixed, so an engine left
    by a killed run is adopted and stopped rather than duplicated on the same data root."""
    proc = subprocess.run([str(IMAGE_DIR / "dockerd.sh"), "start"], capture_output=True, text=True, timeout=120,
                          check=False)
    if proc.returncode != 0:
        pytest.fail(f"dockerd.sh start failed:\n{proc.stderr}")
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    env = dict(os.environ)
    if values.get("DOCKER_HOST"):
        env["DOCKER_HOST"] = values["DOCKER_HOST"]
    started = values.get("DOCKERD_STARTED") == "1"
    try:
        yield env, started
    finally:
        if started:
            subprocess.run([str(IMAGE_DIR / "dockerd.sh"), "stop"], timeout=120, check=False)


def build_base_image(env: dict[str, str]) -> str:
    """Import the Dockerfile's base image (debootstrap rootfs, cached); returns the script's report."""
    proc = subprocess.run([str(IMAGE_DIR / "build_base_image.sh")], env=env, capture_output=True, text=True,
                          timeout=1200, check=False)
    if proc.returncode != 0:
        pytest.fail(f"build_base_image.sh failed:\n{proc.stderr}")
    return proc.stderr.strip()
