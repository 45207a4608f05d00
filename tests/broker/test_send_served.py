"""Differential test of the plain sends served before they become commands: ``PlainSend::serve_frames``
(native/src/send.rs) through ``Connection.data_received`` against the reference path.

Two brokers in this process read the same byte stream of requests on a real socket: one as it
runs (the plain SEND_MESSAGE_V2 requests at the head of a read served in one native call, the rest
through the group handler and the handlers), one with the native send path off (every send decoded,
checked and put by the reference). The clock is fixed, so each response frame (by opaque), the
CommitLogs, the ConsumeQueues and the statistics must be identical. The stream is
test_send_plain's sequence (plain sends and batches, and every kind the plain path leaves to the
reference, the segment's end among them) plus frames only a raw stream carries: a key given twice
in the JSON header, a language RocketMQ does not name, a one-way send. It is written whole, and cut
into pieces that split frames, so that reads start and end inside frames. On a SYNC_FLUSH store
nothing is served (its answers wait), and the outcome is the same. The segment's end within one
read is tested on its own. Last, an RPC hook on every request (where the ACL check sits) turns
serving off: no send gets past it unchecked.
"""

from __future__ import annotations

import asyncio
import random
import struct
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from test_send_plain import ROLLING, _files, _request, _sends, send_stats, sequence_broker
from tool_support import require_tool

from rocketstore.broker.broker import BrokerController
from rocketstore.broker.processor import send as send_module
from rocketstore.common.message import HostAddress
from rocketstore.common.native import NATIVE
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import FrameDecoder
from rocketstore.store.commit_log import ServedSends

require_tool("the native extension with PlainSend.serve_frames",
             NATIVE is not None and hasattr(NATIVE, "PlainSend") and hasattr(NATIVE.PlainSend, "serve_frames"),
             "`pip install -e .` builds it when cargo is on PATH (and ROCKETSTORE_NATIVE is not 0)")


def _with_header(frame: bytes, old: str, new: str) -> bytes:
    """``frame`` (with its length prefix, a JSON header) with ``old`` in its header text made ``new``."""
    header_length = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    header = frame[8:8 + header_length].decode()
    assert header.count(old) == 1, header
    header = header.replace(old, new)
    body = frame[8 + header_length:]
    data = header.encode()
    return struct.pack(">ii", 4 + len(data) + len(body), len(data)) + data + body


def _raw_frames(first_opaque: int) -> list[tuple[bytes, int, bool]]:
    """(frame, opaque, whether it is answered) of the frames a RemotingCommand cannot make."""
    frames = []
    opaque = first_opaque
    # "e" (queueId) twice: the last one counts, in Python's dict as natively
    twice = _request("Plain", "TAGS\x01D", opaque=opaque, queue_id=1).encode()
    frames.append((_with_header(twice, '"e":"1"', '"e":"0","e":"2"'), opaque, True))
    opaque += 1
    # a language RocketMQ does not name: decoded as OTHER, answered as OTHER
    other = _request("Plain", "TAGS\x01L", opaque=opaque).encode()
    frames.append((_with_header(other, '"PYTHON"', '"KLINGON"'), opaque, True))
    opaque += 1
    # a one-way send: stored, never answered
    oneway = _request("Plain", "TAGS\x01O", opaque=opaque).encode()
    frames.append((_with_header(oneway, '"flag":0', '"flag":2'), opaque, False))
    return frames


class Stream(NamedTuple):
    data: bytes
    #: opaques of the requests that are answered
    answered: list[int]
    #: opaques of the single sends the serving path may take (plain, or plain until the segment's end)
    plain_singles: set[int]


def _stream() -> Stream:
    sends = _sends()
    frames = [request.encode() for request, _ in sends]
    answered = [request.opaque for request, _ in sends]
    plain_singles = {request.opaque for request, plain in sends
                     if plain is not False and request.code == RequestCode.SEND_MESSAGE_V2}
    for frame, opaque, is_answered in _raw_frames(len(sends) + 1):
        frames.append(frame)
        if is_answered:
            answered.append(opaque)
    return Stream(b"".join(frames), answered, plain_singles)


async def fixed_peer_connection(broker: BrokerController) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``broker`` whose peer address the broker takes for 10.1.2.3:54321: records
    keep the producer's address (bornHost), the same one for every broker a test compares."""
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.remoting.port)
    while not broker.remoting.connections:
        await asyncio.sleep(0.001)
    next(iter(broker.remoting.connections)).peer_host = HostAddress("10.1.2.3", 54321)
    return reader, writer


async def write_in_pieces(writer: asyncio.StreamWriter, data: bytes, pieces: int) -> None:
    """``data`` written whole (``pieces`` 1) or cut at places that split frames, each piece its own read."""
    cuts = sorted(random.Random(pieces).sample(range(1, len(data)), pieces - 1))
    for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
        writer.write(data[start:end])
        await writer.drain()
        if pieces > 1:
            await asyncio.sleep(0.005)


class Outcome(NamedTuple):
    responses: dict[int, bytes]
    stats: tuple[object, ...]
    served: set[int]


async def _serve(root: Path, native: bool, stream: Stream, pieces: int, mode: str,
                 monkeypatch: pytest.MonkeyPatch) -> Outcome:
    async with sequence_broker(root, mode, monkeypatch) as (broker, patched):
        if not native:  # every send through the reference path, as ROCKETSTORE_NATIVE=0 runs it
            patched.setattr(send_module, "NATIVE", None)
            broker.remoting.group_handlers.clear()
            broker.remoting.serve_frames = None
        served: set[int] = set()
        serve_plain_frames = broker.store.serve_plain_frames

        def spied(*args: Any) -> ServedSends:
            done = serve_plain_frames(*args)
            served.update(response.opaque for response in FrameDecoder().feed(done.responses))
            return done

        patched.setattr(broker.store, "serve_plain_frames", spied)
        reader, writer = await fixed_peer_connection(broker)
        # the first request alone: it makes the first segment (on the usual path: serving needs one)
        first = struct.unpack_from(">i", stream.data)[0] + 4
        writer.write(stream.data[:first])
        await writer.drain()
        decoder = FrameDecoder()
        early = decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
        await write_in_pieces(writer, stream.data[first:], pieces)
        # remarks name the producer's address: each broker saw another port
        host, port = writer.get_extra_info("sockname")[:2]
        responses = {response.opaque: response.encode() for response in early}
        while len(responses) < len(stream.answered):
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            assert chunk, f"connection closed after {len(responses)} responses"
            for response in decoder.feed(chunk):
                responses[response.opaque] = response.encode().replace(f"{host}:{port}".encode(), b"PRODUCER")
        writer.close()
        assert sorted(responses) == sorted(stream.answered)
        return Outcome(responses, await send_stats(broker), served)



@pytest.mark.parametrize("pieces", [1, 97], ids=["whole", "cut"])
@pytest.mark.parametrize("mode", ["async", "sync-flush"])
def test_served_sends_store_and_answer_what_the_reference_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               mode: str, pieces: int) -> None:
    stream = _stream()
    native = asyncio.run(_serve(tmp_path / "native", True, stream, pieces, mode, monkeypatch))
    reference = asyncio.run(_serve(tmp_path / "reference", False, stream, pieces, mode, monkeypatch))
    assert not reference.served
    for opaque, frame in reference.responses.items():
        assert native.responses[opaque] == frame, f"the response to opaque {opaque}"
    assert native.stats == reference.stats
    for folder in ("commitlog", "consumequeue"):
        assert dict(_files(tmp_path / "native", folder)) == dict(_files(tmp_path / "reference", folder)), folder
    if mode != "async":
        assert not native.served  # its answers wait for the flush: the group handler's futures
        return
    assert native.served <= stream.plain_singles | {len(_sends()) + i for i in (1, 2, 3)}
    # the plain sends after the first, up to the first one that is not (test_send_plain's sequence:
    # opaque 46 is delayed), are served whatever the reads; later ones are when a read starts with them
    assert set(range(2, 46)) <= native.served
    assert all(native.responses[opaque][8:].startswith(b'{"code":0,') for opaque in native.served)


def test_a_rolling_segment_ends_the_serving_at_the_send_that_does_not_fit(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The sends past a segment's end in one read: served up to the one that does not fit, which
    the usual path stores at the head of a new segment; none is lost or stored twice."""
    sends = [(request, plain) for request, plain in _sends() if plain is ROLLING
             and request.code == RequestCode.SEND_MESSAGE_V2]
    first = _request("Plain", None, opaque=0)  # makes the first segment
    data = first.encode() + b"".join(request.encode() for request, _ in sends)
    stream = Stream(data, [0] + [request.opaque for request, _ in sends], {request.opaque for request, _ in sends})
    native = asyncio.run(_serve(tmp_path / "native", True, stream, 1, "async", monkeypatch))
    reference = asyncio.run(_serve(tmp_path / "reference", False, stream, 1, "async", monkeypatch))
    assert native.responses == reference.responses
    assert dict(_files(tmp_path / "native", "commitlog")) == dict(_files(tmp_path / "reference", "commitlog"))
    assert native.served and native.served < stream.plain_singles
    assert all(frame[8:].startswith(b'{"code":0,') for frame in native.responses.values())


def test_nothing_is_served_past_an_rpc_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With an RPC hook on every request (the ACL check's place), a plain send is not served ahead
    of it: the hook refuses it, and nothing is stored."""

    async def main() -> None:
        async with sequence_broker(tmp_path, "async", monkeypatch) as (broker, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.remoting.port)
            first = _request("Plain", None, opaque=1)  # stored: it makes the first segment
            writer.write(first.encode())
            await writer.drain()
            decoder = FrameDecoder()
            responses = decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
            assert [r.code for r in responses] == [ResponseCode.SUCCESS]
            end = broker.store.commit_log.max_offset
            broker.remoting.before_request = lambda request, peer: request.response(
                ResponseCode.NO_PERMISSION, f"refused {request.opaque}")
            writer.write(b"".join(_request("Plain", None, opaque=i).encode() for i in range(2, 12)))
            await writer.drain()
            while len(responses) < 11:
                responses += decoder.feed(await asyncio.wait_for(reader.read(1 << 16), 30))
            writer.close()
            assert [(r.code, r.remark) for r in responses[1:]] == [
                (ResponseCode.NO_PERMISSION, f"refused {i}") for i in range(2, 12)]
            assert broker.store.commit_log.max_offset == end

    asyncio.run(main())
