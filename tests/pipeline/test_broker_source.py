"""The ``rocketstore`` data source through a real broker process: batch reads, the sink, streaming."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker, broker
from pyspark.sql import DataFrame, SparkSession

from pipeline.broker import BrokerOptions, DataLossError, check_data_loss, parse_offsets, plan_ranges
from pipeline.options import OptionError
from rocketstore.client.admin import MQAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.producer import Producer, SendResult

__all__ = ["broker"]

pytestmark = pytest.mark.integration


def produce(b: Broker, topic: str, count: int, prefix: str = "m") -> dict[tuple[int, int], bytes]:
    """Messages sent one by one; {(queueId, queueOffset): body}."""
    sent: dict[tuple[int, int], bytes] = {}
    with Producer(b.namesrv, "pipeline-test-producers") as producer:
        for i in range(count):
            body = f"{prefix}-{i:05d}".encode()
            r: SendResult = producer.send(topic, body, tags=f"t{i % 3}", keys=f"k{i}")
            sent[(r.queue_id, r.queue_offset)] = body
    return sent


def broker_df(spark: SparkSession, b: Broker, topic: str, **options: str) -> DataFrame:
    return spark.read.format("rocketstore").option("nameServer", b.namesrv).option("topic", topic).options(
        **options).load()


def got(df: DataFrame) -> dict[tuple[int, int], bytes]:
    return {(r.queueId, r.queueOffset): bytes(r.body) for r in df.select("queueId", "queueOffset", "body").collect()}


def test_offsets_option_parsing() -> None:
    assert parse_offsets("s", "earliest") == "earliest"
    assert parse_offsets("s", ' {"T": {"broker-a/1": 5, "2": -2}} ') == {"T": {"broker-a/1": 5, "2": -2}}
    with pytest.raises(OptionError, match="earliest is not allowed"):
        parse_offsets("endingOffsets", "earliest", allow_earliest=False)
    with pytest.raises(OptionError, match="queue key"):
        parse_offsets("s", '{"T": {"x": 1}}')
    with pytest.raises(OptionError, match=r"topic .* is required"):
        BrokerOptions.parse({"nameServer": "h:1"})
    with pytest.raises(OptionError, match="not in the option topics"):
        BrokerOptions.parse({"nameServer": "h:1", "topic": "A", "startingOffsets": '{"B": {"0": 1}}'})
    with pytest.raises(OptionError, match="unknown option"):
        BrokerOptions.parse({"nameServer": "h:1", "topic": "A", "startOffsets": "x"})


def test_batch_read_matches_produced_and_splits_ranges(spark: SparkSession, broker: Broker) -> None:
    sent = produce(broker, "SparkBatch", 60)
    df = broker_df(spark, broker, "SparkBatch", maxRecordsPerPartition="4")
    per_queue: dict[int, int] = {}
    for q, _ in sent:
        per_queue[q] = per_queue.get(q, 0) + 1
    assert len(per_queue) > 1
    assert df.rdd.getNumPartitions() == sum(math.ceil(n / 4) for n in per_queue.values())
    assert got(df) == sent
    row = df.where("queueOffset = 0").orderBy("queueId").first()
    assert row is not None and row.topic == "SparkBatch" and row.tags in ("t0", "t1", "t2")
    assert row.keys.startswith("k") and row.uniqKey and row.storeHost == broker.addr
    assert "MIN_OFFSET" not in row.properties and row.properties["TAGS"] == row.tags
    # the offline reader of the broker's own store gives the same rows
    offline = spark.read.format("rocketstore").option("topics", "SparkBatch").option(
        "brokerConf", str(broker.conf)).load()
    cols = ["queueId", "queueOffset", "commitLogOffset", "bodyCRC", "storeSize", "properties", "body"]
    assert sorted(map(tuple, df.select(*cols).collect())) == sorted(map(tuple, offline.select(*cols).collect()))


def test_batch_read_json_offsets(spark: SparkSession, broker: Broker) -> None:
    sent = produce(broker, "SparkRange", 40)
    queues = sorted({q for q, _ in sent})
    first, second = queues[0], queues[1]
    starting = json.dumps({"SparkRange": {f"broker-a/{first}": 2, str(second): -1}})
    ending = json.dumps({"SparkRange": {str(first): 5}})
    df = broker_df(spark, broker, "SparkRange", startingOffsets=starting, endingOffsets=ending)
    expected = {k: v for k, v in sent.items() if (k[0] == first and 2 <= k[1] < 5) or k[0] not in (first, second)}
    assert got(df) == expected


def test_batch_read_errors(spark: SparkSession, broker: Broker) -> None:
    with pytest.raises(Exception, match="not known to name server"):
        broker_df(spark, broker, "NoSuchTopicHere").collect()
    produce(broker, "SparkLoss", 4)
    starting = json.dumps({"SparkLoss": {"0": 0}})
    # offsets below a queue's minimum: the option says fail or skip
    opts = BrokerOptions.parse({"nameServer": broker.namesrv, "topic": "SparkLoss", "startingOffsets": starting})
    assert plan_ranges(opts)
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        check_data_loss(opts, plan_ranges(opts)[0].queue, 0, 3)


def consume_all(b: Broker, topic: str) -> list[Any]:
    out = []
    with PullConsumer(b.namesrv, "pipeline-test-readers") as consumer:
        for mq in consumer.queues(topic):
            offset = 0
            while True:
                r = consumer.pull(mq, offset, 32)
                if r.status is not PullStatus.FOUND:
                    break
                out.extend(r.messages)
                offset = r.next_begin_offset
    return out


def test_sink_writes_messages_read_back_by_a_consumer(spark: SparkSession, broker: Broker) -> None:
    rows = [(f"sink-{i}", f"tag{i % 2}" if i % 3 else None, f"key-{i}", {"p": str(i)}) for i in range(50)]
    df = spark.createDataFrame(rows, "body STRING, tags STRING, keys STRING, properties MAP<STRING, STRING>")
    df = df.repartition(3)
    (df.write.format("rocketstore").option("nameServer", broker.namesrv).option("topic", "SparkSink")
     .option("sendBatchSize", "7").mode("append").save())
    got_back = {m.body.decode(): m for m in consume_all(broker, "SparkSink")}
    assert sorted(got_back) == sorted(r[0] for r in rows)
    for body, tags, keys, props in rows:
        m = got_back[body]
        assert (m.tags, m.keys, m.properties["p"]) == (tags, keys, props["p"])
    # a topic column routes rows; binary bodies go as they are
    df2 = spark.createDataFrame([(b"\x00\x01", "SparkSinkA"), (b"\xff", None)], "body BINARY, topic STRING")
    (df2.write.format("rocketstore").option("nameServer", broker.namesrv).option("topic", "SparkSinkB")
     .mode("append").save())
    assert [m.body for m in consume_all(broker, "SparkSinkA")] == [b"\x00\x01"]
    assert [m.body for m in consume_all(broker, "SparkSinkB")] == [b"\xff"]


def test_sink_errors_fail_the_job(spark: SparkSession, broker: Broker) -> None:
    writer = spark.createDataFrame([("a",)], "body STRING").write.format("rocketstore")
    with pytest.raises(Exception, match="mode\\('append'\\)"):
        writer.option("nameServer", broker.namesrv).option("topic", "SparkSinkErr").mode("overwrite").save()
    with pytest.raises(Exception, match="needs a body column"):
        (spark.createDataFrame([("a",)], "text STRING").write.format("rocketstore")
         .option("nameServer", broker.namesrv).option("topic", "T").mode("append").save())
    with pytest.raises(Exception, match="null body"):
        (spark.createDataFrame([("a",), (None,)], "body STRING").coalesce(1).write.format("rocketstore")
         .option("nameServer", broker.namesrv).option("topic", "SparkSinkErr").mode("append").save())
    # a broker that is not there: the task fails and the job aborts
    with pytest.raises(Exception, match=r"(?i)connect"):
        (spark.createDataFrame([("a",)], "body STRING").write.format("rocketstore")
         .option("nameServer", "127.0.0.1:1").option("topic", "SparkSinkErr").option("timeout", "2")
         .mode("append").save())


def run_stream(spark: SparkSession, b: Broker, topic: str, checkpoint: Path, out: Path, **options: str) -> list[Any]:
    query = (spark.readStream.format("rocketstore").option("nameServer", b.namesrv).option("topic", topic)
             .options(**options).load()
             .select("queueId", "queueOffset", "body")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


def test_stream_available_now_and_restart_deliver_exactly_once(spark: SparkSession, broker: Broker,
                                                               tmp_path: Path) -> None:
    first = produce(broker, "SparkStream", 30, "first")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    batches = run_stream(spark, broker, "SparkStream", checkpoint, out, startingOffsets="earliest",
                         maxOffsetsPerTrigger="7")
    assert got(spark.read.parquet(str(out))) == first
    assert sum(batches) == 30 and max(batches) <= 7 and len([n for n in batches if n]) >= 5
    second = produce(broker, "SparkStream", 25, "second")
    batches = run_stream(spark, broker, "SparkStream", checkpoint, out, startingOffsets="earliest")
    assert sum(batches) == 25
    rows = spark.read.parquet(str(out)).select("queueId", "queueOffset", "body").collect()
    assert len(rows) == 55  # nothing read twice
    assert {(r.queueId, r.queueOffset): bytes(r.body) for r in rows} == first | second
    # a restart with nothing new delivers nothing
    assert sum(run_stream(spark, broker, "SparkStream", checkpoint, out)) == 0


def test_stream_default_starts_at_latest(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    produce(broker, "SparkStreamLatest", 5, "old")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    assert sum(run_stream(spark, broker, "SparkStreamLatest", checkpoint, out)) == 0
    new = produce(broker, "SparkStreamLatest", 6, "new")
    run_stream(spark, broker, "SparkStreamLatest", checkpoint, out)
    assert got(spark.read.parquet(str(out))) == new


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker whose retention deletes every full CommitLog segment as soon as it is asked to."""
    (tmp_path / "b").mkdir()
    b = Broker(tmp_path / "b", "mappedFileSizeCommitLog=16384\nfileReservedTime=0\ncleanResourceInterval=200\n"
               "deleteCommitLogFilesInterval=0\n")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def expire(b: Broker, topic: str) -> dict[int, int]:
    """Delete expired segments now; the queues' min offsets once queue 0's moved past 0."""
    with MQAdmin(b.namesrv) as admin:
        admin.broker(b.addr).delete_expired_commit_log()
        deadline = time.monotonic() + 100  # the broker's first cleanup pass runs 60 s after its start
        while time.monotonic() < deadline:
            mins = {t.queue.queue_id: t.min_offset for t in admin.topic_status(topic)}
            if mins.get(0, 0) > 0:
                return mins
            time.sleep(0.2)
    raise AssertionError(f"retention deleted nothing: {mins}")


@pytest.mark.slow
def test_stream_fail_on_data_loss(spark: SparkSession, small_broker: Broker, tmp_path: Path) -> None:
    b = small_broker
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    with Producer(b.namesrv, "pipeline-test-producers") as producer:
        producer.send("SparkLost", b"first", queue_id=0)
    assert sum(run_stream(spark, b, "SparkLost", checkpoint, out, startingOffsets="earliest")) == 1
    sent: dict[tuple[int, int], bytes] = {}
    with Producer(b.namesrv, "pipeline-test-producers") as producer:
        for i in range(120):
            r = producer.send("SparkLost", f"later-{i}".encode() + b"x" * 500, queue_id=0)
            sent[(r.queue_id, r.queue_offset)] = f"later-{i}".encode() + b"x" * 500
    mins = expire(b, "SparkLost")
    # the checkpoint's next offset (1) is gone: the restarted query fails and says why
    query = (spark.readStream.format("rocketstore").option("nameServer", b.namesrv).option("topic", "SparkLost")
             .load().select("queueId", "queueOffset", "body")
             .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="no longer on the broker"):
        query.awaitTermination(120)
    # failOnDataLoss=false: skip to the minimum offset and read on
    run_stream(spark, b, "SparkLost", checkpoint, out, failOnDataLoss="false")
    expected = {k: v for k, v in sent.items() if k[1] >= mins[0]}
    assert got(spark.read.parquet(str(out))) == {(0, 0): b"first"} | expected
    # batch reads: the same choice
    with pytest.raises(Exception, match="failOnDataLoss=false"):
        broker_df(spark, b, "SparkLost", startingOffsets='{"SparkLost": {"0": 0}}').collect()
    assert got(broker_df(spark, b, "SparkLost", startingOffsets='{"SparkLost": {"0": 0}}',
                         failOnDataLoss="false")) == expected
