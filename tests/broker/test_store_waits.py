"""StoreWaits: how a send that must wait for its flush (SYNC_FLUSH) or its slave
(SYNC_MASTER) learns the outcome, on a real broker's store and its real flush thread.

The slave's report is made by calling the store's ``notify_transfer_some``, from a thread (as a
store's own HA reader thread does) or on the loop (as the broker's loop does when it reads the
report itself); a real slave acknowledging, timing out and missing is in test_replication.py,
through the plain send path.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.common.message import Message
from rocketstore.store.config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.store.status import PutMessageStatus

SLAVE_TIMEOUT_MS = 300


def _on_broker(root: Path, test: Callable[[BrokerController], Awaitable[None]], **store: Any) -> None:
    async def main() -> None:
        broker = BrokerController(
            BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                         http_listen_port=0, grpc_listen_port=0),
            StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=1 << 20,
                        slave_timeout=SLAVE_TIMEOUT_MS, **store))
        await broker.start()
        try:
            await test(broker)
        finally:
            await broker.stop(grace_s=1.0)
    asyncio.run(main())


def _put(broker: BrokerController) -> int:
    """Put a message without waiting; where it ends in the CommitLog."""
    result = broker.store.put_message(Message(topic="T", body=b"x" * 100), wait_flush=False)
    assert result.append is not None
    return result.append.wrote_offset + result.append.wrote_bytes


class Outcomes:
    """What ``done`` was called with, and when (loop time since the wait began)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.began = self.loop.time()
        self.calls: list[tuple[PutMessageStatus, float]] = []
        self.called = asyncio.Event()

    def done(self, status: PutMessageStatus) -> None:
        self.calls.append((status, self.loop.time() - self.began))
        self.called.set()

    async def first(self, timeout: float = 5.0) -> tuple[PutMessageStatus, float]:
        await asyncio.wait_for(self.called.wait(), timeout)
        return self.calls[0]


def test_a_sync_flush_put_is_answered_once_durable(tmp_path: Path) -> None:
    async def test(broker: BrokerController) -> None:
        out = Outcomes()
        assert broker.store_waits.add(PutMessageStatus.PUT_OK, _put(broker), flush=True, replica=False, done=out.done)
        status, _ = await out.first()
        assert status is PutMessageStatus.PUT_OK
        await asyncio.sleep(0.1)
        assert len(out.calls) == 1
    _on_broker(tmp_path, test, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def test_a_slave_report_past_the_put_answers_it_before_the_deadline(tmp_path: Path) -> None:
    async def test(broker: BrokerController) -> None:
        out = Outcomes()
        end = _put(broker)
        assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=True, done=out.done)
        await asyncio.sleep(0.05)
        assert not out.calls
        short = threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(end - 1,))
        short.start()
        short.join()
        await asyncio.sleep(0.05)
        assert not out.calls  # a report short of the put's end answers nothing
        threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(end,)).start()
        status, after = await out.first()
        assert status is PutMessageStatus.PUT_OK and after < SLAVE_TIMEOUT_MS / 1000
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_no_slave_report_within_slave_timeout_is_flush_slave_timeout_whatever_the_flush(
        tmp_path: Path, flush: FlushDiskType) -> None:
    async def test(broker: BrokerController) -> None:
        out = Outcomes()
        end = _put(broker)
        sync_flush = flush is FlushDiskType.SYNC_FLUSH
        assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=sync_flush, replica=True, done=out.done)
        status, after = await out.first()
        assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert SLAVE_TIMEOUT_MS / 1000 <= after < SLAVE_TIMEOUT_MS / 1000 + 1
        # the slave reports later: its waiter is released, and nobody is answered twice
        threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(end,)).start()
        await asyncio.sleep(0.1)
        assert len(out.calls) == 1
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER, flush_disk_type=flush)


def test_slave_not_available_waits_for_the_flush_only_and_keeps_its_status(tmp_path: Path) -> None:
    async def test(broker: BrokerController) -> None:
        out = Outcomes()
        begin = time.monotonic()
        assert broker.store_waits.add(PutMessageStatus.SLAVE_NOT_AVAILABLE, _put(broker), flush=True, replica=True,
                           done=out.done)
        status, _ = await out.first()
        assert status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert time.monotonic() - begin < SLAVE_TIMEOUT_MS / 1000  # the flush's wait, not slaveTimeout
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def test_nothing_to_wait_for_calls_nothing(tmp_path: Path) -> None:
    async def test(broker: BrokerController) -> None:
        out = Outcomes()
        end = _put(broker)
        assert not broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=False, done=out.done)
        # an ASYNC_FLUSH store's flush and a put that failed wait for nothing either
        assert not broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=True, replica=False, done=out.done)
        assert not broker.store_waits.add(PutMessageStatus.MESSAGE_ILLEGAL, end, flush=True, replica=True,
                               done=out.done)
        await asyncio.sleep(0.05)
        assert not out.calls
    _on_broker(tmp_path, test)


def test_one_slave_report_answers_every_put_it_covers_in_order(tmp_path: Path) -> None:
    async def test(broker: BrokerController) -> None:
        outs = [Outcomes() for _ in range(5)]
        ends = [_put(broker) for _ in outs]
        for end, out in zip(ends, outs, strict=True):
            assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=True, done=out.done)
        report = threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(ends[2],))
        report.start()
        report.join()
        await outs[2].first()
        await asyncio.sleep(0.05)
        assert [len(out.calls) for out in outs] == [1, 1, 1, 0, 0]
        # what the queue reads once per report instead of asking put by put
        assert broker.store.transferred_offset() == ends[2]
        assert not any(broker.store.request_transfer(end, lambda: None) for end in ends[:3])
        assert all(out.calls[0][0] is PutMessageStatus.PUT_OK for out in outs[:3])
        # the rest time out together, each once
        for out in outs[3:]:
            status, after = await out.first()
            assert status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and after >= SLAVE_TIMEOUT_MS / 1000
        # a put made after they expired waits for a report of its own
        late = Outcomes()
        end = _put(broker)
        assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=True, done=late.done)
        threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(end,)).start()
        status, after = await late.first()
        assert status is PutMessageStatus.PUT_OK and after < SLAVE_TIMEOUT_MS / 1000
        assert [len(out.calls) for out in outs] == [1] * 5
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER)


def test_one_report_answers_its_puts_then_calls_on_settled_once_in_the_same_pass(tmp_path: Path) -> None:
    """The broker writes the answers a report released in on_settled (RemotingServer.flush_answers):
    it must come after every one of them and before the loop's next pass, and once per report."""
    async def test(broker: BrokerController) -> None:
        loop = asyncio.get_running_loop()
        events: list[str] = []
        marker_ran = False

        def marker() -> None:
            nonlocal marker_ran
            marker_ran = True

        def done(status: PutMessageStatus) -> None:
            nonlocal marker_ran
            events.append(f"done {status.name}")
            marker_ran = False
            loop.call_soon(marker)  # runs in the next pass

        def settled() -> None:
            events.append(f"settled{' late' if marker_ran else ''}")

        broker.store_waits.on_settled = settled
        ends = [_put(broker) for _ in range(3)]
        for end in ends:
            assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=True, done=done)
        threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(ends[1],)).start()
        deadline = loop.time() + 5
        while "settled" not in events and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert events == ["done PUT_OK", "done PUT_OK", "settled"]
        threading.Thread(target=broker.store.ha_service.notify_transfer_some, args=(ends[2],)).start()
        while len(events) < 5 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert events[3:] == ["done PUT_OK", "settled"]
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER)


def test_a_report_read_on_the_loop_answers_its_puts_before_the_read_returns(tmp_path: Path) -> None:
    """The broker's loop reads slave reports itself (HAService.attach_loop): the puts a report
    covers are answered, and on_settled called, inside that read, with no later pass."""
    async def test(broker: BrokerController) -> None:
        events: list[str] = []
        broker.store_waits.on_settled = lambda: events.append("settled")
        ends = [_put(broker) for _ in range(3)]
        for end in ends:
            assert broker.store_waits.add(PutMessageStatus.PUT_OK, end, flush=False, replica=True,
                                          done=lambda status: events.append(f"done {status.name}"))
        broker.store.ha_service.notify_transfer_some(ends[1])
        assert events == ["done PUT_OK", "done PUT_OK", "settled"]
        broker.store.ha_service.notify_transfer_some(ends[2])
        assert events[3:] == ["done PUT_OK", "settled"]
    _on_broker(tmp_path, test, broker_role=BrokerRole.SYNC_MASTER)
