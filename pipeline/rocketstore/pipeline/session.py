"""The SparkSession the jobs run in, and progress lines for long jobs.

Local mode (``local[*]``) is the embedded default; under spark-submit the session given by
the submitter (master, executors, ``--py-files``) is used as it is. Spark's Python workers
import :mod:`pipeline.source` by module name, so in local mode the directory holding the
``pipeline`` package is put on PYTHONPATH before the JVM starts; on a cluster ship the
packages with ``--py-files`` (or install the wheel on the executors).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from rocketstore.pipeline.source import RocketStoreDataSource

__all__ = ["get_spark", "progress"]

log = logging.getLogger("pipeline")
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def get_spark(master: str | None = None, app_name: str = "rocketstore-pipeline") -> SparkSession:
    """The active session, else a new one: on ``master`` when given, else on the master that
    spark-submit was given (``--master``, ``spark.master`` in spark-defaults.conf), else ``local[*]``."""
    active = SparkSession.getActiveSession()
    if active is None:
        paths = [_PACKAGE_ROOT, *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
        # spark-submit starts the JVM first and hands its gateway to this process (pyspark connects to
        # it when PYSPARK_GATEWAY_PORT is set); that JVM already carries the master spark-submit chose,
        # which setting one here would override. A bare `python -m rocketstore.pipeline.jobs` has no JVM yet.
        if master or "PYSPARK_GATEWAY_PORT" not in os.environ:
            builder = builder.master(master or "local[*]")
        active = builder.getOrCreate()
    active.dataSource.register(RocketStoreDataSource)
    return active


@contextmanager
def progress(spark: SparkSession, what: str, interval_s: float = 2.0) -> Iterator[None]:
    """Log a line whenever partitions of the running stages finish (``what: stage 3: 12/40 partitions``)."""
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    seen: dict[int, int] = {}

    def poll() -> None:
        while not stop.wait(interval_s):
            try:
                for stage_id in tracker.getActiveStageIds():
                    info = tracker.getStageInfo(stage_id)
                    if info is None or seen.get(stage_id) == info.numCompletedTasks:
                        continue
                    seen[stage_id] = info.numCompletedTasks
                    log.info("%s: stage %d (%s): %d/%d partitions done", what, stage_id, info.name,
                             info.numCompletedTasks, info.numTasks)
            except Exception as exc:  # the JVM went away at shutdown: progress lines are best effort
                log.debug("progress polling stopped: %s", exc)
                return

    thread = threading.Thread(target=poll, name=f"progress-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 1)
