"""The store tests' configuration and store helpers, as plain functions: the test modules, their
conftest.py fixtures and the crash-cycle scripts (crash_writer.py runs outside pytest) share them.

Small files throughout, so that a few dozen messages span several CommitLog segments, consume
queue files and index files, and every test exercises the rolling code paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rocketstore.store.config import StoreConfig
from rocketstore.store.consume_queue import CQ_STORE_UNIT_SIZE
from rocketstore.store.message_store import DefaultMessageStore

SEGMENT = 4096  # CommitLog segments of a few dozen records
CQ_ENTRIES_PER_FILE = 100

#: conftest.py's ``open_store`` fixture: ``open_store(**overrides)`` -> a started store
OpenStore = Callable[..., DefaultMessageStore]


def small_config(root: Path | str, *, commit_log_size: int = SEGMENT, cq_entries: int = CQ_ENTRIES_PER_FILE,
                 **overrides: Any) -> StoreConfig:
    """A StoreConfig rooted at ``root`` with tiny files (100-slot, 400-entry index files);
    keyword arguments override any other StoreConfig field."""
    values: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": commit_log_size,
        "mapped_file_size_consume_queue": CQ_STORE_UNIT_SIZE * cq_entries,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
        **overrides,
    }
    return StoreConfig(**values)


def start_store(cfg: StoreConfig) -> DefaultMessageStore:
    """Load (recover) and start a store, as the broker does."""
    store = DefaultMessageStore(cfg)
    store.load()
    store.start()
    return store


@contextmanager
def running(cfg: StoreConfig) -> Iterator[DefaultMessageStore]:
    """A started store, shut down cleanly when the block ends."""
    store = start_store(cfg)
    try:
        yield store
    finally:
        store.shutdown()


def verify_problems_of_truncated_store(cfg: StoreConfig) -> list[str]:
    """The offline verifier's problems with a store that was truncated, but for its IndexFiles'.

    A truncation keeps the IndexFiles' entries past the cut by design (truncation.py: a lookup by
    key confirms each hit against the record it points at), and the verifier reports each of them
    as an entry past the CommitLog's end or at a record of another key. Tests check the
    IndexFiles of a truncated store by key lookups instead.
    """
    from rocketstore.store.offline import verify_store

    return [p for p in verify_store(cfg).problems if not p.startswith("index/")]
