"""StoreCheckpoint: the ``checkpoint`` file, one 4 KiB page holding three timestamps.

    offset 0   physicMsgTimestamp   store time of the last CommitLog record flushed
    offset 8   logicsMsgTimestamp   store time of the last ConsumeQueue entry flushed
    offset 16  indexMsgTimestamp    end time of the last IndexFile flushed whole
    (5.x adds 24 masterFlushedOffset and 32 confirmPhyOffset; we leave them zero)

Abnormal recovery starts from the newest segment whose first record is older than
``min_timestamp`` (3 s of slack), which is why the page is only rewritten after the data
it vouches for has been flushed.
"""

from __future__ import annotations

import mmap
import os
import struct

CHECKPOINT_SIZE = 4096
_TIMESTAMPS = struct.Struct(">qqq")


def read_checkpoint(path: str) -> tuple[int, int, int]:
    """(physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp) read without creating or
    mapping the file (offline tools); ValueError when the file is too short to hold them."""
    with open(path, "rb") as f:
        data = f.read(_TIMESTAMPS.size)
    if len(data) < _TIMESTAMPS.size:
        raise ValueError(f"{path} is {len(data)} bytes, a checkpoint holds at least {_TIMESTAMPS.size}")
    physic, logics, index = _TIMESTAMPS.unpack(data)
    return physic, logics, index


class StoreCheckpoint:
    """The three flush timestamps, mapped from the file and flushed on demand."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        existed = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < CHECKPOINT_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_SIZE)
        self._mm = mmap.mmap(self._fd, CHECKPOINT_SIZE)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        if existed:
            (self.physic_msg_timestamp, self.logics_msg_timestamp,
             self.index_msg_timestamp) = _TIMESTAMPS.unpack_from(self._mm, 0)

    @property
    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s, floored at 0: where abnormal recovery may start."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000, 0)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        _TIMESTAMPS.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp,
                              self.index_msg_timestamp)
        self._mm.flush()

    def shutdown(self) -> None:
        if self._fd >= 0:
            self.flush()
            self._mm.close()
            os.close(self._fd)
            self._fd = -1
