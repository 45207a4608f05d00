"""AutoRenew's bookkeeping over time (grpc_v2/auto_renew.py): renewals when due, the stop after
``renewMaxTimeMillis``, and the release of a client not heard of for the channel expiry.

These take minutes to hours of real time, so the pass is driven with explicit clock values, over a
stand-in for PopService that records the invisible-time changes asked of it (the real PopService
and the real renew loop are exercised by tests/broker/test_grpc_endpoint.py)."""

from __future__ import annotations

from typing import cast

from rocketstore.broker.client_manager import CHANNEL_EXPIRED_TIMEOUT_MS
from rocketstore.broker.grpc_v2.auto_renew import INVISIBLE_MS_WHEN_CLEAR, AutoRenew, RenewTimes
from rocketstore.broker.grpc_v2.pop_service import PopService
from rocketstore.broker.grpc_v2.receipt_handle import ReceiptHandle


class RecordingPop:
    """change_invisible as PopService does it (a new handle, visible then), recording each call."""

    def __init__(self) -> None:
        self.now = 0
        self.changes: list[tuple[str, str, ReceiptHandle, int]] = []

    def change_invisible(self, group: str, topic: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        self.changes.append((group, topic, handle, invisible_ms))
        return ReceiptHandle(handle.queue_id, handle.offset, self.now + invisible_ms)


def _renewer() -> tuple[AutoRenew, RecordingPop]:
    pop = RecordingPop()
    return AutoRenew(cast(PopService, pop), RenewTimes(ahead_ms=10_000, slice_ms=60_000, max_ms=100_000)), pop


def test_a_delivery_is_renewed_when_due_until_the_maximum_then_left_alone() -> None:
    renew, pop = _renewer()
    received = ReceiptHandle(1, 5, 60_000)
    renew.track("G", "T", "c1", received, 0)
    renew.renew_due(40_000)  # 20 s left: not due
    assert pop.changes == []
    pop.now = 51_000
    renew.renew_due(51_000)  # 9 s left: renewed by 60 s
    assert [(c[2], c[3]) for c in pop.changes] == [(received, 60_000)]
    renew.seen("c1", 100_000)
    pop.now = 105_000
    renew.renew_due(105_000)  # received 105 s ago, past the 100 s maximum: no more renewals
    assert len(pop.changes) == 1
    assert renew.current("G", "T", received) == received  # no longer tracked: the handle is used as is


def test_the_clients_handle_maps_to_the_renewed_one_once() -> None:
    renew, pop = _renewer()
    received = ReceiptHandle(0, 9, 60_000)
    renew.track("G", "T", "c1", received, 0)
    pop.now = 55_000
    renew.renew_due(55_000)
    assert renew.current("G", "T", received) == ReceiptHandle(0, 9, 115_000)
    assert renew.current("G", "T", received) == received  # the client decided: tracking ended


def test_a_client_not_heard_of_for_the_channel_expiry_releases_its_messages() -> None:
    renew, pop = _renewer()
    renew.track("G", "T", "quiet", ReceiptHandle(0, 1, 60_000), 0)
    renew.track("G", "T", "alive", ReceiptHandle(0, 2, 60_000), 0)
    renew.seen("alive", CHANNEL_EXPIRED_TIMEOUT_MS)
    renew.renew_due(CHANNEL_EXPIRED_TIMEOUT_MS + 1)
    released = [(c[2].offset, c[3]) for c in pop.changes if c[3] == INVISIBLE_MS_WHEN_CLEAR]
    assert released == [(1, INVISIBLE_MS_WHEN_CLEAR)]
