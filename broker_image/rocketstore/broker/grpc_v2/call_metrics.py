"""CallMetrics: what /metrics tells of the gRPC endpoint's calls, by method and outcome.

A call's outcome is the v2 status code its answer carries (``OK``, ``TOPIC_NOT_FOUND``,
``MESSAGE_NOT_FOUND``, ...: the first response of a stream), or, for a call refused before any
answer (ACL, an undecodable request, an error), the gRPC status code (``UNAUTHENTICATED``,
``INVALID_ARGUMENT``, ``UNKNOWN``). Latency is from the parsed request to the last response, so a
ReceiveMessage or PullMessage includes its long polling; Telemetry streams, which live as long as
their client, are counted at their end and not timed.

Counted in plain dicts on the broker's loop (every call runs there) and turned into metric
families at scrape time, as the broker's other statistics are.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from rocketstore.store.broker_stats_manager import LatencyHistogram

REQUESTS: Final = "rocketstore_grpc_requests"
LATENCY: Final = "rocketstore_grpc_request_latency_seconds"


class CallMetrics:
    """Calls per (method, code) and a latency histogram per method."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], int] = {}
        self.latency: dict[str, LatencyHistogram] = {}

    def record(self, method: str, code: str, seconds: float | None) -> None:
        """One finished call; ``seconds`` None for a call that is not timed (a Telemetry stream)."""
        key = (method, code)
        self.calls[key] = self.calls.get(key, 0) + 1
        if seconds is not None:
            histogram = self.latency.get(method)
            if histogram is None:
                histogram = self.latency[method] = LatencyHistogram()
            histogram.observe(seconds)

    def collect(self) -> Iterator[Metric]:
        calls = CounterMetricFamily(REQUESTS, "gRPC v2 calls answered, by method and outcome (the v2 status "
                                    "code of the answer, else the gRPC status code)", labels=["method", "code"])
        for (method, code), count in sorted(self.calls.items()):
            calls.add_metric([method, code], count)
        yield calls
        latency = HistogramMetricFamily(LATENCY, "gRPC v2 call handling, from the parsed request to the last "
                                        "response (long polling included)", labels=["method"])
        for method, histogram in sorted(self.latency.items()):
            latency.add_metric([method], histogram.cumulative(), histogram.sum)
        yield latency
