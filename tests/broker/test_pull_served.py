"""Differential test of the pulls served before they become commands: ``PullServe::serve_frames``
(native/src/pull_serve.rs) through ``Connection.data_received`` against the reference path.

Two brokers in this process, with the same messages stored at a fixed clock, read the same byte
stream of requests on a real socket: one as it runs (the PULL_MESSAGE requests at the head of a
read served natively, the rest through the handlers), one with serving off (every pull decoded
and processed by ``PullMessageProcessor.process``). Each response frame (by opaque), the committed
offsets and the pull statistics must be identical. The stream has pulls of every kind the serving
leaves to the usual path (nothing found, held by long polling, refused, SQL92, a malformed or
one-way frame, a binary header, a language RocketMQ does not name) between served ones, and the
changes a served pull's cached decision depends on: a heartbeat that registers a push consumer's
subscription, a second one that changes it, an admin request that takes the topic's read
permission away. It is written whole, and cut into pieces that split frames.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from test_send_plain import _request, sequence_broker
from test_send_served import _with_header, fixed_peer_connection, write_in_pieces
from tool_support import require_tool

from rocketstore.broker.processor import pull as pull_module
from rocketstore.common.native import NATIVE
from rocketstore.common.perm_name import PERM_WRITE
from rocketstore.common.subscription_group_config import SubscriptionGroupConfig
from rocketstore.remoting.body import ConsumerData, HeartbeatData, SubscriptionData
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import FrameDecoder, RemotingCommand
from rocketstore.remoting.headers import PullMessageRequestHeader, PullSysFlag

require_tool("the native extension with PullServe", NATIVE is not None and hasattr(NATIVE, "PullServe"),
             "`pip install -e .` builds it when cargo is on PATH (and ROCKETSTORE_NATIVE is not 0)")

SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
COMMIT = int(PullSysFlag.COMMIT_OFFSET)
SUSPEND = int(PullSysFlag.SUSPEND)
TAGS = "ABC"
#: messages stored per queue of the topic Plain (4 queues), tags A, B, C in turn
PER_QUEUE = 40
#: the pulls the serving takes when each starts a read: the tag subscriptions that find messages
SERVABLE = {1, 2, 3, 8, 10, 11, 17, 22, 24, 27}


def _pull(opaque: int, *, group: str = "PullG", topic: str = "Plain", queue_id: int = 0, offset: int = 0,
          max_nums: int = 32, sys_flag: int = SUBSCRIPTION, commit: int = 0, suspend_ms: int = 0,
          subscription: str | None = "*", expression_type: str | None = None,
          language: LanguageCode = LanguageCode.JAVA,
          serialize: SerializeType = SerializeType.JSON) -> RemotingCommand:
    header = PullMessageRequestHeader(
        consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset, max_msg_nums=max_nums,
        sys_flag=sys_flag, commit_offset=commit, suspend_timeout_millis=suspend_ms, subscription=subscription,
        sub_version=opaque, expression_type=expression_type)
    return RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=header.to_ext_fields(),
                           version=435, language=language, serialize_type=serialize)


def _heartbeat(opaque: int, group: str, expression: str, version: int) -> RemotingCommand:
    beat = HeartbeatData(client_id="consumer@1", consumer_data_set=[ConsumerData(
        group_name=group, consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        subscription_data_set=[SubscriptionData(topic="Plain", sub_string=expression, sub_version=version)])])
    return RemotingCommand(code=RequestCode.HEART_BEAT, opaque=opaque, body=beat.encode(), version=435)


class Stream(NamedTuple):
    #: (frame, opaque, whether it is answered)
    frames: list[tuple[bytes, int, bool]]
    #: opaques of the pulls the serving must take whatever the reads (each at the head of its read or
    #: after served ones; the rest are when a read starts with them)
    served: set[int]

    @property
    def data(self) -> bytes:
        return b"".join(frame for frame, _, _ in self.frames)

    @property
    def answered(self) -> list[int]:
        return [opaque for _, opaque, answers in self.frames if answers]


def _stream() -> Stream:
    frames: list[tuple[bytes, int, bool]] = []
    served: set[int] = set()

    def add(cmd: RemotingCommand | bytes, opaque: int, *, answers: bool = True, serve: bool = False) -> None:
        frames.append((cmd if isinstance(cmd, bytes) else cmd.encode(), opaque, answers))
        if serve:
            served.add(opaque)

    add(_pull(1), 1, serve=True)
    add(_pull(2, queue_id=1, max_nums=4), 2, serve=True)
    add(_pull(3, queue_id=2, subscription="TagA || TagB"), 3, serve=True)
    add(_pull(4, queue_id=3, subscription="TagZ"), 4)  # nothing matches: PULL_RETRY_IMMEDIATELY
    add(_pull(5, offset=PER_QUEUE), 5)  # PULL_NOT_FOUND
    add(_pull(6, offset=PER_QUEUE, sys_flag=SUBSCRIPTION | SUSPEND, suspend_ms=100), 6)  # held, then NOT_FOUND
    add(_pull(7, offset=PER_QUEUE + 5), 7)  # PULL_OFFSET_MOVED
    add(_pull(8, queue_id=1, offset=4, sys_flag=SUBSCRIPTION | COMMIT, commit=3), 8)
    add(_heartbeat(9, "PushG", "TagB", 1), 9)
    add(_pull(10, group="PushG", sys_flag=COMMIT, commit=2, subscription=None), 10)  # the registered TagB
    add(_pull(11, group="PushG2", sys_flag=0, subscription=None), 11)  # nothing registered: everything
    add(_pull(12, group="SqlG", sys_flag=0, subscription="a > 1", expression_type="SQL92"), 12)
    add(_pull(13, subscription="a > 1", expression_type="SQL92"), 13)  # SQL92 is off: refused
    add(_pull(14, group="OffG"), 14)  # the group may not consume: NO_PERMISSION
    add(_pull(15, topic="Nope"), 15)  # TOPIC_NOT_EXIST
    add(_pull(16, queue_id=9), 16)  # the queue id is out of bound: SYSTEM_ERROR
    add(_pull(17, queue_id=3, language=LanguageCode.GO), 17)
    add(_with_header(_pull(18, queue_id=2).encode(), '"JAVA"', '"KLINGON"'), 18)  # answered as OTHER
    add(_with_header(_pull(19).encode(), '"queueId":"0"', '"queueId":"x"'), 19)  # SYSTEM_ERROR, malformed
    add(_with_header(_pull(20).encode(), '"flag":0', '"flag":2'), 20, answers=False)  # one-way: no answer
    add(_pull(21, queue_id=1, serialize=SerializeType.ROCKETMQ), 21)  # a binary header: the general path
    add(_with_header(_pull(22).encode(), '"queueId":"0"', '"queueId":"3","queueId":"2"'), 22)  # the last counts
    add(_pull(27, group="PushG", queue_id=1, sys_flag=0, subscription=None), 27)  # TagB, decided afresh
    add(_heartbeat(23, "PushG", "TagC", 2), 23)  # a newer subscription replaces TagB, nothing else changes
    add(_pull(24, group="PushG", queue_id=2, sys_flag=0, subscription=None), 24)  # now TagC
    add(RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_TOPIC, opaque=25, version=435, ext_fields={
        "topic": "Plain", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
        "perm": str(PERM_WRITE), "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), 25)
    add(_pull(26), 26)  # the topic is not readable any more: NO_PERMISSION
    return Stream(frames, served)


def _responses(commands: list[RemotingCommand]) -> list[RemotingCommand]:
    """The responses among what the broker wrote (a heartbeat's group change also brings a
    NOTIFY_CONSUMER_IDS_CHANGED request)."""
    return [cmd for cmd in commands if cmd.is_response]


class Outcome(NamedTuple):
    responses: dict[int, bytes]
    stats: tuple[object, ...]
    served: set[int]


async def _serve(root: Path, native: bool, stream: Stream, how: str, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    """The stream through a broker, written ``how``: ``whole``, ``cut`` into pieces that split
    frames, or in ``lockstep`` (each frame written once the one before was answered, so that each
    starts a read)."""
    async with sequence_broker(root, "async", monkeypatch) as (broker, patched):
        if not native:  # every pull through PullMessageProcessor.process
            broker.remoting.serve_frames = None
        broker.subscription_group_manager.put(SubscriptionGroupConfig(group_name="OffG", consume_enable=False))
        served: set[int] = set()
        found_frame = broker.store.found_frame

        def spied(*args: Any) -> tuple[bytes, int, int] | None:
            done = found_frame(*args)
            if done is not None:
                served.add(args[5])  # the request's opaque
            return done

        patched.setattr(broker.store, "found_frame", spied)
        reader, writer = await fixed_peer_connection(broker)
        decoder = FrameDecoder()
        sends = [_request("Plain", f"TAGS\x01Tag{TAGS[i % len(TAGS)]}", queue_id=i % 4, opaque=10_000 + i)
                 for i in range(4 * PER_QUEUE)]
        writer.write(b"".join(send.encode() for send in sends))
        answers: list[RemotingCommand] = []
        while len(answers) < len(sends):
            answers += decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
        assert {a.code for a in answers} == {ResponseCode.SUCCESS}
        assert await asyncio.to_thread(broker.store.reput_service.wait_caught_up, 30.0)
        received: list[RemotingCommand] = []
        if how == "lockstep":
            for frame, _, answers_it in stream.frames:
                writer.write(frame)
                await writer.drain()
                if not answers_it:
                    await asyncio.sleep(0.05)
                    continue
                wanted = len(received) + 1
                while len(received) < wanted:
                    received += _responses(decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30)))
        else:
            await write_in_pieces(writer, stream.data, 61 if how == "cut" else 1)
        host, port = writer.get_extra_info("sockname")[:2]
        while len(received) < len(stream.answered):
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            assert chunk, f"connection closed after {len(received)} responses"
            received += _responses(decoder.feed(chunk))
        responses = {response.opaque: response.encode().replace(f"{host}:{port}".encode(), b"CONSUMER")
                     for response in received}
        writer.close()
        assert sorted(responses) == sorted(stream.answered)
        stats, store_stats = broker.broker_stats_manager, broker.store.stats
        return Outcome(responses, (
            {key: (nums.value, nums.times) for key, nums in stats.group_get_nums.items()},
            {key: (size.value, size.times) for key, size in stats.group_get_size.items()},
            {key: item.times for key, item in stats.group_get_latency.items()},
            (stats.broker_get_nums.value, stats.broker_get_nums.times), sum(stats.pull_latency.counts),
            store_stats.get_message_times_total_found, store_stats.get_message_times_total_miss,
            store_stats.get_message_transferred_msg_count,
            {group: broker.consumer_offset_manager.query_offsets(group, "Plain") for group in ("PullG", "PushG")},
        ), served)


@pytest.mark.parametrize("how", ["whole", "cut", "lockstep"])
def test_served_pulls_answer_what_the_reference_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     how: str) -> None:
    stream = _stream()
    native = asyncio.run(_serve(tmp_path / "native", True, stream, how, monkeypatch))
    reference = asyncio.run(_serve(tmp_path / "reference", False, stream, how, monkeypatch))
    assert reference.served == set()
    for opaque, frame in reference.responses.items():
        assert native.responses[opaque] == frame, f"the response to opaque {opaque}"
    assert native.stats == reference.stats
    assert stream.served <= native.served <= SERVABLE
    if how == "lockstep":
        assert native.served == SERVABLE
    # JSON SUCCESS answers: the servable pulls, and the KLINGON one the usual path answers (the
    # binary-headed 21 is answered SUCCESS in a binary header)
    found = {opaque for opaque, frame in native.responses.items() if frame[8:].startswith(b'{"code":0,')}
    assert found == SERVABLE | {9, 18, 23, 25}
    # the push consumer's pulls follow its registered subscription: TagB, then TagC
    for opaque, tag in ((10, b"TagB"), (27, b"TagB"), (24, b"TagC")):
        assert {t for t in (b"TagA", b"TagB", b"TagC") if t in native.responses[opaque]} == {tag}, opaque


def test_a_read_is_served_up_to_its_answers_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answers served of one read stop at SERVED_BYTES_PER_READ (here 1 byte: after the first
    pull), the rest of the read takes the usual path (which pauses a client that does not read),
    and every answer is still the reference's."""
    monkeypatch.setattr(pull_module, "SERVED_BYTES_PER_READ", 1)
    stream = _stream()
    native = asyncio.run(_serve(tmp_path / "native", True, stream, "whole", monkeypatch))
    reference = asyncio.run(_serve(tmp_path / "reference", False, stream, "whole", monkeypatch))
    assert native.responses == reference.responses
    assert native.stats == reference.stats
    # 1, 2 and 3 arrive in one read (unless the socket split it just there): only the first is served
    assert 1 in native.served and not {2, 3} <= native.served and native.served <= SERVABLE
