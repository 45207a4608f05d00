"""Options of the ``rocketstore`` data source's reads and writes through brokers.

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
    tls.enable, tls.client.*, accessKey
                            TLS and ACL for secured brokers: see broker_security (the secret
                            key comes from the environment, never from an option)

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
                                        offset for its starting timestamp does (see broker_offsets)

Precedence is Kafka's: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
(a lower one given as well is ignored, with a warning); the same for ending. Queues a JSON map
does not name start at earliest / end at latest, as with JSON offsets. In a streaming query the
starting options only place a new query (its initial offsets); a restart resumes from the
checkpoint, and queues that appear later are read from their earliest offset.

How timestamps become offsets is in :mod:`rocketstore.pipeline.broker_offsets`; the read in
:mod:`rocketstore.pipeline.broker_read`, the sink in :mod:`rocketstore.pipeline.broker_sink`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from rocketstore.client.remoting_client import (
    BrokerRoutes,
    MessageQueue,
    NameServerClient,
    RemotingClient,
    RouteSource,
    split_namesrv_addr,
)
from rocketstore.pipeline.broker_security import BrokerSecurity
from rocketstore.pipeline.options import BROKER_OPTION_NAMES, LONG_MAX, OptionError, parse_int

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "DEFAULT_PULL_BATCH_SIZE",
    "EARLIEST",
    "LATEST",
    "BoundSpec",
    "BrokerOptions",
    "ByTimestamp",
    "OffsetSpec",
    "format_offsets",
    "is_broker_read",
    "offsets_from_json",
    "parse_offsets",
    "parse_timestamps",
    "queue_key",
    "queue_value",
    "route_source",
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
        return queue_value(self.timestamps, mq)


#: a startingOffsets / endingOffsets value, or the timestamps that took precedence over it
BoundSpec = str | OffsetSpec | ByTimestamp

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


def queue_value(spec: OffsetSpec, mq: MessageQueue) -> int | None:
    """``mq``'s value in a per-queue map (its ``brokerName/queueId`` key before a bare ``queueId``)."""
    queues = spec.get(mq.topic, {})
    for key in (queue_key(mq), str(mq.queue_id)):
        if key in queues:
            return queues[key]
    return None


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
    #: TLS and ACL towards secured brokers (:mod:`rocketstore.pipeline.broker_security`)
    security: BrokerSecurity = field(default_factory=BrokerSecurity)

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
            security=BrokerSecurity.parse(given),
        )

@contextmanager
def route_source(options: BrokerOptions) -> Iterator[tuple[RemotingClient, RouteSource]]:
    """The connections for the clients of one read, plan or task (closed at the end), and where
    those clients find a topic's brokers: the name servers of option nameServer, or the brokers
    of option brokerAddress themselves. TLS and request signing follow the options of
    :mod:`rocketstore.pipeline.broker_security`, resolved here, in the process that connects."""
    security = options.security
    with RemotingClient(timeout=options.timeout, ssl_context=security.ssl_context(),
                        rpc_hook=security.rpc_hook()) as client:
        if options.broker_address:
            yield client, BrokerRoutes(options.broker_address, client, timeout=options.timeout)
        else:
            yield client, NameServerClient(options.name_server, client, timeout=options.timeout)
