"""Reads through brokers, the streaming source and the sink of the ``rocketstore`` data source.

Selected by the option ``nameServer`` (or ``nameServerAddr``): ``host:port``, several separated
by ``;``; or by the option ``brokerAddress`` instead: the remoting ``host:port`` of one or more
brokers (separated by ``;`` or ``,``), asked directly and no name server contacted, to read or
write one broker through a port-forward to its pod or when the name server is unreachable. A
topic's route then comes from those brokers alone (GET_BROKER_CONFIG and GET_ALL_TOPIC_CONFIG,
which any RocketMQ 4.x broker answers; see :class:`rocketstore.client.remoting_client.BrokerRoutes`):
queues on other brokers are not read, and a read of a topic none of them has fails naming the
topic and the addresses. The two options exclude each other. The other option names follow
spark-sql-kafka::

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

Offsets by timestamp, as spark-sql-kafka takes them (epoch milliseconds, integers >= 0)::

    startingTimestamp                   one timestamp for every queue of the topics
    startingOffsetsByTimestamp          JSON ``{"TopicA": {"broker-a/0": 1714521600000, "1": ...}}``
                                        (keys as for JSON offsets)
    endingTimestamp                     batch only: one timestamp for every queue
    endingOffsetsByTimestamp            batch only: JSON as startingOffsetsByTimestamp
    startingOffsetsByTimestampStrategy  error (default) | latest: what a queue without a matching
                                        offset for its starting timestamp does (below)

Precedence is Kafka's: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
(a lower one given as well is ignored, with a warning); the same for ending. Queues a JSON map
does not name start at earliest / end at latest, as with JSON offsets. In a streaming query the
starting options only place a new query (its initial offsets); a restart resumes from the
checkpoint, and queues that appear later are read from their earliest offset.

A timestamp T maps to the first offset of the queue whose message was stored at or after T
(storeTimestamp >= T), which is Kafka's "earliest offset whose timestamp is greater than or
equal to" T: a read from T to U returns exactly the messages with T <= storeTimestamp < U. The
times are the broker's store times (column storeTimestamp, like Kafka's LogAppendTime), never
the producer's bornTimestamp. The broker's SEARCH_OFFSET_BY_TIMESTAMP answers something else
(RocketMQ 4.9.8 ConsumeQueue.getOffsetInQueueByTime, which our broker follows): it binary-searches
one consume-queue file, chosen by file modification time, for a message stored exactly at T
(any one of several stored in that millisecond) and otherwise returns the *nearer* of T's two
neighbours, the older one on a tie, so possibly a message stored before T; T before the first
message gives the first offset, T after the last message the last message's offset (not the
max offset), and a queue without a consume queue 0. So its answer is taken as a hint: the
driver pulls the messages at the hint and next to it (usually two PULL_MESSAGEs of one message
per queue settle it) and otherwise binary-searches ``[minOffset, maxOffset)`` by the pulled store
times. That relies on store times never decreasing along a queue, which holds because the broker
stamps them under its put lock, unless its clock is set back. T before the oldest message still
on the broker maps to the queue's min offset.

No matching offset (every message of the queue stored before T, or the queue is empty): for a
starting timestamp, strategy ``error`` fails the query with an OptionError naming the option,
the queue and T, and ``latest`` starts that queue at its max offset (it reads only what comes
later), as Kafka's strategies do; for an ending timestamp the queue ends at its max offset.

Sink (``df.write.format("rocketstore").option("nameServer", ...)``, or ``brokerAddress``): a
``body`` column (binary or string) and optional ``topic``, ``tags``, ``keys`` (string) and
``properties`` (map<string,string>) columns; option ``topic`` for rows without one. Messages go out with
:meth:`rocketstore.client.Producer.send_batch` (``sendBatchSize`` messages, default 64, and at
most ``sendBatchBytes``, default 1 MiB, per request); options ``producerGroup`` (default
``rocketstore-spark-sink``). Any send that fails raises, which fails the task and aborts the job.

Streaming sink (``df.writeStream.format("rocketstore").option("nameServer", ...)
.option("checkpointLocation", ...)``): the same columns and options, output mode append only
(complete mode would resend the whole result table every micro-batch). Every micro-batch is
sent as a batch write is. Spark's checkpoint keeps a committed micro-batch from running again
after a restart; a micro-batch that failed, or that was sent but not yet committed when the
query stopped, runs again and sends its messages again: the sink is at-least-once, as
spark-sql-kafka's is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from pyspark.sql.datasource import InputPartition, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from rocketstore.client.admin import MQAdmin
from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.client.producer import OutgoingMessage, Producer
from rocketstore.client.remoting_client import (
    BrokerRoutes,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    RemotingError,
    RouteSource,
    split_namesrv_addr,
)
from rocketstore.common.message import PROPERTY_MAX_OFFSET, PROPERTY_MIN_OFFSET
from rocketstore.pipeline.options import BROKER_OPTION_NAMES, LONG_MAX, OptionError, parse_int
from rocketstore.pipeline.reader import _Columns

__all__ = [
    "EARLIEST",
    "LATEST",
    "BrokerOptions",
    "BrokerRangePartition",
    "BrokerStream",
    "ByTimestamp",
    "DataLossError",
    "QueueBounds",
    "SentMessages",
    "check_sink_schema",
    "ending_offsets",
    "first_offset_at",
    "format_offsets",
    "is_broker_read",
    "offsets_for_times",
    "parse_offsets",
    "parse_timestamps",
    "plan_ranges",
    "queue_bounds",
    "rate_limit",
    "read_range",
    "route_source",
    "starting_offsets",
    "write_batches",
]

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000
DEFAULT_PULL_BATCH_SIZE = 32
DEFAULT_GROUP = "rocketstore-spark"

#: the options that select reads and writes through brokers (rather than of a store directory)
_BROKER_SELECTING_KEYS = ("nameserver", "nameserveraddr", "brokeraddress")
_OPTIONS = {name.lower(): name for name in (*BROKER_OPTION_NAMES, "path")}  # path: refused with a reason

#: per topic, per queue key ("brokerName/queueId" or "queueId"): a logical offset, EARLIEST or LATEST
#: (startingOffsets / endingOffsets), or a store timestamp (...OffsetsByTimestamp)
OffsetSpec = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class ByTimestamp:
    """A start or end given as store timestamps (epoch ms): one for every queue, or per queue.

    Resolved to offsets on the driver when a read is planned (they depend on the broker's
    contents then), so the options stay plain values.
    """

    option: str  #: the option it came from, for messages
    timestamps: int | OffsetSpec

    def timestamp_of(self, mq: MessageQueue) -> int | None:
        if isinstance(self.timestamps, int):
            return self.timestamps
        return _queue_value(self.timestamps, mq)


#: a startingOffsets / endingOffsets value, or the timestamps that took precedence over it
BoundSpec = str | OffsetSpec | ByTimestamp


class DataLossError(RuntimeError):
    """Requested offsets are gone (retention deleted them) and failOnDataLoss is true."""


def is_broker_read(options: Mapping[str, str]) -> bool:
    """Whether ``options`` go through brokers: they give nameServer (nameServerAddr) or brokerAddress."""
    return any(k.lower() in _BROKER_SELECTING_KEYS for k in options)


def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name}: {raw!r}, expected true or false")
    return text == "true"


def _queue_map(name: str, text: str, example: str, what: str, expected: str, minimum: int) -> OffsetSpec:
    """A JSON ``{"topic": {"brokerName/queueId"|"queueId": integer >= minimum}}``; ``what`` names the
    integers and ``expected`` says what they must be, for messages."""
    try:
        parsed = json.loads(text)
    except ValueError:
        raise OptionError(f"option {name}: {text!r} is not JSON like {example}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name}: the JSON must be an object of topics, like {example}")
    spec: OffsetSpec = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict):
            raise OptionError(f"option {name}: topic {topic!r} must map queues to {what}s")
        spec[topic] = {}
        for key, value in queues.items():
            broker, _, qid = key.rpartition("/")
            if not qid.isdigit() or (broker == "" and "/" in key):
                raise OptionError(f"option {name}: queue key {key!r} of topic {topic!r} is not "
                                  "'brokerName/queueId' or 'queueId'")
            if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= LONG_MAX:
                raise OptionError(f"option {name}: {what} {value!r} of {topic}/{key} is not {expected}")
            spec[topic][key] = value
    return spec


def parse_offsets(name: str, raw: str, *, allow_earliest: bool = True) -> str | OffsetSpec:
    """``earliest``, ``latest`` or a JSON map ``{"topic": {"brokerName/queueId"|"queueId": offset}}``."""
    text = raw.strip()
    if text.lower() == "latest":
        return "latest"
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"option {name}: earliest is not allowed here (use latest or a JSON map)")
        return "earliest"
    if not text.startswith("{"):
        raise OptionError(f"option {name}: {raw!r} is neither earliest, latest nor JSON like "
                          '{"TopicA": {"broker-a/0": 23, "1": -2}}')
    spec = _queue_map(name, text, '{"TopicA": {"broker-a/0": 23, "1": -2}}', "offset",
                      "an offset (>= 0, or -2 earliest, -1 latest)", EARLIEST)
    for topic, queues in spec.items():
        for key, offset in queues.items():
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name}: -2 (earliest) is not allowed for {topic}/{key}")
    return spec


def parse_timestamps(name: str, raw: str) -> OffsetSpec:
    """A JSON map ``{"topic": {"brokerName/queueId"|"queueId": epochMs}}`` (…OffsetsByTimestamp)."""
    return _queue_map(name, raw.strip(), '{"TopicA": {"broker-a/0": 1714521600000, "1": 1714525200000}}',
                      "timestamp", "epoch milliseconds (an integer >= 0)", 0)


def _bound_spec(given: Mapping[str, str], side: str, default: str, *, allow_earliest: bool) -> BoundSpec:
    """The ``side`` ("starting" / "ending") of a read, from the option that takes precedence
    (Kafka's order: ...Timestamp, ...OffsetsByTimestamp, ...Offsets)."""
    names = [f"{side}Timestamp", f"{side}OffsetsByTimestamp", f"{side}Offsets"]
    present = [n for n in names if n.lower() in given]
    if len(present) > 1:
        log.warning("option %s takes precedence: %s ignored", present[0], ", ".join(present[1:]))
    chosen = present[0] if present else names[2]
    raw = given.get(chosen.lower(), default)
    if chosen == names[0]:
        return ByTimestamp(chosen, parse_int(chosen, raw, 0))
    if chosen == names[1]:
        return ByTimestamp(chosen, parse_timestamps(chosen, raw))
    return parse_offsets(chosen, raw, allow_earliest=allow_earliest)


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
    """Validated options of a broker-backed read or write; picklable. One of ``name_server`` and
    ``broker_address`` is set."""

    name_server: str = ""
    broker_address: str = ""
    topics: tuple[str, ...] = ()
    starting: BoundSpec = "earliest"
    ending: BoundSpec = "latest"
    #: startingOffsetsByTimestampStrategy=latest: a starting timestamp without a matching offset starts at latest
    no_match_latest: bool = False
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
                raise OptionError(f"unknown option {key!r} for format rocketstore through brokers (known: {known})")
        selected = "brokerAddress" if "brokeraddress" in given else "nameServer"
        if "path" in given:
            raise OptionError(f"option path (a store directory) and {selected} exclude each other: "
                              "give one or the other")
        name_server = (given.get("nameserver") or given.get("nameserveraddr") or "").strip()
        broker_address = given.get("brokeraddress", "").strip()
        if "brokeraddress" in given and ("nameserver" in given or "nameserveraddr" in given):
            raise OptionError("options nameServer and brokerAddress exclude each other: keep nameServer to reach "
                              "every broker of the topics through the name server, or brokerAddress to talk to "
                              "those brokers only, without a name server")
        if "brokeraddress" in given:
            try:
                split_namesrv_addr(broker_address, "broker")
            except ValueError as exc:
                raise OptionError(f"option brokerAddress: {exc} (expected host:port, several separated by "
                                  "';' or ',')") from None
        elif not name_server:
            raise OptionError("option nameServer is empty")
        topics = tuple(t.strip() for t in (given.get("topics") or given.get("topic") or "").split(",") if t.strip())
        if not topics and not write:
            raise OptionError("option topic (or topics) is required for a read through a broker")
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if streaming and name.lower() in given:
                raise OptionError(f"option {name} is for batch reads only")
        starting = _bound_spec(given, "starting", "latest" if streaming else "earliest", allow_earliest=True)
        ending = _bound_spec(given, "ending", "latest", allow_earliest=False)
        for side, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            name, queues = (spec.option, spec.timestamps) if isinstance(spec, ByTimestamp) else (side, spec)
            if isinstance(queues, dict) and (unknown := set(queues) - set(topics)):
                raise OptionError(f"option {name} names topics not in the option topics: {sorted(unknown)}")
        if (isinstance(starting, ByTimestamp) and isinstance(ending, ByTimestamp)
                and isinstance(starting.timestamps, int) and isinstance(ending.timestamps, int)
                and ending.timestamps < starting.timestamps):
            raise OptionError(f"option endingTimestamp ({ending.timestamps}) is before startingTimestamp "
                              f"({starting.timestamps})")
        strategy = given.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(f"option startingOffsetsByTimestampStrategy: {strategy!r}, expected error or latest")
        return cls(
            name_server=name_server,
            broker_address=broker_address,
            topics=topics,
            starting=starting,
            ending=ending,
            no_match_latest=strategy == "latest",
            max_records_per_partition=(parse_int("maxRecordsPerPartition", given["maxrecordsperpartition"], 1)
                                       if "maxrecordsperpartition" in given else DEFAULT_MAX_RECORDS_PER_PARTITION),
            max_offsets_per_trigger=(parse_int("maxOffsetsPerTrigger", given["maxoffsetspertrigger"], 1)
                                     if "maxoffsetspertrigger" in given else None),
            fail_on_data_loss=_bool("failOnDataLoss", given.get("failondataloss", "true")),
            pull_batch_size=(parse_int("pullBatchSize", given["pullbatchsize"], 1) if "pullbatchsize" in given
                             else DEFAULT_PULL_BATCH_SIZE),
            group=given.get("consumergroup", DEFAULT_GROUP).strip() or DEFAULT_GROUP,
            timeout=float(parse_int("timeout", given["timeout"], 1)) if "timeout" in given else 10.0,
            producer_group=given.get("producergroup", "rocketstore-spark-sink").strip() or "rocketstore-spark-sink",
            send_batch_size=parse_int("sendBatchSize", given["sendbatchsize"], 1) if "sendbatchsize" in given else 64,
            send_batch_bytes=(parse_int("sendBatchBytes", given["sendbatchbytes"], 1) if "sendbatchbytes" in given
                              else 1024 * 1024),
        )


@dataclass(frozen=True, slots=True)
class QueueBounds:
    """A queue's offsets on the broker now: [min_offset, max_offset) are readable."""

    queue: MessageQueue
    min_offset: int
    max_offset: int


@contextmanager
def route_source(options: BrokerOptions) -> Iterator[tuple[RemotingClient, RouteSource]]:
    """The connections for the clients of one read, plan or task (closed at the end), and where
    those clients find a topic's brokers: the name servers of option nameServer, or the brokers
    of option brokerAddress themselves."""
    with RemotingClient(timeout=options.timeout) as client:
        if options.broker_address:
            yield client, BrokerRoutes(options.broker_address, client, timeout=options.timeout)
        else:
            yield client, NameServerClient(options.name_server, client, timeout=options.timeout)


def queue_bounds(options: BrokerOptions) -> dict[MessageQueue, QueueBounds]:
    """Min and max offsets of every queue of the options' topics (GET_TOPIC_STATS_INFO at each master)."""
    out: dict[MessageQueue, QueueBounds] = {}
    where = (f"the brokers {options.broker_address} (option brokerAddress)" if options.broker_address
             else f"name server {options.name_server}")
    with (route_source(options) as (client, source),
          MQAdmin(client=client, routes=source, timeout=options.timeout) as admin):
        for topic in options.topics:
            try:
                stats = admin.topic_status(topic)
            except RemotingError as exc:
                raise OptionError(f"option topics: topic {topic!r} is not known to {where}: {exc}") from exc
            for s in stats:
                out[s.queue] = QueueBounds(s.queue, s.min_offset, s.max_offset)
    return out


def _queue_value(spec: OffsetSpec, mq: MessageQueue) -> int | None:
    """``mq``'s value in a per-queue map (its ``brokerName/queueId`` key before a bare ``queueId``)."""
    queues = spec.get(mq.topic, {})
    for key in (queue_key(mq), str(mq.queue_id)):
        if key in queues:
            return queues[key]
    return None


def _spec_offset(spec: str | OffsetSpec, mq: MessageQueue, default: int) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    value = _queue_value(spec, mq)
    return default if value is None else value


def resolve(spec: str | OffsetSpec, bounds: QueueBounds, default: int) -> int:
    """A concrete offset of ``bounds.queue`` for a startingOffsets / endingOffsets spec."""
    offset = _spec_offset(spec, bounds.queue, default)
    if offset == EARLIEST:
        return bounds.min_offset
    if offset == LATEST:
        return bounds.max_offset
    return offset


def starting_offsets(options: BrokerOptions, bounds: Mapping[MessageQueue, QueueBounds]) -> dict[MessageQueue, int]:
    """Where a read starts in every queue of ``bounds`` (driver side; timestamps are searched on the brokers)."""
    return _resolve_all(options, options.starting, bounds, EARLIEST, LATEST if options.no_match_latest else None)


def ending_offsets(options: BrokerOptions, bounds: Mapping[MessageQueue, QueueBounds]) -> dict[MessageQueue, int]:
    """Where a batch read ends (exclusive) in every queue of ``bounds``; an ending timestamp without a
    matching offset ends at latest, as in spark-sql-kafka."""
    return _resolve_all(options, options.ending, bounds, LATEST, LATEST)


def _resolve_all(options: BrokerOptions, spec: BoundSpec, bounds: Mapping[MessageQueue, QueueBounds], default: int,
                 no_match: int | None) -> dict[MessageQueue, int]:
    """Concrete offsets for ``spec``: ``default`` for queues it does not name, ``no_match`` (None:
    raise) for a timestamp no message of its queue was stored at or after."""
    if not isinstance(spec, ByTimestamp):
        return {mq: resolve(spec, b, default) for mq, b in bounds.items()}
    wanted = {mq: ts for mq in bounds if (ts := spec.timestamp_of(mq)) is not None}
    found = offsets_for_times(options, {mq: (bounds[mq], ts) for mq, ts in wanted.items()})
    out: dict[MessageQueue, int] = {}
    for mq, b in bounds.items():
        offset = found[mq] if mq in wanted else default
        if offset is None:
            if no_match is None:
                held = "it is empty" if b.min_offset >= b.max_offset else (
                    f"all its messages (offsets [{b.min_offset}, {b.max_offset})) were stored before")
                raise OptionError(f"option {spec.option}: queue {mq} has no message stored at or after "
                                  f"{_when(wanted[mq])}: {held}. Set option startingOffsetsByTimestampStrategy=latest "
                                  "to start such queues at their latest offset")
            offset = no_match
        out[mq] = b.min_offset if offset == EARLIEST else b.max_offset if offset == LATEST else offset
    return out


def _when(timestamp: int) -> str:
    """Epoch ms for a message, with its UTC date when it has one (years 1..9999)."""
    try:
        return f"{timestamp} ({datetime.fromtimestamp(timestamp / 1000, UTC).isoformat(timespec='milliseconds')})"
    except (OverflowError, ValueError, OSError):
        return str(timestamp)


def offsets_for_times(options: BrokerOptions,
                      wanted: Mapping[MessageQueue, tuple[QueueBounds, int]]) -> dict[MessageQueue, int | None]:
    """Per queue, the first offset whose message was stored at or after the timestamp (None: no
    such message): SEARCH_OFFSET_BY_TIMESTAMP at the queue's master gives a hint that
    :func:`first_offset_at` checks with pulls (see the module docstring)."""
    out: dict[MessageQueue, int | None] = {}
    with (route_source(options) as (client, source),
          MQAdmin(client=client, routes=source, timeout=options.timeout) as admin,
          PullConsumer(None, options.group, client=client, routes=source, timeout=options.timeout) as consumer):
        for mq in sorted(wanted):
            bounds, ts = wanted[mq]
            if bounds.min_offset >= bounds.max_offset:
                out[mq] = None  # empty: nothing to ask the broker
                continue
            out[mq] = first_offset_at(consumer, bounds, ts, admin.search_offset(mq, ts))
    return out


def first_offset_at(consumer: PullConsumer, bounds: QueueBounds, timestamp: int, hint: int) -> int | None:
    """The first offset in ``bounds`` whose message was stored at or after ``timestamp``, None if all
    are older.

    ``hint`` (the broker's answer) is normally that offset or the one before it, so the message at
    the hint and one neighbour settle it; the probes are the first steps of a binary search over
    ``[min_offset, max_offset)`` that goes on by pulled store times when the hint is off (several
    messages stored in the same millisecond, a consume-queue file whose mtime was changed).
    """
    lo, hi = bounds.min_offset, bounds.max_offset  # the answer lies in [lo, hi]; max_offset means none
    if lo >= hi:
        return None
    first = min(max(hint, lo), hi - 1)
    guesses = [first, first - 1, first + 1]
    while lo < hi:
        probe = guesses.pop(0) if guesses else (lo + hi) // 2
        if not lo <= probe < hi:
            continue
        if _store_time(consumer, bounds.queue, probe) >= timestamp:
            hi = probe
        else:
            lo = probe + 1
    return lo if lo < bounds.max_offset else None


def _store_time(consumer: PullConsumer, mq: MessageQueue, offset: int) -> int:
    """The store timestamp of the message at ``offset`` (one PULL_MESSAGE of one message)."""
    result = consumer.pull(mq, offset, max_nums=1)
    if result.status is not PullStatus.FOUND or not result.messages:
        raise DataLossError(f"queue {mq}: no message at offset {offset} while searching offsets by timestamp "
                            f"({result.status.name}; broker offsets [{result.min_offset}, {result.max_offset})): "
                            "retention may have deleted it since the query was planned; run it again")
    return result.messages[0].store_timestamp


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
    all_bounds = queue_bounds(options)
    starts, ends = starting_offsets(options, all_bounds), ending_offsets(options, all_bounds)
    for mq, bounds in all_bounds.items():
        start = starts[mq]
        end = min(ends[mq], bounds.max_offset)
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
    with (route_source(options) as (client, source),
          PullConsumer(None, options.group, client=client, routes=source, timeout=options.timeout) as consumer):
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
    with (route_source(options) as (client, source),
          Producer(None, options.producer_group, client=client, routes=source,
                   send_timeout=options.timeout) as producer):

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
        return format_offsets(starting_offsets(self.options, queue_bounds(self.options)))

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
