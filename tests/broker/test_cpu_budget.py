"""The cores the broker sizes its remoting front by (rocketstore.broker.cpu_budget): the affinity
capped by the cgroup's CPU quota, as a Kubernetes CPU limit sets it.

The rule is tested on the cgroup files' text; the whole, in a real cgroup of this machine (v1 or
v2, whichever it mounts) that a child process is moved into, which needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore.broker.cpu_budget import CGROUP_ROOT, cgroup_quota_cores, quota_cores


@pytest.mark.parametrize(("quota", "period", "cores"), [
    ("max 100000", None, None),
    ("100000 100000", None, 1),
    ("150000 100000", None, 2),  # rounded up, as the JVM does
    ("50000 100000", None, 1),
    ("-1", "100000", None),
    ("400000", "100000", 4),
    ("1000", "100000", 1),
])
def test_quota_is_read_as_cores_rounded_up(quota: str, period: str | None, cores: int | None) -> None:
    assert quota_cores(quota, period) == cores


@pytest.mark.parametrize(("quota", "period", "named"), [
    ("max", None, "cpu.max"), ("lots 100000", None, "lots"), ("0 100000", None, "0"), ("100", "0", "100"),
])
def test_malformed_quota_text_is_an_error_naming_it(quota: str, period: str | None, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        quota_cores(quota, period)


def test_own_cgroup_is_read_before_the_root(tmp_path: Path) -> None:
    """v1 and v2 layouts as /sys/fs/cgroup has them: the process's own group wins over the root's."""
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "kubepods" / "pod1").mkdir(parents=True)
    (tmp_path / "kubepods" / "pod1" / "cpu.max").write_text("300000 100000\n")
    assert cgroup_quota_cores(tmp_path, "0::/kubepods/pod1\n") == 3
    assert cgroup_quota_cores(tmp_path, "0::/\n") is None  # a cgroup namespace: the root is its own

    v1 = tmp_path / "v1"
    (v1 / "cpu,cpuacct" / "pod2").mkdir(parents=True)
    (v1 / "cpu,cpuacct" / "pod2" / "cpu.cfs_quota_us").write_text("250000\n")
    (v1 / "cpu,cpuacct" / "pod2" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota_cores(v1, "3:cpu,cpuacct:/pod2\n2:memory:/pod2\n") == 3
    assert cgroup_quota_cores(tmp_path / "none", "0::/\n") is None  # no files: no quota known


@pytest.fixture
def quota_cgroup() -> Iterator[Path]:
    """A real cgroup with a CPU quota of half a core (v2's cpu.max, else v1's cpu controller); its
    ``cgroup.procs`` takes a pid. Removed afterwards (the processes moved in have ended)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("creating a cgroup needs root, which CI runs as")
        pytest.skip("creating a cgroup needs root")
    name = f"rocketstore-test-{uuid.uuid4().hex[:8]}"
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2, unified
        group = CGROUP_ROOT / name
        group.mkdir()
        if "cpu" not in (group / "cgroup.controllers").read_text().split():
            (CGROUP_ROOT / "cgroup.subtree_control").write_text("+cpu")
        (group / "cpu.max").write_text("50000 100000")
    else:
        group = CGROUP_ROOT / "cpu" / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("50000")
    try:
        yield group
    finally:
        group.rmdir()


def test_a_cpu_limit_caps_the_front_threads(quota_cgroup: Path) -> None:
    """A process moved into a cgroup limited to half a core sizes the front for one core, whatever
    its affinity says."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the affinity alone already gives one thread, the cap cannot show")
    child = ("import os, sys; from pathlib import Path;"
             f"Path({str(quota_cgroup / 'cgroup.procs')!r}).write_text(str(os.getpid()));"
             "from rocketstore.broker.remoting_front import front_threads;"
             "print(len(os.sched_getaffinity(0)), front_threads())")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True)
    affinity, threads = map(int, out.stdout.split())
    assert affinity == len(os.sched_getaffinity(0))
    assert threads == 1, f"in a cgroup of half a core the front would run {threads} threads"
