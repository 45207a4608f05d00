"""The sink of the ``rocketstore`` data source: DataFrame rows sent as messages through brokers.

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

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from rocketstore.client.producer import OutgoingMessage, Producer
from rocketstore.pipeline.broker_options import BrokerOptions, route_source
from rocketstore.pipeline.options import OptionError

__all__ = ["SentMessages", "check_sink_schema", "write_batches"]

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
