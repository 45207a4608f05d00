"""Operator <-> a REAL broker process: retention pushed live over UPDATE_BROKER_CONFIG and a manual
delete token run as DELETE_EXPIRED_COMMITLOG, verified on the broker (its config and its files).

The broker is ``rocketstore broker`` started by the test on loopback with a temporary store of
tiny (64 KiB) CommitLog segments; the operator subprocess is pointed at it through its broker
addressing override (conftest: ``--broker-address brokers/rsb-0=127.0.0.1:PORT``). The RocketStore
itself still runs on a kwok node (so its pod is 'Running' without a container).
"""

from __future__ import annotations

import base64
import datetime
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import Broker
from commit_log_files import settled_segments
from kubernetes import client
from operator_support import BROKER_NAMESPACE, BROKER_STORE, STORAGE_CLASS, wait_until
from tool_support import require_tool

from rocketstore.client.admin import BrokerAdmin
from rocketstore.remoting.acl_signer import cal_signature, request_content
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import FrameDecoder, RemotingCommand

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
    files = settled_segments(broker["store"] / "commitlog", 4)
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
    # kopf posts events from its own task, after the change they report
    wait_until("a RetentionLowered warning", lambda: any(
        e.reason == "RetentionLowered" and e.type == "Warning"
        for e in client.CoreV1Api(kube).list_namespaced_event(BROKER_NAMESPACE).items), 30)

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


# -- an ACL Secret referenced by the RocketStore, enforced and hot-reloaded by its broker -------------

ACL_NAMESPACE = "acl-secret"
AK, SK = "operatorAcl", "operator-acl-secret"
EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
#: broker.conf keys that address the pod (its ports, DNS peers, volume) or size its store: the test's
#: loopback broker takes its own values for these; every other generated key is used as generated
POD_KEYS = {"listenPort", "namesrvListenPort", "httpListenPort", "storePathRootDir", "clusterPeers",
            "namesrvPeers", "mappedFileSizeCommitLog"}


def acl_file(topic_perm: str) -> str:
    return f"accounts:\n- accessKey: {AK}\n  secretKey: {SK}\n  defaultTopicPerm: {topic_perm}\n"


def kubelet_sync(volume: Path, data: dict[str, bytes]) -> None:
    """Write or update a Secret volume as kubelet's AtomicWriter does: the files in a fresh
    ``..<timestamp>`` directory, a new ``..data`` symlink renamed over the old one (the switch is
    atomic), one visible ``KEY -> ..data/KEY`` symlink per key, the previous directory removed."""
    volume.mkdir(parents=True, exist_ok=True)
    stamp = volume / f"..{datetime.datetime.now().strftime('%Y_%m_%d_%H_%M_%S.%f')}"
    stamp.mkdir()
    for key, value in data.items():
        (stamp / key).write_bytes(value)
    data_link = volume / "..data"
    previous = os.readlink(data_link) if data_link.is_symlink() else None
    os.symlink(stamp.name, volume / "..data_tmp")
    os.rename(volume / "..data_tmp", data_link)
    for key in data:
        if not (volume / key).is_symlink():
            os.symlink(f"..data/{key}", volume / key)
    if previous is not None:
        shutil.rmtree(volume / previous)


def secret_data(kube: Any, name: str) -> dict[str, bytes]:
    secret = client.CoreV1Api(kube).read_namespaced_secret(name, ACL_NAMESPACE)
    return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}


def signed_send(addr: str, topic: str) -> RemotingCommand:
    """SEND_MESSAGE_V2 signed as RocketMQ's AclClientRPCHook signs it, over a fresh connection."""
    fields = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "0", "h": "0", "i": "",
              "j": "0", "k": "false", "m": "false", "AccessKey": AK}
    body = b"through the operator's ACL Secret"
    fields["Signature"] = cal_signature(request_content(fields, body), SK)
    return remoting_call(addr, RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, ext_fields=fields, body=body))


def remoting_call(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    host, port = addr.rsplit(":", 1)
    decoder = FrameDecoder()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(cmd.encode())
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise ConnectionError("broker closed the connection")
            for reply in decoder.feed(data):
                if reply.opaque == cmd.opaque:
                    return reply


def test_acl_secret_of_a_rocketstore_is_enforced_and_reloaded_without_a_restart(
        kube: Any, operator_process: Any, tmp_path: Path) -> None:
    """The RocketStore names an ACL Secret; the operator's ConfigMap and StatefulSet are read back from
    the API server, the Secret's volume is laid out from the API's Secret as kubelet lays it out, and a
    broker runs that broker.conf: the ACL is enforced, and editing the Secret (kubelet's ..data swap)
    changes what the broker allows while the pod template and the pod stay the same."""
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    core.create_namespace({"metadata": {"name": ACL_NAMESPACE}})
    wait_until("default SA", lambda: core.read_namespaced_service_account("default", ACL_NAMESPACE), 60)
    core.create_namespaced_secret(ACL_NAMESPACE, {"metadata": {"name": "rs-acl"},
                                                  "stringData": {"plain_acl.yml": acl_file("PUB")}})
    client.CustomObjectsApi(kube).create_namespaced_custom_object(G, V, ACL_NAMESPACE, P, {
        "apiVersion": f"{G}/{V}", "kind": "RocketStore", "metadata": {"name": "secured"},
        "spec": {"brokers": 1, "scheduling": KWOK, "commitLog": {"segmentSize": "64Mi"},
                 "storage": {"segments": 2, "storageClassName": STORAGE_CLASS},
                 "acl": {"secretName": "rs-acl"}}})
    sts = wait_until("StatefulSet", lambda: apps.read_namespaced_stateful_set("secured", ACL_NAMESPACE), 60)
    conf_text = core.read_namespaced_config_map("secured-config", ACL_NAMESPACE).data["broker.conf"]
    pod = sts.spec.template.spec
    secret_volumes = {v.name: v.secret.secret_name for v in pod.volumes if v.secret is not None}
    mounts = {m.mount_path: secret_volumes[m.name] for m in pod.containers[0].volume_mounts
              if m.name in secret_volumes}
    assert secret_volumes == {"acl": "rs-acl"} and all(
        m.sub_path is None for m in pod.containers[0].volume_mounts if m.name in secret_volumes)

    # the pod's filesystem, rooted at tmp_path/pod: each Secret volume as kubelet writes it
    root = tmp_path / "pod"
    for mount_path, secret in mounts.items():
        kubelet_sync(root / mount_path.lstrip("/"), secret_data(kube, secret))

    def in_pod(value: str) -> str:
        hit = next((m for m in mounts if value == m or value.startswith(m + "/")), None)
        return value if hit is None else str(root / value.lstrip("/"))

    generated = dict(line.split("=", 1) for line in conf_text.splitlines() if line and not line.startswith("#"))
    assert generated["aclEnable"] == "true"
    conf = "".join(f"{k}={in_pod(v)}\n" for k, v in generated.items() if k not in POD_KEYS)
    (tmp_path / "broker").mkdir()
    broker = Broker(tmp_path / "broker", conf + "brokerName=secured-0\n")
    broker.start()
    try:
        ok = signed_send(broker.addr, "AclTopic")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        unsigned = remoting_call(broker.addr, RemotingCommand(code=RequestCode.GET_BROKER_CONFIG))
        assert unsigned.remark == EXCEPTION + "No accessKey is configured"

        wait_until("pod Running", lambda: [p for p in core.list_namespaced_pod(ACL_NAMESPACE).items
                                           if p.status.phase == "Running"], 60)
        pod_uid = core.read_namespaced_pod("secured-0", ACL_NAMESPACE).metadata.uid
        template = apps.read_namespaced_stateful_set("secured", ACL_NAMESPACE).spec.template.to_dict()
        core.patch_namespaced_secret("rs-acl", ACL_NAMESPACE, {"stringData": {"plain_acl.yml": acl_file("SUB")}})
        for mount_path, secret in mounts.items():
            kubelet_sync(root / mount_path.lstrip("/"), secret_data(kube, secret))

        denied = wait_until("the edited Secret in force", lambda: (r := signed_send(broker.addr, "AclTopic")) and
                            r.code != ResponseCode.SUCCESS and r, 15)
        assert denied.remark == EXCEPTION + "No default permission for topic:AclTopic"
        assert "rocketstore_acl_reloads_total 1.0" in broker.metrics()
        assert broker.proc.poll() is None
        # nothing the operator wrote depends on the Secret's contents: no rollout, the same pod
        assert apps.read_namespaced_stateful_set("secured", ACL_NAMESPACE).spec.template.to_dict() == template
        assert core.read_namespaced_pod("secured-0", ACL_NAMESPACE).metadata.uid == pod_uid
    finally:
        broker.stop()
