"""BrokerStatsManager: what the send and pull paths add up per topic and per consumer group.

RocketMQ's BrokerStatsManager (store/stats) keeps, among others, TOPIC_PUT_NUMS / TOPIC_PUT_SIZE
by topic, GROUP_GET_NUMS / GROUP_GET_SIZE by ``topic@group`` and BROKER_PUT_NUMS /
BROKER_GET_NUMS for the whole broker, each a running total sampled every ten seconds so that
``tps`` over the last minute can be read (StatsItem's minute snapshots). apache/rocketmq-exporter
publishes those per-minute rates (``rocketmq_producer_tps``, ``rocketmq_consumer_tps``, ...), and
Prometheus-native dashboards want the running totals themselves (``rate()`` of a counter): this
module keeps both from the same counters.

Cost on the hot path: per request (a batch counts its messages at once) one dict lookup and a few
integer additions (about 0.3 µs); :class:`LatencyHistogram.observe` is one bisect
over a dozen bounds. Everything here is touched on the broker's event loop only (the processors,
the ten-second sampler and /metrics all run there), so nothing takes a lock.

Items are never dropped while the broker runs (RocketMQ's StatsItemSet drops items idle for
a while); a topic or group that stops being used keeps its last totals, at a constant rate of 0.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

#: seconds between two snapshots (StatsItem samples every 10 s)
SAMPLE_INTERVAL_S: Final = 10.0
#: the per-minute rate's window (StatsItem's ``getStatsMinute``)
MINUTE_S: Final = 60.0
#: the broker-wide totals also answer for 10 s and 10 min windows (runtime info's ``putTps``: 10, 60, 600 s)
LONGEST_WINDOW_S: Final = 600.0

#: RocketMQ's StatsItem windows: snapshots of the last minute (every 10 s), of the last hour
#: (every 10 min) and of the last day (every hour), first and last included
MINUTE_SNAPSHOTS: Final = 7
HOUR_PERIOD_S: Final = 600.0
HOUR_SNAPSHOTS: Final = 7
DAY_PERIOD_S: Final = 3600.0
DAY_SNAPSHOTS: Final = 25

#: the statistics VIEW_BROKER_STATS_DATA names (BrokerStatsManager's constants); GROUP_GET_* and
#: SNDBCK_PUT_NUMS keys are ``topic@group``, GROUP_GET_LATENCY keys ``queueId@topic@group``, BROKER_*
#: keys the cluster name. RocketMQ 4.9.8 creates more tables (GROUP_GET_FROM_DISK_*,
#: BROKER_GET_FROM_DISK_*, DLQ_PUT_NUMS, COMMERCIAL_*, ACCOUNT_*, ...) but its open-source broker
#: never adds to most of them, so it answers "not exist" for them as this broker does.
TOPIC_PUT_NUMS: Final = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE: Final = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS: Final = "GROUP_GET_NUMS"
GROUP_GET_SIZE: Final = "GROUP_GET_SIZE"
BROKER_PUT_NUMS: Final = "BROKER_PUT_NUMS"
BROKER_GET_NUMS: Final = "BROKER_GET_NUMS"
#: messages a group handed back (CONSUMER_SEND_MSG_BACK stored), by original topic and group
SNDBCK_PUT_NUMS: Final = "SNDBCK_PUT_NUMS"
#: milliseconds spent building a found pull's body (RocketMQ: reading the result into the heap
#: buffer it answers with), summed per pull by queue, topic and group; ``avgpt`` is ms per pull
GROUP_GET_LATENCY: Final = "GROUP_GET_LATENCY"

#: upper bounds (seconds) of the latency histograms' buckets: 100 µs to 10 s
LATENCY_BOUNDS_S: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                           1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """One window of a statistic as VIEW_BROKER_STATS_DATA (315) reports it (RocketMQ's StatsSnapshot)."""

    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0


def _window_stats(snapshots: Sequence[tuple[float, int, int]]) -> StatsSnapshot:
    """StatsItem.computeStatsData: the increase between a window's first and last snapshot, per
    second between them, and per addition (``times``)."""
    if len(snapshots) < 2:
        return StatsSnapshot()
    first_t, first_times, first_value = snapshots[0]
    last_t, last_times, last_value = snapshots[-1]
    total = last_value - first_value
    elapsed = last_t - first_t
    times = last_times - first_times
    return StatsSnapshot(sum=total, tps=total / elapsed if elapsed > 0 else 0.0,
                         avgpt=total / times if times > 0 else 0.0)


class StatsItem:
    """A running total (``value``) and how many times it was added to (``times``), with snapshots
    taken by :meth:`sample`: every sample for the last minute (from which :meth:`per_second`
    computes a recent rate), and, as RocketMQ's StatsItem keeps them, one per 10 minutes for an
    hour and one per hour for a day (:meth:`windows`)."""

    __slots__ = ("_day", "_hour", "_snapshots", "times", "value")

    def __init__(self, now: float, keep_s: float = MINUTE_S) -> None:
        self.value = 0
        self.times = 0
        # (time, times, value): the item starts at 0 now, so its first rate counts from its creation
        self._snapshots: deque[tuple[float, int, int]] = deque(
            [(now, 0, 0)], maxlen=int(keep_s / SAMPLE_INTERVAL_S) + 2)
        self._hour: deque[tuple[float, int, int]] = deque([(now, 0, 0)], maxlen=HOUR_SNAPSHOTS)
        self._day: deque[tuple[float, int, int]] = deque([(now, 0, 0)], maxlen=DAY_SNAPSHOTS)

    def sample(self, now: float) -> None:
        snapshot = (now, self.times, self.value)
        self._snapshots.append(snapshot)
        if now - self._hour[-1][0] >= HOUR_PERIOD_S:
            self._hour.append(snapshot)
        if now - self._day[-1][0] >= DAY_PERIOD_S:
            self._day.append(snapshot)

    def per_second(self, now: float, window_s: float = MINUTE_S) -> float:
        """The increase per second since the newest snapshot at least ``window_s`` old (the oldest
        one while the item is younger than that), live value included.

        The divisor is at least one sampling interval, so a total that appeared a moment ago
        reads as a modest rate rather than a spike of ``value / few ms``.
        """
        start_t, _, start_v = self._snapshots[0]
        for t, _, v in reversed(self._snapshots):
            if now - t >= window_s:
                start_t, start_v = t, v
                break
        return (self.value - start_v) / max(now - start_t, SAMPLE_INTERVAL_S)

    def windows(self) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot]:
        """(minute, hour, day), each over its snapshots only, as RocketMQ computes them."""
        minute = list(self._snapshots)[-MINUTE_SNAPSHOTS:]
        return _window_stats(minute), _window_stats(self._hour), _window_stats(self._day)


class LatencyHistogram:
    """Counts of observations per bucket of :data:`LATENCY_BOUNDS_S` and their sum (a Prometheus
    histogram without prometheus_client's per-observation lock and label lookup)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BOUNDS_S) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, seconds: float, count: int = 1) -> None:
        """``count`` observations of ``seconds`` (the sends of one group put share their latency)."""
        self.counts[bisect_left(LATENCY_BOUNDS_S, seconds)] += count
        self.sum += seconds * count

    def cumulative(self) -> list[tuple[str, float]]:
        """(``le`` bound, observations at or below it) for every bucket, +Inf last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*LATENCY_BOUNDS_S, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class BrokerStatsManager:
    """The broker's per-topic and per-group totals, its put/get totals and request latencies."""

    def __init__(self, now: float, cluster: str = "") -> None:
        #: the key of the BROKER_* statistics (RocketMQ counts them under the cluster's name)
        self.cluster = cluster
        self.topic_put_nums: dict[str, StatsItem] = {}
        self.topic_put_size: dict[str, StatsItem] = {}
        #: keyed (topic, group): RocketMQ's ``topic@group`` stats key
        self.group_get_nums: dict[tuple[str, str], StatsItem] = {}
        self.group_get_size: dict[tuple[str, str], StatsItem] = {}
        # the same items, paired for the hot path's single lookup
        self._topic_put: dict[str, tuple[StatsItem, StatsItem]] = {}
        self._group_get: dict[tuple[str, str], tuple[StatsItem, StatsItem]] = {}
        #: keyed (topic, group) as SNDBCK_PUT_NUMS' ``topic@group``
        self.send_back_nums: dict[tuple[str, str], StatsItem] = {}
        #: keyed (queue id, topic, group) as GROUP_GET_LATENCY's ``queueId@topic@group``
        self.group_get_latency: dict[tuple[int, str, str], StatsItem] = {}
        self.broker_put_nums = StatsItem(now, LONGEST_WINDOW_S)
        self.broker_get_nums = StatsItem(now, LONGEST_WINDOW_S)
        #: SEND_MESSAGE/V2/batch: request read to response ready, waits for flush or dispatch included
        self.send_latency = LatencyHistogram()
        #: PULL_MESSAGE: the broker's work on a pull, a long-polling hold left out
        self.pull_latency = LatencyHistogram()
        self._now = now

    def inc_topic_put(self, topic: str, msg_num: int, size: int, requests: int = 1) -> None:
        """``requests`` successful send requests of ``msg_num`` messages, ``size`` bytes stored in all.

        Once per send, or per group of sends to one topic, on the loop: one dict lookup, the
        additions written out (a method call per item would cost as much again).
        """
        items = self._topic_put.get(topic)
        if items is None:
            items = self._topic_put[topic] = (StatsItem(self._now), StatsItem(self._now))
            self.topic_put_nums[topic], self.topic_put_size[topic] = items
        nums, sizes = items
        nums.value += msg_num
        nums.times += requests
        sizes.value += size
        sizes.times += requests
        broker = self.broker_put_nums
        broker.value += msg_num
        broker.times += requests

    def inc_group_get(self, topic: str, group: str, msg_num: int, size: int) -> None:
        """One pull that returned ``msg_num`` messages, ``size`` bytes, to ``group`` (written out
        as :meth:`inc_topic_put` is)."""
        key = (topic, group)
        items = self._group_get.get(key)
        if items is None:
            items = self._group_get[key] = (StatsItem(self._now), StatsItem(self._now))
            self.group_get_nums[key], self.group_get_size[key] = items
        nums, sizes = items
        nums.value += msg_num
        nums.times += 1
        sizes.value += size
        sizes.times += 1
        broker = self.broker_get_nums
        broker.value += msg_num
        broker.times += 1

    def inc_send_back(self, group: str, topic: str) -> None:
        """A message handed back by ``group`` was stored (incSendBackNums); ``topic`` the original one."""
        item = self.send_back_nums.get((topic, group))
        if item is None:
            item = self.send_back_nums[(topic, group)] = StatsItem(self._now)
        item.value += 1
        item.times += 1

    def inc_group_get_latency(self, group: str, topic: str, queue_id: int, millis: int) -> None:
        """A found pull's body took ``millis`` to build (incGroupGetLatency)."""
        key = (queue_id, topic, group)
        item = self.group_get_latency.get(key)
        if item is None:
            item = self.group_get_latency[key] = StatsItem(self._now)
        item.value += millis
        item.times += 1

    def sample(self, now: float) -> None:
        """Snapshot every total (every :data:`SAMPLE_INTERVAL_S`, by the broker's sampling task).

        ``now`` is also the creation time of items made until the next sample: the hot path does
        not read the clock for them.
        """
        self._now = now
        tables: tuple[dict[Any, StatsItem], ...] = (
            self.topic_put_nums, self.topic_put_size, self.group_get_nums, self.group_get_size, self.send_back_nums,
            self.group_get_latency)
        for table in tables:
            for item in table.values():
                item.sample(now)
        self.broker_put_nums.sample(now)
        self.broker_get_nums.sample(now)

    def stats(self, name: str, key: str) -> tuple[StatsSnapshot, StatsSnapshot, StatsSnapshot] | None:
        """(minute, hour, day) of one statistic, as VIEW_BROKER_STATS_DATA names it; None when it
        was never counted (or is one this broker does not keep)."""
        item: StatsItem | None = None
        if name == TOPIC_PUT_NUMS:
            item = self.topic_put_nums.get(key)
        elif name == TOPIC_PUT_SIZE:
            item = self.topic_put_size.get(key)
        elif name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            topic, at, group = key.partition("@")
            table = self.group_get_nums if name == GROUP_GET_NUMS else self.group_get_size
            item = table.get((topic, group)) if at else None
        elif name == SNDBCK_PUT_NUMS:
            topic, at, group = key.partition("@")
            item = self.send_back_nums.get((topic, group)) if at else None
        elif name == GROUP_GET_LATENCY:
            parts = key.split("@")
            if len(parts) == 3 and parts[0].lstrip("-").isdigit():
                item = self.group_get_latency.get((int(parts[0]), parts[1], parts[2]))
        elif name in (BROKER_PUT_NUMS, BROKER_GET_NUMS) and key == self.cluster:
            item = self.broker_put_nums if name == BROKER_PUT_NUMS else self.broker_get_nums
        return None if item is None else item.windows()

    def group_get_tps(self, group: str, topic: str) -> float:
        """tpsGroupGetNums: the group's messages per second on the topic over the minute window."""
        windows = self.stats(GROUP_GET_NUMS, f"{topic}@{group}")
        return windows[0].tps if windows is not None else 0.0
