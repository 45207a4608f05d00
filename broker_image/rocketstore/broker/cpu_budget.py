"""How many cores this process may use: its CPU affinity, capped by its cgroup's CPU quota.

A Kubernetes pod with ``resources.limits.cpu`` gets a CFS quota, not a cpuset: its affinity still
lists every core of the node. Sizing a thread pool by the affinity alone then starts, on a 64-core
node, 64 threads for a pod allowed 2 cores, and the quota throttles them all. The JVM counts the
same way since JDK 10 (its container support: ``availableProcessors`` is the smaller of the
affinity and the quota rounded up), so our broker sizes its pools as Apache RocketMQ's does.

:func:`quota_cores` is the rule, on the text of the cgroup files; :func:`usable_cores` reads them.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Final

log = logging.getLogger(__name__)

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")


def quota_cores(quota: str, period: str | None = None) -> int | None:
    """The cores a CFS quota allows, rounded up; None for no quota.

    cgroup v2: ``quota`` is the text of ``cpu.max`` (``"max 100000"`` or ``"200000 100000"``) and
    ``period`` None. cgroup v1: ``quota`` is ``cpu.cfs_quota_us`` (``-1`` for none) and ``period``
    ``cpu.cfs_period_us``. Text that is neither raises ValueError naming it.
    """
    if period is None:
        fields = quota.split()
        if len(fields) != 2:
            raise ValueError(f"cpu.max: expected '<quota> <period>', got {quota!r}")
        quota, period = fields
        if quota == "max":
            return None
    limit, every = int(quota), int(period)
    if limit < 0:
        return None
    if limit == 0 or every <= 0:
        raise ValueError(f"CPU quota {limit} per period {every}: not a quota")
    return max(1, math.ceil(limit / every))


def _own_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """This process's cgroup path in the v2 hierarchy and in the v1 ``cpu`` controller's, from
    /proc/self/cgroup (lines ``id:controllers:path``)."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v2, v1


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_quota_cores(root: Path = CGROUP_ROOT, proc_cgroup: str | None = None) -> int | None:
    """The cores this process's cgroup quota allows (None: no quota, or no cgroup files to read).

    The process's own cgroup first, then the hierarchy's root: inside a container with a cgroup
    namespace (Kubernetes' default) its own path is ``/``, and on hosts where the container's
    cgroup is mounted as the root the files are there.
    """
    if proc_cgroup is None:
        proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    v2, v1 = _own_paths(proc_cgroup)
    for base in ([root / v2.lstrip("/")] if v2 is not None else []) + [root]:
        if (text := _read(base / "cpu.max")) is not None:
            return quota_cores(text)
    for mount in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        for base in ([root / mount / v1.lstrip("/")] if v1 is not None else []) + [root / mount]:
            quota, period = _read(base / "cpu.cfs_quota_us"), _read(base / "cpu.cfs_period_us")
            if quota is not None and period is not None:
                return quota_cores(quota, period)
    return None


def usable_cores() -> int:
    """The cores this process may use: its affinity (a cpuset), capped by its CPU quota."""
    cores = max(1, len(os.sched_getaffinity(0)))
    try:
        quota = cgroup_quota_cores()
    except ValueError as exc:
        log.warning("ignoring the cgroup's CPU quota: %s", exc)  # the affinity still bounds what can run
        quota = None
    return cores if quota is None else min(cores, quota)
