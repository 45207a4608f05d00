"""StoreStatsService: counters behind runtime info and, later, the broker's metrics."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.store.commit_log import PutMessageResult


#: RocketMQ's StoreStatsService keeps one snapshot a second, ten minutes of them (plus the base).
SAMPLING_INTERVAL_S = 1.0
MAX_RECORDS_OF_SAMPLING = 60 * 10
#: The windows (in samples, i.e. seconds) of the ``putTps``-style "10s 60s 600s" triples.
TPS_WINDOWS = (10, 60, 600)
#: StoreStatsService.printTps' period: the put time distribution and the latency buckets behind
#: ``putLatency99``/``putLatency999`` are per minute, rotated when a sample finds it passed.
PRINT_TPS_INTERVAL_MS = 60_000
#: StoreStatsService's put time distribution: (upper bound in ms, exclusive, or None; its label in
#: runtime info's ``putMessageDistributeTime``). A put of 0 ms counts in the first bucket only.
PUT_DISTRIBUTE_BUCKETS: tuple[tuple[int | None, str], ...] = (
    (1, "[<=0ms]"), (10, "[0~10ms]"), (50, "[10~50ms]"), (100, "[50~100ms]"), (200, "[100~200ms]"),
    (500, "[200~500ms]"), (1000, "[500ms~1s]"), (2000, "[1~2s]"), (3000, "[2~3s]"), (4000, "[3~4s]"),
    (5000, "[4~5s]"), (10000, "[5~10s]"), (None, "[10s~]"),
)


def _latency_bounds() -> tuple[int, ...]:
    """PUT_MESSAGE_ENTIRE_TIME_BUCKETS: upper bounds (ms, inclusive) 1..20 by 1, ..50 by 2, ..100 by
    5, ..200 by 10, ..500 by 50, ..1000 by 100, ..10000 by 1000; a last bucket takes the rest."""
    bounds: list[int] = []
    for step, times in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(times):
            bounds.append((bounds[-1] if bounds else 0) + step)
    return tuple(bounds)


LATENCY_BOUNDS_MS: tuple[int, ...] = _latency_bounds()
#: the open last bucket's bound, Long.MAX_VALUE as RocketMQ keys it (it enters the interpolation)
_JAVA_LONG_MAX = 2**63 - 1


def put_latency_px(counts: Sequence[int], px: float) -> float:
    """findPutMessageEntireTimePX: the ``px`` quantile (ms) of a minute's puts, interpolated
    linearly inside the bucket it falls in; 0.0 without puts. ``counts`` has one entry per bound of
    :data:`LATENCY_BOUNDS_MS` plus the last bucket."""
    index = int(sum(counts) * px)
    passed = 0
    previous = 0
    for bound, count in zip((*LATENCY_BOUNDS_MS, _JAVA_LONG_MAX), counts, strict=True):
        if index <= passed + count:
            return previous + ((bound - previous) * (index - passed) / count if count else 0.0)
        passed += count
        previous = bound
    return 0.0


def java_format_2f(value: float) -> str:
    """String.format("%.2f", value): Java rounds the shortest decimal form half up (0.125 -> 0.13)."""
    return str(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


#: the bounded buckets' exclusive upper bounds, for a bisect per put instead of a walk
_PUT_DISTRIBUTE_UPPERS: tuple[int, ...] = tuple(upper for upper, _ in PUT_DISTRIBUTE_BUCKETS if upper is not None)


def put_distribute_bucket(elapsed_ms: int) -> int:
    """The index in :data:`PUT_DISTRIBUTE_BUCKETS` a put taking ``elapsed_ms`` counts in."""
    return bisect_right(_PUT_DISTRIBUTE_UPPERS, elapsed_ms)


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
    return _triple_text(tuple(tps(samples, window) for window in TPS_WINDOWS))


def _triple_text(rates: tuple[float | None, ...]) -> str:
    return " ".join("" if rate is None else _java_double(rate) for rate in rates)


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
        self.get_max_ms = 0
        #: puts per bucket of PUT_DISTRIBUTE_BUCKETS in the running minute, and in the last full one
        #: (None until a minute has passed: runtime info then says "null", as RocketMQ 4.9.8 does)
        self.put_distribute_time = [0] * len(PUT_DISTRIBUTE_BUCKETS)
        self.last_put_distribute_time: list[int] | None = None
        #: puts per bucket of LATENCY_BOUNDS_MS (+ the last), running and last minute
        self._latency_counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        self._last_latency_counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
        self._rotated_ms: int | None = None
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
            if self._rotated_ms is None:
                self._rotated_ms = now_ms
            elif now_ms > self._rotated_ms + PRINT_TPS_INTERVAL_MS:  # printTps: a new minute
                self._rotated_ms = now_ms
                self.last_put_distribute_time = self.put_distribute_time
                self.put_distribute_time = [0] * len(PUT_DISTRIBUTE_BUCKETS)
                self._last_latency_counts = self._latency_counts
                self._latency_counts = [0] * (len(LATENCY_BOUNDS_MS) + 1)
            self._put_samples.append((now_ms, self.put_message_times_total))
            self._found_samples.append((now_ms, self.get_message_times_total_found))
            self._miss_samples.append((now_ms, self.get_message_times_total_miss))
            self._transferred_samples.append((now_ms, self.get_message_transferred_msg_count))

    def tps_windows(self) -> dict[str, tuple[float | None, ...]]:
        """The rates behind runtime info's ``putTps``, ``getFoundTps``, ``getMissTps``,
        ``getTotalTps`` and ``getTransferedTps`` (keyed so), one per window of :data:`TPS_WINDOWS`:
        None for a window the samples do not cover yet, except in getTotalTps, which (as
        getGetTotalTps) counts such a window of found or miss as 0. One source for the runtime
        info text and the rocketmq-exporter gauges, so the two cannot disagree."""
        with self._lock:
            def rates(samples: deque[tuple[int, int]]) -> tuple[float | None, ...]:
                return tuple(tps(samples, window) for window in TPS_WINDOWS)

            found, miss = rates(self._found_samples), rates(self._miss_samples)
            return {
                "putTps": rates(self._put_samples),
                "getFoundTps": found,
                "getMissTps": miss,
                "getTotalTps": tuple((f or 0.0) + (m or 0.0) for f, m in zip(found, miss, strict=True)),
                "getTransferedTps": rates(self._transferred_samples),
            }

    def record_put(self, result: PutMessageResult, elapsed_s: float, topic: str) -> None:
        if result.append is not None and result.ok:
            self.record_stored([(topic, 1, result.append.msg_num, result.append.wrote_bytes)], elapsed_s)
            return
        with self._lock:
            self.put_message_failed_times += 1
            self.put_failed_by_status[result.status.value] += 1
            self._record_put_latency(elapsed_s, 1)

    def record_stored(self, puts: Iterable[tuple[str, int, int, int]], elapsed_s: float) -> None:
        """Puts that stored, as (topic, puts, records, bytes) per topic or per put, all in
        ``elapsed_s``: one put, or the plain sends the CommitLog put under one taking of its lock
        (no result objects: that path builds none). Each put counts once in the latency figures."""
        with self._lock:
            count = 0
            by_topic = self.put_by_topic
            for topic, put_count, msg_num, wrote_bytes in puts:
                self.put_message_times_total += msg_num
                self.put_message_size_total += wrote_bytes
                by_topic[topic] += msg_num
                count += put_count
            self._record_put_latency(elapsed_s, count)

    def _record_put_latency(self, elapsed_s: float, count: int) -> None:
        """Under ``_lock``: the latency of ``count`` puts into the maximum and the distributions."""
        elapsed_ms = int(elapsed_s * 1000)
        self.put_max_ms = max(self.put_max_ms, elapsed_ms)
        self.put_distribute_time[put_distribute_bucket(elapsed_ms)] += count
        self._latency_counts[bisect_left(LATENCY_BOUNDS_MS, elapsed_ms)] += count

    def record_get(self, found: bool, count: int, elapsed_s: float) -> None:
        with self._lock:
            self.get_max_ms = max(self.get_max_ms, int(elapsed_s * 1000))
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
        rates = {key: _triple_text(windows) for key, windows in self.tps_windows().items()}
        return {
            **rates,
            # RocketMQ divides by at least 1 call
            "putMessageAverageSize": repr(self.put_message_size_total / max(self.put_message_times_total, 1)),
            "putMessageTimesTotal": str(max(self.put_message_times_total, 1)),  # 4.9.8 says 1 for none
            "putMessageSizeTotal": str(self.put_message_size_total),
            "putMessageFailedTimes": str(self.put_message_failed_times),
            "putMessageEntireTimeMax": str(self.put_max_ms),
            # the last full minute's "[<=0ms]:3 [0~10ms]:0 ... [10s~]:0 " (a space after each bucket)
            "putMessageDistributeTime": "null" if (last := self.last_put_distribute_time) is None else "".join(
                f"{label}:{n} " for (_, label), n in zip(PUT_DISTRIBUTE_BUCKETS, last, strict=True)),
            "putLatency99": java_format_2f(put_latency_px(self._last_latency_counts, 0.99)),
            "putLatency999": java_format_2f(put_latency_px(self._last_latency_counts, 0.999)),
            "getMessageEntireTimeMax": str(self.get_max_ms),
            # 4.9.8 reports the DispatchMessageService ring buffer's high water mark here; its
            # reput thread has no such buffer and nothing sets the value, so it is always 0
            "dispatchMaxBuffer": "0",
            "getMessageTimesTotalFound": str(self.get_message_times_total_found),
            "getMessageTimesTotalMiss": str(self.get_message_times_total_miss),
            "getMessageTransferedMsgCount": str(self.get_message_transferred_msg_count),
        }
