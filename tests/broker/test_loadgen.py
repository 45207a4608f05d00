"""bench/loadgen, the broker benchmark's lean load generator, against a real broker process: what
it reports as acknowledged is what the broker stored, and its drain counts every stored message
once, in queue-offset order. Its rows in docs/benchmarks.md are only worth what these checks hold.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from tool_support import cargo_tool_binary, require_executable, require_tool

from rocketstore.client.admin import MQAdmin

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "LoadgenTopic"
QUEUES = 4


@pytest.fixture(scope="module")
def loadgen() -> Path:
    cargo = require_executable("cargo", "builds bench/loadgen")
    try:
        return cargo_tool_binary(cargo, ROOT / "bench" / "loadgen" / "Cargo.toml", "loadgen")
    except RuntimeError as exc:
        require_tool("bench/loadgen", False, str(exc))
        raise


def run(loadgen: Path, *args: str | int) -> dict[str, Any]:
    proc = subprocess.run([str(loadgen), *map(str, args)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


def test_acknowledged_sends_are_stored_and_drained_once_in_order(loadgen: Path, tmp_path: Path) -> None:
    with Broker(tmp_path).running() as broker:
        sent = run(loadgen, "produce", "--addr", broker.addr, "--topic", TOPIC, "--queues", QUEUES,
                   "--inflight", 8, "--seconds", 1, "--size", 1024)
        assert sent["failed"] == 0, sent["first_failure"]
        assert sent["sent"] > 100
        with MQAdmin(broker.namesrv) as admin:
            stored = admin.topic_status(TOPIC)
        assert len(stored) == QUEUES
        assert sum(s.max_offset for s in stored) == sent["sent"], "acknowledged sends and stored messages differ"
        # round robin over the queues: none more than one message ahead of another
        assert max(s.max_offset for s in stored) - min(s.max_offset for s in stored) <= 1

        drained = run(loadgen, "pull", "--addr", broker.addr, "--topic", TOPIC, "--group", "loadgen-test",
                      "--queues", QUEUES, "--stop-after", 10**9, "--max-seconds", 60)
        assert drained["consumed"] == sent["sent"]
        assert drained["gaps"] == 0
        # every record holds the 1 KiB body: at least that much per message came back
        assert drained["bytes"] >= 1024 * drained["consumed"]

