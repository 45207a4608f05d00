"""CommitLog put path: RocketMQ 4.9.8's AppendCallbackTest and BatchPutMessageTest, ported.

Expected record bytes are built independently here with ``struct``/``zlib``/``socket`` (never
with the store's own encoder), so a wrong field order, width or flag in ``store.message``
shows up as a byte mismatch.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import struct
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
from store_support import OpenStore

from rocketstore.common.message import HostAddress, Message
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.commit_log import CommitLog, CommitLogSettings, MessageBatch
from rocketstore.store.config import FlushDiskType, StoreConfig
from rocketstore.store.flush import GroupCommitService
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

MAGIC_V1 = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
SEG = 1024  # tiny CommitLog segments so rolls happen after a few records


# -- helpers: an independent encoder -------------------------------------------------------


def host_bytes(host: str, port: int) -> bytes:
    ip = ipaddress.ip_address(host)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    return socket.inet_pton(family, host) + struct.pack(">i", port)


def record_size(body_len: int, topic_len: int, props_len: int, born_v6: bool = False, store_v6: bool = False) -> int:
    """RocketMQ's calMsgLength, written out field by field."""
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8  # totalSize .. bornTimestamp
        + (20 if born_v6 else 8)  # bornHost
        + 8  # storeTimestamp
        + (20 if store_v6 else 8)  # storeHost
        + 4 + 8  # reconsumeTimes, preparedTransactionOffset
        + 4 + body_len + 1 + topic_len + 2 + props_len
    )


def build_record(
    *, topic: bytes, body: bytes, props: bytes, queue_id: int, flag: int, queue_offset: int, phys: int,
    sys_flag: int, born_ts: int, born: bytes, store_ts: int, store: bytes, reconsume: int, prepared: int,
) -> bytes:
    total = record_size(len(body), len(topic), len(props), len(born) == 20, len(store) == 20)
    out = struct.pack(">iIIiiqqiq", total, MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, queue_id, flag,
                      queue_offset, phys, sys_flag, born_ts)
    out += born + struct.pack(">q", store_ts) + store
    out += struct.pack(">iqi", reconsume, prepared, len(body)) + body
    out += struct.pack(">b", len(topic)) + topic
    out += struct.pack(">h", len(props)) + props
    assert len(out) == total
    return out


def read_log(cfg: StoreConfig, offset: int, size: int) -> bytes:
    """Read bytes of the CommitLog straight from the segment file (not through the store)."""
    seg = cfg.mapped_file_size_commit_log
    path = Path(cfg.commit_log_dir()) / f"{offset - offset % seg:020d}"
    with open(path, "rb") as f:
        f.seek(offset % seg)
        return f.read(size)


def props_of_record(rec: bytes) -> bytes:
    """The raw properties bytes of a record, found by walking its fields (not via the store)."""
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    p = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    (body_len,) = struct.unpack_from(">i", rec, p)
    p += 4 + body_len
    p += 1 + rec[p]
    (props_len,) = struct.unpack_from(">h", rec, p)
    assert p + 2 + props_len == len(rec)
    return rec[p + 2 :]


@pytest.fixture
def store_defaults() -> dict[str, Any]:
    """64 KiB CommitLog segments unless a test asks for SEG: most records here must not roll."""
    return {"commit_log_size": SEG * 64}


def simple(topic: str = "T", body: bytes = b"x", queue_id: int = 0, **props: str) -> Message:
    return Message(topic=topic, body=body, queue_id=queue_id, properties=dict(props))


# -- exact bytes -----------------------------------------------------------------------------


def test_record_bytes_match_rocketmq_layout_field_by_field(open_store: OpenStore) -> None:
    store = open_store()
    born = HostAddress("192.168.0.1", 1234)
    stored_at = HostAddress("10.0.0.2", 10911)
    msgs = [
        Message(topic="TopicTest", body=b"hello world", queue_id=3, flag=7, properties={"k": "v", "k2": "v2"},
                born_timestamp=1_700_000_000_123, born_host=born, store_host=stored_at, reconsume_times=2),
        Message(topic="TopicTest", body=b"second body!", queue_id=3, flag=0, properties={"k": "v", "k2": "v2"},
                born_timestamp=1_700_000_000_456, born_host=born, store_host=stored_at),
    ]
    results = [store.put_message(m) for m in msgs]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 2

    phys = 0
    for i, (m, r) in enumerate(zip(msgs, results, strict=True)):
        assert r.append is not None
        expected = build_record(
            topic=m.topic.encode(), body=m.body, props=b"k\x01v\x02k2\x01v2", queue_id=3, flag=m.flag,
            queue_offset=i, phys=phys, sys_flag=0, born_ts=m.born_timestamp,
            born=socket.inet_aton("192.168.0.1") + struct.pack(">i", 1234), store_ts=r.append.store_timestamp,
            store=socket.inet_aton("10.0.0.2") + struct.pack(">i", 10911), reconsume=m.reconsume_times,
            prepared=0,
        )
        assert r.append.wrote_offset == phys
        assert r.append.wrote_bytes == len(expected)
        assert r.append.logics_offset == i
        on_disk = read_log(store.config, phys, len(expected))
        assert on_disk == expected
        # spot checks that do not go through build_record at all
        assert on_disk[4:8] == bytes.fromhex("DAA320A7")
        assert on_disk.endswith(b"\tTopicTest\x00\x09k\x01v\x02k2\x01v2")  # no trailing \x02
        assert struct.unpack_from(">i", on_disk, 8)[0] == zlib.crc32(m.body) & 0x7FFFFFFF
        # offset msg id = store ip + port + physical offset, upper-case hex
        assert r.append.msg_id == (socket.inet_aton("10.0.0.2") + struct.pack(">iq", 10911, phys)).hex().upper()
        phys += len(expected)
    assert store.max_phy_offset == phys


def test_body_crc_is_masked_to_a_non_negative_int32(open_store: OpenStore) -> None:
    store = open_store()
    # find a body whose raw CRC32 has the top bit set, so the mask matters
    body = next(b for b in (f"crc-{i}".encode() for i in range(1000)) if zlib.crc32(b) & 0x80000000)
    r = store.put_message(simple(body=body))
    assert r.append is not None
    rec = read_log(store.config, r.append.wrote_offset, r.append.wrote_bytes)
    assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(body) & 0x7FFFFFFF
    assert struct.unpack_from(">i", rec, 8)[0] >= 0


# -- IPv6 hosts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("born", "stored", "flags"),
    [
        (("1050::5:600:300c:326b", 123), ("::1", 124), 0x30),
        (("1050::5:600:300c:326b", 123), ("127.0.0.1", 124), 0x10),
        (("127.0.0.1", 123), ("::1", 124), 0x20),
    ],
)
def test_ipv6_hosts_set_sysflag_bits_and_use_20_byte_fields(
    open_store: OpenStore, born: tuple[str, int], stored: tuple[str, int], flags: int
) -> None:
    store = open_store()
    m = Message(topic="v6", body=b"ipv6 body", queue_id=1, properties={"TAGS": "a"},
                born_timestamp=1_700_000_000_000, born_host=HostAddress(*born), store_host=HostAddress(*stored))
    r = store.put_message(m)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    props = b"TAGS\x01a"
    expected = build_record(
        topic=b"v6", body=m.body, props=props, queue_id=1, flag=0, queue_offset=0, phys=0, sys_flag=flags,
        born_ts=m.born_timestamp, born=host_bytes(*born), store_ts=r.append.store_timestamp,
        store=host_bytes(*stored), reconsume=0, prepared=0,
    )
    assert r.append.wrote_bytes == record_size(9, 2, len(props), bool(flags & 0x10), bool(flags & 0x20))
    assert read_log(store.config, 0, len(expected)) == expected
    # offset msg id is 56 hex chars when the store host is IPv6
    assert len(r.append.msg_id) == (56 if flags & 0x20 else 32)

    store.reput_service.wait_caught_up(5)
    got = store.look_message_by_offset(0)
    assert got is not None
    assert got.sys_flag == flags
    assert ipaddress.ip_address(got.born_host.host) == ipaddress.ip_address(born[0])
    assert got.born_host.port == born[1]
    assert ipaddress.ip_address(got.store_host.host) == ipaddress.ip_address(stored[0])
    assert got.store_host.port == stored[1]
    assert got.store_timestamp == r.append.store_timestamp
    pulled = store.get_message("g", "v6", 1, 0, 32)
    assert pulled.status is GetMessageStatus.FOUND
    assert pulled.messages == [expected]


def test_ipv6_records_survive_restart_recovery(open_store: OpenStore, tmp_path: Path) -> None:
    store = open_store()
    v6 = HostAddress("1050::5:600:300c:326b", 123)
    ends = []
    for i in range(12):
        host = v6 if i % 2 else HostAddress("127.0.0.1", 9)
        r = store.put_message(Message(topic="mix", body=b"b%d" % i, born_host=host, store_host=host))
        assert r.append is not None
        ends.append(r.append.wrote_offset + r.append.wrote_bytes)
    store.reput_service.wait_caught_up(5)
    store.shutdown()
    again = open_store()
    assert again.max_phy_offset == ends[-1]
    assert again.get_max_offset_in_queue("mix", 0) == 12
    pulled = again.get_message("g", "mix", 0, 0, 32)
    assert pulled.message_count == 12


# -- end of file -----------------------------------------------------------------------------


@pytest.mark.parametrize("second_size_delta", [0, 1], ids=["fits-with-8-spare", "one-byte-too-big"])
def test_end_of_file_blank_record_and_roll(open_store: OpenStore, second_size_delta: int) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    first_body = 500 - record_size(0, 1, 0)  # record of exactly 500 bytes
    r1 = store.put_message(simple(body=b"a" * first_body))
    assert r1.append is not None and r1.append.wrote_bytes == 500
    room = SEG - 500
    # a record of room-8 bytes leaves exactly the 8 bytes a blank needs; one more byte does not fit
    second_record = room - 8 + second_size_delta
    r2 = store.put_message(simple(body=b"b" * (second_record - record_size(0, 1, 0))))
    assert r2.status is PutMessageStatus.PUT_OK and r2.append is not None
    assert r2.append.wrote_bytes == second_record
    if second_size_delta == 0:
        assert r2.append.wrote_offset == 500  # stayed in the first segment
        r3 = store.put_message(simple(body=b"c"))
        assert r3.append is not None
        assert r3.append.wrote_offset == SEG  # the next record had to roll
        blank_at, blank_size = 500 + second_record, 8
    else:
        assert r2.append.wrote_offset == SEG
        blank_at, blank_size = 500, room
    assert read_log(store.config, blank_at, 8) == struct.pack(">iI", blank_size, BLANK_MAGIC)
    assert sorted(os.listdir(store.config.commit_log_dir()))[:2] == [f"{0:020d}", f"{SEG:020d}"]

    # dispatch steps over the blank; every message is visible with the right queue offsets
    store.reput_service.wait_caught_up(5)
    count = 3 if second_size_delta == 0 else 2
    pulled = store.get_message("g", "T", 0, 0, 32)
    assert pulled.message_count == count
    assert pulled.message_queue_offsets == list(range(count))
    # recovery after a clean restart also crosses the blank
    end = store.max_phy_offset
    store.shutdown()
    again = open_store(mapped_file_size_commit_log=SEG)
    assert again.max_phy_offset == end
    assert again.get_max_offset_in_queue("T", 0) == count


def test_record_larger_than_a_segment_is_refused_without_writing(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    r = store.put_message(simple(body=b"z" * SEG))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == 0
    assert store.put_message(simple(body=b"ok")).status is PutMessageStatus.PUT_OK


# -- batches -------------------------------------------------------------------------------------


def test_batch_records_are_consecutive_with_batch_properties_appended(open_store: OpenStore) -> None:
    store = open_store()
    store.put_message(simple(topic="batch-write-topic"))  # queue offset 0 taken
    items = [
        (b"body0", 1, "TAGS\x01TAG1"),  # no trailing separator: one is inserted
        (b"body1", 2, "TAGS\x01TAG1\x02"),  # already ends with a separator: none inserted
        (b"body2", 3, ""),  # no own properties: batch properties alone
    ]
    batch = MessageBatch(topic="batch-write-topic", queue_id=0, items=items,
                         properties={"extraKey": "extraValue"}, born_timestamp=1_700_000_000_000,
                         born_host=HostAddress("127.0.0.1", 126), store_host=HostAddress("127.0.0.1", 125))
    r = store.put_messages(batch)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert r.append.msg_num == 3
    assert r.append.logics_offset == 1
    expected_props = [
        b"TAGS\x01TAG1\x02extraKey\x01extraValue",
        b"TAGS\x01TAG1\x02extraKey\x01extraValue",
        b"extraKey\x01extraValue",
    ]
    topic_len = len(b"batch-write-topic")
    sizes = [record_size(len(b), topic_len, len(p)) for (b, _, _), p in zip(items, expected_props, strict=True)]
    # BatchPutMessageTest's rule: item properties + batch properties + 1 separator byte
    batch_prop_len = len(b"extraKey\x01extraValue")
    assert sizes[0] == record_size(5, topic_len, len(b"TAGS\x01TAG1") + batch_prop_len + 1)
    assert r.append.wrote_bytes == sum(sizes)

    phys = r.append.wrote_offset
    store_ts = None
    for i, ((body, flag, _), props, size) in enumerate(zip(items, expected_props, sizes, strict=True)):
        rec = read_log(store.config, phys, size)
        assert struct.unpack_from(">i", rec, 0)[0] == size
        assert struct.unpack_from(">i", rec, 16)[0] == flag
        assert struct.unpack_from(">q", rec, 20)[0] == 1 + i  # consecutive queue offsets
        assert struct.unpack_from(">q", rec, 28)[0] == phys  # own physical offset
        assert props_of_record(rec) == props
        ts = struct.unpack_from(">q", rec, 64)[0]
        store_ts = ts if store_ts is None else store_ts
        assert ts == store_ts  # one store time for the whole batch
        looked = store.look_message_by_offset(phys)
        assert looked is not None and looked.body == body and looked.properties["extraKey"] == "extraValue"
        phys += size

    store.reput_service.wait_caught_up(5)
    for offset in range(4):
        pulled = store.get_message("batch_write_group", "batch-write-topic", 0, offset, 1)
        assert pulled.status is GetMessageStatus.FOUND
        assert pulled.message_queue_offsets == [offset]


def test_batch_without_batch_properties_keeps_item_properties(open_store: OpenStore) -> None:
    store = open_store()
    r = store.put_messages(MessageBatch(topic="B", queue_id=0, items=[(b"x", 0, "a\x01b")], properties={}))
    assert r.append is not None
    rec = read_log(store.config, 0, r.append.wrote_bytes)
    assert props_of_record(rec) == b"a\x01b"


def test_ipv6_batch_uses_20_byte_hosts(open_store: OpenStore) -> None:
    store = open_store()
    items = [(b"body%d" % i, 0, "TAGS\x01TAG1") for i in range(10)]
    batch = MessageBatch(topic="batch-write-topic", queue_id=0, items=items, properties={},
                         born_host=HostAddress("::1", 126),
                         store_host=HostAddress("1050::5:600:300c:326b", 125))
    r = store.put_messages(batch)
    assert r.append is not None
    size = record_size(5, len("batch-write-topic"), len("TAGS\x01TAG1"), True, True)
    assert r.append.wrote_bytes == 10 * size
    store.reput_service.wait_caught_up(5)
    for i in range(10):
        looked = store.look_message_by_offset(i * size)
        assert looked is not None
        assert looked.sys_flag & 0x30 == 0x30
        assert looked.body == b"body%d" % i
        assert looked.queue_offset == i
        assert store.get_message("g", "batch-write-topic", 0, i, 1024).status is GetMessageStatus.FOUND


def test_batch_at_end_of_file_rolls_whole_to_next_segment(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=SEG)
    first = store.put_message(simple(topic="B", body=b"f" * (600 - record_size(0, 1, 0))))
    assert first.append is not None and first.append.wrote_bytes == 600
    item_size = record_size(5, 1, 0)
    # 5 records do not fit the 424 bytes left, although the first of them alone would
    assert 5 * item_size + 8 > SEG - 600 >= item_size + 8
    r = store.put_messages(MessageBatch(topic="B", queue_id=0, items=[(b"item%d" % i, 0, "") for i in range(5)],
                                        properties={}))
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert r.append.wrote_offset == SEG
    assert r.append.logics_offset == 1
    assert read_log(store.config, 600, 8) == struct.pack(">iI", SEG - 600, BLANK_MAGIC)
    for i in range(5):
        rec = read_log(store.config, SEG + i * item_size, item_size)
        assert struct.unpack_from(">q", rec, 20)[0] == 1 + i
        assert struct.unpack_from(">q", rec, 28)[0] == SEG + i * item_size
    store.reput_service.wait_caught_up(5)
    pulled = store.get_message("g", "B", 0, 0, 32)
    assert pulled.message_queue_offsets == [0, 1, 2, 3, 4, 5]


def test_batch_refusals(open_store: OpenStore) -> None:
    store = open_store(max_message_size=1000)
    # wire size of the batch body (per item 20-byte header + body + 2 + properties) is what
    # RocketMQ compares with maxMessageSize, not the sum of the bodies
    bodies = [(b"q" * 490, 0, ""), (b"q" * 490, 0, "")]
    assert sum(len(b) for b, _, _ in bodies) <= 1000 < sum(22 + len(b) for b, _, _ in bodies)
    r = store.put_messages(MessageBatch(topic="B", queue_id=0, items=bodies, properties={}))
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
    ok = store.put_messages(MessageBatch(topic="B", queue_id=0, items=[(b"q" * 400, 0, "")] * 2, properties={}))
    assert ok.status is PutMessageStatus.PUT_OK
    # transactional batches are not allowed
    prepared = MessageBatch(topic="B", queue_id=0, items=[(b"t", 0, "")], properties={}, sys_flag=0x4)
    assert store.put_messages(prepared).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_messages(MessageBatch(topic="x" * 128, queue_id=0, items=[(b"t", 0, "")],
                                           properties={})).status is PutMessageStatus.MESSAGE_ILLEGAL
    big = MessageBatch(topic="B", queue_id=0, items=[(b"t", 0, "")], properties={"p": "v" * 32767})
    assert store.put_messages(big).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    store.reput_service.wait_caught_up(5)
    assert store.get_max_offset_in_queue("B", 0) == 2


# -- flushing ------------------------------------------------------------------------------------


def test_sync_flush_put_returns_only_once_flushed(open_store: OpenStore) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commit_log=SEG)
    queue = store.commit_log.mapped_file_queue
    for i in range(12):  # ~300-byte records: several segment rolls on the way
        r = store.put_message(simple(body=bytes([65 + i]) * 200))
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        assert queue.flushed_where >= r.append.wrote_offset + r.append.wrote_bytes


def test_async_flush_put_returns_before_flush(open_store: OpenStore) -> None:
    # flush interval of a minute: only shutdown flushes in this test
    store = open_store(flush_interval_commit_log=60_000, flush_commit_log_thorough_interval=600_000)
    queue = store.commit_log.mapped_file_queue
    for _ in range(5):
        r = store.put_message(simple(body=b"a" * 100))
        assert r.status is PutMessageStatus.PUT_OK
    assert queue.flushed_where == 0 < store.max_phy_offset
    end = store.max_phy_offset
    store.shutdown()
    assert queue.flushed_where == end  # shutdown flushes everything


def test_group_commit_shares_fsyncs_between_16_writers(open_store: OpenStore) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    service = store.commit_log.flush_service
    assert isinstance(service, GroupCommitService)
    threads_n, per_thread = 16, 25
    results: list[list[tuple[PutMessageStatus, int]]] = [[] for _ in range(threads_n)]
    barrier = threading.Barrier(threads_n)

    def writer(t: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            r = store.put_message(simple(topic="G", body=b"%d-%d" % (t, i), queue_id=t % 4))
            assert r.append is not None
            flushed = store.commit_log.mapped_file_queue.flushed_where
            results[t].append((r.status, flushed - (r.append.wrote_offset + r.append.wrote_bytes)))

    before = service.flush_count
    threads = [threading.Thread(target=writer, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    total = threads_n * per_thread
    flat = [x for per in results for x in per]
    assert len(flat) == total
    assert all(status is PutMessageStatus.PUT_OK for status, _ in flat)
    assert all(margin >= 0 for _, margin in flat)  # each put was durable when it returned
    fsyncs = service.flush_count - before
    assert 0 < fsyncs < total
    store.reput_service.wait_caught_up(5)
    assert sum(store.get_max_offset_in_queue("G", q) for q in range(4)) == total


def test_flush_requests_report_durability_to_callbacks_and_share_fsyncs(open_store: OpenStore) -> None:
    """What the broker's SYNC_FLUSH sends wait on: puts that do not block, then one callback
    each from the flush thread once durable, many puts per fsync."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    service = store.commit_log.flush_service
    assert isinstance(service, GroupCommitService)
    queue = store.commit_log.mapped_file_queue
    ends = []
    for i in range(64):
        r = store.put_message(simple(topic="F", body=b"f%d" % i), wait_flush=False)
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        ends.append(r.append.wrote_offset + r.append.wrote_bytes)
    assert queue.flushed_where < ends[-1], "nothing asked for a flush yet"
    before = service.flush_count
    called: list[tuple[int, str, int]] = []
    all_done = threading.Event()

    def callback(end: int) -> None:
        called.append((end, threading.current_thread().name, queue.flushed_where))
        if len(called) == len(ends):
            all_done.set()

    for end in ends:
        assert store.request_flush(end, functools.partial(callback, end))
    assert all_done.wait(10), f"{len(called)} of {len(ends)} callbacks"
    assert sorted(end for end, _, _ in called) == ends
    assert all(name == "GroupCommitService" and flushed >= end for end, name, flushed in called)
    assert service.flush_count - before < len(ends)  # grouped
    assert not store.request_flush(ends[-1], lambda: None), "already durable: nothing to wait for"


def test_flush_requests_are_refused_with_async_flush(open_store: OpenStore) -> None:
    store = open_store()
    r = store.put_message(simple(body=b"a"), wait_flush=False)
    assert r.append is not None
    assert not store.request_flush(r.append.wrote_offset + r.append.wrote_bytes, lambda: None)


def test_flush_disk_timeout_when_the_flusher_never_runs(tmp_path: Path) -> None:
    # FAKE, documented: a real fdatasync finishes long before any timeout we could set, so a
    # flush timeout cannot be produced with a healthy disk. We build the real CommitLog with
    # SYNC_FLUSH but never call start(), so its GroupCommitService thread never runs: this is
    # what a stuck disk looks like to a waiting put.
    settings = CommitLogSettings(
        store_path=str(tmp_path / "commitlog"), file_size=SEG * 16, sync_flush=True,
        max_message_size=lambda: 4 * 1024 * 1024, sync_flush_timeout_ms=lambda: 50,
        flush_interval_ms=lambda: 500, flush_least_pages=lambda: 4, flush_thorough_interval_ms=lambda: 10_000,
    )
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    log = CommitLog(settings, checkpoint)
    log.load()
    try:
        r = log.put_message(simple(body=b"stuck"))
        assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
        assert r.ok  # stored, only not yet durable
        assert r.append is not None
        assert log.mapped_file_queue.flushed_where < r.append.wrote_offset + r.append.wrote_bytes
        looked = log.look_message_by_offset(r.append.wrote_offset)
        assert looked is not None and looked.body == b"stuck"
        # a producer that does not wait for the store (WAIT=false) gets PUT_OK at once
        r2 = log.put_message(simple(body=b"nowait", WAIT="false"))
        assert r2.status is PutMessageStatus.PUT_OK and r2.append is not None
        end = r2.append.wrote_offset + r2.append.wrote_bytes
        assert log.mapped_file_queue.flushed_where < end
    finally:
        log.shutdown()
        checkpoint.shutdown()
    assert log.mapped_file_queue.flushed_where == end  # shutdown still flushes everything
    assert checkpoint.physic_msg_timestamp == r2.append.store_timestamp


# -- refusals --------------------------------------------------------------------------------------


def test_topic_longer_than_127_bytes_is_illegal(open_store: OpenStore) -> None:
    store = open_store()
    assert store.put_message(simple(topic="t" * 127)).status is PutMessageStatus.PUT_OK
    end = store.max_phy_offset
    assert store.put_message(simple(topic="t" * 128)).status is PutMessageStatus.MESSAGE_ILLEGAL
    # 64 two-byte characters: 64 chars but 128 bytes, more than the i8 length can hold
    assert store.put_message(simple(topic="\u00e9" * 64)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == end  # nothing written for a refused put


def test_properties_over_32767_bytes_are_refused(open_store: OpenStore) -> None:
    store = open_store()
    # "p\x01" + value: exactly 32767 bytes is the largest accepted
    assert store.put_message(simple(p="v" * 32765)).status is PutMessageStatus.PUT_OK
    end = store.max_phy_offset
    # multi-byte value: 16384 + 2 characters but 32770 bytes. RocketMQ 4.9.8 checks the
    # character count first (MESSAGE_ILLEGAL) and the byte count in the encoder
    # (PROPERTIES_SIZE_EXCEEDED); only the byte count is over here, so both agree.
    r = store.put_message(simple(p="\u00e9" * 16384))
    assert r.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    assert not r.ok
    r = store.put_message(simple(p="v" * 32766))
    assert not r.ok
    assert store.max_phy_offset == end


# -- replicated appends ------------------------------------------------------------------------


def test_replicated_append_preallocates_a_fresh_segment_and_keeps_its_bytes(open_store: OpenStore) -> None:
    """A slave's first append to a segment reserves all its blocks (the rest of the segment is
    written by later appends); the bytes read back are the replicated ones, then zeros."""
    store = open_store(mapped_file_size_commit_log=SEG * 64)
    data = bytes(range(256)) * 8
    assert store.commit_log.append_data(0, [data[:1000], memoryview(data)[1000:]])
    segment = store.commit_log.mapped_file_queue.last
    assert segment is not None
    assert os.stat(segment.path).st_blocks * 512 >= SEG * 64
    assert store.commit_log.get_message(0, len(data)) == data
    with open(segment.path, "rb") as f:
        assert f.read() == data + bytes(SEG * 64 - len(data))


def test_replicated_append_goes_on_when_the_segment_cannot_be_preallocated(
        open_store: OpenStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(mapped_file_size_commit_log=SEG * 64)

    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", refuse)
    assert store.commit_log.append_data(0, [b"abc"])
    assert store.commit_log.append_data(3, [b"def"])
    assert store.commit_log.get_message(0, 6) == b"abcdef"
    segment = store.commit_log.mapped_file_queue.last
    assert segment is not None
    assert os.stat(segment.path).st_blocks * 512 < SEG * 64  # left sparse
