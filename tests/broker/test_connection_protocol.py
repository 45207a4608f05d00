"""Connection as an asyncio Protocol, driven byte by byte: framing, flow control both ways, errors,
handlers that answer inline (no task) with their responses to one read written at once, and
handlers that return a future, whose responses that come due together are written at once.

:class:`FakeTransport` stands in for asyncio's socket transport. A real socket cannot be made to
split a frame at a chosen byte, nor to pass its write buffer's high-water mark at a chosen
response, nor be held there while the test looks; the fake can, and it does what asyncio's
transport does at those points (it calls ``pause_writing`` when its buffer passes the
high-water mark the protocol set, ``resume_writing`` when drained below the low one). The
end-to-end behaviour over real sockets is in test_flow_control.py and test_malformed_requests.py.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from rocketstore.broker.server import (
    COALESCE_MAX_BYTES,
    MAX_IN_FLIGHT_PER_CONNECTION,
    WRITE_BUFFER_HIGH,
    WRITE_BUFFER_LOW,
    Connection,
    RemotingServer,
    Reply,
    RequestError,
)
from rocketstore.remoting.codes import ResponseCode
from rocketstore.remoting.command import RPC_ONEWAY, FrameDecoder, MalformedRequestError, RemotingCommand

ECHO, GATED, BIG, MALFORMED, BUGGY = 1, 2, 3, 4, 5
# handlers that answer inline (plain functions), and one that waits only for even opaques
INLINE_ECHO, INLINE_BIG, INLINE_MALFORMED, INLINE_BUGGY, INLINE_REFUSED, REFUSED, FAST_OR_GATED = range(6, 13)
# a handler that returns a future of its response (as a plain send waiting for its slave does)
PROMISED = 13


class FakeTransport(asyncio.Transport):
    """Records what the protocol writes and asks; buffers writes until :meth:`drain`."""

    def __init__(self, protocol: Connection) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = bytearray()  # everything ever written, in order
        self.writes = 0  # calls that wrote (writelines is one: asyncio's joins the buffers)
        self.unsent = 0  # what a socket would still hold in its buffer
        self.high = self.low = 0
        self.writing_paused = False
        self.reading = True
        self.reading_calls: list[str] = []
        self.closing = False
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        assert high is not None and low is not None
        self.high, self.low = high, low

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        self.written += data
        self.unsent += len(data)
        if self.unsent > self.high and not self.writing_paused:
            self.writing_paused = True
            self.protocol.pause_writing()

    def drain(self) -> None:
        """The peer read everything: the buffer empties and writing resumes, as asyncio does."""
        self.unsent = 0
        if self.writing_paused:
            self.writing_paused = False
            self.protocol.resume_writing()

    def pause_reading(self) -> None:
        self.reading = False
        self.reading_calls.append("pause")

    def resume_reading(self) -> None:
        self.reading = True
        self.reading_calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = self.aborted = True

    def responses(self) -> list[RemotingCommand]:
        decoder = FrameDecoder()
        commands = decoder.feed(bytes(self.written))
        assert decoder.buffered == 0
        return commands


class Harness:
    """A RemotingServer (never started) with test handlers, and connections over fake transports."""

    def __init__(self) -> None:
        self.server = RemotingServer("127.0.0.1", 0)
        self.gates: dict[int, asyncio.Future[None]] = {}
        self.server.register(ECHO, self._echo)
        self.server.register(GATED, self._gated)
        self.server.register(BIG, self._big)
        self.server.register(MALFORMED, self._malformed)
        self.server.register(BUGGY, self._buggy)
        self.server.register(INLINE_ECHO, self._inline_echo)
        self.server.register(INLINE_BIG, self._inline_big)
        self.server.register(INLINE_MALFORMED, self._inline_malformed)
        self.server.register(INLINE_BUGGY, self._inline_buggy)
        self.server.register(INLINE_REFUSED, self._inline_refused)
        self.server.register(REFUSED, self._refused)
        self.server.register(FAST_OR_GATED, self._fast_or_gated)
        self.server.register(PROMISED, self._promised)
        self.promises: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.promised: dict[int, RemotingCommand] = {}

    def connect(self) -> tuple[Connection, FakeTransport]:
        conn = Connection(self.server)
        transport = FakeTransport(conn)
        conn.connection_made(transport)
        return conn, transport

    def gate(self, opaque: int) -> asyncio.Future[None]:
        if opaque not in self.gates:
            self.gates[opaque] = asyncio.get_running_loop().create_future()
        return self.gates[opaque]

    def open_gates(self, opaques: range) -> None:
        for opaque in opaques:
            self.gate(opaque).set_result(None)

    async def _echo(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=request.body)

    async def _gated(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        await self.gate(request.opaque)
        return request.response(ResponseCode.SUCCESS)

    async def _big(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        await self.gate(request.opaque)
        return request.response(ResponseCode.SUCCESS, body=b"b" * (WRITE_BUFFER_HIGH // 3))

    async def _malformed(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise MalformedRequestError("TEST header field 'queueId' is missing")

    async def _buggy(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("a real bug")

    async def _refused(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RequestError(ResponseCode.NO_PERMISSION, "not for you")

    def _inline_echo(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=request.body)

    def _inline_big(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=b"b" * (WRITE_BUFFER_HIGH // 3))

    def _inline_malformed(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise MalformedRequestError("TEST header field 'queueId' is missing")

    def _inline_buggy(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("a real bug")

    def _inline_refused(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        raise RequestError(ResponseCode.NO_PERMISSION, "not for you")

    def _fast_or_gated(self, conn: Connection, request: RemotingCommand) -> Reply:
        """Answers odd opaques inline; even ones wait for their gate (as a SYNC_FLUSH send waits)."""
        if request.opaque % 2:
            return request.response(ResponseCode.SUCCESS)
        return self._gated(conn, request)


    def _promised(self, conn: Connection, request: RemotingCommand) -> Reply:
        self.promises[request.opaque] = promise = asyncio.get_running_loop().create_future()
        self.promised[request.opaque] = request
        return promise

    def keep(self, opaques: range) -> None:
        """Resolve the promised responses of ``opaques``, one after the other, as a store thread's
        callbacks do when one slave report covers several sends."""
        for opaque in opaques:
            self.promises[opaque].set_result(RemotingCommand(code=ResponseCode.SUCCESS, opaque=opaque,
                                                             flag=1, body=b"kept"))


    def answer_all(self, conn: Connection, opaques: range) -> None:
        """Answer the promised requests of ``opaques`` with Connection.answer_all, as a plain
        send's StoreWaits callback does on the loop."""
        conn.answer_all([(self.promised[opaque], self.promises[opaque],
                          RemotingCommand(code=ResponseCode.SUCCESS, opaque=opaque, flag=1, body=b"now"))
                         for opaque in opaques])


def frames(code: int, opaques: range, body: bytes = b"", flag: int = 0) -> bytes:
    return b"".join(RemotingCommand(code=code, opaque=n, flag=flag, body=body).encode() for n in opaques)


async def settle() -> None:
    """Let every runnable task run until none is left to make progress (gated ones stay waiting)."""
    for _ in range(20):
        await asyncio.sleep(0)


def run(test: Callable[[Harness], Awaitable[None]]) -> None:
    async def main() -> None:
        await test(Harness())
    asyncio.run(main())


def test_frame_split_at_every_byte_boundary() -> None:
    stream = frames(ECHO, range(1, 4), body=b"payload")

    async def test(h: Harness) -> None:
        for cut in range(len(stream) + 1):
            conn, transport = h.connect()
            conn.data_received(stream[:cut])
            conn.data_received(stream[cut:])
            await settle()
            assert [r.opaque for r in transport.responses()] == [1, 2, 3], cut
            assert all(r.body == b"payload" and r.is_response for r in transport.responses())
    run(test)


def test_two_frames_in_one_chunk() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(ECHO, range(7, 9)))
        await settle()
        assert [(r.opaque, r.code) for r in transport.responses()] == [(7, ResponseCode.SUCCESS),
                                                                       (8, ResponseCode.SUCCESS)]
    run(test)


def test_garbage_frame_closes_only_its_connection() -> None:
    async def test(h: Harness) -> None:
        bad, bad_transport = h.connect()
        good, good_transport = h.connect()
        bad.data_received(struct.pack(">i", -1) + b"garbage!")
        assert bad_transport.closing and not bad_transport.written
        good.data_received(frames(ECHO, range(1, 2)))
        await settle()
        assert not good_transport.closing and [r.opaque for r in good_transport.responses()] == [1]
    run(test)


def test_unknown_code_is_answered_not_supported() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(999, range(1, 2)))
        await settle()
        (response,) = transport.responses()
        assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    run(test)


def test_reading_pauses_at_the_in_flight_cap_and_resumes_at_half() -> None:
    extra = 10
    total = MAX_IN_FLIGHT_PER_CONNECTION + extra

    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(GATED, range(1, total + 1)))  # one read brings more than the cap
        await settle()
        assert len(conn.tasks) == MAX_IN_FLIGHT_PER_CONNECTION and len(conn.backlog) == extra
        assert transport.reading_calls == ["pause"]
        h.open_gates(range(1, extra + 1))  # the backlog moves up; still at the cap
        await settle()
        assert len(conn.tasks) == MAX_IN_FLIGHT_PER_CONNECTION and not conn.backlog and not transport.reading
        half = MAX_IN_FLIGHT_PER_CONNECTION // 2
        h.open_gates(range(extra + 1, extra + 1 + half))  # exactly half left: still paused
        await settle()
        assert len(conn.tasks) == half and not transport.reading
        h.open_gates(range(extra + 1 + half, extra + 2 + half))  # below half: reading resumes
        await settle()
        assert transport.reading_calls == ["pause", "resume"]
        h.open_gates(range(extra + 2 + half, total + 1))
        await settle()
        assert sorted(r.opaque for r in transport.responses()) == list(range(1, total + 1))
    run(test)


def test_write_buffer_limits_are_set() -> None:
    async def test(h: Harness) -> None:
        _, transport = h.connect()
        assert (transport.high, transport.low) == (WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
    run(test)


def test_paused_writing_holds_responses_and_dispatch_until_drained() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(BIG, range(1, 5)))
        await settle()
        assert len(conn.tasks) == 4
        h.open_gates(range(1, 4))  # three responses of a third of the high-water mark each: the third passes it
        await settle()
        assert conn.writing_paused and not transport.reading
        assert [r.opaque for r in transport.responses()] == [1, 2, 3]
        h.open_gates(range(4, 5))  # finished, but its response waits for the drain
        await settle()
        assert len(transport.responses()) == 3 and len(conn.tasks) == 1
        conn.data_received(frames(ECHO, range(5, 7)))  # what was in flight on the wire: not dispatched
        await settle()
        assert len(conn.backlog) == 2 and len(transport.responses()) == 3
        transport.drain()
        await settle()
        assert [r.opaque for r in transport.responses()] == [1, 2, 3, 4, 5, 6]
        assert not conn.tasks and not conn.backlog and transport.reading
        assert transport.reading_calls == ["pause", "resume"]
    run(test)


def test_close_while_paused_aborts_and_releases_waiting_handlers() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(BIG, range(1, 5)))
        h.open_gates(range(1, 5))
        await settle()
        assert conn.writing_paused and len(conn.tasks) == 1  # the fourth waits to write
        conn.close()
        assert transport.aborted  # a graceful close would wait for a drain that may never come
        conn.connection_lost(None)  # what the transport reports after an abort
        await settle()
        assert not conn.tasks and len(transport.responses()) == 3
        assert conn not in h.server.connections
    run(test)


def test_malformed_request_is_answered_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(MALFORMED, range(1, 101)))
        await settle()
        responses = transport.responses()
        assert len(responses) == 100 and not transport.closing
        assert {(r.code, r.remark) for r in responses} == {
            (ResponseCode.SYSTEM_ERROR, "TEST header field 'queueId' is missing")}
        assert h.server.malformed_requests == 100

    with caplog.at_level(logging.WARNING, logger="rocketstore.broker.server"):
        run(test)
    (record,) = caplog.records
    assert record.exc_info is None and "'queueId' is missing" in record.getMessage()


def test_handler_bug_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(BUGGY, range(1, 2)))
        await settle()
        (response,) = transport.responses()
        assert response.code == ResponseCode.SYSTEM_ERROR and response.remark == "RuntimeError: a real bug"
        assert h.server.malformed_requests == 0

    with caplog.at_level(logging.WARNING, logger="rocketstore.broker.server"):
        run(test)
    (record,) = caplog.records
    assert record.exc_info is not None and record.exc_info[0] is RuntimeError


# -- inline handlers ---------------------------------------------------------------------------


def test_inline_replies_to_one_read_are_one_write_without_a_task() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(INLINE_ECHO, range(1, 101), body=b"payload"))
        # answered within data_received: no task, no turn of the loop
        assert not conn.tasks and transport.writes == 1
        assert [r.opaque for r in transport.responses()] == list(range(1, 101))
        assert all(r.body == b"payload" for r in transport.responses())
        conn.data_received(frames(INLINE_ECHO, range(101, 103)))
        assert transport.writes == 2 and len(transport.responses()) == 102
        assert transport.reading_calls == []
    run(test)


def test_inline_one_way_requests_are_not_answered() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(INLINE_ECHO, range(1, 5), flag=RPC_ONEWAY) + frames(INLINE_ECHO, range(5, 6)))
        assert [r.opaque for r in transport.responses()] == [5] and transport.writes == 1
    run(test)


@pytest.mark.parametrize(("inline", "waiting"), [(INLINE_MALFORMED, MALFORMED), (INLINE_BUGGY, BUGGY),
                                                 (INLINE_REFUSED, REFUSED)])
def test_inline_errors_are_answered_as_waiting_handlers_errors(inline: int, waiting: int,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(inline, range(1, 2)) + frames(INLINE_ECHO, range(2, 3)))
        (inline_error, echo) = transport.responses()  # answered at once, and the next request too
        conn.data_received(frames(waiting, range(3, 4)))
        await settle()
        waiting_error = transport.responses()[2]
        assert (inline_error.code, inline_error.remark) == (waiting_error.code, waiting_error.remark)
        assert inline_error.code != ResponseCode.SUCCESS and echo.code == ResponseCode.SUCCESS
        assert not transport.closing and conn in h.server.connections
        assert h.server.malformed_requests == (2 if inline == INLINE_MALFORMED else 0)

    with caplog.at_level(logging.WARNING, logger="rocketstore.broker.server"):
        run(test)
    if inline == INLINE_BUGGY:  # both logged with their traceback
        assert [r.exc_info[0] if r.exc_info else None for r in caplog.records] == [RuntimeError, RuntimeError]


def test_fast_path_takes_a_task_only_when_it_waits() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(FAST_OR_GATED, range(1, 11)))
        assert [r.opaque for r in transport.responses()] == [1, 3, 5, 7, 9] and transport.writes == 1
        assert len(conn.tasks) == 5  # only the waiting ones hold in-flight slots
        h.open_gates(range(2, 11, 2))
        await settle()
        assert sorted(r.opaque for r in transport.responses()) == list(range(1, 11)) and not conn.tasks
    run(test)


def test_inline_requests_wait_behind_a_full_in_flight_cap() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(GATED, range(1, MAX_IN_FLIGHT_PER_CONNECTION + 1)) + frames(INLINE_ECHO, range(
            MAX_IN_FLIGHT_PER_CONNECTION + 1, MAX_IN_FLIGHT_PER_CONNECTION + 3)))
        await settle()
        assert not transport.written and len(conn.backlog) == 2 and not transport.reading
        h.open_gates(range(1, 2))  # one slot frees: the backlog runs, inline
        await settle()
        assert sorted(r.opaque for r in transport.responses()) == [1, MAX_IN_FLIGHT_PER_CONNECTION + 1,
                                                                    MAX_IN_FLIGHT_PER_CONNECTION + 2]
        assert not conn.backlog
    run(test)


def test_inline_responses_pause_writing_in_the_middle_of_a_read() -> None:
    assert WRITE_BUFFER_HIGH // 3 >= COALESCE_MAX_BYTES  # each response below is written on its own

    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(INLINE_BIG, range(1, 11)))
        # the third response passes the high-water mark: dispatch stops there, reading pauses
        assert [r.opaque for r in transport.responses()] == [1, 2, 3]
        assert conn.writing_paused and len(conn.backlog) == 7 and not transport.reading
        transport.drain()  # resumes writing: three more, then paused again
        assert len(transport.responses()) == 6 and len(conn.backlog) == 4 and not transport.reading
        while conn.backlog:
            transport.drain()
        transport.drain()
        assert [r.opaque for r in transport.responses()] == list(range(1, 11))
        assert transport.reading and not conn.writing_paused
    run(test)


# -- handlers that return a future --------------------------------------------------------------


def test_future_replies_that_come_due_together_are_one_write_without_a_task() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        tasks_before = len(asyncio.all_tasks())
        conn.data_received(frames(PROMISED, range(1, 11)) + frames(INLINE_ECHO, range(11, 12)))
        assert [r.opaque for r in transport.responses()] == [11]
        assert len(conn.tasks) == 10 and len(asyncio.all_tasks()) == tasks_before  # in-flight slots, no task
        h.keep(range(1, 8))
        await settle()
        assert transport.writes == 2 and [r.opaque for r in transport.responses()] == [11, *range(1, 8)]
        assert all(r.body == b"kept" for r in transport.responses()[1:])
        h.keep(range(8, 11))
        await settle()
        assert transport.writes == 3 and len(transport.responses()) == 11 and not conn.tasks
    run(test)


def test_answers_given_now_are_one_write_in_the_same_pass_once_flushed() -> None:
    """Connection.answer_all gathers futures' answers; RemotingServer.flush_answers writes all of
    a connection's at once, in the caller's pass (a slave report's, for SYNC_MASTER sends), not in
    the passes of the futures' callbacks; nobody flushing, the next pass does. Each answer once."""
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(PROMISED, range(1, 11)))
        h.answer_all(conn, range(1, 8))
        assert transport.writes == 0 and len(conn.tasks) == 3
        h.server.flush_answers()
        assert transport.writes == 1 and [r.opaque for r in transport.responses()] == list(range(1, 8))
        assert all(r.body == b"now" for r in transport.responses())
        await settle()  # the futures' own callbacks run: they must not answer again
        assert transport.writes == 1 and len(transport.responses()) == 7
        h.promises[8].cancel()  # the broker stops past its grace: answered by the future's callback
        h.answer_all(conn, range(8, 11))  # 8 is done already: left alone
        await settle()  # nobody flushed: the pass answer_all scheduled does
        answers = {r.opaque: r.code for r in transport.responses()}
        assert len(transport.responses()) == 10 and answers[8] == ResponseCode.SERVICE_NOT_AVAILABLE
        assert all(answers[n] == ResponseCode.SUCCESS for n in (9, 10)) and not conn.tasks
    run(test)


def test_future_replies_count_against_the_in_flight_cap() -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(PROMISED, range(1, MAX_IN_FLIGHT_PER_CONNECTION + 3)))
        assert len(conn.tasks) == MAX_IN_FLIGHT_PER_CONNECTION and len(conn.backlog) == 2 and not transport.reading
        h.keep(range(1, 3))
        await settle()
        assert not conn.backlog and not transport.reading  # the backlog took the two free slots
        assert len(conn.tasks) == MAX_IN_FLIGHT_PER_CONNECTION
        h.keep(range(3, MAX_IN_FLIGHT_PER_CONNECTION // 2 + 4))
        await settle()
        assert transport.reading  # fewer than half the slots held: reading resumes
        assert len(transport.responses()) == MAX_IN_FLIGHT_PER_CONNECTION // 2 + 3
    run(test)


def test_a_failed_or_cancelled_future_reply_is_answered(caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: Harness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(PROMISED, range(1, 4)))
        h.promises[1].set_exception(RequestError(ResponseCode.NO_PERMISSION, "not for you"))
        h.promises[2].set_exception(RuntimeError("a real bug"))
        h.promises[3].cancel()  # the broker stops past its grace
        await settle()
        answers = {r.opaque: (r.code, r.remark) for r in transport.responses()}
        assert answers == {1: (ResponseCode.NO_PERMISSION, "not for you"),
                           2: (ResponseCode.SYSTEM_ERROR, "RuntimeError: a real bug"),
                           3: (ResponseCode.SERVICE_NOT_AVAILABLE, "the broker is stopping")}
        assert not conn.tasks and not transport.closing

    with caplog.at_level(logging.ERROR, logger="rocketstore.broker.server"):
        run(test)
    assert [r.exc_info[0] if r.exc_info else None for r in caplog.records] == [RuntimeError]


# -- group handlers (RemotingServer.register_group: the plain sends of one read share one put) --
GROUPED_A, GROUPED_B = 20, 21


class GroupHarness(Harness):
    """A group handler for GROUPED_A and GROUPED_B, recording the groups it is handed; its lone
    requests go to the codes' own handler. Odd opaques are answered inline, even ones promised
    (as plain sends on a SYNC_MASTER store are), opaque 99 makes the whole group raise."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: list[list[int]] = []
        self.singles: list[int] = []
        for code in (GROUPED_A, GROUPED_B):
            self.server.register(code, self._single)
        self.server.register_group((GROUPED_A, GROUPED_B), self._group)

    def _one(self, conn: Connection, request: RemotingCommand) -> Reply:
        if request.opaque % 2:
            return request.response(ResponseCode.SUCCESS, body=b"inline")
        return self._promised(conn, request)

    def _single(self, conn: Connection, request: RemotingCommand) -> Reply:
        self.singles.append(request.opaque)
        return self._one(conn, request)

    def _group(self, conn: Connection, requests: list[RemotingCommand]) -> list[Reply]:
        self.groups.append([r.opaque for r in requests])
        if any(r.opaque == 99 for r in requests):
            raise RuntimeError("a group handler bug")
        return [self._one(conn, r) for r in requests]


def run_grouped(test: Callable[[GroupHarness], Awaitable[None]]) -> None:
    async def main() -> None:
        await test(GroupHarness())
    asyncio.run(main())


def test_requests_read_one_after_the_other_reach_the_group_handler_together() -> None:
    async def test(h: GroupHarness) -> None:
        conn, transport = h.connect()
        conn.data_received(b"".join(frames(code, opaques) for code, opaques in [
            (GROUPED_A, range(1, 3)), (GROUPED_B, range(3, 5)), (INLINE_ECHO, range(5, 6)), (GROUPED_A, range(6, 7)),
            (INLINE_ECHO, range(7, 8)), (GROUPED_B, range(8, 10))]))
        # a request of another code ends a group; a lone one goes to its code's handler
        assert h.groups == [[1, 2, 3, 4], [8, 9]] and h.singles == [6]
        assert [r.opaque for r in transport.responses()] == [1, 3, 5, 7, 9]  # inline ones at once, in order
        assert len(conn.tasks) == 4
        h.answer_all(conn, range(2, 9, 2))
        conn.server.flush_answers()
        assert [r.opaque for r in transport.responses()][5:] == [2, 4, 6, 8]
        await settle()
        assert not conn.tasks and len(transport.responses()) == 9  # each answered once
    run_grouped(test)


def test_a_group_takes_no_more_requests_than_there_are_free_in_flight_slots() -> None:
    async def test(h: GroupHarness) -> None:
        conn, transport = h.connect()
        conn.data_received(frames(GROUPED_A, range(2, 2 * (MAX_IN_FLIGHT_PER_CONNECTION + 2) + 1, 2)))  # all promised
        assert h.groups == [list(range(2, 2 * MAX_IN_FLIGHT_PER_CONNECTION + 1, 2))]
        assert len(conn.tasks) == MAX_IN_FLIGHT_PER_CONNECTION and len(conn.backlog) == 2 and not transport.reading
        h.keep(range(2, 8, 2))
        await settle()
        assert h.groups[1:] == [[2 * MAX_IN_FLIGHT_PER_CONNECTION + 2, 2 * MAX_IN_FLIGHT_PER_CONNECTION + 4]]
        assert not conn.backlog
    run_grouped(test)


def test_a_refused_request_ends_its_group_and_is_answered_in_its_place() -> None:
    async def test(h: GroupHarness) -> None:
        h.server.before_request = lambda request, peer: (
            request.response(ResponseCode.NO_PERMISSION, "refused") if request.opaque == 5 else None)
        conn, transport = h.connect()
        conn.data_received(frames(GROUPED_A, range(1, 10, 2)) + frames(GROUPED_A, range(11, 14, 2)))
        assert h.groups == [[1, 3], [7, 9, 11, 13]]
        assert [(r.opaque, r.code) for r in transport.responses()] == [
            (opaque, ResponseCode.NO_PERMISSION if opaque == 5 else ResponseCode.SUCCESS) for opaque in range(1, 14, 2)]
    run_grouped(test)


def test_a_group_handler_that_raises_answers_every_request_of_the_group(caplog: pytest.LogCaptureFixture) -> None:
    async def test(h: GroupHarness) -> None:
        conn, transport = h.connect()
        with caplog.at_level(logging.ERROR):
            conn.data_received(frames(GROUPED_A, range(97, 102, 2)) + frames(INLINE_ECHO, range(102, 103)))
        assert [(r.opaque, r.code) for r in transport.responses()] == [
            (97, ResponseCode.SYSTEM_ERROR), (99, ResponseCode.SYSTEM_ERROR), (101, ResponseCode.SYSTEM_ERROR),
            (102, ResponseCode.SUCCESS)]
        assert "a group handler bug" in transport.responses()[0].remark
        assert not conn.transport.is_closing()
    run_grouped(test)
