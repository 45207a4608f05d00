#!/usr/bin/env python3
"""gRPC v2 benchmark: our broker's MessagingService against Apache RocketMQ 5.3.3's proxy in local mode.

    python3 bench/run_grpc_bench.py [--quick] [--doc docs/benchmarks.md] [--json OUT] [--seconds N]
                                    [--inflight 1,32] [--receive-threads 8] [--rounds N] [--heap 1g]
                                    [--contenders rocketstore,apache-5.3.3-proxy] [--dir D] [--keep]
    python3 bench/run_grpc_bench.py --profile OUT_PREFIX [--seconds N]

RocketMQ 5.x clients speak gRPC to a proxy; our broker is its own proxy, Apache's is
``ProxyStartup -pm local`` (rocketmq-proxy 5.3.3 from Maven Central, which runs the broker inside
the proxy's JVM; its name server is a second JVM). Both are driven by the same load generator, the
real Java 5.x client (rocketmq-client-java 5.0.7, tests/support/drivers/java5 Client5Bench): asynchronous
sends of one 1 KiB body with N outstanding (a closed loop per in-flight window), then
SimpleConsumer receive (32 at a time) + ack of the backlog the timed sends left, from several
threads. The servers run under ``taskset -c 0``, the client JVM under ``taskset -c 1``; each
contender runs alone, on a fresh store, in turn (the order alternates between rounds), with 8
queue topics created up front (ours through its admin port, Apache's with mqadmin updateTopic: the
proxy's gRPC path does not create topics).

The client prints a line when each phase starts and ends; this script reads the server processes'
utime+stime (/proc/PID/stat; Apache: proxy + name server JVMs) and the client JVM's at those
lines, so CPU per message and the share of a core each side used cover exactly the timed phase.
A server core near 100% busy with the client core below it means the server is the bottleneck,
which is what the comparison needs. With ``--rounds`` above 1 each figure is the median.

``--doc docs/benchmarks.md`` rewrites the block between ``<!-- bench:grpc:begin -->`` and
``<!-- bench:grpc:end -->`` (bench/doc_blocks.py). ``--profile PREFIX`` runs only our broker
under ``py-spy record --gil`` with the same load and prints its hottest functions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT / "tests" / "support", ROOT / "bench"):
    sys.path.insert(0, str(_path))

import doc_blocks  # noqa: E402
import java_rocketmq  # noqa: E402
import mqadmin  # noqa: E402
from ports import free_port  # noqa: E402
from run_broker_bench import (  # noqa: E402
    BROKER_CPU,
    CLIENT_CPU,
    GiB,
    OurBroker,
    PinnedAnchor,
    cpu_times,
    fmt,
    hot_path,
    pin_prefix,
    proc_cpu_s,
    steal_share,
    summarize_collapsed,
)

from rocketstore.client import MQAdmin  # noqa: E402

CLIENT5_DIR = ROOT / "tests" / "support" / "drivers" / "java5"
CLIENT5_JAR = CLIENT5_DIR / "target" / "client5-driver.jar"
CLIENT5_LIB = CLIENT5_DIR / "target" / "lib"
BENCH_MAIN = "io.rocketstore.clients5.Client5Bench"
CLIENT5_VERSION = "5.0.7"  # tests/support/drivers/java5/pom.xml
APACHE_VERSION = "5.3.3"
CLUSTER = "DefaultCluster"

OURS = "rocketstore"
APACHE = "apache-5.3.3-proxy"
CONTENDERS = (OURS, APACHE)
DOC_SECTION = "grpc"
BODY_SIZE = 1024
QUEUES = 8
CLIENT_HEAP = "1g"
GROUP = "BenchGrpcGroup"

# name -> seconds: warm-up (sends, then receive of what they left), each timed send window, the
# most a timed receive may take
PROFILES: dict[str, dict[str, int]] = {
    "quick": dict(warmup_s=2, send_s=3, receive_max_s=20),
    "default": dict(warmup_s=30, send_s=15, receive_max_s=90),
}


# -- servers -------------------------------------------------------------------------------------


class ProxyAnchor(PinnedAnchor, java_rocketmq.ProxyAnchor):
    """Apache RocketMQ 5.3.3's name server and ``ProxyStartup -pm local`` (java_rocketmq.ProxyAnchor),
    its JVMs pinned as PinnedAnchor pins them."""

    def create_topics(self, topics: Sequence[str]) -> None:
        """mqadmin updateTopic (8 read and write queues) and updateSubGroup, with the proxy's own tools."""
        # the proxy reports success before its broker has registered with the name server, and
        # mqadmin finds the cluster's brokers there: retry until the cluster is known
        deadline = time.monotonic() + 30
        while True:
            try:
                self._mqadmin("updateTopic", "-c", self.cluster, "-t", topics[0], "-r", str(QUEUES), "-w",
                              str(QUEUES))
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        for topic in topics[1:]:
            self._mqadmin("updateTopic", "-c", self.cluster, "-t", topic, "-r", str(QUEUES), "-w", str(QUEUES))
        self._mqadmin("updateSubGroup", "-c", self.cluster, "-g", GROUP)

    def _mqadmin(self, verb: str, *args: str) -> None:
        java = self.java or java_rocketmq.find_tools()[0]
        home = self.workdir / "mqadmin-home"
        (home / "conf").mkdir(parents=True, exist_ok=True)
        (home / "conf" / "logback_tools.xml").write_text(mqadmin.LOGBACK_QUIET)
        cmd = [java, "-Xmx256m", f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
               f"-Drmq.logback.configurationFile={home / 'conf' / 'logback_tools.xml'}",
               "-cp", str(java_rocketmq.PROXY_ANCHOR_LIB / "*"), mqadmin.MQADMIN_MAIN, verb, "-n", self.namesrv_addr,
               *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=mqadmin.RUN_TIMEOUT_S, cwd=home,
                              env={**os.environ, "ROCKETMQ_HOME": str(home)}, check=False)
        if proc.returncode != 0 or "success" not in proc.stdout.lower():
            raise RuntimeError(f"mqadmin {verb} {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@dataclass
class Contender:
    """One server under test: where its gRPC endpoint is, which processes are its, how to stop it."""

    name: str
    endpoint: str
    pids: dict[str, int]
    stop: Callable[[], Any]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids.values())


def start_contender(name: str, workdir: Path, topics: Sequence[str], args: argparse.Namespace,
                    wrap: Sequence[str] = ()) -> Contender:
    """Start ``name``'s servers pinned to the server core, on a fresh store, with ``topics`` created."""
    if name == APACHE:
        anchor = ProxyAnchor(workdir, heap=args.heap, version=APACHE_VERSION, cluster=CLUSTER,
                             broker_config={"mappedFileSizeCommitLog": str(args.segment)})
        anchor.pin = BROKER_CPU
        anchor.start()
        try:
            anchor.create_topics(topics)
        except BaseException:
            anchor.stop()
            raise
        return Contender(name, anchor.grpc_endpoint, anchor.pids(), anchor.stop)
    grpc_port = free_port()
    ours = OurBroker(workdir, "ASYNC_FLUSH", args.segment, BROKER_CPU, wrap=wrap, env=dict(args.ours_env),
                     config={"grpcListenPort": str(grpc_port)}).start()
    try:
        with MQAdmin(ours.namesrv_addr) as admin:
            for topic in topics:
                admin.create_topic(topic, QUEUES, QUEUES)
    except BaseException:
        ours.stop()
        raise
    return Contender(name, f"127.0.0.1:{grpc_port}", ours.pids(), ours.stop)


# -- the client ----------------------------------------------------------------------------------


def build_client() -> float | None:
    """Build the 5.x client driver jar (Client5Driver and Client5Bench) unless it is up to date."""
    return java_rocketmq.maven_build(CLIENT5_DIR / "pom.xml", [CLIENT5_JAR, CLIENT5_LIB],
                                     [CLIENT5_DIR / "pom.xml", CLIENT5_DIR / "src"])


def run_client(contender: Contender, workdir: Path, durations: dict[str, int], args: argparse.Namespace,
               log: Callable[[str], None]) -> dict[str, dict[str, Any]]:
    """One Client5Bench run against ``contender``; phase -> its summary plus the CPU both sides spent in it."""
    java = java_rocketmq.find_tools()[0]
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    cmd = [*pin_prefix(CLIENT_CPU), java, f"-Xms{CLIENT_HEAP}", f"-Xmx{CLIENT_HEAP}",
           f"-Duser.home={workdir / 'home'}", "-cp", f"{CLIENT5_JAR}{os.pathsep}{CLIENT5_LIB}/*", BENCH_MAIN,
           contender.endpoint, "--topic", "BenchGrpc", "--warm-topic", "BenchGrpcWarm", "--group", GROUP,
           "--size", str(BODY_SIZE), "--inflight", ",".join(map(str, args.inflight)),
           "--warmup", str(durations["warmup_s"]), "--seconds", str(durations["send_s"]),
           "--receive-threads", str(args.receive_threads), "--receive-max", str(durations["receive_max_s"])]
    limit = (2 * durations["warmup_s"] + durations["send_s"] * len(args.inflight) + durations["receive_max_s"]
             + 180)
    with (workdir / "client.stderr").open("wb") as stderr:  # the child holds its own copy
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env={**os.environ, "HOME": str(workdir / "home")})
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    phases: dict[str, dict[str, Any]] = {}
    marks: dict[str, tuple[float, float, float]] = {}  # phase -> (server cpu, client cpu, wall) at its start
    errors: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            kind, phase = line.get("kind"), line.get("phase", "")
            if kind == "window" and line["edge"] == "start":
                marks[phase] = (contender.cpu_s(), proc_cpu_s(proc.pid), time.monotonic())
            elif kind == "window" and line["edge"] == "end":
                server0, client0, wall0 = marks[phase]
                wall = time.monotonic() - wall0
                phases[phase] = dict(server_cpu_s=contender.cpu_s() - server0,
                                     client_cpu_s=proc_cpu_s(proc.pid) - client0, window_s=wall)
            elif kind == "summary":
                phases[phase].update(line)
                log(f"{contender.name}: {phase}: " + ", ".join(
                    f"{k} {fmt(v) if isinstance(v, float) else v}" for k, v in sorted(line.items())
                    if k not in ("kind", "phase")))
            elif kind == "error":
                errors.append(line)
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or errors:
        tail = (workdir / "client.stderr").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"Client5Bench against {contender.name} exited {proc.returncode}, {errors}:\n{tail}")
    return phases


def run_turn(name: str, scratch: Path, tag: str, durations: dict[str, int], args: argparse.Namespace,
             log: Callable[[str], None]) -> dict[str, Any]:
    """Start one contender alone, drive it through every phase, stop it."""
    workdir = scratch / f"{name}-{tag}"
    log(f"{name} ({tag}): starting")
    t0 = time.monotonic()
    contender = start_contender(name, workdir, ("BenchGrpc", "BenchGrpcWarm"), args)
    boot_s = time.monotonic() - t0
    try:
        log(f"{name} ({tag}): up in {boot_s:.1f} s, gRPC {contender.endpoint}, pids {contender.pids}")
        phases = run_client(contender, workdir / "client", durations, args, log)
    finally:
        contender.stop()
        shutil.rmtree(workdir / "store", ignore_errors=True)
    return {"boot_s": boot_s, "phases": phases}


# -- the table -----------------------------------------------------------------------------------


@dataclass
class Row:
    scenario: str
    metric: str
    values: dict[str, float | None]
    higher: bool | None  # None: not a rate or a cost, no ratio judgement
    goal: float | None = None  # ours / Apache must be >= goal (higher) or <= goal (lower)

    def ratio(self) -> float | None:
        ours, theirs = self.values.get(OURS), self.values.get(APACHE)
        return ours / theirs if ours is not None and theirs else None

    def met(self) -> bool | None:
        r = self.ratio()
        if self.goal is None or r is None:
            return None
        return r >= self.goal if self.higher else r <= self.goal

    def goal_text(self) -> str:
        if self.goal is None:
            return ""
        return f"{'>=' if self.higher else '<='} {self.goal}"


def figures(turn: dict[str, Any], inflight: Sequence[int]) -> dict[str, float]:
    """One turn's phases as named figures (rates, latencies, CPU per message, core shares)."""
    out: dict[str, float] = {}
    for n in inflight:
        p = turn["phases"][f"send-{n}"]
        key = f"send-{n}"
        out |= {f"{key}/tps": p["tps"], f"{key}/p50": p["p50_ms"], f"{key}/p99": p["p99_ms"],
                f"{key}/failed": p["failed"], f"{key}/cpu_us": 1e6 * p["server_cpu_s"] / max(p["sent"], 1),
                f"{key}/server_busy": p["server_cpu_s"] / p["window_s"],
                f"{key}/client_busy": p["client_cpu_s"] / p["window_s"]}
    r = turn["phases"]["receive"]
    out |= {"receive/tps": r["tps"], "receive/acked": r["acked"], "receive/expected": r["expected"],
            "receive/failed": r["failed"], "receive/cpu_us": 1e6 * r["server_cpu_s"] / max(r["acked"], 1),
            "receive/server_busy": r["server_cpu_s"] / r["window_s"],
            "receive/client_busy": r["client_cpu_s"] / r["window_s"]}
    return out


#: issue 26's goal for sends (the largest window) and for receive + ack: three times the proxy's rate
THROUGHPUT_GOAL = 3.0


def build_rows(turns: dict[str, list[dict[str, Any]]], inflight: Sequence[int]) -> list[Row]:
    """The table's rows; each value is the median of a contender's rounds."""
    per: dict[str, dict[str, float]] = {}
    for name, rounds in turns.items():
        figs = [figures(t, inflight) for t in rounds]
        per[name] = {k: statistics.median(f[k] for f in figs) for k in figs[0]}

    def values(key: str) -> dict[str, float | None]:
        return {c: per[c][key] if c in per else None for c in CONTENDERS}

    rows: list[Row] = []
    top = max(inflight)
    for n in inflight:
        scen = f"send 1 KiB, {n} in flight"
        rows += [Row(scen, "send TPS", values(f"send-{n}/tps"), True, THROUGHPUT_GOAL if n == top else None),
                 Row(scen, "send p50 ms", values(f"send-{n}/p50"), False),
                 Row(scen, "send p99 ms", values(f"send-{n}/p99"), False, 1.0),
                 Row(scen, "server CPU us per sent msg", values(f"send-{n}/cpu_us"), False),
                 Row(scen, "server core busy", values(f"send-{n}/server_busy"), None),
                 Row(scen, "client core busy", values(f"send-{n}/client_busy"), None)]
        if any(v for v in values(f"send-{n}/failed").values()):
            rows.append(Row(scen, "failed sends", values(f"send-{n}/failed"), None))
    scen = "receive 32 + ack, the timed sends' backlog"
    rows += [Row(scen, "messages acked", values("receive/acked"), None),
             Row(scen, "receive+ack TPS", values("receive/tps"), True, THROUGHPUT_GOAL),
             Row(scen, "server CPU us per acked msg", values("receive/cpu_us"), False),
             Row(scen, "server core busy", values("receive/server_busy"), None),
             Row(scen, "client core busy", values("receive/client_busy"), None)]
    if any(v for v in values("receive/failed").values()):
        rows.append(Row(scen, "failed receives/acks", values("receive/failed"), None))
    return rows


def render_table(rows: Sequence[Row]) -> str:
    header = ["scenario", "metric", "rocketstore", "Apache 5.3.3 proxy (local)", "ours / Apache", "goal", "met"]
    cells = []
    for r in rows:
        met = r.met()
        cells.append([r.scenario, r.metric, fmt(r.values[OURS]), fmt(r.values[APACHE]),
                      fmt(r.ratio()) if r.higher is not None else "", r.goal_text(),
                      "" if met is None else ("yes" if met else "no")])
    return doc_blocks.markdown_table(header, cells, right=range(2, 5))


def setup_lines(result: dict[str, Any]) -> list[str]:
    s = result["setup"]
    return [
        f"Profile {s['profile']}: {s['warmup_s']} s warm-up (sends, then receive + ack of them), then "
        f"{s['send_s']} s of asynchronous sends of {s['body_size']} B bodies per in-flight window "
        f"({', '.join(map(str, s['inflight']))}), then receive (32 per call) + ack of the timed sends' "
        f"backlog from {s['receive_threads']} threads; topics of {QUEUES} queues created up front; "
        f"{s['rounds']} round(s), medians; each server alone on a fresh store, ASYNC_FLUSH, commitlog "
        f"segments of {s['segment']:,} B.",
        f"rocketstore: Python {s['python']}, hot path `{s['hot_path'][0]}`, gRPC v2 on its event loop"
        + "".join(f", {k}={v}" for k, v in s["ours_env"].items()) + ". "
        f"Apache RocketMQ {APACHE_VERSION}: `ProxyStartup -pm local` (broker inside the proxy JVM, "
        f"-Xms/-Xmx {s['heap']}, G1) and its name server (-Xms/-Xmx {java_rocketmq.DEFAULT_HEAP}); "
        "CPU per message counts both JVMs. Client: the Java 5.x client rocketmq-client-java "
        f"{CLIENT5_VERSION} (-Xmx{CLIENT_HEAP}).",
        f"Servers `taskset -c {BROKER_CPU}`, client `taskset -c {CLIENT_CPU}`. Load average "
        f"{s['loadavg_start'][0]} at the start, {s['loadavg_end'][0]} at the end; "
        f"{s['total_wall_s'] / 60:.1f} minutes in all; CPU busy/steal " + ", ".join(
            f"{name} {v['busy']:.0%}/{v['steal']:.0%}" for name, v in s["cpu_shares"].items()) + ". "
        "\"core busy\": CPU seconds of that side per second of the phase (1.0 = one core saturated). "
        + doc_blocks.interpreter_probe_text(s["interpreter_ns"]),
    ]


def write_doc(path: Path, result: dict[str, Any]) -> None:
    body = doc_blocks.generated_body(textwrap.fill(" ".join(setup_lines(result)), 100, break_on_hyphens=False),
                                       render_table(result["rows"]))
    doc_blocks.replace_section(path, DOC_SECTION, body)


# -- profiling -----------------------------------------------------------------------------------


def run_profile(args: argparse.Namespace, durations: dict[str, int], scratch: Path,
                log: Callable[[str], None]) -> None:
    """Our broker under py-spy (--gil: where the interpreter's CPU goes) with the same load."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).is_file():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    prefix = Path(args.profile).resolve()
    raw = prefix.with_suffix(".txt")
    wrap = [pyspy, "record", "--format", "raw", "-o", str(raw), "--rate", "200", "--gil", "--nonblocking", "--"]
    contender = start_contender(OURS, scratch / "profile", ("BenchGrpc", "BenchGrpcWarm"), args, wrap=wrap)
    try:
        phases = run_client(contender, scratch / "profile" / "client", durations, args, log)
    finally:
        contender.stop()
    print(json.dumps(phases, indent=1))
    print(f"collapsed stacks {raw}\n")
    print(summarize_collapsed(raw, top=40))


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 s send windows, 2 s warm-up: a smoke run")
    ap.add_argument("--seconds", type=int, help="seconds per timed send window (default 15, --quick 3)")
    ap.add_argument("--inflight", default="1,32", help="outstanding sends per window (default 1,32)")
    ap.add_argument("--receive-threads", type=int, default=8, help="receiving threads (default 8)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds, alternating the order (medians; default 1)")
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help=f"default {','.join(CONTENDERS)}")
    ap.add_argument("--segment", type=int, default=GiB, help="mappedFileSizeCommitLog of both (1 GiB)")
    ap.add_argument("--heap", default="1g", help="-Xms/-Xmx of Apache's proxy JVM (1g; it holds the broker too)")
    ap.add_argument("--ours-env", metavar="KEY=VALUE", action="append", default=[],
                    help="an environment variable for our broker (e.g. ROCKETSTORE_UVLOOP=0), repeatable")
    doc_blocks.add_output_arguments(ap, DOC_SECTION, "logs")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy our broker under the same load instead")
    args = ap.parse_args()
    args.inflight = [int(t) for t in args.inflight.split(",") if t.strip()]
    if any("=" not in kv for kv in args.ours_env):
        raise SystemExit("--ours-env takes KEY=VALUE")
    args.ours_env = [tuple(kv.split("=", 1)) for kv in args.ours_env]
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    if not contenders or any(c not in CONTENDERS for c in contenders):
        raise SystemExit(f"--contenders: choose among {', '.join(CONTENDERS)}")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the servers and the client are pinned to separate cores: 2 cores needed")
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)  # before a long run, not after it
    durations = dict(PROFILES["quick" if args.quick else "default"])
    if args.seconds:
        durations["send_s"] = args.seconds
    build_client()
    if APACHE in contenders and not args.profile:
        java_rocketmq.build_anchor(APACHE_VERSION)  # the name server's classpath
        java_rocketmq.build_proxy_anchor()
    t_start = time.monotonic()
    cpu_start = cpu_times()
    loadavg_start = tuple(round(x, 2) for x in os.getloadavg())
    interpreter_ns = doc_blocks.interpreter_probe_ns()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t_start:6.1f}s {msg}", file=sys.stderr, flush=True)

    turns: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
    with doc_blocks.scratch_dir(args, "grpcbench-") as scratch:
        if args.profile:
            run_profile(args, durations, scratch, log)
            return
        for rnd in range(args.rounds):
            order = contenders if rnd % 2 == 0 else contenders[::-1]
            for name in order:
                turns[name].append(run_turn(name, scratch, f"round{rnd + 1}", durations, args, log))
    result: dict[str, Any] = {
        "setup": dict(profile="quick" if args.quick else "default", **durations, body_size=BODY_SIZE,
                      inflight=args.inflight, receive_threads=args.receive_threads, rounds=args.rounds,
                      segment=args.segment, heap=args.heap, python=sys.version.split()[0],
                      hot_path=hot_path(dict(args.ours_env)), ours_env=dict(args.ours_env), loadavg_start=loadavg_start,
                      interpreter_ns=interpreter_ns,
                      loadavg_end=tuple(round(x, 2) for x in os.getloadavg()),
                      total_wall_s=time.monotonic() - t_start, cpu_shares=steal_share(cpu_start, cpu_times())),
        "turns": turns,
        "rows": build_rows(turns, args.inflight),
    }
    print()
    print("\n".join(setup_lines(result)))
    print()
    print(render_table(result["rows"]))
    if args.doc is not None:
        write_doc(args.doc, result)
        print(f"\nrewrote the bench:{DOC_SECTION} block of {args.doc}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result, "rows": [dict(vars(r), ratio=r.ratio(), met=r.met()) for r in result["rows"]]},
                      f, indent=2)


if __name__ == "__main__":
    main()
