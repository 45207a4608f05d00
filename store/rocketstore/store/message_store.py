"""DefaultMessageStore: composes the store's parts and orders their lifecycle.

    load()      open CommitLog segments, consume queues, index files, checkpoint, epoch file;
                recover (normal, or abnormal when ``abort`` was left behind), then finish a
                truncation a crash interrupted (see store.truncation)
    start()     take the lock, create ``abort``, dispatch until caught up, start services
    shutdown()  stop services, flush, and remove ``abort`` only if dispatch had caught up

The read API mirrors RocketMQ's MessageStore in snake_case. Everything that does real work
lives in the concept modules (commit_log, consume_queue, index_file, dispatch, clean, ...).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from rocketstore.common.clock import now_ms
from rocketstore.common.message import PROPERTY_DELAY_TIME_LEVEL, Message, StoredMessage, tags_code
from rocketstore.common.topic_validator import RMQ_SYS_SCHEDULE_TOPIC
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.clean import CleanCommitLogService, CleanConsumeQueueService, disk_partition_used_ratio
from rocketstore.store.commit_log import (
    PROPERTY_WAIT_STORE_MSG_OK,
    CommitLog,
    CommitLogSettings,
    MessageBatch,
    PlainPut,
    PlainSendEncoder,
    PlainSendRequest,
    PutMessageResult,
    ServedSends,
)
from rocketstore.store.config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, ConsumeQueue
from rocketstore.store.dispatch import LagWaiter, MessageArrivingListener, ReputMessageService
from rocketstore.store.dispatch_scan import ScanResult
from rocketstore.store.epoch_file import EpochFileCache
from rocketstore.store.ha_service import ALL_ACK_IN_SYNC_STATE_SET, HAService, TransferWaiter
from rocketstore.store.index_file import IndexService
from rocketstore.store.pull_transfer import (
    WALK_STATUSES,
    PullFrame,
    PullOutcome,
    TransferLimits,
    pull_messages,
    walk_queue,
)
from rocketstore.store.running_flags import RunningFlags
from rocketstore.store.schedule_message_service import (
    ScheduleMessageService,
    delay_level_of,
    delay_level_to_queue_id,
    parse_delay_levels,
    schedule,
)
from rocketstore.store.stats import StoreStatsService
from rocketstore.store.status import GetMessageStatus, PutMessageStatus
from rocketstore.store.store_lock import StoreLock
from rocketstore.store.timer_message_store import TimerIllegal, TimerMessageStore, TimerNotEnabled, timer
from rocketstore.store.truncation import TruncateIntent, crash_point

log = logging.getLogger(__name__)

_DEFAULT_PHYSICAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class MessageFilter(Protocol):
    """Decides which entries a pull returns (RocketMQ's MessageFilter)."""

    def is_matched_by_consume_queue(self, tags_code: int) -> bool: ...

    def is_matched_by_commit_log(self, record: bytes) -> bool: ...


class TagFilter:
    """Subscription by tag expression: ``*`` (or empty) for all, else ``TagA || TagB``.

    Like RocketMQ's broker-side filter it compares tag hash codes only; a client re-checks
    the tag strings, which is where a hash collision is resolved.
    """

    def __init__(self, expression: str | None) -> None:
        expr = (expression or "").strip()
        self.subscribe_all = expr in ("", "*")
        self.tags = [] if self.subscribe_all else [t.strip() for t in expr.split("||") if t.strip()]
        self.code_set = {tags_code(t) for t in self.tags}

    def is_matched_by_consume_queue(self, code: int) -> bool:
        return self.subscribe_all or code in self.code_set

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        return True


@dataclass(slots=True)
class GetMessageResult:
    """A pull's outcome: the raw records (as the broker ships them) and where to go next."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    message_queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.messages)


class PulledFrame(NamedTuple):
    """A tag subscription's pull: the outcome (its ``messages`` empty), how many records were
    found, and the SUCCESS response frame holding them (None unless FOUND)."""

    result: GetMessageResult
    message_count: int
    frame: bytes | None


@dataclass(slots=True)
class QueryMessageResult:
    messages: list[StoredMessage]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


class DefaultMessageStore:
    """The message store: RocketMQ's DefaultMessageStore (with its HAService, without DLedger)."""

    def __init__(self, config: StoreConfig, *, on_message_arriving: MessageArrivingListener | None = None) -> None:
        self.config = config
        root = str(config.root_dir())
        self.root_dir = root
        os.makedirs(root, exist_ok=True)
        self.checkpoint = StoreCheckpoint(str(config.checkpoint_path()))
        sync = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.commit_log = CommitLog(
            CommitLogSettings(
                store_path=str(config.commit_log_dir()),
                file_size=config.mapped_file_size_commit_log,
                sync_flush=sync,
                max_message_size=lambda: config.max_message_size,
                sync_flush_timeout_ms=lambda: config.sync_flush_timeout,
                flush_interval_ms=lambda: config.flush_interval_commit_log,
                flush_least_pages=lambda: config.flush_commit_log_least_pages,
                flush_thorough_interval_ms=lambda: config.flush_commit_log_thorough_interval,
                check_crc_on_recover=config.check_crc_on_recover,
            ),
            self.checkpoint,
        )
        self.consume_queue_dir = str(config.consume_queue_dir())
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        #: guards consume_queue_table's shape: creating a queue, a dispatch pass (which may create
        #: and appends), deleting a topic's queues. Reentrant: a pass creates queues under it.
        self._cq_lock = threading.RLock()
        self.index_service = IndexService(
            str(config.index_dir()), config.max_hash_slot_num, config.max_index_num, self.checkpoint,
            message_index_enable=config.message_index_enable, max_msgs_num_batch=config.max_msgs_num_batch,
        )
        self.running_flags = RunningFlags()
        self.stats = StoreStatsService()
        self.schedule_message_service = ScheduleMessageService(self, parse_delay_levels(config.message_delay_level))
        self.timer_message_store = TimerMessageStore(self, config.timer_path())
        self._on_message_arriving = on_message_arriving
        self.reput_service = self._new_reput_service()
        self.ha_service = HAService(config, self.commit_log)
        self.commit_log.on_appended = self._on_appended
        self.clean_commit_log_service = CleanCommitLogService(config, self.commit_log, self.running_flags, self.stats)
        self.clean_consume_queue_service = CleanConsumeQueueService(
            config, self.commit_log, self._all_consume_queues, self.index_service)
        self._lock = StoreLock(str(config.lock_path()))
        self.abort_path = str(config.abort_path())
        #: controller mode's epoch history; only a truncation changes it here
        self.epoch_cache = EpochFileCache(config.epoch_file_path())
        self._truncate_intent = TruncateIntent(root)
        self.last_exit_ok = True
        self.shutdown_flag = True
        self._scheduler_stop = threading.Event()
        self._schedule_started = False
        self._threads: list[threading.Thread] = []
        self.total_physical_memory = _DEFAULT_PHYSICAL_MEMORY
        #: controller mode: whether this replica may take writes now (the broker's ReplicasManager:
        #: master, within its elector's write deadline); None outside controller mode
        self.write_fence: Callable[[], bool] | None = None

    def _new_reput_service(self) -> ReputMessageService:
        return ReputMessageService(
            self.commit_log, [self._build_consume_queues, self._build_index], self._on_message_arriving,
            index_enabled=self.config.message_index_enable,
            delay_levels_ms=self.schedule_message_service.levels_ms,
        )

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Open everything on disk and recover; raises with a clear message if it cannot.

        The directory lock is taken first: recovery truncates and deletes files, which must
        never happen under a store that is running (StoreLockedError instead).
        """
        self._lock.acquire()
        try:
            self.last_exit_ok = not os.path.exists(self.abort_path)
            log.info("last shutdown %s", "normal" if self.last_exit_ok else "abnormal")
            self.commit_log.load()
            self._load_consume_queues()
            self.index_service.load(self.last_exit_ok)
            self.epoch_cache.load()
            self._recover()
        except BaseException:
            self._lock.release()
            raise

    def _load_consume_queues(self) -> None:
        if not os.path.isdir(self.consume_queue_dir):
            return
        for topic in sorted(os.listdir(self.consume_queue_dir)):
            topic_dir = os.path.join(self.consume_queue_dir, topic)
            if not os.path.isdir(topic_dir):
                continue
            for qid in sorted(os.listdir(topic_dir)):
                if qid.lstrip("-").isdigit():
                    self.find_consume_queue(topic, int(qid)).load()

    def _recover(self) -> None:
        max_phy_of_cq = -1
        for cq in self._all_consume_queues():
            cq.recover()
            max_phy_of_cq = max(max_phy_of_cq, cq.max_physic_offset)
        redispatch_from = -1
        if self.last_exit_ok:
            end, truncate = self.commit_log.recover_normally(max_phy_of_cq)
        else:
            end, truncate, redispatch_from = self.commit_log.recover_abnormally(
                max_phy_of_cq, self._recover_min_timestamp()
            )
        interrupted = self._truncate_intent.pending()
        if interrupted is not None:
            log.warning("a truncation to %d was interrupted; finishing it", interrupted)
            self._truncate(interrupted)
            self._truncate_intent.clear()
            end = min(end, self.commit_log.max_offset)
        # epochs starting past the log's end (a RocketMQ broker killed between cutting its log
        # and its epoch file) describe records this store does not have
        self.epoch_cache.truncate_suffix_by_offset(self.commit_log.max_offset + 1)
        if redispatch_from >= 0:
            self.reput_service.dispatch_from(redispatch_from)
        if not self.commit_log.mapped_file_queue.mapped_files:
            self.destroy_logics()
        elif truncate:
            log.info("consume queues reach %d, the CommitLog ends at %d: truncating them there", max_phy_of_cq, end)
            for cq in self._all_consume_queues():
                cq.truncate_dirty_logic_files(end)
        self.recover_topic_queue_table()

    def truncate_files(self, offset: int) -> bool:
        """Cut the store back to CommitLog offset ``offset`` (RocketMQ's truncateFiles followed by
        the epoch file's truncateSuffixByOffset): a former master rejoining as a slave discards
        the records the new master does not have. Crash-safe, see :mod:`rocketstore.store.truncation`.

        False, changing nothing, when ``offset`` is not a record boundary (nor the start of a torn
        record ending the log, :meth:`_starts_torn_tail`) or lies before the CommitLog's first
        record; an offset at or past its end only trims the epoch file. The store may be loaded or
        running; a running one keeps running (dispatch restarts from the cut), and whoever
        replicates into it must have stopped doing so.
        """
        if offset >= self.commit_log.max_offset:
            self.epoch_cache.truncate_suffix_by_offset(offset)
            return True
        if offset < self.commit_log.min_offset or not (self.commit_log.is_offset_aligned(offset)
                                                       or self._starts_torn_tail(offset)):
            log.error("cannot truncate to %d: not a record boundary in [%d, %d)", offset,
                      self.commit_log.min_offset, self.commit_log.max_offset)
            return False
        self._truncate_intent.record(offset)
        crash_point("intent-recorded")
        self._truncate(offset)
        self._truncate_intent.clear()
        return True

    def _starts_torn_tail(self, offset: int) -> bool:
        """Whether ``offset`` starts the record a slave's log ends inside of (replicated frames are
        cut anywhere): dispatch never got past it, and its size, if even readable, reaches past the
        log's end. A controller-mode slave may have to cut there (the new master's history starts
        a new epoch at that record), which :meth:`truncate_files` allows like a record boundary."""
        if offset < self.reput_service.reput_from_offset:
            return False
        remaining = self.commit_log.max_offset - offset
        if remaining < 4:
            return True
        head = self.commit_log.get_message(offset, 4)
        return head is not None and int.from_bytes(head, "big", signed=True) > remaining

    def _truncate(self, offset: int) -> None:
        """The steps of :meth:`truncate_files`, each idempotent (recovery repeats them all)."""
        log.info("truncating the store to %d (CommitLog ends at %d)", offset, self.commit_log.max_offset)
        running = not self.shutdown_flag
        if running:
            self.reput_service.shutdown()
        reput_from = self.reput_service.reput_from_offset
        with self._cq_lock:
            for i, cq in enumerate(self._all_consume_queues()):
                cq.truncate_dirty_logic_files(offset, wipe=True)
                if i == 0:
                    crash_point("first-consume-queue-cut")
        crash_point("consume-queues-cut")
        self.commit_log.truncate_dirty_files(offset)
        crash_point("commit-log-cut")
        self.index_service.truncate(offset)
        self.recover_topic_queue_table()
        self.epoch_cache.truncate_suffix_by_offset(offset)
        crash_point("epoch-file-cut")
        if running:
            self.reput_service = self._new_reput_service()
            self.reput_service.reput_from_offset = min(reput_from, offset)
            self.reput_service.start()

    def _recover_min_timestamp(self) -> int:
        if self.config.message_index_enable and self.config.message_index_safe:
            return self.checkpoint.min_timestamp_index
        return self.checkpoint.min_timestamp

    def recover_topic_queue_table(self) -> None:
        """Next queue offset per queue = the consume queue's max; min offsets follow the CommitLog."""
        table: dict[str, int] = {}
        min_phy = self.commit_log.min_offset
        for cq in self._all_consume_queues():
            table[self.commit_log.queue_key(cq.topic, cq.queue_id)] = cq.max_offset_in_queue
            cq.correct_min_offset(min_phy)
        self.commit_log.topic_queue_table = table

    def start(self) -> None:
        """Lock the directory, mark the run with ``abort``, catch dispatch up, start services."""
        self._lock.acquire()
        try:
            with open(self.abort_path, "w"):
                pass
            max_physical = self.commit_log.min_offset
            for cq in self._all_consume_queues():
                max_physical = max(max_physical, cq.max_physic_offset)
            self.reput_service.reput_from_offset = max(max_physical, self.commit_log.min_offset, 0)
            self.reput_service.start()
            while not self.reput_service.wait_caught_up(1.0):
                log.info("start-up: dispatch %d bytes behind", self.reput_service.behind_bytes)
            self.recover_topic_queue_table()
            self.commit_log.start()
            self.ha_service.start()
            if self.config.broker_role is BrokerRole.SLAVE and self.config.ha_master_address:
                self.update_ha_master_address(self.config.ha_master_address)
            self.shutdown_flag = False
            self._start_thread("FlushConsumeQueueService", self._flush_consume_queue_loop)
            self._start_thread("StoreScheduledService", self._scheduled_loop)
            if self.config.broker_role is not BrokerRole.SLAVE:  # a slave's copy is delivered by its master
                self._start_special_services()
        except BaseException:
            self._lock.release()
            raise

    def _start_special_services(self) -> None:
        """The services only a master runs: delayed and timer messages are delivered by it alone."""
        if self._schedule_started:
            return
        self.schedule_message_service.load()
        self.schedule_message_service.start()
        self.timer_message_store.load()
        self.timer_message_store.start()
        self._schedule_started = True

    def _stop_special_services(self) -> None:
        if self._schedule_started:  # they deliver through put_message: stop them while puts still work
            self.timer_message_store.shutdown()
            self.schedule_message_service.shutdown()
            self._schedule_started = False

    def _start_thread(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def shutdown(self) -> None:
        """Stop in reverse order; ``abort`` stays when dispatch had not caught up (next start re-checks)."""
        if self.shutdown_flag and not self._threads:
            self._lock.release()  # loaded but never started: still holds the directory lock
            return
        self._stop_special_services()
        self.shutdown_flag = True
        self.ha_service.shutdown()  # no more appends from a master, nothing more streamed to slaves
        self._scheduler_stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        self.reput_service.wait_caught_up(5.0)
        self.reput_service.shutdown()
        self.commit_log.shutdown()
        self._flush_consume_queues(0)
        self.index_service.shutdown()
        self.checkpoint.flush()
        self.checkpoint.shutdown()
        for cq in self._all_consume_queues():
            cq.shutdown()
        if self.running_flags.is_writeable and self.dispatch_behind_bytes == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.abort_path)
        else:
            log.warning("shutdown with dispatch %d bytes behind: keeping abort for recovery",
                        self.dispatch_behind_bytes)
        self._lock.release()

    def destroy(self) -> None:
        """Delete the whole store directory's data (tests and a deliberate reset)."""
        self.destroy_logics()
        self.commit_log.mapped_file_queue.destroy()
        self.index_service.destroy()
        for name in ("checkpoint", "abort"):
            path = os.path.join(self.root_dir, name)
            if os.path.exists(path):
                os.unlink(path)

    def destroy_logics(self) -> None:
        for cq in self._all_consume_queues():
            cq.destroy()
        with self._cq_lock:
            self.consume_queue_table.clear()
        if os.path.isdir(self.consume_queue_dir):
            shutil.rmtree(self.consume_queue_dir, ignore_errors=True)

    # -- background services ---------------------------------------------------------------
    def _flush_consume_queue_loop(self) -> None:
        last_thorough = time.monotonic()
        while not self._scheduler_stop.wait(self.config.flush_interval_consume_queue / 1000):
            least = self.config.flush_consume_queue_least_pages
            if (time.monotonic() - last_thorough) * 1000 >= self.config.flush_consume_queue_thorough_interval:
                last_thorough = time.monotonic()
                least = 0
            try:
                self._flush_consume_queues(least)
            except OSError:
                log.exception("consume queue flush failed; retrying at the next interval")

    def _flush_consume_queues(self, least_pages: int) -> None:
        logics_timestamp = self.checkpoint.logics_msg_timestamp
        for cq in self._all_consume_queues():
            cq.flush(least_pages)
        if least_pages == 0:
            if logics_timestamp > 0:
                self.checkpoint.logics_msg_timestamp = logics_timestamp
            self.checkpoint.flush()

    def _scheduled_loop(self) -> None:
        """RocketMQ's cleanFilesPeriodically: first after 60 s, then every cleanResourceInterval."""
        if self._scheduler_stop.wait(60):
            return
        while True:
            self.clean_files_periodically()
            if self._scheduler_stop.wait(self.config.clean_resource_interval / 1000):
                return

    def clean_files_periodically(self) -> None:
        self.clean_commit_log_service.run()
        self.clean_consume_queue_service.run()

    def execute_delete_files_manually(self) -> None:
        """mqadmin deleteExpiredCommitLog: arm 20 deletion passes regardless of deleteWhen."""
        self.clean_commit_log_service.execute_delete_files_manually()

    # -- dispatchers -----------------------------------------------------------------------
    def _build_consume_queues(self, found: ScanResult) -> None:
        if not self.running_flags.is_cq_writeable:
            return
        with self._cq_lock:  # one acquisition a pass: delete_topic never destroys a queue mid-append
            for run in found.runs:
                cq = self.find_consume_queue(run.topic, run.queue_id)
                if not cq.put_message_position_infos(run.first_queue_offset, run.count, run.entries):
                    log.error("consume queue %s-%d write failed", run.topic, run.queue_id)
                    self.running_flags.make_logics_queue_error()
                    return
        if found.last_queue_timestamp:
            self.checkpoint.logics_msg_timestamp = found.last_queue_timestamp

    def _build_index(self, found: ScanResult) -> None:
        self.index_service.put_index_entries(found.index_entries)

    # -- consume queues --------------------------------------------------------------------
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self.consume_queue_table.get(topic)
        if queues is not None:
            cq = queues.get(queue_id)
            if cq is not None:
                return cq
        with self._cq_lock:
            queues = self.consume_queue_table.setdefault(topic, {})
            cq = queues.get(queue_id)
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self.consume_queue_dir,
                                  self.config.get_mapped_file_size_consume_queue())
                queues[queue_id] = cq
            return cq

    def get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queue_table.get(topic, {}).get(queue_id)

    def delete_topic(self, topic: str, dispatch_timeout_s: float = 3.0) -> list[int]:
        """Destroy one topic's consume queues and forget its next queue offsets, so that a topic
        created again under this name starts empty at offset 0: DefaultMessageStore.cleanUnusedTopic
        (with CommitLog.removeQueueFromTopicQueueTable) for the topic DELETE_TOPIC_IN_BROKER names.
        Its records stay in the CommitLog until they expire, as in RocketMQ. Returns the queue ids
        destroyed.

        Dispatch is let catch up first: records of the topic still ahead of it would rebuild a
        queue right after the deletion. The queues then go under the lock each dispatch pass
        holds, so no pass appends to a queue being destroyed; a reader holding a queue keeps its
        mapping (the files are unlinked, which Linux allows while mapped)."""
        if not self.reput_service.wait_caught_up(dispatch_timeout_s):
            log.warning("delete topic %s: dispatch still %d bytes behind after %g s; deleting anyway", topic,
                        self.reput_service.behind_bytes, dispatch_timeout_s)
        with self._cq_lock:
            queues = self.consume_queue_table.pop(topic, {})
            for cq in queues.values():
                cq.destroy()
            shutil.rmtree(os.path.join(self.consume_queue_dir, topic), ignore_errors=True)
        with self.commit_log.put_lock:
            table = self.commit_log.topic_queue_table
            for key in [k for k in table if k.rpartition("-")[0] == topic]:
                del table[key]
        log.info("delete topic %s: consume queues %s destroyed", topic, sorted(queues))
        return sorted(queues)

    def _all_consume_queues(self) -> Iterator[ConsumeQueue]:
        for queues in list(self.consume_queue_table.values()):
            yield from list(queues.values())

    # -- put -------------------------------------------------------------------------------
    def _check_store_status(self) -> PutMessageStatus | None:
        if self.shutdown_flag:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.config.broker_role is BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        fence = self.write_fence
        if fence is not None and not fence():  # every write path: sends, transactions, deliveries
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if not self.running_flags.is_writeable:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE
        if self.commit_log.lock_held_ms() > self.config.os_page_cache_busy_time_out_mills:
            return PutMessageStatus.OS_PAGECACHE_BUSY
        return None

    def put_message(self, msg: Message, *, wait_flush: bool = True, timeup: bool = False) -> PutMessageResult:
        """Put one message; with SYNC_FLUSH it returns once durable unless ``wait_flush`` is
        False, in which case the caller waits through :meth:`request_flush`.

        A message with a positive ``DELAY`` is stored on SCHEDULE_TOPIC_XXXX (see
        schedule_message_service), one with a timer property due later on rmq_sys_wheel_timer
        (timer_message_store), unless ``timeup``: one of those services delivering it, whose put
        keeps the record's properties and never waits for a flush.
        """
        refused = self._check_store_status()
        if refused is not None:
            return PutMessageResult(refused)
        if timeup:
            wait_flush = False
        else:
            try:
                msg = timer(msg, now_ms(), enabled=self.config.timer_wheel_enable,
                            max_delay_ms=self.config.timer_max_delay_sec * 1000)
                msg = schedule(msg, self.schedule_message_service.max_delay_level)
            except TimerNotEnabled as exc:
                log.warning("put refused: %s", exc)
                return PutMessageResult(PutMessageStatus.WHEEL_TIMER_NOT_ENABLE)
            except TimerIllegal as exc:
                log.warning("put refused: %s", exc)
                return PutMessageResult(PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL)
            except ValueError as exc:
                log.warning("put refused: %s", exc)
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        begin = time.monotonic()
        wait_store_ok = msg.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"
        if not self._enough_in_sync_replicas(wait_store_ok):
            return PutMessageResult(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        result = self.commit_log.put_message(msg, wait_flush=False)
        result = self._handle_disk_flush_and_ha(result, wait_flush=wait_flush and wait_store_ok,
                                                wait_store_ok=wait_store_ok, wait_replica=wait_flush)
        self.stats.record_put(result, time.monotonic() - begin, msg.topic)
        return result

    def put_plain_sends(self, sends: Sequence[PlainSendRequest], *, caller_waits: bool = False) -> list[PlainPut]:
        """Plain sends' or batches' puts, in order (:meth:`CommitLog.put_plain_sends`: the puts of
        the longest prefix of ``sends`` it took), when nothing about the store makes them more than
        appends: a writable master whose puts wait for neither a flush nor a slave (ASYNC_FLUSH,
        ASYNC_MASTER) or, with ``caller_waits``, one whose caller waits for both itself
        (:meth:`request_flush`, :meth:`request_transfer`), as it does after :meth:`put_message`
        with ``wait_flush=False``; it must not pass ``caller_waits`` for a message that says
        ``WAIT=false``. A SYNC_MASTER put stored while no slave is OK says SLAVE_NOT_AVAILABLE
        (``PlainPut.status``), as :meth:`_handle_disk_flush_and_ha` decides. An empty list when
        the store is none of these or controller mode has too few in-sync replicas; the caller
        then puts the first message the list does not cover through :meth:`put_message` (a batch
        through :meth:`put_messages`), which decides the same again."""
        config = self.config
        role = config.broker_role
        if caller_waits:
            if role is BrokerRole.SLAVE or not self._enough_in_sync_replicas(True):
                return []
        elif config.flush_disk_type is not FlushDiskType.ASYNC_FLUSH or role is not BrokerRole.ASYNC_MASTER:
            return []
        if self._check_store_status() is not None:
            return []
        done = self.commit_log.put_plain_sends(sends)
        if not done:
            return done
        stored = [(send[3], 1, put.msg_num, put.wrote_bytes) for send, put in zip(sends, done, strict=False)]
        self.stats.record_stored(stored, done[0].elapsed_s)
        # isSlaveOK right after the appends: the ends grow, so the last one being OK makes every one OK
        if role is BrokerRole.SYNC_MASTER and not self.is_slave_ok(done[-1].wrote_offset + done[-1].wrote_bytes):
            return [put if self.is_slave_ok(put.wrote_offset + put.wrote_bytes)
                    else put._replace(status=PutMessageStatus.SLAVE_NOT_AVAILABLE) for put in done]
        return done

    def serve_plain_frames(self, encoder: PlainSendEncoder, data: bytes, start: int, max_frame: int,
                           topics: dict[str, tuple[int, int] | None], born_host: bytes) -> ServedSends:
        """Plain SEND_MESSAGE_V2 requests at the head of a connection's read stored in one native
        call (:meth:`CommitLog.serve_plain_frames`), when the store is a writable ASYNC_FLUSH
        ASYNC_MASTER, whose puts wait for nothing (the answers go out at once); otherwise none is
        served and the connection's usual path takes every frame."""
        config = self.config
        if (config.flush_disk_type is not FlushDiskType.ASYNC_FLUSH or config.broker_role is not BrokerRole.ASYNC_MASTER
                or self._check_store_status() is not None):
            return ServedSends(0, b"", [], None, 0.0)
        served = self.commit_log.serve_plain_frames(encoder, data, start, max_frame, topics, born_host)
        if served.consumed:
            self.stats.record_stored([(topic, sends, sends, size) for topic, sends, size in served.runs],
                                     served.elapsed_s)
        return served

    def put_messages(self, batch: MessageBatch, *, wait_flush: bool = True) -> PutMessageResult:
        """Put a batch; ``wait_flush`` as for :meth:`put_message`. A batch cannot be delayed."""
        refused = self._check_store_status()
        if refused is not None:
            return PutMessageResult(refused)
        try:
            delayed = delay_level_of(batch.properties) > 0
        except ValueError:
            delayed = True
        if delayed:
            log.warning("put refused: a batch cannot be delayed (DELAY=%r)",
                        batch.properties.get(PROPERTY_DELAY_TIME_LEVEL))
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL)
        begin = time.monotonic()
        if not self._enough_in_sync_replicas(batch.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false"):
            return PutMessageResult(PutMessageStatus.IN_SYNC_REPLICAS_NOT_ENOUGH)
        result = self.commit_log.put_messages(batch, wait_flush=False)
        result = self._handle_disk_flush_and_ha(
            result, wait_flush=wait_flush, wait_replica=wait_flush,
            wait_store_ok=batch.properties.get(PROPERTY_WAIT_STORE_MSG_OK) != "false")
        self.stats.record_put(result, time.monotonic() - begin, batch.topic)
        return result

    def _handle_disk_flush_and_ha(self, result: PutMessageResult, *, wait_flush: bool, wait_store_ok: bool,
                                  wait_replica: bool) -> PutMessageResult:
        """After an append: wait for the flush and the slave as RocketMQ's CommitLog does
        (submitFlushRequest and submitReplicaRequest combined, the replica's status winning).

        SYNC_FLUSH with ``wait_flush``: durable within syncFlushTimeout, else FLUSH_DISK_TIMEOUT.
        SYNC_MASTER, unless the message says ``WAIT=false``: SLAVE_NOT_AVAILABLE at once when no
        slave is OK (:meth:`is_slave_ok`, decided right after the append, as RocketMQ does);
        otherwise, with ``wait_replica``, a slave must report past the put within slaveTimeout
        (RocketMQ's GroupTransferService deadline), else FLUSH_SLAVE_TIMEOUT. Without
        ``wait_replica`` the put answers PUT_OK and the caller waits through
        :meth:`request_transfer` (the broker's event loop does, holding no thread).
        ASYNC_MASTER and SLAVE never wait for a slave.
        """
        append = result.append
        if result.status is not PutMessageStatus.PUT_OK or append is None:
            return result
        end = append.wrote_offset + append.wrote_bytes
        transferred: threading.Event | None = None
        replica_status = PutMessageStatus.PUT_OK
        deadline = 0.0
        if self.config.broker_role is BrokerRole.SYNC_MASTER and wait_store_ok:
            if not self.is_slave_ok(end):
                replica_status = PutMessageStatus.SLAVE_NOT_AVAILABLE
            elif wait_replica:
                deadline = time.monotonic() + self.config.slave_timeout / 1000
                transferred = threading.Event()
                if not self.request_transfer(end, transferred.set):
                    transferred.set()
        status = PutMessageStatus.PUT_OK
        if wait_flush and not self.commit_log.wait_flushed(end):
            status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        if transferred is not None and not transferred.wait(max(deadline - time.monotonic(), 0.0)) \
                and (self.ha_service.controller_mode or self.ha_service.push2slave_max_offset < end):
            log.warning("no slave reported offset %d within slaveTimeout %d ms", end, self.config.slave_timeout)
            replica_status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        if replica_status is not PutMessageStatus.PUT_OK:
            status = replica_status
        return result if status is PutMessageStatus.PUT_OK else PutMessageResult(status, append)

    def request_flush(self, end_offset: int, on_durable: Callable[[], None]) -> bool:
        """SYNC_FLUSH: have ``on_durable()`` called (in the flush thread; it must not block) once
        the CommitLog is durable up to ``end_offset``. False, registering nothing, when it already
        is or the store flushes asynchronously."""
        return self.commit_log.request_flush(end_offset, on_durable)

    def flushed_offset(self) -> int:
        """The CommitLog's durable end (flushedWhere): :meth:`request_flush` answers False for
        every put ending at or below it, so a caller with many puts to look at asks once."""
        return self.commit_log.mapped_file_queue.flushed_where

    def transferred_offset(self) -> int:
        """The end the best slave has reported (push2SlaveMaxOffset) on a SYNC_MASTER outside
        controller mode: :meth:`request_transfer` answers False for every put ending at or below
        it, so a caller with many puts to look at asks once. -1 elsewhere (controller mode counts
        each put's acknowledgements)."""
        if self.config.broker_role is not BrokerRole.SYNC_MASTER or self.ha_service.controller_mode:
            return -1
        return self.ha_service.push2slave_max_offset

    # -- replication -----------------------------------------------------------------------
    def _on_appended(self) -> None:
        """After every append (a put, or bytes replicated from the master): wake dispatch and the
        HA writers waiting for data."""
        self.reput_service.wakeup()
        self.ha_service.notify_appended()

    def is_slave_ok(self, master_put_where: int) -> bool:
        """SYNC_MASTER's test right after a put ending at ``master_put_where``: a slave is connected
        and trails by less than haSlaveFallbehindMax (RocketMQ's HAService.isSlaveOK). Controller
        mode has no such test (RocketMQ 5's CommitLog checks minInSyncReplicas before the append
        instead, :meth:`_enough_in_sync_replicas`): always True there."""
        return self.ha_service.controller_mode or self.ha_service.is_slave_ok(master_put_where)

    def _enough_in_sync_replicas(self, wait_store_ok: bool) -> bool:
        """Controller mode, SYNC_MASTER, a put that waits: at least minInSyncReplicas replicas
        (the master included) in the SyncStateSet, else IN_SYNC_REPLICAS_NOT_ENOUGH and nothing
        stored (RocketMQ 5's CommitLog.asyncPutMessage)."""
        if not (self.ha_service.controller_mode and wait_store_ok
                and self.config.broker_role is BrokerRole.SYNC_MASTER and not self.config.duplication_enable):
            return True
        return self.ha_service.in_sync_replicas_nums() >= self.config.min_in_sync_replicas

    def request_transfer(self, end_offset: int, on_transferred: TransferWaiter) -> bool:
        """SYNC_MASTER: have ``on_transferred()`` called (in an HA thread; it must not block) once a
        slave has reported having the CommitLog up to ``end_offset``. False, registering nothing,
        when one already has or the store is not a SYNC_MASTER. The caller owns the deadline
        (slaveTimeout) and answers FLUSH_SLAVE_TIMEOUT itself; check :meth:`is_slave_ok` first."""
        if self.config.broker_role is not BrokerRole.SYNC_MASTER:
            return False
        if self.ha_service.controller_mode:
            # RocketMQ 5: allAckInSyncStateSet waits for every member, else inSyncReplicas copies
            # (the master's own included: 1 waits for none)
            need = (ALL_ACK_IN_SYNC_STATE_SET if self.config.all_ack_in_sync_state_set
                    else self.config.in_sync_replicas)
            if 0 <= need <= 1:
                return False
            return self.ha_service.request_group_transfer(end_offset, need, on_transferred)
        return self.ha_service.request_transfer(end_offset, on_transferred)

    # -- controller mode: role changes (AutoSwitchHAService) -------------------------------
    def use_controller_mode(self, local_id: int) -> None:
        """Replicate with RocketMQ 5's AutoSwitch protocol as replica ``local_id`` (before start)."""
        self.ha_service.use_controller_mode(self.epoch_cache, local_id, self.truncate_files)

    def change_to_master(self, master_epoch: int) -> bool:
        """Become the group's master in ``master_epoch`` (AutoSwitchHAService.changeToMaster): stop
        following, start the epoch at this log's end, let dispatch catch up and rebuild the next
        queue offsets, then take puts as a SYNC_MASTER. False, changing nothing, for an epoch older
        than this store's last one. Blocking (it waits for dispatch)."""
        if master_epoch < self.epoch_cache.last_epoch:
            log.warning("master epoch %d < last epoch %d: not becoming master", master_epoch,
                        self.epoch_cache.last_epoch)
            return False
        self.ha_service.update_master_address(None)
        self.ha_service.close_connections()
        self._truncate_torn_tail()
        # the same epoch again (this replica was its master before a restart): its start stays,
        # or the slaves that have it would no longer match it (RocketMQ re-appends it)
        if self.epoch_cache.last_epoch != master_epoch and \
                not self.epoch_cache.append_entry(master_epoch, self.commit_log.max_offset):
            return False
        self.recover_topic_queue_table()
        self.ha_service.confirm_offset = self.commit_log.max_offset
        self.config.broker_role = BrokerRole.SYNC_MASTER
        self._start_special_services()
        log.info("master of epoch %d from offset %d", master_epoch, self.commit_log.max_offset)
        return True

    def _truncate_torn_tail(self) -> None:
        """Let dispatch catch up, then cut a record the master's stream left half-copied
        (truncateInvalidMsg): frames are cut anywhere, so a former slave's log may end inside a
        record, and puts must not start there. Dispatch stops before such a record; a position
        that does not move while bytes remain undispatched is where the whole records end. Only
        the CommitLog holds the torn bytes (nothing was dispatched from them); a crash before the
        cut is finished leaves a torn tail recovery cuts the same way."""
        stuck_at = -1
        while not self.reput_service.wait_caught_up(0.2):
            position = self.reput_service.reput_from_offset
            if position == stuck_at:
                log.warning("the CommitLog ends inside a record at %d: cutting it back to %d",
                            self.commit_log.max_offset, position)
                self.commit_log.truncate_dirty_files(position)
                return
            stuck_at = position

    def change_to_slave(self, master_ha_address: str | None) -> None:
        """Stop taking puts and follow the master at ``master_ha_address`` (changeToSlave): its
        handshake decides how much of this log stays (see autoswitch_ha_client)."""
        self.config.broker_role = BrokerRole.SLAVE
        self._stop_special_services()
        self.ha_service.close_connections()
        self.ha_service.reset_sync_state_set()
        self.ha_service.update_master_address(master_ha_address)

    def update_ha_master_address(self, address: str | None) -> None:
        """Where a SLAVE replicates from (host:haPort; the broker learns it from the name server's
        registration answer, or haMasterAddress); None stops replicating."""
        self.ha_service.update_master_address(address)

    def slave_fall_behind_much(self) -> int:
        """RocketMQ's slaveFallBehindMuch: this master's max offset minus what the best slave has."""
        return self.ha_service.slave_fall_behind_much()

    # -- get -------------------------------------------------------------------------------
    def _next_offset_correction(self, old: int, new: int) -> int:
        if self.config.broker_role is not BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new
        return old

    def _in_memory_bytes(self) -> int:
        """How far behind the CommitLog's end a record still counts as in memory
        (accessMessageInMemoryMaxRatio of the RAM)."""
        return math.floor(self.total_physical_memory * self.config.access_message_in_memory_max_ratio / 100)

    def _check_in_disk(self, offset_py: int, max_offset_py: int) -> bool:
        return max_offset_py - offset_py > self._in_memory_bytes()

    def _transfer_limits(self, max_msg_nums: int, max_offset_py: int) -> TransferLimits:
        cfg = self.config
        return TransferLimits(
            max_msg_nums, cfg.max_transfer_bytes_on_message_in_memory, cfg.max_transfer_count_on_message_in_memory,
            cfg.max_transfer_bytes_on_message_in_disk, cfg.max_transfer_count_on_message_in_disk, max_offset_py,
            self._in_memory_bytes())

    def _locate(self, topic: str, queue_id: int, offset: int) -> tuple[ConsumeQueue, int, int] | GetMessageResult:
        """The queue and its min and max offsets when ``offset`` lies within it, else the answer
        that says where the consumer should go instead."""
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                                    self._next_offset_correction(offset, 0), 0, 0)
        min_offset, max_offset = cq.min_offset_in_queue, cq.max_offset_in_queue
        if max_offset == 0:
            status, next_offset = GetMessageStatus.NO_MESSAGE_IN_QUEUE, self._next_offset_correction(offset, 0)
        elif offset < min_offset:
            status, next_offset = GetMessageStatus.OFFSET_TOO_SMALL, self._next_offset_correction(offset, min_offset)
        elif offset == max_offset:
            status, next_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, self._next_offset_correction(offset, offset)
        elif offset > max_offset:
            status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
            next_offset = self._next_offset_correction(offset, max_offset)  # 4.9.8: maxOffset
        else:
            return cq, min_offset, max_offset
        return GetMessageResult(status, next_offset, min_offset, max_offset)

    def _read_entries(self, cq: ConsumeQueue, offset: int, max_msg_nums: int) -> bytes:
        """The entries a pull may walk: at least 16000 bytes of them, more for a large maxMsgNums."""
        return cq.read_entries(offset, max(16000, max_msg_nums * 20) // CQ_STORE_UNIT_SIZE)

    def _offset_found_null(self, cq: ConsumeQueue, offset: int) -> GetMessageResult:
        """No entry to read at ``offset`` (its file is gone or not written): on to the next file."""
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL,
                                self._next_offset_correction(offset, cq.roll_next_file(offset)), 0, 0)

    def get_message(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Pull up to ``max_msg_nums`` messages from a queue (RocketMQ's getMessage, same statuses)."""
        begin = time.monotonic()
        max_offset_py = self.commit_log.max_offset
        located = self._locate(topic, queue_id, offset)
        if isinstance(located, GetMessageResult):
            self.stats.record_get(False, 0, time.monotonic() - begin)
            return located
        cq, min_offset, max_offset = located
        result = self._read_queue(cq, offset, max_msg_nums, message_filter, max_offset_py)
        result.min_offset, result.max_offset = min_offset, max_offset
        self.stats.record_get(result.status is GetMessageStatus.FOUND, result.message_count, time.monotonic() - begin)
        return result

    def _read_queue(
        self, cq: ConsumeQueue, offset: int, max_msg_nums: int, message_filter: MessageFilter | None,
        max_offset_py: int,
    ) -> GetMessageResult:
        entries = self._read_entries(cq, offset, max_msg_nums)
        if not entries:
            return self._offset_found_null(cq, offset)
        limits = self._transfer_limits(max_msg_nums, max_offset_py)
        walk = walk_queue(entries, offset, limits, self.commit_log,
                          None if message_filter is None else message_filter.is_matched_by_consume_queue,
                          None if message_filter is None else message_filter.is_matched_by_commit_log)
        return GetMessageResult(walk.status, offset + walk.consumed, 0, 0, walk.messages, walk.queue_offsets,
                                walk.total_size, limits.is_in_disk(walk.max_phy_pulling))

    def get_message_frame(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int, tag_filter: TagFilter,
        frame: PullFrame,
    ) -> PulledFrame:
        """:meth:`get_message` for a tag subscription, with the SUCCESS response frame of what it
        found in the same pass (see :mod:`rocketstore.store.pull_transfer`); the result's
        ``messages`` stay empty, the records are in the frame."""
        begin = time.monotonic()
        pulled = self._message_frame(topic, queue_id, offset, max_msg_nums,
                                     None if tag_filter.subscribe_all else tuple(tag_filter.code_set), frame)
        self.stats.record_get(pulled.result.status is GetMessageStatus.FOUND, pulled.message_count,
                              time.monotonic() - begin)
        return pulled

    def found_frame(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                    tag_codes: tuple[int, ...] | None, opaque: int, language: str, version: int,
                    suggest_when_slow: int, suggest_otherwise: int) -> tuple[bytes, int, int] | None:
        """The read of a pull served from the connection's read (the broker's
        PullMessageProcessor.serve_pull_frames hands it to the native serving, which calls it
        with the request's side of the response frame): :meth:`get_message_frame`'s SUCCESS
        frame, messages and bytes when it finds messages (``tag_codes``: the subscription's tag
        hash codes, None for all), else None with nothing recorded: the pull then takes the usual
        path, which reads again and records its own outcome.

        The steps of :meth:`_message_frame`, without the outcome objects only a pull that found
        nothing needs: it runs once per served pull, so what it allocates is per-pull cost.
        """
        begin = time.monotonic()
        max_offset_py = self.commit_log.max_offset
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return None
        min_offset, max_offset = cq.min_offset_in_queue, cq.max_offset_in_queue
        if not min_offset <= offset < max_offset:  # every other case is one of _locate's answers
            return None
        pulled = self._pull_frame(cq, offset, max_msg_nums, tag_codes, max_offset_py, PullFrame(
            opaque, language, version, suggest_when_slow, suggest_otherwise), min_offset, max_offset)
        if pulled is None:
            return None
        _, _, count, total, _, encoded = pulled
        if encoded is None:
            return None
        self.stats.record_get(True, count, time.monotonic() - begin)
        return encoded, count, total

    def _message_frame(self, topic: str, queue_id: int, offset: int, max_msg_nums: int,
                       tag_codes: tuple[int, ...] | None, frame: PullFrame) -> PulledFrame:
        max_offset_py = self.commit_log.max_offset
        located = self._locate(topic, queue_id, offset)
        if isinstance(located, GetMessageResult):
            return PulledFrame(located, 0, None)
        cq, min_offset, max_offset = located
        pulled = self._pull_frame(cq, offset, max_msg_nums, tag_codes, max_offset_py, frame, min_offset, max_offset)
        if pulled is None:
            result = self._offset_found_null(cq, offset)
            result.min_offset, result.max_offset = min_offset, max_offset
            return PulledFrame(result, 0, None)
        status, consumed, count, total, from_slave, encoded = pulled
        result = GetMessageResult(WALK_STATUSES[status], offset + consumed, min_offset, max_offset,
                                  buffer_total_size=total, suggest_pulling_from_slave=from_slave)
        return PulledFrame(result, count, encoded)

    def _pull_frame(self, cq: ConsumeQueue, offset: int, max_msg_nums: int, tag_codes: tuple[int, ...] | None,
                    max_offset_py: int, frame: PullFrame, min_offset: int, max_offset: int) -> PullOutcome | None:
        """:func:`pull_messages` over the queue's entries from ``offset`` (within the queue), None
        when there is no entry to read there.

        RocketMQ reads 16000 bytes of entries (800) for any pull, since a tag filter may skip many.
        A subscription to every tag takes every entry whose record is there, so it reads one
        entry per message it may take and one more: the walk stops at that last one unless
        records were gone (skipped), and only then does it walk the whole window again. Either
        way the outcome is the whole window's: a walk goes entry by entry and stops at the same
        one, and the extra entry is the one it would look at to stop (its offset decides
        suggestPullingFromSlave).
        """
        limits = self._transfer_limits(max_msg_nums, max_offset_py)
        if tag_codes is None and max_msg_nums > 0:
            head = max_msg_nums + 1
            entries = cq.read_entries(offset, head)
            if not entries:
                return None
            pulled = pull_messages(entries, offset, self.commit_log, None, limits, frame, min_offset, max_offset)
            if pulled[1] < head:  # it stopped before the last entry read, or the file has no more
                return pulled
        entries = self._read_entries(cq, offset, max_msg_nums)
        if not entries:
            return None
        return pull_messages(entries, offset, self.commit_log, tag_codes, limits, frame, min_offset, max_offset)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        entry = cq.entry(consume_queue_offset) if cq is not None else None
        return entry.commit_log_offset if entry is not None else 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_in_queue_by_time(timestamp_ms, self.commit_log.min_offset,
                                          self.commit_log.pickup_store_timestamp)

    def get_message_store_timestamp(self, topic: str, queue_id: int, consume_queue_offset: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        entry = cq.entry(consume_queue_offset) if cq is not None else None
        if entry is None:
            return -1
        return self.commit_log.pickup_store_timestamp(entry.commit_log_offset, entry.size)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        return self.get_message_store_timestamp(topic, queue_id, cq.min_offset_in_queue)

    @property
    def min_phy_offset(self) -> int:
        return self.commit_log.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self.commit_log.max_offset

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.reput_service.behind_bytes

    def add_dispatch_lag_waiter(self, lag_bytes: int, waiter: LagWaiter) -> bool:
        """Run ``waiter()`` once dispatch trails the CommitLog by at most ``lag_bytes``, in the
        dispatch thread; False (nothing registered) if it already does. See
        :meth:`ReputMessageService.add_lag_waiter`: registration comes before the check, so no
        wake-up is lost."""
        return self.reput_service.add_lag_waiter(lag_bytes, waiter)

    def remove_dispatch_lag_waiter(self, waiter: LagWaiter) -> None:
        self.reput_service.remove_lag_waiter(waiter)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None:
        return self.commit_log.look_message_by_offset(commit_log_offset, size)

    # -- facade for the broker: what its processors ask without reaching into the parts ---------
    def select_one_message_by_offset(self, commit_log_offset: int, size: int) -> bytes | None:
        """``size`` raw CommitLog bytes at ``commit_log_offset`` (RocketMQ's selectOneMessageByOffset),
        or None when they are not all in one stored segment."""
        return self.commit_log.get_message(commit_log_offset, size)

    def is_os_page_cache_busy(self) -> bool:
        """RocketMQ's isOSPageCacheBusy: the put lock has been held longer than osPageCacheBusyTimeOutMills."""
        return self.commit_log.lock_held_ms() > self.config.os_page_cache_busy_time_out_mills

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, consume_offset: int) -> bool:
        """RocketMQ's checkInDiskByConsumeOffset: is the queue's entry at ``consume_offset`` far
        enough behind the CommitLog head that reading it would hit the disk rather than memory?
        False when there is no such entry."""
        cq = self.get_consume_queue(topic, queue_id)
        entry = cq.entry(consume_offset) if cq is not None else None
        if entry is None:
            return False
        return self._check_in_disk(entry.commit_log_offset, self.commit_log.max_offset)

    def get_tags_code(self, topic: str, queue_id: int, consume_queue_offset: int) -> int | None:
        """The tag hash code the consume queue holds for an entry, or None when there is no entry
        (long polling matches it against a held pull's filter)."""
        cq = self.get_consume_queue(topic, queue_id)
        entry = cq.entry(consume_queue_offset) if cq is not None else None
        return entry.tags_code if entry is not None else None

    def get_message_record(self, topic: str, queue_id: int, consume_queue_offset: int) -> bytes | None:
        """The raw CommitLog record a consume-queue entry points at, or None when either is gone
        (long polling evaluates a held pull's property filter on the message that just arrived)."""
        cq = self.get_consume_queue(topic, queue_id)
        entry = cq.entry(consume_queue_offset) if cq is not None else None
        if entry is None:
            return None
        return self.commit_log.get_message(entry.commit_log_offset, entry.size)

    def max_offsets_by_queue(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) -> next consume-queue offset, for every consume queue the store holds."""
        return {(cq.topic, cq.queue_id): cq.max_offset_in_queue for cq in self._all_consume_queues()}

    @property
    def disk_full(self) -> bool:
        """True while the store refuses writes because the CommitLog's disk is too full."""
        return self.running_flags.disk_full

    @property
    def writeable(self) -> bool:
        """False after a consume-queue or index write error made the store refuse puts."""
        return self.running_flags.is_writeable

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        """Messages whose key or unique key is ``key``, newest index hits first, confirmed on the record."""
        found: list[StoredMessage] = []
        last_query_time = end_ms
        last_update_ts = last_update_phy = 0
        for _ in range(3):
            res = self.index_service.query_offset(topic, key, max_num, begin_ms, last_query_time)
            last_update_ts = res.index_last_update_timestamp
            last_update_phy = res.index_last_update_phyoffset
            if not res.phy_offsets:
                break
            # one record can be indexed twice (a key repeated in KEYS, or the last indexed record
            # re-dispatched by crash recovery, as in RocketMQ): return it once
            offsets = sorted(set(res.phy_offsets))
            for i, phy in enumerate(offsets[:max_num]):
                msg = self.look_message_by_offset(phy)
                if msg is None:
                    continue
                if i == 0:
                    last_query_time = msg.store_timestamp
                keys = (msg.keys or "").split(" ")
                if msg.topic == topic and (key in keys or msg.uniq_key == key):
                    found.append(msg)
            if found or last_query_time < begin_ms:
                break
        return QueryMessageResult(found, last_update_ts, last_update_phy)

    # -- runtime ---------------------------------------------------------------------------
    def disk_usage_ratio(self) -> float:
        return disk_partition_used_ratio(str(self.config.commit_log_dir())
                                         if os.path.isdir(self.config.commit_log_dir()) else self.root_dir)

    def get_earliest_message_time_in_store(self) -> int:
        """RocketMQ's getEarliestMessageTime(): the store time of the CommitLog's first record,
        -1 when the log is empty (the age clusterList prints as "#Hour")."""
        if self.commit_log.max_offset <= self.commit_log.min_offset:
            return -1
        msg = self.look_message_by_offset(self.commit_log.min_offset)
        return msg.store_timestamp if msg is not None else -1

    def runtime_info(self) -> dict[str, str]:
        """Broker runtime info the way RocketMQ's getRuntimeInfo names it (and the store-side
        keys AdminBrokerProcessor.prepareRuntimeInfo adds: pageCacheLockTimeMills,
        earliestMessageTimeStamp, dispatchBehindBytes)."""
        info = self.stats.runtime_info()
        cq_dir = self.config.consume_queue_dir()
        cq_ratio = disk_partition_used_ratio(str(cq_dir) if cq_dir.is_dir() else self.root_dir)
        info.update({
            "commitLogMinOffset": str(self.commit_log.min_offset),
            "commitLogMaxOffset": str(self.commit_log.max_offset),
            "commitLogDiskRatio": f"{self.disk_usage_ratio():.4f}",
            "consumeQueueDiskRatio": f"{cq_ratio:.4f}",
            "dispatchBehindBytes": str(self.dispatch_behind_bytes),
            "diskFull": str(self.running_flags.disk_full).lower(),
            "remainHowManyDataToFlush": str(self.commit_log.remain_to_flush()),
            "pageCacheLockTimeMills": str(int(self.commit_log.lock_held_ms())),
            "earliestMessageTimeStamp": str(self.get_earliest_message_time_in_store()),
        })
        for path in self.config.commit_log_dirs():  # one ratio per CommitLog directory (-1 while absent)
            ratio = disk_partition_used_ratio(str(path)) if path.is_dir() else -1.0
            info[f"commitLogDiskRatio_{path}"] = f"{ratio:.4f}"
        # ScheduleMessageService.buildRunningStats: "delivered offset,queue max offset" per level
        for level, offset in sorted(self.schedule_message_service.offsets.offsets().items()):
            queue_max = self.get_max_offset_in_queue(RMQ_SYS_SCHEDULE_TOPIC, delay_level_to_queue_id(level))
            info[f"scheduleMessageOffset_{level}"] = f"{offset},{queue_max}"
        return info
