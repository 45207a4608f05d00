"""The HA wire protocol of RocketMQ 4.x (HAService/HAConnection/HAClient), and its decisions.

Two byte streams on one TCP connection from the slave to the master's ``haListenPort``:

* slave -> master: the slave's max physical CommitLog offset, one big-endian int64 per report
  (when it connects, after appending data, and every ``haSendHeartbeatInterval``). The master
  only ever looks at the newest whole report in what it has read.
* master -> slave: frames of ``[phyOffset int64][bodySize int32][body]``, big-endian. The body
  is CommitLog bytes starting at ``phyOffset``, at most ``haTransferBatchSize`` of them, always
  from one segment. A body size of 0 is a heartbeat (sent every ``haSendHeartbeatInterval``
  while there is nothing to stream); its offset is where the next data will start.

Everything here is pure: no sockets, no store. The services in ha_connection / ha_client do
the I/O and ask these functions what to do, so the rules can be tested byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final, NamedTuple

HEADER: Final = struct.Struct(">qi")
"""A master frame's header: physical offset of the body's first byte, body size."""

HEADER_SIZE: Final = HEADER.size  # 12

REPORT: Final = struct.Struct(">q")
"""A slave's report: its max physical offset (the next byte it needs)."""

REPORT_SIZE: Final = REPORT.size  # 8


def encode_header(phy_offset: int, body_size: int) -> bytes:
    """The 12 bytes that precede a body (or stand alone as a heartbeat when ``body_size`` is 0)."""
    return HEADER.pack(phy_offset, body_size)


def encode_report(max_offset: int) -> bytes:
    """A slave's 8-byte offset report."""
    return REPORT.pack(max_offset)


def last_report(data: bytes | bytearray | memoryview) -> tuple[int | None, int]:
    """The newest whole report in ``data`` and how many bytes it consumed (a multiple of 8).

    The master reads whatever arrived and acts only on the last complete report, as
    HAConnection's ReadSocketService does: older ones carry nothing the newest does not.
    Returns (None, 0) when fewer than 8 bytes arrived; the caller keeps the remainder.
    """
    whole = len(data) - len(data) % REPORT_SIZE
    if whole == 0:
        return None, 0
    return REPORT.unpack_from(data, whole - REPORT_SIZE)[0], whole


class Frame(NamedTuple):
    """One master frame found in the slave's read buffer: its body is ``buf[start:start+size]``.

    A named tuple rather than a frozen dataclass: the slave makes one per frame it receives (32
    per MiB caught up), and a frozen dataclass's ``__init__`` costs ten times a tuple's."""

    phy_offset: int
    body_start: int
    body_size: int

    @property
    def end(self) -> int:
        """Buffer position just after this frame."""
        return self.body_start + self.body_size


def next_frame(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> Frame | None:
    """The whole frame at ``buf[pos:limit]``, or None until all of it has arrived.

    Raises ValueError on a negative body size: the stream is not a master's (nothing sensible
    can follow, the connection must be dropped).
    """
    if limit - pos < HEADER_SIZE:
        return None
    phy_offset, body_size = HEADER.unpack_from(buf, pos)
    if body_size < 0:
        raise ValueError(f"master frame at offset {phy_offset} announces a negative body size {body_size}")
    if limit - pos - HEADER_SIZE < body_size:
        return None
    return Frame(phy_offset, pos + HEADER_SIZE, body_size)


def transfer_start(slave_request_offset: int, master_max_offset: int, segment_size: int) -> int:
    """Where the master starts streaming to a slave that first reported ``slave_request_offset``.

    A slave reporting 0 has no CommitLog: it gets the start of the master's last segment, not
    the whole history (RocketMQ's WriteSocketService). Any other slave continues from its own
    end.
    """
    if slave_request_offset != 0:
        return slave_request_offset
    return max(master_max_offset - master_max_offset % segment_size, 0)


def slave_ahead_error(slave_offset: int, master_max_offset: int) -> str | None:
    """The master's refusal when a slave reports more than the master has, else None.

    Such a slave holds a tail the master never had (or lost): streaming to it would append the
    master's different bytes after that tail. Only truncating the slave (failover work) can
    resolve it, so the master refuses instead of guessing.
    """
    if slave_offset <= master_max_offset:
        return None
    return (f"slave reports CommitLog offset {slave_offset}, past this master's max offset {master_max_offset}: "
            "the slave holds data the master does not have; refusing to replicate to it")


def continuity_error(slave_max_offset: int, frame_offset: int) -> str | None:
    """The slave's refusal when a master frame does not start where the slave's log ends, else None.

    An empty slave (offset 0) accepts any start: that is how it begins at the master's last
    segment. Otherwise appending would leave a gap or overwrite, so the slave stops (as
    RocketMQ's HAClient does) and names both offsets.
    """
    if slave_max_offset == 0 or slave_max_offset == frame_offset:
        return None
    return (f"master sends data from CommitLog offset {frame_offset}, but this slave's CommitLog ends at "
            f"{slave_max_offset}: the logs have diverged; refusing to continue (needs truncation of the slave)")


def batch_end(offset: int, segment_end: int, batch_size: int) -> int:
    """End of the body the master sends from ``offset``: at most ``batch_size`` bytes, and never
    past the written end of the segment holding ``offset`` (a frame never spans two segments)."""
    return min(segment_end, offset + batch_size)


def unacknowledged_record(start: int, acked: int, size_at: Callable[[int], int | None]) -> int | None:
    """Start of the first record a slave does not wholly have: the one starting at ``acked``, or the
    one ``acked`` falls inside (acknowledgements land wherever a frame ended, often mid-record).

    Walks record sizes from ``start``, a record start at or before ``acked``; None when a size is
    unreadable (gone, or not written) or not positive. ``size_at(offset)`` reads the 4-byte total
    size of the record at ``offset``; blank end-of-segment records carry the rest of their
    segment as their size, so the walk crosses segments without knowing their size.
    """
    pos = start
    while True:
        size = size_at(pos)
        if size is None or size <= 0:
            return None
        if pos + size > acked:
            return pos
        pos += size
