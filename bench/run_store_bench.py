#!/usr/bin/env python3
"""Store engine benchmarks.

    python3 bench/run_store_bench.py [--quick] [--json OUT] [--dir D] [--profile] [--doc docs/benchmarks.md]

The per-message hot path scenarios (s1 single put, s2 batch put, s4 dispatch lag) run twice:
with the native extension and with ``ROCKETSTORE_NATIVE=0`` (``--no-pure-python`` skips the
second). ``--doc docs/benchmarks.md`` rewrites the ``bench:store`` block of that page with the table.

Every scenario (and every anchor) runs in a fresh child process, a re-invocation of this
script with ``--child NAME``; the child prints one ``RESULT {json}`` line on stdout. The parent
measures the child's CPU with getrusage(RUSAGE_CHILDREN); the child reports its own peak RSS
(VmHWM) and anonymous RSS (RssAnon: memory outside the page cache). Results are printed as a
markdown table with ratios against anchors measured in the same run. See bench/README.md.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))

import doc_blocks  # noqa: E402

from rocketstore.common import native  # noqa: E402
from rocketstore.common.message import PHYSICAL_OFFSET_POS, Message  # noqa: E402
from rocketstore.store.commit_log import MessageBatch  # noqa: E402
from rocketstore.store.config import FlushDiskType, StoreConfig  # noqa: E402
from rocketstore.store.flush import GroupCommitService  # noqa: E402
from rocketstore.store.message_store import DefaultMessageStore  # noqa: E402

MiB = 1024 * 1024
GiB = 1024 * MiB
DOC_SECTION = "store"
TOPIC = "BenchTopic"
BODY = b"m" * 1024

# name -> sizes. "full" is the brief's literal sizing (1M messages, 4 GiB recovery store).
PROFILES: dict[str, dict[str, int]] = {
    "quick": dict(seg=256 * MiB, s1_msgs=30_000, s2_msgs=30_000, s3_puts_per_thread=150, s4_seconds=5,
                  s5_msgs=20_000, s5_seconds=3, s6_bytes=512 * MiB, s6_seg=128 * MiB, s6_body=16 * 1024,
                  fsync_ops=300),
    "default": dict(seg=GiB, s1_msgs=300_000, s2_msgs=300_000, s3_puts_per_thread=600, s4_seconds=15,
                    s5_msgs=100_000, s5_seconds=8, s6_bytes=4 * GiB, s6_seg=GiB, s6_body=16 * 1024,
                    fsync_ops=1000),
    "full": dict(seg=GiB, s1_msgs=1_000_000, s2_msgs=1_000_000, s3_puts_per_thread=2000, s4_seconds=30,
                 s5_msgs=300_000, s5_seconds=15, s6_bytes=4 * GiB, s6_seg=GiB, s6_body=4 * 1024,
                 fsync_ops=2000),
}


# ----------------------------------------------------------------------------------------------
# helpers (child side)
# ----------------------------------------------------------------------------------------------
def proc_status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssSampler:
    """Samples RssAnon every few ms: /proc has no peak for it, only VmHWM for total RSS."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.peak_anon_kb = proc_status_kb("RssAnon")
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak_anon_kb = max(self.peak_anon_kb, proc_status_kb("RssAnon"))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_anon_kb = max(self.peak_anon_kb, proc_status_kb("RssAnon"))


def memory_report(sampler: RssSampler | None = None) -> dict[str, float]:
    out = {
        "vm_hwm_mb": proc_status_kb("VmHWM") / 1024,
        "rss_anon_mb": proc_status_kb("RssAnon") / 1024,
        "rss_file_mb": proc_status_kb("RssFile") / 1024,
    }
    if sampler is not None:
        out["peak_rss_anon_mb"] = sampler.peak_anon_kb / 1024
    return out


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def open_store(path: str, seg: int, sync: bool = False) -> DefaultMessageStore:
    cfg = StoreConfig(store_path_root_dir=path, mapped_file_size_commit_log=seg,
                      flush_disk_type=FlushDiskType.SYNC_FLUSH if sync else FlushDiskType.ASYNC_FLUSH)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    return store


def durable_flush(store: DefaultMessageStore) -> None:
    """Flush the whole CommitLog to disk (what the raw anchor's final fsync corresponds to)."""
    mfq = store.commit_log.mapped_file_queue
    for _ in range(10):
        mfq.flush(0)
        if mfq.flushed_where >= mfq.max_offset:
            return


# ----------------------------------------------------------------------------------------------
# scenarios (each runs in its own child process)
# ----------------------------------------------------------------------------------------------
def child_s1_single(p: dict[str, Any]) -> dict[str, Any]:
    """Single writer, one 1 KiB message per put_message, ASYNC_FLUSH."""
    store = open_store(p["dir"], p["seg"])
    n = p["msgs"]
    props = {"TAGS": "TagA"}
    # thread_time: CPU time of the putting thread only, so time spent waiting for the GIL while
    # dispatch runs is not charged to the put path (wall-clock profiles inflate self times).
    prof = cProfile.Profile(time.thread_time) if p.get("profile") else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    put = store.put_message
    for i in range(n):
        r = put(Message(topic=TOPIC, body=BODY, queue_id=i & 7, properties=props))
        if not r.ok:
            raise SystemExit(f"put {i} failed: {r.status}")
    if prof is not None:
        prof.disable()
    t_put = time.perf_counter() - t0
    durable_flush(store)
    t_durable = time.perf_counter() - t0
    total = store.max_phy_offset
    t1 = time.perf_counter()
    store.reput_service.wait_caught_up(300)
    t_catch = time.perf_counter() - t1
    out: dict[str, Any] = {"msgs": n, "bytes": total, "put_s": t_put, "durable_s": t_durable,
                           "dispatch_catchup_after_s": t_catch}
    if prof is not None:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(p.get("top", 25))
        out["profile"] = buf.getvalue()
    store.shutdown()
    out.update(memory_report())
    return out


def child_s2_batch(p: dict[str, Any]) -> dict[str, Any]:
    """Batch put: MessageBatch of 32 x 1 KiB."""
    store = open_store(p["dir"], p["seg"])
    n = p["msgs"] // 32 * 32
    items = [(BODY, 0, "")] * 32
    t0 = time.perf_counter()
    for i in range(n // 32):
        r = store.put_messages(MessageBatch(topic=TOPIC, queue_id=i & 7, items=items, properties={"TAGS": "TagA"}))
        if not r.ok:
            raise SystemExit(f"batch {i} failed: {r.status}")
    t_put = time.perf_counter() - t0
    durable_flush(store)
    t_durable = time.perf_counter() - t0
    total = store.max_phy_offset
    t1 = time.perf_counter()
    store.reput_service.wait_caught_up(300)
    t_catch = time.perf_counter() - t1
    store.shutdown()
    out = {"msgs": n, "bytes": total, "put_s": t_put, "durable_s": t_durable, "dispatch_catchup_after_s": t_catch}
    out.update(memory_report())
    return out


def child_raw_write(p: dict[str, Any]) -> dict[str, Any]:
    """Anchor: plain Python file, 1 MiB writes, with and without a final fsync."""
    total = p["bytes"]
    chunk = b"r" * MiB
    out: dict[str, Any] = {"bytes": total}
    for label, do_sync in (("fsync", True), ("nofsync", False)):
        path = os.path.join(p["dir"], f"raw-{label}")
        t0 = time.perf_counter()
        with open(path, "wb", buffering=0) as f:
            left = total
            while left > 0:
                n = min(left, MiB)
                f.write(chunk if n == MiB else chunk[:n])
                left -= n
            if do_sync:
                os.fsync(f.fileno())
        out[f"{label}_s"] = time.perf_counter() - t0
        os.unlink(path)
    out.update(memory_report())
    return out


def child_raw_fsync(p: dict[str, Any]) -> dict[str, Any]:
    """Anchor for group commit: one writer doing write(1 KiB record) + fdatasync per message."""
    path = os.path.join(p["dir"], "raw-fsync-each")
    n = p["ops"]
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    rec = b"f" * 1100
    t0 = time.perf_counter()
    for _ in range(n):
        os.write(fd, rec)
        os.fdatasync(fd)
    dt = time.perf_counter() - t0
    os.close(fd)
    os.unlink(path)
    return {"ops": n, "s": dt}


def child_s3_group_commit(p: dict[str, Any]) -> dict[str, Any]:
    """SYNC_FLUSH with 16 writer threads: throughput, put latency, fsyncs per put."""
    store = open_store(p["dir"], p["seg"], sync=True)
    threads_n, per = p["threads"], p["puts_per_thread"]
    lat: list[list[float]] = [[] for _ in range(threads_n)]
    errors: list[str] = []
    barrier = threading.Barrier(threads_n + 1)

    def writer(k: int) -> None:
        mine = lat[k]
        props = {"TAGS": "TagA"}
        barrier.wait()
        for _ in range(per):
            t = time.perf_counter()
            r = store.put_message(Message(topic=TOPIC, body=BODY, queue_id=k, properties=props))
            mine.append(time.perf_counter() - t)
            if not r.ok:
                errors.append(str(r.status))

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    flush_service = store.commit_log.flush_service
    assert isinstance(flush_service, GroupCommitService)
    flushes_before = flush_service.flush_count
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    flushes = flush_service.flush_count - flushes_before
    all_lat = [x for sub in lat for x in sub]
    store.shutdown()
    out = {"puts": len(all_lat), "s": dt, "fsyncs": flushes, "errors": len(errors),
           "p50_ms": pct(all_lat, 50) * 1000, "p99_ms": pct(all_lat, 99) * 1000, "max_ms": max(all_lat) * 1000}
    out.update(memory_report())
    return out


def child_s4_dispatch_lag(p: dict[str, Any]) -> dict[str, Any]:
    """One thread appends flat out; a prober measures put-return -> visible in the consume queue."""
    store = open_store(p["dir"], p["seg"])
    duration = p["seconds"]
    probes: collections.deque[tuple[int, float]] = collections.deque()
    lags: list[float] = []
    behind: list[int] = []
    stop = threading.Event()

    def prober() -> None:
        pending: collections.deque[tuple[int, float]] = collections.deque()
        last_sample = 0.0
        while not stop.is_set() or probes or pending:
            while probes:
                pending.append(probes.popleft())
            now = time.perf_counter()
            if pending:
                visible = store.get_max_offset_in_queue(TOPIC, 0)
                now = time.perf_counter()
                while pending and pending[0][0] < visible:
                    lags.append(now - pending.popleft()[1])
            if now - last_sample >= 0.005:
                behind.append(store.max_phy_offset - store.reput_service.reput_from_offset)
                last_sample = now
            if stop.is_set() and not pending and not probes:
                break
            time.sleep(0.0005)

    th = threading.Thread(target=prober, daemon=True)
    th.start()
    props = {"TAGS": "TagA"}
    n = 0
    t0 = time.perf_counter()
    end = t0 + duration
    while True:
        r = store.put_message(Message(topic=TOPIC, body=BODY, queue_id=0, properties=props))
        t_ret = time.perf_counter()
        assert r.append is not None
        n += 1
        if n % 32 == 0:
            probes.append((r.append.logics_offset, t_ret))
        if t_ret >= end:
            break
    dt = time.perf_counter() - t0
    stop.set()
    th.join(60)
    store.shutdown()
    out = {"msgs": n, "s": dt, "probes": len(lags),
           "lag_p50_ms": pct(lags, 50) * 1000, "lag_p99_ms": pct(lags, 99) * 1000,
           "lag_max_ms": (max(lags) if lags else float("nan")) * 1000,
           "behind_p50_kb": pct([float(b) for b in behind], 50) / 1024,
           "behind_p99_kb": pct([float(b) for b in behind], 99) / 1024,
           "behind_max_kb": max(behind, default=0) / 1024}
    out.update(memory_report())
    return out


def child_s5_get(p: dict[str, Any]) -> dict[str, Any]:
    """get_message of 32 per call from a warm store, plus a raw-mmap anchor over the same records."""
    store = open_store(p["dir"], p["seg"])
    n = p["msgs"] // 32 * 32
    items = [(BODY, 0, "")] * 32
    for _ in range(n // 32):
        store.put_messages(MessageBatch(topic=TOPIC, queue_id=0, items=items, properties={"TAGS": "TagA"}))
    store.reput_service.wait_caught_up(300)
    # warm pass: collect (offset, size) of every record for the anchor
    locs: list[tuple[int, int]] = []
    off = 0
    while off < n:
        res = store.get_message("G", TOPIC, 0, off, 32)
        for rec in res.messages:
            locs.append((int.from_bytes(rec[PHYSICAL_OFFSET_POS:PHYSICAL_OFFSET_POS + 8], "big"), len(rec)))
        off = res.next_begin_offset
    seconds = p["seconds"]
    calls = msgs = 0
    off = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while True:
        res = store.get_message("G", TOPIC, 0, off, 32)
        calls += 1
        msgs += res.message_count
        off = res.next_begin_offset if res.next_begin_offset < n else 0
        if calls % 64 == 0 and time.perf_counter() >= end:
            break
    dt = time.perf_counter() - t0
    seg = p["seg"]
    maps = [mf.buffer for mf in store.commit_log.mapped_file_queue.mapped_files]
    raw_calls = 0
    i = 0
    t1 = time.perf_counter()
    end = t1 + seconds / 2
    while True:
        batch = locs[i:i + 32]
        out_list = [maps[o // seg][o % seg:o % seg + s] for o, s in batch]
        del out_list
        raw_calls += 1
        i = i + 32 if i + 32 < len(locs) else 0
        if raw_calls % 64 == 0 and time.perf_counter() >= end:
            break
    raw_dt = time.perf_counter() - t1
    del maps
    store.shutdown()
    out = {"calls": calls, "msgs": msgs, "s": dt, "raw_calls": raw_calls, "raw_s": raw_dt}
    out.update(memory_report())
    return out


def child_s6_build(p: dict[str, Any]) -> dict[str, Any]:
    """Build the recovery store (batches of 32 records of s6_body bytes), clean shutdown."""
    store = open_store(p["dir"], p["seg"])
    body = b"b" * p["body"]
    items = [(body, 0, "")] * 32
    t0 = time.perf_counter()
    i = 0
    while store.max_phy_offset < p["bytes"]:
        r = store.put_messages(MessageBatch(topic=TOPIC, queue_id=i & 7, items=items, properties={"TAGS": "TagA"}))
        if not r.ok:
            raise SystemExit(f"build batch failed: {r.status}")
        i += 1
    store.reput_service.wait_caught_up(600)
    dt = time.perf_counter() - t0
    store.shutdown()
    return {"records": i * 32, "bytes": store.max_phy_offset, "s": dt,
            "segments": len(os.listdir(os.path.join(p["dir"], "commitlog")))}


def child_s6_crash_writer(p: dict[str, Any]) -> dict[str, Any]:
    """Open the store and write until killed; prints READY once it has written for a while."""
    store = open_store(p["dir"], p["seg"])
    body = b"c" * p["body"]
    items = [(body, 0, "")] * 32
    t_ready = time.perf_counter() + p.get("write_s", 2.0)
    ready = False
    i = 0
    while True:
        store.put_messages(MessageBatch(topic=TOPIC, queue_id=i & 7, items=items, properties={"TAGS": "TagA"}))
        i += 1
        if not ready and time.perf_counter() >= t_ready:
            print("READY", flush=True)
            ready = True


def child_s6_recover(p: dict[str, Any]) -> dict[str, Any]:
    """Time load() + start() (start returns once dispatch has caught up) and watch memory."""
    abort_left = os.path.exists(os.path.join(p["dir"], "abort"))
    cfg = StoreConfig(store_path_root_dir=p["dir"], mapped_file_size_commit_log=p["seg"])
    with RssSampler() as sampler:
        t0 = time.perf_counter()
        store = DefaultMessageStore(cfg)
        store.load()
        t_load = time.perf_counter() - t0
        store.start()
        t_total = time.perf_counter() - t0
    mem = memory_report(sampler)
    out: dict[str, Any] = {"abort_left": abort_left, "last_exit_ok": store.last_exit_ok, "load_s": t_load,
                           "load_start_s": t_total, "max_offset": store.max_phy_offset,
                           "queue0_msgs": store.get_max_offset_in_queue(TOPIC, 0)}
    out.update(mem)
    store.shutdown()
    return out


CHILDREN = {
    "s1": child_s1_single, "s2": child_s2_batch, "raw_write": child_raw_write, "raw_fsync": child_raw_fsync,
    "s3": child_s3_group_commit, "s4": child_s4_dispatch_lag, "s5": child_s5_get, "s6_build": child_s6_build,
    "s6_crash_writer": child_s6_crash_writer, "s6_recover": child_s6_recover,
}


# ----------------------------------------------------------------------------------------------
# parent side
# ----------------------------------------------------------------------------------------------
LOG_DIR: list[str] = []  # where children's stderr (the store's log output) goes


def child_log_path(name: str) -> str:
    base = LOG_DIR[0] if LOG_DIR else tempfile.gettempdir()
    return os.path.join(base, f"child-{name}-{time.monotonic_ns()}.log")


def log_summary(path: str) -> tuple[int, str]:
    """(number of log lines, first line) of a child's stderr."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    return len(lines), (lines[0][:160] if lines else "")


def run_child(name: str, params: dict[str, Any], mode: str = "native") -> dict[str, Any]:
    """Run scenario ``name`` in a child process; ``mode`` "python" runs it with ROCKETSTORE_NATIVE=0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    log_path = child_log_path(name if mode == "native" else f"{name}-python")
    env = dict(os.environ, ROCKETSTORE_NATIVE="0" if mode == "python" else "1")
    with open(log_path, "w") as err:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name,
                               "--params", json.dumps(params)],
                              stdout=subprocess.PIPE, stderr=err, text=True, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    log_lines, first = log_summary(log_path)
    if proc.returncode != 0:
        with open(log_path, errors="replace") as f:
            sys.stderr.write(f.read()[-4000:])
        raise RuntimeError(f"child {name} failed with exit code {proc.returncode}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result: dict[str, Any] = json.loads(line[len("RESULT "):])
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["wall_s"] = wall
    result["log_lines"], result["log_first"] = log_lines, first
    if result.get("implementation") != mode:
        raise RuntimeError(f"child {name} ran the {result.get('implementation')} hot path, {mode} was asked for")
    note = f", {log_lines} log lines, first: {first}" if log_lines else ""
    print(f"  [{name}, {mode}] done in {wall:.1f}s (cpu {result['cpu_s']:.1f}s){note}", file=sys.stderr, flush=True)
    return result


def kill_writer_midway(params: dict[str, Any]) -> None:
    with open(child_log_path("s6_crash_writer"), "w") as err:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", "s6_crash_writer",
                                 "--params", json.dumps(params)], stdout=subprocess.PIPE, stderr=err, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError("crash writer did not get ready")
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


Row = tuple[str, str, float, float | None, str]  # scenario, metric, value, anchor, goal


def mbps(nbytes: float, seconds: float) -> float:
    return nbytes / MiB / seconds if seconds > 0 else float("nan")


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    prof = PROFILES["quick" if args.quick else ("full" if args.full else "default")]
    scratch = tempfile.mkdtemp(prefix="storebench-", dir=args.dir)
    LOG_DIR[:] = [os.path.join(scratch, "logs")]
    os.makedirs(LOG_DIR[0])
    rows: list[Row] = []
    raw: dict[str, Any] = {"profile": "quick" if args.quick else ("full" if args.full else "default"),
                           "sizes": prof, "scratch": scratch, "loadavg_start": os.getloadavg(), "nproc": os.cpu_count(),
                           "interpreter_ns": doc_blocks.interpreter_probe_ns()}
    selected = set(args.only.split(",")) if args.only else {"s1", "s2", "s3", "s4", "s5", "s6"}
    # the per-message hot path (s1, s2, s4) also runs in pure-Python mode, so the native gain shows
    modes = ["native", "python"] if args.pure_python else ["native"]
    t_start = time.perf_counter()

    def sub(name: str) -> str:
        path = os.path.join(scratch, name)
        os.makedirs(path, exist_ok=True)
        return path

    def drop(name: str) -> None:
        shutil.rmtree(os.path.join(scratch, name), ignore_errors=True)

    def resources(scn: str, r: dict[str, Any]) -> None:
        rows.append((scn, "child cpu s (user+sys)", r["cpu_s"], None, ""))
        if "vm_hwm_mb" in r:
            rows.append((scn, "child peak RSS MB (VmHWM)", r["vm_hwm_mb"], None, ""))
            rows.append((scn, "child RssAnon MB at end", r["rss_anon_mb"], None, ""))

    try:
        for mode in modes:
            tag = "" if mode == "native" else " (pure Python)"
            if "s1" in selected:
                print(f"s1: single-writer put_message{tag}", file=sys.stderr)
                s1 = run_child("s1", {"dir": sub("s1"), "seg": prof["seg"], "msgs": prof["s1_msgs"]}, mode)
                drop("s1")
                anchor = run_child("raw_write", {"dir": sub("raw"), "bytes": s1["bytes"]})
                drop("raw")
                raw["s1" + tag], raw["s1_raw_write" + tag] = s1, anchor
                raw_mb = mbps(anchor["bytes"], anchor["fsync_s"])
                rows += [
                    (f"1 single put{tag}", "msgs/s (put returns)", s1["msgs"] / s1["put_s"], None, ""),
                    (f"1 single put{tag}", "MB/s durable (puts + final flush) vs raw 1MiB writes+fsync",
                     mbps(s1["bytes"], s1["durable_s"]), raw_mb, ">= 0.5"),
                    (f"1 single put{tag}", "MB/s put-only vs raw 1MiB writes, no fsync",
                     mbps(s1["bytes"], s1["put_s"]), mbps(anchor["bytes"], anchor["nofsync_s"]), ""),
                    (f"1 single put{tag}", "dispatch catch-up after last put, s", s1["dispatch_catchup_after_s"],
                     None, ""),
                ]
                resources(f"1 single put{tag}", s1)
            if "s2" in selected:
                print(f"s2: batch put (32 x 1 KiB){tag}", file=sys.stderr)
                s2 = run_child("s2", {"dir": sub("s2"), "seg": prof["seg"], "msgs": prof["s2_msgs"]}, mode)
                drop("s2")
                anchor = run_child("raw_write", {"dir": sub("raw"), "bytes": s2["bytes"]})
                drop("raw")
                raw["s2" + tag], raw["s2_raw_write" + tag] = s2, anchor
                rows += [
                    (f"2 batch put{tag}", "msgs/s (put returns)", s2["msgs"] / s2["put_s"], None, ""),
                    (f"2 batch put{tag}", "MB/s durable (puts + final flush) vs raw 1MiB writes+fsync",
                     mbps(s2["bytes"], s2["durable_s"]), mbps(anchor["bytes"], anchor["fsync_s"]), ">= 0.8"),
                    (f"2 batch put{tag}", "dispatch catch-up after last put, s", s2["dispatch_catchup_after_s"],
                     None, ""),
                ]
                resources(f"2 batch put{tag}", s2)
        if "s3" in selected:
            print("s3: SYNC_FLUSH group commit, 16 threads", file=sys.stderr)
            s3 = run_child("s3", {"dir": sub("s3"), "seg": prof["seg"], "threads": 16,
                                  "puts_per_thread": prof["s3_puts_per_thread"]})
            drop("s3")
            anchor = run_child("raw_fsync", {"dir": sub("raw"), "ops": prof["fsync_ops"]})
            drop("raw")
            raw["s3"], raw["s3_raw_fsync"] = s3, anchor
            rows += [
                ("3 sync group commit", "msgs/s vs raw write+fdatasync per msg", s3["puts"] / s3["s"],
                 anchor["ops"] / anchor["s"], "> 1"),
                ("3 sync group commit", "put latency p50 ms", s3["p50_ms"], None, ""),
                ("3 sync group commit", "put latency p99 ms", s3["p99_ms"], None, ""),
                ("3 sync group commit", "fsyncs", s3["fsyncs"], None, ""),
                ("3 sync group commit", "puts per fsync", s3["puts"] / max(s3["fsyncs"], 1), None, "> 1"),
                ("3 sync group commit", "failed puts", s3["errors"], None, "0"),
            ]
            resources("3 sync group commit", s3)
        for mode in modes:
            tag = "" if mode == "native" else " (pure Python)"
            if "s4" in selected:
                print(f"s4: dispatch lag under append load{tag}", file=sys.stderr)
                s4 = run_child("s4", {"dir": sub("s4"), "seg": prof["seg"], "seconds": prof["s4_seconds"]}, mode)
                drop("s4")
                raw["s4" + tag] = s4
                rows += [
                    (f"4 dispatch lag{tag}", "append msgs/s during test", s4["msgs"] / s4["s"], None, ""),
                    (f"4 dispatch lag{tag}", "put-return -> visible p50 ms", s4["lag_p50_ms"], None, "< 10"),
                    (f"4 dispatch lag{tag}", "put-return -> visible p99 ms", s4["lag_p99_ms"], None, "< 10"),
                    (f"4 dispatch lag{tag}", "put-return -> visible max ms", s4["lag_max_ms"], None, ""),
                    (f"4 dispatch lag{tag}", "behind bytes p50 KiB", s4["behind_p50_kb"], None, ""),
                    (f"4 dispatch lag{tag}", "behind bytes p99 KiB", s4["behind_p99_kb"], None, ""),
                ]
                resources(f"4 dispatch lag{tag}", s4)
        if "s5" in selected:
            print("s5: get_message x32 from a warm store", file=sys.stderr)
            s5 = run_child("s5", {"dir": sub("s5"), "seg": prof["seg"], "msgs": prof["s5_msgs"],
                                  "seconds": prof["s5_seconds"]})
            drop("s5")
            raw["s5"] = s5
            rows += [
                ("5 get_message x32", "calls/s vs raw mmap slicing of same 32 records",
                 s5["calls"] / s5["s"], s5["raw_calls"] / s5["raw_s"], ""),
                ("5 get_message x32", "msgs/s", s5["msgs"] / s5["s"], None, ""),
            ]
            resources("5 get_message x32", s5)
        if "s6" in selected:
            print("s6: recovery (build, clean restart, kill -9, crash restart)", file=sys.stderr)
            d = sub("s6")
            params = {"dir": d, "seg": prof["s6_seg"], "bytes": prof["s6_bytes"], "body": prof["s6_body"]}
            build = run_child("s6_build", params)
            normal = run_child("s6_recover", params)
            kill_writer_midway(params)
            abnormal = run_child("s6_recover", params)
            drop("s6")
            raw["s6_build"], raw["s6_normal"], raw["s6_abnormal"] = build, normal, abnormal
            assert not normal["abort_left"] and abnormal["abort_left"], "recovery kinds not as intended"
            rows += [
                ("6 recovery", f"store built: {build['bytes'] / GiB:.2f} GiB, {build['segments']} segments, "
                 f"{build['records']} records, build s", build["s"], None, ""),
            ]
            for kind, r in (("normal", normal), ("abnormal (kill -9)", abnormal)):
                rows += [
                    ("6 recovery", f"{kind}: load() s", r["load_s"], None, ""),
                    ("6 recovery", f"{kind}: load()+start() s", r["load_start_s"], None, ""),
                    ("6 recovery", f"{kind}: peak RssAnon MB", r["peak_rss_anon_mb"], None, "< 200"),
                    ("6 recovery", f"{kind}: peak RSS MB (VmHWM, incl. mapped pages)", r["vm_hwm_mb"], None, ""),
                    ("6 recovery", f"{kind}: child cpu s", r["cpu_s"], None, ""),
                    ("6 recovery", f"{kind}: log lines written by the store", r["log_lines"], None, ""),
                ]
    finally:
        if args.keep:
            print(f"kept scratch dir {scratch}", file=sys.stderr)
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    raw["loadavg_end"] = os.getloadavg()
    raw["total_wall_s"] = time.perf_counter() - t_start
    raw["rows"] = [dict(scenario=s, metric=m, value=v, anchor=a, ratio=(v / a if a else None), goal=g)
                   for s, m, v, a, g in rows]
    return raw


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x != x:  # NaN
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}"


def setup_line(result: dict[str, Any]) -> str:
    start, end = (", ".join(f"{x:.1f}" for x in result[k]) for k in ("loadavg_start", "loadavg_end"))
    return (f"Profile {result['profile']}, {result['nproc']} CPUs, Python {sys.version.split()[0]}, load average "
            f"{start} at the start and {end} at the end, {result['total_wall_s']:.0f} s in all. Rows marked "
            "(pure Python) ran with ROCKETSTORE_NATIVE=0; the others with the native extension. "
            + doc_blocks.interpreter_probe_text(result["interpreter_ns"]))


def results_table(result: dict[str, Any]) -> str:
    table: str = doc_blocks.markdown_table(
        ["scenario", "metric", "value", "anchor (same run)", "ratio", "goal"],
        ([r["scenario"], r["metric"], fmt(r["value"]), fmt(r["anchor"]), fmt(r["ratio"]), r["goal"]]
         for r in result["rows"]),
        right=(2, 3, 4))
    return table


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{setup_line(result)}\n")
    print(results_table(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="~10x less data (under 2 minutes)")
    ap.add_argument("--full", action="store_true", help="the large sizing: 1M messages, 4 GiB of 4 KiB records")
    ap.add_argument("--json", metavar="OUT", help="also write all results as JSON")
    ap.add_argument("--dir", help="parent of the scratch directory (default: system temp dir)")
    ap.add_argument("--only", help="comma-separated subset of s1..s6")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (store data and child logs)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile (thread CPU time) the put path of scenario 1, top 25 cumulative")
    ap.add_argument("--no-pure-python", dest="pure_python", action="store_false",
                    help="skip the pure-Python (ROCKETSTORE_NATIVE=0) runs of s1, s2 and s4")
    doc_blocks.add_doc_argument(ap, DOC_SECTION)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--params", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        result = CHILDREN[args.child](json.loads(args.params))
        result["implementation"] = native.IMPLEMENTATION
        print("RESULT " + json.dumps(result), flush=True)
        return
    if args.profile:
        prof = PROFILES["quick" if args.quick else "default"]
        scratch = tempfile.mkdtemp(prefix="storebench-prof-", dir=args.dir)
        try:
            r = run_child("s1", {"dir": scratch, "seg": prof["seg"], "msgs": min(prof["s1_msgs"], 50_000),
                                 "profile": True, "top": 25})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(r["profile"])
        return
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)  # before a long run, not after it
    result = run_all(args)
    print_table(result)
    if args.doc is not None:
        doc_blocks.replace_section(args.doc, DOC_SECTION, doc_blocks.generated_body(
            setup_line(result), results_table(result)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
