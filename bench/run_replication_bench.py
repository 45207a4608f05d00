#!/usr/bin/env python3
"""Replication benchmark: a RocketStore master/slave pair against Apache RocketMQ 4.9.7's, same run.

    python3 bench/run_replication_bench.py [--quick] [--rounds N] [--seconds N] [--threads N]
                                           [--modes SYNC_MASTER,ASYNC_MASTER] [--backlog-mib N]
                                           [--doc docs/benchmarks.md] [--json OUT] [--dir D] [--keep]

Two contenders take turns, in alternating order from round to round: our pair (two
``rocketstore broker`` processes sharing a brokerName, the slave registering with the master's
embedded name server and learning the master's HA address from the registration answer) and
Apache RocketMQ 4.9.7's (name server, master and slave JVMs from Maven Central, heap
``--heap``). Each turn starts a fresh pair, waits until the slave is in sync (a probe send answered
SEND_OK and both CommitLogs at the same offset), warms up, then drives one closed-loop produce run
with the Java 4.x client (``bench-produce``: sync sends of 1 KiB bodies from ``--threads`` threads)
and stops the pair. Both brokers of a pair run ``taskset -c 0``, the client ``taskset -c 1``.

Figures per mode (SYNC_MASTER: a send is acknowledged once the slave has it; ASYNC_MASTER: once
the master has it):

* produce TPS and p99 latency, as the client measures them;
* broker CPU per acknowledged message, master and slave apart (utime+stime from /proc);
* the slave's lag during the run: master commitLogMaxOffset minus slave commitLogMaxOffset, both
  read with GET_BROKER_RUNTIME_INFO every 200 ms (what mqadmin brokerStatus shows; both brokers
  answer it), as bytes and as seconds of the run's produce rate; and the time the slave needs
  after the last send to reach the master's end.

Then the catch-up scenario (ours only, with its anchor): a master store holding ``--backlog-mib``
of CommitLog in one 1 GiB segment is built offline, a master broker starts on it, then an empty
slave starts, master on CPU 0 and slave on CPU 1 as on two machines; the rate is the bytes the
slave appended over the time from its first appended byte to the master's end. The anchor is a
raw copy of the same bytes on the same disk (1 MiB reads and writes, no fsync: the slave does not
fsync per frame either). Each of the two starts right after a write and delete of 1.25x the backlog
(:func:`prime_free_memory`), so both meet the same page cache on a virtual machine that takes
idle free memory back. Goal: ratio >= 0.5. It runs once per round, each with its own backlog and
anchor, and also reports each broker's CPU per MiB over the same span (utime+stime from /proc):
on a busy machine the rates and the anchor move with the load, the CPU per MiB much less.
``--modes ''`` runs the catch-up alone.

Every figure is the median over the rounds with the [min-max] spread beside it. ``--quick``: one
round of 5 s runs and a 256 MiB backlog (about 3 minutes). Default: 3 rounds of 15 s, 1 GiB (about
12 minutes). Run it on a quiet machine: the JVM slows more than we do when the cores are busy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

import doc_blocks
import run_broker_bench as rbb

from rocketstore.client import BrokerAdmin, Producer, SendStatus
from rocketstore.client.remoting_client import RemotingClientError
from rocketstore.common.message import Message
from rocketstore.store.commit_log import MessageBatch
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore

DOC_SECTION = "replication"
OURS, APACHE = "rocketstore", "apache-4.9.7"
GROUP = "bench-group"
MiB = 1024 * 1024
LAG_SAMPLE_S = 0.2
#: untimed sends in the same client JVM before each timed produce run, so its JIT is warm: the
#: broker bench's own setting; CPU and lag count from the timed part's start
CLIENT_WARMUP_S = rbb.PROFILES["default"]["client_warmup_s"]


# -- pairs ---------------------------------------------------------------------------------------


class OurPair:
    """Our master and slave, ``rocketstore broker`` processes pinned to ``pin`` (the slave to
    ``slave_pin`` when given)."""

    def __init__(self, workdir: Path, mode: str, segment: int, pin: str | None,
                 slave_pin: str | None = None) -> None:
        self.master = rbb.OurBroker(workdir / "master", "ASYNC_FLUSH", segment, pin,
                                    config={"brokerName": GROUP, "brokerRole": mode, "grpcListenPort": "0"})
        self.slave: rbb.OurBroker | None = None
        self.workdir, self.segment, self.pin = workdir, segment, pin
        self.slave_pin = pin if slave_pin is None else slave_pin

    def start_master(self) -> None:
        self.master.start()

    def start_slave(self) -> None:
        self.slave = rbb.OurBroker(self.workdir / "slave", "ASYNC_FLUSH", self.segment, self.slave_pin, config={
            "brokerName": GROUP, "brokerRole": "SLAVE", "brokerId": "1", "namesrvListenPort": "0",
            "namesrvAddr": self.master.namesrv_addr, "slaveReadEnable": "true", "grpcListenPort": "0"}).start()

    def start(self) -> OurPair:
        self.start_master()
        self.start_slave()
        return self

    @property
    def namesrv_addr(self) -> str:
        return self.master.namesrv_addr

    @property
    def master_addr(self) -> str:
        return f"127.0.0.1:{self.master.listen_port}"

    @property
    def slave_addr(self) -> str:
        assert self.slave is not None
        return f"127.0.0.1:{self.slave.listen_port}"

    def pids(self) -> dict[str, int]:
        assert self.slave is not None
        return {"master": self.master.broker_pid(), "slave": self.slave.broker_pid()}

    def stop(self) -> None:
        for broker in (self.slave, self.master):
            if broker is not None:
                broker.stop()


class ApachePair:
    """Apache RocketMQ 4.9.7's name server and master (one anchor) and slave (a second anchor,
    registered with the first's name server), all JVMs pinned to ``pin``."""

    def __init__(self, workdir: Path, mode: str, segment: int, pin: str | None, heap: str) -> None:
        common = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": str(segment)}
        self.master = rbb.PinnedAnchor(workdir / "master", heap=heap, version="4.9.7", broker_name=GROUP,
                                       broker_config={**common, "brokerRole": mode})
        self.master.pin = pin
        self.slave: rbb.PinnedAnchor | None = None
        self.workdir, self.common, self.pin, self.heap = workdir, common, pin, heap

    def start(self) -> ApachePair:
        self.master.start()
        self.slave = rbb.PinnedAnchor(self.workdir / "slave", heap=self.heap, version="4.9.7", broker_name=GROUP,
                                      external_namesrv=self.master.namesrv_addr, broker_config={
                                          **self.common, "brokerRole": "SLAVE", "brokerId": "1",
                                          "slaveReadEnable": "true"})
        self.slave.pin = self.pin
        self.slave.start()
        return self

    @property
    def namesrv_addr(self) -> str:
        return self.master.namesrv_addr

    @property
    def master_addr(self) -> str:
        return self.master.broker_addr

    @property
    def slave_addr(self) -> str:
        assert self.slave is not None
        return self.slave.broker_addr

    def pids(self) -> dict[str, int]:
        assert self.slave is not None
        return {"master": self.master.pids()["apache-broker"], "slave": self.slave.pids()["apache-broker"],
                "namesrv": self.master.pids()["apache-namesrv"]}

    def stop(self) -> None:
        for anchor in (self.slave, self.master):
            if anchor is not None:
                anchor.stop()


Pair = OurPair | ApachePair


# -- probes --------------------------------------------------------------------------------------


def max_offset(addr: str) -> int:
    """The broker's commitLogMaxOffset (GET_BROKER_RUNTIME_INFO)."""
    with BrokerAdmin(addr, timeout=5) as admin:
        return int(admin.get_runtime_info()["commitLogMaxOffset"])


def wait_in_sync(pair: Pair, timeout_s: float = 120.0) -> float:
    """Send probes until one is SEND_OK (under SYNC_MASTER: the slave has it), then wait until the
    slave's CommitLog ends where the master's does; the seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    last = "none"
    with Producer(pair.namesrv_addr, "bench-sync-probe") as producer:
        while True:
            try:
                status = producer.send("BenchSyncProbe", b"probe", timeout=10).status
                if status is SendStatus.SEND_OK:
                    break
                last = str(status)
            except RemotingClientError as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise RuntimeError(f"no SEND_OK from the pair: the slave never got in sync (last answer: {last})")
            time.sleep(0.2)
    while True:
        try:
            if max_offset(pair.slave_addr) == max_offset(pair.master_addr):
                break
        except RemotingClientError as exc:
            # a 4.9.7 broker seconds old may answer SYSTEM_ERROR (NoSuchElementException: its
            # stats have no sample yet); the next look finds one
            last = str(exc)
        if time.monotonic() > deadline:
            raise RuntimeError(f"the slave did not reach the master's CommitLog end (last error: {last})")
        time.sleep(0.1)
    return time.monotonic() - t0


class LagSampler:
    """Master max offset minus slave max offset, sampled every LAG_SAMPLE_S in a thread."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(LAG_SAMPLE_S):
            with contextlib.suppress(RemotingClientError, OSError):
                self.samples.append(max(0, max_offset(self.pair.master_addr) - max_offset(self.pair.slave_addr)))

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join()
        return self.samples


def percentile(values: Sequence[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))] if s else 0.0


# -- one turn ------------------------------------------------------------------------------------


def run_turn(contender: str, mode: str, args: argparse.Namespace, scratch: Path, round_no: int,
             log: Callable[[str], None]) -> dict[str, Any]:
    """Start ``contender``'s pair in ``mode``, get it in sync, warm up, one measured produce run, stop."""
    tag = f"[round {round_no} {mode}] {contender}"
    workdir = scratch / f"{contender}-{mode}-{round_no}"
    log(f"{tag}: starting the pair")
    pair: Pair = (OurPair(workdir, mode, args.segment, rbb.BROKER_CPU) if contender == OURS
                  else ApachePair(workdir, mode, args.segment, rbb.BROKER_CPU, args.heap))
    out: dict[str, Any] = {}
    try:
        t0 = time.monotonic()
        pair.start()  # inside the try: a slave that fails to start must not leave its master running
        out["boot_s"] = time.monotonic() - t0
        out["in_sync_s"] = wait_in_sync(pair)
        driver = rbb.PinnedDriver(pair.namesrv_addr, scratch / f"client-{contender}-{mode}-{round_no}")
        driver.pin = rbb.CLIENT_CPU
        log(f"{tag}: warm-up, 8 threads, {args.warmup} s")
        driver.bench_produce("BenchWarmup", threads=8, size=rbb.BODY_SIZE, seconds=args.warmup, heap=rbb.CLIENT_HEAP)
        pids = pair.pids()
        log(f"{tag}: produce, {args.threads} threads, {args.seconds} s after {CLIENT_WARMUP_S} s untimed")
        run = rbb.start_timed_produce(driver, "BenchReplicated", args.threads, args.seconds, CLIENT_WARMUP_S)
        cpu0 = {name: rbb.proc_cpu_s(pid) for name, pid in pids.items()}
        sampler = LagSampler(pair)
        summary = run.wait(args.seconds + 120).summary
        t_end = time.monotonic()
        lags = sampler.stop()
        cpu = {name: rbb.proc_cpu_s(pid) - cpu0[name] for name, pid in pids.items()}
        target = max_offset(pair.master_addr)
        while max_offset(pair.slave_addr) < target and time.monotonic() - t_end < 120:
            time.sleep(0.02)
        out["drain_s"] = time.monotonic() - t_end
        sent = int(summary["sent"])
        # bytes per record as stored: the pair's CommitLog growth over the messages of the run
        record_bytes = target / max(1, sent)
        byte_rate = float(summary["tps"]) * record_bytes
        out.update({
            "sent": sent, "failed": int(summary.get("failed", 0)), "tps": float(summary["tps"]),
            "p99_ms": float(summary["p99_ms"]), "p50_ms": float(summary["p50_ms"]),
            "cpu_us_per_msg": {name: 1e6 * s / max(1, sent) for name, s in cpu.items()},
            "lag_bytes_p50": percentile(lags, 50), "lag_bytes_max": max(lags, default=0),
            "lag_s_max": max(lags, default=0) / byte_rate if byte_rate else 0.0,
            "lag_samples": len(lags),
        })
    finally:
        pair.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


# -- catch-up ------------------------------------------------------------------------------------


def build_backlog(store_root: Path, nbytes: int, segment: int) -> int:
    """A master store whose CommitLog holds about ``nbytes`` in its first segment (batches of 32
    records of 32 KiB), written offline by the store engine; its max offset."""
    cfg = StoreConfig(store_path_root_dir=str(store_root), mapped_file_size_commit_log=segment)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    items = [(b"r" * 32768, 0, "")] * 32
    i = 0
    try:
        while store.max_phy_offset + 33 * 32 * 1024 < nbytes:
            result = store.put_messages(MessageBatch(topic="BenchBacklog", queue_id=i & 7, items=items,
                                                     properties={}))
            if not result.ok:
                raise RuntimeError(f"backlog put failed: {result.status}")
            i += 1
        store.put_message(Message(topic="BenchBacklog", body=b"end"))
        store.reput_service.wait_caught_up(600)
        return store.max_phy_offset
    finally:
        store.shutdown()


def raw_copy_mb_s(src: Path, nbytes: int, scratch: Path) -> float:
    """MB/s of copying ``nbytes`` of ``src`` to a new file on the same disk, 1 MiB at a time."""
    dst = scratch / "raw-copy"
    t0 = time.perf_counter()
    with open(src, "rb", buffering=0) as fin, open(dst, "wb", buffering=0) as fout:
        left = nbytes
        while left > 0:
            chunk = fin.read(min(MiB, left))
            if not chunk:
                break
            fout.write(chunk)
            left -= len(chunk)
    dt = time.perf_counter() - t0
    dst.unlink()
    return nbytes / MiB / dt


def prime_free_memory(scratch: Path, nbytes: int) -> None:
    """Write ``nbytes`` to a file and delete it, right before a timed copy into the page cache.

    On a virtual machine whose hypervisor takes back the guest's idle free memory (this one's
    balloon reports free pages after about 2 s), a copy into fresh page cache faults every page
    back in on the host: 1 GiB written after 10 s idle ran at 450-640 MB/s, right after freeing
    other page cache at 4,100-5,100, in the same minute. The raw copy and the catch-up each write
    1 GiB, at different delays after the last free (the brokers take seconds to start), so the
    ratio measured that delay. Both now start right after this write and delete, which leaves the
    freed pages backed for the next writer (up to 2 s later it still ran at 4,100-5,100 MB/s): the
    page cache they meet is that of a machine that owns its memory."""
    path = scratch / "prime"
    chunk = b"\0" * MiB
    with open(path, "wb", buffering=0) as out:
        for _ in range(nbytes // MiB):
            out.write(chunk)
    path.unlink()


def catch_up_poll_s(first: tuple[float, int, Any] | None, now: float, got: int, target: int) -> float:
    """How long to wait before the next look at the slave's progress.

    The end of the catch-up is seen at most one wait late, so the wait is short (20 ms) where the
    end may be near: before the first byte, and once the rate seen so far puts the target less
    than 0.3 s ahead. Elsewhere it is 200 ms: each look is a GET_BROKER_RUNTIME_INFO the slave
    answers on the core it catches up on, and 50 a second cost it 0.1-0.25 ms of CPU per MiB."""
    if first is None or now <= first[0] or got <= first[1]:
        return 0.02
    rate = (got - first[1]) / (now - first[0])
    return 0.02 if (target - got) / rate < 0.3 else 0.2


def run_catch_up(args: argparse.Namespace, scratch: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Ours: an empty slave catches up with a master holding the backlog; anchor: a raw copy.

    Master and slave run on a core each, as they do on two machines (no client runs meanwhile);
    the raw copy is one process and so uses one core. CPU per MiB is each broker's utime+stime
    over the same span as the rate: it shows where the time goes even when the machine is busy."""
    workdir = scratch / "catch-up"
    segment = 1024 * MiB
    log(f"catch-up: building a {args.backlog_mib} MiB backlog offline")
    pair = OurPair(workdir, "ASYNC_MASTER", segment, rbb.BROKER_CPU, slave_pin=rbb.CLIENT_CPU)
    target = build_backlog(workdir / "master" / "store", args.backlog_mib * MiB, segment)
    segment_file = workdir / "master" / "store" / "commitlog" / f"{0:020d}"
    prime_free_memory(scratch, target + target // 4)
    anchor = raw_copy_mb_s(segment_file, target, scratch)
    log(f"catch-up: raw copy {anchor:.0f} MB/s; starting the master and an empty slave")
    try:
        pair.start_master()
        prime_free_memory(scratch, target + target // 4)
        t_start = time.monotonic()
        pair.start_slave()
        pids = pair.pids()
        first: tuple[float, int, dict[str, float]] | None = None
        deadline = time.monotonic() + 600
        # One connection for all the polls: a connection per poll (50 a second) cost the slave
        # 0.3 ms of CPU per MiB caught up, on the core the catch-up runs on.
        with BrokerAdmin(pair.slave_addr, timeout=5) as slave:
            while True:
                now, got = time.monotonic(), int(slave.get_runtime_info()["commitLogMaxOffset"])
                if first is None and got > 0:
                    first = (now, got, {name: rbb.proc_cpu_s(pid) for name, pid in pids.items()})
                if got >= target or now > deadline:
                    break
                time.sleep(catch_up_poll_s(first, now, got, target))
        done = time.monotonic()
        cpu = {name: rbb.proc_cpu_s(pid) for name, pid in pids.items()}
        assert first is not None, "the slave never appended a byte"
        mib = max(1e-6, (got - first[1]) / MiB)
        rate = mib / max(1e-6, done - first[0])
        log(f"catch-up: {rate:.0f} MB/s, {rate / anchor:.2f}x of the raw copy")
        return {"bytes": target, "mb_s": rate, "wall_s_from_slave_start": done - t_start, "anchor_mb_s": anchor,
                "ratio": rate / anchor, "reached": got >= target,
                "cpu_ms_per_mib": {name: 1000 * (cpu[name] - first[2][name]) / mib for name in pids}}
    finally:
        pair.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


# -- report --------------------------------------------------------------------------------------


def spread(values: Sequence[float], fmt: str) -> str:
    """Median and [min-max] of ``values``."""
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return format(med, fmt)
    return f"{format(med, fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


ROWS: list[tuple[str, Callable[[dict[str, Any]], float], str, bool, str]] = [
    # label, figure of a turn, format, higher is better, goal
    ("produce TPS", lambda t: t["tps"], ".0f", True, ">= 1.5x (SYNC_MASTER)"),
    ("p99 ms", lambda t: t["p99_ms"], ".2f", False, "<= 0.8x (SYNC_MASTER)"),
    ("master CPU µs/msg", lambda t: t["cpu_us_per_msg"]["master"], ".1f", False, ""),
    ("slave CPU µs/msg", lambda t: t["cpu_us_per_msg"]["slave"], ".1f", False, ""),
    ("slave lag max, MiB", lambda t: t["lag_bytes_max"] / MiB, ".2f", False, ""),
    ("slave lag max, s of produce", lambda t: t["lag_s_max"], ".3f", False, ""),
    ("slave drain after last send, s", lambda t: t["drain_s"], ".2f", False, ""),
]


def results_table(result: dict[str, Any]) -> str:
    header = ["mode", "figure", OURS, APACHE, "ratio", "goal"]
    cells = []
    for mode in result["modes"]:
        turns = result["turns"][mode]
        for label, fig, fmt, _higher, goal in ROWS:
            ours = [fig(t) for t in turns[OURS]]
            theirs = [fig(t) for t in turns[APACHE]]
            ratio = (statistics.median(ours) / statistics.median(theirs)
                     if ours and theirs and statistics.median(theirs) else None)
            cells.append([mode, label, spread(ours, fmt), spread(theirs, fmt),
                          "-" if ratio is None else f"{ratio:.2f}x", goal if mode == "SYNC_MASTER" or not goal
                          else ""])
    runs = result.get("catch_up") or []
    if runs:
        rates, anchors = [c["mb_s"] for c in runs], [c["anchor_mb_s"] for c in runs]
        cells.append(["catch-up", f"{runs[0]['bytes'] / MiB:.0f} MiB backlog, MB/s", spread(rates, ".0f"),
                      f"raw copy {spread(anchors, '.0f')}", f"{statistics.median(c['ratio'] for c in runs):.2f}x",
                      ">= 0.5x of raw copy"])
        for side in ("master", "slave"):
            cells.append(["catch-up", f"{side} CPU ms/MiB", spread([c["cpu_ms_per_mib"][side] for c in runs], ".2f"),
                          "", "", ""])
    return doc_blocks.markdown_table(header, cells, right=range(2, 5))


def setup_text(result: dict[str, Any]) -> str:
    a = result["args"]
    return (f"{a['rounds']} round(s) per mode, contenders alternating; {a['seconds']} s closed-loop produce of "
            f"1 KiB bodies from {a['threads']} threads of the Java 4.9.8 client (the default JIT and collector) "
            f"after a {a['warmup']} s warm-up and {CLIENT_WARMUP_S} s untimed in the same client JVM; "
            f"master and slave brokers pinned to CPU 0, the client to CPU 1 (catch-up: master on CPU 0, "
            f"slave on CPU 1); Apache heap {a['heap']}; "
            f"CommitLog segments {a['segment'] // MiB} MiB; ASYNC_FLUSH on both brokers. Figures: median "
            f"[min-max] over the rounds. {os.cpu_count()} CPUs.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round, 5 s runs, 256 MiB backlog")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--seconds", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--modes", default="SYNC_MASTER,ASYNC_MASTER")
    ap.add_argument("--backlog-mib", dest="backlog_mib", type=int)
    ap.add_argument("--segment", type=int, default=1024 * MiB, help="CommitLog segment size of the produce runs")
    ap.add_argument("--heap", default="1g", help="Apache brokers' heap (-Xms/-Xmx)")
    ap.add_argument("--no-catch-up", dest="catch_up", action="store_false")
    doc_blocks.add_output_arguments(ap, DOC_SECTION, "stores, logs")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.seconds = args.seconds or (5 if args.quick else 15)
    args.warmup = args.warmup or (3 if args.quick else 5)
    args.backlog_mib = args.backlog_mib or (256 if args.quick else 1000)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)  # before a long run, not after it
    if modes:
        rbb.java_rocketmq.build_driver()
        rbb.java_rocketmq.build_anchor("4.9.7")
    scratch = Path(tempfile.mkdtemp(prefix="rocketstore-replication-bench-", dir=args.dir))

    def log(text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)

    result: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "doc"}, "modes": modes,
                              "turns": {m: {OURS: [], APACHE: []} for m in modes}}
    try:
        for round_no in range(args.rounds):
            order = [OURS, APACHE] if round_no % 2 == 0 else [APACHE, OURS]
            for mode in modes:
                for contender in order:
                    result["turns"][mode][contender].append(run_turn(contender, mode, args, scratch, round_no, log))
        if args.catch_up:
            result["catch_up"] = [run_catch_up(args, scratch, log) for _ in range(args.rounds)]
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    table = results_table(result)
    print(setup_text(result))
    print(table)
    doc_blocks.write_outputs(args, DOC_SECTION, result,
                             textwrap.fill(setup_text(result), 100, break_on_hyphens=False), table)


if __name__ == "__main__":
    main()
