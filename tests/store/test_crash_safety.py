"""kill -9 crash safety: every acknowledged SYNC_FLUSH put survives SIGKILL and abnormal recovery.

A writer child (crash_writer.py) puts messages into one store directory and prints an ack line
per PUT_OK; the test SIGKILLs it at a random moment, recovers the store in this process, and
checks each acknowledged message by queue offset, by CommitLog offset and by key, that queue
offsets are contiguous, and that the offline verifier is clean. The store keeps growing across
cycles, so later recoveries run over many 64 KiB segments. The cycle logic lives in
crash_cycle.py, shared with bench/crash_soak.py.

Reproduce a failing run with CRASH_SEED=<seed printed below>.
"""

from __future__ import annotations

import itertools
import logging
import os
import random

import pytest
from crash_cycle import SEGMENT_SIZE, CrashHarness, make_config

CYCLES = 20
# kill during the child's start-up (imports, load/recovery, dispatch catch-up) and right after
# an ack shows the child moved to a new CommitLog segment; all other cycles kill at random
SPECIAL = {4: "roll", 6: "startup", 11: "roll", 14: "startup", 17: "roll"}


@pytest.mark.slow
@pytest.mark.integration
def test_acknowledged_messages_survive_kill_9(tmp_path: object, caplog: pytest.LogCaptureFixture) -> None:
    # abnormal recovery re-dispatches every record and warns once per entry already built:
    # thousands of lines per cycle that would only slow the capture down
    caplog.set_level(logging.ERROR, logger="rocketstore.store.consume_queue")
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    print(f"crash-safety seed: CRASH_SEED={seed}")
    store_dir = str(tmp_path)
    harness = CrashHarness(store_dir, seed, recheck_old=200)
    modes_run: list[tuple[str, int]] = []
    for i in range(CYCLES):
        mode = SPECIAL.get(i, "random")
        result = harness.cycle(mode)
        modes_run.append((mode, len(result.acks)))
        print(f"cycle {i:2d} {mode:7s} acks={len(result.acks):4d} killed_after={result.kill_after_s:.3f}s "
              f"recovery={result.recovery_s:.3f}s abnormal={result.abnormal}")
        assert not result.problems, (
            f"cycle {i} ({mode}, seed {seed}): {len(result.problems)} problems:\n" + "\n".join(result.problems[:40])
        )
        if mode == "roll":
            # the kill follows the first ack in a new segment, but the writer may ack a few more
            # before SIGKILL lands: require that this cycle did cross a segment boundary
            segments = [a.commit_log_offset // SEGMENT_SIZE for a in result.acks]
            assert any(b > a for a, b in itertools.pairwise(segments)), segments

    assert len(harness.acks) > CYCLES, f"too few acknowledged messages overall: {modes_run}"
    segments = [n for n in os.listdir(make_config(store_dir).commit_log_dir()) if n.isdigit()]
    assert len(segments) >= 3, f"store never grew past {len(segments)} segments: recovery was not multi-segment"


@pytest.mark.integration
def test_kill_between_creating_and_sizing_a_file_leaves_an_openable_store(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    """A SIGKILL right after a segment's open(O_CREAT) and before its ftruncate leaves an empty file.

    The soak hit this with the CommitLog's pre-allocated next segment, and the store then refused
    to open ("0 bytes, expected 65536"). The window is a few microseconds wide, so after one real
    kill -9 cycle this test makes the empty files with the very syscall the kill interrupts
    (a stand-in for a fault too narrow to hit on purpose): next CommitLog segment, next consume
    queue file, a newer index file. Recovery must drop them and lose no acknowledged message.
    """
    caplog.set_level(logging.ERROR, logger="rocketstore.store.consume_queue")
    store_dir = str(tmp_path)
    harness = CrashHarness(store_dir, 12345)
    first = harness.cycle("random")
    assert not first.problems, "\n".join(first.problems[:40])
    cfg = make_config(store_dir)
    last = max(harness.acks, key=lambda a: a.commit_log_offset)
    next_segment = (last.commit_log_offset // SEGMENT_SIZE + 2) * SEGMENT_SIZE
    cq_dir = os.path.join(cfg.consume_queue_dir(), last.topic, str(last.queue_id))
    cq_next = (len(os.listdir(cq_dir)) + 1) * cfg.get_mapped_file_size_consume_queue()
    index_names = sorted(os.listdir(cfg.index_dir()))
    empties = [
        os.path.join(cfg.commit_log_dir(), f"{next_segment:020d}"),
        os.path.join(cq_dir, f"{cq_next:020d}"),
        os.path.join(cfg.index_dir(), str(int(index_names[-1]) + 1000)),
    ]
    for path in empties:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
    # the next writer must open the store, and every ack so far must survive its crash too
    second = harness.cycle("random")
    assert not second.problems, "\n".join(second.problems[:40])
    for path in empties:
        assert not os.path.exists(path) or os.path.getsize(path) > 0, f"{path} left empty"
