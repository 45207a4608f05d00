"""The ``rocketstore`` data source on stores written by the engine, read through a real SparkSession.

Rows are compared field by field with store.offline.dump_messages (the engine's offline reader).
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pipeline_fixtures import SEG, Written, broker_conf, make_cfg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from rocketstore.common.message import StoredMessage
from rocketstore.pipeline.options import OptionError, ReadOptions, parse_time
from rocketstore.pipeline.reader import ARROW_SCHEMA, SPARK_SCHEMA_DDL, CorruptStoreError, read_segment
from rocketstore.pipeline.source import RocketStoreDataSource, SegmentPartition, plan_partitions
from rocketstore.store.offline import dump_messages
from rocketstore.store.store_view import commit_log_dirs, commit_log_segments

COLUMNS = ["topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "flag", "sysFlag",
           "bornMs", "bornHost", "storeMs", "storeHost", "reconsumeTimes", "tags", "keys", "uniqKey", "properties",
           "body"]


def expected_row(m: StoredMessage) -> tuple[Any, ...]:
    return (m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.total_size, m.body_crc, m.flag, m.sys_flag,
            m.born_timestamp, str(m.born_host), m.store_timestamp, str(m.store_host), m.reconsume_times, m.tags,
            m.keys, m.uniq_key, dict(m.properties), m.body)


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    picked = df.withColumn("bornMs", F.unix_millis("bornTimestamp")).withColumn("storeMs", F.unix_millis(
        "storeTimestamp")).select(*COLUMNS).orderBy("commitLogOffset")
    return [tuple(dict(v) if isinstance(v, dict) else (bytes(v) if isinstance(v, bytearray) else v) for v in r)
            for r in picked.collect()]


def read(spark: SparkSession, w: Written, **options: str) -> DataFrame:
    return spark.read.format("rocketstore").options(**options).load(str(w.cfg.root_dir()))


def test_full_read_matches_dump_messages(spark: SparkSession, pristine: Written, tmp_path: Path) -> None:
    expected = [expected_row(m) for m in dump_messages(pristine.cfg)]
    assert len(expected) == pristine.count
    assert len(commit_log_segments(commit_log_dirs(pristine.cfg))) >= 4, "the store must roll segments"
    assert any(":" in r[9] for r in expected) and any("[" in r[11] for r in expected), "IPv6 hosts expected"
    df = read(spark, pristine, brokerConf=str(broker_conf(tmp_path, pristine.cfg.root_dir())))
    assert df.schema == StructType.fromDDL(SPARK_SCHEMA_DDL)
    assert df.rdd.getNumPartitions() == len([s for s in commit_log_segments(commit_log_dirs(pristine.cfg))
                                              if s.size])
    assert rows(df) == expected


def test_topics_read_through_consume_queues(spark: SparkSession, pristine: Written) -> None:
    expected = [expected_row(m) for m in dump_messages(pristine.cfg) if m.topic in ("TopicA", "TopicC")]
    df = read(spark, pristine, topics="TopicA, TopicC", entriesPerPartition="5")
    got = rows(df)
    assert got == expected
    # TopicA/TopicC x queues 0/1, ranges of 5 entries over files of 8 entries
    assert df.rdd.getNumPartitions() > 4


def test_offset_and_time_filters(spark: SparkSession, pristine: Written) -> None:
    msgs = list(dump_messages(pristine.cfg))
    start, end = msgs[10].physical_offset + 1, msgs[60].physical_offset  # start inside a record: next one on
    expected = [expected_row(m) for m in msgs if start <= m.physical_offset < end]
    assert rows(read(spark, pristine, startOffset=str(start), endOffset=str(end))) == expected
    assert rows(read(spark, pristine, topics="TopicB", startOffset=str(start), endOffset=str(end))) == [
        r for r in expected if r[0] == "TopicB"]
    times = sorted({m.store_timestamp for m in msgs})
    t0, t1 = times[len(times) // 3], times[2 * len(times) // 3]
    expected_t = [expected_row(m) for m in msgs if t0 <= m.store_timestamp < t1]
    assert expected_t
    assert rows(read(spark, pristine, startTime=str(t0), endTime=str(t1))) == expected_t
    iso = parse_time("startTime", "2023-11-14T22:13:20+00:00")
    assert iso == 1_700_000_000_000
    assert rows(read(spark, pristine, startTime="2100-01-01T00:00:00")) == []


def test_reader_yields_arrow_record_batches(pristine: Written) -> None:
    source = RocketStoreDataSource({"path": str(pristine.cfg.root_dir()), "batchSize": "7"})
    reader = source.reader(StructType.fromDDL(SPARK_SCHEMA_DDL))
    reader = pickle.loads(pickle.dumps(reader))  # travels to the executors
    assert ARROW_SCHEMA.equals(to_arrow_schema(StructType.fromDDL(SPARK_SCHEMA_DDL), timezone="UTC"))
    partitions = reader.partitions()
    assert all(isinstance(p, SegmentPartition) for p in partitions)
    total = 0
    for partition in partitions:
        for batch in reader.read(pickle.loads(pickle.dumps(partition))):
            assert isinstance(batch, pa.RecordBatch)
            assert batch.schema.equals(ARROW_SCHEMA)
            assert batch.num_rows <= 7
            total += batch.num_rows
    assert total == pristine.count


def test_vectorised_path_equals_reference_decoder(pristine: Written) -> None:
    options = ReadOptions.from_config(pristine.cfg, batch_size=16)
    for seg in commit_log_segments(options.commit_log_dirs):
        fast = pa.Table.from_batches(list(read_segment(options, seg)), schema=ARROW_SCHEMA)
        reference = pa.Table.from_batches(list(read_segment(options, seg, fast=False)), schema=ARROW_SCHEMA)
        assert fast.equals(reference), seg.path


def test_a_range_with_nothing_in_it_reads_no_rows(spark: SparkSession, pristine: Written) -> None:
    end = max(s.from_offset + s.size for s in commit_log_segments(commit_log_dirs(pristine.cfg)))
    assert plan_partitions(ReadOptions.parse({"path": str(pristine.cfg.root_dir()),
                                              "startOffset": str(end + 1)})) == []
    assert read(spark, pristine, startOffset=str(end + 1)).count() == 0  # Spark runs a placeholder partition


def test_option_errors(pristine: Written, tmp_path: Path) -> None:
    root = str(pristine.cfg.root_dir())
    with pytest.raises(OptionError, match="option path"):
        ReadOptions.parse({})
    with pytest.raises(OptionError, match="unknown option 'nope'"):
        ReadOptions.parse({"path": root, "nope": "1"})
    for name in ("startingOffsets", "topic", "startingTimestamp", "endingOffsetsByTimestamp", "maxOffsetsPerTrigger"):
        with pytest.raises(OptionError, match=f"{name} is for reads through a broker"):
            ReadOptions.parse({"path": root, name: "1"})
    with pytest.raises(OptionError, match="startTime"):
        ReadOptions.parse({"path": root, "startTime": "yesterday"})
    with pytest.raises(OptionError, match=r"endOffset .* before startOffset"):
        ReadOptions.parse({"path": root, "startOffset": "10", "endOffset": "5"})
    with pytest.raises(OptionError, match="brokerConf"):
        ReadOptions.parse({"path": root, "brokerConf": str(tmp_path / "nope.conf")})
    with pytest.raises(OptionError, match="'Nope' has no consume queue"):
        plan_partitions(ReadOptions.parse({"path": root, "topics": "Nope"}))
    opts = ReadOptions.parse({"PATH": root, "brokerconf": str(broker_conf(tmp_path, Path(root))), "TOPICS": "a,b"})
    assert (opts.topics, opts.commit_log_file_size) == (("a", "b"), SEG)


def test_missing_and_corrupt_store_errors(spark: SparkSession, written: Written, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(Exception, match=f"store directory {missing} does not exist"):
        spark.read.format("rocketstore").load(str(missing)).count()
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="is not a store directory"):
        spark.read.format("rocketstore").load(str(tmp_path / "empty")).count()

    # damage the magic code of the third record of the second segment
    segments = commit_log_segments(commit_log_dirs(written.cfg))
    seg = segments[1]
    msgs = [m for m in dump_messages(written.cfg) if seg.from_offset <= m.physical_offset < seg.from_offset + SEG]
    pos = msgs[2].physical_offset - seg.from_offset
    with open(seg.path, "r+b") as f:
        f.seek(pos + 4)
        f.write(struct.pack(">i", 0x12345678))
    name = Path(seg.path).name
    with pytest.raises(Exception, match=f"CommitLog segment .*{name} position {pos}"):
        read(spark, written).count()
    options = ReadOptions.from_config(written.cfg)
    with pytest.raises(CorruptStoreError, match="illegal magic code"):
        list(read_segment(options, seg))
    skipped = read(spark, written, corruptRecords="skip").count()
    assert skipped == written.count - (len(msgs) - 2)


def test_corrupt_consume_queue_entry_names_the_file(spark: SparkSession, written: Written) -> None:
    cq = make_cfg(written.cfg.root_dir()).consume_queue_dir() / "TopicB" / "0" / f"{0:020d}"
    with open(cq, "r+b") as f:
        f.seek(20 * 3)
        f.write(struct.pack(">q", 5))  # entry 3 now points into the middle of a record
    with pytest.raises(Exception, match=r"consume queue .*TopicB/0/0+ position 60 .*queue offset 3"):
        read(spark, written, topics="TopicB").count()
