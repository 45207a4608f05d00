"""Auto renew: the broker keeps a message invisible while the client that received it consumes it
(RocketMQ's proxy does the same: ReceiptHandleProcessor / DefaultReceiptHandleManager).

A push consumer receives with ``auto_renew`` and no invisible duration: the message is invisible
for ``defaultInvisibleTimeMills`` (60 s), and, as long as the client neither acks it nor changes
its invisible time, every renewal pass moves a delivery due within ``renewAheadTimeMillis`` (10 s)
``renewSliceTimeMillis`` (60 s) further, for at most ``renewMaxTimeMillis`` (3 h) after it was
received. Without it a listener that runs longer than a minute would see its message delivered
again to someone else.

The client keeps the receipt handle it received; each renewal makes a new one (pop_service.py:
a handle names one invisible time). So the client's handle is swapped for the current one when it
acks, nacks or forwards the message (:meth:`AutoRenew.current`), which also ends the renewing.
When a client says it terminates (NotifyClientTermination), or has not been heard of (heartbeat,
receive) for the broker's channel expiry (2 min), the messages it still holds become visible after
``invisibleTimeMillisWhenClear`` (1 s), for the group's other consumers, as the proxy clears the
handles of a consumer that went offline.

The tracking is in memory: after a broker restart the messages come back after their current
invisible time, as any unacked message does.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Final

from rocketstore.broker.client_manager import CHANNEL_EXPIRED_TIMEOUT_MS
from rocketstore.broker.grpc_v2.pop_service import InvalidHandle, PopService
from rocketstore.broker.grpc_v2.receipt_handle import ReceiptHandle

log = logging.getLogger(__name__)

#: how often the renewal pass runs (the proxy's renewSchedulePeriodMillis)
RENEW_PERIOD_S: Final = 5.0
#: how soon a departed client's messages become visible again (the proxy's invisibleTimeMillisWhenClear)
INVISIBLE_MS_WHEN_CLEAR: Final = 1000

#: (group, topic, queue id, queue offset): one message of a group
MessageKey = tuple[str, str, int, int]


@dataclass(slots=True)
class Renewed:
    """A delivery the broker renews: the handle its client holds, the current one, since when."""

    client_id: str
    received: ReceiptHandle
    current: ReceiptHandle
    received_ms: int


@dataclass(frozen=True, slots=True)
class RenewTimes:
    """broker.conf's renewal settings (ms)."""

    ahead_ms: int
    slice_ms: int
    max_ms: int


class AutoRenew:
    """The deliveries received with ``auto_renew`` and not yet acked or changed by their client."""

    def __init__(self, pop: PopService, times: RenewTimes) -> None:
        self.pop = pop
        self.times = times
        self._held: dict[MessageKey, Renewed] = {}
        #: when each client holding deliveries was last heard of
        self._last_seen: dict[str, int] = {}
        #: renewals done (for /metrics)
        self.renewals = 0

    def track(self, group: str, topic: str, client_id: str, handle: ReceiptHandle, now_ms: int) -> None:
        self._held[(group, topic, handle.queue_id, handle.offset)] = Renewed(client_id, handle, handle, now_ms)
        self._last_seen[client_id] = now_ms

    def seen(self, client_id: str, now_ms: int) -> None:
        """The client is alive (a heartbeat): its deliveries go on being renewed."""
        if client_id in self._last_seen:
            self._last_seen[client_id] = now_ms

    def current(self, group: str, topic: str, handle: ReceiptHandle) -> ReceiptHandle:
        """The handle to act on for the client's ``handle``: the renewed one when the broker renews
        that delivery (which it stops doing now: the client has decided), else ``handle`` itself."""
        key = (group, topic, handle.queue_id, handle.offset)
        renewed = self._held.get(key)
        if renewed is None or renewed.received != handle:
            return handle
        del self._held[key]
        return renewed.current

    def renew_due(self, now_ms: int) -> None:
        """One renewal pass: deliveries due within ``ahead_ms`` get ``slice_ms`` more; those received
        more than ``max_ms`` ago, or no longer held (acked through another handle, expired, moved
        to the DLQ), are dropped."""
        times = self.times
        for client_id, last_seen in list(self._last_seen.items()):
            if now_ms - last_seen > CHANNEL_EXPIRED_TIMEOUT_MS:
                log.warning("client %s not heard of for %d ms: the messages it holds become visible again",
                            client_id, now_ms - last_seen)
                self.release_client(client_id)
        for key, renewed in list(self._held.items()):
            if renewed.current.visible_at_ms - now_ms > times.ahead_ms:
                continue
            group, topic, _, _ = key
            if now_ms - renewed.received_ms >= times.max_ms:
                log.info("auto renew of %s-%d offset %d for %s stops: received %d ms ago", topic, key[2], key[3],
                         group, now_ms - renewed.received_ms)
                del self._held[key]
                continue
            try:
                renewed.current = self.pop.change_invisible(group, topic, renewed.current, times.slice_ms)
                self.renewals += 1
            except InvalidHandle:
                del self._held[key]

    def release_client(self, client_id: str) -> None:
        """A client went away: what it still holds becomes visible soon, for the group's others."""
        self._last_seen.pop(client_id, None)
        for key, renewed in list(self._held.items()):
            if renewed.client_id != client_id:
                continue
            del self._held[key]
            group, topic, _, _ = key
            with contextlib.suppress(InvalidHandle):  # acked or redelivered meanwhile
                self.pop.change_invisible(group, topic, renewed.current, INVISIBLE_MS_WHEN_CLEAR)
