"""RocketMQ's ConfigManager files under ``<storePathRootDir>/config`` in their on-disk form.

``consumerOffset.json``, ``topics.json``, ``subscriptionGroup.json`` and ``delayOffset.json`` are
fastjson dumps of broker objects (see :mod:`rocketstore.common.fastjson` for the dialect), and a
store directory must move between RocketMQ 4.9.8 and RocketStore in both directions. RocketMQ
writes ``X.tmp``, copies ``X`` to ``X.bak``, deletes ``X`` and renames, without fsync, and on
load falls back to ``X.bak``. We keep the order and the backup but fsync each step and rename
atomically over ``X``; and where RocketMQ would start empty after failing to read both files, we
raise, because an empty offset table silently rewinds every consumer.
"""

import logging
import os
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from rocketstore.common.data_version import DataVersion
from rocketstore.common.fastjson import as_int, as_object, parse_fastjson, to_json
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.common.topic_config import TopicConfig

__all__ = [
    "ConfigFileError",
    "ConfigManager",
    "ConsumerOffsetManager",
    "DelayOffsetManager",
    "SubscriptionGroupManager",
    "TopicConfigManager",
    "fsync_dir",
    "read_config_file",
    "write_config_file",
    "write_synced",
]

log = logging.getLogger(__name__)

_TOPIC_GROUP_SEPARATOR: Final = "@"
_INT_KEY_RE: Final = re.compile(r"-?[0-9]+")

T = TypeVar("T")


class ConfigFileError(Exception):
    """A config file and its backup are both unusable; names the file so an operator can act."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot load {path}: {reason}")
        self.path = path
        self.reason = reason


# -- durable files -----------------------------------------------------------------------------


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def write_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` and fsync it (the directory entry is the caller's business)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so that creations, renames and unlinks in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_parsable(data: bytes) -> bool:
    try:
        parse_fastjson(data.decode("utf-8"))
    except ValueError:
        return False
    return True


def write_config_file(path: Path, text: str, parsable: Callable[[bytes], bool] = _is_parsable) -> None:
    """Replace ``path`` durably, keeping the previous version as ``path.bak``.

    Order: ``X.tmp`` written and fsynced, current ``X`` copied to ``X.bak`` (fsynced), ``X.tmp``
    renamed over ``X``, directory fsynced. At every instant either ``X`` or ``X.bak`` holds a
    complete version. A current ``X`` that does not parse (``parsable``: as JSON by default) is not
    copied, so it cannot overwrite the good backup it is relying on.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _sibling(path, ".tmp")
    write_synced(tmp, text.encode("utf-8"))
    try:
        previous: bytes | None = path.read_bytes()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        if parsable(previous):
            write_synced(_sibling(path, ".bak"), previous)
        else:
            log.warning("%s does not parse; keeping the existing backup", path)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _decode_file(path: Path, decode: Callable[[str], None]) -> None:
    text = path.read_bytes().decode("utf-8")
    if not text.strip():
        raise ValueError("file is empty")
    decode(text)


def read_config_file(path: Path, decode: Callable[[str], None]) -> bool:
    """Feed ``path`` (or, if it is missing or unusable, ``path.bak``) to ``decode``.

    ``decode`` raises ValueError for content it cannot use. Returns False when neither file
    exists (a new store). Raises ConfigFileError when a file exists but no usable version does;
    other OSErrors (permissions, I/O) propagate unchanged.
    """
    backup = _sibling(path, ".bak")
    try:
        _decode_file(path, decode)
        return True
    except FileNotFoundError:
        problem = "file is missing"
        main_exists = False
    except ValueError as exc:
        problem = f"unusable ({exc})"
        main_exists = True
    try:
        _decode_file(backup, decode)
    except FileNotFoundError:
        if not main_exists:
            return False
        raise ConfigFileError(path, f"{problem}, and there is no backup {backup.name}") from None
    except ValueError as exc:
        raise ConfigFileError(path, f"{problem}, and backup {backup.name} is unusable too ({exc})") from None
    log.warning("%s: %s; loaded backup %s", path, problem, backup.name)
    return True


def _int_key(key: str, what: str) -> int:
    if not _INT_KEY_RE.fullmatch(key):
        raise ValueError(f"{what}: expected an integer key, got {key!r}")
    return int(key)


def _int_table(value: object, what: str) -> dict[int, int]:
    """A Java ``Map<Integer, Long>``: keys arrive as strings, bare or quoted in the file."""
    return {_int_key(k, what): as_int(v, f"{what}[{k}]") for k, v in as_object(value, what).items()}


def _int_tableto_json(table: dict[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in table.items()}


# -- managers ------------------------------------------------------------------------------------


class ConfigManager(ABC):
    """One JSON file in the store's config directory, like RocketMQ's ConfigManager.

    Subclasses keep their table under ``_lock`` and implement ``encode``/``decode``. ``decode``
    must parse everything before installing anything, so a bad main file leaves the manager
    untouched for the fall-back to the backup.
    """

    FILE_NAME: ClassVar[str]

    def __init__(self, config_dir: Path) -> None:
        self.path = Path(config_dir) / self.FILE_NAME
        self._lock = threading.Lock()  # guards the in-memory table; held briefly
        self._file_lock = threading.Lock()  # serialises persist/load; held across fsyncs

    @abstractmethod
    def encode(self, pretty: bool = False) -> str:
        """The table as RocketMQ's JSON (compact for the wire, pretty for the file)."""

    @abstractmethod
    def decode(self, text: str) -> None:
        """Install the table from RocketMQ's JSON; ValueError if it cannot be used."""

    def persist(self) -> None:
        with self._file_lock:
            write_config_file(self.path, self.encode(pretty=True))

    def load(self) -> bool:
        """Read the file (or its backup). False means neither exists: a new store."""
        with self._file_lock:
            return read_config_file(self.path, self.decode)


class ConsumerOffsetManager(ConfigManager):
    """Committed consume offsets, ``{"offsetTable": {"topic@group": {queueId: offset}}}``.

    RocketMQ 4.9.8 writes only ``offsetTable`` here (no dataVersion). Loading replaces the
    table, as RocketMQ's decode does.
    """

    FILE_NAME: ClassVar[str] = "consumerOffset.json"

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir)
        self._table: dict[str, dict[int, int]] = {}

    @staticmethod
    def _key(group: str, topic: str) -> str:
        if _TOPIC_GROUP_SEPARATOR in topic or _TOPIC_GROUP_SEPARATOR in group:
            # RocketMQ splits "topic@group" on '@'; such a key could not be read back.
            raise ValueError(f"topic {topic!r} and group {group!r} must not contain '@'")
        return f"{topic}{_TOPIC_GROUP_SEPARATOR}{group}"

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = self._key(group, topic)
        with self._lock:
            self._table.setdefault(key, {})[queue_id] = offset

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 if none (RocketMQ's answer for "never consumed")."""
        key = self._key(group, topic)
        with self._lock:
            return self._table.get(key, {}).get(queue_id, -1)

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        """Offsets per queue id for one group on one topic (empty if none)."""
        key = self._key(group, topic)
        with self._lock:
            return dict(self._table.get(key, {}))

    def topics_of_group(self, group: str) -> set[str]:
        return {topic for topic, g in self._pairs() if g == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for t, g in self._pairs() if t == topic}

    def clone_offset(self, src_group: str, dest_group: str, topic: str) -> bool:
        """Give ``dest_group`` a copy of ``src_group``'s offsets on ``topic`` (CLONE_GROUP_OFFSET);
        False when the source has none."""
        src, dest = self._key(src_group, topic), self._key(dest_group, topic)
        with self._lock:
            offsets = self._table.get(src)
            if offsets is None:
                return False
            self._table[dest] = dict(offsets)
            return True

    def min_offsets_of_topic(self, topic: str, exclude_groups: set[str],
                             queue_min_offset: Callable[[int], int]) -> dict[int, int]:
        """Queue id -> the smallest offset any group (but ``exclude_groups``) committed on ``topic``,
        among offsets not below the queue's min offset (queryMinOffsetInAllGroup, without its
        side effect of dropping the excluded groups' offsets)."""
        lowest: dict[int, int] = {}
        for key, offsets in self.offset_table().items():
            topic_of, _, group = key.partition(_TOPIC_GROUP_SEPARATOR)
            if topic_of != topic or group in exclude_groups:
                continue
            for queue_id, offset in offsets.items():
                if offset >= queue_min_offset(queue_id):
                    lowest[queue_id] = min(offset, lowest.get(queue_id, offset))
        return lowest

    def remove_group(self, group: str) -> None:
        """Drop every offset of ``group``, on all topics."""
        with self._lock:
            for key in [k for k in self._table if k.split(_TOPIC_GROUP_SEPARATOR)[1:] == [group]]:
                del self._table[key]

    def remove_topic(self, topic: str) -> set[str]:
        """Drop every group's offsets on ``topic`` (the topic was deleted); the groups that had some."""
        with self._lock:
            keys = [k for k in self._table if k.split(_TOPIC_GROUP_SEPARATOR)[0] == topic]
            for key in keys:
                del self._table[key]
        return {key.split(_TOPIC_GROUP_SEPARATOR)[1] for key in keys}

    def offset_table(self) -> dict[str, dict[int, int]]:
        """A copy of the whole table, keyed ``topic@group``."""
        with self._lock:
            return {key: dict(offsets) for key, offsets in self._table.items()}

    def _pairs(self) -> list[tuple[str, str]]:
        with self._lock:
            keys = list(self._table)
        parts = (key.split(_TOPIC_GROUP_SEPARATOR) for key in keys)
        return [(p[0], p[1]) for p in parts if len(p) == 2]

    def encode(self, pretty: bool = False) -> str:
        with self._lock:
            table = {key: _int_tableto_json(offsets) for key, offsets in self._table.items()}
        return to_json({"offsetTable": table}, pretty)

    def decode(self, text: str) -> None:
        root = as_object(parse_fastjson(text), self.FILE_NAME)
        raw = as_object(root.get("offsetTable", {}), "offsetTable")
        table = {key: _int_table(offsets, f"offsetTable[{key}]") for key, offsets in raw.items()}
        with self._lock:
            self._table = table


class DelayOffsetManager(ConfigManager):
    """Progress of the scheduled-message service per delay level, ``{"offsetTable": {level: offset}}``.

    Loading merges into the current table, as RocketMQ's ScheduleMessageService does.
    """

    FILE_NAME: ClassVar[str] = "delayOffset.json"

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir)
        self._table: dict[int, int] = {}

    def get_offset(self, level: int) -> int | None:
        with self._lock:
            return self._table.get(level)

    def set_offset(self, level: int, offset: int) -> None:
        with self._lock:
            self._table[level] = offset

    def offsets(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    def encode(self, pretty: bool = False) -> str:
        with self._lock:
            table = _int_tableto_json(self._table)
        return to_json({"offsetTable": table}, pretty)

    def decode(self, text: str) -> None:
        root = as_object(parse_fastjson(text), self.FILE_NAME)
        table = _int_table(root.get("offsetTable", {}), "offsetTable")
        with self._lock:
            self._table.update(table)


class _Record(Protocol):
    @property
    def table_key(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Record)


class _VersionedTable(ConfigManager, Generic[R]):
    """``{"dataVersion": {...}, TABLE_KEY: {name: record}}``: topics.json and subscriptionGroup.json.

    Every change bumps the data version (the name server compares it); persisting is the
    caller's decision. Loading merges into the current table (RocketMQ's putAll), so entries the
    broker created before loading, such as system topics, survive unless the file redefines them.
    """

    TABLE_KEY: ClassVar[str]

    def __init__(self, config_dir: Path) -> None:
        super().__init__(config_dir)
        self._table: dict[str, R] = {}
        self._version = DataVersion()

    @abstractmethod
    def _record_from_dict(self, value: object) -> R: ...

    @property
    def data_version(self) -> DataVersion:
        return self._version

    def get(self, name: str) -> R | None:
        with self._lock:
            return self._table.get(name)

    def put(self, record: R) -> None:
        with self._lock:
            self._table[record.table_key] = record
            self._version = self._version.next()

    def next_version(self) -> None:
        """Bump the data version with no change to the table (RocketMQ's dataVersion.nextVersion()
        after a brokerPermission update, so that name servers apply the table again)."""
        with self._lock:
            self._version = self._version.next()

    def remove(self, name: str) -> R | None:
        with self._lock:
            record = self._table.pop(name, None)
            if record is not None:
                self._version = self._version.next()
            return record

    def table(self) -> dict[str, R]:
        with self._lock:
            return dict(self._table)

    def encode(self, pretty: bool = False) -> str:
        with self._lock:
            doc = {
                "dataVersion": self._version.to_dict(),
                self.TABLE_KEY: {name: record.to_dict() for name, record in self._table.items()},
            }
        return to_json(doc, pretty)

    def decode(self, text: str) -> None:
        root = as_object(parse_fastjson(text), self.FILE_NAME)
        version = DataVersion.from_dict(root.get("dataVersion", {}))
        raw = as_object(root.get(self.TABLE_KEY, {}), self.TABLE_KEY)
        table = {name: self._record_from_dict(record) for name, record in raw.items()}
        with self._lock:
            self._table.update(table)
            self._version = version


class TopicConfigManager(_VersionedTable[TopicConfig]):
    """``topics.json``: ``{"dataVersion":{...},"topicConfigTable":{name: TopicConfig}}``."""

    FILE_NAME: ClassVar[str] = "topics.json"
    TABLE_KEY: ClassVar[str] = "topicConfigTable"

    def _record_from_dict(self, value: object) -> TopicConfig:
        return TopicConfig.from_dict(value)


class SubscriptionGroupManager(_VersionedTable[SubscriptionGroupConfig]):
    """``subscriptionGroup.json``: ``{"dataVersion":{...},"subscriptionGroupTable":{name: config}}``."""

    FILE_NAME: ClassVar[str] = "subscriptionGroup.json"
    TABLE_KEY: ClassVar[str] = "subscriptionGroupTable"

    def _record_from_dict(self, value: object) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig.from_dict(value)
