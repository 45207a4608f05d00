"""Differential test of the plain send path: the native one-call SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE against the reference.

Two brokers in this process take the same sequence of sends through their registered SEND_MESSAGE_V2
/ SEND_MESSAGE / SEND_BATCH_MESSAGE handlers (as a connection calls them inline), one with the
native plain send path, one with the processor's native switch off (the path every send took before:
the header decoded, the checks, ``put_message`` or ``put_messages``). The clock is fixed, so the
CommitLogs, the ConsumeQueues (once dispatched), every response frame and the statistics must be
identical. The sequence mixes plain sends and batches (whose responses must come from the native
put) with every kind the plain path must leave to the reference: delays, timers, half messages,
``WAIT=false`` on a single send, retry topics, unknown topics, out-of-range queues, malformed fields,
malformed, empty and oversized batch bodies, and records that do not fit the segment's room. A
hypothesis test sends generated batches (sizes, bodies, flags, properties, malformed bodies) the
same way. The sequence runs on three stores (:data:`STORE_MODES`): the plain path also takes the
sends of a store whose puts wait for their flush or slave, and answers them after the wait. It
runs one by one and grouped (the sends a connection read together, handed to the group handler);
a last test writes pipelined sends on a real socket and checks their order in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import random
import struct
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tool_support import require_tool

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.processor import send as send_module
from rocketstore.broker.server import Connection, Reply
from rocketstore.common.message import BatchItem, HostAddress, decode_message_id, encode_batch
from rocketstore.common.native import NATIVE
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.commit_log import PlainPut, PlainSendRequest
from rocketstore.store.config import BrokerRole, FlushDiskType, StoreConfig

require_tool("the native extension with PlainSend", NATIVE is not None and hasattr(NATIVE, "PlainSend"),
             "`pip install -e .` builds it when cargo is on PATH (and ROCKETSTORE_NATIVE is not 0)")

NOW_S = 2_000_000_000.0  # after any real start: the broker refuses sends timed before startAcceptSendRequestTimeStamp
SEGMENT = 64 * 1024
MAX_MESSAGE = 48 * 1024  # below the segment, so that a batch can be refused for its size
ROLLING_SENDS = 60
ROLLING_BATCHES = 12


def _request(topic: str, properties: str | None, *, body: bytes = b"x" * 100, queue_id: int = 0, code: int =
             RequestCode.SEND_MESSAGE_V2, opaque: int = 1, batch: bool = False, **fields: str) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=1_600_000_000_000 + opaque, flag=opaque % 3, properties=properties,
        reconsume_times=opaque % 2, batch=batch)
    ext = header.to_ext_fields() if code == RequestCode.SEND_MESSAGE else header.to_v2_ext_fields()
    ext.update(fields)
    return RemotingCommand(code=code, opaque=opaque, ext_fields=ext, body=body, version=435)


def _raw_batch(items: Sequence[tuple[bytes, int, bytes]]) -> bytes:
    """A batch body of (body, flag, properties as sent) items, malformed properties included."""
    return b"".join(struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, flag, len(body)) + body
                    + struct.pack(">h", len(props)) + props for body, flag, props in items)


def _batch(topic: str, properties: str | None, body: bytes, *, opaque: int, queue_id: int = 0,
           **fields: str) -> RemotingCommand:
    return _request(topic, properties, body=body, queue_id=queue_id, opaque=opaque,
                    code=RequestCode.SEND_BATCH_MESSAGE, batch=True, **fields)


#: a plain send in a sequence the segment's end cuts: the native path answers it unless it is the one
#: that found the segment full (and went to the reference path, which rolled the segment)
ROLLING = None


def _sends(waits: bool = False) -> list[tuple[RemotingCommand, bool | None]]:
    """(request, whether the plain path must answer it, or ROLLING) in order; ``waits``: on a store
    whose puts wait for a flush or a slave, where a send that says ``WAIT=false`` (a batch too)
    goes to the reference path."""
    java = "UNIQ_KEY\x017F0000010000{:08X}\x02WAIT\x01true\x02TAGS\x01TagA\x02"
    sends: list[tuple[RemotingCommand, bool | None]] = []
    opaque = 0

    def add(plain: bool | None, topic: str, properties: str | None, **kwargs: object) -> None:
        nonlocal opaque
        opaque += 1
        sends.append((_request(topic, properties, opaque=opaque, **kwargs), plain))  # type: ignore[arg-type]

    for i in range(40):  # the first finds no segment: the reference path creates one
        add(i > 0, "Plain", java.format(i), queue_id=i % 4, body=bytes([i]) * (i * 37 % 900))
    add(True, "Plain", None)
    add(True, "Plain", "")
    add(True, "Plain", "KEYS\x01k1 k2\x02x\x02\x01v\x02n\x01\x02TAGS\x01ключ")  # skipped items, no WAIT
    add(True, "Multi", "TAGS\x01a||b\x02WAIT\x01true")
    add(True, "Plain", "custom\x01v\u00e9\x02TAGS\x01T", queue_id=3)
    add(False, "Plain", "DELAY\x013\x02TAGS\x01D")
    add(False, "Plain", "TIMER_DELAY_SEC\x0110")
    add(False, "Plain", "TRAN_MSG\x01true\x02PGROUP\x01PG")
    add(False, "Plain", "WAIT\x01false")
    add(False, "Plain", "CLUSTER\x01Mine")
    add(False, "Plain", "A\x011\x02A\x012")
    add(False, "Plain", None, queue_id=4)  # past the topic's queues: SYSTEM_ERROR
    add(False, "Plain", None, queue_id=-1)
    add(False, "Plain", None, g="12x")  # a malformed bornTimestamp
    add(False, "Plain", None, f="4")  # a prepared sysFlag
    add(False, "%RETRY%PG", "TAGS\x01R")
    add(False, "Unknown", None)  # auto-created from TBW102, then plain
    add(True, "Unknown", None)
    add(False, "Plain", None, code=RequestCode.SEND_MESSAGE)
    batch = RequestCode.SEND_BATCH_MESSAGE
    two = encode_batch([BatchItem(b"b0", 0, {"TAGS": "x"}), BatchItem(b"b1", 0, {})])
    add(True, "Plain", "", batch=True, code=batch, body=two)
    add(True, "Plain", "WAIT\x01true", batch=True, code=batch, queue_id=2, body=encode_batch(
        [BatchItem(bytes([i]) * i * 41, i, {"UNIQ_KEY": f"U{i}", "KEYS": "k1 k2", "TAGS": "T"}) for i in range(7)]))
    add(not waits, "Plain", "WAIT\x01false\x02TAGS\x01B", batch=True, code=batch, body=two)  # a batch keeps WAIT
    add(True, "Multi", None, batch=True, code=batch, body=encode_batch([BatchItem(b"m", 5, {"TAGS": "a||b"})]))
    add(True, "Plain", "x\x02\x01v", batch=True, code=batch,  # skipped items, in the header and the items
        body=_raw_batch([(b"s", 1, b"x\x02\x01v\x02n\x01\x02TAGS\x01\xd0\xba"), (b"", -7, b"")]))
    add(False, "Plain", "DELAY\x012", batch=True, code=batch, body=two)  # a batch cannot be delayed
    add(False, "Plain", "CLUSTER\x01Mine", batch=True, code=batch, body=two)
    add(False, "Plain", "A\x011\x02A\x012", batch=True, code=batch, body=two)
    add(False, "Plain", "", batch=True, code=batch, body=_raw_batch([(b"d", 0, b"A\x011\x02A\x012")]))
    add(False, "Plain", "", batch=True, code=batch, body=b"")  # no message
    add(False, "Plain", "", batch=True, code=batch, body=two[:-3])  # truncated
    add(False, "Plain", "", batch=True, code=batch, body=two[:15])  # an item's header cut short
    add(False, "Plain", "", batch=True, code=batch, body=b"\x00\x00\x00\x15" + two[4:])  # sizes that disagree
    add(False, "Plain", "", batch=True, code=batch, body=_raw_batch([(b"u", 0, b"K\x01\xff\xfe")]))  # not UTF-8
    add(False, "Plain", "", batch=True, code=batch, body=encode_batch([BatchItem(b"o" * 1000)] * 50))  # too big
    add(False, "Plain", "", batch=True, code=batch, body=two, f="8")  # a transactional sysFlag
    add(False, "Plain", "", batch=True, code=batch, body=two, queue_id=-1)
    add(False, "Plain", "", batch=True, code=batch, body=two, m="yes")  # the header says: not a batch
    add(False, "Plain", "", batch=True, body=two)  # SEND_MESSAGE_V2 whose header says batch
    add(False, "Plain", "TAGS\x01T", code=batch)  # SEND_BATCH_MESSAGE whose header says one message
    for i in range(ROLLING_SENDS):  # past the 64 KiB segment: the one that does not fit rolls it on the reference path
        add(ROLLING, "Plain", java.format(100 + i), body=b"y" * 1500)
    for i in range(ROLLING_BATCHES):  # the same for batches of 8 records of 1.5 KiB
        add(ROLLING, "Plain", java.format(300 + i), batch=True, code=batch, queue_id=i % 4, body=encode_batch(
            [BatchItem(bytes([j]) * 1500, j, {"UNIQ_KEY": f"B{i}-{j}", "TAGS": "R"}) for j in range(8)]))
    return sends


class Run(NamedTuple):
    frames: list[bytes]
    native_answers: list[bool]
    #: each response's code, opaque, language, version and header fields, as a reader of the object sees them
    responses: list[tuple[int, int, int, int, dict[str, str]]]
    #: what the sends added to the store's and the broker's statistics (latencies left out: they are times)
    stats: tuple[object, ...]
    #: the most sends one plain put stored
    largest_put: int


#: the stores the sequence runs on: the plain path's own (ASYNC_FLUSH, ASYNC_MASTER), one whose
#: puts wait for the group commit, and a SYNC_MASTER without a slave (every stored send answered
#: SLAVE_NOT_AVAILABLE, at once); waiting for a slave is tested with one (test_replication.py)
STORE_MODES = {
    "async": {},
    "sync-flush": {"flush_disk_type": FlushDiskType.SYNC_FLUSH},
    "sync-master": {"broker_role": BrokerRole.SYNC_MASTER},
}


@contextlib.asynccontextmanager
async def sequence_broker(root: Path, mode: str, monkeypatch: pytest.MonkeyPatch
                          ) -> AsyncIterator[tuple[BrokerController, pytest.MonkeyPatch]]:
    """A started broker on ``root`` for the sequence (64 KiB segments, the topics Plain and Multi, a
    fixed store host and queue picker) with the clock fixed, and the monkeypatch context to patch
    more in until it stops."""
    broker = BrokerController(
        BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                     http_listen_port=0, grpc_listen_port=0, max_dispatch_lag_bytes=0),
        StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT, max_message_size=MAX_MESSAGE,
                    message_delay_level="1d 1d 1d",  # the delayed send stays in SCHEDULE_TOPIC_XXXX
                    **STORE_MODES[mode]))  # type: ignore[arg-type]
    await broker.start()
    # the clock stays fixed until the broker has stopped: a background service reading it after
    # the sends (the schedule service, which delivers at once a delayed message stored "in the
    # future" of its clock) would otherwise write a record at a moment of its own, in one broker only
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: NOW_S)
        patched.setattr(time, "time_ns", lambda: int(NOW_S * 1e9))
        try:
            broker.topic_config_manager.put(TopicConfig("Plain", read_queue_nums=4, write_queue_nums=4))
            broker.topic_config_manager.put(TopicConfig("Multi", read_queue_nums=1, write_queue_nums=1,
                                                        topic_filter_type=TopicFilterType.MULTI_TAG))
            broker.store_host = HostAddress("127.0.0.1", 10911)  # not the port each broker happened to listen on
            patched.setattr(send_module, "_RANDOM", random.Random(7))  # queueId -1 picks the same queue
            yield broker, patched
        finally:
            await broker.stop(grace_s=1.0)


async def send_stats(broker: BrokerController) -> tuple[object, ...]:
    """What the sends added to the store's and the broker's statistics (latencies left out: they
    are times), once dispatch has caught up."""
    assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
    store_stats, broker_stats = broker.store.stats, broker.broker_stats_manager
    return (store_stats.put_message_times_total, store_stats.put_message_size_total,
            dict(store_stats.put_by_topic), store_stats.put_message_failed_times,
            sum(store_stats.put_distribute_time), sum(broker_stats.send_latency.counts),
            {topic: (nums.value, nums.times) for topic, nums in broker_stats.topic_put_nums.items()},
            {topic: (size.value, size.times) for topic, size in broker_stats.topic_put_size.items()},
            (broker_stats.broker_put_nums.value, broker_stats.broker_put_nums.times))


async def _run(root: Path, native: bool, monkeypatch: pytest.MonkeyPatch, requests: Sequence[RemotingCommand],
               mode: str = "async", group: int = 1) -> Run:
    """The requests through the send handler one by one, or (``group``) through the group handler
    in runs of that many, each run's replies awaited after the run, in order."""
    async with sequence_broker(root, mode, monkeypatch) as (broker, patched):
        conn = Connection(broker.remoting)
        conn.peer_host = HostAddress("10.1.2.3", 54321)
        frames, native_answers, responses = [], [], []
        if not native:
            patched.setattr(send_module, "NATIVE", None)
        plain_opaques: set[int] = set()
        largest_put = [0]
        put_plain_sends = broker.store.put_plain_sends

        def spied(sends: list[PlainSendRequest], **kwargs: Any) -> list[PlainPut]:
            puts = put_plain_sends(sends, **kwargs)
            plain_opaques.update(send[8] for send in sends[:len(puts)])
            largest_put[0] = max(largest_put[0], len(puts))
            return puts

        patched.setattr(broker.store, "put_plain_sends", spied)
        replies: list[Reply] = []
        if group > 1:  # as a connection hands the handler the sends it read one after the other
            handle_group = broker.remoting.group_handlers[RequestCode.SEND_MESSAGE_V2]
            for at in range(0, len(requests), group):
                chunk = list(requests[at:at + group])
                replies.extend(handle_group(conn, chunk))
        else:
            replies = [conn._call_handler(request) for request in requests]  # as the server calls it inline
        for request, reply in zip(requests, replies, strict=True):
            if mode == "async":
                assert isinstance(reply, RemotingCommand), reply  # never waits
            if isinstance(reply, asyncio.Future) or inspect.iscoroutine(reply):
                reply = await reply  # the flush: a future on the plain path, a coroutine on the other
            assert isinstance(reply, RemotingCommand), reply
            frames.append(reply.encode())
            native_answers.append(request.opaque in plain_opaques)
            responses.append((reply.code, reply.opaque, reply.language, reply.version, reply.ext_fields))
        return Run(frames, native_answers, responses, await send_stats(broker), largest_put[0])


def _files(root: Path, folder: str) -> Iterator[tuple[str, bytes]]:
    for path in sorted((root / folder).rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes()


def _assert_same(native_root: Path, native: Run, reference_root: Path, reference: Run) -> None:
    """Both runs answered, stored and counted alike; the reference run never took the plain path."""
    assert not any(reference.native_answers)
    for i, (mine, theirs) in enumerate(zip(native.frames, reference.frames, strict=True)):
        assert mine == theirs, f"send {i}"
    assert native.responses == reference.responses
    assert native.stats == reference.stats
    for folder in ("commitlog", "consumequeue"):
        native_files = dict(_files(native_root, folder))
        reference_files = dict(_files(reference_root, folder))
        assert native_files.keys() == reference_files.keys()
        for name, data in native_files.items():
            other = reference_files[name]
            first = next((i for i, (a, b) in enumerate(zip(data, other, strict=True)) if a != b), None)
            assert first is None, f"{name} differs from byte {first}: {data[first - 8:first + 64]!r} != " \
                                  f"{other[first - 8:first + 64]!r}"


def _starts_a_segment(response: tuple[int, int, int, int, dict[str, str]]) -> bool:
    """Whether a stored send's (first) record begins a CommitLog segment: where a send that found
    the segment full lands once the reference path has rolled it."""
    _, offset = decode_message_id(response[4]["msgId"].split(",")[0])
    return offset % SEGMENT == 0


@pytest.mark.parametrize("group", [1, 9], ids=["one-by-one", "grouped"])
@pytest.mark.parametrize("mode", list(STORE_MODES))
def test_plain_sends_store_and_answer_what_the_reference_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              mode: str, group: int) -> None:
    """Grouped: the sends as a connection hands runs of them read in one pass to the group handler
    (RemotingServer.register_group), plain and not mixed, the segment's end inside runs: one put
    per run, the rest in order through the reference path, and all stored and answered alike."""
    native_root, reference_root = tmp_path / "native", tmp_path / "reference"
    sends = _sends(waits=mode != "async")
    requests = [request for request, _ in sends]
    native = asyncio.run(_run(native_root, True, monkeypatch, requests, mode, group))
    reference = asyncio.run(_run(reference_root, False, monkeypatch, requests, mode))
    _assert_same(native_root, native, reference_root, reference)
    assert native.largest_put == (1 if group == 1 else group)
    stored_codes = {code for (code, *_), (_, plain) in zip(native.responses, sends, strict=True) if plain}
    assert stored_codes == {ResponseCode.SLAVE_NOT_AVAILABLE if mode == "sync-master" else ResponseCode.SUCCESS}
    assert len(dict(_files(native_root, "commitlog"))) > 2
    assert len(dict(_files(native_root, "consumequeue"))) > 4
    rolled = {"single": 0, "batch": 0}
    for i, ((request, plain), answered) in enumerate(zip(sends, native.native_answers, strict=True)):
        if plain is not ROLLING:
            assert answered == plain, f"send {i}"
        elif not answered:
            assert _starts_a_segment(native.responses[i]), f"send {i} fell back, yet the segment had room"
            rolled["batch" if request.code == RequestCode.SEND_BATCH_MESSAGE else "single"] += 1
    assert rolled == {"single": 1, "batch": 3}  # 60 x 1.5 KiB, then 12 x 8 x 1.5 KiB (4 a segment), 64 KiB segments
    assert native.responses[len(sends) - 1][4]["msgId"].count(",") == 7


_NAMES = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "a", "\u043a\u043b\u044e\u0447"])
_VALUES = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1,
                  max_size=6)
#: properties text as a client may send it: items string_to_properties skips, names twice, names
#: that make a batch not plain (DELAY, CLUSTER)
_ANY_PROPERTIES = st.lists(st.one_of(
    st.tuples(st.one_of(_NAMES, st.sampled_from(["DELAY", "CLUSTER"])), _VALUES).map("\x01".join),
    st.sampled_from(["", "x", "\x01v", "n\x01", "ab"])), max_size=4).map("\x02".join)
#: properties text a plain batch carries: distinct names, each with a value
_PLAIN_PROPERTIES = st.dictionaries(_NAMES, _VALUES, max_size=4).map(
    lambda props: "\x02".join(f"{name}\x01{value}" for name, value in props.items()))
_BODIES = st.one_of(st.binary(max_size=64), st.integers(0, 4000).map(lambda n: b"z" * n))


@st.composite
def _generated_batch(draw: st.DrawFn) -> tuple[str | None, bytes, bool | None]:
    """(the header's properties, the batch body, whether the batch is plain, or None when it may
    be either): plain ones have plain properties and a well-formed body that fits maxMessageSize;
    the others may have anything, a body cut, its sizes garbled or its properties not UTF-8. Not
    plain for certain: no message, properties not UTF-8, or a header naming DELAY or CLUSTER."""
    plain = draw(st.booleans())
    properties = _PLAIN_PROPERTIES if plain else _ANY_PROPERTIES
    items = draw(st.lists(st.tuples(_BODIES, st.integers(-2**31, 2**31 - 1), properties.map(str.encode)),
                          min_size=1 if plain else 0, max_size=12))
    if plain:
        wire = sum(22 + len(body) + len(props) for body, _, props in items)
        if wire > MAX_MESSAGE:
            items = items[:1]
        return draw(st.one_of(st.none(), _PLAIN_PROPERTIES)), _raw_batch(items), True
    body = _raw_batch(items)
    cut = draw(st.sampled_from(["none", "truncate", "size", "utf8"]))
    if cut == "truncate" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif cut == "size" and body:
        at = draw(st.integers(0, len(body) - 4))
        body = body[:at] + draw(st.binary(min_size=4, max_size=4)) + body[at + 4:]
    elif cut == "utf8":
        body = _raw_batch([*items, (b"", 0, b"K\x01\xc3")])
    header = draw(_ANY_PROPERTIES)
    refused = any(item.split("\x01")[0] in ("DELAY", "CLUSTER") for item in header.split("\x02"))
    return header, body, False if refused or not body or cut == "utf8" else None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.tuples(_generated_batch(), st.integers(0, 3)), min_size=1, max_size=8))
def test_generated_batches_store_and_answer_what_the_reference_does(
        monkeypatch: pytest.MonkeyPatch, batches: list[tuple[tuple[str | None, bytes, bool | None], int]]) -> None:
    # a single send first, so that the store has its first segment (the reference path makes it)
    requests = [_request("Plain", None, opaque=1)] + [_batch("Plain", header, body, opaque=i + 2, queue_id=queue_id)
                                                       for i, ((header, body, _), queue_id) in enumerate(batches)]
    with tempfile.TemporaryDirectory() as tmp:
        native_root, reference_root = Path(tmp) / "native", Path(tmp) / "reference"
        native = asyncio.run(_run(native_root, True, monkeypatch, requests))
        reference = asyncio.run(_run(reference_root, False, monkeypatch, requests))
        _assert_same(native_root, native, reference_root, reference)
    for i, (((_, _, plain), _), answered) in enumerate(zip(batches, native.native_answers[1:], strict=True)):
        if plain is True and not answered:
            assert _starts_a_segment(native.responses[i + 1]), f"batch {i} is plain and the segment had room"
        elif plain is False:
            assert not answered, f"batch {i} is not plain"


def test_sends_pipelined_on_one_socket_are_put_together_in_the_order_sent(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer's sends written back to back on a real socket: the server hands the ones it read
    together to the group handler, which puts runs of them in one call; each is answered SEND_OK
    with its own queue offset, and the offsets and the stored records follow the order sent. (The
    server's serving of plain sends before they become commands is off here, as it is for a
    connection with requests pending: test_send_served.py tests it.)"""
    count = 200

    async def main() -> None:
        broker = BrokerController(
            BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                         http_listen_port=0, grpc_listen_port=0),
            StoreConfig(store_path_root_dir=str(tmp_path)))
        await broker.start()
        try:
            broker.topic_config_manager.put(TopicConfig("Plain", read_queue_nums=1, write_queue_nums=1))
            put_plain_sends = broker.store.put_plain_sends
            group_sizes: list[int] = []

            def spied(sends: list[PlainSendRequest], **kwargs: Any) -> list[PlainPut]:
                puts = put_plain_sends(sends, **kwargs)
                group_sizes.append(len(puts))
                return puts

            monkeypatch.setattr(broker.store, "put_plain_sends", spied)
            broker.remoting.serve_frames = None
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.remoting.port)
            writer.write(b"".join(_request("Plain", f"UNIQ_KEY\x01K{i}\x02WAIT\x01true", body=f"m{i}".encode(),
                                           opaque=i).encode() for i in range(count)))
            await writer.drain()
            decoder, responses = FrameDecoder(), []
            while len(responses) < count:
                responses += decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
            writer.close()
            assert sorted(r.opaque for r in responses) == list(range(count))
            assert all(r.code == ResponseCode.SUCCESS for r in responses)
            for response in responses:
                assert int(response.ext_fields["queueOffset"]) == response.opaque
                _, offset = decode_message_id(response.ext_fields["msgId"])
                stored = broker.store.commit_log.look_message_by_offset(offset)
                assert stored is not None and stored.body == f"m{response.opaque}".encode()
                assert stored.queue_offset == response.opaque
            assert max(group_sizes) > 1, group_sizes  # the server did hand over groups
            assert sum(group_sizes) >= count - 1  # the first send made the segment on the reference path
        finally:
            await broker.stop(grace_s=1.0)

    asyncio.run(main())
