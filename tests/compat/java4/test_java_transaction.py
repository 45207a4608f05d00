"""Transactional messages end to end: RocketMQ 4.9.8's Java ``TransactionMQProducer`` (driver mode
``tx-produce``, TransactionModes.java) and ``DefaultMQPushConsumer`` against a ``rocketstore broker``
process with SYNC_FLUSH and short transaction timers (a check pass every 500 ms, messages checked
after 1 s), so each scenario takes a few seconds.

Scenarios: commit, rollback, UNKNOW then a check-back answered with commit, a producer killed
(SIGKILL) mid-transaction with another instance of its group answering the check, and the broker
killed (SIGKILL) between the half message and its end, the check after the restart resolving it.
In each, a consumer receives exactly the committed messages: never a rolled-back or pending one.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import Broker
from java_rocketmq import ClientDriver

pytestmark = pytest.mark.integration

TX_CONF = "transactionCheckInterval=500\ntransactionTimeOut=1000\n"


def tx_broker(tmp: Path, check_max: int = 5) -> Broker:
    return Broker(tmp, f"{TX_CONF}transactionCheckMax={check_max}\n", flush_disk_type="SYNC_FLUSH")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, java_client_built: None) -> Iterator[Broker]:
    b = tx_broker(tmp_path_factory.mktemp("tx-broker"))
    b.start()
    yield b
    assert b.stop() == 0
    assert "Traceback" not in b.log_text(), b.log_text()[-6000:]


def driver(broker: Broker, workdir: Path) -> ClientDriver:
    """The Java driver with routes and heartbeats every second (RocketMQ's default is 30 s)."""
    return ClientDriver(broker.namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000,
                        rebalance_interval_ms=1000)


def counter(broker: Broker, name: str) -> float:
    found = re.search(rf"^rocketstore_{name}_total (\S+)$", broker.metrics(), re.MULTILINE)
    assert found is not None, f"rocketstore_{name}_total missing from /metrics"
    return float(found.group(1))


def consumed(java: ClientDriver, topic: str, expected: int) -> list[str]:
    """Bodies a fresh push consumer receives from the topic's start, lingering 2 s after ``expected``
    so that a message that should not be there has time to show up."""
    result = java.push_consume(topic, f"{topic}_consumer", expected, timeout_s=30, linger_ms=2000)
    return sorted(line["body"] for line in result.of("received"))


def produce(java: ClientDriver, topic: str, group: str, count: int, *extra: str | int,
            timeout: float = 120.0) -> dict[str, list[dict[str, object]]]:
    result = java.run("tx-produce", "-t", topic, "-g", group, "-c", count, *extra, timeout=timeout)
    return {kind: result.of(kind) for kind in ("sent", "checked", "summary")}


def test_commit_and_rollback(broker: Broker, tmp_path: Path) -> None:
    java = driver(broker, tmp_path)
    before = {name: counter(broker, name) for name in ("transaction_commits", "transaction_rollbacks")}
    committed = produce(java, "TxCommitRollback", "TxGroupA", 3, "--local", "commit")
    assert [(s["sendStatus"], s["localState"]) for s in committed["sent"]] == [("SEND_OK", "COMMIT_MESSAGE")] * 3
    rolled = produce(java, "TxCommitRollback", "TxGroupA", 3, "--local", "rollback", "--start", 3)
    assert [s["localState"] for s in rolled["sent"]] == ["ROLLBACK_MESSAGE"] * 3
    assert consumed(java, "TxCommitRollback", 3) == ["tx-0", "tx-1", "tx-2"]
    # the Java client sends END_TRANSACTION one-way: the counters show the broker applied them
    assert counter(broker, "transaction_commits") - before["transaction_commits"] == 3
    assert counter(broker, "transaction_rollbacks") - before["transaction_rollbacks"] == 3


def test_unknown_then_check_back_then_commit(broker: Broker, tmp_path: Path) -> None:
    java = driver(broker, tmp_path)
    checks_before = counter(broker, "transaction_checks")
    out = produce(java, "TxCheckBack", "TxGroupB", 2, "--local", "unknown", "--check", "commit",
                  "--expect-checks", 2)
    assert [s["localState"] for s in out["sent"]] == ["UNKNOW"] * 2
    sent_ids = {s["msgId"] for s in out["sent"]}
    assert {c["msgId"] for c in out["checked"]} == sent_ids
    for check in out["checked"]:
        assert check["topic"] == "TxCheckBack" and check["checkTimes"] == "1"
        assert check["transactionId"] == check["msgId"]
    assert counter(broker, "transaction_checks") - checks_before >= 2
    assert consumed(java, "TxCheckBack", 2) == ["tx-0", "tx-1"]


def test_producer_killed_mid_transaction_another_instance_answers(broker: Broker, tmp_path: Path) -> None:
    java = driver(broker, tmp_path)
    halves = counter(broker, "transaction_half_messages")
    first = java.start("tx-produce", "-t", "TxKilled", "-g", "TxGroupC", "-c", 1, "--local", "unknown",
                       "--check", "unknown", "--linger", 60_000)
    try:
        deadline = time.monotonic() + 60
        while counter(broker, "transaction_half_messages") == halves:
            assert time.monotonic() < deadline and first.proc.poll() is None, "the half message never arrived"
            time.sleep(0.05)
    finally:
        first.kill()  # SIGKILL: no END_TRANSACTION, no unregister
    assert first.proc.returncode == -signal.SIGKILL
    out = produce(java, "TxKilled", "TxGroupC", 0, "--check", "commit", "--expect-checks", 1)
    [check] = out["checked"]
    assert check["body"] == "tx-0" and check["topic"] == "TxKilled"
    assert consumed(java, "TxKilled", 1) == ["tx-0"]


def test_broker_killed_between_half_and_end(tmp_path: Path, java_client_built: None) -> None:
    # checks run every 0.5 s from the restart, and a half message checked transactionCheckMax times
    # with no producer online is given up: 5 would leave a JVM 2.5 s to start and register, which
    # a busy machine does not always give (a CI run saw the producer online after 5 s)
    broker = tx_broker(tmp_path, check_max=120)
    broker.start()
    try:
        java = driver(broker, tmp_path / "java")
        out = produce(java, "TxCrash", "TxGroupD", 2, "--local", "unknown")  # exits at once: nobody answers
        assert [s["sendStatus"] for s in out["sent"]] == ["SEND_OK"] * 2
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
        broker.start()
        out = produce(java, "TxCrash", "TxGroupD", 0, "--check", "commit", "--expect-checks", 2)
        assert sorted(str(c["body"]) for c in out["checked"]) == ["tx-0", "tx-1"]
        assert consumed(java, "TxCrash", 2) == ["tx-0", "tx-1"]
    finally:
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_text()[-6000:]
