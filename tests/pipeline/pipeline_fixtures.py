"""Helpers and fixtures of the pipeline tests: one real SparkSession for the whole run, and stores
written by the engine.

Spark's Python workers are separate processes that import ``rocketstore.pipeline.source`` by
module name: they find it where the driver does, in the installed project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from rocketstore.common.message import HostAddress, Message, properties_to_string
from rocketstore.pipeline.source import RocketStoreDataSource
from rocketstore.store.commit_log import MessageBatch
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore

ROOT = Path(__file__).resolve().parents[2]
SEG = 4096
CQ_ENTRIES_PER_FILE = 8
SLOTS = 64
INDEX_NUM = 32  # 31 entries per index file
TOPICS = ("TopicA", "TopicB", "TopicC")
BASE_BORN = 1_700_000_000_000


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    # Spark starts its Python workers with `python3` from PATH unless told: use this interpreter,
    # the one with the project installed
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rocketstore-pipeline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(RocketStoreDataSource)
    yield session
    session.stop()


def make_cfg(root: Path, **overrides: object) -> StoreConfig:
    cfg = StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=20 * CQ_ENTRIES_PER_FILE,
        max_hash_slot_num=SLOTS,
        max_index_num=INDEX_NUM,
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cfg


def broker_conf(tmp_path: Path, root: Path) -> Path:
    """A broker.conf describing the tiny test layout (what an operator would pass as brokerConf)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"storePathRootDir={root}\nmappedFileSizeCommitLog={SEG}\n"
        f"mappedFileSizeConsumeQueue={20 * CQ_ENTRIES_PER_FILE}\nmaxHashSlotNum={SLOTS}\nmaxIndexNum={INDEX_NUM}\n"
    )
    return conf


def message(i: int) -> Message:
    born = HostAddress("::1", 40000 + i) if i % 4 == 0 else HostAddress("10.0.0.5", 50000)
    store_host = HostAddress("fe80::1", 10911) if i % 7 == 0 else HostAddress("192.168.1.2", 10911)
    props = {"TAGS": f"tag{i % 5}", "KEYS": f"order-{i} customer-{i % 10}", "UNIQ_KEY": f"UNIQ{i:06d}"}
    if i % 6 == 5:
        props = {"a": "1"}  # no tags, keys or uniq key
    return Message(
        topic=TOPICS[i % 3],
        body=f"body-{i:04d}-".encode() + b"x" * (i * 7 % 120),
        queue_id=(i // 3) % 2,
        flag=i % 3,
        properties=props,
        born_timestamp=BASE_BORN + i,
        born_host=born,
        store_host=store_host,
        reconsume_times=i % 2,
    )


@dataclass(frozen=True)
class Written:
    cfg: StoreConfig
    count: int


def write_store(root: Path, count: int = 90, cfg: StoreConfig | None = None) -> Written:
    """Messages 0..count-1 of three topics plus one batch put, written and dispatched by the engine."""
    cfg = cfg or make_cfg(root)
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        for i in range(count):
            assert store.put_message(message(i)).ok
            if i == count // 2:
                items = [(f"batch-{n}".encode(), 0, properties_to_string({"KEYS": f"batch-key-{n}"}))
                         for n in range(3)]
                batch = MessageBatch(topic="TopicA", queue_id=1, items=items, properties={}, born_timestamp=BASE_BORN,
                                     born_host=HostAddress("10.0.0.9", 1234), store_host=HostAddress("::2", 10911))
                assert store.put_messages(batch).ok
        assert store.reput_service.wait_caught_up(5)
    finally:
        store.shutdown()
    return Written(cfg, count + 3)


@pytest.fixture(scope="session")
def project_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once: what spark-submit's --py-files and a user's pip install get."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
                   cwd=dist, check=True)
    return next(dist.glob("rocketstore-*.whl"))


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return write_store(tmp_path_factory.mktemp("pristine") / "store")


@pytest.fixture
def written(pristine: Written, tmp_path: Path) -> Written:
    """A private copy of the engine-written store (tests damage their copy)."""
    shutil.copytree(pristine.cfg.root_dir(), tmp_path / "store")
    return Written(make_cfg(tmp_path / "store"), pristine.count)
