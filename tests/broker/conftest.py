"""Fixtures of the broker tests: real brokers inside the test process (inprocess_broker.py).

``broker_factory(root=None, **overrides)`` starts a broker with inprocess_broker.start_broker on a
tiny store under ``tmp_path`` (keyword arguments override BrokerConfig or StoreConfig fields);
``broker`` is one started with the defaults and ``client`` a :class:`RawClient` connected to it.
Every broker is stopped at teardown. Test modules import the classes from inprocess_broker.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import BrokerHandle, RawClient, start_broker


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerHandle]]:
    handles: list[BrokerHandle] = []
    counter = itertools.count()

    def factory(root: Path | None = None, **overrides: Any) -> BrokerHandle:
        handle = start_broker(root or tmp_path / f"broker{next(counter)}", **overrides)
        handles.append(handle)
        return handle

    yield factory
    for handle in handles:
        handle.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerHandle]) -> BrokerHandle:
    return broker_factory()


@pytest.fixture
def client(broker: BrokerHandle) -> RawClient:
    return broker.client()
