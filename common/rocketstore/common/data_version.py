"""DataVersion: the change counter a broker reports with its tables, so readers skip unchanged ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rocketstore.common.clock import now_ms
from rocketstore.common.fastjson import Fields, as_int, as_object


@dataclass(frozen=True)
class DataVersion:
    """Change counter the broker reports to the name server so it can skip unchanged tables."""

    counter: int = 0
    timestamp: int = field(default_factory=now_ms)

    def next(self) -> DataVersion:
        return DataVersion(self.counter + 1, now_ms())

    def to_dict(self) -> dict[str, Any]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_dict(cls, value: object) -> DataVersion:
        read = Fields(as_object(value, "dataVersion"), "dataVersion").read
        return cls(counter=read("counter", 0, as_int), timestamp=read("timestamp", now_ms(), as_int))
