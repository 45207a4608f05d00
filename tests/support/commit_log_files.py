"""CommitLog bytes read straight from a store's segment files, for tests that compare two logs
(a master's and its slave's) byte for byte, whoever wrote them (our store or Apache's broker)."""

from __future__ import annotations

from pathlib import Path

from polling import wait_until


def read_commit_log(directory: Path, segment_size: int, start: int, end: int) -> bytes:
    """Bytes [start, end) of the CommitLog in ``directory`` (segments named by their start offset)."""
    out = bytearray()
    offset = start
    while offset < end:
        base = offset - offset % segment_size
        with open(directory / f"{base:020d}", "rb") as f:
            f.seek(offset - base)
            out += f.read(min(end, base + segment_size) - offset)
        offset = base + segment_size
    return bytes(out)


def settled_segments(directory: Path, at_least: int, timeout: float = 30) -> list[Path]:
    """The segment files in ``directory`` once there are ``at_least`` and none has appeared for a
    second: a broker creates the segment after the newest one ahead of need, in the background
    (AllocateMappedFileService), so a listing taken right after the last send may or may not have
    it yet."""
    listings: list[list[Path]] = []

    def settled() -> list[Path] | None:
        listings.append(sorted(directory.iterdir()))
        last = listings[-1]
        return last if len(last) >= at_least and listings[-5:] == [last] * 5 else None

    files: list[Path] = wait_until(f"{at_least} or more CommitLog segments, none new for a second", settled, timeout)
    return files
