"""StoreConfig: RocketMQ 4.9.8 defaults and keys, broker.conf parsing, live updates."""

from pathlib import Path

import pytest

from rocketstore.common.java_properties import format_properties, parse_properties
from rocketstore.store.config import (
    ALIASES,
    FIELD_BY_KEY,
    KEY_BY_FIELD,
    BrokerRole,
    ConfigError,
    FlushDiskType,
    StoreConfig,
    load_broker_conf,
    parse_delete_when,
)

# The keys RocketMQ 4.9.8 derives from MessageStoreConfig's setters (setXxx -> xXx), typed out
# independently of store/config.py so a slip in either shows up here.
ROCKETMQ_KEYS = {
    "storePathRootDir", "storePathCommitLog", "storePathDLedgerCommitLog", "readOnlyCommitLogStorePaths",
    "mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "enableConsumeQueueExt",
    "mappedFileSizeConsumeQueueExt", "bitMapLengthConsumeQueueExt", "flushIntervalCommitLog",
    "commitIntervalCommitLog", "useReentrantLockWhenPutMessage", "flushCommitLogTimed",
    "flushIntervalConsumeQueue", "cleanResourceInterval", "deleteCommitLogFilesInterval",
    "deleteConsumeQueueFilesInterval", "destroyMapedFileIntervalForcibly", "redeleteHangedFileInterval",
    "deleteWhen", "diskMaxUsedSpaceRatio", "fileReservedTime", "putMsgIndexHightWater", "maxMessageSize",
    "checkCRCOnRecover", "flushCommitLogLeastPages", "commitCommitLogLeastPages",
    "flushLeastPagesWhenWarmMapedFile", "flushConsumeQueueLeastPages", "flushCommitLogThoroughInterval",
    "commitCommitLogThoroughInterval", "flushConsumeQueueThoroughInterval",
    "maxTransferBytesOnMessageInMemory", "maxTransferCountOnMessageInMemory",
    "maxTransferBytesOnMessageInDisk", "maxTransferCountOnMessageInDisk", "accessMessageInMemoryMaxRatio",
    "messageIndexEnable", "maxHashSlotNum", "maxIndexNum", "maxMsgsNumBatch", "messageIndexSafe",
    "haListenPort", "haSendHeartbeatInterval", "haHousekeepingInterval", "haTransferBatchSize",
    "haMasterAddress", "haSlaveFallbehindMax", "brokerRole", "flushDiskType", "syncFlushTimeout",
    "slaveTimeout", "messageDelayLevel", "flushDelayOffsetInterval", "cleanFileForciblyEnable",
    "warmMapedFileEnable", "offsetCheckInSlave", "debugLockEnable", "duplicationEnable", "diskFallRecorded",
    "osPageCacheBusyTimeOutMills", "defaultQueryMaxNum", "transientStorePoolEnable", "transientStorePoolSize",
    "fastFailIfNoBufferInStorePool", "enableDLegerCommitLog", "dLegerGroup", "dLegerPeers", "dLegerSelfId",
    "preferredLeaderId", "enableBatchPush", "enableScheduleMessageStats", "enableLmq", "enableMultiDispatch",
    "maxLmqConsumeQueueNum", "enableScheduleAsyncDeliver", "scheduleAsyncDeliverMaxPendingLimit",
    "scheduleAsyncDeliverMaxResendNum2Blocked",
}  # fmt: skip


# -- defaults and keys -------------------------------------------------------------------------


def test_key_table_is_rocketmqs_setter_keys_plus_the_ratios_the_timer_and_the_controller_keys() -> None:
    assert len(ROCKETMQ_KEYS) == 78
    assert set(KEY_BY_FIELD.values()) == ROCKETMQ_KEYS | {
        "diskSpaceCleanForciblyRatio",  # system properties in 4.9.8
        "diskSpaceWarningLevelRatio",
        "timerWheelEnable",  # RocketMQ 5's, for timed messages
        "timerMaxDelaySec",
        "haMaxTimeSlaveNotCatchup",  # RocketMQ 5's controller mode (failover)
        "allAckInSyncStateSet",
        "inSyncReplicas",
        "minInSyncReplicas",
        "syncFromLastFile",
    }
    assert len(set(KEY_BY_FIELD.values())) == len(KEY_BY_FIELD)
    assert ALIASES == {"isEnableBatchPush": "enable_batch_push"}
    assert FIELD_BY_KEY["dLegerGroup"] == "dleger_group"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("mappedFileSizeCommitLog", "1073741824"),
        ("mappedFileSizeConsumeQueue", "6000000"),
        ("flushDiskType", "ASYNC_FLUSH"),
        ("brokerRole", "ASYNC_MASTER"),
        ("deleteWhen", "04"),
        ("fileReservedTime", "72"),
        ("diskMaxUsedSpaceRatio", "75"),
        ("cleanFileForciblyEnable", "true"),
        ("destroyMapedFileIntervalForcibly", "120000"),
        ("redeleteHangedFileInterval", "120000"),
        ("putMsgIndexHightWater", "600000"),
        ("checkCRCOnRecover", "true"),
        ("warmMapedFileEnable", "false"),
        ("flushLeastPagesWhenWarmMapedFile", "4096"),
        ("osPageCacheBusyTimeOutMills", "1000"),
        ("flushDelayOffsetInterval", "10000"),
        ("maxMessageSize", "4194304"),
        ("flushIntervalCommitLog", "500"),
        ("flushCommitLogLeastPages", "4"),
        ("flushCommitLogThoroughInterval", "10000"),
        ("flushIntervalConsumeQueue", "1000"),
        ("syncFlushTimeout", "5000"),
        ("cleanResourceInterval", "10000"),
        ("deleteCommitLogFilesInterval", "100"),
        ("maxTransferCountOnMessageInMemory", "32"),
        ("maxTransferBytesOnMessageInMemory", "262144"),
        ("maxTransferCountOnMessageInDisk", "8"),
        ("maxTransferBytesOnMessageInDisk", "65536"),
        ("accessMessageInMemoryMaxRatio", "40"),
        ("messageIndexEnable", "true"),
        ("maxHashSlotNum", "5000000"),
        ("maxIndexNum", "20000000"),
        ("haListenPort", "10912"),
        ("haSlaveFallbehindMax", "268435456"),
        ("enableDLegerCommitLog", "false"),
        ("enableBatchPush", "false"),
        ("scheduleAsyncDeliverMaxResendNum2Blocked", "3"),
        ("messageDelayLevel", "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"),
        ("diskSpaceCleanForciblyRatio", "0.85"),
        ("diskSpaceWarningLevelRatio", "0.9"),
    ],
)
def test_defaults_match_rocketmq_4_9_8(key: str, expected: str) -> None:
    assert StoreConfig().to_properties()[key] == expected


def test_null_defaults_are_none_and_left_out_of_properties() -> None:
    config = StoreConfig()
    assert config.store_path_commit_log is None
    assert config.ha_master_address is None
    assert config.dleger_group is None
    props = config.to_properties()
    for key in ("storePathCommitLog", "haMasterAddress", "dLegerGroup", "dLegerPeers", "preferredLeaderId"):
        assert key not in props


def test_root_dir_defaults_to_home_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    config = StoreConfig()
    assert config.store_path_root_dir == str(tmp_path / "store")
    assert config.commit_log_dir() == tmp_path / "store" / "commitlog"


def test_enums_are_rocketmqs() -> None:
    assert {m.name for m in FlushDiskType} == {"ASYNC_FLUSH", "SYNC_FLUSH"}
    assert {m.name for m in BrokerRole} == {"ASYNC_MASTER", "SYNC_MASTER", "SLAVE"}


# -- java.util.Properties parsing -----------------------------------------------------------------


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# comment\n! bang comment\n   # indented comment\n\n   \t\nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


@pytest.mark.parametrize(
    "line",
    ["key=value", "key = value", "key:value", "key : value", "key value", "key\tvalue", "  key   =   value"],
)
def test_separators_and_surrounding_blanks(line: str) -> None:
    assert parse_properties(line) == {"key": "value"}


def test_value_keeps_trailing_blanks_and_later_separators() -> None:
    props = parse_properties("a=b  \nurl=http://h:1/x=y\nk==v\nk2 = :v\nempty=\nbare\n")
    assert props == {"a": "b  ", "url": "http://h:1/x=y", "k": "=v", "k2": ":v", "empty": "", "bare": ""}


@pytest.mark.parametrize("props", [
    {"plain": "value", "empty": ""},
    {"k y": " leading blank", "a=b": "x:y#z!w", "back\\slash": "c:\\dir\\", "lines": "one\ntwo\r\tthree\f"},
    {"#not-a-comment": "!", "ünï": "cødé", " spaced key ": "  "},
])
def test_format_properties_reads_back(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props)) == props


def test_line_continuation_drops_backslash_and_next_leading_blanks() -> None:
    text = "namesrvAddr=127.0.0.1:9876;\\\n        127.0.0.2:9876\nnext=1\n"
    assert parse_properties(text) == {"namesrvAddr": "127.0.0.1:9876;127.0.0.2:9876", "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert parse_properties("path=C:\\\\\nnext=1\n") == {"path": "C:\\", "next": "1"}


def test_continuation_edge_cases() -> None:
    # A comment line never continues; '#' on a continuation line is data; a blank line ends a
    # continuation; a continuation at end of input keeps what came before.
    assert parse_properties("# note \\\nkey=v\n") == {"key": "v"}
    assert parse_properties("key=a\\\n  #b\n") == {"key": "a#b"}
    assert parse_properties("key=a\\\n\nother=b\n") == {"key": "a", "other": "b"}
    assert parse_properties("key=a\\") == {"key": "a"}


def test_line_endings_crlf_and_cr() -> None:
    assert parse_properties("a=1\r\nb=2\rc=3") == {"a": "1", "b": "2", "c": "3"}


def test_escapes() -> None:
    text = "k\\ ey\\=x\\:y=v\\tw\\nx\\\\\nname=caf\\u00e9 \\uD83D\\uDE00\nq=\\q\n"
    assert parse_properties(text) == {"k ey=x:y": "v\tw\nx\\", "name": "café 😀", "q": "q"}


def test_malformed_unicode_escape_is_an_error() -> None:
    with pytest.raises(ValueError, match="uXXXX"):
        parse_properties("k=\\u12G4")


def test_last_duplicate_wins() -> None:
    assert parse_properties("k=1\nk=2\n") == {"k": "2"}


def test_load_broker_conf_reads_iso_8859_1_like_java(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_bytes(
        b"brokerClusterName=DefaultCluster\n"
        b"brokerName=caf\xe9\n"
        b"brokerRole = SYNC_MASTER\n"
        b"flushDiskType=SYNC_FLUSH\n"
        b"storePathRootDir=" + str(tmp_path / "s").encode() + b"\n"
        b"fileReservedTime=48\n"
    )
    config, unknown = load_broker_conf(conf)
    assert config.broker_role is BrokerRole.SYNC_MASTER
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.file_reserved_time == 48
    assert config.config_dir() == tmp_path / "s" / "config"
    assert unknown == {"brokerClusterName": "DefaultCluster", "brokerName": "café"}


# -- conversion ----------------------------------------------------------------------------------


def test_from_properties_converts_by_type_and_returns_unknown_keys() -> None:
    config, unknown = StoreConfig.from_properties(
        {
            "mappedFileSizeCommitLog": "+1024",
            "flushDelayOffsetInterval": str(2**40),
            "messageIndexEnable": "FALSE",
            "brokerRole": "SLAVE",
            "haMasterAddress": "10.0.0.1:10912",
            "diskSpaceCleanForciblyRatio": "0.5",
            "isEnableBatchPush": "true",
            "brokerId": "1",
            "listenPort": "10911",
        }
    )
    assert config.mapped_file_size_commit_log == 1024
    assert config.flush_delay_offset_interval == 2**40
    assert config.message_index_enable is False
    assert config.broker_role is BrokerRole.SLAVE
    assert config.ha_master_address == "10.0.0.1:10912"
    assert config.disk_space_clean_forcibly_ratio == 0.5
    assert config.enable_batch_push is True
    assert unknown == {"brokerId": "1", "listenPort": "10911"}


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("TRUE", True), (" True ", True)])
def test_boolean_true_spellings(raw: str, expected: bool) -> None:
    config, _ = StoreConfig.from_properties({"messageIndexEnable": "false", "enableLmq": raw})
    assert config.enable_lmq is expected


@pytest.mark.parametrize("raw", ["false", "yes", "1", "on", ""])
def test_boolean_anything_else_is_false_like_boolean_parse_boolean(raw: str) -> None:
    config, _ = StoreConfig.from_properties({"messageIndexEnable": raw})
    assert config.message_index_enable is False


def test_typed_values_are_stripped_but_strings_are_verbatim() -> None:
    config, _ = StoreConfig.from_properties(
        {"fileReservedTime": " 48 ", "flushDiskType": "SYNC_FLUSH ", "messageDelayLevel": "1s 2s "}
    )
    assert config.file_reserved_time == 48
    assert config.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert config.message_delay_level == "1s 2s "


@pytest.mark.parametrize(
    ("key", "raw", "reason"),
    [
        ("fileReservedTime", "72h", "expected an int"),
        ("fileReservedTime", "1.5", "expected an int"),
        ("fileReservedTime", "", "expected an int"),
        ("mappedFileSizeCommitLog", "2147483648", "out of range"),
        ("flushDelayOffsetInterval", str(2**63), "out of range"),
        ("flushDiskType", "sync_flush", "expected one of"),
        ("brokerRole", "MASTER", "expected one of"),
        ("diskSpaceWarningLevelRatio", "90%", "decimal number"),
        ("diskSpaceCleanForciblyRatio", "1.5", "between 0 and 1"),
        ("deleteWhen", "4am", "hours of the day"),
        ("deleteWhen", "", "hours of the day"),
        ("deleteWhen", "04;;10", "hours of the day"),
    ],
)
def test_wrong_typed_value_raises_config_error_naming_the_key(key: str, raw: str, reason: str) -> None:
    with pytest.raises(ConfigError) as caught:
        StoreConfig.from_properties({"brokerName": "b", key: raw})
    error = caught.value
    assert (error.key, error.value) == (key, raw)
    assert reason in error.reason
    assert repr(key) in str(error)


def test_delete_when_hours() -> None:
    assert parse_delete_when("04") == (4,)
    assert parse_delete_when("04;10") == (4, 10)
    assert parse_delete_when("04;10;") == (4, 10)  # Java's split drops the trailing empty part
    config, _ = StoreConfig.from_properties({"deleteWhen": "01; 13"})
    assert config.get_delete_when_hours() == (1, 13)


# -- derived values and paths ---------------------------------------------------------------------


@pytest.mark.parametrize(("ratio", "effective"), [(5, 10), (10, 10), (75, 75), (95, 95), (99, 95)])
def test_disk_max_used_space_ratio_is_clamped(ratio: int, effective: int) -> None:
    assert StoreConfig(disk_max_used_space_ratio=ratio).get_disk_max_used_space_ratio() == effective


def test_consume_queue_file_size_rounds_up_to_whole_entries() -> None:
    assert StoreConfig().get_mapped_file_size_consume_queue() == 6_000_000
    assert StoreConfig(mapped_file_size_consume_queue=101).get_mapped_file_size_consume_queue() == 120
    assert StoreConfig(mapped_file_size_consume_queue=120).get_mapped_file_size_consume_queue() == 120


def test_store_paths(tmp_path: Path) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path))
    assert config.commit_log_dir() == tmp_path / "commitlog"
    assert config.commit_log_dirs() == [tmp_path / "commitlog"]
    assert config.consume_queue_dir() == tmp_path / "consumequeue"
    assert config.index_dir() == tmp_path / "index"
    assert config.checkpoint_path() == tmp_path / "checkpoint"
    assert config.abort_path() == tmp_path / "abort"
    assert config.lock_path() == tmp_path / "lock"
    assert config.config_dir() == tmp_path / "config"


def test_commit_log_path_override_and_multi_path(tmp_path: Path) -> None:
    config = StoreConfig(store_path_root_dir=str(tmp_path), store_path_commit_log="/data/cl")
    assert config.commit_log_dir() == Path("/data/cl")
    config.store_path_commit_log = ""  # empty means unset (RocketMQ would use the working directory)
    assert config.commit_log_dir() == tmp_path / "commitlog"
    config.store_path_commit_log = " /a,/b, "
    assert config.commit_log_dirs() == [Path("/a"), Path("/b")]  # trimmed; trailing comma ignored
    with pytest.raises(ConfigError, match="storePathCommitLog"):
        config.commit_log_dir()


# -- live updates --------------------------------------------------------------------------------


def test_update_applies_at_once_and_reports_only_changes() -> None:
    config = StoreConfig()
    changed = config.update(
        {
            "fileReservedTime": "72",
            "deleteWhen": "03;15",
            "diskMaxUsedSpaceRatio": "99",
            "cleanFileForciblyEnable": "false",
            "diskSpaceCleanForciblyRatio": "0.8",
        }
    )
    assert changed == {
        "deleteWhen": "03;15",
        "diskMaxUsedSpaceRatio": "99",
        "cleanFileForciblyEnable": "false",
        "diskSpaceCleanForciblyRatio": "0.8",
    }
    assert config.get_delete_when_hours() == (3, 15)
    assert config.get_disk_max_used_space_ratio() == 95
    assert config.clean_file_forcibly_enable is False
    assert config.update({"fileReservedTime": "72"}) == {}


def test_update_is_all_or_nothing() -> None:
    config = StoreConfig()
    before = config.to_properties()
    with pytest.raises(ConfigError) as caught:
        config.update({"fileReservedTime": "1", "deleteWhen": "05", "diskMaxUsedSpaceRatio": "lots"})
    assert caught.value.key == "diskMaxUsedSpaceRatio"
    assert config.to_properties() == before


def test_update_rejects_unknown_keys_without_applying_anything() -> None:
    config = StoreConfig()
    with pytest.raises(ConfigError) as caught:
        config.update({"fileReservedTime": "1", "fileReserveTime": "2"})
    assert caught.value.key == "fileReserveTime"
    assert config.file_reserved_time == 72


def test_to_properties_round_trips(tmp_path: Path) -> None:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        store_path_commit_log=str(tmp_path / "cl"),
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        broker_role=BrokerRole.SLAVE,
        check_crc_on_recover=False,
        os_page_cache_busy_time_out_mills=2**35,
        disk_space_warning_level_ratio=0.95,
        dleger_peers="n0-127.0.0.1:40911",
    )
    props = config.to_properties()
    assert props["flushDiskType"] == "SYNC_FLUSH"
    assert props["checkCRCOnRecover"] == "false"
    assert props["dLegerPeers"] == "n0-127.0.0.1:40911"
    rebuilt, unknown = StoreConfig.from_properties(props)
    assert unknown == {}
    assert rebuilt == config
