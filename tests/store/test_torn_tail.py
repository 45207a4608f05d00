"""Recovery after a crash in the middle of a record's copy leaves no torn bytes behind.

A real kill -9 lands inside the copy only by chance (tests/store/test_crash_safety.py met one
once in CI); here the torn record is written into the segment directly, the one fault this
test fakes, so the case runs every time.
"""

from __future__ import annotations

import os
from pathlib import Path

from store_support import running, small_config

from rocketstore.common.message import Message
from rocketstore.store.offline import verify_store

BODY_SIZE = 300


def test_bytes_of_a_torn_record_are_gone_after_recovery(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "store", commit_log_size=64 * 1024)
    with running(cfg) as store:
        for i in range(5):
            assert store.put_message(Message(topic="Torn", queue_id=0, body=bytes([i]) * BODY_SIZE)).ok
        end = store.commit_log.max_offset
        first_record = store.commit_log.get_message(0, end // 5)
    assert first_record is not None
    segment = os.path.join(cfg.commit_log_dir(), sorted(os.listdir(cfg.commit_log_dir()))[0])
    # what memcpy leaves when killed: a record's length and most of its bytes, but not all of its
    # magic code (the first byte still zero), after the last whole record
    torn = bytearray(first_record)
    torn[4] = 0
    with open(segment, "r+b") as f:
        f.seek(end)
        f.write(torn)
    cfg.abort_path().write_text("")  # the writer died: abnormal recovery

    with running(cfg) as store:
        assert store.commit_log.max_offset == end
    with open(segment, "rb") as f:
        f.seek(end)
        assert f.read(len(torn)) == bytes(len(torn)), "the torn record's bytes are still in the segment"
    report = verify_store(cfg)
    assert report.ok, report.problems
    assert report.records == 5

    with running(cfg) as store:  # and the log goes on from there
        assert store.put_message(Message(topic="Torn", queue_id=0, body=b"after")).ok
        assert store.reput_service.wait_caught_up(10)
        assert store.get_max_offset_in_queue("Torn", 0) == 6
