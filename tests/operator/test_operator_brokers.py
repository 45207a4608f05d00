"""Operator <-> a REAL broker process: retention pushed live over UPDATE_BROKER_CONFIG and a manual
delete token run as DELETE_EXPIRED_COMMITLOG, verified on the broker (its config and its files).

The broker is ``rocketstore broker`` started by the test on loopback with a temporary store of
tiny (64 KiB) CommitLog segments; the operator subprocess is pointed at it through its broker
addressing override (conftest: ``--broker-address brokers/rsb-0=127.0.0.1:PORT``). The RocketStore
itself still runs on a kwok node (so its pod is 'Running' without a container).
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from conftest import BROKER_NAMESPACE, BROKER_STORE, STORAGE_CLASS, wait_until
from kubernetes import client
from tool_support import require_tool

from rocketstore.client.admin import BrokerAdmin

pytestmark = pytest.mark.integration

G, V, P = "rocketstore.io", "v1alpha1", "rocketstores"
SEGMENT = 64 * 1024
STORE_FS = "8m"
KWOK = {"nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}


@pytest.fixture(scope="module")
def broker(broker_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    work = tmp_path_factory.mktemp("broker")
    # the store on its own small tmpfs, so the adaptive test can fill and free a real filesystem
    (work / "store").mkdir()
    tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={STORE_FS}", "tmpfs", str(work / "store")],
                           capture_output=True).returncode == 0
    b = Broker(work, "\n".join([
        "brokerClusterName=rsb", f"brokerName={BROKER_STORE}-0", f"mappedFileSizeCommitLog={SEGMENT}",
        "mappedFileSizeConsumeQueue=20000", "maxHashSlotNum=100", "maxIndexNum=400",
        "cleanResourceInterval=1000", "fileReservedTime=72", f"deleteWhen={_hour_far_away()}", ""]),
        listen_port=broker_port)
    try:
        b.start()
        yield {"addr": b.addr, "namesrv": b.namesrv, "store": b.store, "tmpfs": tmpfs}
    finally:
        if b.process is not None:
            b.stop()
        if tmpfs:
            subprocess.run(["umount", str(work / "store")], check=False)


def _hour_far_away() -> str:
    """A ``deleteWhen`` hour 12 h from now: the broker's own daily deletion never runs in a test."""
    return f"{(datetime.datetime.now().hour + 12) % 24:02d}"


def broker_config(broker: dict[str, Any]) -> dict[str, str]:
    with BrokerAdmin(broker["addr"], timeout=5) as a:
        conf: dict[str, str] = a.get_broker_config()
        return conf


def segments(broker: dict[str, Any]) -> list[Path]:
    return sorted((broker["store"] / "commitlog").iterdir())


def fill_and_age(broker: dict[str, Any], count: int = 40) -> list[Path]:
    """Write about ``count`` x 8 KiB messages (several segments), then make all but the newest 3 h old."""
    from rocketstore.client.producer import Producer

    with Producer(broker["namesrv"], "operator-test") as producer:
        for i in range(count):
            producer.send("OperatorTopic", os.urandom(8 * 1024), keys=f"k{i}")
    files = wait_until("several CommitLog segments", lambda: (s := segments(broker)) and len(s) >= 4 and s, 30)
    old = time.time() - 3 * 3600
    for f in files[:-1]:
        os.utime(f, (old, old))
    return files


@pytest.fixture(scope="module")
def rocketstore(kube: Any, operator_process: Any, broker: dict[str, Any]) -> dict[str, Any]:
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": BROKER_NAMESPACE}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", BROKER_NAMESPACE), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": BROKER_STORE},
            "spec": {"brokers": 1, "scheduling": KWOK, "commitLog": {"segmentSize": "64Mi"},
                     "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
                     "retention": {"fileReservedTime": 48, "deleteWhen": _hour_far_away()}}}
    obj: dict[str, Any] = client.CustomObjectsApi(kube).create_namespaced_custom_object(
        G, V, BROKER_NAMESPACE, P, body)
    return obj


def get(kube: Any) -> dict[str, Any]:
    obj: dict[str, Any] = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        G, V, BROKER_NAMESPACE, P, BROKER_STORE)
    return obj


def patch(kube: Any, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(G, V, BROKER_NAMESPACE, P, BROKER_STORE,
                                                                 {"spec": spec})


def set_retention(kube: Any, **retention: Any) -> None:
    """Replace ``spec.retention`` as a whole (a JSON patch, not a merge), so that each test starts
    from the retention it names whatever the tests before it set; deleteWhen stays 12 h away."""
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(
        G, V, BROKER_NAMESPACE, P, BROKER_STORE,
        [{"op": "replace", "path": "/spec/retention", "value": {"deleteWhen": _hour_far_away(), **retention}}],
        _content_type="application/json-patch+json")


def wait_for_observations(kube: Any, count: int = 2) -> dict[str, Any]:
    """Wait until the operator has handled the current spec (``status.observedGeneration`` equals
    ``metadata.generation``) and then observed the brokers ``count`` more times (each observation
    stamps ``status.observedAt``, to the second; the timer runs every second); returns the object."""
    generation = get(kube)["metadata"]["generation"]
    wait_until(f"the operator at generation {generation}",
               lambda: get(kube).get("status", {}).get("observedGeneration") == generation, 60)
    stamps = {get(kube)["status"]["observedAt"]}

    def observed_again() -> dict[str, Any] | None:
        obj = get(kube)
        stamps.add(obj["status"]["observedAt"])
        return obj if len(stamps) > count else None

    found: dict[str, Any] = wait_until(f"{count} more observations", observed_again, 30, interval=0.2)
    return found


def test_retention_reaches_the_broker_live(kube: Any, broker: dict[str, Any], rocketstore: dict[str, Any]) -> None:
    set_retention(kube, fileReservedTime=48)
    wait_until("broker runs fileReservedTime=48", lambda: broker_config(broker).get("fileReservedTime") == "48", 60)
    obj = wait_until("status shows the applied retention", lambda: (o := get(kube)) and o.get("status", {}).get(
        "brokers") and o["status"]["brokers"][0].get("appliedRetention", {}).get("fileReservedTime") == "48" and o)
    b = obj["status"]["brokers"][0]
    assert b["reachable"] is True and b["address"] == broker["addr"]
    assert 0 <= b["diskUsageRatio"] <= 1 and b["commitLogMaxOffset"] >= 0
    assert obj["status"]["diskUsage"].endswith("%")

    patch(kube, {"retention": {"fileReservedTime": 1, "diskMaxUsedSpaceRatio": 80}})
    wait_until("broker runs fileReservedTime=1", lambda: broker_config(broker).get("fileReservedTime") == "1", 60)
    conf = broker_config(broker)
    assert conf["diskMaxUsedSpaceRatio"] == "80"
    wait_until("status applied 1h", lambda: get(kube)["status"]["brokers"][0]["appliedRetention"][
        "fileReservedTime"] == "1")
    # a broker restart (or a human) resetting the value is corrected on the next observation
    with BrokerAdmin(broker["addr"], timeout=5) as a:
        a.update_broker_config({"fileReservedTime": "99"})
    wait_until("drift corrected", lambda: broker_config(broker).get("fileReservedTime") == "1", 30)


def test_adaptive_retention_lowers_then_restores_as_disk_fills_and_frees(
        kube: Any, broker: dict[str, Any], rocketstore: dict[str, Any]) -> None:
    require_tool("a tmpfs mount (root)", broker["tmpfs"], "the adaptive test fills and frees a small filesystem "
                 "under the broker's store (mount -t tmpfs needs root)")
    set_retention(kube, policy="adaptive", fileReservedTime=48, minFileReservedTime=6,
                  diskSpaceCleanForciblyRatio=0.85, adaptiveMargin=0.05)
    wait_until("broker back at the spec's 48h", lambda: broker_config(broker).get("fileReservedTime") == "48", 60)
    seen: list[str] = []

    def at(hours: str) -> bool:
        value = broker_config(broker).get("fileReservedTime", "")
        if not seen or seen[-1] != value:
            seen.append(value)
        return value == hours

    # fill the broker's filesystem to 83%: above forcibly - margin (0.80), below the warning level
    usage = shutil.disk_usage(broker["store"])
    filler = broker["store"] / "filler"
    filler.write_bytes(b"\0" * max(0, int(usage.total * 0.83) - usage.used))
    wait_until("fileReservedTime lowered to the floor", lambda: at("6"), 60, interval=0.1)
    assert seen[:1] == ["48"] and seen[-1] == "6" and "24" in seen, seen  # halved step by step, bounded
    # the broker is pushed first, the status written after: wait for the status to catch up with it
    obj = wait_until("the status at the floor", lambda: (o := get(kube)) and o["status"]["retention"] == "6h (spec 48h)"
                     and o)
    pressure = next(c for c in obj["status"]["conditions"] if c["type"] == "DiskPressure")
    assert pressure["status"] == "True" and pressure["reason"] in ("RetentionLowered", "RetentionAtFloor")
    assert any(e.reason == "RetentionLowered" and e.type == "Warning"
               for e in client.CoreV1Api(kube).list_namespaced_event(BROKER_NAMESPACE).items)

    # free the disk: the operator raises it back toward the spec's value
    filler.unlink()
    seen.clear()
    wait_until("fileReservedTime restored", lambda: at("48"), 60, interval=0.1)
    assert "12" in seen or "24" in seen, seen
    wait_until("DiskPressure cleared and the status back at the spec", lambda: (o := get(kube)) and next(
        c for c in o["status"]["conditions"] if c["type"] == "DiskPressure")["status"] == "False"
        and o["status"]["retention"] == "48h")


def test_manual_delete_token_runs_once_and_deletes_expired_segments(
        kube: Any, broker: dict[str, Any], rocketstore: dict[str, Any]) -> None:
    set_retention(kube, fileReservedTime=1)
    wait_until("broker runs fileReservedTime=1", lambda: broker_config(broker).get("fileReservedTime") == "1", 60)
    t0 = time.monotonic()
    before = fill_and_age(broker)
    print(f"filled {len(before)} segments in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    # the operator observes the broker with expired segments and no token: nothing is deleted
    # (deleteWhen is 12 h away)
    wait_for_observations(kube)
    assert segments(broker) == before

    patch(kube, {"maintenance": {"deleteExpiredRequest": "t1"}})
    # the store's first cleanup pass comes 60 s after its start (as in RocketMQ): 90 s covers a
    # broker started just before this test
    after = wait_until("expired segments deleted", lambda: (s := segments(broker)) and len(s) < len(before) and s, 90)
    assert after[-1] == before[-1]  # the newest (still written) segment stays
    print(f"deleted {len(before) - len(after)} segments after {time.monotonic() - t0:.1f}s", file=sys.stderr)
    obj = wait_until("result in status", lambda: (o := get(kube)) and (
        o["status"]["brokers"][0].get("lastManualDelete") or {}).get("filesDeleted", 0) > 0 and o, 60)
    last = obj["status"]["brokers"][0]["lastManualDelete"]
    assert last["token"] == "t1" and last["result"] == "Requested"
    first_time = last["time"]

    # the same token, observed again, does nothing more
    obj = wait_for_observations(kube)
    assert obj["status"]["brokers"][0]["lastManualDelete"]["time"] == first_time
    events = [e for e in client.CoreV1Api(kube).list_namespaced_event(BROKER_NAMESPACE).items
              if e.reason == "ManualDeleteRequested"]
    assert len(events) == 1
