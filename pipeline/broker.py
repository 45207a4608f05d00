"""Reads through brokers, the streaming source and the sink of the ``rocketstore`` data source.

Selected by the option ``nameServer`` (or ``nameServerAddr``): ``host:port``, several separated
by ``;``. The option names follow spark-sql-kafka::

    topic / topics          comma-separated topics (required for reads)
    startingOffsets         earliest | latest | JSON (batch default earliest, streaming default latest)
    endingOffsets           latest | JSON (batch only; default latest)
    maxRecordsPerPartition  queue offsets per input partition (default 100000): a long queue
                            range becomes several partitions
    maxOffsetsPerTrigger    streaming: at most this many messages per micro-batch, over all queues
    failOnDataLoss          true (default): a requested offset already deleted by retention fails
                            the query with a message saying so; false: read on from the queue's
                            minimum offset (the lost messages are logged)
    pullBatchSize           messages per PULL_MESSAGE (default 32)
    consumerGroup           group named in pulls (default ``rocketstore-spark``; no offsets are
                            committed: Spark's checkpoint holds them)
    timeout                 seconds per request (default 10)

JSON offsets are per queue, as spark-sql-kafka takes them per partition: ``{"TopicA":
{"broker-a/0": 12, "broker-a/1": -2}}``. A key is ``brokerName/queueId``; a bare ``queueId``
means that queue id on every broker of the topic. ``-2`` is earliest, ``-1`` latest; queues
the map does not name start at earliest (startingOffsets) or end at latest (endingOffsets).
Offsets are RocketMQ logical queue offsets; a range is ``[start, end)``. The streaming source
checkpoints the same JSON shape (always ``brokerName/queueId`` keys).

Sink (``df.write.format("rocketstore").option("nameServer", ...)``): a ``body`` column (binary
or string) and optional ``topic``, ``tags``, ``keys`` (string) and ``properties``
(map<string,string>) columns; option ``topic`` for rows without one. Messages go out with
:meth:`rocketstore.client.Producer.send_batch` (``sendBatchSize`` messages, default 64, and at
most ``sendBatchBytes``, default 1 MiB, per request); options ``producerGroup`` (default
``rocketstore-spark-sink``). Any send that fails raises, which fails the task and aborts the job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from pipeline.options import OptionError
from pipeline.reader import _Columns
from rocketstore.client.admin import MQAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.producer import OutgoingMessage, Producer
from rocketstore.client.remoting_client import MessageQueue, RemotingError
from store.message import PROPERTY_MAX_OFFSET, PROPERTY_MIN_OFFSET

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerOptions",
    "BrokerRangePartition",
    "BrokerStream",
    "DataLossError",
    "QueueBounds",
    "SentMessages",
    "check_sink_schema",
    "format_offsets",
    "is_broker_read",
    "parse_offsets",
    "plan_ranges",
    "queue_bounds",
    "rate_limit",
    "read_range",
    "write_batches",
]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000
DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_GROUP = "rocketstore-spark"

_NAME_SERVER_KEYS = ("nameserver", "nameserveraddr")
_OPTIONS = {
    name.lower(): name
    for name in ("nameServer", "nameServerAddr", "topic", "topics", "startingOffsets", "endingOffsets",
                 "maxRecordsPerPartition", "maxOffsetsPerTrigger", "failOnDataLoss", "pullBatchSize",
                 "consumerGroup", "timeout", "producerGroup", "sendBatchSize", "sendBatchBytes", "path")
}

#: per topic, per queue key ("brokerName/queueId" or "queueId"): a logical offset, EARLIEST or LATEST
OffsetSpec = dict[str, dict[str, int]]


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention deleted them) and failOnDataLoss is true."""


def is_broker_read(options: Mapping[str, str]) -> bool:
    return any(k.lower() in _NAME_SERVER_KEYS for k in options)


def _int(name: str, raw: str, minimum: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}: {value} is below {minimum}")
    return value


def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name}: {raw!r}, expected true or false")
    return text == "true"


def parse_offsets(name: str, raw: str, *, allow_earliest: bool = True) -> str | OffsetSpec:
    """``earliest``, ``latest`` or a JSON map ``{"topic": {"brokerName/queueId"|"queueId": offset}}``."""
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"option {name}: earliest is not allowed here (use latest or a JSON map)")
        return "earliest"
    try:
        parsed = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is neither earliest, latest nor JSON like "
                          '{"TopicA": {"broker-a/0": 23, "1": -2}}') from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name}: the JSON must be an object of topics")
    spec: OffsetSpec = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict):
            raise OptionError(f"option {name}: topic {topic!r} must map queues to offsets")
        spec[topic] = {}
        for key, offset in queues.items():
            broker, _, qid = str(key).rpartition("/")
            if not qid.isdigit() or (broker == "" and "/" in str(key)):
                raise OptionError(f"option {name}: queue key {key!r} of topic {topic!r} is not "
                                  "'brokerName/queueId' or 'queueId'")
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise OptionError(f"option {name}: offset {offset!r} of {topic}/{key} is not an offset "
                                  "(>= 0, or -2 earliest, -1 latest)")
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name}: -2 (earliest) is not allowed for {topic}/{key}")
            spec[topic][str(key)] = offset
    return spec


def queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}/{mq.queue_id}"


def format_offsets(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """The checkpointed / reported JSON shape: {topic: {"brokerName/queueId": offset}}."""
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {})[queue_key(mq)] = offsets[mq]
    return out


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> dict[MessageQueue, int]:
    out: dict[MessageQueue, int] = {}
    for topic, queues in data.items():
        for key, offset in queues.items():
            broker, _, qid = key.rpartition("/")
            out[MessageQueue(topic, broker, int(qid))] = int(offset)
    return out


@dataclass(frozen=True, slots=True)
class BrokerOptions:
    """Validated options of a broker-backed read or write; picklable."""

    name_server: str
    topics: tuple[str, ...] = ()
    starting: str | OffsetSpec = "earliest"
    ending: str | OffsetSpec = "latest"
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    group: str = DEFAULT_GROUP
    timeout: float = 10.0
    producer_group: str = "rocketstore-spark-sink"
    send_batch_size: int = 64
    send_batch_bytes: int = 1024 * 1024

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False, write: bool = False) -> BrokerOptions:
        given = {k.lower(): v for k, v in options.items()}
        for key in given:
            if key not in _OPTIONS:
                known = ", ".join(sorted(_OPTIONS.values()))
                raise OptionError(f"unknown option {key!r} for format rocketstore with nameServer (known: {known})")
        if "path" in given:
            raise OptionError("option path (a store directory) and nameServer exclude each other: "
                              "give one or the other")
        name_server = (given.get("nameserver") or given.get("nameserveraddr") or "").strip()
        if not name_server:
            raise OptionError("option nameServer is empty")
        topics = tuple(t.strip() for t in (given.get("topics") or given.get("topic") or "").split(",") if t.strip())
        if not topics and not write:
            raise OptionError("option topic (or topics) is required for a read through a broker")
        if streaming and "endingoffsets" in given:
            raise OptionError("option endingOffsets is for batch reads only")
        starting = parse_offsets("startingOffsets", given.get("startingoffsets",
                                                              "latest" if streaming else "earliest"))
        ending = parse_offsets("endingOffsets", given.get("endingoffsets", "latest"), allow_earliest=False)
        for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            if isinstance(spec, dict) and (unknown := set(spec) - set(topics)):
                raise OptionError(f"option {name} names topics not in the option topics: {sorted(unknown)}")
        return cls(
            name_server=name_server,
            topics=topics,
            starting=starting,
            ending=ending,
            max_records_per_partition=(_int("maxRecordsPerPartition", given["maxrecordsperpartition"], 1)
                                       if "maxrecordsperpartition" in given else DEFAULT_MAX_RECORDS_PER_PARTITION),
            max_offsets_per_trigger=(_int("maxOffsetsPerTrigger", given["maxoffsetspertrigger"], 1)
                                     if "maxoffsetspertrigger" in given else None),
            fail_on_data_loss=_bool("failOnDataLoss", given.get("failondataloss", "true")),
            pull_batch_size=(_int("pullBatchSize", given["pullbatchsize"], 1) if "pullbatchsize" in given
                             else DEFAULT_PULL_BATCH_SIZE),
            group=given.get("consumergroup", DEFAULT_GROUP).strip() or DEFAULT_GROUP,
            timeout=float(_int("timeout", given["timeout"], 1)) if "timeout" in given else 10.0,
            producer_group=given.get("producergroup", "rocketstore-spark-sink").strip() or "rocketstore-spark-sink",
            send_batch_size=_int("sendBatchSize", given["sendbatchsize"], 1) if "sendbatchsize" in given else 64,
            send_batch_bytes=(_int("sendBatchBytes", given["sendbatchbytes"], 1) if "sendbatchbytes" in given
                              else 1024 * 1024),
        )


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """A queue's offsets on the broker now: [min_offset, max_offset) are readable."""

    queue: MessageQueue
    min_offset: int
    max_offset: int


def queue_bounds(options: BrokerOptions) -> dict[MessageQueue, QueueBounds]:
    """Min and max offsets of every queue of the options' topics (GET_TOPIC_STATS_INFO at each master)."""
    out: dict[MessageQueue, QueueBounds] = {}
    with MQAdmin(options.name_server, timeout=options.timeout) as admin:
        for topic in options.topics:
            try:
                stats = admin.topic_status(topic)
            except RemotingError as exc:
                raise OptionError(f"option topics: topic {topic!r} is not known to name server "
                                  f"{options.name_server}: {exc}") from exc
            for s in stats:
                out[s.queue] = QueueBounds(s.queue, s.min_offset, s.max_offset)
    return out


def _spec_offset(spec: str | OffsetSpec, mq: MessageQueue, default: int) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    queues = spec.get(mq.topic, {})
    for key in (queue_key(mq), str(mq.queue_id)):
        if key in queues:
            return queues[key]
    return default


def resolve(spec: str | OffsetSpec, bounds: QueueBounds, default: int) -> int:
    """A concrete offset of ``bounds.queue`` for a startingOffsets / endingOffsets spec."""
    offset = _spec_offset(spec, bounds.queue, default)
    if offset == EARLIEST:
        return bounds.min_offset
    if offset == LATEST:
        return bounds.max_offset
    return offset


@dataclass(frozen=True)
class BrokerRangePartition(InputPartition):
    """Queue offsets [start, end) of one queue, read with PULL_MESSAGE."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __repr__(self) -> str:
        return f"BrokerRangePartition({self.topic}@{self.broker_name}#{self.queue_id} [{self.start}, {self.end}))"


def check_data_loss(options: BrokerOptions, mq: MessageQueue, start: int, min_offset: int) -> int:
    """``start`` if still readable; else raises (failOnDataLoss) or returns ``min_offset``."""
    if start >= min_offset:
        return start
    message = (f"queue {mq}: offsets [{start}, {min_offset}) are no longer on the broker (deleted by retention); "
               f"its minimum offset is {min_offset}")
    if options.fail_on_data_loss:
        raise DataLossError(message + ". Set option failOnDataLoss=false to skip them and read on.")
    log.warning("%s; skipped (failOnDataLoss=false)", message)
    return min_offset


def split_ranges(options: BrokerOptions, ranges: Mapping[MessageQueue, tuple[int, int]],
                 partition_type: type[BrokerRangePartition] = BrokerRangePartition) -> list[BrokerRangePartition]:
    """Input partitions of at most maxRecordsPerPartition offsets each."""
    step = options.max_records_per_partition
    out: list[BrokerRangePartition] = []
    for mq in sorted(ranges):
        start, end = ranges[mq]
        for lo in range(start, end, step):
            out.append(partition_type(mq.topic, mq.broker_name, mq.queue_id, lo, min(lo + step, end)))
    return out


def plan_ranges(options: BrokerOptions) -> list[BrokerRangePartition]:
    """A batch read's partitions (driver side)."""
    ranges: dict[MessageQueue, tuple[int, int]] = {}
    for mq, bounds in queue_bounds(options).items():
        start = resolve(options.starting, bounds, EARLIEST)
        end = min(resolve(options.ending, bounds, LATEST), bounds.max_offset)
        if start >= end:
            continue
        start = check_data_loss(options, mq, start, bounds.min_offset)
        if start < end:
            ranges[mq] = (start, end)
    return split_ranges(options, ranges)


def read_range(options: BrokerOptions, partition: BrokerRangePartition,
               batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """Executor side: pull [start, end) of one queue with a connection of its own; Arrow batches out.

    Rows carry the same columns as the offline read (the pull's MIN_OFFSET / MAX_OFFSET
    properties, which the client adds, are removed).
    """
    mq = partition.queue
    offset, end = partition.start, partition.end
    cols = _Columns()
    with PullConsumer(options.name_server, options.group, timeout=options.timeout) as consumer:
        while offset < end:
            before = offset
            result = consumer.pull(mq, offset, max_nums=min(options.pull_batch_size, end - offset))
            if result.status is PullStatus.OFFSET_ILLEGAL or (
                    result.status is not PullStatus.FOUND and offset < result.min_offset):
                moved = check_data_loss(options, mq, offset, max(result.min_offset, result.next_begin_offset))
                if moved <= offset:  # the offset is not behind the minimum: beyond the maximum
                    raise DataLossError(f"queue {mq}: offset {offset} is beyond the broker's maximum "
                                        f"{result.max_offset} (the queue was reset or the broker replaced)")
                offset = moved
                continue
            if result.status is PullStatus.NO_MATCHED_MSG:
                offset = max(result.next_begin_offset, offset + 1)
                continue
            if result.status is PullStatus.NO_NEW_MSG:
                raise DataLossError(f"queue {mq}: no message at offset {offset}, expected up to {end} "
                                    f"(broker max offset {result.max_offset})")
            for m in result.messages:
                if m.queue_offset < offset:
                    continue
                if m.queue_offset >= end:
                    break
                if m.queue_offset > offset:
                    check_data_loss(options, mq, offset, m.queue_offset)
                m.properties.pop(PROPERTY_MIN_OFFSET, None)
                m.properties.pop(PROPERTY_MAX_OFFSET, None)
                cols.add(m)
                offset = m.queue_offset + 1
                if len(cols) >= batch_rows:
                    yield cols.to_batch()
                    cols = _Columns()
            offset = max(offset, min(result.next_begin_offset, end))
            if offset == before:
                raise DataLossError(f"queue {mq}: the broker found no message at offset {offset} and did not move on")
    if len(cols):
        yield cols.to_batch()


# -- the sink ----------------------------------------------------------------------------------

_SINK_COLUMNS = {"body", "topic", "tags", "keys", "properties"}


def check_sink_schema(schema: StructType, options: BrokerOptions) -> None:
    """Driver side: the DataFrame's columns must be what the sink can send."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "body" not in fields:
        raise OptionError("the DataFrame written to rocketstore needs a body column (binary or string); "
                          f"it has {', '.join(fields) or 'no columns'}")
    if not isinstance(fields["body"], BinaryType | StringType):
        raise OptionError(f"column body must be binary or string, not {fields['body'].simpleString()}")
    for name in ("topic", "tags", "keys"):
        if name in fields and not isinstance(fields[name], StringType):
            raise OptionError(f"column {name} must be a string, not {fields[name].simpleString()}")
    if "properties" in fields:
        t = fields["properties"]
        if not (isinstance(t, MapType) and isinstance(t.keyType, StringType) and isinstance(t.valueType, StringType)):
            raise OptionError(f"column properties must be map<string,string>, not {t.simpleString()}")
    extra = set(fields) - _SINK_COLUMNS
    if extra:
        raise OptionError(f"columns {sorted(extra)} are not sent; the sink takes {sorted(_SINK_COLUMNS)} "
                          "(select them before writing)")
    if "topic" not in fields and not options.topics:
        raise OptionError("option topic is required when the DataFrame has no topic column")
    if len(options.topics) > 1:
        raise OptionError("option topic: a sink writes to one default topic, not a list")


@dataclass(frozen=True)
class SentMessages(WriterCommitMessage):
    """What one task sent: messages per topic."""

    counts: dict[str, int]


def _text(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise TypeError(f"body {value!r} is neither binary nor string")


def write_batches(options: BrokerOptions, batches: Iterator[pa.RecordBatch]) -> SentMessages:
    """Executor side: every row of ``batches`` as a message, sent with send_batch per topic.

    A row without body or topic, or a send the broker refuses after the producer's retries,
    raises (the task fails, Spark aborts the job). Sends already acknowledged stay: the sink is
    at-least-once, as spark-sql-kafka's is.
    """
    default_topic = options.topics[0] if options.topics else None
    counts: dict[str, int] = {}
    pending: dict[str, list[OutgoingMessage]] = {}
    pending_bytes: dict[str, int] = {}
    with Producer(options.name_server, options.producer_group, send_timeout=options.timeout) as producer:

        def flush(topic: str) -> None:
            items = pending.pop(topic, [])
            pending_bytes.pop(topic, None)
            if items:
                producer.send_batch(topic, items)
                counts[topic] = counts.get(topic, 0) + len(items)

        for batch in batches:
            data = batch.to_pydict()
            n = batch.num_rows
            bodies = data["body"]
            topics = data.get("topic", [None] * n)
            tags = data.get("tags", [None] * n)
            keys = data.get("keys", [None] * n)
            props = data.get("properties", [None] * n)
            for i in range(n):
                body = bodies[i]
                if body is None:
                    raise ValueError("a row has a null body: every message needs one")
                topic = topics[i] or default_topic
                if not topic:
                    raise ValueError("a row has a null topic and the option topic is not set")
                p = props[i]
                message = OutgoingMessage(body=_text(body), tags=tags[i] or None, keys=keys[i] or None,
                                          properties=dict(p) if p else {})
                pending.setdefault(topic, []).append(message)
                size = pending_bytes[topic] = pending_bytes.get(topic, 0) + len(message.body)
                if len(pending[topic]) >= options.send_batch_size or size >= options.send_batch_bytes:
                    flush(topic)
        for topic in list(pending):
            flush(topic)
    return SentMessages(counts)


# -- streaming ---------------------------------------------------------------------------------


def rate_limit(start: Mapping[MessageQueue, int], end: Mapping[MessageQueue, int],
               max_rows: int) -> dict[MessageQueue, int]:
    """``end`` cut so that at most ``max_rows`` offsets lie between ``start`` and it, shared out in
    proportion to each queue's backlog (the remainder one by one in queue order): deterministic."""
    backlog = {mq: max(end[mq] - start.get(mq, end[mq]), 0) for mq in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    share = {mq: max_rows * n // total for mq, n in backlog.items()}
    left = max_rows - sum(share.values())
    for mq in sorted(backlog):
        if left <= 0:
            break
        if share[mq] < backlog[mq]:
            share[mq] += 1
            left -= 1
    return {mq: start[mq] + share[mq] if mq in start else end[mq] for mq in end}


class BrokerStream:
    """The driver side of the streaming source, without Spark's classes (see source.BrokerStreamReader).

    Offsets are ``{topic: {"brokerName/queueId": next offset to read}}``; a micro-batch reads
    [start, end) of every queue. A queue that appears after the query started (the topic got
    more queues) is read from its earliest offset.
    """

    def __init__(self, options: BrokerOptions) -> None:
        self.options = options
        self.target: dict[MessageQueue, int] | None = None

    def initial_offset(self) -> dict[str, dict[str, int]]:
        bounds = queue_bounds(self.options)
        return format_offsets({mq: resolve(self.options.starting, b, EARLIEST) for mq, b in bounds.items()})

    def prepare_available_now(self) -> None:
        self.target = {mq: b.max_offset for mq, b in queue_bounds(self.options).items()}

    def latest_offset(self, start: Mapping[str, Mapping[str, int]] | None,
                      max_rows: int | None) -> dict[str, dict[str, int]]:
        bounds = queue_bounds(self.options)
        latest = {mq: b.max_offset for mq, b in bounds.items()}
        if self.target is not None:  # availableNow: nothing past what was there when the query started
            target = self.target
            latest = {mq: min(b.max_offset, target.get(mq, b.min_offset)) for mq, b in bounds.items()}
        if start is not None:
            begin = offsets_from_json(start)
            for mq in latest:
                first = begin.get(mq, bounds[mq].min_offset)
                latest[mq] = max(latest[mq], first)  # never behind the start (a queue reset reads nothing)
            for mq, o in begin.items():
                latest.setdefault(mq, o)  # a queue that left the route keeps its offset
            if max_rows is not None:
                latest = rate_limit({mq: begin.get(mq, bounds[mq].min_offset if mq in bounds else latest[mq])
                                     for mq in latest}, latest, max_rows)
        return format_offsets(latest)

    def partitions(self, start: Mapping[str, Mapping[str, int]],
                   end: Mapping[str, Mapping[str, int]]) -> list[BrokerRangePartition]:
        begin, stop = offsets_from_json(start), offsets_from_json(end)
        bounds = queue_bounds(self.options)
        ranges: dict[MessageQueue, tuple[int, int]] = {}
        for mq, hi in stop.items():
            b = bounds.get(mq)
            lo = begin.get(mq, b.min_offset if b is not None else hi)
            if lo >= hi:
                continue
            if b is not None:
                lo = check_data_loss(self.options, mq, lo, b.min_offset)
            if lo < hi:
                ranges[mq] = (lo, hi)
        return split_ranges(self.options, ranges)
