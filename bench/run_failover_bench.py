"""Kill -9 to the first acknowledged send, with the Kubernetes Lease elector, over 20 kill cycles.

    flock /tmp/rocketstore-k8s.lock python3 bench/run_failover_bench.py            # ~5 min
    flock /tmp/rocketstore-k8s.lock python3 bench/run_failover_bench.py --cycles 50

Runs the kill loop of tests/operator/test_lease_failover.py (two broker processes of one group,
the real kube-apiserver of tests/controlplane, D 3 s, R 1 s, m 0.15 s, allAckInSyncStateSet=true)
with ``--cycles`` kills instead of the test's 5, and prints each takeover and their p50 and max.
A takeover is the time from the kill of the master to the first send the other broker
acknowledged, probed every 50 ms: D of unchanged renewals seen by the slave, up to R until its
next read, the Lease write, the promotion. The test's own checks hold meanwhile (every
acknowledged message consumed, no duplicate, logs byte-equal after each rejoin). It starts a
control plane, hence the flock.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="kill cycles (default 20)")
    args = parser.parse_args()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
         "tests/operator/test_lease_failover.py::test_kill_loop_loses_no_acknowledged_message"],
        cwd=ROOT, env={**os.environ, "LEASE_FAILOVER_CYCLES": str(args.cycles)}, capture_output=True, text=True)
    found = re.search(r"(\d+) kills: takeovers ([\d., ]+) s; (.*)", run.stdout)
    if run.returncode != 0 or found is None:  # the takeovers are printed before the test's checks
        print(run.stdout[-4000:], run.stderr[-4000:], sep="\n", file=sys.stderr)
    if found is None:
        return 1
    takeovers = [float(t) for t in found.group(2).split(", ")]
    print(f"{found.group(1)} kills (D 3 s, R 1 s): kill -9 to first acknowledged send "
          f"p50 {statistics.median(takeovers):.2f} s, max {max(takeovers):.2f} s, min {min(takeovers):.2f} s")
    print(f"takeovers: {found.group(2)} s")
    print(found.group(3))
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
