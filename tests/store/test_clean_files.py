"""CommitLog / ConsumeQueue / IndexFile cleanup: the behaviours of RocketMQ's DefaultMessageStoreCleanFilesTest.

The store is built the way RocketMQ's test builds it: 128-byte CommitLog segments that hold exactly
one message each (the body is sized so record + 8-byte end-of-file blank fill the segment), 55
messages, so 55 segments; consume queue files of 128 bytes (rounded up to 7 entries of 20 bytes)
and index files of 7 keys (maxIndexNum 8), so 8 of each. fileReservedTime is 1 hour and "expired"
segments get an mtime 2 hours back (os.utime), exactly what RocketMQ's test does with setLastModified.

Disk-usage scenarios use the REAL usage of the partition holding tmp_path and set the thresholds
below it; nothing about the disk is faked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rocketstore.common.message import END_FILE_MIN_BLANK_LENGTH, Message, properties_to_string, record_length
from rocketstore.store.clean import MAX_MANUAL_DELETE_FILE_TIMES, disk_partition_used_ratio
from rocketstore.store.config import FlushDiskType, StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.store.mapped_file_queue import DELETE_FILES_BATCH_MAX
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

TOPIC = "test"
KEYS = "hello"
QUEUE_ID = 0
FILE_COUNT_COMMIT_LOG = 55
MSG_COUNT = FILE_COUNT_COMMIT_LOG  # one message per CommitLog segment
MAPPED_FILE_SIZE = 128
FILE_RESERVED_TIME_H = 1
EXPIRED_FILE_COUNT = 15

PROPERTIES = {"KEYS": KEYS}
# Body sized like RocketMQ's test: record (91 fixed bytes + topic + properties + body) plus the
# 8-byte end-of-file blank exactly fill one segment, so the next put rolls to a new segment.
BODY_LEN = (
    MAPPED_FILE_SIZE
    - record_length(0, 0, len(TOPIC.encode()), len(properties_to_string(PROPERTIES).encode()))
    - END_FILE_MIN_BLANK_LENGTH
)
RECORD_LEN = MAPPED_FILE_SIZE - END_FILE_MIN_BLANK_LENGTH


class UnclampedRatioConfig(StoreConfig):
    """StoreConfig whose diskMaxUsedSpaceRatio is not clamped to 10..95.

    RocketMQ's own test does exactly this (MessageStoreConfigForTest) so that it can put the
    space threshold below whatever the real disk usage is: a disk that is less than 10 % used
    (common on CI runners) could otherwise never trigger space-based cleanup. The usage compared
    with the threshold is still the real partition usage.
    """

    __slots__ = ()

    def get_disk_max_used_space_ratio(self) -> int:
        return self.disk_max_used_space_ratio


def real_usage(path: Path) -> float:
    used = disk_partition_used_ratio(str(path))
    assert used >= 0, f"cannot stat {path}"
    return used


def hour_of_day(offset_h: int = 0) -> int:
    return (time.localtime().tm_hour + offset_h) % 24


def now_delete_when() -> str:
    """The current hour and the next one: a pass that straddles the hour still matches."""
    return f"{hour_of_day():02d};{hour_of_day(1):02d}"


def other_delete_when() -> str:
    """An hour far from now, so time-based deletion is certainly off."""
    return f"{hour_of_day(12):02d}"


def base_config(tmp_path: Path, cls: type[StoreConfig] = StoreConfig, **overrides: object) -> StoreConfig:
    values: dict[str, object] = {
        "store_path_root_dir": str(tmp_path / "store"),
        "mapped_file_size_commit_log": MAPPED_FILE_SIZE,
        "mapped_file_size_consume_queue": MAPPED_FILE_SIZE,
        "max_hash_slot_num": 100,
        "max_index_num": 8,
        "flush_disk_type": FlushDiskType.SYNC_FLUSH,
        "flush_interval_consume_queue": 1,
        "file_reserved_time": FILE_RESERVED_TIME_H,
        "delete_when": other_delete_when(),
        "disk_max_used_space_ratio": 95,
        # Keep the forced / disk-full paths off unless a test turns them on (RocketMQ's test uses 0.999).
        "disk_space_clean_forcibly_ratio": 0.999,
        "disk_space_warning_level_ratio": 0.999,
        "delete_commit_log_files_interval": 0,
        "delete_consume_queue_files_interval": 0,
        "clean_resource_interval": 2**31 - 1,
    }
    values.update(overrides)
    return cls(**values)  # type: ignore[arg-type]


StoreFactory = Callable[..., DefaultMessageStore]


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[StoreFactory]:
    stores: list[DefaultMessageStore] = []

    def factory(cls: type[StoreConfig] = StoreConfig, **overrides: object) -> DefaultMessageStore:
        cfg = base_config(tmp_path, cls, **overrides)
        if real_usage(tmp_path) > 0.95:
            pytest.skip("the partition holding tmp_path is over 95 % full; space pressure would skew every test")
        store = DefaultMessageStore(cfg)
        stores.append(store)
        store.load()
        store.start()
        put_messages(store, MSG_COUNT)
        return store

    yield factory
    for store in stores:
        store.shutdown()


def put_messages(store: DefaultMessageStore, count: int) -> None:
    for _ in range(count):
        result = store.put_message(Message(topic=TOPIC, body=b"\x00" * BODY_LEN, queue_id=QUEUE_ID,
                                           properties=dict(PROPERTIES)))
        assert result.status is PutMessageStatus.PUT_OK, result
        assert result.append is not None and result.append.wrote_bytes == RECORD_LEN
    assert store.reput_service.wait_caught_up(5)
    settle(store)


def settle(store: DefaultMessageStore) -> None:
    """Let background flushes finish, as RocketMQ's test does (flushConsumeQueue / flushConsumeIndex).

    A flush holds its file for a moment; a deletion pass racing with it would find the file busy
    and stop early, which is correct behaviour but would make the counts below timing-dependent.
    """
    store.index_service.wait_for_background_flushes(5)
    cq = store.get_consume_queue(TOPIC, QUEUE_ID)
    assert cq is not None
    last = cq.mapped_file_queue.last
    assert last is not None
    deadline = time.monotonic() + 5
    while cq.mapped_file_queue.flushed_where < last.file_from_offset and time.monotonic() < deadline:
        time.sleep(0.002)
    assert cq.mapped_file_queue.flushed_where >= last.file_from_offset


# -- what to expect, computed from the config as RocketMQ's test does ----------------------------

def msgs_per_cq_file(store: DefaultMessageStore) -> int:
    return store.config.get_mapped_file_size_consume_queue() // CQ_STORE_UNIT_SIZE  # 140 // 20 = 7


def msgs_per_index_file(store: DefaultMessageStore) -> int:
    return store.config.max_index_num - 1  # 7


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def commit_log_files(store: DefaultMessageStore) -> int:
    return len(store.commit_log.mapped_file_queue.mapped_files)


def cq_files(store: DefaultMessageStore) -> int:
    cq = store.get_consume_queue(TOPIC, QUEUE_ID)
    assert cq is not None
    return len(cq.mapped_file_queue.mapped_files)


def index_files(store: DefaultMessageStore) -> int:
    return len(store.index_service.files)


def expire_files(store: DefaultMessageStore, indexes: range | list[int]) -> None:
    """Age segments by twice the reserved time, like RocketMQ's test does with setLastModified."""
    aged = time.time() - 2 * FILE_RESERVED_TIME_H * 3600
    files = store.commit_log.mapped_file_queue.mapped_files
    for i in indexes:
        os.utime(files[i].path, (aged, aged))


def run_pass(store: DefaultMessageStore) -> int:
    deleted = store.clean_commit_log_service.run()
    store.clean_consume_queue_service.run()
    return deleted


def assert_counts_after(store: DefaultMessageStore, deleted_commit_log_files: int) -> None:
    """CommitLog, consume queue and index files all shrink in proportion to the deleted segments."""
    expected_cq = ceil_div(MSG_COUNT, msgs_per_cq_file(store)) - deleted_commit_log_files // msgs_per_cq_file(store)
    expected_index = (ceil_div(MSG_COUNT, msgs_per_index_file(store))
                      - deleted_commit_log_files // msgs_per_index_file(store))
    assert commit_log_files(store) == FILE_COUNT_COMMIT_LOG - deleted_commit_log_files
    assert store.commit_log.min_offset == deleted_commit_log_files * MAPPED_FILE_SIZE
    assert cq_files(store) == expected_cq
    assert index_files(store) == expected_index


def run_expecting_batches(store: DefaultMessageStore, total: int) -> None:
    """Each pass deletes at most DELETE_FILES_BATCH_MAX segments; check the state after each."""
    deleted = 0
    while deleted < total:
        batch = min(DELETE_FILES_BATCH_MAX, total - deleted)
        assert run_pass(store) == batch
        deleted += batch
        assert_counts_after(store, deleted)


# -- tests ---------------------------------------------------------------------------------------

def test_layout_one_message_per_segment(make_store: StoreFactory) -> None:
    store = make_store()
    assert BODY_LEN > 0 and RECORD_LEN + END_FILE_MIN_BLANK_LENGTH == MAPPED_FILE_SIZE
    files = store.commit_log.mapped_file_queue.mapped_files
    assert len(files) == FILE_COUNT_COMMIT_LOG
    assert [f.file_from_offset for f in files] == [i * MAPPED_FILE_SIZE for i in range(FILE_COUNT_COMMIT_LOG)]
    assert msgs_per_cq_file(store) == 7 and msgs_per_index_file(store) == 7
    assert cq_files(store) == ceil_div(MSG_COUNT, 7) == 8
    assert index_files(store) == 8
    # Every segment starts with its record; the queue maps entry i to segment i.
    cq = store.get_consume_queue(TOPIC, QUEUE_ID)
    assert cq is not None
    assert [e.commit_log_offset for e in cq.iter_entries()] == [i * MAPPED_FILE_SIZE for i in range(MSG_COUNT)]


def test_nothing_deleted_when_no_trigger_holds(make_store: StoreFactory) -> None:
    store = make_store()
    expire_files(store, range(EXPIRED_FILE_COUNT))
    assert run_pass(store) == 0
    assert_counts_after(store, 0)


def test_delete_expired_files_by_time_up(make_store: StoreFactory) -> None:
    store = make_store(delete_when=now_delete_when())
    expire_files(store, range(EXPIRED_FILE_COUNT))
    run_expecting_batches(store, EXPIRED_FILE_COUNT)  # 10, then 5
    # The 16th segment is young: further passes delete nothing.
    assert run_pass(store) == 0
    assert_counts_after(store, EXPIRED_FILE_COUNT)
    gone = [os.path.join(store.config.commit_log_dir(), f"{i * MAPPED_FILE_SIZE:020d}") for i in range(15)]
    assert not any(os.path.exists(p) for p in gone)


def test_deleted_messages_are_no_longer_readable(make_store: StoreFactory) -> None:
    store = make_store(delete_when=now_delete_when())
    expire_files(store, range(EXPIRED_FILE_COUNT))
    run_expecting_batches(store, EXPIRED_FILE_COUNT)
    assert store.get_min_offset_in_queue(TOPIC, QUEUE_ID) == EXPIRED_FILE_COUNT
    assert store.get_max_offset_in_queue(TOPIC, QUEUE_ID) == MSG_COUNT
    old = store.get_message("g", TOPIC, QUEUE_ID, 0, 32)
    assert old.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert old.next_begin_offset == EXPIRED_FILE_COUNT
    assert store.look_message_by_offset(0) is None
    kept = store.get_message("g", TOPIC, QUEUE_ID, EXPIRED_FILE_COUNT, 1)
    assert kept.status is GetMessageStatus.FOUND
    assert kept.message_queue_offsets == [EXPIRED_FILE_COUNT]


def test_deletion_stops_at_first_kept_file(make_store: StoreFactory) -> None:
    """No holes: an old segment behind a young one stays until the young one expires."""
    store = make_store(delete_when=now_delete_when())
    expire_files(store, [*range(5), *range(6, 20)])
    assert run_pass(store) == 5
    assert run_pass(store) == 0
    assert_counts_after(store, 5)


def test_active_last_file_is_never_deleted(make_store: StoreFactory) -> None:
    store = make_store(delete_when=now_delete_when())
    expire_files(store, range(FILE_COUNT_COMMIT_LOG))
    run_expecting_batches(store, FILE_COUNT_COMMIT_LOG - 1)  # 10, 10, 10, 10, 10, 4
    assert run_pass(store) == 0
    last = store.commit_log.mapped_file_queue.last
    assert commit_log_files(store) == 1
    assert last is not None and last.file_from_offset == (FILE_COUNT_COMMIT_LOG - 1) * MAPPED_FILE_SIZE
    assert cq_files(store) == 1 and index_files(store) == 1
    # The store keeps working on top of what is left.
    put_messages(store, 1)
    got = store.get_message("g", TOPIC, QUEUE_ID, MSG_COUNT - 1, 32)
    assert got.status is GetMessageStatus.FOUND and got.message_queue_offsets == [MSG_COUNT - 1, MSG_COUNT]


def test_delete_expired_files_by_space(make_store: StoreFactory, tmp_path: Path) -> None:
    used = real_usage(tmp_path)
    if used < 0.01:
        pytest.skip(f"the partition is only {used:.4f} used: no space threshold fits below it")
    # The whole percent below the real usage (at least 0): usage is certainly above the threshold.
    threshold_pct = max(int(used * 100) - 1, 0)
    store = make_store(UnclampedRatioConfig, disk_max_used_space_ratio=threshold_pct)
    assert store.clean_commit_log_service.is_space_to_delete()
    # Space pressure alone does not delete young segments (the forcible ratio is not exceeded) ...
    assert run_pass(store) == 0
    assert_counts_after(store, 0)
    # ... but expired ones go although deleteWhen does not match the hour.
    expire_files(store, range(EXPIRED_FILE_COUNT))
    run_expecting_batches(store, EXPIRED_FILE_COUNT)
    assert store.stats.deleted_files_by_cause["space"] == EXPIRED_FILE_COUNT


def forcible_ratio(tmp_path: Path) -> float:
    used = real_usage(tmp_path)
    if used <= 0:
        pytest.skip("the partition reports no usage at all")
    return min(0.01, used / 2)


def test_forced_deletion_when_over_clean_forcibly_ratio(make_store: StoreFactory, tmp_path: Path) -> None:
    """Above diskSpaceCleanForciblyRatio, segments go even though none has expired."""
    store = make_store(delete_when=now_delete_when(), disk_space_clean_forcibly_ratio=forcible_ratio(tmp_path))
    run_expecting_batches(store, FILE_COUNT_COMMIT_LOG - 1)  # no expire_files() at all
    assert run_pass(store) == 0
    assert commit_log_files(store) == 1
    assert not store.running_flags.disk_full  # under the warning level: puts still accepted
    put_messages(store, 1)


def test_forced_deletion_needs_clean_file_forcibly_enable(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store(delete_when=now_delete_when(), disk_space_clean_forcibly_ratio=forcible_ratio(tmp_path),
                       clean_file_forcibly_enable=False)
    assert run_pass(store) == 0
    assert_counts_after(store, 0)
    # Turning it on (live) lets the next pass force deletion.
    store.config.update({"cleanFileForciblyEnable": "true"})
    assert run_pass(store) == DELETE_FILES_BATCH_MAX
    assert_counts_after(store, DELETE_FILES_BATCH_MAX)


def test_delete_expired_files_manually(make_store: StoreFactory) -> None:
    store = make_store()  # deleteWhen far from now, space threshold 95 %
    expire_files(store, range(EXPIRED_FILE_COUNT))
    assert run_pass(store) == 0
    store.execute_delete_files_manually()
    assert store.clean_commit_log_service.manual_delete_file_several_times == MAX_MANUAL_DELETE_FILE_TIMES
    run_expecting_batches(store, EXPIRED_FILE_COUNT)
    assert store.clean_commit_log_service.manual_delete_file_several_times == MAX_MANUAL_DELETE_FILE_TIMES - 2
    assert store.stats.deleted_files_by_cause["manual"] == EXPIRED_FILE_COUNT
    # Manual deletion still respects expiry: young segments stay.
    assert run_pass(store) == 0
    assert_counts_after(store, EXPIRED_FILE_COUNT)


def test_manual_deletion_is_armed_for_twenty_passes_only(make_store: StoreFactory) -> None:
    store = make_store()
    store.execute_delete_files_manually()
    for _ in range(MAX_MANUAL_DELETE_FILE_TIMES):
        assert run_pass(store) == 0  # nothing expired yet, but each pass uses one arming
    assert store.clean_commit_log_service.manual_delete_file_several_times == 0
    expire_files(store, range(EXPIRED_FILE_COUNT))
    assert run_pass(store) == 0
    assert_counts_after(store, 0)


def test_disk_full_flag_set_and_cleared(make_store: StoreFactory, tmp_path: Path) -> None:
    store = make_store()
    low = forcible_ratio(tmp_path)
    if real_usage(tmp_path) > 0.99:
        pytest.skip("the partition is over 99 % full: the disk-full flag could not be cleared")
    store.config.update({"diskSpaceWarningLevelRatio": str(low), "diskSpaceCleanForciblyRatio": str(low)})
    run_pass(store)
    assert store.running_flags.disk_full
    assert store.runtime_info()["diskFull"] == "true"
    refused = store.put_message(Message(topic=TOPIC, body=b"x", queue_id=QUEUE_ID))
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    # Reads keep working while writes are refused, so consumers can drain.
    assert store.get_message("g", TOPIC, QUEUE_ID, 0, 1).status is GetMessageStatus.FOUND
    assert commit_log_files(store) == FILE_COUNT_COMMIT_LOG  # no deletion trigger held

    store.config.update({"diskSpaceWarningLevelRatio": "0.99", "diskSpaceCleanForciblyRatio": "0.99"})
    assert store.running_flags.disk_full  # only a pass re-evaluates the disk
    run_pass(store)
    assert not store.running_flags.disk_full
    assert store.runtime_info()["diskFull"] == "false"
    put_messages(store, 1)
    assert store.get_max_offset_in_queue(TOPIC, QUEUE_ID) == MSG_COUNT + 1


def test_disk_full_flag_is_kept_while_over_clean_forcibly_ratio(make_store: StoreFactory, tmp_path: Path) -> None:
    """Like RocketMQ, the flag is cleared only once usage is under both ratios."""
    store = make_store()
    low = forcible_ratio(tmp_path)
    store.config.update({"diskSpaceWarningLevelRatio": str(low), "diskSpaceCleanForciblyRatio": str(low)})
    run_pass(store)
    assert store.running_flags.disk_full
    store.config.update({"diskSpaceWarningLevelRatio": "0.99"})
    run_pass(store)
    assert store.running_flags.disk_full
    assert store.put_message(Message(topic=TOPIC, body=b"x")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_consume_queue_cleanup_follows_commit_log_min_offset(make_store: StoreFactory) -> None:
    store = make_store(delete_when=now_delete_when())
    # Nothing deleted from the CommitLog yet: the consume queue service has nothing to do.
    assert store.clean_consume_queue_service.run() == 0
    assert cq_files(store) == 8 and index_files(store) == 8
    expire_files(store, range(EXPIRED_FILE_COUNT))
    assert store.clean_commit_log_service.run() == DELETE_FILES_BATCH_MAX
    # Before the consume queue pass, its files are all still there.
    assert cq_files(store) == 8 and index_files(store) == 8
    # Only files whose last entry points below the new min offset (10 * 128) go: the first 7 entries.
    assert store.clean_consume_queue_service.run() == 1
    assert cq_files(store) == 7 and index_files(store) == 7
    cq = store.get_consume_queue(TOPIC, QUEUE_ID)
    assert cq is not None and cq.mapped_file_queue.min_offset == 7 * CQ_STORE_UNIT_SIZE
    assert store.get_min_offset_in_queue(TOPIC, QUEUE_ID) == DELETE_FILES_BATCH_MAX
    first_index = store.index_service.files[0]
    assert first_index.end_phy_offset >= store.commit_log.min_offset
    # A second run with an unchanged CommitLog min offset does nothing.
    assert store.clean_consume_queue_service.run() == 0


def test_delete_interval_between_files_is_honoured(make_store: StoreFactory) -> None:
    interval_ms = 60
    store = make_store(delete_when=now_delete_when(), delete_commit_log_files_interval=interval_ms)
    expire_files(store, range(EXPIRED_FILE_COUNT))
    started = time.monotonic()
    assert store.clean_commit_log_service.run() == DELETE_FILES_BATCH_MAX
    elapsed = time.monotonic() - started
    # A sleep between consecutive deletions: 9 of them for a batch of 10 (none after the last).
    assert elapsed >= (DELETE_FILES_BATCH_MAX - 1) * interval_ms / 1000 * 0.95


def test_live_file_reserved_time_change_applies_at_next_pass(make_store: StoreFactory) -> None:
    store = make_store(delete_when=now_delete_when())
    expire_files(store, range(EXPIRED_FILE_COUNT))  # 2 h old
    assert store.config.update({"fileReservedTime": "3"}) == {"fileReservedTime": "3"}
    assert run_pass(store) == 0  # 2 h old files are young under a 3 h retention
    store.config.update({"fileReservedTime": "1"})
    assert store.config.file_reserved_time == 1
    run_expecting_batches(store, EXPIRED_FILE_COUNT)


def test_live_delete_when_change_applies_at_next_pass(make_store: StoreFactory) -> None:
    store = make_store()
    expire_files(store, range(EXPIRED_FILE_COUNT))
    assert run_pass(store) == 0
    store.config.update({"deleteWhen": now_delete_when()})
    assert run_pass(store) == DELETE_FILES_BATCH_MAX
    store.config.update({"deleteWhen": other_delete_when()})
    assert run_pass(store) == 0
    assert_counts_after(store, DELETE_FILES_BATCH_MAX)


def test_held_segment_blocks_deletion_until_forcible_interval(make_store: StoreFactory) -> None:
    """A reader holding the oldest segment delays its deletion, at most destroyMapedFileIntervalForcibly."""
    forcibly_ms = 300
    store = make_store(delete_when=now_delete_when(), destroy_maped_file_interval_forcibly=forcibly_ms)
    expire_files(store, range(EXPIRED_FILE_COUNT))
    first = store.commit_log.mapped_file_queue.mapped_files[0]
    assert first.hold()  # a reader that never releases
    assert run_pass(store) == 0
    assert os.path.exists(first.path)
    assert not first.is_available  # marked for deletion: new readers are turned away
    assert store.commit_log.min_offset == MAPPED_FILE_SIZE  # readers already skip it
    time.sleep(forcibly_ms / 1000 + 0.05)
    assert run_pass(store) == DELETE_FILES_BATCH_MAX
    assert not os.path.exists(first.path)
    assert_counts_after(store, DELETE_FILES_BATCH_MAX)
