"""Timed messages at scale: a million pending timers, what they cost to put and to index, the memory
they take, and how late due ones are delivered while the table is that large.

    python3 bench/timer_scale.py [--timers N] [--doc docs/benchmarks.md]

One store in a scratch directory (1 GiB segments, ASYNC_FLUSH), in this process:

1. anchor: N plain messages put (the same body and properties, no timer) into another store;
2. N timers due in an hour (``TIMER_DELAY_SEC=3600``) put, and indexed by the timer service into
   its table as they come (the rate counts until the last is indexed); the process's anonymous
   memory (RssAnon) before and after;
3. with the N timers pending, 2,000 more due in 2 s put at once: how late each is delivered
   (store time of the delivered record minus TIMER_OUT_MS).

Ratios are against the plain put rate of step 1, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import doc_blocks  # noqa: E402

from rocketstore.common import native  # noqa: E402
from rocketstore.common.message import Message  # noqa: E402
from rocketstore.store.config import StoreConfig  # noqa: E402
from rocketstore.store.message_store import DefaultMessageStore  # noqa: E402

DOC_SECTION = "timer"
BODY = b"x" * 256
DUE_TOGETHER = 2000


def rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def open_store(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(StoreConfig(store_path_root_dir=str(root)))
    store.load()
    store.start()
    return store


def put_rate(store: DefaultMessageStore, count: int, props: dict[str, str]) -> float:
    begin = time.perf_counter()
    for i in range(count):
        result = store.put_message(Message(topic="TimerBench", body=BODY, queue_id=i % 4,
                                           properties={**props, "UNIQ_KEY": f"U{i:012d}"}))
        if not result.ok:
            raise RuntimeError(f"put {i} failed: {result.status}")
    return count / (time.perf_counter() - begin)


def run(timers: int, scratch: Path) -> list[list[str]]:
    plain = open_store(scratch / "plain")
    try:
        anchor = put_rate(plain, timers, {"TAGS": "t"})
    finally:
        plain.shutdown()
    shutil.rmtree(scratch / "plain")

    store = open_store(scratch / "timers")
    try:
        rss_before = rss_anon_mb()
        begin = time.perf_counter()
        timer_put = put_rate(store, timers, {"TAGS": "t", "TIMER_DELAY_SEC": "3600"})
        service = store.timer_message_store
        while service.stats.pending_rows < timers:  # the service indexes while the puts go on
            time.sleep(0.01)
        indexed = timers / (time.perf_counter() - begin)
        rss_after = rss_anon_mb()
        table_mb = sum(p.stat().st_size for p in (scratch / "timers" / "timer").iterdir()) / 2**20

        due_at = int(time.time() * 1000) + 2000
        for i in range(DUE_TOGETHER):
            store.put_message(Message(topic="TimerDue", body=BODY, properties={
                "TIMER_DELIVER_MS": str(due_at), "UNIQ_KEY": f"D{i:08d}"}))
        deadline = time.monotonic() + 60
        while store.get_max_offset_in_queue("TimerDue", 0) < DUE_TOGETHER and time.monotonic() < deadline:
            time.sleep(0.01)
        cq = store.get_consume_queue("TimerDue", 0)
        late = []
        for entry in cq.iter_entries() if cq is not None else []:
            msg = store.look_message_by_offset(entry.commit_log_offset, entry.size)
            assert msg is not None
            late.append(msg.store_timestamp - int(msg.properties["TIMER_OUT_MS"]))
        if len(late) != DUE_TOGETHER:
            raise RuntimeError(f"only {len(late)} of {DUE_TOGETHER} due timers were delivered within 60 s")
    finally:
        store.shutdown()
    late.sort()
    p99 = late[int(len(late) * 0.99) - 1]
    return [
        ["put, plain message (anchor)", "msgs/s", f"{anchor:,.0f}", "1.00"],
        [f"put, timer due in 1 h (x{timers:,})", "msgs/s", f"{timer_put:,.0f}", f"{timer_put / anchor:.2f}"],
        ["timer put and indexed in the on-disk table", "timers/s", f"{indexed:,.0f}", f"{indexed / anchor:.2f}"],
        [f"memory for {timers:,} pending timers", "RssAnon growth, MB", f"{rss_after - rss_before:,.1f}", ""],
        ["timer table on disk", "bytes per timer", f"{table_mb * 2**20 / timers:,.0f}", ""],
        [f"{DUE_TOGETHER:,} due together, {timers:,} pending", "late by, ms: min / p50 / p99 / max",
         f"{late[0]} / {statistics.median(late):.0f} / {p99} / {late[-1]}", ""],
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timers", type=int, default=1_000_000, help="pending timers (default 1,000,000)")
    ap.add_argument("--dir", help="parent of the scratch directory (default: system temp dir)")
    doc_blocks.add_doc_argument(ap, DOC_SECTION)
    args = ap.parse_args()
    if args.doc is not None:
        doc_blocks.check_section(args.doc, DOC_SECTION)
    scratch = Path(tempfile.mkdtemp(prefix="timerbench-", dir=args.dir))
    try:
        rows = run(args.timers, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = doc_blocks.markdown_table(["what", "metric", "value", "ratio to the anchor"], rows, right=(2, 3))
    setup = (f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, hot path {native.IMPLEMENTATION}, "
             "one process, ASYNC_FLUSH, 1 GiB segments.")
    print(f"\n{setup}\n\n{table}")
    if args.doc is not None:
        doc_blocks.replace_section(args.doc, DOC_SECTION, doc_blocks.generated_body(setup, table))


if __name__ == "__main__":
    main()
