"""Installing the project registers the ``rocketstore`` format with Spark: no register call.

PySpark 4 registers the ``DefaultSource`` of every top-level ``pyspark_*`` package on the path.
The check installs the project's wheel into a fresh directory, as ``pip install`` would for a
user, and reads a store from a new SparkSession in a separate interpreter that never calls
``spark.dataSource.register``. (An editable install cannot show this: its import hook is not a
path entry, and Spark looks packages up by walking path entries; sessions made by our jobs
register the source explicitly, so they work either way.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rocketstore.common.message import Message
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]


READ = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    rows = spark.read.format("rocketstore").load(sys.argv[1]).select("topic", "body").collect()
    print(json.dumps(sorted([r.topic, bytes(r.body).decode()] for r in rows)))
    spark.stop()
""")


@pytest.fixture(scope="module")
def installed(project_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel installed into a directory of its own, as pip does for a user."""
    site = tmp_path_factory.mktemp("wheel") / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                    str(project_wheel)], check=True)
    assert (site / "pyspark_rocketstore" / "__init__.py").is_file()
    return site


def spark_read(site: Path, store: Path, tmp_path: Path, *extra_path: Path) -> subprocess.CompletedProcess[str]:
    """Read ``store`` in a new interpreter and SparkSession whose workers run this Python."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (*extra_path, site)),
           "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run([sys.executable, "-c", READ, str(store)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_installed_wheel_registers_the_format(installed: Path, tmp_path: Path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path / "store"), mapped_file_size_commit_log=1 << 20)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        for i in range(3):
            assert store.put_message(Message(topic="Plugged", queue_id=0, body=f"m{i}".encode())).ok
    finally:
        store.shutdown()

    out = spark_read(installed, cfg.root_dir(), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["Plugged", f"m{i}"] for i in range(3)]


def test_without_the_spark_extra_the_format_names_what_to_install(installed: Path, tmp_path: Path) -> None:
    """pyarrow missing (simulated: a sitecustomize blocks its import in the driver and every worker).

    Spark drops every Python data source when one plug-in fails to import, so ours must import
    and then refuse with the install command instead.
    """
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['pyarrow'] = None\n")
    (tmp_path / "store").mkdir()
    out = spark_read(installed, tmp_path / "store", tmp_path, blocker)
    assert out.returncode != 0
    assert "needs 'pyarrow'" in out.stderr and "rocketstore[spark]" in out.stderr, out.stderr[-3000:]
