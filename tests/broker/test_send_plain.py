"""Differential test of the plain send path: the native one-call SEND_MESSAGE_V2 against the reference.

Two brokers in this process take the same sequence of sends through their registered SEND_MESSAGE_V2
/ SEND_MESSAGE / SEND_BATCH_MESSAGE handlers (as a connection calls them inline), one with the
native plain send path, one with the processor's native switch off (the path every send took before:
the header decoded, the checks, ``put_message``). The clock is fixed, so the CommitLogs, the
ConsumeQueues (once dispatched) and every response frame must be byte-identical. The sequence mixes
plain sends (whose responses must come from the native put) with every kind the plain path must
leave to the reference: delays, timers, half messages, ``WAIT=false``, retry topics, batches,
unknown topics, out-of-range queues, malformed fields and a record that does not fit the segment's
room.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from tool_support import require_tool

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.broker_config import BrokerConfig
from rocketstore.broker.processor import send as send_module
from rocketstore.broker.server import Connection
from rocketstore.common.message import BatchItem, HostAddress, encode_batch
from rocketstore.common.native import NATIVE
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.config import StoreConfig

require_tool("the native extension with PlainSend", NATIVE is not None and hasattr(NATIVE, "PlainSend"),
             "`pip install -e .` builds it when cargo is on PATH (and ROCKETSTORE_NATIVE is not 0)")

NOW_S = 2_000_000_000.0  # after any real start: the broker refuses sends timed before startAcceptSendRequestTimeStamp
SEGMENT = 64 * 1024
ROLLING_SENDS = 60


def _request(topic: str, properties: str | None, *, body: bytes = b"x" * 100, queue_id: int = 0, code: int =
             RequestCode.SEND_MESSAGE_V2, opaque: int = 1, batch: bool = False, **fields: str) -> RemotingCommand:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4, queue_id=queue_id,
        sys_flag=0, born_timestamp=1_600_000_000_000 + opaque, flag=opaque % 3, properties=properties,
        reconsume_times=opaque % 2, batch=batch)
    ext = header.to_ext_fields() if code == RequestCode.SEND_MESSAGE else header.to_v2_ext_fields()
    ext.update(fields)
    return RemotingCommand(code=code, opaque=opaque, ext_fields=ext, body=body, version=435)


def _sends() -> list[tuple[RemotingCommand, bool]]:
    """(request, whether the plain path must answer it) in order."""
    java = "UNIQ_KEY\x017F0000010000{:08X}\x02WAIT\x01true\x02TAGS\x01TagA\x02"
    sends: list[tuple[RemotingCommand, bool]] = []
    opaque = 0

    def add(plain: bool, topic: str, properties: str | None, **kwargs: object) -> None:
        nonlocal opaque
        opaque += 1
        sends.append((_request(topic, properties, opaque=opaque, **kwargs), plain))  # type: ignore[arg-type]

    for i in range(40):
        add(True, "Plain", java.format(i), queue_id=i % 4, body=bytes([i]) * (i * 37 % 900))
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
    add(False, "Plain", "", batch=True, code=RequestCode.SEND_BATCH_MESSAGE,
        body=encode_batch([BatchItem(b"b0", 0, {"TAGS": "x"}), BatchItem(b"b1", 0, {})]))
    for i in range(ROLLING_SENDS):  # past the 64 KiB segment: the one that does not fit rolls it on the reference path
        add(True, "Plain", java.format(100 + i), body=b"y" * 1500)
    return sends


class Run(NamedTuple):
    frames: list[bytes]
    native_answers: list[bool]
    #: each response's code, opaque, language, version and header fields, as a reader of the object sees them
    responses: list[tuple[int, int, int, int, dict[str, str]]]
    #: what the sends added to the store's and the broker's statistics (latencies left out: they are times)
    stats: tuple[object, ...]


async def _run(root: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> Run:
    broker = BrokerController(
        BrokerConfig(broker_ip1="127.0.0.1", listen_host="127.0.0.1", listen_port=0, namesrv_listen_port=0,
                     http_listen_port=0, grpc_listen_port=0, max_dispatch_lag_bytes=0),
        StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT,
                    message_delay_level="1d 1d 1d"))  # the delayed send stays in SCHEDULE_TOPIC_XXXX
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
            conn = Connection(broker.remoting)
            conn.peer_host = HostAddress("10.1.2.3", 54321)
            frames, native_answers, responses = [], [], []
            patched.setattr(send_module, "_RANDOM", random.Random(7))  # queueId -1 picks the same queue
            if not native:
                patched.setattr(send_module, "NATIVE", None)
            for request, _ in _sends():
                reply = conn._call_handler(request)  # as the server calls it inline: errors answered
                assert isinstance(reply, RemotingCommand), reply
                frames.append(reply.encode())
                native_answers.append(isinstance(reply, send_module.SendOkResponse))
                responses.append((reply.code, reply.opaque, reply.language, reply.version, reply.ext_fields))
            assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
            store_stats, broker_stats = broker.store.stats, broker.broker_stats_manager
            stats = (store_stats.put_message_times_total, store_stats.put_message_size_total,
                     dict(store_stats.put_by_topic), store_stats.put_message_failed_times,
                     sum(store_stats.put_distribute_time), sum(broker_stats.send_latency.counts),
                     {topic: (nums.value, nums.times) for topic, nums in broker_stats.topic_put_nums.items()},
                     {topic: (size.value, size.times) for topic, size in broker_stats.topic_put_size.items()},
                     (broker_stats.broker_put_nums.value, broker_stats.broker_put_nums.times))
            return Run(frames, native_answers, responses, stats)
        finally:
            await broker.stop(grace_s=1.0)


def _files(root: Path, folder: str) -> Iterator[tuple[str, bytes]]:
    for path in sorted((root / folder).rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes()


def test_plain_sends_store_and_answer_what_the_reference_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    native_root, reference_root = tmp_path / "native", tmp_path / "reference"
    native = asyncio.run(_run(native_root, True, monkeypatch))
    reference = asyncio.run(_run(reference_root, False, monkeypatch))
    native_frames, native_answers = native.frames, native.native_answers
    reference_frames, reference_answers = reference.frames, reference.native_answers
    expected = [plain for _, plain in _sends()]
    rolled = len(expected) - ROLLING_SENDS
    assert native_answers[:rolled] == expected[:rolled]
    assert native_answers[rolled:].count(False) == 1  # the send that found the segment full
    assert not any(reference_answers)
    for i, (mine, theirs) in enumerate(zip(native_frames, reference_frames, strict=True)):
        assert mine == theirs, f"send {i}"
    assert native.responses == reference.responses
    assert native.stats == reference.stats
    for folder in ("commitlog", "consumequeue"):
        native_files = dict(_files(native_root, folder))
        assert len(native_files) > (1 if folder == "commitlog" else 4)
        reference_files = dict(_files(reference_root, folder))
        assert native_files.keys() == reference_files.keys()
        for name, data in native_files.items():
            other = reference_files[name]
            first = next((i for i, (a, b) in enumerate(zip(data, other, strict=True)) if a != b), None)
            assert first is None, f"{name} differs from byte {first}: {data[first - 8:first + 64]!r} != " \
                                  f"{other[first - 8:first + 64]!r}"
