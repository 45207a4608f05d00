"""Kill -9 to the first acknowledged send, or the write pause of a planned hand-over, with the
Kubernetes Lease elector, over N cycles.

    flock /tmp/rocketstore-k8s.lock python3 bench/run_failover_bench.py            # ~5 min
    flock /tmp/rocketstore-k8s.lock python3 bench/run_failover_bench.py --cycles 50
    flock /tmp/rocketstore-k8s.lock python3 bench/run_failover_bench.py --handover --doc docs/benchmarks.md

Runs a loop of tests/operator/test_lease_failover.py (two broker processes of one group, the real
kube-apiserver of tests/controlplane, D 3 s, R 1 s, m 0.15 s, allAckInSyncStateSet=true) with
``--cycles`` cycles instead of the test's few, and prints each cycle's time and their p50 and max:

* by default the kill loop: a takeover is the time from the kill of the master to the first send
  the other broker acknowledged, probed every 50 ms: D of unchanged renewals seen by the slave, up
  to R until its next read, the Lease write, the promotion;
* with ``--handover`` the SIGTERM loop: a sender sends one message after another, each to the
  broker that acknowledged the last (the other one on any refusal), while the master gets
  SIGTERM and hands its Lease to the slave (docs/failover.md, planned hand-over); the write pause
  is the longest gap between two acknowledged sends around the SIGTERM. ``--doc FILE`` rewrites
  the ``bench:handover`` block of FILE (docs/benchmarks.md) with the result.

The test's own checks hold meanwhile (every acknowledged message consumed, no duplicate, logs
byte-equal after each rejoin). It starts a control plane, hence the flock.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_blocks

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/operator/test_lease_failover.py"
DOC_SECTION = "handover"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="kill or hand-over cycles (default 20)")
    parser.add_argument("--handover", action="store_true",
                        help="measure the write pause of a SIGTERM hand-over instead of a kill -9 takeover")
    doc_blocks.add_doc_argument(parser, DOC_SECTION)
    args = parser.parse_args()
    if args.doc is not None:
        if not args.handover:
            parser.error("--doc writes the hand-over block: give --handover too")
        doc_blocks.check_section(args.doc, DOC_SECTION)  # fail now, not after the run
    if args.handover:
        test, env = "test_sigterm_of_the_master_hands_over_with_a_short_write_pause", "LEASE_HANDOVER_CYCLES"
        pattern = r"(\d+) hand-overs: write pauses ([\d., ]+) s; (.*)"
    else:
        test, env = "test_kill_loop_loses_no_acknowledged_message", "LEASE_FAILOVER_CYCLES"
        pattern = r"(\d+) kills: takeovers ([\d., ]+) s; (.*)"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", f"{TEST}::{test}"],
        cwd=ROOT, env={**os.environ, env: str(args.cycles)}, capture_output=True, text=True)
    found = re.search(pattern, run.stdout)
    if run.returncode != 0 or found is None:  # the times are printed before the test's checks
        print(run.stdout[-4000:], run.stderr[-4000:], sep="\n", file=sys.stderr)
    if found is None:
        return 1
    times = [float(t) for t in found.group(2).split(", ")]
    what = ("hand-overs (D 3 s, R 1 s): SIGTERM of the master, longest gap between acknowledged sends"
            if args.handover else "kills (D 3 s, R 1 s): kill -9 to first acknowledged send")
    summary = (f"{found.group(1)} {what}: p50 {statistics.median(times):.2f} s, max {max(times):.2f} s, "
               f"min {min(times):.2f} s")
    each = f"{'write pauses' if args.handover else 'takeovers'}: {found.group(2)} s"
    print(summary)
    print(each)
    print(found.group(3))
    if args.doc is not None and run.returncode == 0:
        doc_blocks.replace_section(args.doc, DOC_SECTION, doc_blocks.generated_body(
            summary + ".", each + ".", found.group(3) + "."))
        print(f"\nrewrote the bench:{DOC_SECTION} block of {args.doc}", file=sys.stderr)
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
