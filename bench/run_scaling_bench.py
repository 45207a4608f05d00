#!/usr/bin/env python3
"""Core scaling: our broker and Apache RocketMQ 4.9.7 on 1 core and on 2, the load generator on the same machine.

    python3 bench/run_scaling_bench.py [--quick] [--doc docs/benchmarks.md] [--json OUT] [--rounds 3]
                                       [--seconds 15] [--threads 32]
                                       [--brokers rocketstore,rocketstore-front,apache-4.9.7]

Two core budgets, each broker alone on a fresh store (ASYNC_FLUSH, 1 GiB segments), saturated by
``--threads`` (32) closed-loop senders of 1 KiB messages from the Java 4.x client (``bench-produce``).
Ours runs twice per budget, with the asyncio remoting server (``rocketstore``) and with the native
remoting front (``rocketstore-front``, ``remotingNativeFront=true``), whose threads may use a core
the interpreter thread does not. The budgets:

* ``1 core``: the broker under ``taskset -c 0``, the client JVM under ``taskset -c 1``;
* ``2 cores``: the broker and the client both under ``taskset -c 0,1``, sharing them, which is what
  a 2-core machine that also runs its load generator offers.

Besides the send rate and the broker's CPU per acknowledged message (/proc/PID/stat), each run
reads every thread's CPU (/proc/PID/task/TID/stat) so the busiest thread's share of the broker's
CPU shows, the broker's user-space share of its CPU (an estimate of the GIL share: see
:func:`user_cpu_s`), and the client JVM's CPU from the moment its senders start, because on a
shared machine the load generator's cost per message bounds the rate as surely as the broker's. For our broker
one more run per turn, under ``py-spy record --gil --nonblocking`` (attached by pid; ``pip install
py-spy``; skipped with a note when it is absent or may not attach), counts the samples in which a
thread held the interpreter lock: that time, divided by the broker's CPU in the same window, is the
share of our per-message CPU that holds the GIL and so cannot run on a second core.

From those figures the block works out, with the arithmetic printed, what 8 cores would give:
the smallest of the CPU ceiling ``8e6 / (broker + client us per message)``, the ceiling of the
busiest thread ``1e6 / (its us per message)`` and, for ours, the ceiling of the interpreter lock
``1e6 / (GIL us per message)`` (py-spy's, else estimated from the user share): bounds from a
model, not a measurement. Contenders alternate their
order each round; every figure is the median of ``--rounds`` (3; ``--quick``: 1 round of 3 s).
``--doc FILE`` rewrites the block between ``<!-- bench:scaling:begin -->`` and
``<!-- bench:scaling:end -->``. A full run (3 rounds x 2 budgets x 3 contenders, 15 s runs) takes
about 22 minutes; ``--quick`` about 4.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import doc_blocks  # noqa: E402
import java_rocketmq  # noqa: E402
from run_broker_bench import (  # noqa: E402
    APACHE,
    APACHE_4,
    BODY_SIZE,
    CLIENT_HEAP,
    CLK_TCK,
    OURS,
    GiB,
    OurBroker,
    PinnedAnchor,
    PinnedDriver,
    Server,
    caveat,
    cpu_times,
    fmt,
    hot_path,
    proc_cpu_s,
    start_timed_produce,
    steal_share,
    turn_order,
    warm_up,
)

DOC_SECTION = "scaling"
#: our broker with the native remoting front (``remotingNativeFront=true``): socket reads, framing
#: and response writes on the front's threads, off the interpreter thread (docs/performance.md)
OURS_FRONT = "rocketstore-front"
CONTENDERS = (OURS, OURS_FRONT, APACHE_4)
#: broker.conf keys per contender of ours
OUR_CONFIG: dict[str, dict[str, str]] = {OURS: {"remotingNativeFront": "false"},
                                         OURS_FRONT: {"remotingNativeFront": "true"}}
# budget -> (broker CPUs, client CPUs) for taskset -c
BUDGETS: dict[str, tuple[str, str]] = {"1 core": ("0", "1"), "2 cores": ("0,1", "0,1")}
PROFILES: dict[str, dict[str, int]] = {
    "quick": dict(produce_s=3, warmup_s=2, client_warmup_s=1, rounds=1),
    "default": dict(produce_s=15, warmup_s=5, client_warmup_s=3, rounds=3),
}
PYSPY_RATE = 100
PREDICT_CORES = 8


# -- measuring -----------------------------------------------------------------------------------


def thread_cpu_s(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, utime + stime in seconds) for every thread of ``pid`` now."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            raw = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / CLK_TCK)
    return out


def user_cpu_s(pid: int) -> float:
    """utime of a process in seconds: CPU in user space, where the interpreter and our native send
    and pull paths run, holding the GIL (the extension releases it only in the dispatch scan and the
    index writes); system time is mostly socket and file syscalls, which CPython makes with the
    lock released. So the user share estimates the GIL share when py-spy cannot attach."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return int(fields[11]) / CLK_TCK


def busiest_thread(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> tuple[str, float]:
    """The thread that used the most CPU between two :func:`thread_cpu_s` readings: (name, seconds)."""
    deltas = [(cpu - before.get(tid, (name, 0.0))[1], f"{name}/{tid}") for tid, (name, cpu) in after.items()]
    cpu, name = max(deltas, default=(0.0, "none"))
    return name, cpu


def children_cpu_s() -> float:
    """CPU of this process's finished children (the client JVM once ``bench_produce`` returned)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def gil_samples(collapsed: Path) -> int:
    """Samples in py-spy's raw output ("stack count" lines); with ``--gil`` one per sample in which a
    thread held the interpreter lock."""
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            total += int(n)
    return total


def produce_run(server: Server, driver: PinnedDriver, topic: str, threads: int, seconds: int,
                warmup: int) -> dict[str, Any]:
    """One ``bench-produce`` (``warmup`` untimed seconds first in the same JVM), with the broker's
    process and thread CPU and the client JVM's own CPU counted from the moment its timed part
    starts (its "timing starts" line), not from the JVM's start: a JVM spends seconds of CPU
    loading and compiling, which a short run would charge per message."""
    pids = server.pids()
    broker_pid = pids.get(OURS, pids.get("apache-broker", 0))
    children0 = children_cpu_s()
    run = start_timed_produce(driver, topic, threads, seconds, warmup)
    client0, threads0, cpu0, user0, t0 = proc_cpu_s(run.proc.pid), thread_cpu_s(broker_pid), \
        sum(map(proc_cpu_s, pids.values())), user_cpu_s(broker_pid), time.monotonic()
    summary = run.wait(seconds + 120).summary
    wall = time.monotonic() - t0
    name, busiest = busiest_thread(threads0, thread_cpu_s(broker_pid))
    return {**summary, "wall_s": wall, "server_cpu_s": sum(map(proc_cpu_s, pids.values())) - cpu0,
            "client_cpu_s": children_cpu_s() - children0 - client0, "busiest_thread": name,
            "busiest_thread_cpu_s": busiest, "broker_user_cpu_s": user_cpu_s(broker_pid) - user0}


def gil_run(server: OurBroker, driver: PinnedDriver, threads: int, seconds: int, workdir: Path,
            log: Callable[[str], None]) -> dict[str, Any] | None:
    """One more produce run with py-spy attached: GIL-held seconds against the broker's CPU seconds
    over the same window; None (with a log line) when py-spy is absent or cannot attach."""
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        log("py-spy is not on PATH (pip install py-spy): no GIL share")
        return None
    raw = workdir / "gil.txt"
    pid = server.broker_pid()
    spy = subprocess.Popen([pyspy, "record", "--pid", str(pid), "--gil", "--nonblocking", "--rate", str(PYSPY_RATE),
                            "--format", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached before the load starts
    if spy.poll() is not None:
        log(f"py-spy could not attach: {spy.stderr.read().decode(errors='replace')[-300:] if spy.stderr else ''}")
        return None
    cpu0, t0 = proc_cpu_s(pid), time.monotonic()
    summary = driver.bench_produce("BenchGil", threads=threads, size=BODY_SIZE, seconds=seconds, heap=CLIENT_HEAP)
    spy.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
    cpu, wall = proc_cpu_s(pid) - cpu0, time.monotonic() - t0
    try:
        spy.wait(60)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()
    if not raw.is_file():
        log("py-spy wrote no samples: no GIL share")
        return None
    # py-spy's window (attach to interrupt) holds the client JVM's start and end too, when the
    # broker idles in epoll without the lock; so the GIL time per message is the lock's samples
    # over the messages sent, and its share is over the broker's CPU in the same window. A thread
    # the OS preempts while holding the lock still holds it: on an overloaded machine the share
    # can pass 100%, which is why the figures come from a broker that owns its core.
    held = gil_samples(raw) / PYSPY_RATE
    return {"gil_held_s": held, "cpu_s": cpu, "wall_s": wall, "sent": summary["sent"],
            "gil_share": held / cpu if cpu else None, "gil_us": 1e6 * held / max(summary["sent"], 1)}


def run_turn(contender: str, budget: str, args: argparse.Namespace, durations: dict[str, int], scratch: Path,
             log: Callable[[str], None]) -> dict[str, Any]:
    """Start one broker on ``budget``'s cores, warm it up, the timed run (and for ours the GIL run), stop it."""
    broker_cpus, client_cpus = BUDGETS[budget]
    workdir = scratch / f"{contender}-{budget.replace(' ', '')}"
    server: Server
    if contender in APACHE:
        anchor = PinnedAnchor(workdir, heap=args.heap, version=APACHE[contender],
                              broker_config={"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": str(GiB)})
        anchor.pin = broker_cpus
        server = anchor.start()
    else:
        server = OurBroker(workdir, "ASYNC_FLUSH", GiB, broker_cpus, config=OUR_CONFIG[contender]).start()
    try:
        driver = PinnedDriver(server.namesrv_addr, workdir / "client")
        driver.pin = client_cpus
        warm_up(driver, durations["warmup_s"], f"[{budget}] {contender}", log)
        log(f"[{budget}] {contender}: {args.threads} senders, {durations['produce_s']} s")
        produce = produce_run(server, driver, "BenchScale", args.threads, durations["produce_s"],
                              durations["client_warmup_s"])
        out: dict[str, Any] = {"produce": produce}
        if isinstance(server, OurBroker):
            log(f"[{budget}] {contender}: the same under py-spy --gil")
            out["gil"] = gil_run(server, driver, args.threads, durations["produce_s"], workdir, log)
        return out
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


# -- figures and the 8-core arithmetic -----------------------------------------------------------


def per_message(turn: dict[str, Any]) -> dict[str, float | None]:
    """A turn's figures: TPS, and per acknowledged message the broker's, the busiest broker thread's,
    the client's and (ours, from the py-spy run) the GIL-held microseconds, and the GIL share of the
    broker's CPU."""
    p = turn["produce"]
    n = max(p["sent"], 1)
    gil = turn.get("gil") or {}
    return {"tps": p["tps"], "broker_us": 1e6 * p["server_cpu_s"] / n,
            "thread_us": 1e6 * p["busiest_thread_cpu_s"] / n, "client_us": 1e6 * p["client_cpu_s"] / n,
            "broker_cores": p["server_cpu_s"] / p["wall_s"], "gil_share": gil.get("gil_share"),
            "user_share": p["broker_user_cpu_s"] / p["server_cpu_s"] if p["server_cpu_s"] else None,
            "gil_us": gil.get("gil_us")}


def median_figures(turns: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Every figure of :func:`per_message` over a contender's rounds (None when not measured)."""
    figs = [per_message(t) for t in turns]
    return {k: [f[k] for f in figs if f[k] is not None] for k in figs[0]}  # type: ignore[misc]


def med(samples: Sequence[float]) -> float | None:
    return statistics.median(samples) if samples else None


@dataclass
class Prediction:
    """What ``cores`` cores shared by a broker and its load generator would allow, from 1-core figures."""

    cores: int
    bounds: dict[str, tuple[float, str]]  # name -> (msgs/s ceiling, the arithmetic)

    @property
    def ceiling(self) -> tuple[str, float]:
        name, (tps, _) = min(self.bounds.items(), key=lambda kv: kv[1][0])
        return name, tps


def predict(cores: int, broker_us: float, client_us: float, thread_us: float, gil_us: float | None,
            gil_label: str = "GIL") -> Prediction:
    """The send rate's ceilings on ``cores`` cores that the broker and the client share.

    CPU: every message costs ``broker_us + client_us`` of some core. Busiest thread: one thread
    cannot use more than one core, so ``1e6 / thread_us``. GIL: time under the interpreter lock is
    serial across all of the process's threads, so ``1e6 / gil_us``. The 1-core figures are the
    input because only there does the broker own its core (on 2 cores it shares with the client).
    """
    bounds = {}
    if broker_us + client_us > 0:
        bounds["CPU"] = (cores * 1e6 / (broker_us + client_us),
                         f"{cores} x 1e6 / ({broker_us:.1f} + {client_us:.1f} us)")
    if thread_us > 0:
        bounds["busiest thread"] = (1e6 / thread_us, f"1e6 / {thread_us:.1f} us")
    if gil_us:
        bounds[gil_label] = (1e6 / gil_us, f"1e6 / {gil_us:.1f} us")
    return Prediction(cores, bounds)


def cell(samples: Sequence[float], pct: bool = False) -> str:
    """Median, and [min-max] over the rounds when they differed."""
    if not samples:
        return "n/a"
    show: Callable[[float], str] = (lambda x: f"{x:.0%}") if pct else fmt
    mid, low, high = show(statistics.median(samples)), show(min(samples)), show(max(samples))
    return mid if low == high else f"{mid} [{low}-{high}]"


def render(result: dict[str, Any]) -> tuple[str, str]:
    """The table (per contender and budget) and the 8-core arithmetic, as markdown."""
    header = ["broker", "cores (broker; client)", "send TPS", "broker cores busy", "broker CPU us/msg",
              "busiest thread us/msg", "user share of broker CPU", "GIL held us/msg", "GIL share of broker CPU",
              "client CPU us/msg", "TPS / 1-core TPS"]
    rows, lines = [], []
    for contender, budgets in result["turns"].items():
        figs = {b: median_figures(turns) for b, turns in budgets.items()}
        one = med(figs["1 core"]["tps"]) if "1 core" in figs else None
        for budget, f in figs.items():
            cpus = BUDGETS[budget]
            tps = med(f["tps"])
            rows.append([contender, f"{budget} ({cpus[0]}; {cpus[1]})", cell(f["tps"]), cell(f["broker_cores"]),
                         cell(f["broker_us"]), cell(f["thread_us"]), cell(f["user_share"], pct=True),
                         cell(f["gil_us"]), cell(f["gil_share"], pct=True),
                         cell(f["client_us"]), fmt(tps / one) if one and tps else ""])
        if "1 core" not in figs:
            continue
        f = figs["1 core"]
        broker_us, gil_us, label = med(f["broker_us"]) or 0.0, med(f["gil_us"]), "GIL (py-spy)"
        # a share over 100% counts holders the OS preempted (a loaded machine): not the lock's CPU
        if (gil_us is None or (med(f["gil_share"]) or 0.0) > 1.0) and contender in OUR_CONFIG \
                and (user := med(f["user_share"])) is not None:
            gil_us, label = user * broker_us, "GIL (estimated as the user-space share)"
        pred = predict(PREDICT_CORES, broker_us, med(f["client_us"]) or 0.0, med(f["thread_us"]) or 0.0, gil_us,
                       label)
        if not pred.bounds:
            continue
        limit, tps = pred.ceiling
        arithmetic = "; ".join(f"{name} {text} = {fmt(v)} msgs/s" for name, (v, text) in pred.bounds.items())
        lines.append(f"* {contender}, {PREDICT_CORES} cores shared with the load generator: {arithmetic}. "
                     f"Ceiling {fmt(tps)} msgs/s, set by the {limit} bound ({fmt(tps / one)} x its 1-core rate)"
                     if one else f"* {contender}: no 1-core rate")
    table = doc_blocks.markdown_table(header, rows, right=range(2, 11))
    return table, "\n".join(lines)


def setup_text(result: dict[str, Any]) -> str:
    s = result["setup"]
    return (caveat(s) + f"Profile {s['profile']}: {s['rounds']} round(s), contenders in alternating order; "
            f"{s['threads']} closed-loop senders of {BODY_SIZE} B messages (rocketmq-client "
            f"{java_rocketmq.CLIENT_VERSION}, the default JIT and collector) for {s['produce_s']} s after a "
            f"{s['warmup_s']} s warm-up and {s['client_warmup_s']} s untimed in the same client JVM; "
            "ASYNC_FLUSH, fresh store per turn. "
            f"rocketstore: Python {s['python']}, hot path `{s['hot_path'][0]}`, asyncio remoting server; "
            "rocketstore-front: the same with the native remoting front (remotingNativeFront=true); "
            "Apache RocketMQ 4.9.7: name "
            f"server and broker JVMs, -Xms/-Xmx {s['heap']}. Each cell is the median with [min-max] over the "
            f"rounds. GIL share: py-spy --gil samples at {PYSPY_RATE} Hz in a second run of the same turn "
            f"(n/a: py-spy absent or not allowed to attach); user share: utime / (utime + stime) of the broker "
            f"process. {s['nproc']} cores; load average "
            f"{s['loadavg_start'][0]} at the start, {s['loadavg_end'][0]} at the end; {s['total_wall_s'] / 60:.1f} "
            "minutes in all; CPU busy/steal " + ", ".join(
                f"{n} {v['busy']:.0%}/{v['steal']:.0%}" for n, v in s["cpu_shares"].items()) + ". "
            + doc_blocks.interpreter_probe_text(s["interpreter_ns"]))


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round of 3 s runs (about 3 minutes): a smoke run")
    ap.add_argument("--seconds", type=int, help="seconds per timed run (default 15, --quick 3)")
    ap.add_argument("--rounds", type=int, help="rounds, the contenders' order reversed every other one (default 3)")
    ap.add_argument("--threads", type=int, default=32, help="sender threads (default 32: saturation)")
    ap.add_argument("--brokers", default=",".join(CONTENDERS), help=f"contenders (default {','.join(CONTENDERS)})")
    ap.add_argument("--heap", default=java_rocketmq.DEFAULT_HEAP, help="-Xms/-Xmx of Apache's JVMs")
    doc_blocks.add_output_arguments(ap, DOC_SECTION, "stores, logs")
    args = ap.parse_args()
    args.brokers = [b for b in args.brokers.split(",") if b]
    if bad := [b for b in args.brokers if b not in CONTENDERS]:
        raise SystemExit(f"--brokers: {', '.join(bad)} not among {', '.join(CONTENDERS)}")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the 1-core budget pins the client to a second core: this needs 2 cores")
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)  # before a long run, not after it
    durations = dict(PROFILES["quick" if args.quick else "default"])
    durations["produce_s"] = args.seconds or durations["produce_s"]
    rounds = args.rounds or durations["rounds"]
    java_rocketmq.build_driver()
    if APACHE_4 in args.brokers:
        java_rocketmq.build_anchor(APACHE[APACHE_4])
    t_start, cpu_start, load_start = time.monotonic(), cpu_times(), tuple(round(x, 2) for x in os.getloadavg())
    interpreter_ns = doc_blocks.interpreter_probe_ns()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t_start:6.1f}s {msg}", file=sys.stderr, flush=True)

    turns: dict[str, dict[str, list[dict[str, Any]]]] = {c: {b: [] for b in BUDGETS} for c in args.brokers}
    with doc_blocks.scratch_dir(args, "scalingbench-") as scratch:
        for round_no in range(rounds):
            for i, budget in enumerate(BUDGETS):
                for contender in turn_order(args.brokers, i, round_no):
                    where = scratch / f"round{round_no}"
                    where.mkdir(exist_ok=True)
                    turns[contender][budget].append(run_turn(contender, budget, args, durations, where, log))
    result: dict[str, Any] = {
        "setup": dict(profile="quick" if args.quick else "default", rounds=rounds, threads=args.threads,
                      produce_s=durations["produce_s"], warmup_s=durations["warmup_s"],
                      client_warmup_s=durations["client_warmup_s"], heap=args.heap,
                      python=sys.version.split()[0], hot_path=hot_path({}), nproc=os.cpu_count(),
                      interpreter_ns=interpreter_ns,
                      loadavg_start=load_start, loadavg_end=tuple(round(x, 2) for x in os.getloadavg()),
                      total_wall_s=time.monotonic() - t_start, cpu_shares=steal_share(cpu_start, cpu_times())),
        "turns": turns,
    }
    table, arithmetic = render(result)
    print("\n" + setup_text(result) + "\n\n" + table + "\n\n" + arithmetic)
    doc_blocks.write_outputs(args, DOC_SECTION, result,
                             textwrap.fill(setup_text(result), 100, break_on_hyphens=False), table, arithmetic)


if __name__ == "__main__":
    main()
