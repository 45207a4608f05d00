"""Socket plumbing both HA protocols share, on both sides (RocketMQ keeps its own in store/ha/io).

The 4.x and the controller-mode connections and clients differ in their frames, not in how they
wait for bytes, gather a send or close a socket: these are written once, here.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
from typing import Final

GATHER_FRAMES: Final = 256
"""Frames one sendmsg carries at most (two iovecs each; the kernel takes at most 1024)."""


def wait_readable(sock: socket.socket, timeout_s: float) -> bool:
    """Whether ``sock`` has bytes (or end of stream) to read within ``timeout_s``.

    poll, not select: select cannot watch a descriptor numbered 1024 or more, and a broker with
    many segments, queues and connections open has those.
    """
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(int(timeout_s * 1000), 0)))


def wait_writable(sock: socket.socket) -> None:
    """Wait until ``sock`` takes bytes again, or is shut down (a send then fails at once)."""
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    poller.poll()


def send_all(sock: socket.socket, parts: list[bytes | memoryview], flags: int = 0) -> None:
    """Send every byte of ``parts`` in order with as few system calls as the kernel allows,
    waiting while the socket is full; ``flags`` go to every sendmsg (MSG_MORE: more follows).

    The wait is done here rather than by the descriptor's blocking mode: when an event loop also
    watches the socket (a master's reports read on the broker's loop), uvloop makes the
    descriptor non-blocking, and a full socket then raises BlockingIOError instead of blocking.
    """
    index = 0
    while index < len(parts):
        try:
            sent = sock.sendmsg(parts[index:index + 2 * GATHER_FRAMES], [], flags)
        except BlockingIOError:
            wait_writable(sock)
            continue
        while index < len(parts) and sent >= len(parts[index]):
            sent -= len(parts[index])
            index += 1
        if sent:
            parts[index] = parts[index][sent:]


def send_from_file(sock: socket.socket, header: bytes, fd: int, offset: int, size: int) -> None:
    """Send ``header``, then ``size`` bytes of the file ``fd`` from ``offset``, waiting while the
    socket is full (as :func:`send_all` does).

    The body goes by ``sendfile``: the kernel gives the socket the page cache's own pages instead of
    copying the bytes into socket buffers it must first allocate. A master streaming a backlog
    from a mapping copied 1 GiB into fresh buffers; on a virtual machine whose hypervisor takes
    back idle free memory, each buffer page then faulted on the host, and the copy took most of
    the master's CPU (68% of its samples in ``_copy_from_iter``). The header goes first with
    MSG_MORE, so the two leave in one segment.
    """
    send_all(sock, [header], socket.MSG_MORE)
    out = sock.fileno()
    while size:
        try:
            sent = os.sendfile(out, fd, offset, size)
        except BlockingIOError:
            wait_writable(sock)
            continue
        if sent == 0:
            raise OSError(f"sendfile: the file ends before offset {offset} ({size} bytes left to send)")
        offset += sent
        size -= sent


def close_socket(sock: socket.socket) -> None:
    """Shut ``sock`` down, then close it, ignoring a peer already gone.

    The shutdown is what unblocks another thread stuck in a recv or sendmsg on it: close alone
    leaves that thread waiting.
    """
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
