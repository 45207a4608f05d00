"""Shutdown and the ``abort`` marker: RocketMQ 4.9.8's DefaultMessageStoreShutDownTest, ported.

RocketMQ's test fakes ``dispatchBehindBytes()`` with a Mockito spy. Here dispatch is made to
fall behind for real: the store's ReputMessageService is stopped before messages are put, so
the CommitLog grows while no consume queue entry is built.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_support import SEGMENT, small_config

from rocketstore.common.message import Message, StoredMessage, decode_record
from rocketstore.store.config import FlushDiskType
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import GetMessageStatus, PutMessageStatus


def make_store(root: Path) -> DefaultMessageStore:
    return DefaultMessageStore(small_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def stores() -> Iterator[list[DefaultMessageStore]]:
    opened: list[DefaultMessageStore] = []
    yield opened
    for s in opened:
        s.shutdown()


def start(root: Path, stores: list[DefaultMessageStore]) -> DefaultMessageStore:
    store = make_store(root)
    store.load()
    store.start()
    stores.append(store)
    return store


def test_clean_shutdown_removes_abort(root: Path, stores: list[DefaultMessageStore]) -> None:
    store = start(root, stores)
    assert (root / "abort").exists()  # marks the run while the store is up
    for i in range(10):
        assert store.put_message(Message(topic="T", body=b"m%d" % i)).status is PutMessageStatus.PUT_OK
    store.shutdown()
    assert store.dispatch_behind_bytes == 0
    assert not (root / "abort").exists()
    again = start(root, stores)
    assert again.last_exit_ok  # normal recovery next time
    assert again.get_max_offset_in_queue("T", 0) == 10


def test_shutdown_with_dispatch_behind_keeps_abort(root: Path, stores: list[DefaultMessageStore]) -> None:
    store = start(root, stores)
    # Dispatch made to lag for real (instead of RocketMQ's mocked dispatchBehindBytes): stop
    # the reput thread, then put. The records are in the CommitLog, no consume queue sees them.
    store.reput_service.shutdown()
    bodies = [b"behind %d" % i for i in range(80)]  # ~100-byte records: several segments
    for i, body in enumerate(bodies):
        msg = Message(topic="T", body=body, queue_id=i % 2, properties={"KEYS": f"k{i}"})
        assert store.put_message(msg).status is PutMessageStatus.PUT_OK
    max_phy = store.max_phy_offset
    assert max_phy > 2 * SEGMENT
    assert store.dispatch_behind_bytes == max_phy
    assert store.get_max_offset_in_queue("T", 0) == 0
    store.shutdown()
    assert (root / "abort").exists()  # not a clean exit: the next start must recover abnormally

    again = make_store(root)
    again.load()
    stores.append(again)
    assert not again.last_exit_ok
    again.start()
    assert again.reput_service.wait_caught_up(10)
    assert again.max_phy_offset == max_phy
    assert again.dispatch_behind_bytes == 0
    for q in (0, 1):
        assert again.get_max_offset_in_queue("T", q) == 40
        got: list[bytes] = []
        offset = 0
        while (res := again.get_message("g", "T", q, offset, 32)).status is GetMessageStatus.FOUND:
            for raw in res.messages:
                decoded = decode_record(raw)
                assert isinstance(decoded, StoredMessage)
                got.append(decoded.body)
            offset = res.next_begin_offset
        assert got == bodies[q::2]
    # the index was built too
    found = again.query_message("T", "k77", 32, 0, 2**62).messages
    assert [m.body for m in found] == [bodies[77]]

    again.shutdown()
    assert not (root / "abort").exists()  # caught up now: a clean shutdown
    third = start(root, stores)
    assert third.last_exit_ok
    assert third.get_max_offset_in_queue("T", 1) == 40


def test_abort_left_by_a_crash_means_abnormal_recovery(root: Path, stores: list[DefaultMessageStore]) -> None:
    store = start(root, stores)
    for i in range(5):
        store.put_message(Message(topic="T", body=b"c%d" % i))
    assert store.reput_service.wait_caught_up(5)
    store.shutdown()
    assert not os.path.exists(root / "abort")
    (root / "abort").touch()  # what a killed process leaves behind
    again = start(root, stores)
    assert not again.last_exit_ok
    assert again.get_max_offset_in_queue("T", 0) == 5
