"""Retention analytics: what the store holds per topic and hour, how old its segments are, and
how much disk candidate ``fileReservedTime`` values would take.

RocketMQ deletes a CommitLog segment when its file modification time is more than
``fileReservedTime`` hours old, at the ``deleteWhen`` hours (or at once when the disk is
too full), and never the last segment. The projections below apply exactly that rule.

Output (``OUTPUT/retention.json``; ``OUTPUT/hourly`` also as Parquet) — the contract the
operator's adaptive retention reads; times are epoch milliseconds, sizes bytes::

    {
      "version": 1,
      "generated_at": ms,                 # the "now" ages are measured against
      "store_dir": str,
      "segment_size": int,                # mappedFileSizeCommitLog
      "file_reserved_time_hours": int,    # the store's current setting
      "delete_when_hours": [int],         # deleteWhen, hours of the day
      "totals": {"messages": int, "record_bytes": int, "segments": int, "segment_bytes": int,
                 "first_store_timestamp": ms | null, "last_store_timestamp": ms | null},
      "ingest": {"window_hours": float,   # span of the store timestamps read (at least 1)
                 "bytes_per_hour": float, "messages_per_hour": float},
      "hourly": [{"topic": str, "hour": ms, "messages": int, "bytes": int}],   # by topic, hour
      "segments": [{"name": str, "from_offset": int, "size": int, "mtime": ms, "age_hours": float,
                    "messages": int, "record_bytes": int,
                    "first_store_timestamp": ms | null, "last_store_timestamp": ms | null}],
      "age_distribution": [{"bucket": "0-1h" | "1-6h" | "6-24h" | "1-3d" | "3-7d" | ">7d",
                            "min_hours": float, "max_hours": float | null,
                            "segments": int, "bytes": int}],
      "projections": [{"file_reserved_time_hours": int,
                       "retained_segments_now": int,     # kept if cleanup ran now
                       "retained_bytes_now": int,
                       "reclaimable_bytes_now": int,
                       "projected_commit_log_bytes": int,       # steady state at the current ingest
                       "projected_consume_queue_bytes": int}]   # 20 bytes per message kept
    }

``projected_commit_log_bytes`` = whole segments for ``bytes_per_hour x (hours + H)`` plus the
segment being written, where ``H`` is the longest wait between two ``deleteWhen`` hours
(expired segments wait for it); a rough steady state, not a promise.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from rocketstore.store.config import StoreConfig
from rocketstore.store.store_view import commit_log_dirs, commit_log_segments

__all__ = ["AGE_BUCKETS", "DEFAULT_CANDIDATES", "project", "retention_summary"]

DEFAULT_CANDIDATES = (12, 24, 48, 72, 168)
#: (label, min hours, max hours or None)
AGE_BUCKETS: tuple[tuple[str, float, float | None], ...] = (
    ("0-1h", 0, 1), ("1-6h", 1, 6), ("6-24h", 6, 24), ("1-3d", 24, 72), ("3-7d", 72, 168), (">7d", 168, None),
)
_HOUR_MS = 3_600_000


def longest_wait_hours(delete_when: tuple[int, ...]) -> int:
    """Longest gap between consecutive deleteWhen hours (24 for one hour a day)."""
    hours = sorted(set(delete_when)) or [4]
    gaps = [(b - a) for a, b in zip(hours, [*hours[1:], hours[0] + 24], strict=True)]
    return max(gaps)


def project(
    segments: list[dict[str, Any]], segment_size: int, candidates: tuple[int, ...], bytes_per_hour: float,
    messages_per_hour: float, wait_hours: int,
) -> list[dict[str, Any]]:
    """The ``projections`` entries (pure: the numbers tests check by hand)."""
    out = []
    total = sum(s["size"] for s in segments)
    for hours in candidates:
        kept = [s for i, s in enumerate(segments) if s["age_hours"] < hours or i == len(segments) - 1]
        retained = sum(s["size"] for s in kept)
        window = hours + wait_hours
        projected = (math.ceil(bytes_per_hour * window / segment_size) + 1) * segment_size if segment_size else 0
        out.append({
            "file_reserved_time_hours": hours,
            "retained_segments_now": len(kept),
            "retained_bytes_now": retained,
            "reclaimable_bytes_now": total - retained,
            "projected_commit_log_bytes": projected,
            "projected_consume_queue_bytes": math.ceil(messages_per_hour * window) * 20,
        })
    return out


def age_distribution(segments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for label, lo, hi in AGE_BUCKETS:
        inside = [s for s in segments if s["age_hours"] >= lo and (hi is None or s["age_hours"] < hi)]
        out.append({"bucket": label, "min_hours": lo, "max_hours": hi, "segments": len(inside),
                    "bytes": sum(s["size"] for s in inside)})
    return out


def retention_summary(
    config: StoreConfig, df: DataFrame, output_dir: str, candidates: tuple[int, ...] = DEFAULT_CANDIDATES,
    now_ms: int | None = None,
) -> dict[str, Any]:
    """Compute the analytics from ``df`` (the store read), write them under ``output_dir``, return them."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    seg_size = config.mapped_file_size_commit_log
    store_ms = F.unix_millis("storeTimestamp")
    hourly_df = (df.select("topic", "storeSize", (F.floor(store_ms / _HOUR_MS) * _HOUR_MS).alias("hour"))
                 .groupBy("topic", "hour").agg(F.count(F.lit(1)).alias("messages"), F.sum("storeSize").alias("bytes"))
                 .orderBy("topic", "hour"))
    hourly = [{"topic": r["topic"], "hour": int(r["hour"]), "messages": int(r["messages"]), "bytes": int(r["bytes"])}
              for r in hourly_df.collect()]
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    hourly_df.write.mode("overwrite").parquet(str(Path(output_dir) / "hourly"))

    per_segment = {
        int(r["seg"]): r
        for r in df.select((F.col("commitLogOffset") - F.col("commitLogOffset") % seg_size).alias("seg"),
                           "storeSize", store_ms.alias("ms"))
        .groupBy("seg").agg(F.count(F.lit(1)).alias("messages"), F.sum("storeSize").alias("bytes"),
                            F.min("ms").alias("first"), F.max("ms").alias("last")).collect()
    }
    segments: list[dict[str, Any]] = []
    for seg in commit_log_segments(commit_log_dirs(config)):
        mtime = int(os.stat(seg.path).st_mtime * 1000)
        row = per_segment.get(seg.from_offset)
        segments.append({
            "name": seg.name, "from_offset": seg.from_offset, "size": seg.size, "mtime": mtime,
            "age_hours": max(now - mtime, 0) / _HOUR_MS,
            "messages": int(row["messages"]) if row else 0, "record_bytes": int(row["bytes"]) if row else 0,
            "first_store_timestamp": int(row["first"]) if row else None,
            "last_store_timestamp": int(row["last"]) if row else None,
        })
    messages = sum(s["messages"] for s in segments)
    record_bytes = sum(s["record_bytes"] for s in segments)
    firsts = [s["first_store_timestamp"] for s in segments if s["first_store_timestamp"] is not None]
    lasts = [s["last_store_timestamp"] for s in segments if s["last_store_timestamp"] is not None]
    window_hours = max((max(lasts) - min(firsts)) / _HOUR_MS, 1.0) if firsts else 1.0
    bytes_per_hour = record_bytes / window_hours
    messages_per_hour = messages / window_hours
    delete_when = config.get_delete_when_hours()
    summary: dict[str, Any] = {
        "version": 1,
        "generated_at": now,
        "store_dir": str(config.root_dir()),
        "segment_size": seg_size,
        "file_reserved_time_hours": config.file_reserved_time,
        "delete_when_hours": list(delete_when),
        "totals": {"messages": messages, "record_bytes": record_bytes, "segments": len(segments),
                   "segment_bytes": sum(s["size"] for s in segments),
                   "first_store_timestamp": min(firsts) if firsts else None,
                   "last_store_timestamp": max(lasts) if lasts else None},
        "ingest": {"window_hours": window_hours, "bytes_per_hour": bytes_per_hour,
                   "messages_per_hour": messages_per_hour},
        "hourly": hourly,
        "segments": segments,
        "age_distribution": age_distribution(segments),
        "projections": project(segments, seg_size, candidates, bytes_per_hour, messages_per_hour,
                               longest_wait_hours(delete_when)),
    }
    tmp = Path(output_dir) / "retention.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, Path(output_dir) / "retention.json")
    return summary
