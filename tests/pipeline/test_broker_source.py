"""The ``rocketstore`` data source through a real broker process: batch reads, the sink, streaming."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker, broker
from pyspark.sql import DataFrame, SparkSession

from rocketstore.client.admin import MQAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.producer import Producer, SendResult
from rocketstore.client.remoting_client import MessageQueue
from rocketstore.pipeline.broker_offsets import (
    DataLossError,
    QueueBounds,
    check_data_loss,
    first_offset_at,
    offsets_for_times,
)
from rocketstore.pipeline.broker_options import BrokerOptions, ByTimestamp, parse_offsets
from rocketstore.pipeline.broker_read import plan_ranges
from rocketstore.pipeline.options import OptionError

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


def via(b: Broker, direct: bool) -> tuple[str, str]:
    """The option that selects the broker: its own address (brokerAddress) or its name server's."""
    return ("brokerAddress", b.addr) if direct else ("nameServer", b.namesrv)


def broker_df(spark: SparkSession, b: Broker, topic: str, *, direct: bool = False, **options: str) -> DataFrame:
    return spark.read.format("rocketstore").option(*via(b, direct)).option("topic", topic).options(**options).load()


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
    store_times(broker, "SparkLoss", 4)  # planned from the queues' max offsets: wait for the consume queues
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


def run_stream(spark: SparkSession, b: Broker, topic: str, checkpoint: Path, out: Path, *, direct: bool = False,
               **options: str) -> list[Any]:
    query = (spark.readStream.format("rocketstore").option(*via(b, direct)).option("topic", topic)
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


@pytest.fixture(scope="module", autouse=True)
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker whose retention deletes every full CommitLog segment as soon as it is asked to.

    Started with the module (autouse), though one test uses it: its store's first cleanup pass
    comes 60 s after its start, as RocketMQ's does, and the module's other tests run meanwhile
    instead of that test waiting for it (about 60 s)."""
    b = Broker(tmp_path_factory.mktemp("small-broker"),
               "mappedFileSizeCommitLog=16384\nfileReservedTime=0\ncleanResourceInterval=200\n"
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


# -- offsets by timestamp ----------------------------------------------------------------------


def store_times(b: Broker, topic: str, count: int) -> dict[tuple[int, int], int]:
    """{(queueId, queueOffset): storeTimestamp} of the ``count`` messages of ``topic``, once the broker's
    consume queues hold them all (a send is acknowledged before its consume-queue entry is written)."""
    deadline = time.monotonic() + 10
    while True:
        times = {(m.queue_id, m.queue_offset): m.store_timestamp for m in consume_all(b, topic)}
        if len(times) >= count or time.monotonic() > deadline:
            assert len(times) == count
            return times
        time.sleep(0.05)


def produce_phases(b: Broker, topic: str, *sizes: int) -> tuple[list[dict[tuple[int, int], bytes]], list[int]]:
    """Phases of messages 30 ms apart (every queue gets some in each); the bodies of each phase and, per
    phase, its last store time + 1: a timestamp the broker's nearest-neighbour search answers with the
    phase's last message, one offset before the first message stored at or after it."""
    phases: list[dict[tuple[int, int], bytes]] = []
    for n, size in enumerate(sizes):
        if n:
            time.sleep(0.03)
        phases.append(produce(b, topic, size, f"p{n}"))
    times = store_times(b, topic, sum(sizes))
    ends = [max(times[k] for k in phase) + 1 for phase in phases]
    for phase, later in zip(phases[1:], ends, strict=False):
        assert min(times[k] for k in phase) >= later  # the phases do not overlap in time
    return phases, ends


def test_timestamp_option_parsing() -> None:
    base = {"nameServer": "h:1", "topic": "A"}
    opts = BrokerOptions.parse({**base, "startingTimestamp": "1700000000000", "startingOffsets": "latest",
                                "endingOffsetsByTimestamp": '{"A": {"broker-a/0": 1700000005000, "1": 7}}',
                                "startingOffsetsByTimestampStrategy": "LATEST"})
    assert opts.starting == ByTimestamp("startingTimestamp", 1700000000000)  # precedence over startingOffsets
    assert opts.ending == ByTimestamp("endingOffsetsByTimestamp", {"A": {"broker-a/0": 1700000005000, "1": 7}})
    assert opts.no_match_latest
    assert BrokerOptions.parse({**base, "startingOffsetsByTimestamp": '{"A": {"0": 5}}',
                                "startingOffsets": "latest"}).starting == ByTimestamp(
        "startingOffsetsByTimestamp", {"A": {"0": 5}})
    assert not BrokerOptions.parse(base).no_match_latest
    bad = [
        ("startingTimestamp", "soon", r"startingTimestamp: 'soon' is not an integer"),
        ("startingTimestamp", str(2**63), r"startingTimestamp: 9223372036854775808 does not fit a Java long"),
        ("endingTimestamp", "-5", r"endingTimestamp: -5 is below 0"),
        ("endingOffsetsByTimestamp", '{"A": {"0": 1.5}}', r"endingOffsetsByTimestamp: timestamp 1.5 of A/0 is not "
                                                           r"epoch milliseconds"),
        ("startingOffsetsByTimestampStrategy", "skip", r"Strategy: 'skip', expected error or latest"),
    ]
    for name, value, message in bad:
        with pytest.raises(OptionError, match=message):
            BrokerOptions.parse({**base, name: value})
    for value, message in (('{"A": {"0": -1}}', "timestamp -1 of A/0 is not epoch milliseconds"),
                           ('{"A": {"0": 9223372036854775808}}', "timestamp 9223372036854775808 of A/0 is not"),
                           ('{"A": {"broker-a/x": 5}}', "queue key 'broker-a/x' of topic 'A' is not"),
                           ('{"A": {"0": true}}', "timestamp True of A/0 is not epoch milliseconds"),
                           ("1700000000000", "the JSON must be an object of topics"), ("{A: 1}", "is not JSON like"),
                           ('{"A": 5}', "must map queues to timestamps"),
                           ('{"B": {"0": 5}}', "names topics not in the option topics")):
        with pytest.raises(OptionError, match=f"option startingOffsetsByTimestamp.*{message}"):
            BrokerOptions.parse({**base, "startingOffsetsByTimestamp": value})
    with pytest.raises(OptionError, match=r"endingTimestamp \(5\) is before startingTimestamp \(9\)"):
        BrokerOptions.parse({**base, "startingTimestamp": "9", "endingTimestamp": "5"})
    for name in ("endingTimestamp", "endingOffsetsByTimestamp"):
        with pytest.raises(OptionError, match=f"option {name} is for batch reads only"):
            BrokerOptions.parse({**base, name: "5"}, streaming=True)


def test_first_offset_at_corrects_the_broker_hint(broker: Broker) -> None:
    """Against the queue's real store times, every timestamp maps to the first message stored at or after
    it, from the broker's own hint and from any other hint (a wrong one costs a binary search)."""
    with Producer(broker.namesrv, "pipeline-test-producers") as producer:
        for i in range(4):
            producer.send("SparkHint", f"single-{i}".encode(), queue_id=0)
            time.sleep(0.02)
        producer.send_batch("SparkHint", [f"batch-{i}".encode() for i in range(6)], queue_id=0)  # one store time
        time.sleep(0.02)
        for i in range(3):
            producer.send("SparkHint", f"late-{i}".encode(), queue_id=0)
            time.sleep(0.02)
    times = [t for _, t in sorted(store_times(broker, "SparkHint", 13).items())]
    assert len(times) == 13 and len(set(times[4:10])) == 1
    mq = MessageQueue("SparkHint", "broker-a", 0)
    bounds = QueueBounds(mq, 0, len(times))
    probes = sorted({t + d for t in times for d in (-1, 0, 1)} | {times[0] - 10_000, times[-1] + 10_000})

    def expected(ts: int) -> int | None:
        return next((i for i, t in enumerate(times) if t >= ts), None)

    opts = BrokerOptions.parse({"nameServer": broker.namesrv, "topic": "SparkHint"})
    assert offsets_for_times(opts, {mq: (bounds, probes[0])}) == {mq: 0}
    with PullConsumer(broker.namesrv, "pipeline-test-readers") as consumer, MQAdmin(broker.namesrv) as admin:
        for ts in probes:
            want = expected(ts)
            assert first_offset_at(consumer, bounds, ts, admin.search_offset(mq, ts)) == want, ts
            for hint in (-1, 0, 3, 5, 9, 12, 13, 40):
                assert first_offset_at(consumer, bounds, ts, hint) == want, (ts, hint)
    # the batch's store time: its first message, wherever the broker's binary search landed in the run
    assert expected(times[4]) == 4
    assert offsets_for_times(opts, {mq: (bounds, times[4])}) == {mq: 4}
    assert offsets_for_times(opts, {mq: (bounds, times[-1] + 1)}) == {mq: None}
    assert offsets_for_times(opts, {mq: (QueueBounds(mq, 5, 5), times[0])}) == {mq: None}


def test_batch_read_by_timestamp(spark: SparkSession, broker: Broker) -> None:
    (first, second, third), (end1, end2, _) = produce_phases(broker, "SparkTime", 16, 16, 16)
    everything = first | second | third
    # [startingTimestamp, endingTimestamp): exactly the messages stored in that window
    assert got(broker_df(spark, broker, "SparkTime", startingTimestamp=str(end1),
                         endingTimestamp=str(end2))) == second
    assert got(broker_df(spark, broker, "SparkTime", startingTimestamp=str(end1))) == second | third
    # per queue: queue q0 from the second phase up to the third, the other queues whole
    q0 = min(q for q, _ in second)
    starting = json.dumps({"SparkTime": {f"broker-a/{q0}": end1}})
    ending = json.dumps({"SparkTime": {str(q0): end2}})
    expected = {k: v for k, v in everything.items() if k[0] != q0 or k in second}
    assert got(broker_df(spark, broker, "SparkTime", startingOffsetsByTimestamp=starting,
                         endingOffsetsByTimestamp=ending)) == expected
    # startingTimestamp takes precedence over startingOffsetsByTimestamp and startingOffsets
    assert got(broker_df(spark, broker, "SparkTime", startingTimestamp=str(end2), startingOffsets="earliest",
                         startingOffsetsByTimestamp=starting)) == third
    # an ending timestamp after the last message: read to the end
    assert got(broker_df(spark, broker, "SparkTime", startingTimestamp=str(end1),
                         endingTimestamp=str(end2 + 3_600_000))) == second | third
    # bad values fail the query, naming the option
    with pytest.raises(Exception, match="option startingTimestamp: 'yesterday' is not an integer"):
        broker_df(spark, broker, "SparkTime", startingTimestamp="yesterday").collect()


def test_starting_timestamp_after_the_last_message(spark: SparkSession, broker: Broker) -> None:
    _, (after,) = produce_phases(broker, "SparkTimeLate", 16)
    with pytest.raises(Exception, match=rf"option startingTimestamp: queue SparkTimeLate@broker-a#0 has no message "
                                        rf"stored at or after {after} .*startingOffsetsByTimestampStrategy=latest"):
        broker_df(spark, broker, "SparkTimeLate", startingTimestamp=str(after)).collect()
    df = broker_df(spark, broker, "SparkTimeLate", startingTimestamp=str(after),
                   startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0
    # per queue, with the other queues from earliest: only the named queue skips to latest
    q0 = json.dumps({"SparkTimeLate": {"0": after}})
    rows = got(broker_df(spark, broker, "SparkTimeLate", startingOffsetsByTimestamp=q0,
                         startingOffsetsByTimestampStrategy="latest"))
    assert len(rows) == 16 - sum(1 for q, _ in store_times(broker, "SparkTimeLate", 16) if q == 0)
    assert rows and all(q != 0 for q, _ in rows)


def test_stream_from_starting_timestamp(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    (_, second), (end1, _) = produce_phases(broker, "SparkStreamTime", 12, 12)
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    assert sum(run_stream(spark, broker, "SparkStreamTime", checkpoint, out, startingTimestamp=str(end1))) == 12
    assert got(spark.read.parquet(str(out))) == second
    # a restart resumes from the checkpoint: the starting timestamp only placed the new query
    third = produce(broker, "SparkStreamTime", 5, "p2")
    assert sum(run_stream(spark, broker, "SparkStreamTime", checkpoint, out, startingTimestamp=str(end1))) == 5
    assert got(spark.read.parquet(str(out))) == second | third


# -- the streaming sink ------------------------------------------------------------------------


def run_sink(spark: SparkSession, b: Broker, source: str, target: str, checkpoint: Path,
             mode: str = "append") -> list[int]:
    """``source`` (our own streaming source, availableNow, 7 messages per micro-batch) -> the sink into ``target``."""
    query = (spark.readStream.format("rocketstore").option("nameServer", b.namesrv).option("topic", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "7").load()
             .selectExpr("concat('copy-', cast(body AS STRING)) AS body", "tags", "keys")
             .writeStream.format("rocketstore").option("nameServer", b.namesrv).option("topic", target)
             .option("checkpointLocation", str(checkpoint)).outputMode(mode).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress]


def test_stream_sink_sends_each_micro_batch_once(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    first = produce(broker, "SparkSinkSrc", 20, "first")
    checkpoint = tmp_path / "checkpoint"
    batches = run_sink(spark, broker, "SparkSinkSrc", "SparkSinkDst", checkpoint)
    assert sum(batches) == 20 and len([n for n in batches if n]) >= 3

    def copies() -> Counter[tuple[bytes, str | None, str | None]]:
        store_times(broker, "SparkSinkDst", sum(sent.values()))  # wait until all are in the consume queues
        return Counter((m.body, m.tags, m.keys) for m in consume_all(broker, "SparkSinkDst"))

    sent = Counter((b"copy-" + body, f"t{i % 3}", f"k{i}") for i, body in enumerate(sorted(first.values())))
    assert copies() == sent
    # a restart with the same checkpoint sends only what is new: committed micro-batches never run again
    second = produce(broker, "SparkSinkSrc", 6, "second")
    assert sum(run_sink(spark, broker, "SparkSinkSrc", "SparkSinkDst", checkpoint)) == 6
    sent += Counter((b"copy-" + body, f"t{i % 3}", f"k{i}") for i, body in enumerate(sorted(second.values())))
    assert copies() == sent
    assert sum(run_sink(spark, broker, "SparkSinkSrc", "SparkSinkDst", checkpoint)) == 0
    assert copies() == sent


def test_stream_sink_refuses_complete_mode(spark: SparkSession, broker: Broker, tmp_path: Path) -> None:
    produce(broker, "SparkSinkModes", 3)
    counts = (spark.readStream.format("rocketstore").option("nameServer", broker.namesrv)
              .option("topic", "SparkSinkModes").option("startingOffsets", "earliest").load()
              .groupBy("tags").count().selectExpr("cast(count AS STRING) AS body"))
    query = (counts.writeStream.format("rocketstore").option("nameServer", broker.namesrv)
             .option("topic", "SparkSinkModesOut").option("checkpointLocation", str(tmp_path / "cp"))
             .outputMode("complete").trigger(availableNow=True).start())
    with pytest.raises(Exception, match=r"appends messages .*use \.outputMode\('append'\)"):
        query.awaitTermination(120)
    with MQAdmin(broker.namesrv) as admin:
        assert "SparkSinkModesOut" not in admin.topic_list()  # nothing was sent


# -- brokerAddress: the broker asked directly, no name server -------------------------------------


def test_broker_address_reads_what_the_name_server_read_returns(spark: SparkSession, broker: Broker,
                                                                tmp_path: Path) -> None:
    sent = produce(broker, "SparkDirect", 30)
    store_times(broker, "SparkDirect", 30)  # planned from the queues' max offsets: wait for the consume queues
    direct = broker_df(spark, broker, "SparkDirect", direct=True, maxRecordsPerPartition="3")
    assert got(direct) == sent
    by_name_server = broker_df(spark, broker, "SparkDirect", maxRecordsPerPartition="3")
    assert direct.rdd.getNumPartitions() == by_name_server.rdd.getNumPartitions()
    assert sorted(map(tuple, direct.collect())) == sorted(map(tuple, by_name_server.collect()))
    # a streaming read (availableNow) through the broker's address, in micro-batches of at most 8
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    batches = run_stream(spark, broker, "SparkDirect", checkpoint, out, direct=True, startingOffsets="earliest",
                         maxOffsetsPerTrigger="8")
    assert sum(batches) == 30 and max(batches) <= 8
    assert got(spark.read.parquet(str(out))) == sent


@pytest.fixture
def lone_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker without a name server (its name-server listener is off): only brokerAddress reaches it."""
    (tmp_path / "lone").mkdir()
    b = Broker(tmp_path / "lone", "namesrvListenPort=0\n")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def test_broker_address_sink_and_read_without_a_name_server(spark: SparkSession, lone_broker: Broker) -> None:
    rows = [(f"direct-{i}", f"k{i}") for i in range(20)]
    # a new topic: sent through the broker's TBW102 route, the broker creates it (as with a name server)
    (spark.createDataFrame(rows, "body STRING, keys STRING").repartition(2).write.format("rocketstore")
     .option("brokerAddress", lone_broker.addr).option("topic", "SparkDirectSink").mode("append").save())
    deadline = time.monotonic() + 10  # a send is acknowledged before its consume-queue entry is written
    while (n := broker_df(spark, lone_broker, "SparkDirectSink", direct=True).count()) < 20:
        assert time.monotonic() < deadline, n
        time.sleep(0.1)
    back = broker_df(spark, lone_broker, "SparkDirectSink", direct=True).select("body", "keys").collect()
    assert sorted((bytes(r.body).decode(), r.keys) for r in back) == sorted(rows)


def test_broker_address_errors(spark: SparkSession, broker: Broker) -> None:
    with pytest.raises(Exception, match=rf"topic 'NoSuchDirect' is not known to the brokers {broker.addr} "
                                        r"\(option brokerAddress\)"):
        broker_df(spark, broker, "NoSuchDirect", direct=True).collect()
    both = {"nameServer": broker.namesrv, "brokerAddress": broker.addr, "topic": "T"}
    with pytest.raises(OptionError, match="nameServer and brokerAddress exclude each other: keep nameServer"):
        BrokerOptions.parse(both)
    with pytest.raises(Exception, match="exclude each other"):
        spark.read.format("rocketstore").options(**both).load().collect()
    with pytest.raises(OptionError, match="option brokerAddress: address 'broker-a' is not host:port"):
        BrokerOptions.parse({"brokerAddress": "broker-a", "topic": "T"})
    with pytest.raises(OptionError, match="option brokerAddress: no broker address given"):
        BrokerOptions.parse({"brokerAddress": " ", "topic": "T"})
    with pytest.raises(OptionError, match=r"option path .* and brokerAddress exclude each other"):
        BrokerOptions.parse({"brokerAddress": broker.addr, "topic": "T", "path": "/tmp"})
