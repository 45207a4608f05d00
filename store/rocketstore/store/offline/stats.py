"""``rocketstore store stats``: a JSON-ready summary of a store directory, read without changing it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rocketstore.store.checkpoint import read_checkpoint
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE, PRE_BLANK_ENTRY
from rocketstore.store.index_file import INDEX_HEADER_SIZE, read_index_header
from rocketstore.store.store_view import (
    CommitLogView,
    NumberedFile,
    StoreView,
    iter_consume_queue_entries,
    numbered_files,
)

__all__ = ["store_stats"]


def _last_valid_end(view: CommitLogView) -> int:
    """End of the last valid record (or blank record) of the last segment holding data."""
    segments = view.segments
    if not segments:
        return 0
    last = max((i for i, s in enumerate(segments) if s.has_data), default=None)
    if last is None:
        return segments[0].from_offset
    seg = segments[last]
    end = seg.from_offset
    for step in view.walk(last, check_crc=True, read_body=False):
        if step.segment is not seg or step.kind not in ("record", "blank"):
            break
        if step.kind == "blank":
            end = seg.from_offset + (view.file_size or seg.size)
            break
        assert step.message is not None
        end = step.offset + step.message.total_size
    return end


def _scan_queue_stats(files: list[NumberedFile], cl_min: int) -> dict[str, Any]:
    min_logical: int | None = None
    max_logical = files[0].number // CQ_STORE_UNIT_SIZE if files else 0
    first_phy = last_phy = -1
    entries = 0
    for f in files:
        number = f.number
        for pos, offset, size, tags in iter_consume_queue_entries(f.path):
            if (offset, size, tags) == PRE_BLANK_ENTRY or offset < 0 or size <= 0:
                continue
            logical = (number + pos) // CQ_STORE_UNIT_SIZE
            entries += 1
            max_logical = logical + 1
            last_phy = offset
            if min_logical is None and offset >= cl_min:
                min_logical = logical
                first_phy = offset
    min_offset = max_logical if min_logical is None else min_logical
    return {
        "min_offset": min_offset,
        "max_offset": max_logical,
        "message_count": max_logical - min_offset,
        "entries_on_disk": entries,
        "min_commit_log_offset": first_phy,
        "max_commit_log_offset": last_phy,
        "files": len(files),
    }


def _disk_usage(path: Path) -> dict[str, int]:
    apparent = allocated = files = 0
    if path.is_file():
        st = path.stat()
        return {"apparent_bytes": st.st_size, "allocated_bytes": st.st_blocks * 512, "files": 1}
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return {"apparent_bytes": apparent, "allocated_bytes": allocated, "files": files}


def store_stats(config: StoreConfig) -> dict[str, Any]:
    """A JSON-ready summary of a store directory, read without changing anything.

    Keys: ``store_dir``; ``commit_log`` (segment size, ``segments`` with name/path/size/from
    offset, ``min_offset`` = first segment's offset or -1, ``max_offset`` = end of the last
    valid record); ``topics`` (per topic: queues and messages); ``queues`` (per topic/queue:
    min/max logical offsets, message count); ``index_files`` (entries, time and offset ranges);
    ``disk_usage`` (bytes per directory); ``checkpoint`` (the three timestamps, ms);
    ``abort_present`` / ``last_shutdown_abnormal``.
    """
    store = StoreView(config)
    root = store.root
    segments = store.segments()
    file_size, size_found = store.segment_size(segments)
    with CommitLogView(segments, file_size) as view:
        max_offset = _last_valid_end(view)
    cl_min = view.min_offset

    queues = []
    topics: dict[str, dict[str, int]] = {}
    for queue in store.consume_queues():
        q = {"topic": queue.topic, "queue_id": queue.queue_id, **_scan_queue_stats(numbered_files(queue.path), cl_min)}
        queues.append(q)
        summary = topics.setdefault(queue.topic, {"queues": 0, "message_count": 0})
        summary["queues"] += 1
        summary["message_count"] += q["message_count"]

    index_files = []
    for index_file in store.index_files():
        with open(index_file.path, "rb") as f:
            head = f.read(INDEX_HEADER_SIZE)
        item: dict[str, Any] = {"name": index_file.name, "path": index_file.path, "size": index_file.size}
        if len(head) == INDEX_HEADER_SIZE:
            header = read_index_header(head)
            item.update({
                "entries": max(header.index_count - 1, 0),
                "begin_timestamp": header.begin_timestamp,
                "end_timestamp": header.end_timestamp,
                "begin_phy_offset": header.begin_phy_offset,
                "end_phy_offset": header.end_phy_offset,
                "hash_slot_count": header.hash_slot_count,
            })
        else:
            item["error"] = f"only {len(head)} bytes, the header needs {INDEX_HEADER_SIZE}"
        index_files.append(item)

    checkpoint: dict[str, Any] | None = None
    if config.checkpoint_path().is_file():
        try:
            physic, logics, index = read_checkpoint(str(config.checkpoint_path()))
            checkpoint = {"physic_msg_timestamp": physic, "logics_msg_timestamp": logics,
                          "index_msg_timestamp": index}
        except ValueError as exc:
            checkpoint = {"error": str(exc)}

    disk: dict[str, dict[str, int]] = {}
    cl_dirs = store.commit_log_dirs
    commit_log_usage = {"apparent_bytes": 0, "allocated_bytes": 0, "files": 0}
    for d in cl_dirs:
        if d.is_dir():
            for k, v in _disk_usage(d).items():
                commit_log_usage[k] += v
    disk["commitlog"] = commit_log_usage
    for label, directory in (("consumequeue", config.consume_queue_dir()), ("index", config.index_dir()),
                             ("config", config.config_dir())):
        disk[label] = _disk_usage(directory) if directory.exists() else {
            "apparent_bytes": 0, "allocated_bytes": 0, "files": 0}
    total = _disk_usage(root)
    for d in cl_dirs:  # commit log directories configured outside the root
        if d.is_dir() and not d.resolve().is_relative_to(root.resolve()):
            for k, v in _disk_usage(d).items():
                total[k] += v
    disk["total"] = total

    abort = config.abort_path().exists()
    return {
        "store_dir": str(root),
        "commit_log": {
            "dirs": [str(d) for d in cl_dirs],
            "segment_size": config.mapped_file_size_commit_log,
            "segment_size_on_disk": size_found if size_found is not None else file_size,
            "segments": [
                {"name": s.name, "path": s.path, "size": s.size, "from_offset": s.from_offset, "has_data": s.has_data}
                for s in view.segments
            ],
            "min_offset": cl_min,
            "max_offset": max_offset,
        },
        "topics": topics,
        "queues": queues,
        "index_files": index_files,
        "disk_usage": disk,
        "checkpoint": checkpoint,
        "abort_present": abort,
        "last_shutdown_abnormal": abort,
    }
