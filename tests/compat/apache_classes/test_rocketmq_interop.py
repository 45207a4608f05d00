"""On-disk compatibility with Apache RocketMQ 4.9.8's own DefaultMessageStore, both directions.

The Java side (conftest.run_driver) is RocketMQ's real store from Maven Central, driven by
StoreDriver.java: it writes a store and reports every put, or opens a store (recovering it),
pulls every queue and queries keys, reporting what it read. Both sides use 64 KiB CommitLog
segments, 100-entry consume queue files and 399-entry index files, so everything rolls.

* Java writes, we read: every reported message comes back from our get_message / query_message
  with the same fields; our decoder and encoder agree with Java's bytes; replaying Java's puts
  through our store gives the same CommitLog layout and identical consume queue files; rebuilding
  consume queues and index from Java's CommitLog gives byte-identical files; our offline verify
  finds Java's store clean; Java's config/delayOffset.json reads back and re-encodes identically.
* We write, Java reads: after a clean shutdown and after kill -9 of a SYNC_FLUSH writer (abnormal
  recovery on the Java side), RocketMQ returns every acknowledged message with identical bytes
  and finds them by key.
* Java crashes (JVM halted, abort left), we recover abnormally and serve every acknowledged put.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore.common.message import (
    BlankRecord,
    HostAddress,
    Message,
    StoredMessage,
    body_crc,
    create_message_id,
    decode_record,
    encode_record,
    stamp_record,
    store_timestamp_pos,
    string_to_properties,
)
from rocketstore.store.checkpoint import read_checkpoint
from rocketstore.store.config import StoreConfig
from rocketstore.store.config_manager import DelayOffsetManager
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.offline import verify_store
from rocketstore.store.status import GetMessageStatus

pytestmark = pytest.mark.integration

JAVA_MESSAGES = 600  # about 130 KB: three CommitLog segments, two files per consume queue, five index files
PY_MESSAGES = 600
REPO_ROOT = Path(__file__).resolve().parents[3]

DriverRunner = Callable[..., list[dict[str, Any]]]  # conftest.run_driver
ConfigFactory = Callable[..., StoreConfig]  # conftest.interop_config


# -- helpers ------------------------------------------------------------------------------------
def parse_host(text: str) -> HostAddress:
    """Java's ``address:port`` (IPv6 in Java's long form) as our HostAddress, normalised."""
    host, _, port = text.rpartition(":")
    return HostAddress(str(ipaddress.ip_address(host)), int(port))


def same_host(java: str, ours: HostAddress) -> bool:
    theirs = parse_host(java)
    return ipaddress.ip_address(theirs.host) == ipaddress.ip_address(ours.host) and theirs.port == ours.port


def open_store(config: StoreConfig) -> DefaultMessageStore:
    store = DefaultMessageStore(config)
    store.load()
    store.start()
    return store


def read_segment(config: StoreConfig, offset: int) -> tuple[bytes, int]:
    """The CommitLog segment holding ``offset`` and the position of ``offset`` in it."""
    base = offset - offset % config.mapped_file_size_commit_log
    return (config.commit_log_dir() / f"{base:020d}").read_bytes(), offset - base


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_message(put: dict[str, Any], msg: StoredMessage) -> None:
    """A record of ours (decoded) against what RocketMQ reported for that put."""
    assert msg.body == put["body"].encode()
    assert msg.topic == put["topic"]
    assert msg.queue_id == put["queueId"]
    assert msg.queue_offset == put["queueOffset"]
    assert msg.physical_offset == put["commitLogOffset"]
    assert msg.total_size == put["wroteBytes"]
    assert msg.keys == put["keys"]
    assert msg.tags == put["tags"]
    assert msg.uniq_key == put["uniqKey"]
    assert msg.flag == put["flag"]
    assert msg.sys_flag == put["sysFlag"]
    assert msg.born_timestamp == put["bornTimestamp"]
    assert msg.store_timestamp == put["storeTimestamp"]
    assert same_host(put["bornHost"], msg.born_host)
    assert same_host(put["storeHost"], msg.store_host)
    assert msg.msg_id == put["msgId"]
    assert msg.properties == string_to_properties(put["propertiesString"])


def by_kind(lines: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["kind"] == kind]


# -- Java writes --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def java_store(run_driver: DriverRunner, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A store written by RocketMQ and shut down cleanly, with RocketMQ's report of every put.

    Tests copy it before opening it: opening (ours or theirs) rewrites checkpoint, lock and config.
    """
    root = tmp_path_factory.mktemp("java-store") / "store"
    lines = run_driver("write", root, JAVA_MESSAGES)
    puts = by_kind(lines, "put")
    assert len(puts) == JAVA_MESSAGES
    assert by_kind(lines, "shutdown")[0]["abortLeft"] is False
    return root, puts


def copy_store(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "store"
    shutil.copytree(src, dst)
    return dst


def test_java_store_layout_uses_the_configured_sizes(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory
) -> None:
    root, puts = java_store
    cfg = interop_config(root)
    segment = cfg.mapped_file_size_commit_log
    segments = sorted((root / "commitlog").iterdir())
    assert [p.name for p in segments] == [f"{i * segment:020d}" for i in range(len(segments))]
    assert len(segments) >= 3, "the driver must write enough for segments to roll"
    assert {p.stat().st_size for p in segments} == {segment}
    cq_files = sorted((root / "consumequeue").rglob("0000*"))
    assert {p.stat().st_size for p in cq_files} == {cfg.mapped_file_size_consume_queue}
    assert {p.name for p in cq_files} == {f"{0:020d}", f"{cfg.mapped_file_size_consume_queue:020d}"}
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) == 5  # 3 keys per message (2 KEYS + UNIQ_KEY), 399 entries per file
    assert {p.stat().st_size for p in index_files} == {40 + cfg.max_hash_slot_num * 4 + cfg.max_index_num * 20}
    assert all(len(p.name) == 17 and p.name.isdigit() for p in index_files)  # yyyyMMddHHmmssSSS
    assert (root / "checkpoint").stat().st_size == 4096
    physic, logics, index = read_checkpoint(str(root / "checkpoint"))
    assert logics == max(p["storeTimestamp"] for p in puts)  # the last consume queue entry's store time
    assert 0 < index <= logics  # end time of the last index file filled up
    # RocketMQ 4.9.8 stamps physicMsgTimestamp only at its 10-second thorough flush, so a short
    # run may leave it 0 (we stamp it at shutdown too: a safe difference, recovery takes the min).
    assert 0 <= physic <= logics
    assert (root / "checkpoint").read_bytes()[24:] == bytes(4096 - 24)  # no 5.x fields
    assert (root / "lock").read_bytes() == b"lock"
    assert not (root / "abort").exists()
    assert any(p["sysFlag"] & 0x10 for p in puts), "some messages must be born on IPv6"


def test_java_written_store_reads_back_through_our_store(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory, tmp_path: Path
) -> None:
    root = copy_store(java_store[0], tmp_path)
    puts = java_store[1]
    store = open_store(interop_config(root))
    try:
        assert store.last_exit_ok
        assert store.max_phy_offset == max(p["commitLogOffset"] + p["wroteBytes"] for p in puts)
        for p in puts:
            result = store.get_message("interop", p["topic"], p["queueId"], p["queueOffset"], 1)
            assert result.status is GetMessageStatus.FOUND, p
            decoded = decode_record(result.messages[0])
            assert isinstance(decoded, StoredMessage)
            assert_same_message(p, decoded)
        per_queue: dict[tuple[str, int], int] = {}
        for p in puts:
            per_queue[(p["topic"], p["queueId"])] = per_queue.get((p["topic"], p["queueId"]), 0) + 1
        for (topic, qid), count in per_queue.items():
            assert store.get_max_offset_in_queue(topic, qid) == count
            assert store.get_min_offset_in_queue(topic, qid) == 0

        for p in puts:  # every KEYS value and the UNIQ_KEY lead back to the message via the index
            for key in (p["keys"].split(" ")[0], p["uniqKey"]):
                found = store.query_message(p["topic"], key, 32, 0, 2**62)
                assert [m.physical_offset for m in found.messages] == [p["commitLogOffset"]], key
        shared = [p for p in puts if p["topic"] == "InteropTopicA" and "shared-0" in p["keys"].split(" ")]
        found = store.query_message("InteropTopicA", "shared-0", 64, 0, 2**62)
        assert sorted(m.physical_offset for m in found.messages) == sorted(p["commitLogOffset"] for p in shared)

        # still a working store: a put continues Java's queue and CommitLog offsets
        r = store.put_message(Message(topic="InteropTopicA", body=b"after-java", queue_id=0,
                                      properties={"KEYS": "after"}))
        assert r.append is not None
        assert r.append.wrote_offset == store.max_phy_offset - r.append.wrote_bytes
        assert r.append.logics_offset == per_queue[("InteropTopicA", 0)]
    finally:
        store.shutdown()


def test_our_offline_verify_finds_java_store_clean(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory
) -> None:
    root, puts = java_store  # verify is read-only: the shared original is fine
    before = files_under(root)
    report = verify_store(interop_config(root))
    assert report.ok, report.problems
    assert report.records == len(puts)
    assert report.consume_queue_entries == len(puts)
    assert report.index_entries == 3 * len(puts)
    assert report.blank_records == len(list((root / "commitlog").iterdir())) - 1
    assert files_under(root) == before


def test_java_records_match_our_codec_byte_for_byte(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory
) -> None:
    root, puts = java_store
    cfg = interop_config(root)
    segment = cfg.mapped_file_size_commit_log
    for p in puts:
        data, pos = read_segment(cfg, p["commitLogOffset"])
        decoded = decode_record(data, pos)
        assert isinstance(decoded, StoredMessage), decoded
        assert_same_message(p, decoded)
        assert decoded.body_crc == body_crc(p["body"].encode())
        # our encoder, given the fields Java was given, writes exactly Java's record
        born, store_host = parse_host(p["bornHost"]), parse_host(p["storeHost"])
        record = bytearray(encode_record(
            topic_data=p["topic"].encode(), body=p["body"].encode(), properties_data=p["propertiesString"].encode(),
            queue_id=p["queueId"], flag=p["flag"], sys_flag=p["sysFlag"], born_timestamp=p["bornTimestamp"],
            born_host=born.to_bytes(), store_host=store_host.to_bytes(), reconsume_times=0,
            prepared_transaction_offset=0,
        ))
        stamp_record(record, 0, p["queueOffset"], p["commitLogOffset"], p["storeTimestamp"], p["sysFlag"])
        assert bytes(record) == data[pos : pos + p["wroteBytes"]]
        assert create_message_id(store_host, p["commitLogOffset"]) == p["msgId"]

    # each full segment ends with RocketMQ's blank record exactly where our writer rolls
    ordered = sorted(puts, key=lambda p: p["commitLogOffset"])
    for prev, nxt in itertools.pairwise(ordered):
        end = prev["commitLogOffset"] + prev["wroteBytes"]
        if end // segment == nxt["commitLogOffset"] // segment:
            assert nxt["commitLogOffset"] == end  # records are contiguous within a segment
            continue
        data, pos = read_segment(cfg, end)
        left = segment - pos
        assert decode_record(data, pos) == BlankRecord(left)
        assert nxt["wroteBytes"] + 8 > left  # the next record did not fit with 8 bytes to spare
        assert nxt["commitLogOffset"] == end + left


def test_replaying_java_puts_gives_the_same_layout(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory, tmp_path: Path
) -> None:
    java_root, puts = java_store
    root = tmp_path / "replay"
    cfg = interop_config(root)
    store = open_store(cfg)
    try:
        for p in puts:
            r = store.put_message(Message(
                topic=p["topic"], body=p["body"].encode(), queue_id=p["queueId"], flag=p["flag"],
                properties=string_to_properties(p["propertiesString"]), born_timestamp=p["bornTimestamp"],
                born_host=parse_host(p["bornHost"]), store_host=parse_host(p["storeHost"]),
            ))
            assert r.append is not None
            assert (r.append.wrote_offset, r.append.logics_offset, r.append.wrote_bytes, r.append.msg_id) == (
                p["commitLogOffset"], p["queueOffset"], p["wroteBytes"], p["msgId"]), p
        assert store.reput_service.wait_caught_up(10)
    finally:
        store.shutdown()

    # CommitLog: identical but for storeTimestamp (each side stamps its own clock)
    ours_cl = files_under(root / "commitlog")
    java_cl = files_under(java_root / "commitlog")
    assert sorted(ours_cl) == sorted(java_cl)
    for name, java_bytes in java_cl.items():
        ours = bytearray(ours_cl[name])
        base = int(name)
        for p in puts:
            if base <= p["commitLogOffset"] < base + cfg.mapped_file_size_commit_log:
                at = p["commitLogOffset"] - base + store_timestamp_pos(p["sysFlag"])
                ours[at : at + 8] = java_bytes[at : at + 8]
        assert bytes(ours) == java_bytes, name
    # consume queues hold no timestamps: the files are identical
    assert files_under(root / "consumequeue") == files_under(java_root / "consumequeue")


def test_rebuilding_from_java_commit_log_gives_identical_queues_and_index(
    java_store: tuple[Path, list[dict[str, Any]]], interop_config: ConfigFactory, tmp_path: Path
) -> None:
    java_root = java_store[0]
    root = copy_store(java_root, tmp_path)
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    store = open_store(interop_config(root))  # start() re-dispatches the whole CommitLog
    store.shutdown()
    assert files_under(root / "consumequeue") == files_under(java_root / "consumequeue")
    # Index files are named by their creation time, so names differ; contents must not.
    ours = sorted((root / "index").iterdir())
    theirs = sorted((java_root / "index").iterdir())
    assert [p.read_bytes() for p in ours] == [p.read_bytes() for p in theirs]


def test_java_delay_offset_file_reads_and_reencodes_identically(
    java_store: tuple[Path, list[dict[str, Any]]],
) -> None:
    # A bare RocketMQ store (master role) persists its schedule service's progress on shutdown.
    config_dir = java_store[0] / "config"
    text = (config_dir / "delayOffset.json").read_text()
    manager = DelayOffsetManager(config_dir)
    assert manager.load()
    assert manager.offsets() == {}
    assert manager.encode(pretty=True) == text


# -- we write -----------------------------------------------------------------------------------
def write_python_store(config: StoreConfig, count: int) -> list[dict[str, Any]]:
    """Our store writes ``count`` messages (IPv4 hosts) over 2 topics x 2 queues; clean shutdown."""
    store = open_store(config)
    puts = []
    try:
        for i in range(count):
            topic = ("PyTopicA", "PyTopicB")[i % 2]
            qid = (i // 2) % 2
            props = {"TAGS": f"tag{i % 3}", "KEYS": f"key-{i} shared-{i % 5}",
                     "UNIQ_KEY": f"7F0000010001{i:020X}", "origin": "python"}
            r = store.put_message(Message(
                topic=topic, body=f"msg-{i}".encode(), queue_id=qid, flag=i % 4, properties=props,
                born_timestamp=int(time.time() * 1000), born_host=HostAddress("10.9.8.7", 30000 + i),
                store_host=HostAddress("127.0.0.1", 10911),
            ))
            assert r.ok and r.append is not None
            puts.append({"topic": topic, "queueId": qid, "queueOffset": r.append.logics_offset,
                         "commitLogOffset": r.append.wrote_offset, "wroteBytes": r.append.wrote_bytes,
                         "msgId": r.append.msg_id, "body": f"msg-{i}", "properties": props, "flag": i % 4,
                         "bornHost": f"10.9.8.7:{30000 + i}"})
        assert store.reput_service.wait_caught_up(10)
    finally:
        store.shutdown()
    return puts


def test_python_written_store_reads_in_rocketmq(
    run_driver: DriverRunner, interop_config: ConfigFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    cfg = interop_config(root)
    puts = write_python_store(cfg, PY_MESSAGES)
    segments = sorted((root / "commitlog").iterdir())
    assert len(segments) >= 2, "segments must roll"
    max_offset = max(p["commitLogOffset"] + p["wroteBytes"] for p in puts)
    # like RocketMQ's, our clean shutdown deletes a segment created ahead but never written
    assert int(segments[-1].name) < max_offset <= int(segments[-1].name) + cfg.mapped_file_size_commit_log
    assert (root / "checkpoint").read_bytes()[24:] == bytes(4096 - 24)
    # broker-level config file in our encoding (quoted integer keys): RocketMQ must parse it
    delay = DelayOffsetManager(root / "config")
    delay.set_offset(1, 0)
    delay.set_offset(2, 0)
    delay.persist()
    our_delay_text = (root / "config" / "delayOffset.json").read_text()

    queries = [f"{p['topic']}:key-{i}" for i, p in enumerate(puts)]
    queries += [f"{puts[7]['topic']}:{puts[7]['properties']['UNIQ_KEY']}", "PyTopicA:shared-3"]
    lines = run_driver("read", root, *queries)

    opened = by_kind(lines, "opened")[0]
    assert opened["abortAtOpen"] is False
    assert (opened["minPhyOffset"], opened["maxPhyOffset"]) == (0, max_offset)
    queues = {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in by_kind(lines, "queue")}
    assert queues == {(t, q): (0, PY_MESSAGES // 4) for t in ("PyTopicA", "PyTopicB") for q in (0, 1)}

    read = {(m["topic"], m["queueId"], m["queueOffset"]): m for m in by_kind(lines, "message")}
    assert len(read) == len(puts)
    for p in puts:
        m = read[(p["topic"], p["queueId"], p["queueOffset"])]
        assert m["commitLogOffset"] == p["commitLogOffset"]
        assert m["storeSize"] == p["wroteBytes"]
        assert m["body"] == p["body"]
        assert m["keys"] == p["properties"]["KEYS"]
        assert m["tags"] == p["properties"]["TAGS"]
        assert m["uniqKey"] == p["properties"]["UNIQ_KEY"]
        assert m["properties"] == p["properties"]
        assert m["flag"] == p["flag"]
        assert m["bodyCRC"] == body_crc(p["body"].encode())
        assert m["bornHost"] == p["bornHost"]
        assert m["storeHost"] == "127.0.0.1:10911"
        assert m["msgId"] == p["msgId"]
        data, pos = read_segment(cfg, p["commitLogOffset"])
        assert bytes.fromhex(m["raw"]) == data[pos : pos + p["wroteBytes"]]

    results = {(q["topic"], q["key"]): [h["commitLogOffset"] for h in q["hits"]] for q in by_kind(lines, "query")}
    for i, p in enumerate(puts):
        assert results[(p["topic"], f"key-{i}")] == [p["commitLogOffset"]]
    assert results[(puts[7]["topic"], puts[7]["properties"]["UNIQ_KEY"])] == [puts[7]["commitLogOffset"]]
    shared3 = [p["commitLogOffset"] for p in puts if p["topic"] == "PyTopicA" and "shared-3" in p["properties"]["KEYS"]]
    assert sorted(results[("PyTopicA", "shared-3")]) == sorted(shared3)
    assert by_kind(lines, "shutdown")[0]["abortLeft"] is False

    # RocketMQ re-persisted our delayOffset.json on shutdown: ours became the backup, its own
    # version carries the same table.
    assert (root / "config" / "delayOffset.json.bak").read_text() == our_delay_text
    reread = DelayOffsetManager(root / "config")
    assert reread.load()
    assert reread.offsets() == {1: 0, 2: 0}

    # and the store RocketMQ closed opens cleanly here again, unchanged
    assert verify_store(cfg).ok
    store = open_store(cfg)
    try:
        assert store.last_exit_ok
        assert store.max_phy_offset == max_offset
        assert store.get_max_offset_in_queue("PyTopicB", 1) == PY_MESSAGES // 4
    finally:
        store.shutdown()


_CRASH_WRITER = """
import json, sys, time
from rocketstore.store.config import FlushDiskType, StoreConfig
from rocketstore.common.message import HostAddress, Message
from rocketstore.store.message_store import DefaultMessageStore

cfg = StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH, **json.loads(sys.argv[1]))
store = DefaultMessageStore(cfg)
store.load()
store.start()
i = 0
while True:
    r = store.put_message(Message(
        topic="CrashTopic", body=f"msg-{i}".encode(), queue_id=i % 2,
        properties={"TAGS": "t", "KEYS": f"key-{i}", "UNIQ_KEY": f"C{i:031d}"},
        born_timestamp=int(time.time() * 1000), born_host=HostAddress("10.0.0.1", 1234),
        store_host=HostAddress("127.0.0.1", 10911)))
    assert r.ok, r.status
    print(json.dumps({"i": i, "offset": r.append.wrote_offset, "queueOffset": r.append.logics_offset}), flush=True)
    i += 1
"""


def test_rocketmq_recovers_our_store_after_kill_9(
    run_driver: DriverRunner, interop_config: ConfigFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    sizes = interop_config(root)
    settings = {name: getattr(sizes, name) for name in (
        "store_path_root_dir", "mapped_file_size_commit_log", "mapped_file_size_consume_queue",
        "max_hash_slot_num", "max_index_num")}
    env = dict(os.environ)
    stderr_path = tmp_path / "writer.err"
    with open(stderr_path, "w") as stderr:
        child = subprocess.Popen([sys.executable, "-c", _CRASH_WRITER, json.dumps(settings)],
                                 stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    acked: list[dict[str, Any]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            acked.append(json.loads(line))
            if len(acked) >= 500:  # enough for the CommitLog to roll
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        acked += [json.loads(line) for line in child.stdout.read().splitlines() if line.strip()]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, stderr_path.read_text()[-3000:]
    assert len(acked) >= 500
    assert (root / "abort").exists(), "a killed store leaves abort behind"

    lines = run_driver("read", root, f"CrashTopic:key-{acked[-1]['i']}", "CrashTopic:key-0")
    opened = by_kind(lines, "opened")[0]
    assert opened["abortAtOpen"] is True  # RocketMQ ran its abnormal recovery
    assert opened["maxPhyOffset"] > acked[-1]["offset"]
    read = {(m["queueId"], m["queueOffset"]): m for m in by_kind(lines, "message")}
    for a in acked:
        m = read.get((a["i"] % 2, a["queueOffset"]))
        assert m is not None, f"acknowledged message {a} lost"
        assert (m["body"], m["commitLogOffset"], m["keys"]) == (f"msg-{a['i']}", a["offset"], f"key-{a['i']}")
    hits = {q["key"]: [h["commitLogOffset"] for h in q["hits"]] for q in by_kind(lines, "query")}
    assert hits[f"key-{acked[-1]['i']}"] == [acked[-1]["offset"]]
    assert hits["key-0"] == [0]
    assert by_kind(lines, "shutdown")[0]["abortLeft"] is False


def test_we_recover_rocketmq_store_after_jvm_halt(
    run_driver: DriverRunner, interop_config: ConfigFactory, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    lines = run_driver("write-crash", root, 300)  # SYNC_FLUSH puts, then Runtime.halt: no shutdown
    puts = by_kind(lines, "put")
    assert len(puts) == 300
    assert (root / "abort").exists()
    store = open_store(interop_config(root))
    try:
        assert not store.last_exit_ok
        assert store.max_phy_offset == max(p["commitLogOffset"] + p["wroteBytes"] for p in puts)
        for p in puts:
            result = store.get_message("interop", p["topic"], p["queueId"], p["queueOffset"], 1)
            assert result.status is GetMessageStatus.FOUND, p
            decoded = decode_record(result.messages[0])
            assert isinstance(decoded, StoredMessage)
            assert_same_message(p, decoded)
        last = puts[-1]
        found = store.query_message(last["topic"], last["uniqKey"], 32, 0, 2**62)
        assert [m.physical_offset for m in found.messages] == [last["commitLogOffset"]]
    finally:
        store.shutdown()
    assert not (root / "abort").exists()
    assert verify_store(interop_config(root)).ok
