"""StoreStatsService: counters behind runtime info and, later, the broker's metrics."""

from __future__ import annotations

import threading
from collections import Counter, deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.store.commit_log import PutMessageResult


#: RocketMQ's StoreStatsService keeps one snapshot a second, ten minutes of them (plus the base).
SAMPLING_INTERVAL_S = 1.0
MAX_RECORDS_OF_SAMPLING = 60 * 10
#: The windows (in samples, i.e. seconds) of the ``putTps``-style "10s 60s 600s" triples.
TPS_WINDOWS = (10, 60, 600)


def tps(samples: deque[tuple[int, int]], window: int) -> float | None:
    """CallSnapshot.getTPS over the last ``window`` intervals of ``(timestamp_ms, total)``
    samples; None while fewer than ``window + 1`` samples exist (RocketMQ prints "" then)."""
    if len(samples) <= window:
        return None
    begin_ms, begin_total = samples[-(window + 1)]
    end_ms, end_total = samples[-1]
    if end_ms == begin_ms:
        return 0.0
    return (end_total - begin_total) / (end_ms - begin_ms) * 1000


def _java_double(value: float) -> str:
    """Double.toString for the magnitudes a rate takes (repr agrees below 1e7)."""
    return repr(float(value))


def tps_triple(samples: deque[tuple[int, int]]) -> str:
    """The ``"10s 60s 600s"`` text of StoreStatsService.getPutTps() and its siblings."""
    parts = []
    for window in TPS_WINDOWS:
        rate = tps(samples, window)
        parts.append("" if rate is None else _java_double(rate))
    return " ".join(parts)


class StoreStatsService:
    """Put/get totals, per-topic puts, put latency maximum and put failures by status; and, from
    a snapshot of the totals taken every second (:meth:`sample`), the put/get rates runtime info
    reports as ``putTps``, ``getFoundTps``, ``getMissTps``, ``getTotalTps``, ``getTransferedTps``.
    """

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
        self._put_samples: deque[tuple[int, int]] = deque(maxlen=MAX_RECORDS_OF_SAMPLING + 1)
        self._found_samples: deque[tuple[int, int]] = deque(maxlen=MAX_RECORDS_OF_SAMPLING + 1)
        self._miss_samples: deque[tuple[int, int]] = deque(maxlen=MAX_RECORDS_OF_SAMPLING + 1)
        self._transferred_samples: deque[tuple[int, int]] = deque(maxlen=MAX_RECORDS_OF_SAMPLING + 1)

    def sample(self, now_ms: int) -> None:
        """Snapshot the running totals (called once a second, as StoreStatsService.sampling)."""
        with self._lock:
            self._put_samples.append((now_ms, self.put_message_times_total))
            self._found_samples.append((now_ms, self.get_message_times_total_found))
            self._miss_samples.append((now_ms, self.get_message_times_total_miss))
            self._transferred_samples.append((now_ms, self.get_message_transferred_msg_count))

    def _total_tps(self) -> str:
        """getGetTotalTps: found + miss per window, 0 for a window not yet covered."""
        return " ".join(
            _java_double((tps(self._found_samples, w) or 0.0) + (tps(self._miss_samples, w) or 0.0))
            for w in TPS_WINDOWS)

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
        with self._lock:
            rates = {
                "putTps": tps_triple(self._put_samples),
                "getFoundTps": tps_triple(self._found_samples),
                "getMissTps": tps_triple(self._miss_samples),
                "getTotalTps": self._total_tps(),
                "getTransferedTps": tps_triple(self._transferred_samples),
            }
        return {
            **rates,
            # RocketMQ divides by at least 1 call
            "putMessageAverageSize": repr(self.put_message_size_total / max(self.put_message_times_total, 1)),
            "putMessageTimesTotal": str(self.put_message_times_total),
            "putMessageSizeTotal": str(self.put_message_size_total),
            "putMessageFailedTimes": str(self.put_message_failed_times),
            "getMessageTimesTotalFound": str(self.get_message_times_total_found),
            "getMessageTimesTotalMiss": str(self.get_message_times_total_miss),
            "getMessageTransferedMsgCount": str(self.get_message_transferred_msg_count),
        }
