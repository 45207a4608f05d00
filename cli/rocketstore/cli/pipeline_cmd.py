"""``rocketstore pipeline``: Spark jobs over a store directory (the ``spark`` extra).

    rocketstore pipeline export|reindex|retention ...

The jobs and their options live in :mod:`rocketstore.pipeline.jobs`; PySpark is imported only
when a job runs, so the rest of the command line works without it. Without the ``spark`` extra
a job stops at once with one line saying how to install it (exit 2), not a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

from rocketstore.pipeline.jobs import add_job_parsers

#: what the jobs import, all installed by the ``spark`` extra
SPARK_EXTRA_MODULES = ("pyspark", "pyarrow", "numpy")
INSTALL_HINT = "pip install -e '.[spark]' (from the repository root)"


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pipeline`` and its jobs to the top-level parser."""
    pipeline = groups.add_parser(
        "pipeline", help="Spark jobs: export to Parquet, rebuild indexes, retention analytics",
        description="Spark jobs over a store directory (offline). Local mode by default; --master or spark-submit "
                    "for a cluster. Needs the spark extra: " + INSTALL_HINT,
    )
    jobs = pipeline.add_subparsers(dest="action", metavar="JOB", required=True)
    add_job_parsers(jobs)
    for job in jobs.choices.values():
        handler = job.get_default("handler")
        if handler is not None:
            job.set_defaults(handler=_needs_spark_extra(handler))


def missing_spark_modules() -> list[str]:
    """The modules of the ``spark`` extra that cannot be imported here."""
    missing = []
    for name in SPARK_EXTRA_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _needs_spark_extra(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        missing = missing_spark_modules()
        if missing:
            print(f"rocketstore pipeline {args.action}: error: {', '.join(missing)} not installed; the Spark jobs "
                  f"need the spark extra: {INSTALL_HINT}", file=sys.stderr)
            return 2
        return handler(args)

    return run
