"""Rebuild ConsumeQueue and IndexFile from the CommitLog offline, compare, and optionally repair.

1. Scan (Spark, one partition per CommitLog segment, in parallel): every record's dispatch
   fields (topic, queue, queue offset, physical offset, size, tags, keys, store time, sysFlag).
2. ConsumeQueues (Spark, one task per group of queues): records of each queue in queue-offset
   order are appended with the engine's own :class:`store.consume_queue.ConsumeQueue` into
   ``OUTPUT/consumequeue``, then compared entry by entry with the store's files.
3. IndexFiles (driver, in physical order, as dispatch builds them): the engine's
   :class:`store.index_file.IndexService` writes ``OUTPUT/index``; the store's index files are
   compared as multisets of (keyHash, phyOffset) entries, and every entry must be reachable
   from its hash slot (otherwise lookups by that key miss it).

Entries pointing below the CommitLog's first segment (deleted by retention) are expected and
not reported. With ``repair``, and only when no store runs on the directory (its ``lock`` file
is taken for the whole swap), the rebuilt ``consumequeue/`` and ``index/`` replace the store's.

Output directories (``OUTPUT`` and the store) must be visible to every executor, like the
store itself: local mode, or a shared filesystem.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rocketstore.common.message import KEY_SEPARATOR, PROPERTY_DELAY_TIME_LEVEL, TRANSACTION_TYPE_MASK, tags_code
from rocketstore.store.checkpoint import StoreCheckpoint
from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import (
    CONSUME_QUEUE_TRANSACTION_TYPES,
    CQ_STORE_UNIT_SIZE,
    PRE_BLANK_ENTRY,
    ConsumeQueue,
)
from rocketstore.store.dispatch_request import DispatchRequest
from rocketstore.store.index_file import (
    INDEX_HEADER_SIZE,
    IndexService,
    build_key,
    index_file_size,
    index_key_hash,
    read_index_header,
)
from rocketstore.store.schedule_message_service import consume_queue_tags_code, parse_delay_levels
from rocketstore.store.store_lock import StoreLock
from rocketstore.store.store_view import commit_log_dirs, commit_log_segments, consume_queue_dirs, numbered_files

__all__ = ["MAX_DIFFERENCES_PER_QUEUE", "ReindexReport", "repair_store", "run_reindex"]

log = logging.getLogger(__name__)

#: differences listed per queue (and for the index) before a "... and N more" line
MAX_DIFFERENCES_PER_QUEUE = 1000
_CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_INDEX_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_DISPATCH_COLUMNS = ["topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "tags", "keys", "uniqKey",
                     "sysFlag", "storeTimestamp"]


@dataclass
class ReindexReport:
    """What the rebuild found; ``ok`` when the store's files equal the rebuilt ones."""

    output_dir: str
    records: int = 0
    queues: int = 0
    consume_queue_entries: int = 0
    index_entries: int = 0
    consume_queue_differences: list[str] = field(default_factory=list)
    index_differences: list[str] = field(default_factory=list)
    difference_count: int = 0
    repaired: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.difference_count == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "output_dir": self.output_dir, "records": self.records, "queues": self.queues,
            "consume_queue_entries": self.consume_queue_entries, "index_entries": self.index_entries,
            "difference_count": self.difference_count,
            "consume_queue_differences": list(self.consume_queue_differences),
            "index_differences": list(self.index_differences), "repaired": self.repaired, "notes": list(self.notes),
        }


def _read_queue(queue_dir: str, file_size: int) -> tuple[int, np.ndarray]:
    """(first logical offset, entries from there on) of a queue directory; missing files read as zeros."""
    files = numbered_files(queue_dir)
    if not files:
        return 0, np.zeros(0, dtype=_CQ_DTYPE)
    first, end = files[0].number, files[-1].number + file_size
    data = bytearray(end - first)
    for cq_file in files:
        with open(cq_file.path, "rb") as f:
            chunk = f.read(file_size)
        data[cq_file.number - first : cq_file.number - first + len(chunk)] = chunk
    usable = len(data) - len(data) % CQ_STORE_UNIT_SIZE
    return first // CQ_STORE_UNIT_SIZE, np.frombuffer(bytes(data[:usable]), dtype=_CQ_DTYPE)


def _is_entry(e: np.void) -> bool:
    triple = (int(e["offset"]), int(e["size"]), int(e["tags"]))
    return triple != (0, 0, 0) and triple != PRE_BLANK_ENTRY


def compare_queue(
    topic: str, queue_id: int, existing_dir: str, rebuilt_dir: str, file_size: int, cl_min: int
) -> tuple[list[str], int]:
    """Differences between a store's queue and the rebuilt one (listed up to the cap), and their count."""
    e_first, existing = _read_queue(existing_dir, file_size)
    r_first, rebuilt = _read_queue(rebuilt_dir, file_size)
    lo = min(e_first if len(existing) else r_first, r_first if len(rebuilt) else e_first)
    hi = max(e_first + len(existing), r_first + len(rebuilt))
    a = np.zeros(hi - lo, dtype=_CQ_DTYPE)
    b = np.zeros(hi - lo, dtype=_CQ_DTYPE)
    a[e_first - lo : e_first - lo + len(existing)] = existing
    b[r_first - lo : r_first - lo + len(rebuilt)] = rebuilt
    for arr in (a, b):  # pre-blank filler is padding, not an entry
        blank = (arr["offset"] == 0) & (arr["size"] == 0x7FFFFFFF) & (arr["tags"] == 0)
        arr[blank] = (0, 0, 0)
    differ = np.flatnonzero(a != b)
    out: list[str] = []
    count = 0
    for i in differ:
        have, want = a[i], b[i]
        logical = lo + int(i)
        if not _is_entry(want) and _is_entry(have) and int(have["offset"]) < cl_min:
            continue  # the record was deleted by retention: an expired entry, expected
        count += 1
        if count > MAX_DIFFERENCES_PER_QUEUE:
            continue
        where = f"consumequeue/{topic}/{queue_id} queue offset {logical}"
        have_t = (int(have["offset"]), int(have["size"]), int(have["tags"]))
        want_t = (int(want["offset"]), int(want["size"]), int(want["tags"]))
        if not _is_entry(want):
            out.append(f"{where}: entry {have_t} (commitLogOffset, size, tagsCode), but the CommitLog has no record "
                       "with this queue offset")
        elif not _is_entry(have):
            out.append(f"{where}: missing, expected {want_t} (commitLogOffset, size, tagsCode)")
        else:
            out.append(f"{where}: entry {have_t}, expected {want_t} (commitLogOffset, size, tagsCode)")
    if count > MAX_DIFFERENCES_PER_QUEUE:
        out.append(f"consumequeue/{topic}/{queue_id}: ... and {count - MAX_DIFFERENCES_PER_QUEUE} more differences")
    return out, count


def _build_and_compare_queues(
    rows: Iterable[Any], out_dir: str, store_cq_dir: str, file_size: int, cl_min: int, delay_levels_ms: tuple[int, ...]
) -> Iterator[tuple[str, int, int, list[str], int]]:
    """Executor side: rows sorted by (topic, queueId, queueOffset) -> one result per queue."""
    queue: ConsumeQueue | None = None
    entries = 0

    def finish(cq: ConsumeQueue, n: int) -> tuple[str, int, int, list[str], int]:
        cq.flush(0)
        cq.shutdown()
        diffs, count = compare_queue(cq.topic, cq.queue_id, os.path.join(store_cq_dir, cq.topic, str(cq.queue_id)),
                                     cq.queue_dir, file_size, cl_min)
        log.info("reindex: queue %s-%d rebuilt: %d entries, %d differences", cq.topic, cq.queue_id, n, count)
        return cq.topic, cq.queue_id, n, diffs, count

    for row in rows:
        topic, queue_id = row["topic"], row["queueId"]
        if queue is None or (queue.topic, queue.queue_id) != (topic, queue_id):
            if queue is not None:
                yield finish(queue, entries)
            queue = ConsumeQueue(topic, queue_id, out_dir, file_size)
            queue.load()
            entries = 0
        code = consume_queue_tags_code(topic, row["tags"], row["delay"], row["storeMs"], delay_levels_ms)
        if not queue.put_message_position_info(row["commitLogOffset"], row["storeSize"], code, row["queueOffset"]):
            raise OSError(f"writing the rebuilt consume queue {queue.queue_dir} failed")
        entries += 1
    if queue is not None:
        yield finish(queue, entries)


def _index_entries(path: str, slots: int, index_num: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """(header, entries 1..indexCount-1, slot table) of an index file."""
    with open(path, "rb") as f:
        data = f.read()
    header = read_index_header(data)
    count = min(max(header.index_count, 1), index_num)
    slot_table = np.frombuffer(data, dtype=">i4", count=slots, offset=INDEX_HEADER_SIZE)
    entries_at = INDEX_HEADER_SIZE + 4 * slots
    entries = np.frombuffer(data, dtype=_INDEX_DTYPE, count=count, offset=entries_at)[1:]
    return header, entries, slot_table


def compare_index(
    store_index_dir: str, rebuilt_index_dir: str, slots: int, index_num: int, cl_min: int,
    key_names: dict[tuple[int, int], str],
) -> tuple[list[str], int, int]:
    """Differences between the store's index files and the rebuilt ones; (listed, count, rebuilt entries)."""
    out: list[str] = []
    count = 0

    def problem(text: str) -> None:
        nonlocal count
        count += 1
        if count <= MAX_DIFFERENCES_PER_QUEUE:
            out.append(text)

    expected: Counter[tuple[int, int]] = Counter()
    rebuilt_total = 0
    for rebuilt in numbered_files(rebuilt_index_dir):
        _h, entries, _s = _index_entries(rebuilt.path, slots, index_num)
        rebuilt_total += len(entries)
        expected.update(zip(entries["hash"].tolist(), entries["phy"].tolist(), strict=True))
    found: Counter[tuple[int, int]] = Counter()
    where_found: dict[tuple[int, int], str] = {}
    size = index_file_size(slots, index_num)
    for index_file in numbered_files(store_index_dir):
        name = index_file.name
        if index_file.size != size:
            problem(f"index/{name}: file is {index_file.size} bytes, expected {size} "
                    f"(maxHashSlotNum {slots}, maxIndexNum {index_num}); its entries were not read")
            continue
        header, entries, slot_table = _index_entries(index_file.path, slots, index_num)
        reachable = np.zeros(len(entries) + 1, dtype=bool)
        for head in np.flatnonzero(slot_table):
            n = int(slot_table[head])
            while 0 < n <= len(entries) and not reachable[n]:
                reachable[n] = True
                e = entries[n - 1]
                prev = int(e["prev"])
                if int(e["hash"]) < 0 or int(e["hash"]) % slots != head or prev >= n:
                    break
                n = prev
        for n, e in enumerate(entries, start=1):
            key = (int(e["hash"]), int(e["phy"]))
            if key[1] < cl_min:
                continue  # expired with its record
            found[key] += 1
            where_found.setdefault(key, f"index/{name} entry {n}")
            if not reachable[n]:
                problem(f"index/{name} entry {n} (keyHash {key[0]} -> offset {key[1]}) is not reachable from hash "
                        f"slot {key[0] % slots if key[0] >= 0 else '?'}: lookups by its key miss it")
        del header
    for key, n in sorted((expected - found).items(), key=lambda kv: kv[0][1]):
        problem(f"index: no entry for key {key_names.get(key, '?')!r} (keyHash {key[0]}) -> offset {key[1]}"
                + (f" ({n} expected)" if n > 1 else ""))
    for key, n in sorted((found - expected).items(), key=lambda kv: kv[0][1]):
        problem(f"{where_found[key]}: keyHash {key[0]} -> offset {key[1]} matches no key of the record there"
                + (f" ({n} such entries)" if n > 1 else ""))
    if count > MAX_DIFFERENCES_PER_QUEUE:
        out.append(f"index: ... and {count - MAX_DIFFERENCES_PER_QUEUE} more differences")
    return out, count, rebuilt_total


def run_reindex(spark: SparkSession, config: StoreConfig, output_dir: str, df: DataFrame) -> ReindexReport:
    """Rebuild into ``output_dir`` (must not hold a previous rebuild) and compare; ``df`` is the store read."""
    out = Path(output_dir).resolve()
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"output directory {out} is not empty: give a new one")
    out_cq, out_index = out / "consumequeue", out / "index"
    out_cq.mkdir(parents=True, exist_ok=True)
    report = ReindexReport(str(out))
    segments = commit_log_segments(commit_log_dirs(config))
    cl_min = segments[0].from_offset if segments else 0
    file_size = config.get_mapped_file_size_consume_queue()
    store_cq = str(config.consume_queue_dir())
    dispatch = (df.select(*_DISPATCH_COLUMNS, F.col("properties")[PROPERTY_DELAY_TIME_LEVEL].alias("delay"))
                .withColumn("storeMs", F.unix_millis("storeTimestamp")))
    delay_levels_ms = parse_delay_levels(config.message_delay_level)

    # ConsumeQueues: parallel over queues
    # consume_queue.gets_consume_queue_entry as a Spark column: a Python UDF would ship every row
    # to a Python worker, so the same constants are applied in the JVM instead
    kind = F.col("sysFlag").bitwiseAND(TRANSACTION_TYPE_MASK)
    queues = (dispatch.filter(kind.isin(*CONSUME_QUEUE_TRANSACTION_TYPES))
              .repartition(max(spark.sparkContext.defaultParallelism, 1), "topic", "queueId")
              .sortWithinPartitions("topic", "queueId", "queueOffset"))
    out_cq_s = str(out_cq)
    results = queues.rdd.mapPartitions(
        lambda rows: _build_and_compare_queues(rows, out_cq_s, store_cq, file_size, cl_min, delay_levels_ms)).collect()
    rebuilt_queues = set()
    for topic, queue_id, entries, diffs, count in sorted(results):
        rebuilt_queues.add((topic, queue_id))
        report.queues += 1
        report.consume_queue_entries += entries
        report.consume_queue_differences.extend(diffs)
        report.difference_count += count
    for queue in consume_queue_dirs(store_cq):  # queues the store has but no record of the CommitLog belongs to
        if (queue.topic, queue.queue_id) not in rebuilt_queues:
            diffs, count = compare_queue(queue.topic, queue.queue_id, str(queue.path),
                                         str(out_cq / queue.topic / str(queue.queue_id)), file_size, cl_min)
            report.consume_queue_differences.extend(diffs)
            report.difference_count += count
    log.info("reindex: %d consume queues rebuilt, %d entries", report.queues, report.consume_queue_entries)

    # IndexFiles: sequential, in physical order, as dispatch builds them
    key_names: dict[tuple[int, int], str] = {}
    if config.message_index_enable:
        checkpoint = StoreCheckpoint(str(out / "checkpoint"))
        service = IndexService(str(out_index), config.max_hash_slot_num, config.max_index_num, checkpoint,
                               max_msgs_num_batch=config.max_msgs_num_batch)
        keyed = dispatch.filter(F.col("keys").isNotNull() | F.col("uniqKey").isNotNull())
        try:
            for row in keyed.toLocalIterator():
                topic, phy = row["topic"], row["commitLogOffset"]
                for key in [row["uniqKey"], *(row["keys"] or "").split(KEY_SEPARATOR)]:
                    if key:
                        full = build_key(topic, key)
                        key_names[(index_key_hash(full), phy)] = full
                service.build_index(DispatchRequest(
                    topic=topic, queue_id=row["queueId"], commit_log_offset=phy, msg_size=row["storeSize"],
                    tags_code=tags_code(row["tags"]), store_timestamp=row["storeMs"],
                    consume_queue_offset=row["queueOffset"], keys=row["keys"] or "", uniq_key=row["uniqKey"],
                    sys_flag=row["sysFlag"], prepared_transaction_offset=0, properties={},
                ))
        finally:
            service.shutdown()
            checkpoint.shutdown()
        diffs, count, report.index_entries = compare_index(
            str(config.index_dir()), str(out_index), config.max_hash_slot_num, config.max_index_num, cl_min,
            key_names)
        report.index_differences.extend(diffs)
        report.difference_count += count
        log.info("reindex: index rebuilt, %d entries, %d differences", report.index_entries, count)
    else:
        report.notes.append("messageIndexEnable is false: index files not rebuilt")
    report.records = report.consume_queue_entries
    return report


def repair_store(config: StoreConfig, output_dir: str, include_index: bool = True) -> None:
    """Swap the rebuilt consumequeue/ (and index/) into the store; raises StoreLockedError if a store runs.

    The store's lock is held for the whole swap. Each directory is copied next to its target
    first, then the old one is renamed away, the copy renamed in, and the old one deleted.
    """
    lock = StoreLock(str(config.lock_path()))
    lock.acquire()
    try:
        root = config.root_dir()
        stamp = time.strftime("%Y%m%d%H%M%S")
        parts = [("consumequeue", config.consume_queue_dir())]
        if include_index:
            parts.append(("index", config.index_dir()))
        for name, target in parts:
            source = Path(output_dir) / name
            staged = root / f".{name}.reindex-{stamp}"
            old = root / f".{name}.old-{stamp}"
            if source.is_dir():
                shutil.copytree(source, staged)
            else:
                staged.mkdir()
            if target.exists():
                os.replace(target, old)
            os.replace(staged, target)
            fd = os.open(root, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            shutil.rmtree(old, ignore_errors=True)
            log.info("reindex: %s replaced with the rebuilt files", target)
    finally:
        lock.release()
