"""NativeRemotingFront: the remoting port served by the Rust front (``RemotingFront`` in
native/src/remoting_front.rs) instead of asyncio's transports.

With ``remotingNativeFront=true`` (plaintext listeners only: a TLS port stays on asyncio), the
front's threads accept connections, read them, split frames, decode headers and write responses,
off the interpreter lock. Python takes what they read in one call per wake-up of the loop and
hands back what its handlers wrote in one call per pass of the loop (:meth:`hand_over`).

Everything above the bytes stays as it is: each connection is an ordinary
:class:`~rocketstore.broker.server.Connection` (handlers, the ACL hook, tasks and their flow
control, broker-initiated requests and their responses by opaque, the idle timeout, the connection
cap, ``on_disconnect`` listeners), its transport a :class:`FrontTransport` that turns writes,
closes and read pauses into requests to the front.

The write side's flow control is asyncio's: the transport counts the bytes written to it, and past
``WRITE_BUFFER_HIGH`` it calls the connection's ``pause_writing`` (during the write that passed
it) and asks the front to say when the connection's unwritten responses are down to
``WRITE_BUFFER_LOW``; that event calls ``resume_writing``. Until then the count is an upper bound
(only the front knows how much the client read). The front also stops reading a connection on its
own when its client lets responses pile up, or while Python has not taken what it read
(remoting_front.rs).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from rocketstore.broker.cpu_budget import usable_cores
from rocketstore.broker.server import WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW, Connection, RemotingServer
from rocketstore.common.native import NATIVE
from rocketstore.remoting.command import (
    MAX_FRAME_SIZE,
    ProtocolError,
    RemotingCommand,
    command_from_native,
    decode_frame_python,
)

log = logging.getLogger(__name__)

# RemotingFront.take()'s event kinds and RemotingFront.send()'s requests (remoting_front.rs).
_CONNECTED: Final = 0
_COMMAND: Final = 1
_FRAME: Final = 2
_CLOSED: Final = 3
_DRAINED: Final = 4
_DATA: Final = 0
_CLOSE: Final = 1
_ABORT: Final = 2
_PAUSE: Final = 3
_RESUME: Final = 4
_WATCH: Final = 5


def front_threads() -> int:
    """Threads of the front: one per core this process may use (its affinity, what a pod's cpuset
    gives it, capped by its CPU quota, what a pod's CPU limit gives it: :func:`usable_cores`), so
    that reading and writing use every core the broker is given and no more."""
    return usable_cores()


def native_front_available() -> bool:
    """Whether the loaded extension has the remoting front (an older build, or none, has not)."""
    return NATIVE is not None and hasattr(NATIVE, "RemotingFront")


def make_front(server: RemotingServer) -> NativeRemotingFront | None:
    """The :data:`~rocketstore.broker.server.FrontFactory` of remotingNativeFront: the native
    front on :func:`front_threads` threads, or None (asyncio serves the port) when the extension
    has none."""
    if not native_front_available():
        log.warning("remotingNativeFront is set but the native extension is not loaded (or has no "
                    "RemotingFront): serving remoting on asyncio")
        return None
    threads = front_threads()
    log.info("remotingNativeFront: serving remoting with the native front on %d thread(s)", threads)
    return NativeRemotingFront(server, threads)


class FrontTransport(asyncio.Transport):
    """A connection of the front, as the transport a :class:`Connection` writes to."""

    def __init__(self, front: NativeRemotingFront, conn_id: int, peer: tuple[str, int],
                 connection: Connection) -> None:
        super().__init__(extra={"peername": peer})
        self._front = front
        self._id = conn_id
        self._connection = connection
        self._closing = False
        #: bytes written and, as far as Python knows, not sent yet (an upper bound)
        self._buffered = 0
        #: the connection's writing is paused until the front reports a drain
        self._watching = False

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            data = bytes(data)
            self._front.request(self._id, _DATA, data)
            self._buffered += len(data)
            if self._buffered > WRITE_BUFFER_HIGH and not self._watching:
                self._watching = True
                self._front.request(self._id, _WATCH)
                self._connection.pause_writing()

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        """Closed once the responses already written are out (asyncio's close)."""
        if not self._closing:
            self._closing = True
            self._front.request(self._id, _CLOSE)

    def abort(self) -> None:
        """Closed at once, unsent responses dropped."""
        self._closing = True
        self._front.request(self._id, _ABORT)

    def pause_reading(self) -> None:
        self._front.request(self._id, _PAUSE)

    def resume_reading(self) -> None:
        self._front.request(self._id, _RESUME)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The server's limits (WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW) are the ones applied."""

    def get_write_buffer_size(self) -> int:
        return self._buffered

    def drained(self) -> None:
        """The front's unsent responses fell to the low-water mark: answer and read again."""
        self._buffered = min(self._buffered, WRITE_BUFFER_LOW)
        if self._watching:
            self._watching = False
            self._connection.resume_writing()

    def lost(self) -> None:
        """The front ended the connection: nothing is written to it any more."""
        self._closing = True


class NativeRemotingFront:
    """The remoting port of ``server`` on the native front, with ``threads`` threads."""

    def __init__(self, server: RemotingServer, threads: int) -> None:
        assert NATIVE is not None
        self.server = server
        self._front = NATIVE.RemotingFront(server.host or "0.0.0.0", server.port, threads=threads,
                                           max_frame_bytes=MAX_FRAME_SIZE)
        self.port: int = self._front.port
        self._connections: dict[int, tuple[Connection, FrontTransport]] = {}
        #: requests not handed to the front yet: (connection id, what, frames or None)
        self._outbox: list[tuple[int, int, bytes | None]] = []
        #: inside _drain, which hands the outbox over when it ends
        self._draining = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._front.fileno(), self._drain)

    async def stop(self) -> None:
        """Stops listening; the front writes what it was given (within a second) and closes every
        connection; their ``connection_lost`` run here."""
        if self._loop is not None:
            self._loop.remove_reader(self._front.fileno())
        self.hand_over()
        await asyncio.to_thread(self._front.close)
        self._drain()

    def request(self, conn_id: int, what: int, data: bytes | None = None) -> None:
        """Queue a request to the front, handed over at the end of this pass of the loop."""
        if not self._outbox and not self._draining:
            assert self._loop is not None, "NativeRemotingFront.start() first"
            self._loop.call_soon(self.hand_over)
        self._outbox.append((conn_id, what, data))

    def hand_over(self) -> None:
        """Give the front the requests queued so far (one call, which lets the lock go)."""
        if self._outbox:
            requests, self._outbox = self._outbox, []
            self._front.send(requests)

    def _drain(self) -> None:
        """Everything the front read since the last call, in order; consecutive commands of one
        connection are handed to it together, so their inline responses go out in one write."""
        self._draining = True
        connections = self._connections
        conn: Connection | None = None
        commands: list[RemotingCommand] = []
        try:
            for event in self._front.take():
                kind, conn_id = event[0], event[1]
                entry = connections.get(conn_id)
                if kind in (_COMMAND, _FRAME):
                    if entry is None or entry[1].is_closing():
                        continue
                    if entry[0] is not conn:
                        if conn is not None and commands:
                            conn.commands_received(commands)
                        conn, commands = entry[0], []
                    if kind == _COMMAND:
                        commands.append(command_from_native(event[2]))
                        continue
                    try:
                        commands.append(decode_frame_python(event[2]))
                    except ProtocolError as exc:  # this connection only: what came before it is served
                        if commands:
                            conn.commands_received(commands)
                            commands = []
                        log.warning("closing %s: %s", conn.peer, exc)
                        conn.close()
                    continue
                if conn is not None and commands:
                    conn.commands_received(commands)
                conn, commands = None, []
                if kind == _CONNECTED:
                    connection = Connection(self.server)
                    transport = FrontTransport(self, conn_id, (event[2], event[3]), connection)
                    connections[conn_id] = (connection, transport)
                    connection.connection_made(transport)
                elif entry is None:
                    continue
                elif kind == _CLOSED:
                    del connections[conn_id]
                    entry[1].lost()
                    entry[0].connection_lost(None)
                elif kind == _DRAINED and not entry[1].is_closing():
                    entry[1].drained()
            if conn is not None and commands:
                conn.commands_received(commands)
        finally:
            self._draining = False
            self.hand_over()
