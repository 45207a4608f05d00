"""StoreStatsService: counters behind runtime info and, later, the broker's metrics."""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.store.commit_log import PutMessageResult


class StoreStatsService:
    """Put/get totals, per-topic puts, put latency maximum and put failures by status."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.put_message_times_total = 0
        self.put_message_size_total = 0
        self.put_message_failed_times = 0
        self.put_max_ms = 0
        self.put_by_topic: Counter[str] = Counter()
        self.put_failed_by_status: Counter[str] = Counter()
        self.get_message_times_total_found = 0
        self.get_message_times_total_miss = 0
        self.get_message_transferred_msg_count = 0
        self.deleted_files_by_cause: Counter[str] = Counter()

    def record_put(self, result: PutMessageResult, elapsed_s: float, topic: str) -> None:
        with self._lock:
            if result.append is not None and result.ok:
                self.put_message_times_total += result.append.msg_num
                self.put_message_size_total += result.append.wrote_bytes
                self.put_by_topic[topic] += result.append.msg_num
            else:
                self.put_message_failed_times += 1
                self.put_failed_by_status[result.status.value] += 1
            self.put_max_ms = max(self.put_max_ms, int(elapsed_s * 1000))

    def record_get(self, found: bool, count: int) -> None:
        with self._lock:
            if found:
                self.get_message_times_total_found += 1
                self.get_message_transferred_msg_count += count
            else:
                self.get_message_times_total_miss += 1

    def record_deleted(self, cause: str, files: int) -> None:
        if files > 0:
            with self._lock:
                self.deleted_files_by_cause[cause] += files

    def runtime_info(self) -> dict[str, str]:
        return {
            "putMessageTimesTotal": str(self.put_message_times_total),
            "putMessageSizeTotal": str(self.put_message_size_total),
            "putMessageFailedTimes": str(self.put_message_failed_times),
            "getMessageTimesTotalFound": str(self.get_message_times_total_found),
            "getMessageTimesTotalMiss": str(self.get_message_times_total_miss),
            "getMessageTransferedMsgCount": str(self.get_message_transferred_msg_count),
        }
