"""LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42): the queue locks of orderly consumers.

An orderly push consumer locks every queue it was assigned before consuming it, and re-locks
them every 20 s; a queue stays locked by one client id of a group until that client unlocks it
or stops renewing it for ``lockMaxLiveTime`` (RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime``
system property, 60 s). Same rules as RocketMQ's RebalanceLockManager:

* a queue nobody holds, or whose holder's lock expired, goes to the asking client;
* the holder asking again renews its lock (the answer includes the queue);
* unlock by any other client id is ignored.

Bodies are fastjson JSON: request ``{"consumerGroup", "clientId", "mqSet": [{"topic",
"brokerName", "queueId"}]}``; the lock response is ``{"lockOKMQSet": [...]}`` with the queues
now held by the caller. Locks live in memory only, as in RocketMQ (a restarted broker forgets
them and clients re-lock within 20 s).

All handlers run on the broker's event loop, so the table needs no thread lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rocketstore.broker.server import Connection, Handler
from rocketstore.remoting.body import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    UnlockBatchRequestBody,
)
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

LOCK_MAX_LIVE_TIME_PROPERTY = "rocketmq.broker.rebalance.lockMaxLiveTime"
DEFAULT_LOCK_MAX_LIVE_TIME_MS = 60_000


def lock_max_live_time_ms() -> int:
    """RocketMQ reads this JVM system property; we read it from the environment under the same name."""
    raw = os.environ.get(LOCK_MAX_LIVE_TIME_PROPERTY)
    return int(raw) if raw and raw.strip().lstrip("-").isdigit() else DEFAULT_LOCK_MAX_LIVE_TIME_MS


@dataclass(frozen=True, slots=True)
class MessageQueue:
    """RocketMQ's MessageQueue as a lock-table key: equal over topic, broker name and queue id."""

    topic: str
    broker_name: str
    queue_id: int

    @classmethod
    def of(cls, data: MessageQueueData) -> MessageQueue:
        return cls(data.topic, data.broker_name, data.queue_id)

    def data(self) -> MessageQueueData:
        return MessageQueueData(topic=self.topic, broker_name=self.broker_name, queue_id=self.queue_id)


@dataclass(slots=True)
class _LockEntry:
    client_id: str
    last_update: float


class RebalanceLockManager:
    """Per group, which client holds which queue, and since when it last said so."""

    def __init__(self, max_live_time_ms: int | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_live_time_s = (lock_max_live_time_ms() if max_live_time_ms is None else max_live_time_ms) / 1000
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, _LockEntry]] = {}

    def _expired(self, entry: _LockEntry, now: float) -> bool:
        return now - entry.last_update > self.max_live_time_s

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> list[MessageQueue]:
        """Lock what can be locked for ``client_id``; returns the queues it now holds (request order)."""
        now = self._clock()
        queues = self._table.setdefault(group, {})
        locked: list[MessageQueue] = []
        for mq in dict.fromkeys(mqs):  # a set on the wire: drop duplicates, keep order
            entry = queues.get(mq)
            if entry is None or entry.client_id == client_id or self._expired(entry, now):
                queues[mq] = _LockEntry(client_id, now)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues ``client_id`` holds; queues held by others stay locked."""
        queues = self._table.get(group)
        if queues is None:
            return
        for mq in mqs:
            entry = queues.get(mq)
            if entry is not None and entry.client_id == client_id:
                del queues[mq]
        if not queues:
            del self._table[group]

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client id holding a live lock on ``mq``, if any."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or self._expired(entry, self._clock()):
            return None
        return entry.client_id


class LockBatchProcessor:
    """Keeps one lock table per broker; it needs nothing else of the broker."""

    def __init__(self) -> None:
        self.manager = RebalanceLockManager()

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.LOCK_BATCH_MQ: self.lock_batch, RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch}

    def lock_batch(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body)
        locked = self.manager.try_lock_batch(body.consumer_group, map(MessageQueue.of, body.mq_set), body.client_id)
        answer = LockBatchResponseBody(lock_ok_mq_set=[mq.data() for mq in locked])
        return request.response(ResponseCode.SUCCESS, body=answer.encode())

    def unlock_batch(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(request.body)
        self.manager.unlock_batch(body.consumer_group, map(MessageQueue.of, body.mq_set), body.client_id)
        return request.response(ResponseCode.SUCCESS)
