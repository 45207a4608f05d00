"""GET_BROKER_RUNTIME_INFO: every key Apache RocketMQ 4.9.7's broker answers, ours answers too, and
the store statistics that have a fixed form on a fresh broker read the same on both.

Both brokers are fresh (no put yet, started less than a minute ago), so the per-minute values are
in their first-minute state: ``putMessageDistributeTime`` "null", ``putLatency99`` "0.00".
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from broker_process import Broker
from java_rocketmq import RocketMQAnchor

from rocketstore.client import BrokerAdmin, RemotingError

pytestmark = pytest.mark.integration

#: a key per CommitLog directory: the path differs between the two brokers, the prefix does not
PER_PATH = "commitLogDiskRatio_"
#: keys RocketStore answers beyond Apache's (the store's raw get counters and its disk-full flag)
OURS_ONLY = {"diskFull", "getMessageTimesTotalFound", "getMessageTimesTotalMiss", "getMessageTransferedMsgCount"}
SAME_WHEN_FRESH = ("putMessageDistributeTime", "putLatency99", "putLatency999", "dispatchMaxBuffer",
                   "getMessageEntireTimeMax", "putMessageTimesTotal", "putMessageSizeTotal")


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = Broker(tmp_path_factory.mktemp("runtime-info-ours"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def runtime_info(addr: str) -> dict[str, str]:
    """Apache's broker answers SYSTEM_ERROR (NoSuchElementException) until its stats service took
    its first one-second sample: ask again until it answers."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with BrokerAdmin(addr, timeout=10) as admin:
                return admin.get_runtime_info()
        except RemotingError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def keys(info: dict[str, str]) -> set[str]:
    return {PER_PATH if key.startswith(PER_PATH) else key for key in info}


def test_runtime_info_keys_are_rocketmqs(rocketmq_anchor: RocketMQAnchor, ours: Broker) -> None:
    theirs, mine = runtime_info(rocketmq_anchor.broker_addr), runtime_info(ours.addr)
    assert keys(theirs) - keys(mine) == set()
    assert keys(mine) - keys(theirs) == OURS_ONLY
    assert {key: mine[key] for key in SAME_WHEN_FRESH} == {key: theirs[key] for key in SAME_WHEN_FRESH}
