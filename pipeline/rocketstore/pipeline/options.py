"""Options of the ``rocketstore`` data source, validated once on the driver into a dataclass.

Spark hands a Python data source its options as strings (keys case-insensitive). They are
parsed here, before any partition is planned, so a typo or a bad value fails the query at
``load()`` with a message naming the option, not halfway through a job on an executor.

Offline options (this module)::

    path                store root directory (``storePathRootDir``); also ``.load(path)``
    brokerConf          broker.conf of the store: segment and file sizes, commit log directories
    topics              comma-separated topics: read through their consume queues
    startTime, endTime  storeTimestamp bounds, epoch ms or ISO 8601 (naive = UTC); [start, end)
    startOffset         physical (CommitLog) offset bounds; [start, end)
    endOffset
    batchSize           rows per Arrow record batch (default 8192)
    entriesPerPartition consume-queue entries per input partition with ``topics`` (default 300000)
    corruptRecords      ``fail`` (default): an undecodable record fails the task, naming the
                        segment and position; ``skip``: log it and go on with the next segment

Broker-backed reads take the option names of spark-sql-kafka so that a query moves from an
offline store to a live cluster by changing options only; they are selected by the option
``nameServer`` (or ``nameServerAddr``), or ``brokerAddress`` to talk to given brokers without a
name server, and documented in :mod:`.broker_options` (``topic``/``topics``, ``startingOffsets`` /
``endingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``startingTimestamp``, ...).
Their names given to the offline reader (neither ``nameServer`` nor ``brokerAddress``) fail with a
message saying so, never silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rocketstore.common.java_properties import parse_properties
from rocketstore.store.config import ConfigError, StoreConfig
from rocketstore.store.store_view import commit_log_dirs

__all__ = ["BROKER_OPTION_NAMES", "DEFAULT_BATCH_SIZE", "DEFAULT_ENTRIES_PER_PARTITION", "LONG_MAX", "OptionError",
           "ReadOptions", "parse_int", "parse_time"]

DEFAULT_BATCH_SIZE = 8192
DEFAULT_ENTRIES_PER_PARTITION = 300_000

#: option name (lower case, as Spark passes them) -> spelling in messages
_OFFLINE_OPTIONS = {
    name.lower(): name
    for name in ("path", "brokerConf", "topics", "startTime", "endTime", "startOffset", "endOffset", "batchSize",
                 "entriesPerPartition", "corruptRecords")
}
#: every option of reads and writes through brokers (:mod:`.broker_options`)
BROKER_OPTION_NAMES = (
    "nameServer", "nameServerAddr", "brokerAddress", "topic", "topics", "startingOffsets", "endingOffsets",
    "startingTimestamp", "startingOffsetsByTimestamp", "endingTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "maxRecordsPerPartition", "maxOffsetsPerTrigger", "failOnDataLoss",
    "pullBatchSize", "consumerGroup", "timeout", "producerGroup", "sendBatchSize", "sendBatchBytes",
    # TLS and ACL (broker_security)
    "tls.enable", "tls.client.trustCertPath", "tls.client.certPath", "tls.client.keyPath", "accessKey", "secretKey",
)
#: those the offline reader does not take, for a message that says where they belong
_BROKER_OPTIONS = {name.lower(): name for name in BROKER_OPTION_NAMES if name.lower() not in _OFFLINE_OPTIONS}


class OptionError(ValueError):
    """An option the ``rocketstore`` source cannot use; the message names it."""


def parse_time(name: str, raw: str) -> int:
    """Epoch milliseconds from ``raw``: an integer (ms) or an ISO 8601 timestamp (naive = UTC)."""
    text = raw.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is neither epoch milliseconds nor an ISO 8601 timestamp") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


#: offsets, sizes and timestamps travel as Java longs
LONG_MAX = 2**63 - 1


def parse_int(name: str, raw: str, minimum: int) -> int:
    """Option ``name``'s integer value, at least ``minimum`` and at most a Java long."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name}: {raw!r} is not an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}: {value} is below {minimum}")
    if value > LONG_MAX:
        raise OptionError(f"option {name}: {value} does not fit a Java long")
    return value


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Everything a read needs, validated; picklable (it travels to the executors with the reader)."""

    store_dir: str
    commit_log_dirs: tuple[str, ...]
    consume_queue_dir: str
    commit_log_file_size: int
    consume_queue_file_size: int
    topics: tuple[str, ...] = ()
    start_time: int | None = None
    end_time: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    entries_per_partition: int = DEFAULT_ENTRIES_PER_PARTITION
    skip_corrupt: bool = False

    @classmethod
    def from_config(cls, config: StoreConfig, **kwargs: object) -> ReadOptions:
        """Options for the store ``config`` describes (jobs and tests that hold a StoreConfig)."""
        return cls(
            store_dir=str(config.root_dir()),
            commit_log_dirs=tuple(str(d) for d in commit_log_dirs(config)),
            consume_queue_dir=str(config.consume_queue_dir()),
            commit_log_file_size=config.mapped_file_size_commit_log,
            consume_queue_file_size=config.get_mapped_file_size_consume_queue(),
            **kwargs,  # type: ignore[arg-type]
        )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Validate Spark's string options (any key case); raises :class:`OptionError`."""
        given = {k.lower(): v for k, v in options.items()}
        for key in given:
            if key in _BROKER_OPTIONS:
                raise OptionError(
                    f"option {_BROKER_OPTIONS[key]} is for reads through a broker: give option nameServer or "
                    "brokerAddress (see rocketstore.pipeline.broker_options); an offline read of a store directory "
                    "takes path, topics, startTime/endTime and startOffset/endOffset"
                )
            if key not in _OFFLINE_OPTIONS:
                known = ", ".join(sorted(_OFFLINE_OPTIONS.values()))
                raise OptionError(f"unknown option {key!r} for format rocketstore (known: {known})")
        config = store_config(given.get("path"), given.get("brokerconf"))
        topics = tuple(t.strip() for t in given.get("topics", "").split(",") if t.strip())
        start_time = parse_time("startTime", given["starttime"]) if "starttime" in given else None
        end_time = parse_time("endTime", given["endtime"]) if "endtime" in given else None
        if start_time is not None and end_time is not None and end_time < start_time:
            raise OptionError(f"option endTime ({end_time}) is before startTime ({start_time})")
        start_offset = parse_int("startOffset", given["startoffset"], 0) if "startoffset" in given else None
        end_offset = parse_int("endOffset", given["endoffset"], 0) if "endoffset" in given else None
        if start_offset is not None and end_offset is not None and end_offset < start_offset:
            raise OptionError(f"option endOffset ({end_offset}) is before startOffset ({start_offset})")
        corrupt = given.get("corruptrecords", "fail").strip().lower()
        if corrupt not in ("fail", "skip"):
            raise OptionError(f"option corruptRecords: {corrupt!r}, expected 'fail' or 'skip'")
        return cls.from_config(
            config,
            topics=topics,
            start_time=start_time,
            end_time=end_time,
            start_offset=start_offset,
            end_offset=end_offset,
            batch_size=parse_int("batchSize", given["batchsize"], 1) if "batchsize" in given else DEFAULT_BATCH_SIZE,
            entries_per_partition=(parse_int("entriesPerPartition", given["entriesperpartition"], 1)
                                   if "entriesperpartition" in given else DEFAULT_ENTRIES_PER_PARTITION),
            skip_corrupt=corrupt == "skip",
        )

    def store_time_matches(self, store_timestamp: int) -> bool:
        return ((self.start_time is None or store_timestamp >= self.start_time)
                and (self.end_time is None or store_timestamp < self.end_time))


def store_config(path: str | None, broker_conf: str | None) -> StoreConfig:
    """The StoreConfig for ``path`` and/or ``broker_conf``, as ``rocketstore store`` builds it.

    ``path`` wins over the broker.conf's ``storePathRootDir`` (and then the CommitLog is
    ``path/commitlog``); one of the two is required.
    """
    if broker_conf:
        if not os.path.isfile(broker_conf):
            raise OptionError(f"option brokerConf: {broker_conf} does not exist")
        try:
            # decoded as load_broker_conf does (ISO-8859-1, like java.util.Properties)
            props = parse_properties(Path(broker_conf).read_bytes().decode("latin-1"))
            config, _broker_keys = StoreConfig.from_properties(props)
        except (ConfigError, ValueError) as exc:
            raise OptionError(f"option brokerConf: {broker_conf}: {exc}") from exc
        if not path and "storePathRootDir" not in props:
            raise OptionError(f"option path is required: {broker_conf} sets no storePathRootDir")
    elif not path:
        raise OptionError("option path (the store directory) is required: .option('path', DIR) or .load(DIR)")
    else:
        config = StoreConfig()
    if path:
        config.store_path_root_dir = os.path.abspath(os.path.expanduser(path))
        config.store_path_commit_log = None
    return config
