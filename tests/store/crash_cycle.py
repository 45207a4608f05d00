"""Shared kill -9 crash-cycle logic for tests/store/test_crash_safety.py and bench/crash_soak.py.

Not a test module (pytest collects only ``test_*.py``). One cycle:

1. start ``crash_writer.py`` as a child on the store directory; it prints one line per
   acknowledged (PUT_OK under SYNC_FLUSH) message: ``<seq> <topic> <queueId> <queueOffset> <commitLogOffset>``;
2. read acknowledgements for a while, then SIGKILL the child (at a random moment, during its
   start-up, or right after it rolled to a new CommitLog segment);
3. open the store in this process (abnormal recovery, since ``abort`` is left behind), and check
   that every acknowledged message is there: by queue offset, by CommitLog offset and by key;
   that queue offsets are contiguous; and that the offline verifier finds nothing wrong.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from store_support import small_config  # noqa: E402

from rocketstore.common.message import decode_record  # noqa: E402
from rocketstore.store.config import FlushDiskType, StoreConfig  # noqa: E402
from rocketstore.store.message_store import DefaultMessageStore  # noqa: E402
from rocketstore.store.status import GetMessageStatus  # noqa: E402

WRITER_SCRIPT = str(HERE / "crash_writer.py")
SEGMENT_SIZE = 64 * 1024
TOPICS = ("CrashA", "CrashB", "CrashC")
QUEUES = 4
MAX_BODY = 3000


def make_config(store_dir: str) -> StoreConfig:
    """The configuration both the writer and the checker use: SYNC_FLUSH, 64 KiB segments."""
    return small_config(store_dir, commit_log_size=SEGMENT_SIZE, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def body_for(seq: int) -> bytes:
    """Deterministic body of 1..3000 bytes that spells out its sequence number."""
    size = random.Random(seq * 7919 + 17).randint(1, MAX_BODY)
    unit = f"<{seq}>".encode()
    return (unit * (size // len(unit) + 1))[:size]


def key_for(seq: int) -> str:
    return f"seq-{seq}"


@dataclass(frozen=True, slots=True)
class Ack:
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int

    @classmethod
    def parse(cls, line: str) -> Ack:
        seq, topic, qid, qoff, clo = line.split()
        return cls(int(seq), topic, int(qid), int(qoff), int(clo))


@dataclass
class CycleResult:
    mode: str
    acks: list[Ack]
    kill_after_s: float
    recovery_s: float
    abnormal: bool
    problems: list[str] = field(default_factory=list)


class _AckReader(threading.Thread):
    """Collects complete ack lines from the child's stdout (a torn last line is not an ack)."""

    def __init__(self, proc: subprocess.Popen[bytes], segment_size: int) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.segment_size = segment_size
        self.acks: list[Ack] = []
        self.first_ack = threading.Event()
        self.rolled = threading.Event()  # an ack landed in a later segment than the one before it

    def run(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if not raw.endswith(b"\n"):
                break
            ack = Ack.parse(raw.decode())
            if self.acks and ack.commit_log_offset // self.segment_size > (
                self.acks[-1].commit_log_offset // self.segment_size
            ):
                self.rolled.set()
            self.acks.append(ack)
            self.first_ack.set()


def run_writer_until_killed(store_dir: str, start_seq: int, mode: str, rng: random.Random,
                            startup_s: float) -> tuple[list[Ack], float]:
    """Run one writer child and SIGKILL it; return its acknowledgements and when it was killed.

    ``mode``: ``random`` (0.05-0.5 s after the first ack), ``startup`` (at a random moment before
    the child's first ack would be expected, i.e. inside imports/load/recovery/start), ``roll``
    (as soon as an ack shows the child has moved to a new CommitLog segment).
    """
    # stderr goes to a file: the child logs during recovery and must never block on a full pipe
    with tempfile.TemporaryFile() as err_file:
        return _run_and_kill(store_dir, start_seq, mode, rng, startup_s, err_file)


def _run_and_kill(store_dir: str, start_seq: int, mode: str, rng: random.Random, startup_s: float,
                  err_file: IO[bytes]) -> tuple[list[Ack], float]:
    proc = subprocess.Popen(
        [sys.executable, WRITER_SCRIPT, store_dir, str(start_seq), str(rng.getrandbits(32))],
        stdout=subprocess.PIPE, stderr=err_file,
    )
    reader = _AckReader(proc, SEGMENT_SIZE)
    reader.start()
    began = time.monotonic()
    try:
        if mode == "startup":
            time.sleep(rng.uniform(0.0, startup_s))
        else:
            if not reader.first_ack.wait(60):
                raise AssertionError(f"writer produced no ack in 60 s (exit {proc.poll()}): {_tail(err_file)}")
            if mode == "roll":
                if not reader.rolled.wait(20):
                    raise AssertionError("writer never rolled to a new segment in 20 s")
            else:
                time.sleep(rng.uniform(0.05, 0.5))
        killed_at = time.monotonic() - began
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
    reader.join(10)
    assert proc.stdout is not None
    proc.stdout.close()
    if proc.returncode != -signal.SIGKILL:
        raise AssertionError(f"writer exited by itself with {proc.returncode}: {_tail(err_file)}")
    return reader.acks, killed_at


def _tail(err_file: IO[bytes]) -> str:
    err_file.seek(0)
    return err_file.read().decode(errors="replace")[-3000:]


class CrashHarness:
    """Crash cycles against one growing store directory, remembering every ack ever made."""

    def __init__(self, store_dir: str, seed: int, *, recheck_old: int | None = None) -> None:
        self.store_dir = store_dir
        self.rng = random.Random(seed)
        self.acks: list[Ack] = []
        self.next_seq = 0
        self.recheck_old = recheck_old  # None: every earlier ack again each cycle; else a sample
        self.startup_s = 0.3  # refined from the observed time to the first ack

    def cycle(self, mode: str = "random") -> CycleResult:
        new, killed_at = run_writer_until_killed(self.store_dir, self.next_seq, mode, self.rng, self.startup_s)
        if mode != "startup" and new:
            self.startup_s = max(0.05, min(2.0, killed_at))
        if new:
            self.next_seq = new[-1].seq + 1
        old = self.acks
        self.acks = old + new
        if self.recheck_old is None or len(old) <= self.recheck_old:
            to_check = old + new
        else:
            to_check = self.rng.sample(old, self.recheck_old) + new
        recovery_s, abnormal, problems = check_store(self.store_dir, to_check, self.acks)
        if new and not abnormal:
            problems.append("writer was killed after acks but the store recovered as a normal shutdown")
        return CycleResult(mode, new, killed_at, recovery_s, abnormal, problems)


def check_store(store_dir: str, to_check: list[Ack], all_acks: list[Ack]) -> tuple[float, bool, list[str]]:
    """Recover the store, check the acknowledged messages and the verifier; returns problems found."""
    from rocketstore.store.offline import verify_store

    problems: list[str] = []
    cfg = make_config(store_dir)
    store = DefaultMessageStore(cfg)
    began = time.monotonic()
    store.load()
    abnormal = not store.last_exit_ok
    try:
        store.start()
        recovery_s = time.monotonic() - began
        _check_acks(store, to_check, problems)
        _check_queues(store, all_acks, problems)
    finally:
        store.shutdown()
    report = verify_store(cfg)
    if not report.ok:
        problems.extend(f"verify_store: {p}" for p in report.problems)
    if report.records < len(all_acks):
        problems.append(f"verify_store saw {report.records} records, {len(all_acks)} were acknowledged")
    return recovery_s, abnormal, problems


def _check_acks(store: DefaultMessageStore, acks: list[Ack], problems: list[str]) -> None:
    far_future = int(time.time() * 1000) + 3_600_000
    for ack in acks:
        want = body_for(ack.seq)
        where = f"seq {ack.seq} ({ack.topic}/{ack.queue_id}@{ack.queue_offset}, phy {ack.commit_log_offset})"
        got = store.get_message("crash-check", ack.topic, ack.queue_id, ack.queue_offset, 1)
        if got.status is not GetMessageStatus.FOUND or not got.messages:
            problems.append(f"{where}: get_message -> {got.status.name}")
        else:
            msg = decode_record(got.messages[0], 0)
            if not hasattr(msg, "body") or msg.body != want or msg.physical_offset != ack.commit_log_offset:
                problems.append(f"{where}: get_message returned a different record {msg!r:.200}")
        looked = store.look_message_by_offset(ack.commit_log_offset)
        if looked is None:
            problems.append(f"{where}: look_message_by_offset -> None")
        elif (looked.body != want or looked.topic != ack.topic or looked.queue_id != ack.queue_id
              or looked.queue_offset != ack.queue_offset or looked.keys != key_for(ack.seq)):
            problems.append(f"{where}: look_message_by_offset returned {looked!r:.200}")
        found = store.query_message(ack.topic, key_for(ack.seq), 32, 0, far_future)
        if not any(m.physical_offset == ack.commit_log_offset for m in found.messages):
            problems.append(f"{where}: query_message by key found {[m.physical_offset for m in found.messages]}")
        if len(problems) > 50:
            return


def _check_queues(store: DefaultMessageStore, acks: list[Ack], problems: list[str]) -> None:
    """Every queue holds contiguous offsets from its min to its max, covering every ack."""
    highest: dict[tuple[str, int], int] = {}
    for ack in acks:
        key = (ack.topic, ack.queue_id)
        highest[key] = max(highest.get(key, -1), ack.queue_offset)
    for (topic, qid), top in sorted(highest.items()):
        lo, hi = store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid)
        if lo != 0 or hi <= top:
            problems.append(f"{topic}/{qid}: queue offsets [{lo}, {hi}) do not cover acknowledged offset {top}")
            continue
        offset = lo
        while offset < hi:
            got = store.get_message("crash-check", topic, qid, offset, 32)
            if got.status is not GetMessageStatus.FOUND:
                problems.append(f"{topic}/{qid}: pull at {offset} of [{lo}, {hi}) -> {got.status.name}")
                break
            for raw, qoff in zip(got.messages, got.message_queue_offsets, strict=True):
                msg = decode_record(raw, 0, read_body=False)
                if qoff != offset or getattr(msg, "queue_offset", None) != offset:
                    problems.append(f"{topic}/{qid}: expected queue offset {offset}, entry {qoff}, record {msg!r:.120}")
                    return
                offset += 1
