"""Bad input to a real DefaultMessageStore: refused puts, and damaged files found at load.

Every test runs a real store in tmp_path with tiny segments. Damage is done to the files
between a clean shutdown and the next load, the way a torn write, a bad disk or a careless
operator would leave them. "Crash" cases create the ``abort`` file by hand after a clean
shutdown: that is exactly what a killed process leaves behind (abort is created at start and
only removed by a clean shutdown), without needing a subprocess and kill -9 in a unit test.

What RocketMQ 4.9.8 does, and these tests pin for us:
- a CommitLog (or ConsumeQueue) file whose length is not the configured segment size stops
  the load (MappedFileQueue.load returns false there); we raise MappedFileError naming the file;
- CommitLog recovery keeps every record up to the first one that does not decode (CRC checked),
  truncates the log there and drops ConsumeQueue entries that point at or past that offset;
- ConsumeQueue recovery trusts entries up to the first one without ``offset >= 0 && size > 0``
  and cuts the queue there; dispatch then resumes at the furthest offset any queue covers
  (start(): maxPhysicalPosInLogicQueue), so a damaged queue is rebuilt from the CommitLog when it
  is the furthest one, and stays cut (consistently, new messages continue after the cut) when
  another queue is ahead; after an abnormal exit, recovery re-dispatches every record from the
  segment it starts at, which rebuilds the damaged queue as well.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from store_support import SEGMENT, running, small_config

from rocketstore.common.message import (
    MAX_PROPERTIES_LENGTH,
    HostAddress,
    Message,
    StoredMessage,
    SysFlag,
    decode_record,
    encode_message,
    properties_to_string,
)
from rocketstore.store.commit_log import MessageBatch
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.store.mapped_file import MappedFileError
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

TOPIC = "BadInputTopic"
CQ_ENTRIES_PER_FILE = 16


def message(i: int, queue_id: int = 0, topic: str = TOPIC) -> Message:
    return Message(topic=topic, body=f"message-{i:04d}-".encode() * 6, queue_id=queue_id,
                   properties={"TAGS": f"tag{i % 3}", "KEYS": f"key-{i}"})


def put_ok(store: DefaultMessageStore, msg: Message) -> tuple[int, int]:
    """Put and return (physical offset, queue offset)."""
    result = store.put_message(msg)
    assert result.status is PutMessageStatus.PUT_OK, result
    assert result.append is not None
    return result.append.wrote_offset, result.append.logics_offset


def read_queue(store: DefaultMessageStore, queue_id: int = 0, topic: str = TOPIC) -> list[StoredMessage]:
    """Every message of a queue through get_message, as a consumer sees it, checked entry by entry."""
    assert store.reput_service.wait_caught_up(5)
    found: list[StoredMessage] = []
    offset = store.get_min_offset_in_queue(topic, queue_id)
    while True:
        result = store.get_message("group", topic, queue_id, offset, 32)
        if result.status is not GetMessageStatus.FOUND:
            assert result.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                                     GetMessageStatus.NO_MATCHED_LOGIC_QUEUE), result.status
            return found
        for raw, queue_offset in zip(result.messages, result.message_queue_offsets, strict=True):
            decoded = decode_record(raw)
            assert isinstance(decoded, StoredMessage), decoded
            assert decoded.queue_offset == queue_offset == len(found)
            assert (decoded.topic, decoded.queue_id) == (topic, queue_id)
            found.append(decoded)
        offset = result.next_begin_offset


def bodies(msgs: list[StoredMessage]) -> list[bytes]:
    return [m.body for m in msgs]


def fill(store: DefaultMessageStore, count: int, queues: int = 1) -> list[tuple[int, Message]]:
    """Put ``count`` messages round-robin over ``queues``; returns (physical offset, message)."""
    put = []
    for i in range(count):
        msg = message(i, queue_id=i % queues)
        put.append((put_ok(store, msg)[0], msg))
    return put


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def segment_path(cfg: StoreConfig, offset: int, size: int = SEGMENT) -> Path:
    return Path(cfg.commit_log_dir()) / f"{offset - offset % size:020d}"


def patch_file(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def leave_abort(cfg: StoreConfig) -> None:
    """What a killed store leaves behind: the abort marker (see the module docstring)."""
    Path(cfg.abort_path()).touch()


# -- refused puts ------------------------------------------------------------------------------
REFUSED_PUTS = [
    pytest.param(lambda: Message(topic=TOPIC, body=b"x" * 1025), PutMessageStatus.MESSAGE_ILLEGAL,
                 id="body-over-max-message-size"),
    pytest.param(lambda: Message(topic=TOPIC, body=b"x", properties={"K": "v" * (MAX_PROPERTIES_LENGTH - 1)}),
                 PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, id="properties-32768-ascii-bytes"),
    # 10924 characters but 32768 UTF-8 bytes: the limit is on the encoded bytes
    pytest.param(lambda: Message(topic=TOPIC, body=b"x", properties={"K": "中" * 10922}),
                 PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, id="properties-32768-utf8-bytes"),
    pytest.param(lambda: Message(topic="T" * 128, body=b"x"), PutMessageStatus.MESSAGE_ILLEGAL, id="topic-128-bytes"),
    # 43 characters, 129 bytes: the record's topic length is one byte of UTF-8 length
    pytest.param(lambda: Message(topic="中" * 43, body=b"x"), PutMessageStatus.MESSAGE_ILLEGAL,
                 id="topic-129-utf8-bytes"),
]


@pytest.mark.parametrize(("bad", "status"), REFUSED_PUTS)
def test_refused_put_appends_nothing_and_puts_keep_working(
    tmp_path: Path, bad: Callable[[], Message], status: PutMessageStatus
) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=64 * 1024, max_message_size=1024)
    with running(cfg) as store:
        fill(store, 3)
        assert store.reput_service.wait_caught_up(5)
        max_phy, max_queue = store.max_phy_offset, store.get_max_offset_in_queue(TOPIC, 0)
        result = store.put_message(bad())
        assert result.status is status
        assert result.append is None
        assert store.max_phy_offset == max_phy
        assert store.reput_service.wait_caught_up(5)
        assert store.get_max_offset_in_queue(TOPIC, 0) == max_queue == 3
        # the next put lands exactly where the refused one would have: nothing was written
        assert put_ok(store, message(3)) == (max_phy, 3)
        assert bodies(read_queue(store)) == [message(i).body for i in range(4)]
    with running(cfg) as store:  # and nothing of the refused message shows up after a restart
        assert bodies(read_queue(store)) == [message(i).body for i in range(4)]
        assert store.max_phy_offset == max_phy + len(encode_message(message(3)))


def test_values_at_the_limits_are_accepted(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=64 * 1024, max_message_size=1024)
    props = {"K": "v" * (MAX_PROPERTIES_LENGTH - 2)}
    assert len(properties_to_string(props).encode()) == MAX_PROPERTIES_LENGTH
    at_limit = [
        Message(topic=TOPIC, body=b"b" * 1024),
        Message(topic=TOPIC, body=b"p", properties=props),
        Message(topic="中" * 42 + "a", body=b"t"),  # 127 bytes
        Message(topic="T" * 127, body=b"t"),
    ]
    with running(cfg) as store:
        for msg in at_limit:
            put_ok(store, msg)
        got = read_queue(store)
        assert [(m.body, m.properties) for m in got] == [(m.body, m.properties) for m in at_limit[:2]]
        assert bodies(read_queue(store, topic="中" * 42 + "a")) == [b"t"]
        assert bodies(read_queue(store, topic="T" * 127)) == [b"t"]


def test_record_larger_than_a_segment_is_refused_without_touching_the_log(tmp_path: Path) -> None:
    """Body under maxMessageSize (4 MiB) but the record cannot fit even an empty segment."""
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        fill(store, 2)
        max_phy = store.max_phy_offset
        assert store.commit_log.allocator.wait_idle(10)  # the next segment is made ahead, in the background
        segments = sorted(os.listdir(cfg.commit_log_dir()))
        result = store.put_message(Message(topic=TOPIC, body=b"x" * SEGMENT))
        assert result.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert store.max_phy_offset == max_phy  # the segment was not closed with a blank for it
        assert sorted(os.listdir(cfg.commit_log_dir())) == segments
        assert put_ok(store, message(2)) == (max_phy, 2)
        assert bodies(read_queue(store)) == [message(i).body for i in range(3)]


def _batch(**overrides: object) -> MessageBatch:
    fields: dict[str, object] = {"topic": TOPIC, "queue_id": 0, "items": [(b"a", 0, "KEYS\x01k1"), (b"b", 0, "")],
                                 "properties": {"TAGS": "bt"}}
    fields.update(overrides)
    return MessageBatch(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("batch", "status"),
    [
        pytest.param(lambda: _batch(topic="T" * 128), PutMessageStatus.MESSAGE_ILLEGAL, id="topic-too-long"),
        pytest.param(lambda: _batch(properties={"K": "v" * MAX_PROPERTIES_LENGTH}),
                     PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, id="batch-properties-too-long"),
        # each fits alone; item + separator + batch properties does not
        pytest.param(lambda: _batch(items=[(b"a", 0, "K\x01" + "v" * 32000)], properties={"L": "w" * 1000}),
                     PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, id="item-plus-batch-properties-too-long"),
        pytest.param(lambda: _batch(items=[(b"x" * 600, 0, ""), (b"y" * 600, 0, "")]),
                     PutMessageStatus.MESSAGE_ILLEGAL, id="bodies-over-max-message-size"),
        pytest.param(lambda: _batch(sys_flag=SysFlag.TRANSACTION_PREPARED), PutMessageStatus.MESSAGE_ILLEGAL,
                     id="transactional"),
        pytest.param(lambda: _batch(items=[]), PutMessageStatus.MESSAGE_ILLEGAL, id="empty"),
    ],
)
def test_refused_batch_appends_nothing(
    tmp_path: Path, batch: Callable[[], MessageBatch], status: PutMessageStatus
) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=64 * 1024, max_message_size=1024)
    with running(cfg) as store:
        fill(store, 2)
        max_phy = store.max_phy_offset
        result = store.put_messages(batch())
        assert result.status is status
        assert store.max_phy_offset == max_phy
        ok = store.put_messages(_batch())
        assert ok.status is PutMessageStatus.PUT_OK
        assert ok.append is not None
        assert (ok.append.wrote_offset, ok.append.logics_offset, ok.append.msg_num) == (max_phy, 2, 2)
        got = read_queue(store)
        assert bodies(got) == [message(0).body, message(1).body, b"a", b"b"]
        assert got[2].properties == {"KEYS": "k1", "TAGS": "bt"}
        assert got[3].properties == {"TAGS": "bt"}


# -- wrong-sized segment files -------------------------------------------------------------------
@pytest.mark.parametrize("new_size", [SEGMENT - 96, SEGMENT + 512, 0], ids=["shorter", "longer", "empty"])
def test_commit_log_segment_of_the_wrong_size_stops_the_load(tmp_path: Path, new_size: int) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        put = fill(store, 50)
    damaged = segment_path(cfg, SEGMENT)  # the second of several segments
    assert damaged.exists()
    assert segment_path(cfg, put[-1][0]) != damaged
    original = damaged.read_bytes()
    os.truncate(damaged, new_size)
    before = snapshot(tmp_path)

    store = DefaultMessageStore(cfg)
    try:
        with pytest.raises(MappedFileError) as excinfo:
            store.load()
        text = str(excinfo.value)
        assert str(damaged) in text
        assert f"is {new_size} bytes" in text
        assert str(SEGMENT) in text
        assert snapshot(tmp_path) == before  # the load refused without repairing or deleting anything
        assert damaged.stat().st_size == new_size
    finally:
        store.commit_log.shutdown()  # release what the partial load opened
        store.checkpoint.shutdown()

    # put the file back and the store opens with every message
    damaged.write_bytes(original)
    with running(cfg) as store:
        assert bodies(read_queue(store)) == [m.body for _, m in put]


def test_consume_queue_file_of_the_wrong_size_stops_the_load(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        fill(store, 20)
    cq_file = Path(cfg.consume_queue_dir()) / TOPIC / "0" / f"{0:020d}"
    os.truncate(cq_file, 7 * CQ_STORE_UNIT_SIZE + 3)
    before = snapshot(tmp_path)
    store = DefaultMessageStore(cfg)
    try:
        with pytest.raises(MappedFileError, match=str(CQ_STORE_UNIT_SIZE * CQ_ENTRIES_PER_FILE)) as excinfo:
            store.load()
        assert str(cq_file) in str(excinfo.value)
        assert snapshot(tmp_path) == before
    finally:
        store.commit_log.shutdown()
        for queues in store.consume_queue_table.values():
            for cq in queues.values():
                cq.shutdown()
        store.checkpoint.shutdown()
    # the consume queue is derived data: removing it lets the store rebuild it from the CommitLog
    shutil.rmtree(cq_file.parent)
    with running(cfg) as store:
        assert bodies(read_queue(store)) == [message(i).body for i in range(20)]


# -- torn writes and damaged records in the CommitLog ------------------------------------------------
def _torn_record() -> bytes:
    """The first 60% of a real record: header, sizes and magic right, the rest never written."""
    record = encode_message(Message(topic=TOPIC, body=b"z" * 200, properties={"TAGS": "torn"}))
    return record[: len(record) * 6 // 10]


GARBAGE = {
    "random-bytes": lambda: random.Random(1234).randbytes(300),
    "torn-record": _torn_record,
    "header-only": lambda: encode_message(Message(topic=TOPIC, body=b"q" * 100))[:8],
}


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_after_the_last_record_is_cut_off_at_restart(tmp_path: Path, garbage: str, crash: bool) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        put = fill(store, 45, queues=2)
        end = store.max_phy_offset
    segment = segment_path(cfg, end)
    room = SEGMENT - end % SEGMENT
    junk = GARBAGE[garbage]()[:room]
    assert len(junk) >= 8
    patch_file(segment, end % SEGMENT, junk)
    if crash:
        leave_abort(cfg)

    with running(cfg) as store:
        assert store.max_phy_offset == end
        for q in (0, 1):
            assert bodies(read_queue(store, q)) == [m.body for _, m in put if m.queue_id == q]
        # new puts land right after the last valid record and continue each queue
        assert put_ok(store, message(45, queue_id=1)) == (end, 45 // 2)
        assert put_ok(store, message(46, queue_id=0)) == (end + len(encode_message(message(45, 1))), 23)
    with running(cfg) as store:  # and survive the next restart intact
        assert bodies(read_queue(store, 1))[-1] == message(45, 1).body
        assert bodies(read_queue(store, 0))[-1] == message(46, 0).body
        assert len(read_queue(store, 0)) + len(read_queue(store, 1)) == 47


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
def test_zeroed_record_header_in_the_last_segment_truncates_there(tmp_path: Path, crash: bool) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        put = fill(store, 60, queues=2)
    last_segment_start = put[-1][0] - put[-1][0] % SEGMENT
    in_last = [i for i, (offset, _) in enumerate(put) if offset >= last_segment_start]
    assert len(in_last) >= 5 and last_segment_start > 0
    victim = in_last[len(in_last) // 2]
    victim_offset = put[victim][0]
    patch_file(segment_path(cfg, victim_offset), victim_offset % SEGMENT, b"\x00" * 48)
    if crash:
        leave_abort(cfg)

    with running(cfg) as store:
        assert store.max_phy_offset == victim_offset
        kept = put[:victim]
        for q in (0, 1):
            expected = [m.body for _, m in kept if m.queue_id == q]
            assert bodies(read_queue(store, q)) == expected
            assert store.get_max_offset_in_queue(TOPIC, q) == len(expected)
        # records before the damage are intact by physical offset too
        first = store.look_message_by_offset(put[0][0])
        assert first is not None and first.body == put[0][1].body
        assert store.look_message_by_offset(put[victim - 1][0]) is not None
        next_queue_offset = len([1 for _, m in kept if m.queue_id == victim % 2])
        assert put_ok(store, message(victim, queue_id=victim % 2)) == (victim_offset, next_queue_offset)


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
def test_record_with_non_utf8_properties_is_kept_at_recovery(tmp_path: Path, crash: bool) -> None:
    """RocketMQ copies batch item properties verbatim, so its log can hold properties that are not
    UTF-8 (the CRC covers only the body); it reads them with U+FFFD. Recovery must not cut there."""
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        put = fill(store, 10)
        odd = Message(topic=TOPIC, body=b"odd", properties={"TAGS": "t", "X": "ab"})
        odd_offset = put_ok(store, odd)[0]
        put += [(odd_offset, odd)] + [(put_ok(store, message(i))[0], message(i)) for i in range(11, 20)]
        end = store.max_phy_offset
    record_end = odd_offset + len(encode_message(odd))
    patch_file(segment_path(cfg, odd_offset), record_end % SEGMENT - 2, b"\xff\xfe")  # "ab" -> not UTF-8
    if crash:
        leave_abort(cfg)
    with running(cfg) as store:
        assert store.max_phy_offset == end
        got = read_queue(store)
        assert bodies(got) == [m.body for _, m in put]
        assert got[10].properties == {"TAGS": "t", "X": "\ufffd\ufffd"}


# -- damaged consume queues ---------------------------------------------------------------------------
ONE_SEGMENT = 64 * 1024  # the whole CommitLog in one segment: abnormal recovery always starts at its head


def _cq_file(cfg: StoreConfig, queue_id: int, entry: int) -> tuple[Path, int]:
    per_file = CQ_ENTRIES_PER_FILE * CQ_STORE_UNIT_SIZE
    byte = entry * CQ_STORE_UNIT_SIZE
    return Path(cfg.consume_queue_dir()) / TOPIC / str(queue_id) / f"{byte - byte % per_file:020d}", byte % per_file


def _damage_cq(cfg: StoreConfig, queue_id: int, entry: int, how: str) -> None:
    path, pos = _cq_file(cfg, queue_id, entry)
    if how == "zeroed-tail":  # pages of the queue that never reached the disk
        patch_file(path, pos, b"\x00" * (CQ_ENTRIES_PER_FILE * CQ_STORE_UNIT_SIZE - pos))
    elif how == "garbled-entry":  # offset -1, size -1: not a valid entry
        patch_file(path, pos, b"\xff" * CQ_STORE_UNIT_SIZE)
    elif how == "random-entries":  # a garbled run starting with an invalid entry (negative offset)
        junk = bytearray(random.Random(99).randbytes(CQ_STORE_UNIT_SIZE * 3))
        junk[0] |= 0x80
        patch_file(path, pos, bytes(junk))
    elif how == "points-past-the-log":  # looks valid but points beyond the CommitLog's end
        patch_file(path, pos, struct.pack(">qiq", 10**12, 150, 0))
    else:
        raise AssertionError(how)


CQ_DAMAGE = [
    pytest.param(how, entry, id=f"{how}-{where}")
    for how in ["zeroed-tail", "garbled-entry", "random-entries", "points-past-the-log"]
    for entry, where in [(5, "first-cq-file"), (37, "last-cq-file")]
    # an entry that looks valid is only caught in the last file, see the test after this one
    if (how, entry) != ("points-past-the-log", 5)
]


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
@pytest.mark.parametrize(("how", "entry"), CQ_DAMAGE)
def test_damaged_consume_queue_is_rebuilt_from_the_commit_log(
    tmp_path: Path, how: str, entry: int, crash: bool
) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=ONE_SEGMENT)
    with running(cfg) as store:
        put = fill(store, 40)
    assert len(os.listdir(Path(cfg.consume_queue_dir()) / TOPIC / "0")) == 3
    _damage_cq(cfg, 0, entry, how)
    if crash:
        leave_abort(cfg)

    with running(cfg) as store:
        got = read_queue(store)
        assert bodies(got) == [m.body for _, m in put]
        assert [m.physical_offset for m in got] == [offset for offset, _ in put]
        assert store.get_max_offset_in_queue(TOPIC, 0) == 40
        end = store.max_phy_offset
        assert put_ok(store, message(40)) == (end, 40)
        assert store.query_message(TOPIC, "key-39", 32, 0, 2**62).messages[0].body == put[39][1].body
    with running(cfg) as store:
        assert len(read_queue(store)) == 41


def test_plausible_bogus_entry_in_an_earlier_cq_file_is_served_as_removed(tmp_path: Path) -> None:
    """An entry with offset >= 0 and size > 0 pointing past the log, in a CQ file before the last.

    RocketMQ's ConsumeQueue recovery only rejects entries with a negative offset or a size <= 0,
    and truncateDirtyLogicFiles only looks at the last file, so such an entry is trusted, by
    RocketMQ and by us alike. What must hold: the store loads, no pull raises or returns a
    wrong record, the pull reports MESSAGE_WAS_REMOVING and moves on; like RocketMQ's getMessage
    it skips the rest of that CQ file (entries pointing below the next segment of the bogus
    offset), and every later file reads normally.
    """
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=ONE_SEGMENT)
    with running(cfg) as store:
        put = fill(store, 40)
    _damage_cq(cfg, 0, 5, "points-past-the-log")
    with running(cfg) as store:
        assert store.reput_service.wait_caught_up(5)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 40
        head = store.get_message("g", TOPIC, 0, 0, 32)
        assert head.status is GetMessageStatus.FOUND
        assert [decode_record(r).body for r in head.messages] == [m.body for _, m in put[:5]]  # type: ignore[union-attr]
        assert head.next_begin_offset == CQ_ENTRIES_PER_FILE
        bogus = store.get_message("g", TOPIC, 0, 5, 32)
        assert bogus.status is GetMessageStatus.MESSAGE_WAS_REMOVING
        assert bogus.messages == []
        assert bogus.next_begin_offset == CQ_ENTRIES_PER_FILE
        tail = store.get_message("g", TOPIC, 0, CQ_ENTRIES_PER_FILE, 32)
        assert tail.status is GetMessageStatus.FOUND
        assert tail.message_queue_offsets[0] == CQ_ENTRIES_PER_FILE
        assert decode_record(tail.messages[0]).body == put[CQ_ENTRIES_PER_FILE][1].body  # type: ignore[union-attr]
        assert put_ok(store, message(40))[1] == 40


def test_deleted_consume_queue_directory_is_rebuilt(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    with running(cfg) as store:
        put = fill(store, 50, queues=2)
    shutil.rmtree(cfg.consume_queue_dir())
    with running(cfg) as store:
        for q in (0, 1):
            assert bodies(read_queue(store, q)) == [m.body for _, m in put if m.queue_id == q]


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
def test_damaged_queue_behind_another_queue(tmp_path: Path, crash: bool) -> None:
    """Queue 0 garbled at entry 7 while queue 1 is intact and covers the log's end.

    Clean exit: dispatch resumes where queue 1 ends, so queue 0 keeps its 7 good entries and the
    rest of its messages are no longer reachable through it (RocketMQ behaves the same); the
    queue stays consistent: new messages continue at offset 7 and every entry reads back.
    Abnormal exit: recovery re-dispatches the whole (single-segment) log and rebuilds queue 0.
    """
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=ONE_SEGMENT)
    with running(cfg) as store:
        put = fill(store, 40, queues=2)
    assert put[-1][1].queue_id == 1  # queue 1 holds the last record: it is the furthest queue
    _damage_cq(cfg, 0, 7, "garbled-entry")
    if crash:
        leave_abort(cfg)

    q0 = [m.body for _, m in put if m.queue_id == 0]
    q1 = [m.body for _, m in put if m.queue_id == 1]
    with running(cfg) as store:
        assert bodies(read_queue(store, 1)) == q1
        if crash:
            assert bodies(read_queue(store, 0)) == q0
            assert put_ok(store, message(40, 0))[1] == 20
        else:
            assert bodies(read_queue(store, 0)) == q0[:7]
            assert store.get_max_offset_in_queue(TOPIC, 0) == 7
            assert put_ok(store, message(40, 0))[1] == 7
            assert bodies(read_queue(store, 0)) == [*q0[:7], message(40, 0).body]
        assert put_ok(store, message(41, 1))[1] == 20


# -- damaged checkpoint ---------------------------------------------------------------------------
CHECKPOINTS = {
    "random-bytes": lambda: random.Random(7).randbytes(4096),
    "all-ff": lambda: b"\xff" * 4096,  # every timestamp -1
    "far-future": lambda: struct.pack(">qqq", 2**63 - 1, 2**63 - 1, 2**63 - 1) + bytes(4072),
    "truncated": lambda: b"\x01\x02\x03",
    "empty": lambda: b"",
}


@pytest.mark.parametrize("crash", [False, True], ids=["clean-exit", "abort-left"])
@pytest.mark.parametrize("content", sorted(CHECKPOINTS))
def test_corrupted_checkpoint_still_loads(tmp_path: Path, content: str, crash: bool) -> None:
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE, commit_log_size=ONE_SEGMENT)
    with running(cfg) as store:
        put = fill(store, 30, queues=2)
        end = store.max_phy_offset
    Path(cfg.checkpoint_path()).write_bytes(CHECKPOINTS[content]())
    if crash:
        leave_abort(cfg)

    with running(cfg) as store:
        assert store.last_exit_ok is not crash
        assert store.max_phy_offset == end
        for q in (0, 1):
            assert bodies(read_queue(store, q)) == [m.body for _, m in put if m.queue_id == q]
        # the index survives or is rebuilt by the recovery re-dispatch
        hits = store.query_message(TOPIC, "key-29", 32, 0, 2**62).messages
        assert [m.body for m in hits] == [put[29][1].body]
        assert put_ok(store, message(30, 0)) == (end, 15)
    assert Path(cfg.checkpoint_path()).stat().st_size == 4096
    with running(cfg) as store:
        assert len(read_queue(store, 0)) == 16


def test_put_with_ipv6_hosts_survives_restart(tmp_path: Path) -> None:
    """The sysFlag host bits decide the record layout; recovery must walk such records too."""
    cfg = small_config(tmp_path, cq_entries=CQ_ENTRIES_PER_FILE)
    msgs = [Message(topic=TOPIC, body=f"v6-{i}".encode(), born_host=HostAddress("2001:db8::5", 40000 + i),
                    store_host=HostAddress("::1", 10911) if i % 2 else HostAddress("127.0.0.1", 10911))
            for i in range(30)]
    with running(cfg) as store:
        for msg in msgs:
            put_ok(store, msg)
    with running(cfg) as store:
        got = read_queue(store)
        assert [(m.body, m.born_host, m.store_host) for m in got] == [(m.body, m.born_host, m.store_host)
                                                                        for m in msgs]
