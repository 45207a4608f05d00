"""Adaptive retention: the decision, as a pure function of the spec and the observed disk usage.

RocketMQ deletes CommitLog segments older than ``fileReservedTime`` at ``deleteWhen``, deletes
them early above ``diskMaxUsedSpaceRatio``, deletes even unexpired ones above
``diskSpaceCleanForciblyRatio`` and refuses writes above ``diskSpaceWarningLevelRatio``. Forced
cleanup is abrupt; policy ``adaptive`` acts before it:

* usage >= forcibly - margin: halve ``fileReservedTime`` (never below ``minFileReservedTime``), so
  the broker's next cleanup pass frees whole expired segments (DiskPressure=True);
* usage <= forcibly - 2 * margin: double it back, never above the spec's value;
* in between: keep it (hysteresis, so the value does not flap).

With policy ``fixed`` the spec's value is always the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketstore.operator.model import Retention

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    file_reserved_time: int
    pressure: bool
    reason: str


def decide(retention: Retention, current_hours: int | None, usage: float | None) -> Decision:
    """The fileReservedTime to run with, given the one applied now and the highest disk usage."""
    spec_hours = retention.file_reserved_time
    if retention.policy != "adaptive":
        return Decision(spec_hours, False, "Fixed")
    current = spec_hours if current_hours is None else min(max(current_hours, 1), spec_hours)
    if usage is None:
        return Decision(current, False, "NoUsage")
    high = retention.disk_space_clean_forcibly_ratio - retention.adaptive_margin
    low = retention.disk_space_clean_forcibly_ratio - 2 * retention.adaptive_margin
    if usage >= high:
        lowered = max(retention.min_file_reserved_time, current // 2)
        return Decision(lowered, True, "Lowered" if lowered < current else "AtFloor")
    if usage <= low and current < spec_hours:
        return Decision(min(spec_hours, current * 2), False, "Raised")
    return Decision(current, usage >= low and current < spec_hours, "Holding")
