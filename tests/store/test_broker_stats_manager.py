"""BrokerStatsManager's arithmetic: per-second rates from ten-second snapshots, histogram buckets."""

from __future__ import annotations

import pytest

from rocketstore.store.broker_stats_manager import (
    LATENCY_BOUNDS_S,
    SAMPLE_INTERVAL_S,
    BrokerStatsManager,
    LatencyHistogram,
    StatsItem,
)


def test_rate_over_the_last_minute_from_snapshots() -> None:
    stats = BrokerStatsManager(now=0.0)
    for t in range(1, 13):  # 120 s of 10 messages a second, sampled every 10 s
        stats.inc_topic_put("T", 100, 0)
        stats.sample(t * SAMPLE_INTERVAL_S)
    item = stats.topic_put_nums["T"]
    assert item.times == 12 and item.value == 1200
    # the newest snapshot at least 60 s old is the one of t=60 (value 600): 600 messages in 60 s
    assert item.per_second(120.0) == pytest.approx(10.0)
    # 5 s after the last sample, 50 more: from the t=60 snapshot (the newest one >= 60 s old)
    stats.inc_topic_put("T", 50, 0)
    assert item.per_second(125.0) == pytest.approx(650 / 65)
    # a rate that stopped reads 0 once the window has passed
    for t in range(13, 21):
        stats.sample(t * SAMPLE_INTERVAL_S)
    assert item.per_second(200.0) == 0.0


def test_a_new_total_is_not_a_spike() -> None:
    item = StatsItem(now=100.0)
    item.value = 5
    # 5 messages 10 ms after creation: at most 5 per sampling interval, not 500/s
    assert item.per_second(100.01) == pytest.approx(5 / SAMPLE_INTERVAL_S)


def test_longer_windows_for_the_broker_totals() -> None:
    stats = BrokerStatsManager(now=0.0)
    for t in range(1, 62):
        stats.inc_topic_put("T", 2, 200)
        stats.sample(t * SAMPLE_INTERVAL_S)
    # 2 messages per 10 s: over 600 s (from the t=10 snapshot) and over 10 s alike
    assert stats.broker_put_nums.per_second(610.0, 600.0) == pytest.approx(0.2)
    assert stats.broker_put_nums.per_second(610.0, 10.0) == pytest.approx(0.2)
    # per-topic items keep one minute only: a 600 s window falls back to their oldest snapshot
    assert stats.topic_put_nums["T"].per_second(610.0, 600.0) == pytest.approx(0.2)
    assert stats.topic_put_size["T"].value == 61 * 200


def test_group_gets_are_keyed_by_topic_and_group() -> None:
    stats = BrokerStatsManager(now=0.0)
    stats.inc_group_get("T", "G1", 32, 4000)
    stats.inc_group_get("T", "G2", 1, 100)
    stats.inc_group_get("T", "G1", 3, 300)
    assert stats.group_get_nums[("T", "G1")].value == 35 and stats.group_get_nums[("T", "G1")].times == 2
    assert stats.group_get_size[("T", "G2")].value == 100
    assert stats.broker_get_nums.value == 36


def test_histogram_buckets_are_upper_bounds_inclusive() -> None:
    histogram = LatencyHistogram()
    for seconds in (0.00005, 0.0001, 0.0003, 0.02, 99.0):
        histogram.observe(seconds)
    cumulative = dict(histogram.cumulative())
    assert cumulative["0.0001"] == 2  # 0.1 ms itself falls in the 0.1 ms bucket (le)
    assert cumulative["0.0005"] == 3
    assert cumulative["0.025"] == 4
    assert cumulative[repr(LATENCY_BOUNDS_S[-1])] == 4
    assert cumulative["+Inf"] == 5
    assert histogram.sum == pytest.approx(0.00005 + 0.0001 + 0.0003 + 0.02 + 99.0)
    counts = [count for _, count in histogram.cumulative()]
    assert counts == sorted(counts)
