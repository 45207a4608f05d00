"""The ``rocketstore`` console script: ``store stats|dump|verify`` run as real processes.

Stores are written by the engine in tmp_path with small files; the store layout reaches the
command through a RocketMQ broker.conf (``-c``), as an operator would pass it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketstore.cli.main import build_parser
from rocketstore.common.message import HostAddress, Message
from rocketstore.store.config import StoreConfig
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.offline import store_stats

pytestmark = pytest.mark.integration

SEG = 2048
BROKER_CONF_SIZES = {
    "mappedFileSizeCommitLog": str(SEG),
    "mappedFileSizeConsumeQueue": str(20 * 8),
    "maxHashSlotNum": "64",
    "maxIndexNum": "32",
}
TOPICS = ("Orders", "Payments", "Audit")
MESSAGE_FIELDS = {
    "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "bodyCRC", "flag", "sysFlag",
    "bornTimestamp", "bornHost", "storeTimestamp", "storeHost", "reconsumeTimes", "preparedTransactionOffset",
    "tags", "keys", "uniqKey", "msgId", "properties", "body",
}


def script() -> str:
    """The installed console script (the one ``pip install -e .`` put next to this interpreter)."""
    candidate = Path(sys.executable).parent / "rocketstore"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("rocketstore")
    if found is None:
        pytest.fail("the rocketstore console script is not installed; run `pip install -e .`", pytrace=False)
    return found


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([script(), *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def write_conf(path: Path, root: Path | str, **extra: str) -> Path:
    lines = ["# broker.conf for a small test store", "brokerName=broker-a", "brokerClusterName=DefaultCluster",
             f"storePathRootDir={root}", *(f"{k}={v}" for k, v in {**BROKER_CONF_SIZES, **extra}.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


def config_for(root: Path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG,
                       mapped_file_size_consume_queue=20 * 8, max_hash_slot_num=64, max_index_num=32)


@dataclass(frozen=True)
class Written:
    root: Path
    conf: Path
    messages: list[Message]
    offsets: list[int]
    end: int  # CommitLog offset just past the last record


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    base = tmp_path_factory.mktemp("cli")
    root = base / "store"
    store = DefaultMessageStore(config_for(root))
    store.load()
    store.start()
    messages, offsets = [], []
    try:
        for i in range(40):
            body = f"héllo wörld {i}\nline two".encode() if i % 5 == 0 else bytes(range(i % 7, 40))
            msg = Message(
                topic=TOPICS[i % 3], body=body, queue_id=i % 2, flag=i,
                properties={"TAGS": f"t{i % 4}", "KEYS": f"k{i} shared", "UNIQ_KEY": f"U{i:04d}"},
                born_timestamp=1_700_000_000_000 + i,
                born_host=HostAddress("2001:db8::7", 5000 + i) if i % 3 == 0 else HostAddress("10.1.2.3", 6000),
                store_host=HostAddress("192.168.0.10", 10911),
            )
            r = store.put_message(msg)
            assert r.ok and r.append is not None
            messages.append(msg)
            offsets.append(r.append.wrote_offset)
        assert store.reput_service.wait_caught_up(5)
    finally:
        store.shutdown()
    assert offsets[-1] >= 2 * SEG, "the store must span several segments"
    end = r.append.wrote_offset + r.append.wrote_bytes
    return Written(root, write_conf(base / "broker.conf", root), messages, offsets, end)


@pytest.fixture
def damaged(written: Written, tmp_path: Path) -> tuple[Path, Path, int]:
    """A copy whose message 25 has one body byte flipped: (root, broker.conf, record offset)."""
    root = tmp_path / "store"
    shutil.copytree(written.root, root)
    offset = written.offsets[25]
    seg = root / "commitlog" / f"{offset - offset % SEG:020d}"
    data = bytearray(seg.read_bytes())
    body_at = data.index(written.messages[25].body, offset % SEG)
    data[body_at + 1] ^= 0xFF
    seg.write_bytes(bytes(data))
    return root, write_conf(tmp_path / "broker.conf", root), offset


# -- stats ------------------------------------------------------------------------------------
def test_stats_json_is_the_store_summary(written: Written) -> None:
    result = run("store", "stats", "-c", str(written.conf), "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats == json.loads(json.dumps(store_stats(config_for(written.root))))
    assert stats["store_dir"] == str(written.root)
    assert sum(q["message_count"] for q in stats["queues"]) == 40
    assert {t: v["message_count"] for t, v in stats["topics"].items()} == {t: 40 // 3 + (t == "Orders") for t in TOPICS}
    assert stats["commit_log"]["min_offset"] == 0
    assert stats["commit_log"]["max_offset"] == written.end
    assert stats["last_shutdown_abnormal"] is False


def test_stats_human_output_is_compact(written: Written) -> None:
    result = run("store", "stats", "-c", str(written.conf))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"Store {written.root}  last shutdown: normal" in out
    assert "Topics: 3 topics, 6 queues, 40 messages" in out
    for topic in TOPICS:
        assert f"  {topic}" in out
    assert "CommitLog:" in out and "Index:" in out and "Checkpoint: physic 20" in out and "Disk usage:" in out
    assert len(out.splitlines()) < 40


# -- dump -------------------------------------------------------------------------------------
def test_dump_json_lines_carry_every_field(written: Written) -> None:
    result = run("store", "dump", "-c", str(written.conf), "--json")
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 40
    assert [m["commitLogOffset"] for m in lines] == written.offsets
    for got, msg in zip(lines, written.messages, strict=True):
        assert set(got) == MESSAGE_FIELDS
        assert base64.b64decode(got["body"]) == msg.body
        assert (got["topic"], got["queueId"], got["flag"]) == (msg.topic, msg.queue_id, msg.flag)
        assert got["bornHost"] == str(msg.born_host) and got["storeHost"] == "192.168.0.10:10911"
        assert got["bornTimestamp"] == msg.born_timestamp
        assert (got["tags"], got["keys"], got["uniqKey"]) == (msg.tags, msg.keys, msg.properties["UNIQ_KEY"])
        assert got["properties"]["UNIQ_KEY"] == msg.properties["UNIQ_KEY"]
        assert len(got["msgId"]) == 32 and got["msgId"].endswith(f"{got['commitLogOffset']:016X}")
    assert lines[0]["bornHost"] == "[2001:db8::7]:5000"
    assert lines[0]["sysFlag"] & 0x10 and not lines[1]["sysFlag"] & 0x10


def test_dump_filters_reach_the_command(written: Written) -> None:
    def offsets(*args: str) -> list[int]:
        result = run("store", "dump", "-c", str(written.conf), "--json", *args)
        assert result.returncode == 0, result.stderr
        return [json.loads(line)["commitLogOffset"] for line in result.stdout.splitlines()]

    pairs = list(zip(written.messages, written.offsets, strict=True))
    assert offsets("--topic", "Payments", "--queue-id", "1") == [
        o for m, o in pairs if (m.topic, m.queue_id) == ("Payments", 1)]
    assert offsets("--key", "k7") == [written.offsets[7]]
    assert offsets("--key", "U0012") == [written.offsets[12]]
    assert offsets("--start-offset", str(written.offsets[5]), "--end-offset", str(written.offsets[9])) == \
        written.offsets[5:9]
    assert offsets("--key", "shared", "--limit", "3") == written.offsets[:3]


def test_dump_human_output_previews_bodies_as_utf8(written: Written) -> None:
    result = run("store", "dump", "-c", str(written.conf), "--key", "k5")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    msg = written.messages[5]
    queue_offset = sum(1 for m in written.messages[:5] if (m.topic, m.queue_id) == (msg.topic, msg.queue_id))
    assert f"{msg.topic}[{msg.queue_id}]@{queue_offset}  offset {written.offsets[5]}  size " in out
    assert "tags t1  keys k5 shared  uniqKey U0005  born 10.1.2.3:6000" in out
    assert f"body ({len(msg.body)} B): héllo wörld 5\\nline two" in out
    assert out.rstrip().endswith("\n1 message")


# -- verify -----------------------------------------------------------------------------------
def test_verify_clean_store_exits_0(written: Written) -> None:
    result = run("store", "verify", "-c", str(written.conf))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"{written.root}: OK (40 records")
    as_json = run("store", "verify", "-c", str(written.conf), "--json")
    assert as_json.returncode == 0
    report = json.loads(as_json.stdout)
    assert report["ok"] is True and report["problems"] == [] and report["records"] == 40
    assert report["index_entries"] == 40 * 3


def test_verify_corrupt_store_exits_1_with_the_place(damaged: tuple[Path, Path, int]) -> None:
    root, conf, offset = damaged
    seg_name = f"{offset - offset % SEG:020d}"
    result = run("store", "verify", "-c", str(conf))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith(f"{root}: CORRUPT, ")
    assert f"  commitlog/{seg_name} position {offset % SEG} (offset {offset}): body CRC mismatch" in result.stdout
    as_json = run("store", "verify", "--store-dir", str(root), "-c", str(conf), "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and report["records"] == 39
    assert report["problems"][0].startswith(f"commitlog/{seg_name} position {offset % SEG}")


def test_stats_of_a_missing_directory_exits_2_naming_it(tmp_path: Path) -> None:
    """A store directory that is not there is a typo or the wrong machine: stats says so and fails,
    as dump and verify do, instead of reporting an empty store with exit code 0."""
    missing = tmp_path / "does" / "not" / "exist"
    for extra in ([], ["--json"]):
        result = run("store", "stats", "--store-dir", str(missing), *extra)
        assert result.returncode == 2, result.stdout
        assert result.stderr.strip() == f"rocketstore store stats: error: store directory {missing} does not exist"
        assert result.stdout == ""
    assert not (tmp_path / "does").exists()


@pytest.mark.parametrize("action", ["stats", "dump", "verify"])
def test_missing_or_foreign_directory_exits_2_without_traceback(tmp_path: Path, action: str) -> None:
    missing = run("store", action, "--store-dir", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert f"rocketstore store {action}: error: store directory {tmp_path / 'nowhere'} does not exist" in missing.stderr
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"\xff\xd8")
    foreign = run("store", action, "--store-dir", str(tmp_path / "photos"))
    assert foreign.returncode == 2
    assert "is not a store directory" in foreign.stderr
    for r in (missing, foreign):
        assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize("action", ["stats", "dump", "verify"])
def test_missing_default_store_says_how_to_name_one(tmp_path: Path, action: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    result = run("store", action, env={**os.environ, "HOME": str(home)})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (f"rocketstore store {action}: error: store directory {home / 'store'} does not "
                                     "exist (RocketMQ's default; give --store-dir DIR or -c broker.conf)")


def test_bad_config_file_exits_2(tmp_path: Path, written: Written) -> None:
    gone = run("store", "verify", "-c", str(tmp_path / "missing.conf"))
    assert gone.returncode == 2 and "does not exist" in gone.stderr and "Traceback" not in gone.stderr
    bad = write_conf(tmp_path / "bad.conf", written.root, mappedFileSizeCommitLog="huge")
    result = run("store", "stats", "-c", str(bad))
    assert result.returncode == 2
    assert "mappedFileSizeCommitLog" in result.stderr and "Traceback" not in result.stderr


# -- where the store is -----------------------------------------------------------------------
def test_store_dir_comes_from_broker_conf_and_store_dir_overrides_it(written: Written, tmp_path: Path) -> None:
    from_conf = run("store", "stats", "-c", str(written.conf), "--json")
    assert from_conf.returncode == 0 and json.loads(from_conf.stdout)["store_dir"] == str(written.root)

    elsewhere = write_conf(tmp_path / "elsewhere.conf", tmp_path / "not-here",
                           storePathCommitLog=str(tmp_path / "not-here" / "commitlog"))
    assert run("store", "verify", "-c", str(elsewhere)).returncode == 2
    overridden = run("store", "stats", "-c", str(elsewhere), "--store-dir", str(written.root), "--json")
    assert overridden.returncode == 0, overridden.stderr
    stats = json.loads(overridden.stdout)
    assert stats["store_dir"] == str(written.root)
    assert stats["commit_log"]["dirs"] == [str(written.root / "commitlog")]
    assert sum(q["message_count"] for q in stats["queues"]) == 40


def test_default_store_dir_is_home_store(written: Written, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home)}
    home.mkdir()
    absent = run("store", "verify", env=env)
    assert absent.returncode == 2 and f"store directory {home / 'store'} does not exist" in absent.stderr
    shutil.copytree(written.root, home / "store")
    stats = run("store", "stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr
    summary = json.loads(stats.stdout)
    assert summary["store_dir"] == str(home / "store")
    # without a broker.conf RocketMQ's 1 GiB default applies; the tool says the files differ
    assert summary["commit_log"]["segment_size"] == 1024**3 and summary["commit_log"]["segment_size_on_disk"] == SEG
    verify = run("store", "verify", env=env)
    assert verify.returncode == 1 and "pass its broker.conf" in verify.stdout


def test_usage_errors_exit_2() -> None:
    assert run().returncode == 2
    assert run("store").returncode == 2
    result = run("store", "dump", "--queue-id", "x")
    assert result.returncode == 2 and "invalid int value" in result.stderr
    assert "stats" in run("store", "--help").stdout


# -- pipeline without the spark extra ---------------------------------------------------------
#: runs the command line in a fresh interpreter where `import pyspark` fails: this simulates an
#: install without the spark extra (a None entry in sys.modules makes every import of it raise
#: ImportError), while the rest of the project stays importable
WITHOUT_PYSPARK = "import sys; sys.modules['pyspark'] = None; from rocketstore.cli.main import main; sys.exit(main())"


@pytest.mark.parametrize("job", ["export", "reindex", "retention"])
def test_pipeline_without_the_spark_extra_says_how_to_install_it(written: Written, tmp_path: Path, job: str) -> None:
    args = ["pipeline", job, "--store-dir", str(written.root), "-c", str(written.conf),
            "--output", str(tmp_path / "out")]
    result = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, *args],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"rocketstore pipeline {job}: error: pyspark not installed; the Spark jobs need the spark extra: "
        "pip install -e '.[spark]' (from the repository root)"]
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()
    # the rest of the command line keeps working without PySpark
    helped = subprocess.run([sys.executable, "-c", WITHOUT_PYSPARK, "pipeline", job, "--help"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert helped.returncode == 0 and "--output" in helped.stdout


@pytest.mark.parametrize(("value", "order"), [("true", True), ("false", False), ("TRUE", True)])
def test_update_topic_order_takes_a_value_as_mqadmin(value: str, order: bool) -> None:
    args = build_parser().parse_args(["admin", "updateTopic", "-t", "T", "-b", "127.0.0.1:10911", "-o", value])
    assert args.order is order


def test_update_topic_order_refuses_other_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["admin", "updateTopic", "-t", "T", "-b", "127.0.0.1:10911", "-o", "yes"])
    assert exit_info.value.code == 2
    assert "expected true or false, got 'yes'" in capsys.readouterr().err
