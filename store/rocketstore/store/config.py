"""Message store configuration: RocketMQ 4.9.8's ``MessageStoreConfig`` as a dataclass.

Operators move ``broker.conf`` files between Apache RocketMQ and RocketStore, so every field,
default and key spelling follows RocketMQ 4.9.8. RocketMQ binds a properties file to its config
objects by reflection (``MixAll.properties2Object``): for each public ``setXxx`` method the key is
the method name without ``set`` and with its first letter lower-cased, and the value is parsed by
the setter's parameter type. ``KEY_BY_FIELD`` spells that key out for every field here.

Where RocketMQ is lax we are strict on purpose, because a silently ignored setting is how a store
ends up deleting data on the wrong schedule:

* RocketMQ swallows every parse error and keeps the default; we raise ``ConfigError`` naming the key.
* Numbers, enums and booleans are stripped of surrounding whitespace before parsing (``Properties``
  keeps trailing blanks; RocketMQ would then ignore ``fileReservedTime=48 `` and read
  ``messageIndexEnable=true `` as false). Strings are kept exactly as RocketMQ keeps them.
* ``deleteWhen`` and the two disk ratios are validated up front instead of failing later inside
  the cleanup service.
"""

import os
import re
import threading
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from rocketstore.common.java_properties import parse_properties

__all__ = [
    "ALIASES",
    "FIELD_BY_KEY",
    "KEY_BY_FIELD",
    "MULTI_PATH_SPLITTER",
    "BrokerRole",
    "ConfigError",
    "FlushDiskType",
    "StoreConfig",
    "assign_changed",
    "config_converters",
    "config_to_properties",
    "convert_known",
    "format_value",
    "load_broker_conf",
    "parse_delete_when",
]

# RocketMQ reads this from the system property ``rocketmq.broker.multiPathSplitter``.
MULTI_PATH_SPLITTER: Final = ","

# ConsumeQueue entry size: RocketMQ rounds the consume queue file size up to a multiple of it.
_CQ_UNIT_SIZE: Final = 20


class FlushDiskType(Enum):
    """When a PUT is acknowledged: after the page cache write, or after fsync."""

    SYNC_FLUSH = "SYNC_FLUSH"
    ASYNC_FLUSH = "ASYNC_FLUSH"


class BrokerRole(Enum):
    """Replication role; SYNC_MASTER waits for the slave before acknowledging."""

    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class ConfigError(ValueError):
    """A configuration value that cannot be used; names the key so the operator can fix it."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"config key {key!r}: invalid value {value!r}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


def _default_root_dir() -> str:
    # RocketMQ: System.getProperty("user.home") + File.separator + "store", evaluated per instance.
    return os.path.join(os.path.expanduser("~"), "store")


@dataclass(kw_only=True, slots=True)
class StoreConfig:
    """Every field of RocketMQ 4.9.8 ``MessageStoreConfig`` with its default, in its order.

    Readers read attributes at the point of use (never cache them) so that ``update`` takes
    effect on a running store without a restart.
    """

    store_path_root_dir: str = field(default_factory=_default_root_dir)
    store_path_commit_log: str | None = None  # None: <root>/commitlog; may list several, comma-separated
    store_path_dledger_commit_log: str | None = None
    read_only_commit_log_store_paths: str | None = None
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300000 * _CQ_UNIT_SIZE
    enable_consume_queue_ext: bool = False
    mapped_file_size_consume_queue_ext: int = 48 * 1024 * 1024
    bit_map_length_consume_queue_ext: int = 64
    flush_interval_commit_log: int = 500
    commit_interval_commit_log: int = 200
    use_reentrant_lock_when_put_message: bool = True
    flush_commit_log_timed: bool = True
    flush_interval_consume_queue: int = 1000
    clean_resource_interval: int = 10000
    delete_commit_log_files_interval: int = 100
    delete_consume_queue_files_interval: int = 100
    destroy_maped_file_interval_forcibly: int = 1000 * 120
    redelete_hanged_file_interval: int = 1000 * 120
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75  # read through get_disk_max_used_space_ratio()
    file_reserved_time: int = 72  # hours
    put_msg_index_hight_water: int = 600000
    max_message_size: int = 1024 * 1024 * 4
    check_crc_on_recover: bool = True
    flush_commit_log_least_pages: int = 4
    commit_commit_log_least_pages: int = 4
    flush_least_pages_when_warm_maped_file: int = 1024 // 4 * 16
    flush_consume_queue_least_pages: int = 2
    flush_commit_log_thorough_interval: int = 1000 * 10
    commit_commit_log_thorough_interval: int = 200
    flush_consume_queue_thorough_interval: int = 1000 * 60
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_disk: int = 1024 * 64
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    message_index_enable: bool = True
    max_hash_slot_num: int = 5000000
    max_index_num: int = 5000000 * 4
    max_msgs_num_batch: int = 64
    message_index_safe: bool = False
    ha_listen_port: int = 10912
    ha_send_heartbeat_interval: int = 1000 * 5
    ha_housekeeping_interval: int = 1000 * 20
    ha_transfer_batch_size: int = 1024 * 32
    ha_master_address: str | None = None
    ha_slave_fallbehind_max: int = 1024 * 1024 * 256
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    sync_flush_timeout: int = 1000 * 5
    slave_timeout: int = 3000
    # RocketMQ 5's controller-mode keys (failover: broker.replicas_manager, store.sync_state_set)
    ha_max_time_slave_not_catchup: int = 1000 * 15  # Java long
    all_ack_in_sync_state_set: bool = False
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    sync_from_last_file: bool = False
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    flush_delay_offset_interval: int = 1000 * 10  # Java long
    timer_wheel_enable: bool = True  # RocketMQ 5's key: timed messages (store.timer_message_store)
    timer_max_delay_sec: int = 3600 * 24 * 3  # RocketMQ 5's key: how far ahead a timer may be due
    clean_file_forcibly_enable: bool = True
    warm_maped_file_enable: bool = False
    offset_check_in_slave: bool = False
    debug_lock_enable: bool = False
    duplication_enable: bool = False
    disk_fall_recorded: bool = True
    os_page_cache_busy_time_out_mills: int = 1000  # Java long
    default_query_max_num: int = 32
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    fast_fail_if_no_buffer_in_store_pool: bool = False
    enable_dleger_commit_log: bool = False
    dleger_group: str | None = None
    dleger_peers: str | None = None
    dleger_self_id: str | None = None
    preferred_leader_id: str | None = None
    enable_batch_push: bool = False
    enable_schedule_message_stats: bool = True
    enable_lmq: bool = False
    enable_multi_dispatch: bool = False
    max_lmq_consume_queue_num: int = 20000
    enable_schedule_async_deliver: bool = False
    schedule_async_deliver_max_pending_limit: int = 2000
    schedule_async_deliver_max_resend_num2_blocked: int = 3
    # Not MessageStoreConfig fields: RocketMQ 4.9.8 reads these two once, in DefaultMessageStore's
    # CleanCommitLogService, from the JVM system properties rocketmq.broker.diskSpaceCleanForciblyRatio
    # and rocketmq.broker.diskSpaceWarningLevelRatio. Kept here so they live-update like the rest.
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> tuple["StoreConfig", dict[str, str]]:
        """Build a config from broker.conf properties.

        Returns the config and the properties it does not know (BrokerConfig, Netty settings...)
        so the broker can bind them itself, exactly as RocketMQ offers one file to several objects.
        """
        values, unknown = _convert_known(props)
        config = cls()
        for name, value in values.items():
            setattr(config, name, value)
        return config, unknown

    def update(self, props: Mapping[str, str]) -> dict[str, str]:
        """Apply camelCase properties to this live config; all or nothing.

        Everything is parsed before anything is assigned, so a bad value leaves the config as it
        was. Unknown keys are an error here (a typo must not look like success); a caller holding
        broker keys too should split them with ``FIELD_BY_KEY`` first. Returns the keys whose value
        changed, with their new values. Any field may be changed, as in RocketMQ, but only readers
        that re-read attributes (the cleanup service's retention fields, for instance) see the
        change before a restart.
        """
        with _UPDATE_LOCK:
            values, unknown = _convert_known(props)
            if unknown:
                key, raw = next(iter(unknown.items()))
                raise ConfigError(key, raw, "not a message store config key")
            return assign_changed(self, values, KEY_BY_FIELD)

    def to_properties(self) -> dict[str, str]:
        """Every set field as camelCase key/value strings; None fields are left out, as RocketMQ does."""
        return config_to_properties(self, KEY_BY_FIELD)

    # -- derived values, mirroring RocketMQ's getters and StorePathConfigHelper ------------------

    def get_disk_max_used_space_ratio(self) -> int:
        """Disk usage percentage above which cleanup runs; clamped to 10..95 like RocketMQ's getter."""
        return min(max(self.disk_max_used_space_ratio, 10), 95)

    def get_delete_when_hours(self) -> tuple[int, ...]:
        """Hours of the day at which expired files are deleted (``deleteWhen``, e.g. "04;10")."""
        return parse_delete_when(self.delete_when)

    def get_mapped_file_size_consume_queue(self) -> int:
        """Consume queue file size rounded up to whole 20-byte entries, as RocketMQ's getter does."""
        entries = -(-self.mapped_file_size_consume_queue // _CQ_UNIT_SIZE)
        return entries * _CQ_UNIT_SIZE

    def root_dir(self) -> Path:
        return Path(self.store_path_root_dir)

    def commit_log_dirs(self) -> list[Path]:
        """CommitLog directories: ``storePathCommitLog`` split on commas, else ``<root>/commitlog``.

        An empty ``storePathCommitLog`` counts as unset (RocketMQ would use the working directory).
        """
        configured = self.store_path_commit_log
        if configured:
            dirs = [Path(p) for p in configured.strip().split(MULTI_PATH_SPLITTER) if p]
            if dirs:
                return dirs
        return [self.root_dir() / "commitlog"]

    def commit_log_dir(self) -> Path:
        """The single CommitLog directory; a multi-path setting is refused rather than misread."""
        dirs = self.commit_log_dirs()
        if len(dirs) != 1:
            raise ConfigError(
                KEY_BY_FIELD["store_path_commit_log"],
                self.store_path_commit_log or "",
                "several commit log directories given; use commit_log_dirs()",
            )
        return dirs[0]

    def consume_queue_dir(self) -> Path:
        return self.root_dir() / "consumequeue"

    def index_dir(self) -> Path:
        return self.root_dir() / "index"

    def checkpoint_path(self) -> Path:
        return self.root_dir() / "checkpoint"

    def abort_path(self) -> Path:
        return self.root_dir() / "abort"

    def lock_path(self) -> Path:
        return self.root_dir() / "lock"

    def epoch_file_path(self) -> Path:
        """RocketMQ 5's epoch file (controller mode), at getStorePathEpochFile()'s default place."""
        return self.root_dir() / "epochFileCheckpoint"

    def timer_path(self) -> Path:
        """The timer table (store.timer_message_store): RocketStore's own, beside RocketMQ's files."""
        return self.root_dir() / "timer" / "timers.db"

    def config_dir(self) -> Path:
        """Where consumerOffset.json, topics.json, subscriptionGroup.json and delayOffset.json live."""
        return self.root_dir() / "config"


# Field -> the broker.conf key RocketMQ 4.9.8 derives from the setter. Spelling oddities are
# RocketMQ's own and must be kept: destroyMapedFileIntervalForcibly, putMsgIndexHightWater,
# warmMapedFileEnable, checkCRCOnRecover, dLegerGroup/dLegerPeers/dLegerSelfId (setter setdLegerXxx),
# storePathDLedgerCommitLog vs enableDLegerCommitLog, osPageCacheBusyTimeOutMills.
KEY_BY_FIELD: Final[Mapping[str, str]] = MappingProxyType(
    {
        "store_path_root_dir": "storePathRootDir",
        "store_path_commit_log": "storePathCommitLog",
        "store_path_dledger_commit_log": "storePathDLedgerCommitLog",
        "read_only_commit_log_store_paths": "readOnlyCommitLogStorePaths",
        "mapped_file_size_commit_log": "mappedFileSizeCommitLog",
        "mapped_file_size_consume_queue": "mappedFileSizeConsumeQueue",
        "enable_consume_queue_ext": "enableConsumeQueueExt",
        "mapped_file_size_consume_queue_ext": "mappedFileSizeConsumeQueueExt",
        "bit_map_length_consume_queue_ext": "bitMapLengthConsumeQueueExt",
        "flush_interval_commit_log": "flushIntervalCommitLog",
        "commit_interval_commit_log": "commitIntervalCommitLog",
        "use_reentrant_lock_when_put_message": "useReentrantLockWhenPutMessage",
        "flush_commit_log_timed": "flushCommitLogTimed",
        "flush_interval_consume_queue": "flushIntervalConsumeQueue",
        "clean_resource_interval": "cleanResourceInterval",
        "delete_commit_log_files_interval": "deleteCommitLogFilesInterval",
        "delete_consume_queue_files_interval": "deleteConsumeQueueFilesInterval",
        "destroy_maped_file_interval_forcibly": "destroyMapedFileIntervalForcibly",
        "redelete_hanged_file_interval": "redeleteHangedFileInterval",
        "delete_when": "deleteWhen",
        "disk_max_used_space_ratio": "diskMaxUsedSpaceRatio",
        "file_reserved_time": "fileReservedTime",
        "put_msg_index_hight_water": "putMsgIndexHightWater",
        "max_message_size": "maxMessageSize",
        "check_crc_on_recover": "checkCRCOnRecover",
        "flush_commit_log_least_pages": "flushCommitLogLeastPages",
        "commit_commit_log_least_pages": "commitCommitLogLeastPages",
        "flush_least_pages_when_warm_maped_file": "flushLeastPagesWhenWarmMapedFile",
        "flush_consume_queue_least_pages": "flushConsumeQueueLeastPages",
        "flush_commit_log_thorough_interval": "flushCommitLogThoroughInterval",
        "commit_commit_log_thorough_interval": "commitCommitLogThoroughInterval",
        "flush_consume_queue_thorough_interval": "flushConsumeQueueThoroughInterval",
        "max_transfer_bytes_on_message_in_memory": "maxTransferBytesOnMessageInMemory",
        "max_transfer_count_on_message_in_memory": "maxTransferCountOnMessageInMemory",
        "max_transfer_bytes_on_message_in_disk": "maxTransferBytesOnMessageInDisk",
        "max_transfer_count_on_message_in_disk": "maxTransferCountOnMessageInDisk",
        "access_message_in_memory_max_ratio": "accessMessageInMemoryMaxRatio",
        "message_index_enable": "messageIndexEnable",
        "max_hash_slot_num": "maxHashSlotNum",
        "max_index_num": "maxIndexNum",
        "max_msgs_num_batch": "maxMsgsNumBatch",
        "message_index_safe": "messageIndexSafe",
        "ha_listen_port": "haListenPort",
        "ha_send_heartbeat_interval": "haSendHeartbeatInterval",
        "ha_housekeeping_interval": "haHousekeepingInterval",
        "ha_transfer_batch_size": "haTransferBatchSize",
        "ha_master_address": "haMasterAddress",
        "ha_slave_fallbehind_max": "haSlaveFallbehindMax",
        "broker_role": "brokerRole",
        "flush_disk_type": "flushDiskType",
        "sync_flush_timeout": "syncFlushTimeout",
        "slave_timeout": "slaveTimeout",
        "ha_max_time_slave_not_catchup": "haMaxTimeSlaveNotCatchup",
        "all_ack_in_sync_state_set": "allAckInSyncStateSet",
        "in_sync_replicas": "inSyncReplicas",
        "min_in_sync_replicas": "minInSyncReplicas",
        "sync_from_last_file": "syncFromLastFile",
        "message_delay_level": "messageDelayLevel",
        "flush_delay_offset_interval": "flushDelayOffsetInterval",
        "timer_wheel_enable": "timerWheelEnable",
        "timer_max_delay_sec": "timerMaxDelaySec",
        "clean_file_forcibly_enable": "cleanFileForciblyEnable",
        "warm_maped_file_enable": "warmMapedFileEnable",
        "offset_check_in_slave": "offsetCheckInSlave",
        "debug_lock_enable": "debugLockEnable",
        "duplication_enable": "duplicationEnable",
        "disk_fall_recorded": "diskFallRecorded",
        "os_page_cache_busy_time_out_mills": "osPageCacheBusyTimeOutMills",
        "default_query_max_num": "defaultQueryMaxNum",
        "transient_store_pool_enable": "transientStorePoolEnable",
        "transient_store_pool_size": "transientStorePoolSize",
        "fast_fail_if_no_buffer_in_store_pool": "fastFailIfNoBufferInStorePool",
        "enable_dleger_commit_log": "enableDLegerCommitLog",
        "dleger_group": "dLegerGroup",
        "dleger_peers": "dLegerPeers",
        "dleger_self_id": "dLegerSelfId",
        "preferred_leader_id": "preferredLeaderId",
        "enable_batch_push": "enableBatchPush",
        "enable_schedule_message_stats": "enableScheduleMessageStats",
        "enable_lmq": "enableLmq",
        "enable_multi_dispatch": "enableMultiDispatch",
        "max_lmq_consume_queue_num": "maxLmqConsumeQueueNum",
        "enable_schedule_async_deliver": "enableScheduleAsyncDeliver",
        "schedule_async_deliver_max_pending_limit": "scheduleAsyncDeliverMaxPendingLimit",
        "schedule_async_deliver_max_resend_num2_blocked": "scheduleAsyncDeliverMaxResendNum2Blocked",
        "disk_space_clean_forcibly_ratio": "diskSpaceCleanForciblyRatio",
        "disk_space_warning_level_ratio": "diskSpaceWarningLevelRatio",
    }
)

# Extra accepted spellings. RocketMQ's field is ``isEnableBatchPush`` but its setter is
# ``setEnableBatchPush``: broker.conf takes ``enableBatchPush`` while RocketMQ's own config dump
# (GET_BROKER_CONFIG, built from field names) prints ``isEnableBatchPush``. Accepting the latter
# lets such a dump be read back.
ALIASES: Final[Mapping[str, str]] = MappingProxyType({"isEnableBatchPush": "enable_batch_push"})

FIELD_BY_KEY: Final[Mapping[str, str]] = MappingProxyType(
    {**{key: name for name, key in KEY_BY_FIELD.items()}, **ALIASES}
)

_FIELD_NAMES = {f.name for f in fields(StoreConfig)}
if set(KEY_BY_FIELD) != _FIELD_NAMES:
    raise RuntimeError(f"KEY_BY_FIELD out of step with StoreConfig: {_FIELD_NAMES ^ set(KEY_BY_FIELD)}")

_JAVA_LONG_FIELDS: Final = frozenset({"flush_delay_offset_interval", "os_page_cache_busy_time_out_mills"})
_JAVA_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_DECIMAL_RE: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_UPDATE_LOCK: Final = threading.Lock()


def parse_delete_when(value: str) -> tuple[int, ...]:
    """Parse ``deleteWhen`` ("04", "04;10") into hours.

    RocketMQ compares each ``;``-separated number with the current hour of day and ignores a
    trailing ``;``; anything else fails inside its cleanup thread, so we reject it here instead.
    """
    parts = value.split(";")
    while len(parts) > 1 and not parts[-1].strip():
        parts.pop()
    hours: list[int] = []
    for part in parts:
        text = part.strip()
        if not _JAVA_INT_RE.fullmatch(text):
            raise ConfigError("deleteWhen", value, "expected hours of the day separated by ';', e.g. 04;10")
        hours.append(int(text))
    return tuple(hours)


def _java_integer(bits: int) -> Callable[[str, str], object]:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    kind = "an int" if bits == 32 else "a long"

    def convert(key: str, raw: str) -> object:
        text = raw.strip()
        if not _JAVA_INT_RE.fullmatch(text):
            raise ConfigError(key, raw, f"expected {kind} (decimal digits)")
        try:
            number = int(text)
        except ValueError:  # more digits than Python converts; certainly out of range
            number = high + 1
        if not low <= number <= high:
            raise ConfigError(key, raw, f"out of range for {kind} ({low}..{high})")
        return number

    return convert


def _java_boolean(key: str, raw: str) -> object:
    # Boolean.parseBoolean: "true" in any case is true, everything else is false; never an error.
    return raw.strip().lower() == "true"


def _ratio(key: str, raw: str) -> object:
    text = raw.strip()
    if not _DECIMAL_RE.fullmatch(text):
        raise ConfigError(key, raw, "expected a decimal number such as 0.85")
    number = float(text)
    if not 0.0 <= number <= 1.0:
        raise ConfigError(key, raw, "a ratio must be between 0 and 1")
    return number


def _string(key: str, raw: str) -> object:
    return raw


def _delete_when(key: str, raw: str) -> object:
    try:
        parse_delete_when(raw)
    except ConfigError as exc:
        raise ConfigError(key, raw, exc.reason) from None
    return raw


def _enum(enum_type: type[Enum]) -> Callable[[str, str], object]:
    def convert(key: str, raw: str) -> object:
        # Enum.valueOf: the exact, case-sensitive constant name.
        try:
            return enum_type[raw.strip()]
        except KeyError:
            allowed = ", ".join(m.name for m in enum_type)
            raise ConfigError(key, raw, f"expected one of {allowed}") from None

    return convert


def _converter(name: str, tp: object, long_fields: frozenset[str] = _JAVA_LONG_FIELDS) -> Callable[[str, str], object]:
    if name == "delete_when":
        return _delete_when
    if tp is bool:
        return _java_boolean
    if tp is int:
        return _java_integer(64 if name in long_fields else 32)
    if tp is float:
        return _ratio
    if tp in (str, str | None):
        return _string
    if isinstance(tp, type) and issubclass(tp, Enum):
        return _enum(tp)
    raise TypeError(f"StoreConfig.{name}: no properties converter for {tp!r}")


def assign_changed(config: object, values: Mapping[str, object], key_by_field: Mapping[str, str]) -> dict[str, str]:
    """Assign parsed ``values`` to a live config; returns the changed camelCase keys with their new text.

    A single attribute store is atomic under the GIL, so readers see the old or the new value.
    """
    changed: dict[str, str] = {}
    for name, value in values.items():
        if getattr(config, name) != value:
            setattr(config, name, value)
            changed[key_by_field[name]] = format_value(value)
    return changed


def config_to_properties(config: Any, key_by_field: Mapping[str, str]) -> dict[str, str]:
    """Every set field of a config dataclass as camelCase key/value text; None fields left out, as RocketMQ does."""
    out: dict[str, str] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if value is not None:
            out[key_by_field[f.name]] = format_value(value)
    return out


def config_converters(config_type: type, long_fields: frozenset[str]) -> Mapping[str, Callable[[str, str], object]]:
    """Field name -> ``(key, raw) -> value`` for every field of a config dataclass, parsed the way
    RocketMQ's setters would (ints range-checked as Java int, or long for ``long_fields``). Shared
    with the broker's BrokerConfig so both halves of broker.conf follow the same rules."""
    hints = typing.get_type_hints(config_type)
    return MappingProxyType({name: _converter(name, tp, long_fields) for name, tp in hints.items()})


_CONVERTERS: Final[Mapping[str, Callable[[str, str], object]]] = config_converters(StoreConfig, _JAVA_LONG_FIELDS)


def convert_known(
    props: Mapping[str, str],
    field_by_key: Mapping[str, str],
    converters: Mapping[str, Callable[[str, str], object]],
) -> tuple[dict[str, object], dict[str, str]]:
    """Parse the keys a config knows (values by field name) and hand back the rest untouched.

    Shared by StoreConfig and the broker's BrokerConfig: one broker.conf feeds both.
    """
    values: dict[str, object] = {}
    unknown: dict[str, str] = {}
    for key, raw in props.items():
        name = field_by_key.get(key)
        if name is None:
            unknown[key] = raw
        else:
            values[name] = converters[name](key, raw)
    return values, unknown


def _convert_known(props: Mapping[str, str]) -> tuple[dict[str, object], dict[str, str]]:
    return convert_known(props, FIELD_BY_KEY, _CONVERTERS)


def _format(value: object) -> str:
    """A value as RocketMQ's ``toString`` writes it (booleans lower-case, enums by name)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return value.name
    return str(value)


format_value: Final = _format  # public name for other config objects (the broker's BrokerConfig)


def load_broker_conf(path: str | os.PathLike[str]) -> tuple[StoreConfig, dict[str, str]]:
    """Read a broker.conf; returns the store config and the keys meant for other components.

    The file is decoded as ISO-8859-1 because ``Properties.load(InputStream)`` does: non-ASCII
    text must be written as ``\\uXXXX`` for RocketMQ, and then reads the same here.
    """
    text = Path(path).read_bytes().decode("latin-1")
    return StoreConfig.from_properties(parse_properties(text))
