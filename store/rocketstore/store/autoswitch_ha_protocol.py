"""The HA wire protocol of RocketMQ 5's controller mode (AutoSwitchHAClient / AutoSwitchHAConnection).

Every message on the connection starts with the sender's connection state as a big-endian int32,
the ordinal of RocketMQ's ``HAConnectionState`` (READY 0, HANDSHAKE 1, TRANSFER 2, SUSPEND 3,
SHUTDOWN 4). All integers are big-endian.

slave -> master:

* handshake, 16 bytes: ``[state=1 int32][isSyncFromLastFile int16][isAsyncLearner int16][slaveBrokerId int64]``
* report, 12 bytes: ``[state=2 int32][maxPhyOffset int64]``, as the 4.x report, after every
  append and every ``haSendHeartbeatInterval``.

master -> slave:

* handshake answer, a 20-byte header ``[state=1 int32][bodySize int32][maxPhyOffset int64][lastEpoch int32]``
  and ``bodySize / 12`` epoch entries ``[epoch int32][startOffset int64]``: the master's whole
  epoch history, from which the slave finds the last offset both logs share and truncates to it;
* transfer, a 36-byte header ``[state=2 int32][bodySize int32][phyOffset int64][epoch int32]
  [epochStartOffset int64][confirmOffset int64]`` then ``bodySize`` CommitLog bytes starting at
  ``phyOffset``, all of one epoch (a batch never crosses an epoch's end). A body size of 0 is a
  heartbeat. The slave records ``(epoch, epochStartOffset)`` in its epoch file whenever the epoch
  changes.

Everything here is pure: the services (ha_connection, ha_client) do the I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from rocketstore.store.epoch_file import EpochEntry


class HAConnectionState(IntEnum):
    """RocketMQ's HAConnectionState; its ordinal is the first int of every message."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


SLAVE_HANDSHAKE: Final = struct.Struct(">ihhq")
SLAVE_REPORT: Final = struct.Struct(">iq")
MASTER_HANDSHAKE: Final = struct.Struct(">iiqi")
MASTER_TRANSFER: Final = struct.Struct(">iiqiqq")
EPOCH_ENTRY: Final = struct.Struct(">iq")

SLAVE_HANDSHAKE_SIZE: Final = SLAVE_HANDSHAKE.size  # 16
SLAVE_REPORT_SIZE: Final = SLAVE_REPORT.size  # 12
MASTER_HANDSHAKE_SIZE: Final = MASTER_HANDSHAKE.size  # 20
MASTER_TRANSFER_SIZE: Final = MASTER_TRANSFER.size  # 36
EPOCH_ENTRY_SIZE: Final = EPOCH_ENTRY.size  # 12


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    slave_broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    max_offset: int
    last_epoch: int
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class TransferHeader:
    phy_offset: int
    body_size: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int


# -- slave -> master -------------------------------------------------------------------------------


def encode_slave_handshake(hs: SlaveHandshake) -> bytes:
    return SLAVE_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, int(hs.sync_from_last_file), int(hs.async_learner),
                                hs.slave_broker_id)


def encode_slave_report(max_offset: int) -> bytes:
    return SLAVE_REPORT.pack(HAConnectionState.TRANSFER, max_offset)


def next_slave_message(buf: bytes | bytearray | memoryview, pos: int,
                       limit: int) -> tuple[SlaveHandshake | int, int] | None:
    """The slave's message at ``buf[pos:limit]``: a handshake or a reported offset, and the
    position after it; None until all of it arrived. ValueError for a state a slave never sends
    (the master closes the connection, as AutoSwitchHAConnection's reader does)."""
    if limit - pos < 4:
        return None
    state = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    if state == HAConnectionState.HANDSHAKE:
        if limit - pos < SLAVE_HANDSHAKE_SIZE:
            return None
        _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack_from(buf, pos)
        return SlaveHandshake(broker_id, last_file == 1, learner == 1), pos + SLAVE_HANDSHAKE_SIZE
    if state == HAConnectionState.TRANSFER:
        if limit - pos < SLAVE_REPORT_SIZE:
            return None
        return SLAVE_REPORT.unpack_from(buf, pos)[1], pos + SLAVE_REPORT_SIZE
    raise ValueError(f"slave sent HA state {state}: neither HANDSHAKE nor TRANSFER")


# -- master -> slave -------------------------------------------------------------------------------


def encode_master_handshake(entries: Sequence[EpochEntry], max_offset: int, last_epoch: int) -> bytes:
    body = b"".join(EPOCH_ENTRY.pack(e.epoch, e.start_offset) for e in entries)
    return MASTER_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, len(body), max_offset, last_epoch) + body


def encode_transfer_header(header: TransferHeader) -> bytes:
    return MASTER_TRANSFER.pack(HAConnectionState.TRANSFER, header.body_size, header.phy_offset, header.epoch,
                                header.epoch_start_offset, header.confirm_offset)


def next_master_message(buf: bytes | bytearray | memoryview, pos: int,
                        limit: int) -> tuple[MasterHandshake | TransferHeader, int, int] | None:
    """The master's message at ``buf[pos:limit]``: (handshake or transfer header, body start,
    position after it), once all of it (body included) arrived; None before. ValueError for an
    unknown state or a negative body size."""
    if limit - pos < MASTER_HANDSHAKE_SIZE:
        return None
    state, body_size, offset, epoch = MASTER_HANDSHAKE.unpack_from(buf, pos)
    if body_size < 0:
        raise ValueError(f"master message announces a negative body size {body_size}")
    if state == HAConnectionState.HANDSHAKE:
        end = pos + MASTER_HANDSHAKE_SIZE + body_size
        if limit < end:
            return None
        start = pos + MASTER_HANDSHAKE_SIZE
        entries = tuple(EpochEntry(*EPOCH_ENTRY.unpack_from(buf, start + i * EPOCH_ENTRY_SIZE))
                        for i in range(body_size // EPOCH_ENTRY_SIZE))
        return MasterHandshake(offset, epoch, entries), start, end
    if state == HAConnectionState.TRANSFER:
        end = pos + MASTER_TRANSFER_SIZE + body_size
        if limit < end:
            return None
        _, _, _, _, epoch_start, confirm = MASTER_TRANSFER.unpack_from(buf, pos)
        return TransferHeader(offset, body_size, epoch, epoch_start, confirm), pos + MASTER_TRANSFER_SIZE, end
    raise ValueError(f"master sent HA state {state}: neither HANDSHAKE nor TRANSFER")


# -- decisions -------------------------------------------------------------------------------------


def transfer_start_in_controller_mode(slave_request_offset: int, master_min_offset: int, master_max_offset: int,
                                      segment_size: int, sync_from_last_file: bool) -> int:
    """Where the master starts streaming to a slave whose first report was ``slave_request_offset``.

    A slave with an empty log (0) gets the master's whole log (its min offset), or only its last
    segment when it asked for ``syncFromLastFile`` (AutoSwitchHAConnection's WriteSocketService);
    any other slave continues from its own end (it already truncated to what both share).
    """
    if slave_request_offset != 0:
        return slave_request_offset
    if sync_from_last_file:
        return max(master_max_offset - master_max_offset % segment_size, 0)
    return master_min_offset


def batch_size_within_epoch(offset: int, size: int, epoch_end_offset: int) -> int:
    """At most ``size`` bytes from ``offset``, never past the end of the epoch being sent
    (``epoch_end_offset``; -1 for the current, open epoch): one transfer carries one epoch."""
    if epoch_end_offset < 0:
        return size
    return max(min(size, epoch_end_offset - offset), 0)
