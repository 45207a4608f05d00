"""``rocketstore pipeline``: Spark jobs over a store directory (the ``spark`` extra).

    rocketstore pipeline export|reindex|retention ...

The jobs and their options live in :mod:`pipeline.jobs`; PySpark is imported only when a
job runs, so the rest of the command line works without it.
"""

from __future__ import annotations

import argparse

from rocketstore.pipeline.jobs import add_job_parsers


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``pipeline`` and its jobs to the top-level parser."""
    pipeline = groups.add_parser(
        "pipeline", help="Spark jobs: export to Parquet, rebuild indexes, retention analytics",
        description="Spark jobs over a store directory (offline). Local mode by default; --master or spark-submit "
                    "for a cluster.",
    )
    add_job_parsers(pipeline.add_subparsers(dest="action", metavar="JOB", required=True))
