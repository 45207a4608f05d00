#!/usr/bin/env python3
"""Broker-backed ``rocketstore`` data source throughput, on our broker and on Apache RocketMQ's.

    python3 bench/pipeline_broker_bench.py                 # 200k messages of 1 KiB, local[2], ~5 min
    python3 bench/pipeline_broker_bench.py --quick         # 20k messages, ~2.5 min
    python3 bench/pipeline_broker_bench.py --messages 50000 --repeat 3 --no-java --json out.json

Both brokers run side by side for the whole run: ours (``rocketstore broker``, one process with
its embedded name server) and Apache RocketMQ 4.9.7 (name server + broker JVMs from Maven
Central, via tests/support/java_rocketmq.py), with fresh stores, ASYNC_FLUSH and the same
commit log segment size. On each, topics of 8 queues are created up front: ``read`` (loaded
once, then read), ``send`` (later plain-client send runs), ``sink`` (Spark writes) and ``warmup``.
Every measurement runs on one broker and then on the other, alternating which goes first from
one repetition to the next, so drifting background load hits both alike. Bodies are the same
everywhere: message ``i`` is ``str(i)`` padded with ``x`` to ``--body-size`` bytes (what Spark's
``rpad`` makes of ``spark.range``), so the Python client and the Spark sink send identical bytes.

Rows (fastest of ``--repeat`` runs unless said otherwise):

* read, ``spark local[N]``: ``spark.read.format("rocketstore").option("nameServer", NS)
  .option("topic", READ).load()`` written to the ``noop`` sink (8 queues -> 8 input partitions,
  ``pullBatchSize`` 32). One untimed aggregate runs first: it checks the row count and body
  bytes and warms the JIT and the Python workers.
* read, ``python PullConsumer``: one thread of this process pulls every queue of READ from its
  min to its max offset (32 per pull), decoding messages but building no Arrow batches: the cost
  of the client library alone, what a Spark task pays before Spark's own work.
* read, ``java push consumer`` (once; ``--no-java`` skips): the driver's ``bench-consume``
  (rocketmq-client 4.9.8 DefaultMQPushConsumer, fresh group, from the first offset, until N
  messages arrived). Its rate is the driver's own, first to last delivery (no JVM start, no
  rebalance wait); its client CPU includes the JVM's start.
* sink, ``spark local[N]``: ``spark.range(N, numPartitions=N cores)`` with a binary body column
  written with ``.write.format("rocketstore").option("nameServer", NS).option("topic", SINK)
  .mode("append").save()``: one task, with its own Producer, per core. An untimed 10-row write
  to ``warmup`` on each broker runs first: Spark's first write job of a session costs seconds
  more than later ones (~9 s on a loaded 2-core VM) whatever its size.
* sink, ``python send_batch``: one thread of this process sending the same N bodies with
  ``Producer.send_batch`` in batches of the sink's defaults (``sendBatchSize`` 64,
  ``sendBatchBytes`` 1 MiB). Its first run loads READ (on a fresh broker, so it pays for the
  first segment), later runs go to SEND.
* sink, ``java bench-produce`` (once; ``--no-java`` skips): closed-loop synchronous single-message
  ``send()`` of random bodies from 8 threads for a fixed time: a reference for what the brokers
  take from the Java client, not the same workload (no batches).

Columns: MB/s counts body bytes (N x body size); "per core" divides msgs/s by the cores the
client may use (Spark: N of local[N]; the Python client: 1; Java: not given). Client CPU is
utime+stime of the client: this process (Python client rows), Spark's JVM plus its live
descendants (the Python daemon and workers; a worker that exits mid-run is lost), or the
driver JVM (reaped child). Server CPU is the broker's (Apache: name server + broker JVMs) per
million messages. ``readable + s`` (writes): after the last send was acknowledged, how long
until GET_TOPIC_STATS_INFO counts every message in the topic's consume queues, i.e. until a
reader can see them (both brokers acknowledge a send once the CommitLog holds it and dispatch
to consume queues afterwards); each write run waits for it before the next run starts, and its
server CPU includes that wait. ``vs python`` = msgs/s over the Python client's on the same
broker and scenario; ``ours/Apache`` = msgs/s on ours over msgs/s on Apache for the same client.

Pinning: none. Spark local[N] needs all N cores for its N task slots, and on a 2-core machine
pinning the brokers to one core and the clients to the other (as run_broker_bench.py does for its
single-JVM load generator) would halve Spark's executors; broker and client share both cores
alike on both sides, and only one broker is under load at a time. The machine may be shared: the
header prints the load average (start, end and highest 1-minute value sampled between runs) and
each CPU's busy and steal share; compare ratios and CPU per message rather than absolute rates.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench", ROOT / "tests" / "support"):  # pipeline, run_broker_bench, java_rocketmq
    sys.path.insert(0, str(_path))

import doc_blocks  # noqa: E402
import java_rocketmq  # noqa: E402
from java_rocketmq import ClientDriver  # noqa: E402
from run_broker_bench import GiB, OurBroker, PinnedAnchor, cpu_times, fmt, proc_cpu_s, steal_share  # noqa: E402

from rocketstore.client import MQAdmin, Producer, PullConsumer  # noqa: E402
from rocketstore.pipeline.broker_offsets import queue_bounds  # noqa: E402
from rocketstore.pipeline.broker_options import DEFAULT_PULL_BATCH_SIZE, BrokerOptions  # noqa: E402

MB = 1_000_000
QUEUES = 8
JAVA_PRODUCE_THREADS = 8
JAVA_PRODUCE_TOPIC = "BenchJavaProduce"  # made by the Java client's first send (the brokers' default 4 queues)
CLIENT_HEAP = "1g"
#: an untimed sink job before the timed ones: Spark's first write job of a session costs ~9 s more
#: than the next (on a 2-core VM) whatever its size, which would fall on whichever broker goes first
WARMUP_SINK_ROWS = 10
#: the sink's batching defaults, which the plain-client anchor copies
_SINK_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BrokerOptions) if isinstance(f.default, int)}


@dataclass
class Side:
    """One broker under test: its name server, its server processes, and the topics made on it."""

    name: str  # "rocketstore" or "apache"
    namesrv: str
    pids: dict[str, int]
    driver: ClientDriver | None
    topics: dict[str, str]

    def server_cpu_s(self) -> float:
        return sum(proc_cpu_s(pid) for pid in self.pids.values())


def body(i: int, size: int) -> bytes:
    """Message i's body: what Spark's ``cast(rpad(cast(id as string), size, 'x') as binary)`` gives."""
    return str(i).ljust(size, "x")[:size].encode()


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of ``pid`` and each of its live descendants (/proc/PID/task/TID/children)."""
    out: dict[int, float] = {}
    stack = [pid]
    while stack:
        p = stack.pop()
        if p in out:
            continue
        out[p] = proc_cpu_s(p)
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            with contextlib.suppress(FileNotFoundError):  # the thread or process ended meanwhile
                stack.extend(int(c) for c in Path(f"/proc/{p}/task/{tid}/children").read_text().split())
    return out


def children_cpu_s() -> float:
    """CPU seconds of reaped children (a Java driver run, once subprocess.run has waited for it)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(side: Side, client_cpu: Callable[[], float], fn: Callable[[], dict[str, Any]],
            written: Callable[[dict[str, Any]], tuple[str, int]] | None = None) -> dict[str, Any]:
    """Run ``fn`` and time it: wall, client CPU and server CPU. ``fn`` returns at least messages and
    bytes; a ``wall_s`` it returns (a rate window the client measured itself) replaces the wall time.

    For a write, ``written(result)`` names the topic and the message count it must reach: after the
    timed part this waits for it (``readable_after_s``) and the server CPU includes that wait, so a
    broker's dispatch backlog is neither left to slow the next measurement nor left uncounted."""
    c0, s0, t0 = client_cpu(), side.server_cpu_s(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    client = client_cpu() - c0
    settled = {} if written is None else {"readable_after_s": readable_after(side.namesrv, *written(out))}
    return {"wall_s": wall, "client_cpu_s": client, "server_cpu_s": side.server_cpu_s() - s0, **settled, **out}


def fastest(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = dict(min(runs, key=lambda r: r["wall_s"]))
    best["all_wall_s"] = [round(r["wall_s"], 3) for r in runs]
    return best


# -- plain clients -------------------------------------------------------------------------------


def batches(messages: int, size: int) -> Iterator[list[bytes]]:
    """Bodies 0..messages-1 cut as the sink cuts them (sendBatchSize / sendBatchBytes)."""
    max_n, max_bytes = _SINK_DEFAULTS["send_batch_size"], _SINK_DEFAULTS["send_batch_bytes"]
    chunk: list[bytes] = []
    chunk_bytes = 0
    for i in range(messages):
        b = body(i, size)
        chunk.append(b)
        chunk_bytes += len(b)
        if len(chunk) >= max_n or chunk_bytes >= max_bytes:
            yield chunk
            chunk, chunk_bytes = [], 0
    if chunk:
        yield chunk


def python_send(namesrv: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    """One thread, one Producer, every batch with send_batch. Making the bodies is timed too, as the
    sink's conversion of its rows is."""
    sent = nbytes = 0
    with Producer(namesrv, "bench-python-producer") as producer:
        for chunk in batches(messages, size):
            producer.send_batch(topic, chunk)
            sent += len(chunk)
            nbytes += sum(map(len, chunk))
    return {"messages": sent, "bytes": nbytes}


def python_drain(namesrv: str, topic: str) -> dict[str, Any]:
    """One thread, one PullConsumer: every queue of ``topic`` from its min to its max offset."""
    bounds = queue_bounds(BrokerOptions(name_server=namesrv, topics=(topic,)))
    got = nbytes = 0
    with PullConsumer(namesrv, "bench-python-drain") as consumer:
        for mq, b in sorted(bounds.items()):
            offset = b.min_offset
            while offset < b.max_offset:
                result = consumer.pull(mq, offset, max_nums=min(DEFAULT_PULL_BATCH_SIZE, b.max_offset - offset))
                if not result.messages:
                    raise RuntimeError(f"{mq}: pull at {offset} gave {result.status} and no messages")
                got += len(result.messages)
                nbytes += sum(len(m.body) for m in result.messages)
                offset = result.next_begin_offset
    return {"messages": got, "bytes": nbytes}


def topic_total(namesrv: str, topic: str) -> int:
    """Messages in ``topic`` now (sum of max - min offsets over its queues)."""
    with MQAdmin(namesrv) as admin:
        return sum(s.max_offset - s.min_offset for s in admin.topic_status(topic))


def readable_after(namesrv: str, topic: str, expected: int, timeout: float = 120.0) -> float:
    """Seconds until the queues of ``topic`` hold ``expected`` messages (GET_TOPIC_STATS_INFO).

    A broker acknowledges a send once its CommitLog holds the message; pulls (and the Spark
    reader's planning) see it only after the broker dispatched it to its consume queue, which
    happens after the acknowledgement on both brokers."""
    t0 = time.perf_counter()
    while True:
        got = topic_total(namesrv, topic)
        if got == expected:
            return time.perf_counter() - t0
        if got > expected or time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{namesrv}: topic {topic} holds {got} messages after {time.perf_counter() - t0:.1f} s, "
                               f"expected {expected}")
        time.sleep(0.02)


# -- Spark ---------------------------------------------------------------------------------------


def start_spark(cores: int) -> Any:
    """A local[cores] SparkSession whose Python workers can import ``rocketstore.pipeline``."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # Spark starts its Python workers with `python3` from PATH unless told: use this interpreter,
    # the one with the project installed
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from rocketstore.pipeline.source import RocketStoreDataSource

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("pipeline-broker-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(RocketStoreDataSource)
    return spark


def spark_reader(spark: Any, namesrv: str, topic: str) -> Any:
    return spark.read.format("rocketstore").option("nameServer", namesrv).option("topic", topic).load()


def spark_check_read(spark: Any, namesrv: str, topic: str, messages: int, size: int) -> None:
    """Untimed: every message is read once, with its whole body (and the JIT and workers warm up)."""
    from pyspark.sql import functions as F

    row = spark_reader(spark, namesrv, topic).agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("b"),
                                                  F.countDistinct("body").alias("d")).collect()[0]
    if (row.n, row.b, row.d) != (messages, messages * size, messages):
        raise RuntimeError(f"Spark read of {topic} at {namesrv}: {row.n} rows, {row.b} body bytes, {row.d} "
                           f"distinct bodies; expected {messages}, {messages * size}, {messages}")


def spark_read(spark: Any, namesrv: str, topic: str, messages: int, size: int) -> dict[str, Any]:
    spark_reader(spark, namesrv, topic).write.format("noop").mode("overwrite").save()
    return {"messages": messages, "bytes": messages * size}


def spark_sink(spark: Any, namesrv: str, topic: str, messages: int, size: int, cores: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    df = spark.range(0, messages, 1, cores).select(
        F.expr(f"cast(rpad(cast(id as string), {size}, 'x') as binary)").alias("body"))
    df.write.format("rocketstore").option("nameServer", namesrv).option("topic", topic).mode("append").save()
    return {"messages": messages, "bytes": messages * size}


# -- the run -------------------------------------------------------------------------------------


def run(args: argparse.Namespace, scratch: Path, log: Callable[[str], None],
        loads: list[float]) -> dict[str, dict[str, dict[str, Any]]]:
    """results[row][broker] for the rows of ROWS."""
    n, size, cores, repeat = args.messages, args.body_size, args.cores, args.repeat
    anchor = PinnedAnchor(scratch / "apache", heap=args.heap,
                          broker_config={"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": str(args.segment)})
    ours = OurBroker(scratch / "rocketstore", "ASYNC_FLUSH", args.segment, None)
    spark = None
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        log(f"starting Apache RocketMQ {java_rocketmq.ANCHOR_VERSION} (heap {args.heap}) and rocketstore")
        anchor.start()
        ours.start()
        sides = []
        for name, namesrv, pids in (("rocketstore", ours.namesrv_addr, ours.pids()),
                                    ("apache", anchor.namesrv_addr, anchor.pids())):
            topics = {kind: f"Bench{kind.capitalize()}" for kind in ("read", "send", "sink", "warmup")}
            with MQAdmin(namesrv) as admin:
                for topic in topics.values():
                    admin.create_topic(topic, QUEUES, QUEUES)
            driver = None if args.no_java else ClientDriver(namesrv, scratch / f"client-{name}")
            sides.append(Side(name, namesrv, pids, driver, topics))

        def timed(row: str, what: str, client_cpu: Callable[[], float], fn: Callable[[Side, int], dict[str, Any]],
                  times: int = repeat, written: Callable[[Side, int, dict[str, Any]], tuple[str, int]] | None = None,
                  ) -> None:
            """``times`` runs of ``fn(side, run)`` on each broker, alternating which broker goes first;
            ``written(side, run, result)``: see :func:`measure`."""
            for i in range(times):
                loads.append(os.getloadavg()[0])
                for side in sides if i % 2 == 0 else sides[::-1]:
                    log(f"{side.name}: {what} (run {i + 1}/{times})")
                    runs.setdefault(row, {}).setdefault(side.name, []).append(measure(
                        side, client_cpu, functools.partial(fn, side, i),
                        None if written is None else functools.partial(written, side, i)))

        # the first run on each broker loads the read topic, later ones go to the send topic
        timed("sink/python", f"python send_batch of {n} x {size} B", time.process_time,
              lambda s, i: python_send(s.namesrv, s.topics["send" if i else "read"], n, size),
              written=lambda s, i, _: (s.topics["send"], n * i) if i else (s.topics["read"], n))
        timed("read/python", "python PullConsumer drain", time.process_time,
              lambda s, _: python_drain(s.namesrv, s.topics["read"]))

        log(f"starting Spark local[{cores}]")
        spark = start_spark(cores)
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

        def spark_cpu() -> float:
            return sum(tree_cpu(jvm_pid).values())

        for side in sides:
            log(f"{side.name}: Spark read check (untimed aggregate)")
            spark_check_read(spark, side.namesrv, side.topics["read"], n, size)
        timed("read/spark", "Spark read -> noop", spark_cpu,
              lambda s, _: spark_read(spark, s.namesrv, s.topics["read"], n, size))
        for side in sides:
            log(f"{side.name}: Spark sink warm-up (untimed, {WARMUP_SINK_ROWS} rows)")
            spark_sink(spark, side.namesrv, side.topics["warmup"], WARMUP_SINK_ROWS, size, cores)
            readable_after(side.namesrv, side.topics["warmup"], WARMUP_SINK_ROWS)
        timed("sink/spark", f"Spark sink of {n} rows", spark_cpu,
              lambda s, _: spark_sink(spark, s.namesrv, s.topics["sink"], n, size, cores),
              written=lambda s, i, _: (s.topics["sink"], n * (i + 1)))
        if not args.no_java:
            timed("read/java", f"java bench-consume of {n} messages", children_cpu_s,
                  lambda s, _: java_consume(s, n, size, args.java_timeout), times=1)
            # bench-produce sends one untimed message first
            timed("sink/java", f"java bench-produce, {JAVA_PRODUCE_THREADS} threads, {args.java_seconds} s",
                  children_cpu_s, lambda s, _: java_produce(s, size, args.java_seconds), times=1,
                  written=lambda s, i, r: (JAVA_PRODUCE_TOPIC, r["messages"] + 1))
    finally:
        if spark is not None:
            spark.stop()
        log(f"servers stopped, exit codes: apache {anchor.stop()}, rocketstore {ours.stop()}")
    return {row: {broker: fastest(rs) for broker, rs in by_broker.items()} for row, by_broker in runs.items()}


def java_consume(side: Side, n: int, size: int, timeout_s: int) -> dict[str, Any]:
    """bench-consume until ``n`` messages arrived; the rate window is the driver's (first to last delivery)."""
    assert side.driver is not None
    summary = side.driver.bench_consume(side.topics["read"], f"bench-java-consume-{side.name}", seconds=timeout_s,
                                        stop_after=n, heap=CLIENT_HEAP)
    consumed = int(summary["consumed"])
    if consumed < n:
        raise RuntimeError(f"{side.name}: java bench-consume got {consumed} of {n} messages in {timeout_s} s")
    return {"messages": consumed, "bytes": consumed * size, "wall_s": consumed / summary["tps"],
            "driver_wall_s": summary["seconds"]}


def java_produce(side: Side, size: int, seconds: int) -> dict[str, Any]:
    """bench-produce for ``seconds``; the rate window is the driver's sending time (no JVM start)."""
    assert side.driver is not None
    summary = side.driver.bench_produce(JAVA_PRODUCE_TOPIC, threads=JAVA_PRODUCE_THREADS, size=size,
                                        seconds=seconds, heap=CLIENT_HEAP)
    if summary["failed"]:
        raise RuntimeError(f"{side.name}: java bench-produce: {summary['failed']} sends failed")
    sent = int(summary["sent"])
    return {"messages": sent, "bytes": sent * size, "wall_s": summary["seconds"], "p99_ms": summary["p99_ms"]}


# -- report --------------------------------------------------------------------------------------

ROWS = {
    "read/spark": ("read", "spark local[{cores}] -> noop"),
    "read/python": ("read", "python PullConsumer, 1 thread"),
    "read/java": ("read", "java push consumer (bench-consume)"),
    "sink/spark": ("sink", "spark local[{cores}] .write.save()"),
    "sink/python": ("sink", "python send_batch({batch}), 1 thread"),
    "sink/java": ("sink", f"java sync send, {JAVA_PRODUCE_THREADS} threads (bench-produce)"),
}


def rate(r: dict[str, Any]) -> float:
    return float(r["messages"]) / float(r["wall_s"])


def print_table(setup: dict[str, Any], results: dict[str, dict[str, dict[str, Any]]]) -> None:
    cores = setup["cores"]
    print(f"\npipeline broker benchmark: {setup['messages']:,} messages of {setup['body_size']} B per run, "
          f"topics of {QUEUES} queues, spark local[{cores}], fastest of {setup['repeat']} runs; "
          f"rocketstore (Python {setup['python']}) vs Apache RocketMQ {setup['apache_version']} "
          f"(-Xms/-Xmx {setup['heap']}), ASYNC_FLUSH, commit log segments {setup['segment']:,} B; no pinning")
    print(f"nproc={setup['nproc']} loadavg start={setup['loadavg_start']} end={setup['loadavg_end']} "
          f"max 1-min between runs={setup['loadavg_max']:.2f}; total {setup['total_wall_s']:.0f} s")
    print("CPU during the run: " + ", ".join(f"{name} busy {v['busy']:.0%} steal {v['steal']:.0%}"
                                             for name, v in setup["cpu_shares"].items()) + "\n")
    print("| scenario | client | broker | msgs | best s | MB/s | msgs/s | msgs/s per core | client CPU s | "
          "server CPU s / 1M msgs | readable + s | vs python (same broker) | ours / Apache |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    batch = setup["send_batch_size"]
    for key, (scenario, label) in ROWS.items():
        by_broker = results.get(key)
        if not by_broker:
            continue
        client = label.format(cores=cores, batch=batch)
        per_core_div = cores if key.endswith("/spark") else 1 if key.endswith("/python") else None
        plain = results.get(f"{scenario}/python", {})
        for broker in ("rocketstore", "apache"):
            r = by_broker[broker]
            per_core = fmt(rate(r) / per_core_div) if per_core_div else "-"
            vs = fmt(rate(r) / rate(plain[broker])) if broker in plain and not key.endswith("/python") else ""
            ratio = fmt(rate(r) / rate(by_broker["apache"])) if broker == "rocketstore" else ""
            readable = f"{r['readable_after_s']:.2f}" if "readable_after_s" in r else ""
            print(f"| {scenario} | {client} | {broker} | {r['messages']:,} | {r['wall_s']:.2f} | "
                  f"{r['bytes'] / MB / r['wall_s']:.1f} | {fmt(rate(r))} | {per_core} | {r['client_cpu_s']:.1f} | "
                  f"{fmt(1e6 * r['server_cpu_s'] / max(r['messages'], 1))} | {readable} | {vs} | {ratio} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20k messages (unless --messages), 5 s java produce")
    ap.add_argument("--messages", type=int, help="messages per run (default 200000, --quick 20000)")
    ap.add_argument("--body-size", type=int, default=1024)
    ap.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs of each timed row, after the untimed warm-ups; the fastest counts (2)")
    ap.add_argument("--segment", type=int, default=GiB, help="mappedFileSizeCommitLog of both brokers (1 GiB)")
    ap.add_argument("--heap", default=java_rocketmq.DEFAULT_HEAP, help="-Xms/-Xmx of Apache's name server and broker")
    ap.add_argument("--no-java", action="store_true", help="skip the Java client driver rows")
    ap.add_argument("--java-seconds", type=int, help="java bench-produce duration (default 10, --quick 5)")
    ap.add_argument("--java-timeout", type=int, default=180, help="seconds bench-consume may take to drain")
    ap.add_argument("--json", metavar="OUT", help="also write setup and results as JSON")
    ap.add_argument("--dir", help="parent of the scratch directory (default: system temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (stores, logs)")
    args = ap.parse_args()
    args.messages = args.messages or (20_000 if args.quick else 200_000)
    args.java_seconds = args.java_seconds or (5 if args.quick else 10)
    if args.repeat < 1 or args.messages < 1:
        ap.error("--repeat and --messages must be at least 1")
    java_rocketmq.build_anchor()
    if not args.no_java:
        java_rocketmq.build_driver()
    t_start = time.monotonic()
    cpu_start = cpu_times()
    loadavg_start = tuple(round(x, 2) for x in os.getloadavg())
    loads = [loadavg_start[0]]

    def log(msg: str) -> None:
        print(f"{time.monotonic() - t_start:6.1f}s {msg}", file=sys.stderr, flush=True)

    with doc_blocks.scratch_dir(args, "pipeline-broker-bench-") as scratch:
        results = run(args, scratch, log, loads)
    loads.append(os.getloadavg()[0])
    setup = dict(messages=args.messages, body_size=args.body_size, cores=args.cores, repeat=args.repeat,
                 segment=args.segment, heap=args.heap, apache_version=java_rocketmq.ANCHOR_VERSION,
                 python=sys.version.split()[0], send_batch_size=_SINK_DEFAULTS["send_batch_size"],
                 nproc=os.cpu_count(), loadavg_start=loadavg_start,
                 loadavg_end=tuple(round(x, 2) for x in os.getloadavg()), loadavg_max=max(loads),
                 total_wall_s=time.monotonic() - t_start, cpu_shares=steal_share(cpu_start, cpu_times()))
    print_table(setup, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
