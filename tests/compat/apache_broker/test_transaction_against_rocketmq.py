"""Transactional messages against Apache RocketMQ's own broker, and across the two brokers.

* The driver's ``tx-produce`` mode (TransactionModes.java) against RocketMQ 4.9.7's broker with
  short transaction timers: commit, rollback, UNKNOW then a check-back answered with commit, and a
  consumer that receives exactly the committed messages. This is what tests/compat/java4's scenarios expect
  of our broker, shown true of RocketMQ's.
* Takeover both ways, which only works if both brokers store transactions alike (half and op
  records, CID_RMQ_SYS_TRANS offsets): RocketMQ's store with one committed and one pending
  transaction opened by ``rocketstore broker``, whose check resolves the pending one and never the
  committed one; and the reverse, our store opened by RocketMQ's broker.

Both brokers use 1 MiB CommitLog segments so that either can open the other's directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from java_rocketmq import ClientDriver, RocketMQAnchor

from rocketstore.common.message import transaction_type
from rocketstore.store.config import StoreConfig
from rocketstore.store.store_view import StoreView

pytestmark = pytest.mark.integration

SEGMENT = str(1024 * 1024)
FAST = {"transactionCheckInterval": "500", "transactionTimeOut": "1000", "mappedFileSizeCommitLog": SEGMENT}
NEVER = {"transactionCheckInterval": "600000", "transactionTimeOut": "600000", "mappedFileSizeCommitLog": SEGMENT}


def our_broker(workdir: Path, values: dict[str, str], store: Path | None = None) -> Broker:
    """``rocketstore broker`` in ``workdir`` with these broker.conf keys (last lines win)."""
    workdir.mkdir(parents=True, exist_ok=True)
    return Broker(workdir, "".join(f"{k}={v}\n" for k, v in values.items()), store=store)


def driver(namesrv: str, workdir: Path) -> ClientDriver:
    return ClientDriver(namesrv, workdir, poll_namesrv_ms=1000, heartbeat_ms=1000, rebalance_interval_ms=1000)


def tx_produce(java: ClientDriver, topic: str, group: str, count: int, *extra: str | int) -> dict[str, Any]:
    result = java.run("tx-produce", "-t", topic, "-g", group, "-c", count, *extra)
    return {kind: result.of(kind) for kind in ("sent", "checked")}


def consumed(java: ClientDriver, topic: str, expected: int) -> list[str]:
    """Bodies a new consumer group receives from the topic's start (lingering 2 s for extras)."""
    result = java.push_consume(topic, f"{topic}_consumer", expected, timeout_s=60, linger_ms=2000)
    return sorted(line["body"] for line in result.of("received"))


@pytest.fixture
def anchor_factory(java_client_built: None, tmp_path: Path) -> Iterator[Any]:
    started: list[RocketMQAnchor] = []

    def start(name: str, config: dict[str, str]) -> RocketMQAnchor:
        anchor = RocketMQAnchor(tmp_path / name, broker_config=config)
        started.append(anchor)
        return anchor.start()

    yield start
    for anchor in started:
        anchor.stop()


def test_tx_driver_against_rocketmq(anchor_factory: Any, tmp_path: Path) -> None:
    anchor = anchor_factory("anchor", FAST)
    java = driver(anchor.namesrv_addr, tmp_path / "java")
    committed = tx_produce(java, "TxAnchor", "TxGroupA", 2, "--local", "commit")
    assert [(s["sendStatus"], s["localState"]) for s in committed["sent"]] == [("SEND_OK", "COMMIT_MESSAGE")] * 2
    tx_produce(java, "TxAnchor", "TxGroupA", 2, "--local", "rollback", "--start", 2)
    checked = tx_produce(java, "TxAnchor", "TxGroupA", 1, "--local", "unknown", "--check", "commit",
                         "--expect-checks", 1, "--start", 4)
    [check] = checked["checked"]
    assert (check["body"], check["topic"], check["checkTimes"]) == ("tx-4", "TxAnchor", "1")
    assert consumed(java, "TxAnchor", 3) == ["tx-0", "tx-1", "tx-4"]


def test_rocketmq_store_taken_over_by_our_broker(anchor_factory: Any, tmp_path: Path) -> None:
    anchor = anchor_factory("anchor", NEVER)
    java = driver(anchor.namesrv_addr, tmp_path / "java-anchor")
    tx_produce(java, "TxTakeover", "TxGroupB", 1, "--local", "commit")
    tx_produce(java, "TxTakeover", "TxGroupB", 1, "--local", "unknown", "--start", 1)
    anchor.stop()  # SIGTERM: RocketMQ flushes and persists its offsets
    ours = our_broker(tmp_path / "ours", {**FAST, "brokerName": anchor.broker_name}, anchor.store_dir)
    ours.start()
    try:
        java = driver(ours.namesrv, tmp_path / "java-ours")
        out = tx_produce(java, "TxTakeover", "TxGroupB", 0, "--check", "commit", "--expect-checks", 1)
        assert [c["body"] for c in out["checked"]] == ["tx-1"]  # tx-0 was ended by RocketMQ's op record
        assert consumed(java, "TxTakeover", 2) == ["tx-0", "tx-1"]
    finally:
        assert ours.stop() == 0
    assert "Traceback" not in ours.log_text(), ours.log_text()[-6000:]


def test_our_store_taken_over_by_rocketmq(anchor_factory: Any, tmp_path: Path) -> None:
    ours = our_broker(tmp_path / "ours", {**NEVER, "brokerName": "anchor-broker-a"})
    ours.start()
    try:
        java = driver(ours.namesrv, tmp_path / "java-ours")
        tx_produce(java, "TxReverse", "TxGroupC", 1, "--local", "commit")
        tx_produce(java, "TxReverse", "TxGroupC", 1, "--local", "unknown", "--start", 1)
    finally:
        assert ours.stop() == 0
    anchor = anchor_factory("anchor", {**FAST, "storePathRootDir": str(ours.store),
                                       "storePathCommitLog": str(ours.store / "commitlog")})
    java = driver(anchor.namesrv_addr, tmp_path / "java-anchor")
    out = tx_produce(java, "TxReverse", "TxGroupC", 0, "--check", "commit", "--expect-checks", 1)
    assert [c["body"] for c in out["checked"]] == ["tx-1"]
    assert consumed(java, "TxReverse", 2) == ["tx-0", "tx-1"]


# Properties whose values differ between runs by design (ids; the real queue, which the client
# picks at random); their presence is still compared.
VOLATILE = {"UNIQ_KEY", "REAL_QID"}


def transaction_records(store: Path) -> set[tuple[Any, ...]]:
    """Every record of the transaction topics and of TxForms, reduced to what must match: topic,
    system queue, flag, transaction type, body, whether it points at a prepared offset, and its properties
    (values of the run-dependent ones left out)."""
    config = StoreConfig(store_path_root_dir=str(store), mapped_file_size_commit_log=int(SEGMENT))
    forms = set()
    with StoreView(config).commit_log() as log:
        for step in log.walk(check_crc=True, read_body=True):
            msg = step.message
            if step.kind != "record" or msg is None:
                continue
            if msg.topic not in ("TxForms", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
                continue
            props = tuple(sorted((k, None if k in VOLATILE else v) for k, v in msg.properties.items()))
            body = msg.body if msg.topic != "RMQ_SYS_TRANS_OP_HALF_TOPIC" else b"<half queue offset>"
            queue_id = msg.queue_id if msg.topic != "TxForms" else None
            forms.add((msg.topic, queue_id, msg.flag, transaction_type(msg.sys_flag), body,
                       msg.prepared_transaction_offset != 0, props))
    return forms


def run_forms_scenario(namesrv: str, workdir: Path) -> None:
    """A commit, a rollback, and an UNKNOW resolved by a check-back answered with commit."""
    java = driver(namesrv, workdir)
    tx_produce(java, "TxForms", "TxGroupF", 1, "--local", "commit")
    tx_produce(java, "TxForms", "TxGroupF", 1, "--local", "rollback", "--start", 1)
    tx_produce(java, "TxForms", "TxGroupF", 1, "--local", "unknown", "--check", "commit", "--expect-checks", 1,
               "--start", 2)


def test_transaction_records_match_rocketmq(anchor_factory: Any, tmp_path: Path) -> None:
    anchor = anchor_factory("anchor", {**FAST, "brokerClusterName": "TestCluster"})
    run_forms_scenario(anchor.namesrv_addr, tmp_path / "java-anchor")
    anchor.stop()
    ours = our_broker(tmp_path / "ours", {**FAST, "brokerClusterName": "TestCluster"})
    ours.start()
    try:
        run_forms_scenario(ours.namesrv, tmp_path / "java-ours")
    finally:
        assert ours.stop() == 0
    theirs, mine = transaction_records(anchor.store_dir), transaction_records(ours.store)
    assert theirs, "RocketMQ's store holds no transaction records"
    assert mine == theirs, (f"only RocketMQ: {sorted(theirs - mine, key=repr)}\n"
                            f"only ours: {sorted(mine - theirs, key=repr)}")
