"""Kill -9 to the first acknowledged send (the Lease elector beside Apache RocketMQ 5.3.3's
controller), or the write pause of a planned hand-over with the Lease elector, over N cycles.

    python3 bench/run_failover_bench.py            # 20 kills per contender
    python3 bench/run_failover_bench.py --cycles 5 --doc docs/benchmarks.md
    python3 bench/run_failover_bench.py --contenders lease --cycles 50
    python3 bench/run_failover_bench.py --handover --doc docs/benchmarks.md

By default the kill loop, one cycle: acknowledged sends to the master, SIGKILL of it, a send to
the other broker every 50 ms until one is acknowledged (the takeover: the time from the kill to
that acknowledgement), the killed broker restarted and the next cycle once it rejoined. Three
contenders run that same cycle, ``--cycles`` each:

* ``apache``: two Apache RocketMQ 5.3.3 brokers in controller mode, elected by Apache's controller
  (embedded in its name server), every controller timing at its 5.3.3 default;
* ``ours-controller``: two of our broker processes with the same controller and settings;
* ``lease``: two of our broker processes with the Kubernetes Lease elector against the real
  kube-apiserver of tests/controlplane (D 3 s, R 1 s, m 0.15 s).

All three set allAckInSyncStateSet=true. The first two are the kill loop of
tests/compat/apache_broker/test_controller_kill_loop_against_rocketmq.py, the third that of
tests/operator/test_lease_failover.py. The cycles are split into ``--rounds`` rounds and the
contenders alternate within each (the order reversed every other round), so a change in the
machine's load falls on all of them. Per contender: p50, max and min of the takeovers, and the
acknowledged, consumed and duplicated messages the tests count (their checks hold meanwhile:
every acknowledged message consumed, none twice). ``--doc FILE`` rewrites the ``bench:failover``
block of FILE (docs/benchmarks.md).

With ``--handover`` the SIGTERM loop of the Lease test: a sender sends one message after another,
each to the broker that acknowledged the last (the other one on any refusal), while the master
gets SIGTERM and hands its Lease to the slave (docs/failover.md, planned hand-over); the write
pause is the longest gap between two acknowledged sends around the SIGTERM. ``--doc FILE``
rewrites the ``bench:handover`` block.

The Lease runs start a control plane: the script holds /tmp/rocketstore-k8s.lock around each of
them itself (do not wrap it in ``flock``, which would make it wait for itself); Apache's need java and mvn (their jars
come from Maven Central, built once by tests/support/java_rocketmq.py).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import doc_blocks

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/operator/test_lease_failover.py"
CONTROLLER_TEST = "tests/compat/apache_broker/test_controller_kill_loop_against_rocketmq.py"
DOC_SECTION = "handover"
KILL_DOC_SECTION = "failover"
#: held around each run that starts a control plane (see tests/controlplane): one at a time per machine
K8S_LOCK = Path("/tmp/rocketstore-k8s.lock")


@dataclass(frozen=True)
class Contender:
    """One way of electing a broker group's master: what it is, the pytest node running its kill
    loop, and the environment variable that sets that loop's cycles."""

    label: str
    node: str
    cycles_env: str


CONTENDERS = {
    "apache": Contender("Apache 5.3.3 brokers, Apache's controller",
                        f"{CONTROLLER_TEST}::test_kill_loop_with_apache_controller[apache]",
                        "CONTROLLER_FAILOVER_CYCLES"),
    "ours-controller": Contender("our brokers, Apache's controller",
                                 f"{CONTROLLER_TEST}::test_kill_loop_with_apache_controller[ours]",
                                 "CONTROLLER_FAILOVER_CYCLES"),
    "lease": Contender("our brokers, Lease elector (D 3 s, R 1 s)",
                       f"{TEST}::test_kill_loop_loses_no_acknowledged_message", "LEASE_FAILOVER_CYCLES"),
}
#: the line each kill loop prints before its checks: "N kills[ (what)]: takeovers T, T s; counts"
KILL_LINE = r"(\d+) kills(?: \([^)]*\))?: takeovers ([\d., ]+) s; (.*)"
COUNTS = r"acknowledged (\d+), consumed (\d+) .*duplicates (\d+)"


@dataclass
class Tally:
    """One contender's takeovers and message counts over all its rounds."""

    takeovers: list[float] = field(default_factory=list)
    acknowledged: int = 0
    consumed: int = 0
    duplicates: int = 0
    failed: list[str] = field(default_factory=list)


def run_loop(node: str, env: str, cycles: int, pattern: str) -> tuple[int, re.Match[str] | None, str]:
    """Run one pytest node with ``env`` = ``cycles``: its exit code, the line ``pattern`` matched
    in its output, and the output's tail (for a failure). A node that starts a control plane
    (tests/operator) runs holding ``K8S_LOCK``, as every such run on the machine does, and only
    while it runs: the other contenders need no control plane and do not wait for it."""
    with contextlib.ExitStack() as held:
        if node.startswith("tests/operator/"):
            lock = held.enter_context(K8S_LOCK.open("a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s", node],
            cwd=ROOT, env={**os.environ, env: str(cycles)}, capture_output=True, text=True)
    return run.returncode, re.search(pattern, run.stdout), f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"


def rounds_of(cycles: int, rounds: int) -> list[int]:
    """``cycles`` split into ``rounds`` shares as even as they can be (no empty round)."""
    rounds = max(1, min(rounds, cycles))
    return [cycles // rounds + (1 if r < cycles % rounds else 0) for r in range(rounds)]


def kill_comparison(names: list[str], cycles: int, rounds: int) -> tuple[dict[str, Tally], float]:
    """The kill loop of every contender in ``names``, alternating by round; the tallies and the
    wall-clock seconds it all took."""
    tallies = {name: Tally() for name in names}
    began = time.monotonic()
    for r, share in enumerate(rounds_of(cycles, rounds)):
        for name in names if r % 2 == 0 else list(reversed(names)):
            contender, tally = CONTENDERS[name], tallies[name]
            code, found, tail = run_loop(contender.node, contender.cycles_env, share, KILL_LINE)
            print(f"round {r + 1}, {name}: exit {code}; {found.group(0) if found else 'no kill line'}",
                  file=sys.stderr)
            if code != 0 or found is None:  # the times are printed before the test's checks
                print(tail, file=sys.stderr)
                tally.failed.append(f"round {r + 1}: exit {code}")
            if found is None:
                continue
            tally.takeovers += [float(t) for t in found.group(2).split(", ")]
            counts = re.search(COUNTS, found.group(3))
            if counts is not None:
                tally.acknowledged += int(counts.group(1))
                tally.consumed += int(counts.group(2))
                tally.duplicates += int(counts.group(3))
    return tallies, time.monotonic() - began


def comparison_table(tallies: dict[str, Tally]) -> str:
    rows = []
    for name, tally in tallies.items():
        t = tally.takeovers
        figures = ([f"{statistics.median(t):.2f}", f"{max(t):.2f}", f"{min(t):.2f}"] if t else ["-"] * 3)
        rows.append([CONTENDERS[name].label, str(len(t)), *figures, str(tally.acknowledged),
                     str(tally.consumed), str(tally.duplicates), "; ".join(tally.failed) or "passed"])
    return doc_blocks.markdown_table(
        ["contender", "kills", "p50 s", "max s", "min s", "acknowledged", "consumed", "duplicates", "checks"],
        rows, right=range(1, 8))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20,
                        help="kill or hand-over cycles, per contender (default 20)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds the kill cycles are split into, the contenders alternating in each (default 2)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help=f"comma-separated kill-loop contenders (default {','.join(CONTENDERS)})")
    parser.add_argument("--handover", action="store_true",
                        help="measure the write pause of a SIGTERM hand-over (Lease elector) instead of kill -9")
    parser.add_argument("--doc", metavar="FILE", type=Path,
                        help=f"rewrite the bench:{KILL_DOC_SECTION} block of FILE (docs/benchmarks.md), "
                             f"or bench:{DOC_SECTION} with --handover")
    args = parser.parse_args()
    section = DOC_SECTION if args.handover else KILL_DOC_SECTION
    names = [n for n in args.contenders.split(",") if n]
    if unknown := [n for n in names if n not in CONTENDERS]:
        parser.error(f"unknown contenders {unknown}; known: {', '.join(CONTENDERS)}")
    if args.doc is not None:
        doc_blocks.check_section(args.doc, section)  # fail now, not after the run
    if args.handover:
        return handover(args.cycles, args.doc)
    tallies, took = kill_comparison(names, args.cycles, args.rounds)
    table = comparison_table(tallies)
    each = "\n".join(f"{CONTENDERS[n].label}: {', '.join(f'{t:.2f}' for t in tally.takeovers)} s"
                     for n, tally in tallies.items())
    summary = (f"kill -9 of the master to the first acknowledged send on the new one, probed every 50 ms; "
               f"{args.cycles} kills per contender in {len(rounds_of(args.cycles, args.rounds))} rounds "
               f"(contenders alternating), {took:.0f} s in all.")
    print(summary, table, each, sep="\n\n")
    ok = all(not tally.failed for tally in tallies.values())
    if args.doc is not None and ok:
        doc_blocks.replace_section(args.doc, section, doc_blocks.generated_body(
            summary, table, f"Takeovers, in order:\n\n```\n{each}\n```"))
        print(f"\nrewrote the bench:{section} block of {args.doc}", file=sys.stderr)
    return 0 if ok else 1


def handover(cycles: int, doc: Path | None) -> int:
    """The SIGTERM loop of the Lease test: the write pauses, printed and written to ``doc``."""
    code, found, tail = run_loop(f"{TEST}::test_sigterm_of_the_master_hands_over_with_a_short_write_pause",
                                 "LEASE_HANDOVER_CYCLES", cycles, r"(\d+) hand-overs: write pauses ([\d., ]+) s; (.*)")
    if code != 0 or found is None:  # the times are printed before the test's checks
        print(tail, file=sys.stderr)
    if found is None:
        return 1
    times = [float(t) for t in found.group(2).split(", ")]
    summary = (f"{found.group(1)} hand-overs (D 3 s, R 1 s): SIGTERM of the master, longest gap between "
               f"acknowledged sends: p50 {statistics.median(times):.2f} s, max {max(times):.2f} s, "
               f"min {min(times):.2f} s")
    each = f"write pauses: {found.group(2)} s"
    print(summary, each, found.group(3), sep="\n")
    if doc is not None and code == 0:
        doc_blocks.replace_section(doc, DOC_SECTION, doc_blocks.generated_body(
            summary + ".", each + ".", found.group(3) + "."))
        print(f"\nrewrote the bench:{DOC_SECTION} block of {doc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
