#!/usr/bin/env python3
"""Broker benchmark: RocketStore's broker against Apache RocketMQ's, same machine, same run, same client.

    python3 bench/run_broker_bench.py [--quick] [--json OUT] [--dir D] [--seconds N] [--threads 1,8,32]
                                      [--flush ASYNC_FLUSH,SYNC_FLUSH] [--segment BYTES] [--heap 512m]
                                      [--no-pin] [--keep]
    python3 bench/run_broker_bench.py --profile OUT_PREFIX [--seconds N] [--threads 8]

For each flush type, both brokers are started side by side (fresh stores, the same broker.conf
keys: flushDiskType, mappedFileSizeCommitLog) and every scenario runs against Apache RocketMQ
and then against ours, back to back, so background load on the machine hits both alike. The
load generator is one Java client (tests/clients/java: rocketmq-client 4.9.8, ``bench-produce``
closed-loop sync sends of random 1 KiB bodies from N threads; ``bench-consume``, a push consumer
draining the backlog of the largest produce run). On a 2-core machine the brokers are pinned
to CPU 0 and the client JVMs to CPU 1 with ``taskset`` (``--no-pin`` shares the cores).

Resources are read from /proc: peak RSS is each server process's VmHWM at the end of a flush
section (it includes touched pages of memory-mapped segments on both sides), peak RssAnon
(memory outside the page cache) is sampled every 100 ms; CPU is utime+stime deltas of the
server processes around each driver run. Apache RocketMQ runs as two JVMs (name server and
broker); ours is one process with an embedded name server, so it is compared with their sum
(both JVMs are also printed separately). See bench/README.md.

``--profile PREFIX`` starts only our broker (ASYNC_FLUSH), runs the 8-thread produce load and
records it with py-spy (``pip install py-spy``; ``--gil``: samples of the thread holding the GIL):
PREFIX.svg (flame graph), PREFIX.txt (collapsed stacks) and the hottest functions on stdout.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "clients"))

import java_rocketmq  # noqa: E402
from java_rocketmq import ClientDriver, RocketMQAnchor, free_port  # noqa: E402

GiB = 1024 * 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
BROKER_CPU = "0"
CLIENT_CPU = "1"
BODY_SIZE = 1024
CLIENT_HEAP = "1g"

# name -> durations (seconds). warmup: one untimed 8-thread produce per broker per flush type,
# so the JVM's JIT and both brokers' first segment allocation are not in the first scenario.
PROFILES: dict[str, dict[str, int]] = {
    "quick": dict(produce_s=4, warmup_s=2, consume_max_s=25),
    "default": dict(produce_s=20, warmup_s=8, consume_max_s=90),
}


# -- /proc ---------------------------------------------------------------------------------------


def proc_status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads) in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    # after the ")" of comm: state is field 3, utime field 14, stime field 15 (1-based in proc(5))
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_times() -> dict[str, list[int]]:
    """/proc/stat's cpu lines: name -> jiffies (user nice system idle iowait irq softirq steal ...)."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu"):
                name, *vals = line.split()
                out[name] = [int(v) for v in vals]
    return out


def steal_share(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Share of time the hypervisor gave to others (steal) and share busy, per CPU, between two samples."""
    out = {}
    for name, vals in after.items():
        delta = [a - b for a, b in zip(vals[:8], before.get(name, vals)[:8], strict=True)]
        total = sum(delta) or 1
        out[name] = {"steal": delta[7] / total, "busy": 1 - (delta[3] + delta[4] + delta[7]) / total}
    return out


class AnonSampler:
    """Peak RssAnon of some processes, sampled every 100 ms (/proc keeps a peak only for total RSS)."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.1) -> None:
        self.pids = pids
        self.peak_kb = {name: 0 for name in pids}
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for name, pid in self.pids.items():
            self.peak_kb[name] = max(self.peak_kb[name], proc_status_kb(pid, "RssAnon"))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.peak_kb


# -- servers -------------------------------------------------------------------------------------


def pin_prefix(cpu: str | None) -> list[str]:
    return ["taskset", "-c", cpu] if cpu is not None else []


class PinnedAnchor(RocketMQAnchor):
    """RocketMQAnchor whose JVMs start under ``taskset -c CPU`` (taskset execs, so the pid is the JVM's)."""

    pin: str | None = None

    def _launch(self, name: str, cmd: list[str], ready: str, timeout: float) -> None:
        super()._launch(name, [*pin_prefix(self.pin), *cmd], ready, timeout)

    def pids(self) -> dict[str, int]:
        return {f"apache-{s.name}": s.proc.pid for s in self._servers}


class PinnedDriver(ClientDriver):
    """ClientDriver whose JVMs start under ``taskset -c CPU``."""

    pin: str | None = None

    def command(self, mode: str, *args: str | int | os.PathLike[str], heap: str | None = None) -> list[str]:
        return [*pin_prefix(self.pin), *super().command(mode, *args, heap=heap)]


@dataclass
class OurBroker:
    """``rocketstore broker`` as a child process (stdout and stderr to files; ready when it prints "ready")."""

    workdir: Path
    flush: str
    segment: int
    pin: str | None
    wrap: Sequence[str] = ()  # e.g. a profiler command line that execs the broker
    listen_port: int = 0
    namesrv_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _files: list[Any] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    def start(self, timeout: float = 60.0) -> OurBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.listen_port, self.namesrv_port = free_port(), free_port()
        conf = self.workdir / "broker.conf"
        conf.write_text(
            "brokerClusterName=BenchCluster\nbrokerName=rocketstore-broker-a\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={self.workdir / 'store'}\nflushDiskType={self.flush}\n"
            f"listenPort={self.listen_port}\nnamesrvListenPort={self.namesrv_port}\nhttpListenPort=0\n"
            f"mappedFileSizeCommitLog={self.segment}\n")
        out_path = self.workdir / "broker.stdout"
        out, err = out_path.open("wb"), (self.workdir / "broker.stderr").open("wb")
        self._files = [out, err]
        env = {**os.environ, "HOME": str(self.workdir / "home")}
        cmd = [*pin_prefix(self.pin), *self.wrap, sys.executable, "-m", "rocketstore.cli", "broker", "-c", str(conf)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while "ready" not in out_path.read_text(errors="replace").split():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.workdir / "broker.stderr").read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"our broker did not become ready:\n{tail}")
            time.sleep(0.05)
        return self

    def broker_pid(self) -> int:
        """The broker's Python process (under a wrapper such as py-spy, the wrapper's child)."""
        assert self.proc is not None
        if not self.wrap:
            return self.proc.pid
        for _ in range(100):
            try:
                children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            except FileNotFoundError:
                children = []
            if children:
                return int(children[0])
            time.sleep(0.05)
        raise RuntimeError("the wrapped broker process was not found")

    def pids(self) -> dict[str, int]:
        return {"rocketstore": self.broker_pid()}

    def stop(self, timeout: float = 60.0) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.broker_pid() if self.wrap else self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
        for f in self._files:
            f.close()
        return code


# -- scenarios -----------------------------------------------------------------------------------


@dataclass
class Side:
    """One broker under test: how to reach it and which processes to measure."""

    name: str  # "apache" or "rocketstore"
    driver: ClientDriver
    pids: dict[str, int]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids.values())

    def measured(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        cpu0, t0 = self.cpu_s(), time.monotonic()
        summary = fn()
        summary["server_cpu_s"] = self.cpu_s() - cpu0
        summary["wall_s"] = time.monotonic() - t0
        return summary


def run_flush_section(flush: str, args: argparse.Namespace, durations: dict[str, int], scratch: Path,
                      log: Callable[[str], None]) -> dict[str, Any]:
    """Both brokers up with ``flush``; every scenario on Apache RocketMQ, then on ours."""
    broker_conf = {"flushDiskType": flush, "mappedFileSizeCommitLog": str(args.segment)}
    anchor = PinnedAnchor(scratch / f"apache-{flush}", heap=args.heap, broker_config=broker_conf)
    anchor.pin = None if args.no_pin else BROKER_CPU
    ours = OurBroker(scratch / f"rocketstore-{flush}", flush, args.segment, None if args.no_pin else BROKER_CPU)
    out: dict[str, Any] = {"flush": flush, "scenarios": {}}
    try:
        log(f"[{flush}] starting Apache RocketMQ {java_rocketmq.ANCHOR_VERSION} (heap {args.heap}) and rocketstore")
        anchor.start()
        ours.start()
        out["boot_s"] = {**{f"apache-{k}": v for k, v in anchor.boot_seconds.items()}}
        sides = []
        for name, namesrv, pids in (("apache", anchor.namesrv_addr, anchor.pids()),
                                    ("rocketstore", ours.namesrv_addr, ours.pids())):
            driver = PinnedDriver(namesrv, scratch / f"client-{flush}-{name}")
            driver.pin = None if args.no_pin else CLIENT_CPU
            sides.append(Side(name, driver, pids))
        all_pids = {k: v for side in sides for k, v in side.pids.items()}
        sampler = AnonSampler(all_pids)

        for side in sides:
            log(f"[{flush}] {side.name}: warm-up, 8 threads, {durations['warmup_s']} s")
            side.driver.bench_produce("BenchWarmup", threads=8, size=BODY_SIZE, seconds=durations["warmup_s"],
                                      heap=CLIENT_HEAP)
        for i, threads in enumerate(args.threads):
            key = f"produce-{threads}"
            out["scenarios"][key] = {}
            # alternate which broker goes first, so a drift in background load does not favour one
            for side in (sides if i % 2 == 0 else sides[::-1]):
                log(f"[{flush}] {side.name}: produce, {threads} threads, {durations['produce_s']} s")
                topic = f"BenchProduce{threads}"
                out["scenarios"][key][side.name] = side.measured(functools.partial(
                    side.driver.bench_produce, topic, threads=threads, size=BODY_SIZE,
                    seconds=durations["produce_s"], heap=CLIENT_HEAP))
        backlog_threads = max(args.threads)
        out["scenarios"]["consume"] = {}
        for side in sides:
            backlog = int(out["scenarios"][f"produce-{backlog_threads}"][side.name]["sent"]) + 1  # + warm-up send
            log(f"[{flush}] {side.name}: consume a backlog of {backlog} messages")
            result = side.measured(functools.partial(
                side.driver.bench_consume, f"BenchProduce{backlog_threads}", f"bench-consumers-{flush}",
                seconds=durations["consume_max_s"], stop_after=backlog, heap=CLIENT_HEAP))
            result["backlog"] = backlog
            out["scenarios"]["consume"][side.name] = result

        peak_anon = sampler.stop()
        out["memory_mb"] = {
            name: {"vm_hwm": proc_status_kb(pid, "VmHWM") / 1024, "vm_rss": proc_status_kb(pid, "VmRSS") / 1024,
                   "peak_rss_anon": peak_anon[name] / 1024}
            for name, pid in all_pids.items()}
        out["cpu_total_s"] = {name: proc_cpu_s(pid) for name, pid in all_pids.items()}
    finally:
        out["exit_codes"] = {"apache": anchor.stop(), "rocketstore": ours.stop()}
        if not args.keep:
            for d in (anchor.workdir, ours.workdir):
                shutil.rmtree(d / "store", ignore_errors=True)
    return out


# -- report --------------------------------------------------------------------------------------


def build_rows(sections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def row(flush: str, scenario: str, metric: str, ours: float | None, apache: float | None, goal: str,
            good: Callable[[float], bool] | None = None) -> None:
        ratio = ours / apache if ours is not None and apache else None
        met = None if ratio is None or good is None else good(ratio)
        rows.append(dict(flush=flush, scenario=scenario, metric=metric, rocketstore=ours, apache=apache,
                         ratio=ratio, goal=goal, met=met))

    for sec in sections:
        flush = sec["flush"]
        for key, pair in sec["scenarios"].items():
            a, o = pair["apache"], pair["rocketstore"]
            if key.startswith("produce-"):
                threads = key.split("-")[1]
                scen = f"produce 1 KiB, {threads} thread{'s' if threads != '1' else ''}"
                row(flush, scen, "send TPS", o["tps"], a["tps"], ">= 1.0", lambda r: r >= 1.0)
                row(flush, scen, "send p50 ms", o["p50_ms"], a["p50_ms"], "", None)
                row(flush, scen, "send p99 ms", o["p99_ms"], a["p99_ms"], "<= 1.0", lambda r: r <= 1.0)
                if o["failed"] or a["failed"]:
                    row(flush, scen, "failed sends", o["failed"], a["failed"], "0", None)
                row(flush, scen, "server CPU s per 1M msgs", 1e6 * o["server_cpu_s"] / max(o["sent"], 1),
                    1e6 * a["server_cpu_s"] / max(a["sent"], 1), "", None)
            else:
                scen = f"consume backlog ({o['backlog']:,} / {a['backlog']:,} msgs)"
                row(flush, scen, "consume TPS", o["tps"], a["tps"], ">= 1.0", lambda r: r >= 1.0)
                row(flush, scen, "server CPU s per 1M msgs", 1e6 * o["server_cpu_s"] / max(o["consumed"], 1),
                    1e6 * a["server_cpu_s"] / max(a["consumed"], 1), "", None)
        mem = sec["memory_mb"]
        apache_hwm = mem["apache-namesrv"]["vm_hwm"] + mem["apache-broker"]["vm_hwm"]
        apache_anon = mem["apache-namesrv"]["peak_rss_anon"] + mem["apache-broker"]["peak_rss_anon"]
        row(flush, "memory, whole section", "peak RSS MB (VmHWM; Apache = namesrv + broker)",
            mem["rocketstore"]["vm_hwm"], apache_hwm, "<= 0.25", lambda r: r <= 0.25)
        row(flush, "memory, whole section", "peak RSS MB, Apache broker JVM only",
            mem["rocketstore"]["vm_hwm"], mem["apache-broker"]["vm_hwm"], "", None)
        row(flush, "memory, whole section", "peak RssAnon MB (sampled 100 ms; Apache = namesrv + broker)",
            mem["rocketstore"]["peak_rss_anon"], apache_anon, "", None)
    return rows


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}"


def print_table(result: dict[str, Any]) -> None:
    s = result["setup"]
    print(f"\nbroker benchmark ({s['profile']}): {s['produce_s']} s per produce run, {s['body_size']} B bodies, "
          f"commitlog segments {s['segment']:,} B on both, Apache RocketMQ {s['apache_version']} "
          f"(-Xms/-Xmx {s['heap']} for name server and broker, G1), rocketstore on Python "
          f"{s['python']}, client rocketmq-client {s['client_version']} (-Xmx{s['client_heap']})")
    print(f"pinning: {s['pinning']}")
    print(f"nproc={s['nproc']} loadavg start={s['loadavg_start']} end={s['loadavg_end']} "
          f"total {s['total_wall_s']:.0f} s")
    print("CPU during the run (steal = time the hypervisor gave to other guests): " + ", ".join(
        f"{name} busy {v['busy']:.0%} steal {v['steal']:.0%}" for name, v in s["cpu_shares"].items()) + "\n")
    print("| flush | scenario | metric | rocketstore | Apache RocketMQ | ratio | goal | met |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for r in result["rows"]:
        met = "" if r["met"] is None else ("yes" if r["met"] else "no")
        print(f"| {r['flush']} | {r['scenario']} | {r['metric']} | {fmt(r['rocketstore'])} | {fmt(r['apache'])} | "
              f"{fmt(r['ratio'])} | {r['goal']} | {met} |")


# -- profiling -----------------------------------------------------------------------------------


def summarize_collapsed(path: Path, top: int = 25) -> str:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks ("a;b;c N")."""
    self_n: collections.Counter[str] = collections.Counter()
    incl_n: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n_text = line.rpartition(" ")
        if not stack:
            continue
        n = int(n_text)
        total += n
        frames = [f.rsplit(" (", 1)[0] + " (" + f.rsplit(" (", 1)[1].split(":")[0].split("/")[-1] + ")"
                  if " (" in f else f for f in stack.split(";")]
        frames = frames[1:] if frames and frames[0].startswith("process ") else frames
        frames = frames[1:] if frames and frames[0].startswith("thread ") else frames
        if not frames:
            continue
        self_n[frames[-1]] += n
        for f in set(frames):
            incl_n[f] += n
    lines = [f"{total} samples holding the GIL", "", "self %  function"]
    lines += [f"{100 * n / total:6.1f}  {f}" for f, n in self_n.most_common(top)]
    lines += ["", "incl %  function"]
    lines += [f"{100 * n / total:6.1f}  {f}" for f, n in incl_n.most_common(top)]
    return "\n".join(lines)


def run_profile(args: argparse.Namespace, durations: dict[str, int], scratch: Path) -> None:
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        raise SystemExit("py-spy is not on PATH: pip install py-spy")
    prefix = Path(args.profile).resolve()
    threads = max(args.threads) if len(args.threads) == 1 else 8
    raw = prefix.with_suffix(".txt")
    svg = prefix.with_suffix(".svg")
    results = {}
    for fmt_name, out_path in (("raw", raw), ("flamegraph", svg)):
        # --gil: only the thread holding the GIL is sampled, i.e. where the interpreter's CPU goes
        # (waits in Condition.wait / selectors would otherwise count as time under heavy contention);
        # --nonblocking: the broker is not paused for each sample.
        wrap = [pyspy, "record", "--format", fmt_name, "-o", str(out_path), "--rate", "200", "--gil",
                "--nonblocking", "--"]
        ours = OurBroker(scratch / f"profile-{fmt_name}", "ASYNC_FLUSH", args.segment,
                         None if args.no_pin else BROKER_CPU, wrap=wrap)
        ours.start()
        try:
            driver = PinnedDriver(ours.namesrv_addr, scratch / f"profile-client-{fmt_name}")
            driver.pin = None if args.no_pin else CLIENT_CPU
            driver.bench_produce("BenchWarmup", threads=threads, size=BODY_SIZE, seconds=2, heap=CLIENT_HEAP)
            side = Side("rocketstore", driver, ours.pids())
            results[fmt_name] = side.measured(functools.partial(
                driver.bench_produce, "BenchProfile", threads=threads, size=BODY_SIZE,
                seconds=durations["produce_s"], heap=CLIENT_HEAP))
        finally:
            ours.stop()
            shutil.rmtree(ours.workdir / "store", ignore_errors=True)
    print(f"py-spy (200 Hz, --gil) of rocketstore broker, ASYNC_FLUSH, {threads} sender threads, "
          f"{durations['produce_s']} s: {json.dumps(results['raw'])}")
    print(f"flame graph {svg}, collapsed stacks {raw}\n")
    print(summarize_collapsed(raw))


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short runs (about 3 minutes in all)")
    ap.add_argument("--seconds", type=int, help="seconds per produce run (default 20, --quick 4)")
    ap.add_argument("--threads", default="1,8,32", help="sender thread counts (default 1,8,32)")
    ap.add_argument("--flush", default="ASYNC_FLUSH,SYNC_FLUSH", help="flushDiskType values to run")
    ap.add_argument("--segment", type=int, default=GiB, help="mappedFileSizeCommitLog of both brokers (1 GiB)")
    ap.add_argument("--heap", default=java_rocketmq.DEFAULT_HEAP,
                    help=f"-Xms/-Xmx of Apache RocketMQ's name server and broker ({java_rocketmq.DEFAULT_HEAP})")
    ap.add_argument("--no-pin", action="store_true", help="do not pin brokers to CPU 0 and clients to CPU 1")
    ap.add_argument("--json", metavar="OUT", help="also write all results as JSON")
    ap.add_argument("--dir", help="parent of the scratch directory (default: system temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (stores, logs)")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy our broker under produce load instead")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    durations = dict(PROFILES["quick" if args.quick else "default"])
    if args.seconds:
        durations["produce_s"] = args.seconds
    if not args.no_pin and (os.cpu_count() or 1) < 2:
        args.no_pin = True
    java_rocketmq.build_driver()
    java_rocketmq.build_anchor()
    scratch = Path(tempfile.mkdtemp(prefix="brokerbench-", dir=args.dir))
    t_start = time.monotonic()
    cpu_start = cpu_times()
    loadavg_start = tuple(round(x, 2) for x in os.getloadavg())

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t_start:6.1f}s {msg}", file=sys.stderr, flush=True)

    try:
        if args.profile:
            run_profile(args, durations, scratch)
            return
        sections = [run_flush_section(flush, args, durations, scratch, log) for flush in args.flush.split(",")]
    finally:
        if args.keep:
            print(f"kept scratch dir {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    shares = steal_share(cpu_start, cpu_times())
    pinning = ("none (--no-pin): brokers and clients share the cores" if args.no_pin else
               f"brokers (Apache name server + broker JVMs, rocketstore) taskset -c {BROKER_CPU}; "
               f"client JVMs taskset -c {CLIENT_CPU}")
    result = {
        "setup": dict(profile="quick" if args.quick else "default", produce_s=durations["produce_s"],
                      warmup_s=durations["warmup_s"], consume_max_s=durations["consume_max_s"],
                      body_size=BODY_SIZE, segment=args.segment, heap=args.heap,
                      apache_version=java_rocketmq.ANCHOR_VERSION, client_version=java_rocketmq.CLIENT_VERSION,
                      client_heap=CLIENT_HEAP, python=sys.version.split()[0], pinning=pinning,
                      nproc=os.cpu_count(), loadavg_start=loadavg_start,
                      loadavg_end=tuple(round(x, 2) for x in os.getloadavg()),
                      total_wall_s=time.monotonic() - t_start, threads=args.threads, cpu_shares=shares),
        "sections": sections,
        "rows": build_rows(sections),
    }
    print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
