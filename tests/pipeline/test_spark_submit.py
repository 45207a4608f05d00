"""The jobs under spark-submit on a real Spark standalone cluster (a master and a worker JVM).

This is what "the same jobs run on a Spark cluster" means for a user: the packages shipped to
the executors with ``--py-files`` (a zip made with Python's own zipfile command, as docs/pipeline.md
says), the master given to spark-submit and honoured by the job, the executors in processes of
their own that know nothing of this repository. The worker's executor processes are started
from a working directory and environment without the repository on PYTHONPATH, so a job whose
data source was not shipped fails here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
from pipeline_fixtures import ROOT, Written
from ports import free_port

from rocketstore.store.offline import dump_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPARK_BIN = Path(pyspark.__file__).parent / "bin"


def _clean_env(tmp: Path) -> dict[str, str]:
    """The environment of a machine where only pyspark is installed: no repository on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_MASTER")}
    return {**env, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOG_DIR": str(tmp / "logs"), "HOME": str(tmp)}


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"port {port} not listening after {timeout} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A standalone master and one worker (1 core, 1 GiB), both real JVMs from the pyspark install."""
    tmp = tmp_path_factory.mktemp("spark-cluster")
    env = _clean_env(tmp)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = tmp / "master.log"
        with open(master_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT))
        _wait_for_port(port, procs[0], master_log)
        worker_log = tmp / "worker.log"
        with open(worker_log, "wb") as out:
            procs.append(subprocess.Popen(
                [str(SPARK_BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()), "--work-dir",
                 str(tmp / "work")],
                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 90
        while b"Successfully registered with master" not in worker_log.read_bytes():
            assert procs[1].poll() is None and time.monotonic() < deadline, worker_log.read_text()[-2000:]
            time.sleep(0.5)
        yield url, tmp / "work"
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_export_under_spark_submit_on_a_standalone_cluster(cluster: tuple[str, Path], pristine: Written,
                                                            project_wheel: Path, tmp_path: Path) -> None:
    url, work_dir = cluster
    env = _clean_env(tmp_path)
    # as docs/pipeline.md says: the project's wheel is the zip of its `rocketstore` namespace
    py_files = tmp_path / "rocketstore.zip"
    shutil.copy(project_wheel, py_files)
    out = tmp_path / "export"
    job = subprocess.run(
        [str(SPARK_BIN / "spark-submit"), "--master", url, "--py-files", str(py_files),
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
         str(ROOT / "pipeline" / "rocketstore" / "pipeline" / "jobs.py"), "export",
         "--store-dir", str(pristine.cfg.root_dir()),
         "--output", str(out), "--topics", "TopicA,TopicB", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr[-4000:]
    expected = sorted(m.physical_offset for m in dump_messages(pristine.cfg) if m.topic in ("TopicA", "TopicB"))
    # spark-submit's PythonRunner merges the driver's stderr (the log lines) into its stdout
    reports = [json.loads(line) for line in job.stdout.splitlines() if line.startswith("{")]
    assert [r["messages"] for r in reports] == [len(expected)]
    table = pq.read_table(out)
    assert sorted(table.column("commitLogOffset").to_pylist()) == expected
    # the executors ran on the worker (an application directory with executor logs), so the master
    # given to spark-submit reached the job and the data source came from --py-files
    executor_logs = list(work_dir.glob("app-*/*/stderr"))
    assert executor_logs, f"no application ran on the worker: {job.stderr[-2000:]}"
