"""Pipeline jobs: export, reindex, retention.

    rocketstore pipeline export    --store-dir DIR [-c broker.conf] --output OUT [--topics A,B]
                                   [--start-time T] [--end-time T] [--start-offset X] [--end-offset Y]
                                   [--mode errorifexists|overwrite|append]
    rocketstore pipeline reindex   --store-dir DIR [-c broker.conf] --output OUT [--repair] [--json]
    rocketstore pipeline retention --store-dir DIR [-c broker.conf] --output OUT
                                   [--candidates 12,24,48,72,168] [--now MS] [--json]

The same command lines run under spark-submit (the session comes from the submitter)::

    spark-submit --py-files rocketstore.zip pipeline/rocketstore/pipeline/jobs.py export --store-dir ... --output ...
    python -m rocketstore.pipeline.jobs reindex --store-dir ... --output ...

``--master`` picks the Spark master when no session exists (default ``local[*]``).
Exit codes: 0 success; 1 reindex found differences (and did not repair them); 2 the job could
not run (missing or corrupt store, bad option, a store running during ``--repair``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

if __package__ in (None, ""):  # a script path under spark-submit: this file's package root joins the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from rocketstore.pipeline.options import OptionError, parse_time, store_config
from rocketstore.store.config import ConfigError, StoreConfig

__all__ = ["add_job_parsers", "export", "main", "reindex", "retention"]

log = logging.getLogger("pipeline")


def _read(spark: Any, config: StoreConfig, broker_conf: str | None, **options: str) -> Any:
    reader = spark.read.format("rocketstore").option("path", str(config.root_dir()))
    if broker_conf:
        reader = reader.option("brokerConf", broker_conf)
    for key, value in options.items():
        if value is not None:
            reader = reader.option(key, value)
    return reader.load()


def export(
    spark: Any, config: StoreConfig, output: str, *, broker_conf: str | None = None, topics: str | None = None,
    start_time: str | None = None, end_time: str | None = None, start_offset: int | None = None,
    end_offset: int | None = None, mode: str = "errorifexists",
) -> int:
    """Write the selected messages as Parquet under ``output``, partitioned by ``topic`` and ``date``
    (UTC day of storeTimestamp); returns the number of messages written."""
    from pyspark.sql import functions as F

    from rocketstore.pipeline.session import progress

    options = {"topics": topics, "startTime": start_time, "endTime": end_time,
               "startOffset": None if start_offset is None else str(start_offset),
               "endOffset": None if end_offset is None else str(end_offset)}
    df = _read(spark, config, broker_conf, **{k: v for k, v in options.items() if v is not None})
    df = df.withColumn("date", F.to_date(F.from_utc_timestamp("storeTimestamp", "UTC")))
    spark.sparkContext.setJobDescription(f"rocketstore export {config.root_dir()} -> {output}")
    with progress(spark, "export"):
        df.write.mode(mode).partitionBy("topic", "date").parquet(output)
    count = int(spark.read.parquet(output).count()) if mode != "append" else -1
    log.info("export: %s messages written to %s", count if count >= 0 else "some", output)
    return count


def reindex(spark: Any, config: StoreConfig, output: str, *, broker_conf: str | None = None,
            repair: bool = False) -> Any:
    """Rebuild consume queues and index files into ``output`` and compare (see :mod:`pipeline.reindex`);
    with ``repair``, swap them into the store when they differ. Returns the ReindexReport."""
    from rocketstore.pipeline.reindex import repair_store, run_reindex
    from rocketstore.pipeline.session import progress

    df = _read(spark, config, broker_conf)
    spark.sparkContext.setJobDescription(f"rocketstore reindex {config.root_dir()}")
    with progress(spark, "reindex"):
        report = run_reindex(spark, config, output, df)
    if repair and not report.ok:
        repair_store(config, output, include_index=config.message_index_enable)
        report.repaired = True
    return report


def retention(spark: Any, config: StoreConfig, output: str, *, broker_conf: str | None = None,
              candidates: tuple[int, ...] | None = None, now_ms: int | None = None) -> dict[str, Any]:
    """Retention analytics written to ``output/retention.json`` (schema in :mod:`pipeline.retention`)."""
    from rocketstore.pipeline.retention import DEFAULT_CANDIDATES, retention_summary
    from rocketstore.pipeline.session import progress

    df = _read(spark, config, broker_conf)
    with progress(spark, "retention"):
        return retention_summary(config, df, output, candidates or DEFAULT_CANDIDATES, now_ms)


# -- command line ---------------------------------------------------------------------------------
def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-dir", metavar="DIR",
                        help="store root directory (overrides storePathRootDir from -c)")
    parser.add_argument("-c", "--config", metavar="BROKER_CONF", help="the store's broker.conf (sizes, paths)")
    parser.add_argument("--output", required=True, metavar="DIR", help="where the job writes its results")
    parser.add_argument("--master", help="Spark master when no session exists (default local[*])")
    parser.add_argument("--json", action="store_true", help="machine-readable result on stdout")


def _candidates(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected hours like 24,48,72") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive hours like 24,48,72")
    return values


def add_job_parsers(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``export``, ``reindex`` and ``retention`` (each with ``handler``) to ``actions``."""
    exp = actions.add_parser("export", help="messages to Parquet, partitioned by topic and date",
                             description="Export messages (all, or some topics, in an offset/time range) to "
                                         "Parquet partitioned by topic and date (UTC).")
    _common(exp)
    exp.add_argument("--topics", help="comma-separated topics (default: all)")
    exp.add_argument("--start-time", help="storeTimestamp from (epoch ms or ISO 8601, inclusive)")
    exp.add_argument("--end-time", help="storeTimestamp until (exclusive)")
    exp.add_argument("--start-offset", type=int, help="physical offset from (inclusive)")
    exp.add_argument("--end-offset", type=int, help="physical offset until (exclusive)")
    exp.add_argument("--mode", default="errorifexists", choices=("errorifexists", "overwrite", "append", "ignore"),
                     help="when OUTPUT exists (default errorifexists)")
    exp.set_defaults(handler=_handler(_export))

    rei = actions.add_parser("reindex", help="rebuild consume queues and index files, compare, repair",
                             description="Rebuild ConsumeQueue and IndexFile from the CommitLog into OUTPUT, "
                                         "list every difference from the store's files; exit 1 when any.")
    _common(rei)
    rei.add_argument("--repair", action="store_true",
                     help="replace the store's consumequeue/ and index/ with the rebuilt ones when they differ "
                          "(refused while a store runs on the directory)")
    rei.set_defaults(handler=_handler(_reindex))

    ret = actions.add_parser("retention", help="bytes per topic and hour, segment ages, disk for fileReservedTime",
                             description="Retention analytics written to OUTPUT/retention.json.")
    _common(ret)
    ret.add_argument("--candidates", type=_candidates, help="fileReservedTime hours to project (12,24,48,72,168)")
    ret.add_argument("--now", help="measure ages against this time (epoch ms or ISO 8601; default now)")
    ret.set_defaults(handler=_handler(_retention))


def _config(args: argparse.Namespace) -> StoreConfig:
    if not args.store_dir and not args.config:
        raise OptionError("give --store-dir or -c broker.conf")
    return store_config(args.store_dir, args.config)


def _handler(job: Callable[[argparse.Namespace, StoreConfig, Any], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        try:
            config = _config(args)
            from rocketstore.pipeline.session import get_spark

            spark = get_spark(args.master)
            return job(args, config, spark)
        except (OptionError, ConfigError, FileExistsError) as exc:
            print(f"rocketstore pipeline: error: {exc}", file=sys.stderr)
        except Exception as exc:  # Spark wraps the reader's errors; print the first line of the cause
            from rocketstore.pipeline.reader import CorruptStoreError
            from rocketstore.store.store_lock import StoreLockedError

            if not isinstance(exc, CorruptStoreError | StoreLockedError | OSError) and \
                    "CorruptStoreError" not in str(exc) and "StoreNotFoundError" not in str(exc) and \
                    "OptionError" not in str(exc):
                raise
            print(f"rocketstore pipeline: error: {_cause(exc)}", file=sys.stderr)
        return 2

    return run


def _cause(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("CorruptStoreError: ", "StoreNotFoundError: ", "OptionError: "):
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0]
    return text.splitlines()[0] if text else type(exc).__name__


def _export(args: argparse.Namespace, config: StoreConfig, spark: Any) -> int:
    count = export(spark, config, args.output, broker_conf=args.config, topics=args.topics,
                   start_time=args.start_time, end_time=args.end_time, start_offset=args.start_offset,
                   end_offset=args.end_offset, mode=args.mode)
    if args.json:
        print(json.dumps({"output": args.output, "messages": count}))
    else:
        print(f"exported {count} messages to {args.output}")
    return 0


def _reindex(args: argparse.Namespace, config: StoreConfig, spark: Any) -> int:
    report = reindex(spark, config, args.output, broker_conf=args.config, repair=args.repair)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        state = "OK" if report.ok else f"{report.difference_count} differences"
        print(f"{config.root_dir()}: {state} ({report.queues} queues, {report.consume_queue_entries} consume queue "
              f"entries, {report.index_entries} index entries rebuilt in {report.output_dir})")
        for line in [*report.consume_queue_differences, *report.index_differences]:
            print(f"  {line}")
        for note in report.notes:
            print(f"  note: {note}")
        if report.repaired:
            print("  repaired: consumequeue/ and index/ replaced with the rebuilt files")
    return 0 if report.ok or report.repaired else 1


def _retention(args: argparse.Namespace, config: StoreConfig, spark: Any) -> int:
    now = parse_time("--now", args.now) if args.now else None
    summary = retention(spark, config, args.output, broker_conf=args.config, candidates=args.candidates, now_ms=now)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    t = summary["totals"]
    print(f"{summary['store_dir']}: {t['messages']} messages, {t['record_bytes']} bytes in {t['segments']} segments; "
          f"ingest {summary['ingest']['bytes_per_hour']:.0f} B/h")
    for p in summary["projections"]:
        print(f"  fileReservedTime={p['file_reserved_time_hours']}h: keeps {p['retained_segments_now']} segments "
              f"({p['retained_bytes_now']} B) now, steady state ~{p['projected_commit_log_bytes']} B")
    print(f"  details: {os.path.join(args.output, 'retention.json')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocketstore pipeline", description="RocketStore pipeline jobs on Spark.")
    add_job_parsers(parser.add_subparsers(dest="action", metavar="JOB", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
