"""A real broker with its embedded name server on loopback, for the client library's tests.

The broker is started by ``inprocess_broker.start_broker`` (its own event loop in a thread, a
tiny store under tmp_path), with the name-server role switched on at a free port;
the client under test then finds everything through that name server, as applications do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import BrokerHandle, start_broker
from ports import free_port

from rocketstore.broker.broker import BrokerController
from rocketstore.client import RemotingClient


@dataclass
class Cluster:
    handle: BrokerHandle

    @property
    def broker_addr(self) -> str:
        return f"127.0.0.1:{self.handle.port}"

    @property
    def namesrv_addr(self) -> str:
        namesrv = self.handle.controller.namesrv
        assert namesrv is not None
        return f"127.0.0.1:{namesrv.port}"

    @property
    def controller(self) -> BrokerController:
        return self.handle.controller

    def wait_dispatched(self, timeout: float = 5.0) -> None:
        self.handle.wait_dispatched(timeout)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[BrokerHandle] = []

    def start(**overrides: Any) -> Cluster:
        for _ in range(5):  # the free port can be taken between probe and bind; try another
            try:
                handle = start_broker(tmp_path / f"broker{len(started)}",
                                      namesrv_listen_port=free_port(), **overrides)
            except OSError:
                continue
            started.append(handle)
            return Cluster(handle)
        raise RuntimeError("could not start a broker on a free name-server port")

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory()


@pytest.fixture
def remoting() -> Iterator[RemotingClient]:
    client = RemotingClient(timeout=5.0)
    yield client
    client.close()
