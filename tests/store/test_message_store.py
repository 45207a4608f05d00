"""DefaultMessageStore: RocketMQ 4.9.8's DefaultMessageStoreTest, ported to real files in tmp_path.

Recovery (clean restart, corrupted last record with and without ``abort``), repeated restarts,
pull sizes and statuses, offsets by time, look-up by offset, message size limits, tag filters,
key queries, store times, and the consume queue min offset after CommitLog segments go.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from pathlib import Path

import pytest
from store_support import SEGMENT, OpenStore

from rocketstore.common.message import HostAddress, Message, StoredMessage, decode_record
from rocketstore.store.message_store import DefaultMessageStore, TagFilter
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

STORE_MESSAGE = b"Once, there was a chance for me!"
SEG = SEGMENT  # store_support's small CommitLog segments: a hundred messages span several of them

_counter = iter(range(10**9))


def build(topic: str = "FooBar", body: bytes = STORE_MESSAGE, queue_id: int = 0, tags: str = "TAG1",
          **extra: str) -> Message:
    """Like RocketMQ's buildMessage: TAGS, a unique KEYS value, born time, hosts."""
    props = {"TAGS": tags, "KEYS": f"key-{next(_counter):08d}"}
    props.update(extra)
    return Message(topic=topic, body=body, queue_id=queue_id, properties=props,
                   born_timestamp=int(time.time() * 1000), born_host=HostAddress("127.0.0.1", 0),
                   store_host=HostAddress("127.0.0.1", 8123))


def put_ok(store: DefaultMessageStore, msg: Message) -> tuple[int, int, int, int]:
    """Put and return (wrote_offset, wrote_bytes, queue_offset, store_timestamp)."""
    r = store.put_message(msg)
    assert r.status is PutMessageStatus.PUT_OK, r.status
    assert r.append is not None
    return r.append.wrote_offset, r.append.wrote_bytes, r.append.logics_offset, r.append.store_timestamp


def caught_up(store: DefaultMessageStore) -> None:
    assert store.reput_service.wait_caught_up(10)


def pull_bodies(store: DefaultMessageStore, topic: str, queue_id: int, offset: int = 0) -> list[bytes]:
    """Every body from ``offset`` to the end of the queue, decoded from the raw pulled records."""
    bodies: list[bytes] = []
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        if res.status is not GetMessageStatus.FOUND:
            return bodies
        for raw in res.messages:
            decoded = decode_record(raw)
            assert isinstance(decoded, StoredMessage)
            bodies.append(decoded.body)
        offset = res.next_begin_offset


def segment_path(root: Path, offset: int, seg: int = SEG) -> Path:
    return root / "commitlog" / f"{offset - offset % seg:020d}"


# -- recovery ----------------------------------------------------------------------------------


def test_clean_restart_keeps_offsets_per_queue(open_store: OpenStore, root: Path) -> None:
    store = open_store()
    for i in range(100):
        put_ok(store, build(topic="recoverTopic", queue_id=i % 3))
    caught_up(store)
    max_phy = store.max_phy_offset
    max_cq = [store.get_max_offset_in_queue("recoverTopic", q) for q in range(3)]
    assert max_cq == [34, 33, 33]
    assert max_phy > 3 * SEG  # several segments
    store.shutdown()
    assert not (root / "abort").exists()

    again = open_store()
    assert again.last_exit_ok
    assert again.max_phy_offset == max_phy
    assert [again.get_max_offset_in_queue("recoverTopic", q) for q in range(3)] == max_cq
    # new puts continue each queue where it stopped, and the CommitLog where it ended
    wrote, _, queue_offset, _ = put_ok(again, build(topic="recoverTopic", queue_id=1))
    assert queue_offset == 33
    assert wrote == max_phy or wrote % SEG == 0  # at the end, or at the next segment after a roll
    caught_up(again)
    assert len(pull_bodies(again, "recoverTopic", 1)) == 34


def _corrupt(root: Path, offset: int, where: str) -> None:
    """Overwrite 16 bytes of the record at ``offset`` with zeros, on the closed segment file."""
    path = segment_path(root, offset)
    pos = offset % SEG
    with open(path, "r+b") as f:
        f.seek(pos + 84)  # bodyLength of a record with IPv4 hosts
        (body_len,) = struct.unpack(">i", f.read(4))
        # "body": the first 16 body bytes (CRC no longer matches); "after-body": RocketMQ's own
        # test zeroes topic length, topic and properties length (sizes no longer add up)
        f.seek(pos + 88 if where == "body" else pos + 88 + body_len)
        f.write(b"\x00" * 16)


@pytest.mark.parametrize("where", ["body", "after-body"])
@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
def test_recover_drops_corrupted_last_record(open_store: OpenStore, root: Path, abort: bool, where: str) -> None:
    topic = "recoverTopic"
    store = open_store()
    bodies = []
    keys = []
    for i in range(100):
        msg = build(topic=topic, body=STORE_MESSAGE + b" %d" % i)
        put_ok(store, msg)
        bodies.append(msg.body)
        keys.append(msg.properties["KEYS"])
    caught_up(store)
    second_last_phy = store.max_phy_offset
    second_last_cq = store.get_max_offset_in_queue(topic, 0)
    assert second_last_cq == 100
    last = build(topic=topic, body=STORE_MESSAGE + b" last!")
    wrote, size, _, _ = put_ok(store, last)
    caught_up(store)
    assert store.get_max_offset_in_queue(topic, 0) == 101
    store.shutdown()

    if wrote != second_last_phy:  # the last record rolled: a blank ends the previous segment
        assert wrote % SEG == 0
    _corrupt(root, wrote, where)
    if abort:
        (root / "abort").touch()

    again = open_store()
    assert again.last_exit_ok is (not abort)
    assert again.max_phy_offset == wrote  # == second_last_phy unless the last record rolled
    assert again.get_max_offset_in_queue(topic, 0) == second_last_cq
    # everything before the damaged record is intact, the damaged one is gone
    assert pull_bodies(again, topic, 0) == bodies
    assert again.look_message_by_offset(wrote) is None
    assert again.get_message("g", topic, 0, 100, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert again.query_message(topic, last.properties["KEYS"], 32, 0, 2**62).messages == []
    assert [m.body for m in again.query_message(topic, keys[99], 32, 0, 2**62).messages] == [bodies[99]]
    # the consume queue file itself is truncated: entry 100 is no longer there
    cq = again.get_consume_queue(topic, 0)
    assert cq is not None and cq.entry(100) is None

    # writing again continues at queue offset 100, in the space the damaged record had
    replacement = build(topic=topic, body=STORE_MESSAGE + b" again")
    wrote2, size2, queue_offset, _ = put_ok(again, replacement)
    assert queue_offset == 100
    assert (wrote2, size2) == (wrote, size)
    for _ in range(99):
        put_ok(again, build(topic=topic))
    caught_up(again)
    assert again.get_max_offset_in_queue(topic, 0) == 200
    assert pull_bodies(again, topic, 0, 99)[:2] == [bodies[99], replacement.body]


def test_repeated_restarts_keep_offsets_stable(open_store: OpenStore, root: Path) -> None:
    expected_max: dict[int, int] = {0: 0, 1: 0}
    expected_phy = 0
    all_bodies: dict[int, list[bytes]] = {0: [], 1: []}
    for cycle in range(4):
        store = open_store()
        assert store.last_exit_ok
        assert store.max_phy_offset == expected_phy
        for q in (0, 1):
            assert store.get_max_offset_in_queue("cycle", q) == expected_max[q]
        for i in range(15):
            q = i % 2
            body = b"cycle %d msg %d" % (cycle, i)
            _, _, queue_offset, _ = put_ok(store, build(topic="cycle", body=body, queue_id=q))
            assert queue_offset == expected_max[q]
            expected_max[q] += 1
            all_bodies[q].append(body)
        caught_up(store)
        expected_phy = store.max_phy_offset
        store.shutdown()
        assert not (root / "abort").exists()
    final = open_store()
    for q in (0, 1):
        assert pull_bodies(final, "cycle", q) == all_bodies[q]


# -- pulls ---------------------------------------------------------------------------------------


def test_pull_sizes_32_20_10(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(32):
        put_ok(store, build(topic="pullSizeTopic"))
    caught_up(store)
    for wanted in (32, 20, 10):
        res = store.get_message("simple", "pullSizeTopic", 0, 0, wanted)
        assert res.status is GetMessageStatus.FOUND
        assert res.message_count == wanted
        assert res.next_begin_offset == wanted
        assert res.message_queue_offsets == list(range(wanted))


def test_pull_in_memory_transfer_limits(open_store: OpenStore) -> None:
    store = open_store()
    sizes = [put_ok(store, build(topic="limits"))[1] for _ in range(40)]
    size = sizes[0]
    assert set(sizes) == {size}
    caught_up(store)
    # maxTransferCountOnMessageInMemory (32) caps a pull asking for more
    res = store.get_message("g", "limits", 0, 0, 64)
    assert (res.message_count, res.next_begin_offset) == (32, 32)
    assert res.buffer_total_size == 32 * size
    store.config.update({"maxTransferCountOnMessageInMemory": "8"})
    assert store.get_message("g", "limits", 0, 0, 64).message_count == 8
    store.config.update({"maxTransferCountOnMessageInMemory": "32"})
    # maxTransferBytesOnMessageInMemory: stop before the bytes would exceed it
    store.config.update({"maxTransferBytesOnMessageInMemory": str(3 * size)})
    assert store.get_message("g", "limits", 0, 0, 64).message_count == 3
    store.config.update({"maxTransferBytesOnMessageInMemory": str(4 * size - 1)})
    assert store.get_message("g", "limits", 0, 0, 64).message_count == 3
    store.config.update({"maxTransferBytesOnMessageInMemory": str(4 * size)})
    assert store.get_message("g", "limits", 0, 0, 64).message_count == 4
    # the first message is always returned, even when alone it exceeds the byte limit
    store.config.update({"maxTransferBytesOnMessageInMemory": "1"})
    res = store.get_message("g", "limits", 0, 5, 64)
    assert (res.status, res.message_count, res.next_begin_offset) == (GetMessageStatus.FOUND, 1, 6)


def test_pull_in_disk_transfer_limits(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(20):
        put_ok(store, build(topic="disk"))
    caught_up(store)
    assert store.get_message("g", "disk", 0, 0, 32).suggest_pulling_from_slave is False
    # with no memory allowed for hot data every older record counts as "in disk": the
    # in-disk limits (8 messages, 64 KiB) apply and the broker is told to suggest the slave
    store.config.update({"accessMessageInMemoryMaxRatio": "0"})
    res = store.get_message("g", "disk", 0, 0, 32)
    assert res.message_count == 8
    assert res.next_begin_offset == 8
    assert res.suggest_pulling_from_slave is True


def test_get_message_statuses_and_next_begin_offset(open_store: OpenStore) -> None:
    store = open_store()
    for _ in range(10):
        put_ok(store, build(topic="st"))
    caught_up(store)

    res = store.get_message("g", "st", 0, 3, 4)
    assert (res.status, res.next_begin_offset, res.min_offset, res.max_offset) == (GetMessageStatus.FOUND, 7, 0, 10)
    res = store.get_message("g", "st", 0, 10, 4)
    assert (res.status, res.next_begin_offset, res.message_count) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 10, 0)
    res = store.get_message("g", "st", 0, 15, 4)
    # 4.9.8 sends the consumer back to maxOffset (not to 0, which older versions did)
    assert (res.status, res.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 10)
    res = store.get_message("g", "nosuchtopic", 0, 5, 4)
    assert (res.status, res.next_begin_offset, res.min_offset, res.max_offset) == (
        GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    # a queue that exists but has no entry (getMessage's findConsumeQueue creates it lazily)
    store.find_consume_queue("st", 7)
    res = store.get_message("g", "st", 7, 5, 4)
    assert (res.status, res.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)


def test_offset_too_small_after_commit_log_segments_are_deleted(open_store: OpenStore, root: Path) -> None:
    store = open_store(delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0)
    puts = [put_ok(store, build(topic="old", body=b"m%03d" % i)) for i in range(200)]
    caught_up(store)
    first_ts = puts[0][3]
    assert store.get_earliest_message_time("old", 0) == first_ts
    assert store.commit_log.allocator.wait_idle(10)  # the next segment is made ahead, in the background
    segments_before = sorted(os.listdir(root / "commitlog"))
    assert len(segments_before) >= 6

    store.config.update({"fileReservedTime": "0"})
    store.execute_delete_files_manually()
    deleted = store.clean_commit_log_service.run()
    store.clean_consume_queue_service.run()
    segments_after = sorted(os.listdir(root / "commitlog"))
    assert deleted >= 1
    assert len(segments_after) == len(segments_before) - deleted
    min_phy = int(segments_after[0])
    assert store.min_phy_offset == min_phy > 0
    # the consume queue min offset moved to the first entry whose record still exists
    expected_min = next(i for i, (wrote, *_rest) in enumerate(puts) if wrote >= min_phy)
    assert expected_min > 0
    assert store.get_min_offset_in_queue("old", 0) == expected_min
    assert store.get_max_offset_in_queue("old", 0) == 200
    # whole consume queue files below the new min are gone (100 entries per file here)
    cq_files = sorted(os.listdir(root / "consumequeue" / "old" / "0"))
    assert cq_files[0] == f"{(expected_min // 100) * 2000:020d}"

    res = store.get_message("g", "old", 0, 0, 32)
    assert (res.status, res.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, expected_min)
    res = store.get_message("g", "old", 0, expected_min, 32)
    assert res.status is GetMessageStatus.FOUND
    assert decode_record(res.messages[0]).body == b"m%03d" % expected_min  # type: ignore[union-attr]
    assert store.get_earliest_message_time("old", 0) == puts[expected_min][3]

    store.shutdown()
    again = open_store()
    assert again.get_min_offset_in_queue("old", 0) == expected_min
    assert again.get_max_offset_in_queue("old", 0) == 200


# -- offsets by time, store times ----------------------------------------------------------------


def _put_spaced(store: DefaultMessageStore, n: int, topic: str = "FooBar") -> list[tuple[int, int, int, int]]:
    """Half IPv4, half IPv6 hosts (as RocketMQ's test), 10 ms apart so store times differ."""
    out = []
    v6 = HostAddress("1050::5:600:300c:326b", 0)
    for i in range(n):
        msg = build(topic=topic, body=b"%s offset %d" % (STORE_MESSAGE, i))
        if i >= n // 2:
            msg.born_host, msg.store_host = v6, HostAddress("::1", 0)
        out.append(put_ok(store, msg))
        time.sleep(0.010)
    return out


def test_offset_in_queue_by_time(open_store: OpenStore) -> None:
    store = open_store()
    puts = _put_spaced(store, 10)
    caught_up(store)
    cq = store.get_consume_queue("FooBar", 0)
    assert cq is not None
    stamps = [p[3] for p in puts]
    assert stamps == sorted(stamps) and len(set(stamps)) == 10
    for wrote, size, _, ts in puts:
        for skew in (0, 2, -2):  # exact, and a little off: the nearest record wins
            offset = store.get_offset_in_queue_by_time("FooBar", 0, ts + skew)
            entry = cq.entry(offset)
            assert entry is not None
            assert (entry.commit_log_offset, entry.size) == (wrote, size)
        # far off: clamp to the first or the last message
        late = cq.entry(store.get_offset_in_queue_by_time("FooBar", 0, ts + 20_000))
        early = cq.entry(store.get_offset_in_queue_by_time("FooBar", 0, ts - 20_000))
        assert late is not None and late.commit_log_offset == puts[-1][0]
        assert early is not None and early.commit_log_offset == puts[0][0]
    assert store.get_offset_in_queue_by_time("FooBar", 1, stamps[0]) == 0  # no such queue


def test_offset_in_queue_by_time_between_batches(open_store: OpenStore) -> None:
    store = open_store()
    batches = []
    for b in range(3):
        batches.append([put_ok(store, build(topic="byTime", body=b"b%d-%d" % (b, i))) for i in range(5)])
        time.sleep(0.030)
    caught_up(store)
    for batch in batches:
        for _, _, _, ts in batch:
            offset = store.get_offset_in_queue_by_time("byTime", 0, ts)
            assert store.get_message_store_timestamp("byTime", 0, offset) == ts
    # just after a batch's last store time: nearer to that batch than to the next one
    last_of_first = batches[0][-1][3]
    first_of_second = batches[1][0][3]
    assert first_of_second - last_of_first >= 30
    offset = store.get_offset_in_queue_by_time("byTime", 0, last_of_first + 5)
    assert store.get_message_store_timestamp("byTime", 0, offset) == last_of_first
    offset = store.get_offset_in_queue_by_time("byTime", 0, first_of_second - 5)
    assert store.get_message_store_timestamp("byTime", 0, offset) == first_of_second


def test_message_store_timestamp_and_earliest_time(open_store: OpenStore) -> None:
    store = open_store()
    puts = _put_spaced(store, 10)
    caught_up(store)
    for i, (*_, ts) in enumerate(puts):
        assert store.get_message_store_timestamp("FooBar", 0, i) == ts
    assert store.get_earliest_message_time("FooBar", 0) == puts[0][3]
    assert store.get_message_store_timestamp("FooBar", 1, 0) == -1  # no such queue
    assert store.get_message_store_timestamp("FooBar", 0, 10) == -1  # past the end
    assert store.get_message_store_timestamp("FooBar", 0, -1) == -1
    assert store.get_earliest_message_time("nosuch", 0) == -1


# -- look up by offset -------------------------------------------------------------------------


def test_look_message_by_offset_returns_every_field(open_store: OpenStore) -> None:
    store = open_store()
    msgs = [
        Message(topic="FooBar", body=b"look body %d" % i, queue_id=4, flag=11 + i,
                properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": f"UNIQ{i}", "custom": "value"},
                sys_flag=0x2 if i == 0 else 0, born_timestamp=1_700_000_000_000 + i,
                born_host=HostAddress("10.1.2.3", 5555) if i < 2 else HostAddress("1050::5:600:300c:326b", 7),
                store_host=HostAddress("10.9.9.9", 10911) if i < 2 else HostAddress("::1", 10911),
                reconsume_times=3 + i)
        for i in range(4)
    ]
    results = [store.put_message(m) for m in msgs]
    caught_up(store)
    for i, (m, r) in enumerate(zip(msgs, results, strict=True)):
        assert r.append is not None
        for got in (store.look_message_by_offset(r.append.wrote_offset),
                    store.look_message_by_offset(r.append.wrote_offset, r.append.wrote_bytes)):
            assert got is not None
            assert got.body == m.body
            assert got.topic == m.topic
            assert got.queue_id == 4
            assert got.flag == m.flag
            assert got.properties == m.properties
            assert got.born_host == m.born_host
            assert got.store_host == m.store_host
            assert got.born_timestamp == m.born_timestamp
            assert got.reconsume_times == m.reconsume_times
            v6_bits = 0x30 if i >= 2 else 0
            assert got.sys_flag == m.sys_flag | v6_bits
            assert got.queue_offset == i
            assert got.physical_offset == r.append.wrote_offset
            assert got.total_size == r.append.wrote_bytes
            assert got.store_timestamp == r.append.store_timestamp
            assert got.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
            assert got.msg_id == r.append.msg_id
    last = results[-1].append
    assert last is not None
    assert store.look_message_by_offset(last.wrote_offset + last.wrote_bytes) is None  # past the end


# -- size limits -------------------------------------------------------------------------------


def test_long_message_limits(open_store: OpenStore) -> None:
    store = open_store(max_message_size=8192, mapped_file_size_commit_log=64 * 1024)
    # body exactly maxMessageSize, a 127-byte topic and 32767 bytes of properties: accepted
    msg = Message(topic="t" * 127, body=b"\x01" * 8192, properties={"p": "v" * 32765})
    r = store.put_message(msg)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert r.append.wrote_bytes == 91 + 8192 + 127 + 32767
    caught_up(store)
    got = store.look_message_by_offset(r.append.wrote_offset)
    assert got is not None and got.body == msg.body and got.topic == msg.topic
    end = store.max_phy_offset
    # one byte more body: refused, nothing written
    assert store.put_message(Message(topic="T", body=b"\x01" * 8193)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.max_phy_offset == end


def test_dynamic_max_message_size(open_store: OpenStore) -> None:
    store = open_store(mapped_file_size_commit_log=8 * 1024 * 1024)  # room for a 4 MiB record
    origin = store.config.max_message_size
    assert origin == 4 * 1024 * 1024
    body = b"\x00" * (origin + 10)
    assert store.put_message(build(body=body)).status is PutMessageStatus.MESSAGE_ILLEGAL
    changed = store.config.update({"maxMessageSize": str(origin + 10)})
    assert changed == {"maxMessageSize": str(origin + 10)}
    r = store.put_message(build(body=body))
    assert r.status is PutMessageStatus.PUT_OK
    store.config.update({"maxMessageSize": "10"})
    assert store.put_message(build(body=body)).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(build(body=b"0123456789")).status is PutMessageStatus.PUT_OK
    assert store.put_message(build(body=b"0123456789A")).status is PutMessageStatus.MESSAGE_ILLEGAL


# -- filters and queries -------------------------------------------------------------------------


def test_tag_filter(open_store: OpenStore) -> None:
    store = open_store()
    tags = ["TagA", "TagB", "TagC", "TagA", "", "TagB", "TagC"]
    for i, tag in enumerate(tags):
        msg = build(topic="tags", body=b"t%d" % i, tags=tag)
        if not tag:
            del msg.properties["TAGS"]
        put_ok(store, msg)
    caught_up(store)

    res = store.get_message("g", "tags", 0, 0, 32, TagFilter("*"))
    assert res.message_count == len(tags)

    res = store.get_message("g", "tags", 0, 0, 32, TagFilter("TagA || TagB"))
    assert res.status is GetMessageStatus.FOUND
    assert res.message_queue_offsets == [0, 1, 3, 5]
    got_tags = []
    for raw in res.messages:
        decoded = decode_record(raw)
        assert isinstance(decoded, StoredMessage)
        got_tags.append(decoded.tags)
    assert got_tags == ["TagA", "TagB", "TagA", "TagB"]
    assert res.next_begin_offset == len(tags)  # filtered entries are consumed too

    res = store.get_message("g", "tags", 0, 0, 32, TagFilter("TagZ"))
    assert (res.status, res.message_count, res.next_begin_offset) == (
        GetMessageStatus.NO_MATCHED_MESSAGE, 0, len(tags))
    # limit counts matched messages only
    res = store.get_message("g", "tags", 0, 0, 2, TagFilter("TagC"))
    assert res.message_queue_offsets == [2, 6]


def test_query_message_by_keys_and_uniq_key(open_store: OpenStore) -> None:
    store = open_store()
    before = int(time.time() * 1000) - 1000
    offsets = []
    for i in range(6):
        msg = Message(topic="Q", body=b"q%d" % i,
                      properties={"KEYS": f"order-{i % 2} shared", "UNIQ_KEY": f"AC11000100002A9F{i:016X}"})
        offsets.append(put_ok(store, msg)[0])
    other_offset = put_ok(store, Message(topic="OTHER", body=b"other", properties={"KEYS": "shared"}))[0]
    caught_up(store)
    after = int(time.time() * 1000) + 1000

    res = store.query_message("Q", "order-1", 32, before, after)
    assert sorted(m.body for m in res.messages) == [b"q1", b"q3", b"q5"]
    res = store.query_message("Q", "shared", 32, before, after)
    assert len(res.messages) == 6 and all(m.topic == "Q" for m in res.messages)
    assert len(store.query_message("Q", "shared", 2, before, after).messages) == 2  # maxNum
    res = store.query_message("Q", "AC11000100002A9F0000000000000004", 32, before, after)
    assert [(m.body, m.physical_offset) for m in res.messages] == [(b"q4", offsets[4])]
    assert res.index_last_update_phyoffset == other_offset  # the newest record indexed
    # outside the time range, or unknown key: nothing
    assert store.query_message("Q", "order-1", 32, after + 60_000, after + 120_000).messages == []
    assert store.query_message("Q", "order-1", 32, 0, before - 60_000).messages == []
    assert store.query_message("Q", "order-9", 32, before, after).messages == []


def test_delete_topic_while_dispatch_runs(open_store: OpenStore, root: Path) -> None:
    """delete_topic (cleanUnusedTopic for one topic) with a writer putting to another topic the
    whole time: the deleted topic's queues and files go, its next put starts at queue offset 0,
    the other topic loses nothing, and a restart brings nothing of the deleted topic back."""
    store = open_store()
    for i in range(60):
        put_ok(store, build(topic="Doomed", queue_id=i % 2))
    stop = threading.Event()
    others: list[int] = []

    def writer() -> None:
        while not stop.is_set():
            others.append(put_ok(store, build(topic="Busy"))[2])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert store.delete_topic("Doomed") == [0, 1]
    finally:
        stop.set()
        thread.join()
    caught_up(store)
    assert store.get_consume_queue("Doomed", 0) is None
    assert not (root / "consumequeue" / "Doomed").exists()
    assert store.get_max_offset_in_queue("Doomed", 0) == 0
    assert put_ok(store, build(topic="Doomed", queue_id=1))[2] == 0  # queue offsets start again
    caught_up(store)
    got = store.get_message("G", "Doomed", 1, 0, 32)
    assert got.status is GetMessageStatus.FOUND and got.message_count == 1
    assert others == list(range(len(others))) and others
    assert store.get_max_offset_in_queue("Busy", 0) == len(others)
    busy = store.get_message("G", "Busy", 0, 0, len(others))
    assert busy.status is GetMessageStatus.FOUND
    assert store.delete_topic("NeverThere") == []
    store.shutdown()

    again = open_store()
    assert again.get_max_offset_in_queue("Doomed", 0) == 0
    assert again.get_max_offset_in_queue("Doomed", 1) == 1
    assert again.get_max_offset_in_queue("Busy", 0) == len(others)
