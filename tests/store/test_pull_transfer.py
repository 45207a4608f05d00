"""A tag subscription's pull in one pass (``get_message_frame``, and ``found_frame``, the read of a
pull served from the connection's read) answers exactly what the reference path answers:
``get_message`` with a TagFilter, then the SUCCESS response built and encoded by the pure-Python
frame encoder, as the pull processor did for every pull before.

Whichever implementation ``ROCKETSTORE_NATIVE`` selects runs here (tests/run also runs this file
with the pure-Python one); tests/native/test_native_pull.py holds the two to each other on random
input. The store has small files, so pulls cross CommitLog segments (records of a queue on both
sides of a segment's end) and ConsumeQueue files (a pull stops at a file's end).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from store_support import OpenStore

from rocketstore.common.message import HostAddress, Message
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand, encode_frame_python
from rocketstore.remoting.headers import PullMessageResponseHeader
from rocketstore.store.message_store import DefaultMessageStore, TagFilter
from rocketstore.store.pull_transfer import PullFrame
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

TOPIC = "Pulled"
TAGS = ["TagA", "TagB", "TagA", "TagC", "TagA"]


def fill(store: DefaultMessageStore, count: int, queue_id: int = 0, topic: str = TOPIC) -> None:
    """``count`` messages of varied sizes (so records end at every place of a segment) and tags."""
    for i in range(count):
        msg = Message(topic=topic, body=bytes([i % 251]) * (20 + i * 37 % 300), queue_id=queue_id,
                      properties={"TAGS": TAGS[i % len(TAGS)], "KEYS": f"k{i}"},
                      born_timestamp=int(time.time() * 1000), born_host=HostAddress("127.0.0.1", 0),
                      store_host=HostAddress("127.0.0.1", 8123))
        assert store.put_message(msg).status is PutMessageStatus.PUT_OK
    assert store.reput_service.wait_caught_up(10)


def request(language: int = LanguageCode.JAVA, opaque: int = 7, version: int = 395) -> RemotingCommand:
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque, language=language, version=version)


def assert_same_as_reference(store: DefaultMessageStore, offset: int, max_msg_nums: int, expression: str,
                             pull: RemotingCommand | None = None, suggest: tuple[int, int] = (0, 0),
                             topic: str = TOPIC, queue_id: int = 0) -> GetMessageStatus:
    """The one-pass pull against the reference, field for field and frame byte for byte."""
    pull = pull or request()
    names = {member.value: name for name, member in LanguageCode.__members__.items()}
    frame = PullFrame(pull.opaque, names.get(pull.language, "OTHER"), pull.version, *suggest)
    tags = TagFilter(expression)
    pulled = store.get_message_frame("g", topic, queue_id, offset, max_msg_nums, tags, frame)
    ref = store.get_message("g", topic, queue_id, offset, max_msg_nums, TagFilter(expression))
    got = pulled.result
    assert (got.status, got.next_begin_offset, got.min_offset, got.max_offset, got.buffer_total_size,
            got.suggest_pulling_from_slave) == (ref.status, ref.next_begin_offset, ref.min_offset, ref.max_offset,
                                                ref.buffer_total_size, ref.suggest_pulling_from_slave)
    assert pulled.message_count == len(ref.messages)
    # the read of a pull served from the connection's read (PullMessageProcessor.serve_pull_frames)
    served = store.found_frame(topic, queue_id, offset, max_msg_nums,
                               None if tags.subscribe_all else tuple(tags.code_set), *frame)
    if ref.status is not GetMessageStatus.FOUND:
        assert pulled.frame is None and served is None
        return ref.status
    assert served == (pulled.frame, len(ref.messages), ref.buffer_total_size)
    fields = PullMessageResponseHeader(
        suggest_which_broker_id=suggest[0] if ref.suggest_pulling_from_slave else suggest[1],
        next_begin_offset=ref.next_begin_offset, min_offset=ref.min_offset, max_offset=ref.max_offset,
    ).to_ext_fields()
    expected = encode_frame_python(pull.response(ResponseCode.SUCCESS, "FOUND", fields, b"".join(ref.messages)))
    assert pulled.frame == expected
    return ref.status


@pytest.fixture
def filled(open_store: OpenStore) -> DefaultMessageStore:
    store = open_store()
    fill(store, 260)  # 3 ConsumeQueue files, about 25 CommitLog segments
    return store


@pytest.mark.parametrize("expression", ["*", "", "TagA", "TagB || TagC", "TagA || Nope", "Nope"])
def test_every_offset_and_batch_size_matches_the_reference(filled: DefaultMessageStore, expression: str) -> None:
    seen = set()
    for offset in [*range(0, 262, 7), 95, 98, 99, 100, 199, 259, 260, 261, 300]:
        for max_msg_nums in (1, 3, 32, 64, 0, -1):
            seen.add(assert_same_as_reference(filled, offset, max_msg_nums, expression))
    want = {GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY}
    want.add(GetMessageStatus.NO_MATCHED_MESSAGE if expression == "Nope" else GetMessageStatus.FOUND)
    assert want <= seen


def test_transfer_limits_and_in_disk_records(filled: DefaultMessageStore) -> None:
    for update in ({"maxTransferCountOnMessageInMemory": "5"}, {"maxTransferBytesOnMessageInMemory": "1000"},
                   {"maxTransferBytesOnMessageInMemory": "1"},
                   {"accessMessageInMemoryMaxRatio": "0", "maxTransferCountOnMessageInDisk": "3"},
                   {"accessMessageInMemoryMaxRatio": "0", "maxTransferBytesOnMessageInDisk": "700"}):
        filled.config.update(update)
        for offset in (0, 10, 97):
            for expression in ("*", "TagA"):
                assert assert_same_as_reference(filled, offset, 32, expression) is GetMessageStatus.FOUND
    # everything counts as in disk now: the consumer is sent to the slave the group names
    assert assert_same_as_reference(filled, 0, 32, "*", suggest=(1, 0)) is GetMessageStatus.FOUND
    assert filled.get_message("g", TOPIC, 0, 0, 32).suggest_pulling_from_slave


def test_header_fields_of_the_request(filled: DefaultMessageStore) -> None:
    for language in (LanguageCode.JAVA, LanguageCode.GO, LanguageCode.PYTHON, 200):
        for opaque, version in ((0, 0), (-(2**31), 2**31 - 1), (123456, 317)):
            pull = request(language, opaque, version)
            assert assert_same_as_reference(filled, 3, 8, "*", pull, (2, 5)) is GetMessageStatus.FOUND


def test_empty_and_unknown_queues(open_store: OpenStore) -> None:
    store = open_store()
    fill(store, 3)
    store.find_consume_queue(TOPIC, 1)  # exists, never written
    assert assert_same_as_reference(store, 0, 32, "*", queue_id=1) is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert assert_same_as_reference(store, 4, 32, "*", queue_id=1) is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert assert_same_as_reference(store, 0, 32, "*", queue_id=2) is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert assert_same_as_reference(store, 0, 32, "*", topic="Nobody") is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_records_of_deleted_segments(open_store: OpenStore, root: Path) -> None:
    """Entries left pointing at deleted CommitLog segments (the ConsumeQueue not cleaned yet),
    a segment being destroyed (its readers refused), then the queue's min offset moved."""
    store = open_store(delete_commit_log_files_interval=0, delete_consume_queue_files_interval=0)
    fill(store, 200)
    assert store.commit_log.allocator is not None and store.commit_log.allocator.wait_idle(10)
    store.config.update({"fileReservedTime": "0"})
    store.execute_delete_files_manually()
    assert store.clean_commit_log_service.run() >= 1
    statuses = {assert_same_as_reference(store, offset, n, expression)
                for offset in (0, 5, 20, 40) for n in (1, 32) for expression in ("*", "TagB")}
    assert GetMessageStatus.MESSAGE_WAS_REMOVING in statuses
    store.commit_log.mapped_file_queue.mapped_files[0].shutdown(0)
    statuses = {assert_same_as_reference(store, offset, 32, "*") for offset in range(0, 120, 3)}
    assert {GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.FOUND} <= statuses
    store.clean_consume_queue_service.run()
    assert assert_same_as_reference(store, 0, 32, "*") is GetMessageStatus.OFFSET_TOO_SMALL


def test_a_record_not_yet_readable(filled: DefaultMessageStore) -> None:
    """An entry whose record lies past its segment's read position is not returned."""
    last = filled.commit_log.mapped_file_queue.mapped_files[-1]
    wrote = last.wrote_position
    try:
        last.wrote_position = 30
        for offset in (240, 255, 259):
            assert_same_as_reference(filled, offset, 32, "*")
    finally:
        last.wrote_position = wrote
