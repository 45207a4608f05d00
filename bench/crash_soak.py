"""kill -9 soak: the crash-safety test's cycle, repeated for as long as you like.

    python3 bench/crash_soak.py --cycles 500 --dir /tmp/crash-soak [--seed N] [--recheck-old 500]

Each cycle starts tests/store/crash_writer.py on the directory, SIGKILLs it (at a random moment,
during start-up every 10th cycle, right after a segment roll every 7th), recovers the store,
checks every message acknowledged in that cycle plus a sample of older ones, and runs the
offline verifier. The logic is tests/store/crash_cycle.py, shared with the test. Prints a summary
and exits 1 if any cycle found a problem.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "store"))

from crash_cycle import CrashHarness


def mode_for(cycle: int) -> str:
    if cycle % 10 == 9:
        return "startup"
    if cycle % 7 == 6:
        return "roll"
    return "random"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--dir", help="store directory (default: a new temporary directory)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--recheck-old", type=int, default=500,
                        help="earlier acks re-checked per cycle (sampled); -1 re-checks all")
    parser.add_argument("--keep-going", action="store_true", help="continue after a failing cycle")
    parser.add_argument("--verbose", action="store_true", help="print every cycle and the store's warnings")
    args = parser.parse_args()

    logging.basicConfig(level=logging.WARNING if args.verbose else logging.ERROR)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    store_dir = args.dir or tempfile.mkdtemp(prefix="crash-soak-")
    os.makedirs(store_dir, exist_ok=True)
    print(f"crash soak: dir={store_dir} seed={seed} cycles={args.cycles}", flush=True)
    harness = CrashHarness(store_dir, seed, recheck_old=None if args.recheck_old < 0 else args.recheck_old)

    recoveries: list[float] = []
    failures: list[str] = []
    began = time.monotonic()
    for i in range(args.cycles):
        mode = mode_for(i)
        try:
            result = harness.cycle(mode)
        except AssertionError as exc:  # the writer misbehaved (no ack, exited by itself)
            failures.append(f"cycle {i} ({mode}): {exc}")
            print(failures[-1], flush=True)
            if not args.keep_going:
                break
            continue
        recoveries.append(result.recovery_s)
        if args.verbose or result.problems or i % 25 == 0:
            print(f"cycle {i:4d} {mode:7s} acks={len(result.acks):5d} total={len(harness.acks):7d} "
                  f"recovery={result.recovery_s:.3f}s problems={len(result.problems)}", flush=True)
        if result.problems:
            failures.append(f"cycle {i} ({mode}): " + "; ".join(result.problems[:10]))
            for problem in result.problems[:40]:
                print("   ", problem, flush=True)
            if not args.keep_going:
                break

    print("--- summary ---")
    print(f"seed:                  {seed}")
    print(f"cycles run:            {len(recoveries)} of {args.cycles} in {time.monotonic() - began:.1f}s")
    print(f"acknowledged messages: {len(harness.acks)}")
    if recoveries:
        print(f"recovery p50/p99/max:  {percentile(recoveries, 0.5):.3f}s / {percentile(recoveries, 0.99):.3f}s"
              f" / {max(recoveries):.3f}s (mean {statistics.fmean(recoveries):.3f}s)")
    print(f"failures:              {len(failures)}")
    for failure in failures:
        print("  ", failure[:2000])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
