#!/usr/bin/env python3
"""Offline scan throughput of the ``rocketstore`` data source, against a raw read of the same files.

    python3 bench/pipeline_bench.py                       # 800k messages of 1 KiB, local[2]
    python3 bench/pipeline_bench.py --messages 50000 --body-size 4096 --cores 2 --json out.json
    python3 bench/pipeline_bench.py --store-dir /data/store   # an existing store (read-only)

Rows, all in the same run over the same (page-cached) segment files:

* ``raw read``: the segments' written bytes read with 16 MiB ``readinto`` calls: the ceiling;
* ``reader fast path``: :func:`pipeline.reader.read_segment` in this process, one core, the
  vectorised decoder producing Arrow record batches (what a Spark task runs);
* ``reader reference``: the same with the engine's ``decode_record`` record by record;
* ``spark local[N]``: ``spark.read.format("rocketstore").load(DIR)`` written to the ``noop``
  sink, end to end (Python workers, Arrow to the JVM, rows); per core = total / N; the
  fastest of ``--repeat`` runs (the first warms the JIT and starts the Python workers);
* ``spark hand-over ceiling``: the same batches, decoded beforehand into Arrow IPC files (one
  per segment), served by a minimal Python data source that memory-maps them and yields them
  as they are. Nothing is decoded: this is what Spark itself costs to take Arrow batches of
  this schema from a Python data source and turn them into rows (the JVM side converts every
  column of every row to an UnsafeRow), the ceiling for any Python reader. Same noop sink,
  same --repeat rule.

Spark's per-query code generation is compiled by the JVM's JIT anew for every query, so
small stores understate Spark's steady rate: the default store is ~1 GB.

MB/s counts CommitLog record bytes (storeSize). "cpu" columns divide by the process's CPU
seconds instead of wall time: on a shared machine they are the fairer per-core number.
Goal: >= 200 MB/s per core with Arrow batches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyarrow as pa  # noqa: E402

from rocketstore.common.message import HostAddress, Message  # noqa: E402
from rocketstore.pipeline.options import ReadOptions  # noqa: E402
from rocketstore.pipeline.reader import SPARK_SCHEMA_DDL, ScanStats, read_segment  # noqa: E402
from rocketstore.store.config import StoreConfig  # noqa: E402
from rocketstore.store.message_store import DefaultMessageStore  # noqa: E402
from rocketstore.store.store_view import commit_log_segments  # noqa: E402

MB = 1_000_000


def build_store(root: str, messages: int, body_size: int, segment_size: int) -> StoreConfig:
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=segment_size, message_index_enable=False)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        body = os.urandom(body_size)
        for i in range(messages):
            msg = Message(topic=f"Bench{i % 4}", body=body, queue_id=i % 8,
                          properties={"TAGS": f"tag{i % 16}", "KEYS": f"order-{i}", "UNIQ_KEY": f"U{i:020d}"},
                          born_timestamp=1_700_000_000_000 + i, born_host=HostAddress("10.0.0.1", 40000 + i % 64))
            if not store.put_message(msg).ok:
                raise RuntimeError("put failed")
        store.reput_service.wait_caught_up(60)
    finally:
        store.shutdown()
    return cfg


def raw_read(options: ReadOptions, written: int) -> dict[str, Any]:
    buf = bytearray(16 * 1024 * 1024)
    total = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for seg in commit_log_segments(options.commit_log_dirs):
        left = min(seg.size, max(written - seg.from_offset, 0))
        with open(seg.path, "rb", buffering=0) as f:
            while left > 0:
                n = f.readinto(memoryview(buf)[: min(len(buf), left)])
                if not n:
                    break
                total += n
                left -= n
    return {"bytes": total, "rows": 0, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}


def reader(options: ReadOptions, fast: bool) -> dict[str, Any]:
    stats = ScanStats()
    wall, cpu = time.perf_counter(), time.process_time()
    for seg in commit_log_segments(options.commit_log_dirs):
        for _batch in read_segment(options, seg, stats, fast=fast):
            pass
    return {"bytes": stats.record_bytes, "rows": stats.rows, "wall": time.perf_counter() - wall,
            "cpu": time.process_time() - cpu}


def write_ipc(options: ReadOptions, out_dir: str) -> list[str]:
    """Every segment's batches, decoded now, as one Arrow IPC file each (for the ceiling row)."""
    paths = []
    for seg in commit_log_segments(options.commit_log_dirs):
        path = os.path.join(out_dir, os.path.basename(seg.path) + ".arrow")
        batches = list(read_segment(options, seg))
        if not batches:
            continue
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, batches[0].schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        paths.append(path)
    return paths


def _ipc_source() -> type:
    """A minimal data source yielding the batches of Arrow IPC files, memory-mapped (the ceiling row).

    Built in a function so that pyspark is imported only when Spark rows run; Spark pickles the
    class by value (it lives in ``__main__``), so its workers need nothing from this file.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class IpcPartition(InputPartition):
        def __init__(self, path: str) -> None:
            self.path = path

    class IpcReader(DataSourceReader):
        def __init__(self, paths: list[str]) -> None:
            self.paths = paths

        def partitions(self) -> list[IpcPartition]:
            return [IpcPartition(p) for p in self.paths]

        def read(self, partition: Any) -> Any:
            import pyarrow as pa

            with pa.memory_map(partition.path) as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)

    class IpcFiles(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow-ipc-files"

        def schema(self) -> str:
            return SPARK_SCHEMA_DDL

        def reader(self, schema: Any) -> IpcReader:
            return IpcReader(self.options["paths"].split(","))

    return IpcFiles


def spark_scans(root: str, ipc_paths: list[str], cores: int, record_bytes: int, rows: int,
                repeat: int) -> dict[str, dict[str, Any]]:
    """The end-to-end Spark row and the hand-over ceiling row, in one SparkSession."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers need the interpreter with the project
    from pyspark.sql import DataFrame, SparkSession

    from rocketstore.pipeline.source import RocketStoreDataSource

    spark = (SparkSession.builder.master(f"local[{cores}]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketStoreDataSource)
    spark.dataSource.register(_ipc_source())

    def fastest(df: DataFrame) -> float:
        times = []
        for _ in range(repeat):  # the first run also warms the JVM's JIT and starts the Python workers
            wall = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - wall)
        return min(times)

    try:
        scan = fastest(spark.read.format("rocketstore").load(root))
        ceiling = fastest(spark.read.format("arrow-ipc-files").option("paths", ",".join(ipc_paths)).load())
    finally:
        spark.stop()
    row = {"bytes": record_bytes, "rows": rows, "cpu": None, "cores": cores}
    return {f"spark local[{cores}] noop sink": {**row, "wall": scan},
            f"spark hand-over ceiling (pre-decoded Arrow IPC, local[{cores}])": {**row, "wall": ceiling}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=800_000)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--segment-size", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--store-dir", help="scan this existing store instead of building one")
    parser.add_argument("--dir", help="scratch directory for the generated store")
    parser.add_argument("--repeat", type=int, default=3, help="Spark scans to run; the fastest counts")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark end-to-end row")
    parser.add_argument("--json", metavar="OUT")
    args = parser.parse_args()

    scratch = None
    if args.store_dir:
        cfg = StoreConfig(store_path_root_dir=os.path.abspath(args.store_dir))
    else:
        scratch = tempfile.mkdtemp(prefix="pipeline-bench-", dir=args.dir)
        started = time.perf_counter()
        cfg = build_store(os.path.join(scratch, "store"), args.messages, args.body_size, args.segment_size)
        print(f"built {args.messages} x {args.body_size} B in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    try:
        options = ReadOptions.from_config(cfg)
        reader(options, True)  # warm the page cache and imports
        fast = reader(options, True)
        results: dict[str, dict[str, Any]] = {
            "raw read": raw_read(options, commit_log_segments(options.commit_log_dirs)[0].from_offset + fast["bytes"]),
            "reader fast path (Arrow)": fast,
            "reader reference (decode_record)": reader(options, False),
        }
        if not args.no_spark:
            with tempfile.TemporaryDirectory(prefix="pipeline-bench-ipc-", dir=args.dir) as ipc_dir:
                results.update(spark_scans(str(cfg.root_dir()), write_ipc(options, ipc_dir), args.cores,
                                           fast["bytes"], fast["rows"], args.repeat))
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)

    raw = results["raw read"]
    print(f"\n{fast['rows']} messages, {fast['bytes'] / MB:.1f} MB of records; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| scan | MB/s (wall) | MB/s per core | MB/s per CPU-s | rows/s per core | vs raw read |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        cores = r.get("cores", 1)
        mbps = r["bytes"] / MB / r["wall"]
        per_core = mbps / cores
        per_cpu = f"{r['bytes'] / MB / r['cpu']:.0f}" if r.get("cpu") else "-"
        rows = f"{r['rows'] / r['wall'] / cores:,.0f}" if r["rows"] else "-"
        ratio = per_core / (raw["bytes"] / MB / raw["wall"])
        print(f"| {name} | {mbps:.0f} | {per_core:.0f} | {per_cpu} | {rows} | {ratio:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
