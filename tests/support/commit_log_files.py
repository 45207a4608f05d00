"""CommitLog bytes read straight from a store's segment files, for tests that compare two logs
(a master's and its slave's) byte for byte, whoever wrote them (our store or Apache's broker)."""

from __future__ import annotations

from pathlib import Path


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
