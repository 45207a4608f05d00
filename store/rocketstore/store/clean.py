"""Cleanup: RocketMQ's CleanCommitLogService and CleanConsumeQueueService.

A CommitLog pass runs when any of these holds:

* time   the local hour is one of ``deleteWhen`` ("04", or "04;10");
* space  disk usage of the store path is above ``diskMaxUsedSpaceRatio`` (percent, 10..95);
* manual ``execute_delete_files_manually()`` armed 20 passes (mqadmin deleteExpiredCommitLog).

Above ``diskSpaceCleanForciblyRatio`` files go even if not yet expired (when
``cleanFileForciblyEnable``); above ``diskSpaceWarningLevelRatio`` the disk is marked full and
puts are refused until usage drops. Consume queue and index files whose newest entry points
below the CommitLog's new min offset go next. Messages go whether or not they were consumed:
retention is by time and space, exactly as in RocketMQ.

All settings are read at each pass, so a live config change applies at the next pass. The
services get the parts of the store they act on, not the store itself, so cleanup depends on the
CommitLog, queues and indexes, and the store on cleanup, never the reverse.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable

from rocketstore.store.commit_log import CommitLog
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import ConsumeQueue
from rocketstore.store.index_file import IndexService
from rocketstore.store.running_flags import RunningFlags
from rocketstore.store.stats import StoreStatsService

log = logging.getLogger(__name__)

MAX_MANUAL_DELETE_FILE_TIMES = 20


def disk_partition_used_ratio(path: str) -> float:
    """Used fraction of the partition holding ``path``, as Java's (total - free) / total.

    Java's File.getFreeSpace counts blocks free to root too (f_bfree), so we do the same to
    trigger cleanup at the same point RocketMQ would. -1 when the path cannot be examined.
    """
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    if st.f_blocks == 0:
        return -1.0
    return (st.f_blocks - st.f_bfree) / st.f_blocks


def is_it_time_to_do(delete_when: str, hour: int | None = None) -> bool:
    """Whether the local hour is listed in ``delete_when`` ("04;10")."""
    now_hour = time.localtime().tm_hour if hour is None else hour
    for item in delete_when.split(";"):
        item = item.strip()
        if item and int(item) == now_hour:
            return True
    return False


class CleanCommitLogService:
    """Deletes expired CommitLog segments by time, space pressure or manual request."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, running_flags: RunningFlags,
                 stats: StoreStatsService) -> None:
        self.config = config
        self.commit_log = commit_log
        self.running_flags = running_flags
        self.stats = stats
        self.manual_delete_file_several_times = 0
        self.clean_immediately = False
        self._last_redelete_ms = 0

    def execute_delete_files_manually(self) -> None:
        self.manual_delete_file_several_times = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("manual CommitLog deletion armed for %d passes", MAX_MANUAL_DELETE_FILE_TIMES)

    def run(self) -> int:
        """One pass; returns the number of segments deleted. Never raises (a cleanup bug
        must not stop later passes), but logs what went wrong."""
        try:
            deleted = self.delete_expired_files()
            self.redelete_hanged_file()
            return deleted
        except Exception:
            log.exception("CommitLog cleanup pass failed")
            return 0

    def delete_expired_files(self) -> int:
        cfg = self.config
        time_up = self.is_time_to_delete()
        space_full = self.is_space_to_delete()
        manual = self.manual_delete_file_several_times > 0
        if not (time_up or space_full or manual):
            return 0
        if manual:
            self.manual_delete_file_several_times -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        log.info("deleting CommitLog files older than %d h (time %s, space %s, manual %s, forcibly %s)",
                 cfg.file_reserved_time, time_up, space_full, manual, clean_at_once)
        deleted = self.commit_log.delete_expired_file(
            cfg.file_reserved_time * 3600 * 1000,
            cfg.delete_commit_log_files_interval,
            cfg.destroy_maped_file_interval_forcibly,
            clean_at_once,
        )
        cause = "manual" if manual else "space" if space_full else "time"
        self.stats.record_deleted(cause, deleted)
        if deleted == 0 and space_full:
            log.warning("disk space will be full soon, but no CommitLog file could be deleted")
        return deleted

    def redelete_hanged_file(self) -> None:
        """Retry a first segment whose destroy was blocked by readers, once per interval."""
        cfg = self.config
        now = int(time.time() * 1000)
        if now - self._last_redelete_ms > cfg.redelete_hanged_file_interval:
            self._last_redelete_ms = now
            self.commit_log.retry_delete_first_file(cfg.destroy_maped_file_interval_forcibly)

    def is_time_to_delete(self) -> bool:
        return is_it_time_to_do(self.config.delete_when)

    def is_space_to_delete(self) -> bool:
        """Check both store paths; sets clean_immediately and the disk-full flag as RocketMQ does."""
        cfg = self.config
        ratio = cfg.get_disk_max_used_space_ratio() / 100.0
        self.clean_immediately = False
        flags = self.running_flags
        paths = [str(cfg.commit_log_dir()), str(cfg.consume_queue_dir())]
        for kind, path in zip(("physic", "logics"), paths, strict=True):
            used = disk_partition_used_ratio(path if os.path.exists(path) else str(cfg.root_dir()))
            if used > cfg.disk_space_warning_level_ratio:
                if flags.make_disk_full():
                    log.error("%s disk %.2f used, above the warning level %.2f: refusing puts", kind, used,
                              cfg.disk_space_warning_level_ratio)
                self.clean_immediately = True
            elif used > cfg.disk_space_clean_forcibly_ratio:
                self.clean_immediately = True
            elif not flags.make_disk_ok():
                log.info("%s disk %.2f used: accepting puts again", kind, used)
            if used < 0 or used > ratio:
                log.info("%s disk %.2f used, above diskMaxUsedSpaceRatio: reclaiming space", kind, used)
                return True
        return False


class CleanConsumeQueueService:
    """Deletes consume queue and index files left behind by CommitLog deletion."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog,
                 consume_queues: Callable[[], Iterable[ConsumeQueue]], index_service: IndexService) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index_service = index_service
        self.last_physical_min_offset = 0

    def run(self) -> int:
        try:
            return self.delete_expired_files()
        except Exception:
            log.exception("consume queue cleanup pass failed")
            return 0

    def delete_expired_files(self) -> int:
        min_offset = self.commit_log.min_offset
        if min_offset <= self.last_physical_min_offset:
            return 0
        self.last_physical_min_offset = min_offset
        interval = self.config.delete_consume_queue_files_interval
        deleted = 0
        for cq in self.consume_queues():
            count = cq.delete_expired_file(min_offset)
            deleted += count
            if count > 0 and interval > 0:
                time.sleep(interval / 1000)
        self.index_service.delete_expired_file(min_offset)
        return deleted
