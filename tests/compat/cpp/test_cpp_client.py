"""The real RocketMQ C++ 4.x client (librocketmq inside ``rocketmq-client-python==0.5.0rc2``) against our broker.

The wheel installs a top-level package ``rocketmq``, as the 5.x Python client does, so it lives
in its own virtualenv under ``~/.cache/rocketstore/venvs/rocketmq-client-python-<version>``
(tool_support.pip_tool_venv: created once, reused afterwards), and the tests drive it through the scripts in
tests/support/drivers/cpp run by that virtualenv's interpreter. The C++ client logs under
``$HOME/logs/rocketmq-cpp``; each run gets a scratch HOME.

Querying messages (by key or id) is not in the 0.5.0rc2 Python API (Producer and PushConsumer
only, no admin calls), so the C++-produced messages are looked up with the Java client instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from recording_broker import RocketStoreBroker, java_driver
from tool_support import DRIVERS_DIR, ScriptRun, pip_tool_venv, pip_tool_venv_dir, require_tool, run_tool_script

from rocketstore.common.message import SysFlag
from rocketstore.remoting.body import HeartbeatData
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import FrameDecoder, RemotingCommand

pytestmark = pytest.mark.integration

CLIENT_PACKAGE = "rocketmq-client-python"
CLIENT_VERSION = "0.5.0rc2"
VENV = pip_tool_venv_dir(CLIENT_PACKAGE, CLIENT_VERSION)
SCRIPTS = DRIVERS_DIR / "cpp"
COUNT = 20
ONEWAY = 2  # the last messages of the main topic are sent one-way
TAGS = ("TagA", "TagB")
LARGE = 64 * 1024
#: This module's broker (the shared ``rocketstore_broker``) waits 1 s at every delay level instead of
#: 1 s, 5 s, 10 s, 30 s, 1 min... A message handed back is retried at level 3 + reconsumeTimes, and
#: the client sends a whole pulled batch back when one message fails, so a message can be handed
#: back two or three times before the listener first sees it: with the default table the retry
#: test waited out 10 s + 30 s + 1 min (100 s in CI) for what these 1 s levels show as well.
ROCKETSTORE_BROKER_CONF = "messageDelayLevel=" + " ".join(["1s"] * 18) + "\n"


@dataclass
class CppClient:
    python: Path
    home: Path
    namesrv: str

    def run(self, script: str, *args: str | int, timeout: float = 120.0) -> ScriptRun:
        return run_tool_script(self.python, SCRIPTS / script, args, home=self.home, timeout=timeout)

    def produce(self, topic: str, count: int, *, tags: tuple[str, ...] = (), size: int = 0,
                oneway: int = 0) -> ScriptRun:
        run = self.run("cpp_produce.py", self.namesrv, topic, count, "--tags", ",".join(tags), "--size", size,
                       "--oneway", oneway)
        assert run.returncode == 0 and not run.of("error"), (run.lines[-3:], run.stderr[-3000:])
        return run

    def push_consume(self, topic: str, group: str, expected: int, *, tags: str = "*", fail_times: int = 0,
                     timeout_s: int = 60, linger_ms: int = 0, check: bool = True) -> ScriptRun:
        run = self.run("cpp_push_consume.py", self.namesrv, topic, group, expected, "--tags", tags,
                       "--fail-times", fail_times, "--timeout", timeout_s, "--linger", linger_ms,
                       timeout=timeout_s + 60)
        if check:
            assert run.returncode == 0, (run.of("summary"), run.stderr[-3000:])
        return run


@pytest.fixture(scope="module")
def cpp(rocketstore_broker: RocketStoreBroker, tmp_path_factory: pytest.TempPathFactory) -> CppClient:
    if not sys.platform.startswith("linux"):
        require_tool(CLIENT_PACKAGE, False, f"{CLIENT_VERSION} ships a Linux wheel only")
    begin = time.monotonic()
    try:
        python = pip_tool_venv(CLIENT_PACKAGE, CLIENT_VERSION, "rocketmq.client")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        require_tool(CLIENT_PACKAGE, False, f"cannot install it ({CLIENT_VERSION}) into {VENV}: {exc}")
    print(f"\nC++ client virtualenv ready in {time.monotonic() - begin:.1f} s: {VENV}", file=sys.stderr)
    return CppClient(python, tmp_path_factory.mktemp("cpp-home"), rocketstore_broker.namesrv)


Sent = list[dict[str, Any]]


@pytest.fixture(scope="module")
def cpp_topic(cpp: CppClient) -> tuple[str, Sent]:
    """COUNT messages with keys key-<i> and tags TagA/TagB; the last ONEWAY ones sent one-way."""
    topic = "CppTopic"
    run = cpp.produce(topic, COUNT, tags=TAGS, oneway=ONEWAY)
    assert run.of("summary") == [{"kind": "summary", "count": COUNT, "failed": 0}]
    return topic, run.of("sent")


def _cpp_requests(broker: RocketStoreBroker, code: int) -> list[Any]:
    return [f for f in broker.proxy.requests(code) if f.cmd.language == LanguageCode.CPP]


def _assert_received_as_sent(sent: Sent, received: Sent, topic: str) -> None:
    ids = [line["msgId"] for line in received]
    assert not [i for i, n in Counter(ids).items() if n > 1], "a message came back twice"
    by_body = {line["body"]: line for line in sent}
    assert sorted(line["body"] for line in received) == sorted(by_body)
    for line in received:
        s = by_body[line["body"]]
        assert (line["topic"], line["keys"], line["tags"], line["reconsumeTimes"]) == (topic, s["key"], s["tag"], 0)
        assert line["uniqKey"] == line["msgId"]  # the client shows the UNIQ_KEY as the message id
        if s["status"] == "OK":
            assert (line["msgId"], line["queueOffset"]) == (s["msgId"], s["queueOffset"])


# -- tests ------------------------------------------------------------------------------------------


def test_cpp_producer_gets_a_result_per_sync_send(cpp_topic: tuple[str, Sent]) -> None:
    _, sent = cpp_topic
    sync = sent[:COUNT - ONEWAY]
    assert [line["status"] for line in sync] == ["OK"] * len(sync)
    assert [line["status"] for line in sent[COUNT - ONEWAY:]] == ["ONEWAY"] * ONEWAY
    assert len({line["msgId"] for line in sync}) == len(sync)
    assert all(len(line["msgId"]) == 32 for line in sync)  # the C++ client's 16-byte unique id
    # one producer round-robins the 4 queues of a fresh topic: queue offsets 0 x4, 1 x4, ... in order
    offsets = [line["queueOffset"] for line in sync]
    assert offsets == sorted(offsets) and offsets[-1] <= len(sync) // 4
    assert max(Counter(offsets).values()) == 4


def test_cpp_push_consumer_receives_everything_and_commits(
        cpp: CppClient, cpp_topic: tuple[str, Sent], rocketstore_broker: RocketStoreBroker) -> None:
    topic, sent = cpp_topic
    group = "CppPushGroup"
    run = cpp.push_consume(topic, group, COUNT)
    received = run.of("received")
    assert {line["status"] for line in received} == {"CONSUME_SUCCESS"}
    _assert_received_as_sent(sent, received, topic)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for line in received:
        per_queue[line["queueId"]].append(line["queueOffset"])
    assert len(per_queue) == 4
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_queue.values())
    assert run.of("summary")[0]["shutdownHung"] is False
    # shutdown() persisted the offsets: what the broker stores is one past the last message per queue
    rocketstore_broker.wait_committed_offsets(group, topic, {q: len(o) for q, o in per_queue.items()})


def test_cpp_push_consumer_filters_by_tag(cpp: CppClient, cpp_topic: tuple[str, Sent]) -> None:
    topic, sent = cpp_topic
    tag_a = [line for line in sent if line["tag"] == "TagA"]
    run = cpp.push_consume(topic, "CppTagGroup", len(tag_a), tags="TagA", linger_ms=1000)
    _assert_received_as_sent(tag_a, run.of("received"), topic)


def test_cpp_failing_listener_gets_messages_again_through_the_retry_topic(
        cpp: CppClient, rocketstore_broker: RocketStoreBroker) -> None:
    topic, group = "CppRetryTopic", "CppRetryGroup"
    sent = cpp.produce(topic, 6, tags=TAGS).of("sent")
    # A retry waits its back-off on the broker (level 3, 1 s with this module's table); the C++
    # client subscribes %RETRY%group at start but finds its route only after its first heartbeat
    # created it, and rebalances every 10 s: the first retries can wait for that.
    run = cpp.push_consume(topic, group, len(sent), fail_times=1, timeout_s=120)
    deliveries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in run.of("received"):
        deliveries[line["msgId"]].append(line)
    by_id = {line["msgId"]: line for line in sent}
    assert set(deliveries) == set(by_id)
    for msg_id, seen in deliveries.items():
        # The client hands the listener a whole pulled batch and, when one message fails, sends the
        # entire batch back (some messages never reach the listener before their retry): so only
        # "first seen fails, a later delivery with reconsumeTimes >= 1 succeeds" is certain.
        assert seen[0]["status"] == "RECONSUME_LATER"
        assert seen[-1]["status"] == "CONSUME_SUCCESS" and seen[-1]["reconsumeTimes"] >= 1
        times = [d["reconsumeTimes"] for d in seen]
        assert times == sorted(set(times)), times
        for d in seen:  # retries come back under the original topic, with the original content
            assert (d["topic"], d["body"], d["keys"], d["tags"]) == (
                topic, by_id[msg_id]["body"], by_id[msg_id]["key"], by_id[msg_id]["tag"])
    send_backs = [f for f in _cpp_requests(rocketstore_broker, RequestCode.CONSUMER_SEND_MSG_BACK)
                  if f.cmd.ext_fields.get("group") == group]
    assert len(send_backs) >= len(sent)
    for f in send_backs:
        response = rocketstore_broker.proxy.response_to(f)
        assert response is not None and response.code == ResponseCode.SUCCESS, response


def test_cpp_large_bodies_travel_compressed_and_come_back_whole(
        cpp: CppClient, rocketstore_broker: RocketStoreBroker) -> None:
    topic = "CppLargeTopic"
    sent = cpp.produce(topic, 3, size=LARGE).of("sent")
    assert [len(line["body"]) for line in sent] == [LARGE] * 3
    received = cpp.push_consume(topic, "CppLargeGroup", 3).of("received")
    assert sorted(line["body"] for line in received) == sorted(line["body"] for line in sent)
    sends = [f.cmd for f in _cpp_requests(rocketstore_broker, RequestCode.SEND_MESSAGE)
             if f.cmd.ext_fields.get("topic") == topic]
    assert len(sends) == 3
    assert all(int(cmd.ext_fields["sysFlag"]) & SysFlag.COMPRESSED and len(cmd.body) < LARGE // 8 for cmd in sends)


def test_cpp_wire_format_is_code_10_long_names_json_and_long_polling(
        cpp: CppClient, cpp_topic: tuple[str, Sent], rocketstore_broker: RocketStoreBroker) -> None:
    """What librocketmq put on the wire, as the proxy saw it, and the broker's answers to it."""
    topic, sent = cpp_topic
    assert len(sent) == COUNT
    proxy = rocketstore_broker.proxy
    cpp_frames = [f for f in proxy.requests() if f.cmd.language == LanguageCode.CPP]
    assert cpp_frames and {f.cmd.serialize_type for f in cpp_frames} == {SerializeType.JSON}
    assert not [f for f in cpp_frames if f.cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)]
    sends = [f for f in _cpp_requests(rocketstore_broker, RequestCode.SEND_MESSAGE)
             if f.cmd.ext_fields.get("topic") == topic]
    assert len(sends) == COUNT
    long_names = {"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
                  "bornTimestamp", "flag", "properties", "reconsumeTimes"}
    for f in sends:
        assert long_names <= set(f.cmd.ext_fields), sorted(f.cmd.ext_fields)
        assert f.cmd.ext_fields["producerGroup"] == "cpp_e2e_producer"
        assert f.cmd.ext_fields["defaultTopic"] == "TBW102"
    # librocketmq encodes a frame before invokeOneway marks it one-way, so its "one-way" sends (and
    # one-way offset updates) reach the broker as ordinary requests: the broker answers every one
    # and the client drops the answers it does not wait for.
    for f in sends:
        if f.cmd.is_oneway:
            continue
        response = proxy.response_to(f)
        assert response is not None and response.code == ResponseCode.SUCCESS
        assert response.serialize_type is SerializeType.JSON
        assert {"msgId", "queueId", "queueOffset"} <= set(response.ext_fields)
    # heartbeats: a JSON body the broker parses, naming the push consumer groups and their subscriptions
    groups: set[str] = set()
    for f in _cpp_requests(rocketstore_broker, RequestCode.HEART_BEAT):
        data = HeartbeatData.decode(f.cmd.body)
        groups.update(c.group_name for c in data.consumer_data_set)
        response = proxy.response_to(f)
        assert response is not None and response.code == ResponseCode.SUCCESS
    assert {"CppPushGroup", "CppTagGroup"} <= groups
    # the push consumer long-polls: PULL_MESSAGE with SUSPEND and a suspend timeout, answered
    pulls = [f for f in _cpp_requests(rocketstore_broker, RequestCode.PULL_MESSAGE)
             if f.cmd.ext_fields.get("consumerGroup") == "CppPushGroup"]
    assert pulls
    for f in pulls:
        assert int(f.cmd.ext_fields["sysFlag"]) & 0x2, f.cmd.ext_fields
        assert int(f.cmd.ext_fields["suspendTimeoutMillis"]) > 0
    answered = [r for f in pulls if (r := proxy.response_to(f)) is not None]
    assert {r.code for r in answered} <= {ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                         ResponseCode.PULL_RETRY_IMMEDIATELY}


def test_java_client_finds_cpp_messages_by_key_and_by_cpp_msg_id(
        cpp_topic: tuple[str, Sent], java_client_built: None, rocketstore_broker: RocketStoreBroker,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Interoperability, and the query path the 0.5.0rc2 API lacks: the index our broker built
    from the C++ client's KEYS and UNIQ_KEY properties serves the Java client's queries."""
    topic, sent = cpp_topic
    driver = java_driver(rocketstore_broker, tmp_path_factory.mktemp("java-for-cpp"))
    target = sent[5]
    by_key = driver.query(topic, key="key-5").of("found")
    assert [(m["msgId"], m["body"], m["keys"], m["tags"], m["queueOffset"]) for m in by_key] == [
        (target["msgId"], "body-5", "key-5", target["tag"], target["queueOffset"])]
    by_id = driver.query(topic, uniq_key=target["msgId"]).of("found")
    assert [(m["msgId"], m["body"]) for m in by_id] == [(target["msgId"], "body-5")]


def test_cpp_consumer_groups_can_run_side_by_side(cpp: CppClient, cpp_topic: tuple[str, Sent],
                                                  unique_name: Callable[[str], str]) -> None:
    """Two groups consuming the same topic at once each get every message (clustering per group)."""
    topic, sent = cpp_topic
    env = {**os.environ, "HOME": str(cpp.home)}
    env.pop("PYTHONPATH", None)
    procs = [subprocess.Popen([str(cpp.python), str(SCRIPTS / "cpp_push_consume.py"), cpp.namesrv, topic,
                               unique_name(f"Side{i}"), str(COUNT), "--timeout", "60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        received = [json.loads(raw) for raw in out.splitlines() if '"received"' in raw]
        _assert_received_as_sent(sent, received, topic)


def _call_broker(broker: RocketStoreBroker, code: int, ext_fields: dict[str, str]) -> RemotingCommand:
    """One request to the broker on a fresh connection (what an admin tool does)."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        sock.sendall(RemotingCommand(code=code, opaque=1, ext_fields=ext_fields).encode())
        decoder = FrameDecoder()
        while True:
            data = sock.recv(1 << 16)
            assert data, "the broker closed the connection"
            for cmd in decoder.feed(data):
                if cmd.is_response and cmd.opaque == 1:
                    return cmd


def test_admin_sees_the_cpp_consumer_as_a_clustering_push_consumer(
        cpp: CppClient, cpp_topic: tuple[str, Sent], rocketstore_broker: RocketStoreBroker) -> None:
    """librocketmq's heartbeat sends consumeType, messageModel and consumeFromWhere as enum
    ordinals (1, 1, 0); RocketMQ's broker reads them as enums, so GET_CONSUMER_CONNECTION_LIST
    (mqadmin consumerConnection, dashboards) names them. So must ours (it used to echo "1")."""
    topic, _ = cpp_topic
    group = "CppAdminGroup"
    env = {**os.environ, "HOME": str(cpp.home)}
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen([str(cpp.python), str(SCRIPTS / "cpp_push_consume.py"), cpp.namesrv, topic, group,
                             "1000000", "--timeout", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            response = _call_broker(rocketstore_broker, RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                    {"consumerGroup": group})
            if response.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.communicate()
    assert response.code == ResponseCode.SUCCESS, response.remark
    body = json.loads(response.body)
    assert (body["consumeType"], body["messageModel"], body["consumeFromWhere"]) == (
        "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET")
    assert [(c["language"], c["version"]) for c in body["connectionSet"]] == [("CPP", 63)]
    assert set(body["subscriptionTable"]) == {topic, f"%RETRY%{group}"}
