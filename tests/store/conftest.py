"""Fixtures of the store tests (the plain helpers they build on are in store_support.py).

``open_store(**overrides)`` opens and starts a store on ``root`` (``tmp_path / "store"``) with
store_support's small files (keyword arguments override StoreConfig fields and the module's
``store_defaults``; ``root=`` another directory); every store it opened is shut down at
teardown. Opening the same directory again after ``store.shutdown()`` is how tests restart a store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from store_support import OpenStore, small_config, start_store

from rocketstore.store.message_store import DefaultMessageStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The store directory the tests of a module share (``open_store`` opens it by default)."""
    return tmp_path / "store"


@pytest.fixture
def store_defaults() -> dict[str, Any]:
    """``small_config`` arguments every store ``open_store`` opens starts from; a test module
    overrides this fixture to change them for all its tests."""
    return {}


@pytest.fixture
def open_store(root: Path, store_defaults: dict[str, Any]) -> Iterator[OpenStore]:
    opened: list[DefaultMessageStore] = []

    def _open(*, root: Path = root, **overrides: Any) -> DefaultMessageStore:
        store = start_store(small_config(root, **{**store_defaults, **overrides}))
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.shutdown()
