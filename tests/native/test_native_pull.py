"""Differential test of the one-pass pull: the Rust ``pull_messages`` against its pure-Python twin
``pull_messages_python``, on the same store, byte for byte.

A store with small files holds queues of records of varied sizes and tags, spread over many
CommitLog segments, some of them deleted or being destroyed. Hypothesis draws the pulls: real
ConsumeQueue entries from any offset, or made-up ones (pointing before, past and across segments,
negative and huge sizes and offsets), tag-hash subsets, transfer limits from zero to huge, and the
response frame's fields. Both twins must give the same status, offsets, counts, suggestion and
frame.
"""

from __future__ import annotations

import struct
import time
from collections import Counter
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from native_support import native_module

from rocketstore.common.message import HostAddress, Message, tags_code
from rocketstore.remoting.codes import LanguageCode
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import CQ_ENTRY, CQ_STORE_UNIT_SIZE
from rocketstore.store.mapped_file import MappedFile
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.pull_transfer import PullFrame, TransferLimits, pull_messages_python
from rocketstore.store.status import PutMessageStatus

NATIVE: ModuleType = native_module()
EXAMPLES = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

TOPIC = "Pulled"
TAGS = ["TagA", "TagB", "TagC", "", "ключ"]
QUEUES = 3
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DefaultMessageStore]:
    """Three queues of 150 records each, the first CommitLog segments deleted, the next one shut
    down (found, but refusing readers), the last one with its tail not yet readable."""
    root = tmp_path_factory.mktemp("pull-store")
    opened = DefaultMessageStore(StoreConfig(
        store_path_root_dir=str(root), mapped_file_size_commit_log=4096,
        mapped_file_size_consume_queue=100 * CQ_STORE_UNIT_SIZE, delete_commit_log_files_interval=0))
    opened.load()
    opened.start()
    try:
        for i in range(450):
            msg = Message(topic=TOPIC, body=bytes([i % 251]) * (i * 53 % 400), queue_id=i % QUEUES,
                          properties={"TAGS": TAGS[i % len(TAGS)]}, born_timestamp=int(time.time() * 1000),
                          born_host=HostAddress("127.0.0.1", 0), store_host=HostAddress("127.0.0.1", 8123))
            assert opened.put_message(msg).status is PutMessageStatus.PUT_OK
        assert opened.reput_service.wait_caught_up(10)
        assert opened.commit_log.allocator is not None and opened.commit_log.allocator.wait_idle(10)
        segments = opened.commit_log.mapped_file_queue
        assert segments.delete_expired_file_by_time(0, 0, 0, True) > 0
        assert len(segments.mapped_files) > 3
        segments.mapped_files[0].shutdown(0)
        last = segments.mapped_files[-1]
        wrote = last.wrote_position
        last.wrote_position = wrote // 2
        yield opened
        last.wrote_position = wrote
    finally:
        opened.shutdown()


def codes() -> st.SearchStrategy[tuple[int, ...] | None]:
    known = st.sampled_from([tags_code(tag) for tag in TAGS] + [0, -1, 2**40])
    return st.one_of(st.none(), st.lists(st.one_of(known, I32), max_size=4).map(tuple))


def limits(max_offset: int) -> st.SearchStrategy[TransferLimits]:
    small = st.one_of(st.integers(-2, 40), st.integers(0, 3000), st.just(2**40))
    return st.builds(TransferLimits, max_msg_nums=st.one_of(st.integers(-1, 40), I32), max_bytes_in_memory=small,
                     max_count_in_memory=small, max_bytes_in_disk=small, max_count_in_disk=small,
                     max_offset_py=st.sampled_from([max_offset, 0, 2**62]),
                     in_memory_bytes=st.one_of(st.integers(0, max_offset), st.just(2**62)))


def frames() -> st.SearchStrategy[PullFrame | None]:
    frame = st.builds(PullFrame, opaque=I32, language=st.sampled_from(list(LanguageCode.__members__)), version=I32,
                      suggest_when_slow=I64, suggest_otherwise=I64)
    return st.one_of(st.none(), frame)


def made_up_entries(store: DefaultMessageStore) -> st.SearchStrategy[bytes]:
    """Entries in any order: real ones, real ones with another size or tag, and arbitrary ones."""
    file_size, max_offset = store.commit_log.settings.file_size, store.commit_log.max_offset
    queues = [store.find_consume_queue(TOPIC, queue_id) for queue_id in range(QUEUES)]
    real = [entry for queue in queues
            for entry in CQ_ENTRY.iter_unpack(queue.read_entries(queue.min_offset_in_queue, 800))]
    offset = st.one_of(st.integers(0, max_offset + file_size), st.integers(-file_size, -1), I64,
                       st.integers(1, 40).map(lambda n: n * file_size - 8))
    size = st.one_of(st.integers(0, 500), st.integers(-5, -1), I32)
    arbitrary = st.tuples(offset, size, st.one_of(st.sampled_from([tags_code(tag) for tag in TAGS]), I64))
    changed = st.tuples(st.sampled_from(real), size, I64).map(lambda e: (e[0][0], e[1], e[0][2] if e[2] % 2 else e[2]))
    entry = st.one_of(st.sampled_from(real), changed, arbitrary)
    return st.lists(entry, max_size=60).map(lambda found: b"".join(CQ_ENTRY.pack(*e) for e in found))


def assert_twins_agree(store: DefaultMessageStore, entries: bytes, queue_offset: int,
                       tag_codes: tuple[int, ...] | None, limit: TransferLimits, frame: PullFrame | None,
                       queue_offsets: tuple[int, int]) -> None:
    native = NATIVE.pull_messages(entries, queue_offset, store.commit_log, tag_codes, limit, frame, *queue_offsets)
    python = pull_messages_python(entries, queue_offset, store.commit_log, tag_codes, limit, frame, *queue_offsets)
    assert native == python
    event(f"walk status {native[0]}, {'a frame' if native[5] is not None else 'no frame'}")


@EXAMPLES
@given(data=st.data())
def test_real_entries(store: DefaultMessageStore, data: st.DataObject) -> None:
    queue = store.get_consume_queue(TOPIC, data.draw(st.integers(0, QUEUES - 1)))
    assert queue is not None
    offset = data.draw(st.integers(queue.min_offset_in_queue, queue.max_offset_in_queue - 1))
    entries = queue.read_entries(offset, data.draw(st.integers(1, 800)))
    assert_twins_agree(store, entries, offset, data.draw(codes()), data.draw(limits(store.commit_log.max_offset)),
                       data.draw(frames()), (queue.min_offset_in_queue, queue.max_offset_in_queue))


@EXAMPLES
@given(data=st.data())
def test_made_up_entries(store: DefaultMessageStore, data: st.DataObject) -> None:
    max_offset = store.commit_log.max_offset
    entries = data.draw(made_up_entries(store))
    assert_twins_agree(store, entries, data.draw(st.integers(0, 2**40)), data.draw(codes()),
                       data.draw(limits(max_offset)), data.draw(frames()), data.draw(st.tuples(I64, I64)))


def test_a_partial_entry_is_refused(store: DefaultMessageStore) -> None:
    queue = store.get_consume_queue(TOPIC, 0)
    assert queue is not None
    entries = queue.read_entries(queue.min_offset_in_queue, 10)[:-7]
    limit = TransferLimits(32, 2**20, 32, 2**16, 8, 0, 2**30)
    with pytest.raises(ValueError, match="whole 20-byte entries"):
        NATIVE.pull_messages(entries, 0, store.commit_log, None, limit, None, 0, 0)
    with pytest.raises(struct.error):
        pull_messages_python(entries, 0, store.commit_log, None, limit, None, 0, 0)


class CountingSegment:
    """A CommitLog segment that counts the references taken on it and given back."""

    def __init__(self, mapped: MappedFile, counts: Counter[str]) -> None:
        self.mapped, self.counts = mapped, counts
        self.buffer, self.file_from_offset = mapped.buffer, mapped.file_from_offset
        self.read_position = mapped.read_position

    def hold(self) -> bool:
        held = self.mapped.hold()
        self.counts["held"] += held
        return held

    def release(self) -> None:
        self.counts["released"] += 1
        self.mapped.release()


@EXAMPLES
@given(data=st.data())
def test_every_segment_held_is_released(store: DefaultMessageStore, data: st.DataObject) -> None:
    counts: Counter[str] = Counter()

    def find(offset: int) -> CountingSegment | None:
        mapped = store.commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
        return None if mapped is None else CountingSegment(mapped, counts)

    commit_log = SimpleNamespace(mapped_file_queue=SimpleNamespace(find_mapped_file_by_offset=find),
                                 settings=store.commit_log.settings)
    max_offset = store.commit_log.max_offset
    found = NATIVE.pull_messages(data.draw(made_up_entries(store)), 0, commit_log, data.draw(codes()),
                                 data.draw(limits(max_offset)), data.draw(frames()), 0, 0)
    assert counts["held"] == counts["released"]
    assert found[2] == 0 or counts["held"] > 0
