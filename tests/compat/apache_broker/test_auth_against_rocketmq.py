"""RocketMQ 5.3 authentication and authorization: the same scenario against Apache RocketMQ 5.3.3's
broker and ours (tests/support/auth5_scenario.py).

Both brokers get the same broker.conf auth keys (Apache's default providers, the same first
user); Apache 5.3.3's mqadmin creates a user and ACLs on each, and the Java 4.9.8 client with
``AclClientRPCHook`` sends. Every step must end alike: what mqadmin printed (the broker's address
taken out), the messages sent, or the refusal's code and remark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth5_scenario import AUTH_KEYS, CLUSTER, run_scenario
from broker_process import Broker
from java_rocketmq import AnchorError, RocketMQAnchor
from mqadmin5 import build_mqadmin5

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def anchor_outcomes(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    build_mqadmin5()
    workdir = tmp_path_factory.mktemp("auth-anchor")
    anchor = RocketMQAnchor(workdir, version="5.3.3", broker_config=dict(AUTH_KEYS), cluster=CLUSTER)
    try:
        anchor.start()
    except AnchorError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield run_scenario(anchor.broker_addr, anchor.namesrv_addr, workdir / "client")
    finally:
        anchor.stop()


@pytest.fixture(scope="module")
def our_outcomes(java_client_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    build_mqadmin5()
    workdir: Path = tmp_path_factory.mktemp("auth-ours")
    conf = "".join(f"{key}={value}\n" for key, value in AUTH_KEYS.items())
    broker = Broker(workdir, conf)
    broker.start()
    try:
        yield run_scenario(broker.addr, broker.namesrv, workdir / "client")
    finally:
        assert broker.stop() == 0


def test_every_step_ends_as_on_rocketmq(anchor_outcomes: dict[str, Any], our_outcomes: dict[str, Any]) -> None:
    assert our_outcomes == anchor_outcomes
