"""The ``lock`` file: one running store per directory, in this process, another one, or RocketMQ."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_support import small_config

import rocketstore.store as store_package
from rocketstore.common.message import Message, StoredMessage, decode_record
from rocketstore.store.config import StoreConfig
from rocketstore.store.mapped_file import MappedFileError
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import GetMessageStatus
from rocketstore.store.store_lock import StoreLock, StoreLockedError

REPO_ROOT = str(Path(store_package.__file__).resolve().parent.parent)
MESSAGES = 30


def make_config(root: Path) -> StoreConfig:
    """1 KiB segments: MESSAGES messages span several."""
    return small_config(root, commit_log_size=1024, cq_entries=10)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[DefaultMessageStore]:
    """A started store holding MESSAGES messages across several 1 KiB segments."""
    store = DefaultMessageStore(make_config(tmp_path / "store"))
    store.load()
    store.start()
    put(store, 0, MESSAGES)
    yield store
    store.shutdown()


def put(store: DefaultMessageStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        result = store.put_message(Message(topic="T", body=b"message-%04d" % i + b"." * 150,
                                           properties={"KEYS": f"key-{i}"}))
        assert result.ok, result
    assert store.reput_service.wait_caught_up(5)


def read_all(store: DefaultMessageStore) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    while True:
        got = store.get_message("g", "T", 0, offset, 32)
        if got.status is not GetMessageStatus.FOUND:
            return bodies
        for raw in got.messages:
            msg = decode_record(raw, 0, check_crc=True)
            assert isinstance(msg, StoredMessage), msg
            bodies.append(msg.body[:12])
        offset = got.next_begin_offset


def expected_bodies(count: int) -> list[bytes]:
    return [b"message-%04d" % i for i in range(count)]


def snapshot(store: DefaultMessageStore, root: Path) -> dict[str, list[str]]:
    """Names of the files the running store owns, to prove a refused opener touched nothing.

    Waits first for the background allocator to finish the segment it prepares after each roll,
    so that file cannot appear between two snapshots.
    """
    last = store.commit_log.mapped_file_queue.last
    assert last is not None
    ahead = root / "commitlog" / f"{last.file_from_offset + last.file_size:020d}"
    deadline = time.monotonic() + 5
    while not (ahead.exists() and ahead.stat().st_size == last.file_size) and time.monotonic() < deadline:
        time.sleep(0.005)
    return {d: sorted(os.listdir(root / d)) for d in ("commitlog", "consumequeue/T/0", "index")}


def open_in_subprocess(root: Path) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(f"""
        import sys
        from rocketstore.store.config import StoreConfig
        from rocketstore.store.message_store import DefaultMessageStore
        cfg = StoreConfig(store_path_root_dir={str(root)!r}, mapped_file_size_commit_log=1024,
                          mapped_file_size_consume_queue=200, max_hash_slot_num=100, max_index_num=400)
        store = DefaultMessageStore(cfg)
        store.load()
        store.start()
        print("started", store.get_max_offset_in_queue("T", 0))
        store.shutdown()
    """)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=REPO_ROOT)


def test_second_store_in_same_process_is_refused(running: DefaultMessageStore, tmp_path: Path) -> None:
    root = tmp_path / "store"
    before = snapshot(running, root)
    second = DefaultMessageStore(make_config(root))
    with pytest.raises(StoreLockedError, match="another store is already running"):
        second.load()
        second.start()
    second.shutdown()  # harmless on a store that never started
    # The refused store changed nothing: no segment, queue or index file created or deleted ...
    assert snapshot(running, root) == before
    assert (root / "abort").exists()
    # ... and the running store keeps working, every message intact.
    put(running, MESSAGES, 10)
    assert read_all(running) == expected_bodies(MESSAGES + 10)
    assert running.query_message("T", "key-3", 32, 0, 2**62).messages


def test_store_starts_after_previous_shutdown(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = DefaultMessageStore(make_config(root))
    first.load()
    first.start()
    put(first, 0, MESSAGES)
    first.shutdown()
    second = DefaultMessageStore(make_config(root))
    second.load()
    second.start()
    try:
        assert read_all(second) == expected_bodies(MESSAGES)
        put(second, MESSAGES, 1)
    finally:
        second.shutdown()


def test_lock_released_when_load_fails(tmp_path: Path) -> None:
    """A store whose load fails must not keep the directory locked."""
    root = tmp_path / "store"
    first = DefaultMessageStore(make_config(root))
    first.load()
    first.start()
    put(first, 0, MESSAGES)
    first.shutdown()
    segment = root / "commitlog" / "00000000000000001024"
    data = segment.read_bytes()
    segment.write_bytes(data[:1000])  # wrong size: load refuses the store
    broken = DefaultMessageStore(make_config(root))
    with pytest.raises(MappedFileError, match="00000000000000001024"):
        broken.load()
    broken.shutdown()
    segment.write_bytes(data)
    fixed = DefaultMessageStore(make_config(root))
    fixed.load()
    fixed.start()
    try:
        assert read_all(fixed) == expected_bodies(MESSAGES)
    finally:
        fixed.shutdown()


@pytest.mark.integration
def test_second_process_is_refused_while_first_holds_the_lock(running: DefaultMessageStore,
                                                              tmp_path: Path) -> None:
    root = tmp_path / "store"
    before = snapshot(running, root)
    proc = open_in_subprocess(root)
    assert proc.returncode != 0, proc.stdout
    assert "StoreLockedError" in proc.stderr
    assert f"{root / 'lock'} is locked" in proc.stderr
    assert "started" not in proc.stdout
    assert snapshot(running, root) == before
    put(running, MESSAGES, 5)
    assert read_all(running) == expected_bodies(MESSAGES + 5)


@pytest.mark.integration
def test_second_process_starts_after_first_shuts_down(tmp_path: Path) -> None:
    root = tmp_path / "store"
    first = DefaultMessageStore(make_config(root))
    first.load()
    first.start()
    put(first, 0, MESSAGES)
    first.shutdown()
    proc = open_in_subprocess(root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["started", str(MESSAGES)]
    # And back in this process once the other one has exited.
    again = DefaultMessageStore(make_config(root))
    again.load()
    again.start()
    try:
        assert read_all(again) == expected_bodies(MESSAGES)
    finally:
        again.shutdown()


LOCKF_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.integration
def test_lock_conflicts_with_rocketmq_style_posix_lock(tmp_path: Path) -> None:
    """RocketMQ takes FileChannel.tryLock(0, 1, false): on Linux a POSIX record lock on byte 0.

    A helper process takes exactly that lock with fcntl.lockf; our store must refuse the directory
    while it is held, and take it once the holder exits.
    """
    root = tmp_path / "store"
    root.mkdir()
    lock_path = str(root / "lock")
    holder = subprocess.Popen([sys.executable, "-c", LOCKF_HOLDER, lock_path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError):
            StoreLock(lock_path).acquire()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    lock = StoreLock(lock_path)
    lock.acquire()
    lock.release()


@pytest.mark.integration
def test_rocketmq_style_posix_lock_is_refused_while_store_runs(running: DefaultMessageStore, tmp_path: Path) -> None:
    """The reverse: while our store runs, a RocketMQ-style tryLock from another process fails."""
    lock_path = str(tmp_path / "store" / "lock")
    probe = textwrap.dedent("""
        import fcntl, os, sys
        fd = os.open(sys.argv[1], os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            print("refused")
        else:
            print("acquired")
    """)
    proc = subprocess.run([sys.executable, "-c", probe, lock_path], capture_output=True, text=True, timeout=30)
    assert proc.stdout.strip() == "refused", proc.stderr
    running.shutdown()
    proc = subprocess.run([sys.executable, "-c", probe, lock_path], capture_output=True, text=True, timeout=30)
    assert proc.stdout.strip() == "acquired", proc.stderr


def test_store_lock_is_exclusive_within_one_process(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    first = StoreLock(path)
    first.acquire()
    try:
        with pytest.raises(StoreLockedError, match="is locked"):
            StoreLock(path).acquire()
    finally:
        first.release()
    second = StoreLock(path)
    second.acquire()
    second.release()
    second.release()  # releasing twice is harmless
