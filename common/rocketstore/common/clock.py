"""Wall-clock milliseconds, Java's ``System.currentTimeMillis()``: the unit of every RocketMQ timestamp."""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
