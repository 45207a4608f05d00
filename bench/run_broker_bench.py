#!/usr/bin/env python3
"""Broker benchmark: RocketStore's broker against Apache RocketMQ 4.9.7 and 5.3.3, same machine, same run.

    python3 bench/run_broker_bench.py [--quick] [--doc docs/benchmarks.md] [--json OUT] [--dir D] [--seconds N]
                                      [--rounds 3] [--backlog 1000000] [--threads 1,8,32]
                                      [--flush ASYNC_FLUSH,SYNC_FLUSH] [--pinning pinned,unpinned]
                                      [--brokers rocketstore,...] [--segment BYTES] [--heap 512m] [--keep]
    python3 bench/run_broker_bench.py --profile OUT_PREFIX [--seconds N] [--threads 8]

Four brokers ("contenders") take turns: ours in its default mode (the native hot path when the
extension is built), ours with ``ROCKETSTORE_NATIVE=0`` (the pure-Python reference, so the
native gain shows; without the extension both rows measure the same code), and Apache
RocketMQ's own name server and broker at 4.9.7 and at 5.3.3 (5.x's broker alone, without the
proxy: its remoting port serves the 4.x client as 4.9.7 does). A section is one pinning mode
(``pinned``: brokers ``taskset -c 0``, client JVMs ``taskset -c 1``; ``unpinned``: everyone free
on every core) times one flushDiskType; in each section every contender in turn is started on
a fresh store (same broker.conf keys: flushDiskType, mappedFileSizeCommitLog), warmed up, driven
through every scenario and stopped, so no idle broker shares the cores with the one measured
(an idle 5.3.3 broker burns about 6% of a core, 4.9.7 about 2%). The order of the contenders
rotates from section to section. The load generator is one Java client (tests/support/drivers/java4:
rocketmq-client 4.9.8, ``bench-produce``: closed-loop sync sends of random 1 KiB bodies from N
threads, after 3 s of the same untimed in the same JVM; the client's JVM runs with its default JIT
and collector, as a user's does (``BENCH_CLIENT_JVM``); ``bench-fill`` writes a backlog of
``--backlog`` messages (1M) in batches, untimed, which ``bench-consume`` (a push consumer) and then
``bench-pull`` (a DefaultLitePullConsumer, 32 per pull), each in its own group, drain from the
first offset).

Pinned, that client's core runs at 91-100 % in the largest produce run and in the drains (about
24 us of client CPU per send): there it, not the broker, sets the pace. So every contender also
meets a lean load generator, bench/loadgen (Rust, one connection, one thread; built with cargo on
first use): ``lean-produce`` keeps 32 SEND_MESSAGE_V2 requests in flight, written as the 4.x client
writes them (same body size, the client's properties, round robin over the topic's 4 queues),
after the same untimed warm-up; ``lean-pull`` drains the backlog once more, in a third group, 32
per pull, one pull in flight per queue, checking that every queue's offsets run on without a
gap. The Java rows are what a user's client sees; the lean rows are what the broker can do.

A JVM's throughput moves between runs (JIT decisions, GC timing, the page cache, a shared
machine's neighbours) by more than some differences the table is read for, so every section runs
``--rounds`` times (3), the contenders' order reversed every other round, and every figure is the
median of the rounds printed with its [min-max]; ratios are ratios of medians, goals are judged
on medians, and the header says how far each contender's throughput rows moved between rounds.

Resources come from /proc: broker CPU is utime+stime deltas of the server processes around each
driver run (a produce run: from its "timing starts" line, after the client's warm-up), printed
as microseconds per acknowledged message (Apache: name server + broker JVMs; ours: one process
with its embedded name server); peak RSS is each server process's VmHWM when
its turn ends (it includes touched pages of memory-mapped segments on both sides) and peak
RssAnon (memory outside the page cache) is sampled every 100 ms. Pinned, the client's core (CPU 1,
which holds the client JVM alone) is reported busy in % over the 32-sender produce run and over
each drain: near 100 %, the client and not the broker set the rate, and the broker's CPU per
message is the figure that compares the brokers.

In every row the better of the two Apache figures (higher rate, lower latency, CPU or memory) is
bold: that broker is the one to beat, goals are judged against it (for the saturated send rate
against each release, as issue 10 sets them), and only in pinned sections, except memory.

Durations: 15 s per produce run and a 5 s warm-up, a 1M backlog, 3 rounds, so the default command
(3 rounds x 2 pinnings x 2 flush types x 4 contenders) takes about three hours on 2 cores;
``--quick`` (2 s runs, a 20,000-message backlog, one round) about 10 minutes.
``--doc docs/benchmarks.md`` rewrites the block between ``<!-- bench:broker:begin -->`` and
``<!-- bench:broker:end -->`` with the summary table, the command and the date (bench/doc_blocks.py).

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
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

import doc_blocks  # noqa: E402
import java_rocketmq  # noqa: E402
import tool_support  # noqa: E402
from java_rocketmq import ClientDriver, RocketMQAnchor  # noqa: E402
from ports import free_port  # noqa: E402

GiB = 1024 * 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
BROKER_CPU = "0"
CLIENT_CPU = "1"
BODY_SIZE = 1024
CLIENT_HEAP = "1g"
#: The load generator's JVM options beyond its heap: none, so it runs as a user's client does (the
#: default tiered JIT up to C2, the JVM's own choice of collector). ClientDriver's LIGHT_JVM (C1 only,
#: serial collector) saves CPU in short test runs; as the load generator it cost 1.5x the client CPU per
#: send and capped every broker's pinned send rate at what the client's core could produce (on
#: 2026-11-28, 32 pinned senders, two alternating rounds: ours 23,555-23,902 sends/s with it and
#: 34,863-36,844 without; Apache 4.9.7 20,979-21,512 and 28,383-29,088).
BENCH_CLIENT_JVM: tuple[str, ...] = ()

# name -> durations (seconds). warmup: one untimed 8-thread produce per contender and section,
# so the broker's JIT (Apache's) and first segment allocation are not in the first scenario.
# client_warmup: every produce run's senders first run that long untimed in the same client JVM,
# so the timed part sees the client's JIT warm (a fresh JVM compiles its hot paths in the first seconds).
# backlog: messages written (in batches, untimed) for the push and pull consumption scenarios;
# rounds: how many times every section runs, contenders in alternating order (figures: medians).
PROFILES: dict[str, dict[str, int]] = {
    "quick": dict(produce_s=2, warmup_s=1, client_warmup_s=1, consume_max_s=60, backlog=20_000, rounds=1),
    "default": dict(produce_s=15, warmup_s=5, client_warmup_s=3, consume_max_s=300, backlog=1_000_000, rounds=3),
}
FILL_THREADS = 4
#: bench/loadgen, the lean load generator (see its src/main.rs)
LOADGEN_MANIFEST = ROOT / "bench" / "loadgen" / "Cargo.toml"
LEAN_INFLIGHT = 32
#: the queues of a topic the 4.x client creates (DefaultMQProducer's defaultTopicQueueNums)
TOPIC_QUEUES = 4
FILL_MAX_S = 900

OURS = "rocketstore"
OURS_PY = "rocketstore-py"
APACHE_4 = "apache-4.9.7"
APACHE_5 = "apache-5.3.3"
CONTENDERS = (OURS, OURS_PY, APACHE_4, APACHE_5)
APACHE = {APACHE_4: "4.9.7", APACHE_5: "5.3.3"}  # contender -> release
PURE_PYTHON_ENV = {"ROCKETSTORE_NATIVE": "0"}
PINNINGS = ("pinned", "unpinned")
DOC_SECTION = "broker"


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
    """ClientDriver whose JVMs start under ``taskset -c CPU``, with the benchmark's JVM options
    (``BENCH_CLIENT_JVM``) unless told otherwise."""

    pin: str | None = None

    def __init__(self, namesrv: str, workdir: Path, *, jvm_args: Sequence[str] = BENCH_CLIENT_JVM,
                 **kwargs: Any) -> None:
        super().__init__(namesrv, workdir, jvm_args=jvm_args, **kwargs)

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
    env: dict[str, str] = field(default_factory=dict)  # added to this process's environment
    config: dict[str, str] = field(default_factory=dict)  # more broker.conf keys (e.g. grpcListenPort)
    listen_port: int = 0
    namesrv_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _files: list[Any] = field(default_factory=list)

    @property
    def namesrv_addr(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.listen_port}"

    def start(self, timeout: float = 60.0) -> OurBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # listenPort + 1 is the HA port (BrokerStartup's rule): keep it free too
        self.listen_port, self.namesrv_port = free_port(also=(1,)), free_port()
        conf = self.workdir / "broker.conf"
        conf.write_text(
            "brokerClusterName=BenchCluster\nbrokerName=rocketstore-broker-a\nbrokerIP1=127.0.0.1\n"
            f"storePathRootDir={self.workdir / 'store'}\nflushDiskType={self.flush}\n"
            f"listenPort={self.listen_port}\nnamesrvListenPort={self.namesrv_port}\nhttpListenPort=0\n"
            f"mappedFileSizeCommitLog={self.segment}\n" + "".join(f"{k}={v}\n" for k, v in self.config.items()))
        out_path = self.workdir / "broker.stdout"
        out, err = out_path.open("wb"), (self.workdir / "broker.stderr").open("wb")
        self._files = [out, err]
        env = {**os.environ, "HOME": str(self.workdir / "home"), **self.env}
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


class Server(Protocol):
    """What a section needs of a contender's servers, Apache's pair or our one process."""

    workdir: Path

    @property
    def namesrv_addr(self) -> str: ...

    @property
    def broker_addr(self) -> str: ...

    def pids(self) -> dict[str, int]: ...

    def stop(self) -> Any: ...


def hot_path(env: dict[str, str]) -> tuple[str, str]:
    """Which hot path a broker started with ``env`` added runs ("native" or "python") and why, as
    rocketstore.common.native decides it in a fresh interpreter, the way the broker process will."""
    code = "from rocketstore.common import native; print(native.IMPLEMENTATION); print(native.REASON)"
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, cwd=ROOT, capture_output=True,
                          text=True, check=True)
    impl, reason = proc.stdout.strip().split("\n", 1)
    return impl, reason


def start_server(contender: str, workdir: Path, flush: str, pin: str | None, args: argparse.Namespace) -> Server:
    """Start one contender's servers with ``flush`` on a fresh store, pinned to ``pin`` (None: free)."""
    if contender in APACHE:
        anchor = PinnedAnchor(workdir, heap=args.heap, version=APACHE[contender],
                              broker_config={"flushDiskType": flush, "mappedFileSizeCommitLog": str(args.segment)})
        anchor.pin = pin
        anchor.start()
        return anchor
    env = PURE_PYTHON_ENV if contender == OURS_PY else {}
    return OurBroker(workdir, flush, args.segment, pin, env=dict(env)).start()


# -- scenarios -----------------------------------------------------------------------------------


@dataclass
class Side:
    """One broker under test: how to reach it and which processes to measure."""

    name: str
    driver: ClientDriver
    pids: dict[str, int]
    broker_addr: str = ""
    pin: str | None = None

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids.values())

    def measured(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``fn``'s summary, with the broker's CPU seconds over the run and each core's busy share
        (pinned, the client's core says whether the client, not the broker, set the pace)."""
        cpu0, t0, cores0 = self.cpu_s(), time.monotonic(), cpu_times()
        summary = fn()
        summary["server_cpu_s"] = self.cpu_s() - cpu0
        summary["wall_s"] = time.monotonic() - t0
        summary["core_busy"] = {name: v["busy"] for name, v in steal_share(cores0, cpu_times()).items()}
        return summary

    def measured_produce(self, topic: str, threads: int, seconds: int, warmup: int) -> dict[str, Any]:
        """A ``bench-produce`` of ``threads`` senders, ``measured`` from the start of its timed part:
        neither the client JVM's start nor its ``warmup`` seconds of untimed sends are charged to
        the timed sends."""
        run = start_timed_produce(self.driver, topic, threads, seconds, warmup)
        return self.measured(lambda: run.wait(seconds + 120).summary)

    def lean(self, mode: str, *args: str | int, timing: bool = False, timeout: float = 600) -> dict[str, Any]:
        """bench/loadgen ``mode`` against this broker (on the client's core when pinned), ``measured``
        from its "timing starts" line when ``timing`` (after its untimed warm-up), else from its start."""
        stderr = self.driver.workdir / f"loadgen-{mode}.stderr"
        stderr.parent.mkdir(parents=True, exist_ok=True)
        with stderr.open("w") as err:
            proc = subprocess.Popen([*pin_prefix(self.pin), str(loadgen_binary()), mode, "--addr", self.broker_addr,
                                     *map(str, args)], stdout=subprocess.PIPE, stderr=err, text=True)
        deadline = time.monotonic() + 60
        while timing and "timing starts" not in stderr.read_text() and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)

        def finish() -> dict[str, Any]:
            out, _ = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"loadgen {mode} exited {proc.returncode}: {stderr.read_text()[-2000:]}")
            summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
            return summary

        return self.measured(finish)


def start_timed_produce(driver: ClientDriver, topic: str, threads: int, seconds: int,
                        warmup: int) -> java_rocketmq.BackgroundRun:
    """Start a ``bench-produce`` of ``threads`` senders (``warmup`` untimed seconds first, in the same
    JVM) and return once its timed part starts (its "timing starts" line), or once it exited or
    should have started: a caller that counts CPU or samples the brokers from here measures the
    timed sends only, not the JVM's start-up or the warm-up."""
    run = driver.start("bench-produce", "-t", topic, "-w", threads, "-s", BODY_SIZE, "-d", seconds,
                       "--warmup", warmup, heap=CLIENT_HEAP)
    deadline = time.monotonic() + 60 + warmup
    while "timing starts" not in run.stderr_so_far() and run.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return run


@functools.cache
def loadgen_binary() -> Path:
    """bench/loadgen's binary, built (or found up to date) by cargo on first use."""
    return tool_support.cargo_tool_binary(shutil.which("cargo") or "cargo", LOADGEN_MANIFEST, "loadgen")


def warm_up(driver: ClientDriver, seconds: int, tag: str, log: Callable[[str], None]) -> None:
    """An untimed 8-sender produce, so the JIT and the first segment's allocation are not in the
    first measured run; retried once on another topic when it fails."""
    log(f"{tag}: warm-up, 8 threads, {seconds} s")
    try:
        driver.bench_produce("BenchWarmup", threads=8, size=BODY_SIZE, seconds=seconds, heap=CLIENT_HEAP)
    except java_rocketmq.DriverError as exc:
        # seen with Apache 5.3.3: its auto-created warm-up topic never got a route, so the
        # client's first sends failed for the whole run; and with 4.9.7 on an overloaded machine,
        # whose first send timed out; a second warm-up, on a new topic, is what a person would do
        log(f"{tag}: warm-up failed ({str(exc)[:200]}); warming up again on another topic")
        driver.bench_produce("BenchWarmupAgain", threads=8, size=BODY_SIZE, seconds=seconds, heap=CLIENT_HEAP)


def run_contender(contender: str, pinning: str, flush: str, args: argparse.Namespace, durations: dict[str, int],
                  scratch: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """One contender's turn in a section: start it alone, warm it up, every scenario, stop it."""
    tag = f"[{pinning} {flush}] {contender}"
    pinned = pinning == "pinned"
    workdir = scratch / f"{contender}-{pinning}-{flush}"
    log(f"{tag}: starting")
    t0 = time.monotonic()
    server = start_server(contender, workdir, flush, BROKER_CPU if pinned else None, args)
    out: dict[str, Any] = {"boot_s": time.monotonic() - t0, "scenarios": {}}
    try:
        pids = server.pids()
        sampler = AnonSampler(pids)
        driver = PinnedDriver(server.namesrv_addr, scratch / f"client-{contender}-{pinning}-{flush}")
        driver.pin = CLIENT_CPU if pinned else None
        side = Side(contender, driver, pids, server.broker_addr, driver.pin)
        warm_up(driver, durations["warmup_s"], tag, log)
        for threads in args.threads:
            log(f"{tag}: produce, {threads} threads, {durations['produce_s']} s")
            out["scenarios"][f"produce-{threads}"] = side.measured_produce(
                f"BenchProduce{threads}", threads, durations["produce_s"], durations["client_warmup_s"])
        log(f"{tag}: lean-produce, {LEAN_INFLIGHT} in flight, {durations['produce_s']} s")
        out["scenarios"]["lean-produce"] = side.lean(
            "produce", "--topic", "BenchLean", "--inflight", LEAN_INFLIGHT, "--queues", TOPIC_QUEUES,
            "--size", BODY_SIZE, "--seconds", durations["produce_s"], "--warmup", durations["client_warmup_s"],
            timing=True)
        log(f"{tag}: write a backlog of {durations['backlog']:,} messages (batches of 32, {FILL_THREADS} threads)")
        out["fill"] = side.measured(functools.partial(
            driver.bench_fill, "BenchBacklog", durations["backlog"], size=BODY_SIZE, threads=FILL_THREADS,
            seconds=FILL_MAX_S, heap=CLIENT_HEAP))
        backlog = int(out["fill"]["sent"])  # what the consumers can find: short of the goal if batches failed
        # the push consumer first, then the pull consumer in another group over the same backlog
        for key, consume in (("consume-push", driver.bench_consume), ("consume-pull", driver.bench_pull)):
            log(f"{tag}: {key}, a backlog of {backlog:,} messages")
            out["scenarios"][key] = side.measured(functools.partial(
                consume, "BenchBacklog", f"bench-{key}", seconds=durations["consume_max_s"], stop_after=backlog,
                heap=CLIENT_HEAP))
        log(f"{tag}: lean-pull, a backlog of {backlog:,} messages")
        out["scenarios"]["lean-pull"] = side.lean(
            "pull", "--topic", "BenchBacklog", "--group", "bench-lean-pull", "--queues", TOPIC_QUEUES,
            "--stop-after", backlog, "--max-seconds", durations["consume_max_s"])
        if out["scenarios"]["lean-pull"]["gaps"]:
            raise RuntimeError(f"{tag}: lean-pull found queue offsets that did not run on: "
                               f"{out['scenarios']['lean-pull']}")
        peak_anon = sampler.stop()
        out["memory_mb"] = {
            name: {"vm_hwm": proc_status_kb(pid, "VmHWM") / 1024, "vm_rss": proc_status_kb(pid, "VmRSS") / 1024,
                   "peak_rss_anon": peak_anon[name] / 1024}
            for name, pid in pids.items()}
        out["cpu_total_s"] = {name: proc_cpu_s(pid) for name, pid in pids.items()}
    finally:
        out["exit_codes"] = server.stop()
        if not args.keep:
            shutil.rmtree(workdir / "store", ignore_errors=True)
    return out


def turn_order(contenders: Sequence[str], section: int, round_no: int) -> list[str]:
    """The order of the contenders in one section of one round: rotated by one from section to
    section, and reversed every other round, so that over two rounds each contender runs both
    early and late while the machine's background load and the page cache drift."""
    shift = section % len(contenders)
    order = [*contenders[shift:], *contenders[:shift]]
    return order[::-1] if round_no % 2 else order


def run_sections(args: argparse.Namespace, durations: dict[str, int], scratch: Path,
                 log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every pinning x flush section, ``args.rounds`` times (see :func:`turn_order`)."""
    sections = []
    for round_no in range(args.rounds):
        for i, (pinning, flush) in enumerate((p, f) for p in args.pinning for f in args.flush):
            order = turn_order(args.brokers, i, round_no)
            (scratch / f"round{round_no}").mkdir(exist_ok=True)
            log(f"round {round_no + 1}/{args.rounds}, {pinning} {flush}: {', '.join(order)}")
            sections.append({"round": round_no, "pinning": pinning, "flush": flush, "order": order,
                             "contenders": {c: run_contender(c, pinning, flush, args, durations,
                                                             scratch / f"round{round_no}", log)
                                            for c in order}})
    return sections


# -- report --------------------------------------------------------------------------------------


@dataclass
class Goal:
    """A goal for our default-mode figure: ``text`` as printed, ``met(ours, ratios)`` judges it.

    ``ratios`` maps "best" (against the one to beat) and each Apache contender to ours / theirs.
    """

    text: str
    met: Callable[[float, dict[str, float]], bool]


def ratio_goal(text: str, good: Callable[[float], bool]) -> Goal:
    """A goal on the ratio to the one to beat alone."""
    return Goal(text, lambda ours, r: good(r["best"]))


@dataclass
class Row:
    """One figure of every contender in one section; ``higher``: whether a larger figure is better
    (None: neither, e.g. a backlog's size, so no broker is the one to beat).

    ``samples`` holds a contender's figure from every round; ``values`` is their median, the
    figure that is compared, divided and judged: one slow round (a JIT deoptimisation, a
    neighbour's burst) moves a median of three much less than a mean or a single run.
    """

    run: str
    scenario: str
    metric: str
    samples: dict[str, list[float]]
    higher: bool | None
    goal: Goal | None = None
    in_doc: bool = True
    values: dict[str, float | None] = field(init=False)

    def __post_init__(self) -> None:
        self.values = {c: statistics.median(v) if v else None for c, v in self.samples.items()}

    def spread(self, contender: str) -> float | None:
        """(max - min) / median of a contender's rounds: how far this figure moved between runs."""
        got, mid = self.samples.get(contender) or [], self.values.get(contender)
        return (max(got) - min(got)) / abs(mid) if len(got) > 1 and mid else None

    def to_beat(self) -> str | None:
        """The Apache contender with the better figure in this row (None when neither ran)."""
        have = [(v, c) for c, v in self.values.items() if c in APACHE and v is not None]
        if not have or self.higher is None:
            return None
        return (max if self.higher else min)(have)[1]

    def ratio(self, other: str | None) -> float | None:
        """Ours / ``other``'s figure; None for an unranked row, whose size is context, not a result."""
        ours, theirs = self.values.get(OURS), self.values.get(other) if other else None
        return ours / theirs if ours is not None and theirs and self.higher is not None else None

    def met(self) -> bool | None:
        ours, best = self.values.get(OURS), self.ratio(self.to_beat())
        if self.goal is None or ours is None or best is None:
            return None
        ratios = {"best": best, **{c: r for c in APACHE if (r := self.ratio(c)) is not None}}
        try:
            return self.goal.met(ours, ratios)
        except KeyError:  # the goal names a release that did not run
            return None


# Issue 26's goals apply at saturation (the largest sender count), against the faster Apache
# release (the issue names 4.9.7; the faster of the two is the stricter); the earlier rounds'
# parity goals stay on the smaller counts.
SATURATED_TPS = ratio_goal(">= 2.0", lambda x: x >= 2.0)
UNPINNED_TPS = ratio_goal(">= 1.5", lambda x: x >= 1.5)
SATURATED_P99 = ratio_goal("<= 0.6", lambda x: x <= 0.6)
SATURATED_CPU = Goal("<= 16 us", lambda ours, r: ours <= 16)
AT_LEAST_EQUAL = ratio_goal(">= 1.0", lambda x: x >= 1.0)
AT_MOST_EQUAL = ratio_goal("<= 1.0", lambda x: x <= 1.0)
CONSUME_TPS = ratio_goal(">= 2.0", lambda x: x >= 2.0)
PEAK_RSS_ANON = ratio_goal("<= 0.1", lambda x: x <= 0.1)


def figures(turn: dict[str, Any]) -> dict[str, float]:
    """One contender's turn as flat figures: "produce-N/tps", "consume/cpu_us", "memory/rss", ..."""
    out: dict[str, float] = {}
    for key, s in turn["scenarios"].items():
        sends = key.startswith("produce-") or key == "lean-produce"
        count = s["sent"] if sends else s["consumed"]
        out[f"{key}/tps"] = s["tps"]
        out[f"{key}/count"] = count
        out[f"{key}/cpu_us"] = 1e6 * s["server_cpu_s"] / max(count, 1)
        out[f"{key}/client_core"] = 100 * s.get("core_busy", {}).get(f"cpu{CLIENT_CPU}", float("nan"))
        if sends:
            out.update({f"{key}/p50": s["p50_ms"], f"{key}/p99": s["p99_ms"], f"{key}/failed": s["failed"]})
    mem = turn["memory_mb"]
    out["memory/rss"] = sum(m["vm_hwm"] for m in mem.values())
    out["memory/rss_broker"] = mem.get("apache-broker", mem.get("rocketstore", {})).get("vm_hwm", 0.0)
    out["memory/anon"] = sum(m["peak_rss_anon"] for m in mem.values())
    return out


def build_rows(sections: list[dict[str, Any]]) -> list[Row]:
    """The table: per section (pinning x flush, over all rounds), per scenario and metric, every
    contender's figures from every round."""
    rows: list[Row] = []
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for sec in sections:
        grouped.setdefault((sec["pinning"], sec["flush"]), []).append(sec)
    for (pinning, flush), rounds in grouped.items():
        run = f"{pinning} {flush.split('_')[0]}"
        pinned = pinning == "pinned"
        figs: dict[str, list[dict[str, float]]] = {}
        for sec in rounds:
            for c, turn in sec["contenders"].items():
                figs.setdefault(c, []).append(figures(turn))
        first = next(iter(rounds[0]["contenders"].values()))["scenarios"]
        produce = sorted(int(k.split("-")[1]) for k in first if k.startswith("produce-"))
        # (figure key, scenario, metric, higher is better, goal, goal also unpinned, in the docs/benchmarks.md block)
        spec: list[tuple[str, str, str, bool | None, Goal | None, bool, bool]] = []
        for threads in produce:
            key, top = f"produce-{threads}", threads == produce[-1]
            scen = f"produce 1 KiB, {threads} sender{'s' if threads != 1 else ''}"
            tps_goal = (SATURATED_TPS if pinned else UNPINNED_TPS) if top else AT_LEAST_EQUAL
            spec += [
                (f"{key}/tps", scen, "send TPS", True, tps_goal, top, True),
                (f"{key}/p50", scen, "send p50 ms", False, None, False, False),
                (f"{key}/p99", scen, "send p99 ms", False, SATURATED_P99 if top else AT_MOST_EQUAL, False, True),
                (f"{key}/cpu_us", scen, "broker CPU us per acked msg", False, SATURATED_CPU if top else None,
                 False, True),
                (f"{key}/client_core", scen, "client's core busy % (pinned: CPU 1 holds the client alone)", None,
                 None, False, pinned and top),
            ]
            if any(f[f"{key}/failed"] for rounds_figs in figs.values() for f in rounds_figs):
                spec.append((f"{key}/failed", scen, "failed sends", False, None, False, True))
        lean = "lean-produce" in first
        if lean:
            scen = f"produce 1 KiB, lean load generator, {LEAN_INFLIGHT} in flight"
            spec += [
                ("lean-produce/tps", scen, "send TPS", True, SATURATED_TPS if pinned else UNPINNED_TPS, True, True),
                ("lean-produce/p99", scen, "send p99 ms", False, SATURATED_P99, False, True),
                ("lean-produce/cpu_us", scen, "broker CPU us per acked msg", False, SATURATED_CPU, False, True),
                ("lean-produce/client_core", scen, "client's core busy % (pinned: CPU 1 holds the client alone)",
                 None, None, False, pinned),
            ]
            if any(f["lean-produce/failed"] for rounds_figs in figs.values() for f in rounds_figs):
                spec.append(("lean-produce/failed", scen, "failed sends", False, None, False, True))
        for how in ("push", "pull"):
            key, scen = f"consume-{how}", f"consume a backlog, {how} consumer"
            spec += [
                (f"{key}/count", scen, "messages consumed", None, None, False, True),
                (f"{key}/tps", scen, "consume TPS", True, CONSUME_TPS, False, True),
                (f"{key}/cpu_us", scen, "broker CPU us per consumed msg", False, None, False, True),
                (f"{key}/client_core", scen, "client's core busy % (pinned: CPU 1 holds the client alone)", None,
                 None, False, pinned),
            ]
        if lean:
            scen = "consume a backlog, lean load generator, 32 per pull"
            spec += [
                ("lean-pull/count", scen, "messages consumed", None, None, False, True),
                ("lean-pull/tps", scen, "consume TPS", True, CONSUME_TPS, False, True),
                ("lean-pull/cpu_us", scen, "broker CPU us per consumed msg", False, None, False, True),
                ("lean-pull/client_core", scen, "client's core busy % (pinned: CPU 1 holds the client alone)", None,
                 None, False, pinned),
            ]
        spec += [
            ("memory/rss", "memory, whole turn", "peak RSS MB (VmHWM; Apache = name server + broker)", False,
             None, True, True),
            ("memory/rss_broker", "memory, whole turn", "peak RSS MB, Apache broker JVM only", False, None, False,
             False),
            ("memory/anon", "memory, whole turn", "peak RssAnon MB (sampled 100 ms; Apache = name server + broker)",
             False, PEAK_RSS_ANON, True, True),
        ]
        for key, scen, metric, higher, goal, always, in_doc in spec:
            rows.append(Row(run, scen, metric, {c: [f[key] for f in figs.get(c, [])] for c in CONTENDERS},
                            higher, goal if pinned or always else None, in_doc))
    return rows


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}"


def bold(text: str, on: bool) -> str:
    return f"**{text}**" if on and text else text


def fmt_spread(samples: Sequence[float]) -> str:
    """A contender's figure over the rounds: the median, then [min-max] when the rounds differed."""
    if not samples:
        return ""
    mid, low, high = fmt(statistics.median(samples)), fmt(min(samples)), fmt(max(samples))
    return mid if low == high else f"{mid} [{low}-{high}]"


def render_table(rows: Sequence[Row]) -> str:
    """Markdown: every contender's figure (median [min-max] over the rounds), ours as a ratio of medians
    to each other contender, the goal (judged on medians) and whether it is met."""
    header = ["run", "scenario", "metric", "rocketstore", "rocketstore pure Python", "Apache 4.9.7", "Apache 5.3.3",
              "ours / pure Python", "ours / 4.9.7", "ours / 5.3.3", "goal (vs bold)", "met"]
    cells = []
    for r in rows:
        best = r.to_beat()
        met = r.met()
        cells.append([
            r.run, r.scenario, r.metric, fmt_spread(r.samples[OURS]), fmt_spread(r.samples[OURS_PY]),
            bold(fmt_spread(r.samples[APACHE_4]), best == APACHE_4),
            bold(fmt_spread(r.samples[APACHE_5]), best == APACHE_5),
            fmt(r.ratio(OURS_PY)), bold(fmt(r.ratio(APACHE_4)), best == APACHE_4),
            bold(fmt(r.ratio(APACHE_5)), best == APACHE_5), r.goal.text if r.goal else "",
            "" if met is None else ("yes" if met else "no")])
    return doc_blocks.markdown_table(header, cells, right=range(3, 10))


def setup_lines(result: dict[str, Any]) -> list[str]:
    """What was run and on what, for the header of the printed table and of the docs/benchmarks.md block."""
    s = result["setup"]
    faster = collections.Counter(r.to_beat() for r in result["rows"] if r.metric == "send TPS")
    won = ", ".join(f"{APACHE[c]} in {n}" for c, n in faster.most_common() if c)
    same = (" (the extension is absent, so both rocketstore columns ran the same pure-Python code)"
            if s["hot_path"][OURS][0] == "python" else "")
    return [
        caveat(s) + f"Profile {s['profile']}: {s['rounds']} round(s); {s['produce_s']} s per produce run after a "
        f"{s['warmup_s']} s warm-up (and {s['client_warmup_s']} s untimed in the same client JVM before each), "
        f"{s['body_size']} B bodies, commitlog segments of {s['segment']:,} B on every "
        f"broker; each contender runs alone, on a fresh store, in turn (order rotated per section and reversed "
        f"every other round). Consumption: a backlog of {s['backlog']:,} messages written in batches, then "
        f"drained from the first offset by a push consumer and then by a pull consumer (DefaultLitePullConsumer, "
        f"32 per pull), each in its own group. Lean rows: bench/loadgen, one connection and one thread, "
        f"{LEAN_INFLIGHT} sends in flight, and a drain of the same backlog in a third group, 32 per pull.",
        spread_line(result["rows"], s["rounds"]),
        f"rocketstore: Python {s['python']}, hot path `{s['hot_path'][OURS][0]}`; the pure-Python column ran "
        f"with ROCKETSTORE_NATIVE=0 (`{s['hot_path'][OURS_PY][0]}`){same}. Apache RocketMQ "
        f"{' and '.join(s['apache_versions'])} (5.x broker without proxy): name server and broker JVMs with "
        f"-Xms/-Xmx {s['heap']} each, G1. Client: rocketmq-client {s['client_version']} (-Xmx{s['client_heap']}, "
        f"{' '.join(s['client_jvm']) or 'no other JVM option: the default JIT and collector'}).",
        f"Pinned: brokers `taskset -c {BROKER_CPU}`, client JVMs `taskset -c {CLIENT_CPU}`; unpinned: everyone on "
        f"all {s['nproc']} cores. Load average {s['loadavg_start'][0]} at the start, {s['loadavg_end'][0]} at the "
        f"end; {s['total_wall_s'] / 60:.1f} minutes in all; CPU busy/steal " + ", ".join(
            f"{name} {v['busy']:.0%}/{v['steal']:.0%}" for name, v in s["cpu_shares"].items()) + ". "
        + doc_blocks.interpreter_probe_text(s["interpreter_ns"]),
        "Bold: the better Apache figure in the row, the one to beat; goals are judged against it "
        "(pinned sections; unpinned, the largest sender count's send TPS and memory). "
        f"The faster Apache by send TPS: {won or 'n/a'} runs.",
    ]


def caveat(setup: dict[str, Any]) -> str:
    """The sentence a smoke run or a loaded machine puts first, so that nobody quotes its figures."""
    parts = []
    if setup["profile"] == "quick":
        parts.append("A --quick smoke run: its figures show that the command works and are not results; "
                     "regenerate the block with the full command on a quiet machine.")
    # the load at the start only: by the end the run's own brokers and client JVMs (32 sender
    # threads) hold the load above the core count on a machine that runs nothing else
    if setup["loadavg_start"][0] > (setup["nproc"] or 1):
        parts.append(f"The load average passed the {setup['nproc']} cores before the run: other work shared the "
                     "machine, so the brokers and the load generator got less than the cores they were given.")
    return " ".join(parts) + (" " if parts else "")


def spread_line(rows: Sequence[Row], rounds: int) -> str:
    """How far the throughput figures moved between rounds, per contender: the sentence that says
    how much a difference in the table can be trusted."""
    if rounds < 2:
        return ("One round: no spread is measured; a difference under about 20% between two such runs "
                "is within what the JVM and a shared machine move on their own (--rounds 3 measures it).")
    parts = []
    for c in CONTENDERS:
        spreads = [x for r in rows if r.metric in ("send TPS", "consume TPS") and (x := r.spread(c)) is not None]
        if spreads:
            parts.append(f"{c} median {statistics.median(spreads):.0%}, largest {max(spreads):.0%}")
    return (f"Each cell is the median of {rounds} rounds with [min-max]; ratios are ratios of medians and goals "
            "are judged on medians. Spread of the throughput rows between rounds, (max - min) / median: "
            + "; ".join(parts) + ".")


def print_report(result: dict[str, Any]) -> None:
    print()
    print("\n".join(setup_lines(result)))
    for c, (impl, reason) in result["setup"]["hot_path"].items():
        print(f"{c}: {impl}: {reason}")
    print()
    print(render_table(result["rows"]))


def write_doc(path: Path, result: dict[str, Any]) -> None:
    """Rewrite the broker block of ``path`` (docs/benchmarks.md): the command, the date, the set-up and
    the summary rows."""
    body = doc_blocks.generated_body(textwrap.fill(" ".join(setup_lines(result)), 100, break_on_hyphens=False),
                                       render_table([r for r in result["rows"] if r.in_doc]))
    doc_blocks.replace_section(path, DOC_SECTION, body)
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
    pinned = args.pinning[0] == "pinned"
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
                         BROKER_CPU if pinned else None, wrap=wrap)
        ours.start()
        try:
            driver = PinnedDriver(ours.namesrv_addr, scratch / f"profile-client-{fmt_name}")
            driver.pin = CLIENT_CPU if pinned else None
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


def row_json(r: Row) -> dict[str, Any]:
    return dict(run=r.run, scenario=r.scenario, metric=r.metric, values=r.values, samples=r.samples,
                spreads={c: r.spread(c) for c in CONTENDERS}, higher_is_better=r.higher,
                to_beat=r.to_beat(), ratios={c: r.ratio(c) for c in CONTENDERS if c != OURS},
                goal=r.goal.text if r.goal else None, met=r.met())


def csv_choice(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """A comma-separated option value, checked against ``allowed``."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise SystemExit(f"{what}: {', '.join(bad) or 'nothing given'} not among {', '.join(allowed)}")
    return items


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="2 s runs, a 20,000-message backlog, one round (about 10 minutes in all): a smoke run")
    ap.add_argument("--seconds", type=int, help="seconds per produce run (default 15, --quick 2)")
    ap.add_argument("--rounds", type=int, help="times every section runs, the contenders' order reversed every "
                    "other round; each figure is the median (default 3, --quick 1)")
    ap.add_argument("--backlog", type=int, help="messages in the backlog the push and pull consumers drain "
                    "(default 1,000,000, --quick 20,000)")
    ap.add_argument("--threads", default="1,8,32", help="sender thread counts (default 1,8,32)")
    ap.add_argument("--flush", default="ASYNC_FLUSH,SYNC_FLUSH", help="flushDiskType values to run")
    ap.add_argument("--pinning", default=",".join(PINNINGS),
                    help="pinned (brokers on CPU 0, clients on CPU 1) and/or unpinned (default both)")
    ap.add_argument("--brokers", default=",".join(CONTENDERS),
                    help=f"contenders to run (default {','.join(CONTENDERS)})")
    ap.add_argument("--segment", type=int, default=GiB, help="mappedFileSizeCommitLog of every broker (1 GiB)")
    ap.add_argument("--heap", default=java_rocketmq.DEFAULT_HEAP,
                    help=f"-Xms/-Xmx of Apache RocketMQ's name server and broker ({java_rocketmq.DEFAULT_HEAP})")
    doc_blocks.add_output_arguments(ap, DOC_SECTION, "stores, logs")
    ap.add_argument("--profile", metavar="PREFIX", help="py-spy our broker under produce load instead")
    args = ap.parse_args()
    args.threads = [int(t) for t in args.threads.split(",")]
    args.flush = csv_choice(args.flush, ("ASYNC_FLUSH", "SYNC_FLUSH"), "--flush")
    args.pinning = csv_choice(args.pinning, PINNINGS, "--pinning")
    args.brokers = csv_choice(args.brokers, CONTENDERS, "--brokers")
    if "pinned" in args.pinning and (os.cpu_count() or 1) < 2:
        raise SystemExit("pinned runs need 2 cores: pass --pinning unpinned")
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)  # before a long run, not after it
    durations = dict(PROFILES["quick" if args.quick else "default"])
    if args.seconds:
        durations["produce_s"] = args.seconds
    if args.backlog:
        durations["backlog"] = args.backlog
    args.rounds = args.rounds or durations["rounds"]
    java_rocketmq.build_driver()
    loadgen_binary()  # before the first turn, not inside its measurements
    for contender in args.brokers:
        if contender in APACHE:
            java_rocketmq.build_anchor(APACHE[contender])
    t_start = time.monotonic()
    cpu_start = cpu_times()
    loadavg_start = tuple(round(x, 2) for x in os.getloadavg())
    interpreter_ns = doc_blocks.interpreter_probe_ns()

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t_start:6.1f}s {msg}", file=sys.stderr, flush=True)

    with doc_blocks.scratch_dir(args, "brokerbench-") as scratch:
        if args.profile:
            run_profile(args, durations, scratch)
            return
        sections = run_sections(args, durations, scratch, log)
    result: dict[str, Any] = {
        "setup": dict(profile="quick" if args.quick else "default", produce_s=durations["produce_s"],
                      warmup_s=durations["warmup_s"], client_warmup_s=durations["client_warmup_s"],
                      client_jvm=list(BENCH_CLIENT_JVM), consume_max_s=durations["consume_max_s"],
                      backlog=durations["backlog"], rounds=args.rounds,
                      body_size=BODY_SIZE, segment=args.segment, heap=args.heap,
                      apache_versions=[APACHE[c] for c in CONTENDERS if c in APACHE and c in args.brokers],
                      client_version=java_rocketmq.CLIENT_VERSION, client_heap=CLIENT_HEAP,
                      python=sys.version.split()[0], hot_path={OURS: hot_path({}), OURS_PY: hot_path(PURE_PYTHON_ENV)},
                      pinning=args.pinning, nproc=os.cpu_count(), loadavg_start=loadavg_start,
                      interpreter_ns=interpreter_ns,
                      loadavg_end=tuple(round(x, 2) for x in os.getloadavg()),
                      total_wall_s=time.monotonic() - t_start, threads=args.threads,
                      cpu_shares=steal_share(cpu_start, cpu_times())),
        "sections": sections,
        "rows": build_rows(sections),
    }
    print_report(result)
    if args.doc is not None:
        write_doc(args.doc, result)
        print(f"\nrewrote the bench:{DOC_SECTION} block of {args.doc}", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result, "rows": [row_json(r) for r in result["rows"]]}, f, indent=2)


if __name__ == "__main__":
    main()
