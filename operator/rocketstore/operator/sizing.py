"""Per-broker volume size: how big a PVC must be to hold ``storage.segments`` CommitLog segments.

RocketMQ (and RocketStore, which writes the same files) keeps on one volume:

* the CommitLog: ``segments`` files of ``segmentSize`` bytes each, **plus one**: the next segment
  is pre-allocated while the current one fills, and cleanup deletes only whole segments, so one
  extra segment is always on disk;
* the ConsumeQueue: a 20-byte entry per message, in files of 300,000 entries (6,000,000 bytes);
* the IndexFile: 420,000,040 bytes per file (40-byte header + 5,000,000 four-byte hash slots +
  20,000,000 twenty-byte entries), one per 20,000,000 messages, plus the file being written;
* config and bookkeeping (``config/*.json`` with their ``.bak`` copies, checkpoint, abort and lock
  files): a fixed 64 MiB allowance.

Messages are estimated as CommitLog bytes / ``storage.averageMessageSize`` (default 1 KiB; small
messages make queues and indexes bigger, so set it when messages are small).

Those bytes must fit **under** ``diskMaxUsedSpaceRatio`` (percent): above it RocketMQ starts
deleting CommitLog segments before their ``fileReservedTime``, which would make the requested
segments unreachable. So::

    commitlog = (segments + 1) * segmentSize
    messages  = ceil(commitlog / averageMessageSize)
    cq        = ceil(messages * 20 / 6_000_000) * 6_000_000
    index     = (ceil(messages / 20_000_000) + 1) * 420_000_040
    data      = commitlog + cq + index + 64 MiB
    volume    = ceil_GiB(data * 100 / diskMaxUsedSpaceRatio)

Example: 10 segments of 1 GiB, 1 KiB messages, ratio 75 -> data = 11 GiB + 234,000,000 +
840,000,080 + 64 MiB = 12,952,269,008 bytes -> / 0.75 = 17,269,692,011 -> **17Gi**.

An explicit ``storage.size`` is used as it is; :func:`segments_that_fit` says how many segments it
holds under the same rules (reported in status, and a size too small for one segment is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rocketstore.operator.model import GIB, Spec

__all__ = [
    "CONFIG_ALLOWANCE",
    "CQ_ENTRY_SIZE",
    "CQ_FILE_SIZE",
    "INDEX_ENTRIES_PER_FILE",
    "INDEX_FILE_SIZE",
    "Sizing",
    "segments_that_fit",
    "size_for_segments",
    "volume_size",
]

CQ_ENTRY_SIZE: Final = 20
CQ_FILE_SIZE: Final = 300_000 * CQ_ENTRY_SIZE  # mappedFileSizeConsumeQueue = 6,000,000
INDEX_HEADER_SIZE: Final = 40
INDEX_HASH_SLOTS: Final = 5_000_000
INDEX_ENTRIES_PER_FILE: Final = 5_000_000 * 4
INDEX_FILE_SIZE: Final = INDEX_HEADER_SIZE + INDEX_HASH_SLOTS * 4 + INDEX_ENTRIES_PER_FILE * 20
assert INDEX_FILE_SIZE == 420_000_040
CONFIG_ALLOWANCE: Final = 64 * 1024**2


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Sizing:
    """The parts of the formula, for status and documentation."""

    commit_log: int
    consume_queue: int
    index: int
    config: int
    data: int
    volume: int


def size_for_segments(segments: int, segment_size: int, average_message_size: int, max_used_ratio: int) -> Sizing:
    commit_log = (segments + 1) * segment_size
    messages = _ceil_div(commit_log, average_message_size)
    cq = _ceil_div(messages * CQ_ENTRY_SIZE, CQ_FILE_SIZE) * CQ_FILE_SIZE
    index = (_ceil_div(messages, INDEX_ENTRIES_PER_FILE) + 1) * INDEX_FILE_SIZE
    data = commit_log + cq + index + CONFIG_ALLOWANCE
    volume = _ceil_div(_ceil_div(data * 100, max_used_ratio), GIB) * GIB
    return Sizing(commit_log, cq, index, CONFIG_ALLOWANCE, data, volume)


def segments_that_fit(volume: int, segment_size: int, average_message_size: int, max_used_ratio: int) -> int:
    """The largest segment count whose computed volume is <= ``volume`` (0 when not even one fits)."""
    lo, hi = 0, max(1, volume // segment_size)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size_for_segments(mid, segment_size, average_message_size, max_used_ratio).volume <= volume:
            lo = mid
        else:
            hi = mid - 1
    return lo


def volume_size(spec: Spec) -> int:
    """The PVC size in bytes for one broker of ``spec``."""
    if spec.storage.size is not None:
        return spec.storage.size
    return size_for_segments(
        spec.storage.segments,
        spec.commit_log.segment_size,
        spec.storage.average_message_size,
        spec.retention.disk_max_used_space_ratio,
    ).volume
