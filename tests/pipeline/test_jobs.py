"""Pipeline jobs on engine-written stores: export to Parquet, reindex (find and repair damage),
retention analytics against hand-computed numbers, and the command line."""

from __future__ import annotations

import json
import math
import os
import struct
import time
from pathlib import Path

import pytest
from pipeline_fixtures import SEG, SLOTS, Written, broker_conf, make_cfg
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocketstore.common.message import Message
from rocketstore.pipeline import jobs
from rocketstore.pipeline.retention import longest_wait_hours
from rocketstore.store.index_file import index_entry_pos, read_index_entry
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.offline import dump_messages, verify_store
from rocketstore.store.store_lock import StoreLock, StoreLockedError
from rocketstore.store.store_view import commit_log_dirs, commit_log_segments


def test_export_to_parquet_by_topic_and_date(spark: SparkSession, pristine: Written, tmp_path: Path) -> None:
    out = str(tmp_path / "export")
    msgs = [m for m in dump_messages(pristine.cfg) if m.topic in ("TopicA", "TopicB")]
    count = jobs.export(spark, pristine.cfg, out, topics="TopicA,TopicB", mode="overwrite")
    assert count == len(msgs)
    assert sorted(p.name for p in Path(out).iterdir() if p.is_dir()) == ["topic=TopicA", "topic=TopicB"]
    assert all(d.name.startswith("date=") for d in (Path(out) / "topic=TopicA").iterdir() if d.is_dir())
    back = spark.read.parquet(out)
    got = {(r["topic"], r["queueId"], r["queueOffset"]): (r["commitLogOffset"], bytes(r["body"]), r["properties"])
           for r in back.collect()}
    assert got == {(m.topic, m.queue_id, m.queue_offset): (m.physical_offset, m.body, m.properties) for m in msgs}
    dates = {r["date"] for r in back.select("date", F.to_date("storeTimestamp").alias("d")).collect()}
    assert len(dates) >= 1


def _damage(w: Written) -> tuple[Path, Path, int]:
    """One consume-queue entry of TopicC/1 gets a wrong size, one index entry a wrong keyHash."""
    cq = w.cfg.consume_queue_dir() / "TopicC" / "1" / f"{0:020d}"
    with open(cq, "r+b") as f:
        f.seek(20 * 2 + 8)
        f.write(struct.pack(">i", 9999))
    index = sorted(w.cfg.index_dir().iterdir())[1]
    pos = index_entry_pos(SLOTS, 5)
    with open(index, "r+b") as f:
        f.seek(pos)
        f.write(struct.pack(">i", 123456))
    return cq, index, pos


def test_reindex_finds_damage_and_repairs_it(spark: SparkSession, written: Written, tmp_path: Path) -> None:
    assert verify_store(written.cfg).ok
    clean = jobs.reindex(spark, written.cfg, str(tmp_path / "clean"))
    assert clean.ok, clean.consume_queue_differences + clean.index_differences
    assert clean.consume_queue_entries == written.count
    assert clean.index_entries == sum(len((m.keys or "").split()) + (m.uniq_key is not None)
                                      for m in dump_messages(written.cfg))

    _cq, index, _pos = _damage(written)
    with open(index, "rb") as f:
        _h, phy, _d, _p = read_index_entry(f.read(), SLOTS, 5)
    assert not verify_store(written.cfg).ok
    lock = StoreLock(str(written.cfg.lock_path()))
    lock.acquire()  # a "running store": repair must refuse
    try:
        with pytest.raises(StoreLockedError):
            jobs.reindex(spark, written.cfg, str(tmp_path / "refused"), repair=True)
    finally:
        lock.release()

    report = jobs.reindex(spark, written.cfg, str(tmp_path / "rebuilt"))
    assert not report.ok
    cq_diffs = report.consume_queue_differences
    assert len(cq_diffs) == 1 and "consumequeue/TopicC/1 queue offset 2" in cq_diffs[0], cq_diffs
    assert ", 9999, " in cq_diffs[0]
    idx = report.index_differences
    assert any(f"keyHash 123456 -> offset {phy} matches no key" in d for d in idx), idx
    assert any(f"-> offset {phy}" in d and "no entry for key" in d for d in idx), idx
    assert (tmp_path / "rebuilt" / "consumequeue" / "TopicC" / "1").is_dir()

    repaired = jobs.reindex(spark, written.cfg, str(tmp_path / "repair"), repair=True)
    assert repaired.repaired
    after = verify_store(written.cfg)
    assert after.ok, after.problems
    assert jobs.reindex(spark, written.cfg, str(tmp_path / "again")).ok
    assert sum(1 for _ in dump_messages(written.cfg)) == written.count


def test_retention_numbers(spark: SparkSession, written: Written, tmp_path: Path) -> None:
    segments = commit_log_segments(commit_log_dirs(written.cfg))
    data = [s for s in segments]
    now = 1_800_000_000_000
    ages_h = [100, 50, 30, 10, 2, 0.5, 0.1, 0.05][: len(data)]
    for seg, age in zip(data, ages_h, strict=False):
        t = (now - age * 3_600_000) / 1000
        os.utime(seg.path, (t, t))
    summary = jobs.retention(spark, written.cfg, str(tmp_path / "ret"), candidates=(1, 24, 72), now_ms=now)
    msgs = list(dump_messages(written.cfg))
    assert summary["totals"]["messages"] == len(msgs)
    assert summary["totals"]["record_bytes"] == sum(m.total_size for m in msgs)
    hourly: dict[tuple[str, int], list[int]] = {}
    for m in msgs:
        slot = hourly.setdefault((m.topic, m.store_timestamp // 3_600_000 * 3_600_000), [0, 0])
        slot[0] += 1
        slot[1] += m.total_size
    assert {(h["topic"], h["hour"]): [h["messages"], h["bytes"]] for h in summary["hourly"]} == hourly
    per_seg = {s["from_offset"]: s for s in summary["segments"]}
    for seg, age in zip(data, ages_h, strict=False):
        assert per_seg[seg.from_offset]["age_hours"] == pytest.approx(age, abs=1e-3)
        mine = [m for m in msgs if seg.from_offset <= m.physical_offset < seg.from_offset + SEG]
        assert per_seg[seg.from_offset]["messages"] == len(mine)
    n = len(data)
    buckets = {b["bucket"]: b["segments"] for b in summary["age_distribution"]}
    expect_buckets = {"0-1h": sum(a < 1 for a in ages_h[:n]), "1-6h": sum(1 <= a < 6 for a in ages_h[:n]),
                      "6-24h": sum(6 <= a < 24 for a in ages_h[:n]), "1-3d": sum(24 <= a < 72 for a in ages_h[:n]),
                      "3-7d": sum(72 <= a < 168 for a in ages_h[:n]), ">7d": 0}
    assert buckets == expect_buckets
    proj = {p["file_reserved_time_hours"]: p for p in summary["projections"]}
    for hours in (1, 24, 72):
        kept = sum(1 for i, a in enumerate(ages_h[:n]) if a < hours or i == n - 1)
        assert proj[hours]["retained_segments_now"] == kept
        assert proj[hours]["retained_bytes_now"] == kept * SEG
        assert proj[hours]["reclaimable_bytes_now"] == (n - kept) * SEG
    rate = summary["ingest"]["bytes_per_hour"]
    assert summary["ingest"]["window_hours"] == 1.0  # written within seconds: the floor of one hour
    assert rate == sum(m.total_size for m in msgs)
    wait = longest_wait_hours(written.cfg.get_delete_when_hours())
    assert wait == 24
    assert proj[72]["projected_commit_log_bytes"] == (math.ceil(rate * (72 + 24) / SEG) + 1) * SEG
    on_disk = json.loads((tmp_path / "ret" / "retention.json").read_text())
    assert on_disk["projections"] == summary["projections"]
    assert spark.read.parquet(str(tmp_path / "ret" / "hourly")).count() == len(hourly)


def test_command_line(
    spark: SparkSession, written: Written, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rocketstore.cli.main import main

    conf = str(broker_conf(tmp_path, written.cfg.root_dir()))
    assert main(["pipeline", "reindex", "-c", conf, "--output", str(tmp_path / "r1"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    _damage(written)
    assert main(["pipeline", "reindex", "-c", conf, "--output", str(tmp_path / "r2")]) == 1
    out = capsys.readouterr().out
    assert "differences" in out and "consumequeue/TopicC/1 queue offset 2" in out
    assert main(["pipeline", "export", "--store-dir", str(written.cfg.root_dir()), "-c", conf, "--output",
                 str(tmp_path / "x"), "--topics", "TopicA", "--start-time", "0"]) == 0
    assert "exported" in capsys.readouterr().out
    assert main(["pipeline", "retention", "-c", conf, "--output", str(tmp_path / "ret"), "--now",
                 str(int(time.time() * 1000))]) == 0
    assert "fileReservedTime=72h" in capsys.readouterr().out
    assert main(["pipeline", "export", "--store-dir", str(tmp_path / "missing"), "--output",
                 str(tmp_path / "y")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["pipeline", "reindex", "-c", conf, "--output", str(tmp_path / "r1")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_reindex_rebuilds_delayed_entries_with_their_delivery_time(spark: SparkSession, tmp_path: Path) -> None:
    """A SCHEDULE_TOPIC_XXXX entry's tagsCode is when it is due (store time + its level's delay),
    not a tag hash: the rebuilt queue must hold the same value, or reindex would call it damage."""
    cfg = make_cfg(tmp_path / "store")
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    try:
        assert store.put_message(Message(topic="TopicA", body=b"later", properties={"DELAY": "18", "TAGS": "t"})).ok
        assert store.put_message(Message(topic="TopicA", body=b"now", properties={"TAGS": "t"})).ok
        assert store.reput_service.wait_caught_up(5)
        [held] = store.get_consume_queue("SCHEDULE_TOPIC_XXXX", 17).entries(0, 1)  # type: ignore[union-attr]
    finally:
        store.shutdown()
    report = jobs.reindex(spark, cfg, str(tmp_path / "rebuilt"))
    assert report.ok, report.consume_queue_differences
    rebuilt = (tmp_path / "rebuilt" / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "17" / "00000000000000000000")
    offset, size, tags = struct.unpack_from(">qiq", rebuilt.read_bytes())
    assert (offset, size, tags) == (held.commit_log_offset, held.size, held.tags_code)
    stored = next(iter(dump_messages(cfg, topic="SCHEDULE_TOPIC_XXXX")))
    assert tags == stored.store_timestamp + 2 * 3600 * 1000  # level 18 of the default table: 2h
