"""BrokerStatsManager's windows: what VIEW_BROKER_STATS_DATA (315) answers.

RocketMQ keeps, per statistic name and key (``TOPIC_PUT_NUMS``/topic, ``BROKER_PUT_NUMS``/cluster,
...), a StatsItem: running totals (value and times) snapshotted every 10 s (the last 7 kept: a
minute), every 10 min (7: an hour) and every hour (25: a day). A window's sum is last minus first
snapshot, its tps that sum per second between them, its avgpt the sum per call (times). An item
starts with a zero snapshot one period back, so its first window counts everything since it was
created.

Here the totals come from the store's counters (:class:`rocketstore.store.stats.StoreStatsService`)
rather than from increments in the processors: :meth:`BrokerStatsManager.tick` reads them once a
second and takes each window's snapshot when its period has passed. Kept: ``TOPIC_PUT_NUMS`` and
``TOPIC_PUT_SIZE`` per topic, ``GROUP_GET_NUMS`` and ``GROUP_GET_SIZE`` per ``topic@group`` (every
get that found messages, counted in the store, so a broker-internal reader's gets count too),
``BROKER_PUT_NUMS`` and ``BROKER_GET_NUMS`` per cluster (value only, as RocketMQ adds no times to
those). Others (``SNDBCK_PUT_NUMS``, the per-queue and disk statistics, ...) are not kept and
answer "not exist", as RocketMQ does for a key it never counted.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Mapping

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"  # key: topic@group
GROUP_GET_SIZE = "GROUP_GET_SIZE"

#: (period of the snapshots in ms, how many are kept) of the minute, hour and day windows
MINUTE_WINDOW = (10_000, 7)
HOUR_WINDOW = (600_000, 7)
DAY_WINDOW = (3_600_000, 25)

#: (timestamp ms, times, value)
Snapshot = tuple[int, int, int]
#: (stats name, stats key) -> the running (times, value)
Readings = Mapping[tuple[str, str], tuple[int, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class StatsSnapshot:
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


def compute_stats(snapshots: deque[Snapshot]) -> StatsSnapshot:
    """StatsItem.computeStatsData over one window's snapshots."""
    if not snapshots:
        return StatsSnapshot()
    first_ms, first_times, first_value = snapshots[0]
    last_ms, last_times, last_value = snapshots[-1]
    total = last_value - first_value
    elapsed = last_ms - first_ms
    tps = total * 1000.0 / elapsed if elapsed else 0.0
    times = last_times - first_times
    return StatsSnapshot(sum=total, tps=tps, avgpt=total / times if times > 0 else 0.0)


class StatsItem:
    """One statistic's three windows of snapshots."""

    def __init__(self) -> None:
        self.windows = tuple(deque[Snapshot](maxlen=keep) for _, keep in (MINUTE_WINDOW, HOUR_WINDOW, DAY_WINDOW))

    def sample(self, window: int, period_ms: int, now_ms: int, times: int, value: int) -> None:
        snapshots = self.windows[window]
        if not snapshots:
            snapshots.append((now_ms - period_ms, 0, 0))
        snapshots.append((now_ms, times, value))

    def stats(self) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot]:
        """(minute, hour, day)."""
        minute, hour, day = (compute_stats(w) for w in self.windows)
        return minute, hour, day


class BrokerStatsManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], StatsItem] = {}
        self._last_sample: list[int | None] = [None, None, None]

    def tick(self, now_ms: int, readings: Readings) -> None:
        """Take each window's snapshot of every reading whose period has passed since the last."""
        with self._lock:
            for key in readings:  # counted from now on, like RocketMQ's item made at the first increment
                if key not in self._items:
                    self._items[key] = StatsItem()
            for window, (period_ms, _) in enumerate((MINUTE_WINDOW, HOUR_WINDOW, DAY_WINDOW)):
                last = self._last_sample[window]
                if last is not None and now_ms - last < period_ms:
                    continue
                self._last_sample[window] = now_ms
                for key, (times, value) in readings.items():
                    self._items[key].sample(window, period_ms, now_ms, times, value)

    def group_get_tps(self, group: str, topic: str) -> float:
        """tpsGroupGetNums: the group's messages per second on the topic over the minute window."""
        windows = self.stats(GROUP_GET_NUMS, f"{topic}@{group}")
        return windows[0].tps if windows is not None else 0.0

    def stats(self, name: str, key: str) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot] | None:
        """(minute, hour, day) of one statistic, None when it was never counted."""
        with self._lock:
            item = self._items.get((name, key))
            return None if item is None else item.stats()
