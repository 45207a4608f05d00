"""A pull's walk of its ConsumeQueue, and for a tag subscription its response frame in the same pass.

RocketMQ's getMessage walks the ConsumeQueue entries from the pulled offset, filters each by its
tag hash, and gathers up to maxMsgNums records from the mapped CommitLog within the transfer
limits; with ``transferMsgByHeap=false`` the broker then never copies them onto the heap: its
ManyMessageTransfer writes the response header and the mapped buffers to the socket.

:func:`walk_queue` is that walk, the reference every pull goes through with any filter
(``DefaultMessageStore.get_message``). A tag subscription (the common case: ``*`` or ``TagA ||
TagB``, decided on the ConsumeQueue's tag hash alone) takes :func:`pull_messages` instead: the
walk, the filter, the gathering and the encoding of the PULL_MESSAGE SUCCESS frame in one native
call, the records copied from the mapped segments straight into that one frame, never becoming a
bytes object each. Its twin :func:`pull_messages_python` (the walk, then the reference frame
encoder) is what ``ROCKETSTORE_NATIVE=0`` runs, and what the differential tests hold the native
one byte-identical to. SQL92 and retry-topic filters look at the records themselves and stay on
the Python walk; the broker keeps every decision around the read (long polling, suspension, flow
control, the response code) in Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from rocketstore.common.native import NATIVE
from rocketstore.remoting.codes import LanguageCode, ResponseCode
from rocketstore.remoting.command import RPC_TYPE_RESPONSE, RemotingCommand, encode_frame_python
from rocketstore.remoting.headers import PullMessageResponseHeader
from rocketstore.store.consume_queue import unpack_entries
from rocketstore.store.status import GetMessageStatus

if TYPE_CHECKING:
    from rocketstore.store.commit_log import CommitLog

#: how a walk can end; the native walk answers with an index into this tuple
WALK_STATUSES = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING)


class TransferLimits(NamedTuple):
    """What bounds one pull: the consumer's maxMsgNums and the store's maxTransfer* settings.

    A record further than ``in_memory_bytes`` behind the CommitLog's end (``max_offset_py`` when
    the pull began) counts as in disk, where the smaller in-disk limits apply
    (accessMessageInMemoryMaxRatio of the RAM; whole bytes, which decides every integer offset
    as the fraction would).
    """

    max_msg_nums: int
    max_bytes_in_memory: int
    max_count_in_memory: int
    max_bytes_in_disk: int
    max_count_in_disk: int
    max_offset_py: int
    in_memory_bytes: int

    def is_in_disk(self, offset_py: int) -> bool:
        return self.max_offset_py - offset_py > self.in_memory_bytes

    def is_batch_full(self, size_py: int, buffer_total: int, message_total: int, in_disk: bool) -> bool:
        """Whether taking a record of ``size_py`` would pass a limit (the first is always taken)."""
        if buffer_total == 0 or message_total == 0:
            return False
        if self.max_msg_nums <= message_total:
            return True
        if in_disk:
            return (buffer_total + size_py > self.max_bytes_in_disk
                    or message_total > self.max_count_in_disk - 1)
        return (buffer_total + size_py > self.max_bytes_in_memory
                or message_total > self.max_count_in_memory - 1)


class PullFrame(NamedTuple):
    """The request's side of a SUCCESS response header: the pull's opaque, language name (as the
    JSON header writes it) and version, and the broker id to suggest when the consumer reads far
    behind the end or not."""

    opaque: int
    language: str
    version: int
    suggest_when_slow: int
    suggest_otherwise: int


@dataclass(slots=True)
class QueueWalk:
    """What a walk found: the records taken and their queue offsets, the entries walked past."""

    status: GetMessageStatus
    consumed: int = 0
    messages: list[bytes] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    total_size: int = 0
    max_phy_pulling: int = 0


def walk_queue(
    entries: bytes, queue_offset: int, limits: TransferLimits, commit_log: CommitLog,
    tag_matches: Callable[[int], bool] | None, record_matches: Callable[[bytes], bool] | None,
) -> QueueWalk:
    """Take records from ``entries`` (ConsumeQueue entries from ``queue_offset`` on) until a limit.

    A record that is gone (its segment deleted or not yet readable) makes the walk skip the rest
    of that segment's entries, as RocketMQ's nextPhyFileStartOffset does.
    """
    walk = QueueWalk(GetMessageStatus.NO_MATCHED_MESSAGE)
    next_phy_file_start = -1
    for offset_py, size_py, entry_tags_code in unpack_entries(entries):
        walk.max_phy_pulling = offset_py
        if next_phy_file_start != -1 and offset_py < next_phy_file_start:
            walk.consumed += 1
            continue
        in_disk = limits.is_in_disk(offset_py)
        if limits.is_batch_full(size_py, walk.total_size, len(walk.messages), in_disk):
            break
        walk.consumed += 1
        if tag_matches is not None and not tag_matches(entry_tags_code):
            if walk.total_size == 0:
                walk.status = GetMessageStatus.NO_MATCHED_MESSAGE
            continue
        data = commit_log.get_message(offset_py, size_py)
        if data is None:
            if walk.total_size == 0:
                walk.status = GetMessageStatus.MESSAGE_WAS_REMOVING
            next_phy_file_start = commit_log.roll_next_file(offset_py)
            continue
        if record_matches is not None and not record_matches(data):
            if walk.total_size == 0:
                walk.status = GetMessageStatus.NO_MATCHED_MESSAGE
            continue
        walk.messages.append(data)
        walk.queue_offsets.append(queue_offset + walk.consumed - 1)
        walk.total_size += len(data)
        walk.status = GetMessageStatus.FOUND
        next_phy_file_start = -1
    return walk


def encode_found_frame(frame: PullFrame, next_begin_offset: int, min_offset: int, max_offset: int,
                       from_slave: bool, body: bytes) -> bytes:
    """The reference encoding of a FOUND pull's SUCCESS response frame."""
    fields = PullMessageResponseHeader(
        suggest_which_broker_id=frame.suggest_when_slow if from_slave else frame.suggest_otherwise,
        next_begin_offset=next_begin_offset, min_offset=min_offset, max_offset=max_offset,
    ).to_ext_fields()
    return encode_frame_python(RemotingCommand(
        code=ResponseCode.SUCCESS, opaque=frame.opaque, flag=RPC_TYPE_RESPONSE, remark=GetMessageStatus.FOUND.value,
        ext_fields=fields, body=body, language=LanguageCode[frame.language], version=frame.version))


#: (walk status index, entries consumed, records taken, their bytes, suggest pulling from a slave,
#: the SUCCESS frame when asked for and something was found)
PullOutcome = tuple[int, int, int, int, bool, bytes | None]


def pull_messages_python(
    entries: bytes, queue_offset: int, commit_log: CommitLog, tag_codes: tuple[int, ...] | None,
    limits: TransferLimits, frame: PullFrame | None, min_offset: int, max_offset: int,
) -> PullOutcome:
    """Twin of the native ``pull_messages``: the walk with a tag-hash filter (``tag_codes``, None
    for every tag), then the frame of what it found (the queue's ``min_offset`` and ``max_offset``
    go into its header)."""
    tag_matches = None if tag_codes is None else frozenset(tag_codes).__contains__
    walk = walk_queue(entries, queue_offset, limits, commit_log, tag_matches, None)
    from_slave = limits.is_in_disk(walk.max_phy_pulling)
    encoded = None
    if frame is not None and walk.status is GetMessageStatus.FOUND:
        encoded = encode_found_frame(frame, queue_offset + walk.consumed, min_offset, max_offset, from_slave,
                                     b"".join(walk.messages))
    return (WALK_STATUSES.index(walk.status), walk.consumed, len(walk.messages), walk.total_size, from_slave,
            encoded)


pull_messages: Callable[
    [bytes, int, CommitLog, tuple[int, ...] | None, TransferLimits, PullFrame | None, int, int], PullOutcome
] = NATIVE.pull_messages if NATIVE is not None else pull_messages_python
