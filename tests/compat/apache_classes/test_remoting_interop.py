"""Remoting frames and JSON bodies against RocketMQ 4.9.8's own classes, both directions.

The Java side is RemotingDriver.java, built into the same jar as StoreDriver (conftest's
``rocketmq_driver`` fixture builds it; only the main class differs). It encodes commands with
RocketMQ's RemotingCommand exactly as NettyEncoder puts them on the socket, decodes frames with
RemotingCommand.decode (and send headers the way the broker does), and decodes JSON bodies with
RemotingSerializable into RocketMQ's classes, answering fastjson's re-encoding.

* Java encodes, we decode: every field equal to what Java itself decodes from the same bytes, the
  typed send/response/offset headers read back, and our re-encoding is byte-identical to Java's.
* We encode, Java decodes: every field equal, and the broker's V2 -> V1 send header conversion
  gives our header's values.
* Bodies: Java decodes our TopicRouteData (``brokerAddrs`` with bare integer keys into
  ``HashMap<Long, String>``), ClusterInfo, HeartbeatData and lock bodies, and fastjson writes them
  back as exactly our bytes.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore.remoting.body import (
    BrokerData,
    ClusterInfo,
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueueData,
    ProducerData,
    QueueData,
    SubscriptionData,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from rocketstore.remoting.body_codec import JsonBody
from rocketstore.remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rocketstore.remoting.command import DEFAULT_VERSION, RPC_ONEWAY, FrameDecoder, RemotingCommand
from rocketstore.remoting.headers import (
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)

pytestmark = pytest.mark.integration

REMOTING_MAIN = "io.rocketstore.interop.RemotingDriver"
TIMEOUT_S = 120

RemotingRunner = Callable[[str, str], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def remoting_driver(rocketmq_driver: list[str], java_home_dir: Path) -> RemotingRunner:
    """Run one RemotingDriver mode with ``stdin``; returns its JSON lines."""
    java, *options, _store_main = rocketmq_driver

    def run(mode: str, stdin: str = "") -> list[dict[str, Any]]:
        cmd = [java, f"-Duser.home={java_home_dir}", *options, REMOTING_MAIN, mode]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        if proc.returncode != 0:
            pytest.fail(f"RemotingDriver {mode} exited {proc.returncode}:\n{proc.stderr[-6000:]}", pytrace=False)
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    return run


def java_decode(run: RemotingRunner, frames: list[bytes]) -> list[dict[str, Any]]:
    lines = run("decode", "".join(f.hex() + "\n" for f in frames))
    assert [line["kind"] for line in lines] == ["decoded"] * len(frames)
    return lines


def ours_as_java_sees_it(cmd: RemotingCommand) -> dict[str, Any]:
    return {
        "code": cmd.code,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "language": LanguageCode(cmd.language).name,
        "version": cmd.version,
        "remark": cmd.remark,
        "serializeType": SerializeType(cmd.serialize_type).name,
        "extFields": dict(sorted(cmd.ext_fields.items())),
        "body": cmd.body.hex(),
    }


SEND_HEADER = SendMessageRequestHeader(
    producer_group="InteropProducer", topic="InteropTopic", default_topic="TBW102", default_topic_queue_nums=4,
    queue_id=3, sys_flag=0, born_timestamp=1700000000123, flag=0,
    properties="KEYS\x01k1\x02TAGS\x01tagA\x02UNIQ_KEY\x01ABCDEF\x02", reconsume_times=0, unit_mode=False,
    batch=False, max_reconsume_times=16,
)


# -- Java encodes, we decode ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def java_frames(remoting_driver: RemotingRunner) -> dict[str, bytes]:
    lines = remoting_driver("encode", "")
    frames = {line["name"]: bytes.fromhex(line["hex"]) for line in lines if line["kind"] == "frame"}
    assert len(frames) == 8, sorted(frames)
    return frames


def test_we_decode_what_java_decodes(java_frames: dict[str, bytes], remoting_driver: RemotingRunner) -> None:
    names = sorted(java_frames)
    java_view = java_decode(remoting_driver, [java_frames[n] for n in names])
    for name, expected in zip(names, java_view, strict=True):
        decoder = FrameDecoder()
        (cmd,) = decoder.feed(java_frames[name])
        assert decoder.buffered == 0
        got = ours_as_java_sees_it(cmd)
        assert got == {k: expected.get(k) for k in got}, name  # fastjson leaves nulls out


def test_java_frames_carry_the_typed_headers(java_frames: dict[str, bytes]) -> None:
    for serialize_type in SerializeType:
        t = serialize_type.name
        (v2,) = FrameDecoder().feed(java_frames[f"send-v2-{t}"])
        assert v2.code == RequestCode.SEND_MESSAGE_V2 and v2.serialize_type is serialize_type
        assert v2.language == LanguageCode.JAVA and v2.version == DEFAULT_VERSION  # MQVersion.CURRENT_VERSION
        assert SendMessageRequestHeader.from_v2_ext_fields(v2.ext_fields) == SEND_HEADER
        assert v2.body == b"hello from java"

        (v1,) = FrameDecoder().feed(java_frames[f"send-v1-{t}"])
        assert SendMessageRequestHeader.from_ext_fields(v1.ext_fields) == SEND_HEADER
        assert v1.body == b"\x00\x01\x02\xff"

        (response,) = FrameDecoder().feed(java_frames[f"send-response-{t}"])
        assert response.is_response and response.code == ResponseCode.SUCCESS and response.opaque == 12345
        assert response.remark == "stored, ünïcödé remark" and response.body == b""
        assert SendMessageResponseHeader.from_ext_fields(response.ext_fields) == SendMessageResponseHeader(
            msg_id="7F00000100002A9F0000000000000000", queue_id=3, queue_offset=41)

        (oneway,) = FrameDecoder().feed(java_frames[f"oneway-{t}"])
        assert oneway.is_oneway and not oneway.is_response and oneway.flag == RPC_ONEWAY
        assert UpdateConsumerOffsetRequestHeader.from_ext_fields(oneway.ext_fields) == \
            UpdateConsumerOffsetRequestHeader(consumer_group="InteropGroup", topic="InteropTopic", queue_id=1,
                                              commit_offset=99)


def test_our_reencoding_is_byte_identical(java_frames: dict[str, bytes]) -> None:
    for name, data in java_frames.items():
        (cmd,) = FrameDecoder().feed(data)
        assert cmd.encode() == data, name


def test_several_java_frames_in_one_stream(java_frames: dict[str, bytes]) -> None:
    stream = b"".join(java_frames.values())
    decoder = FrameDecoder()
    got = decoder.feed(stream[:100]) + decoder.feed(stream[100:])
    assert [c.encode() for c in got] == list(java_frames.values())


# -- we encode, Java decodes ---------------------------------------------------------------------


def our_commands() -> list[RemotingCommand]:
    cmds = []
    for st in SerializeType:
        cmds += [
            RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=1, ext_fields=SEND_HEADER.to_v2_ext_fields(),
                            body=b"payload \x00\xff", serialize_type=st),
            RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=2, ext_fields=SEND_HEADER.to_ext_fields(),
                            body=b"v1", language=LanguageCode.CPP, serialize_type=st),
            RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=3, serialize_type=st).response(
                ResponseCode.PULL_NOT_FOUND, remark="没有消息 / no message", ext_fields={
                    "suggestWhichBrokerId": "0", "nextBeginOffset": "7", "minOffset": "0", "maxOffset": "7"}),
            RemotingCommand(code=RequestCode.UPDATE_CONSUMER_OFFSET, opaque=-4, flag=RPC_ONEWAY,
                            language=LanguageCode.GO, version=317, serialize_type=st,
                            ext_fields={"consumerGroup": "g", "topic": "t", "queueId": "0", "commitOffset": "5"}),
            RemotingCommand(code=RequestCode.HEART_BEAT, opaque=2**31 - 1, serialize_type=st,
                            body=HeartbeatData(client_id="c").encode()),
        ]
    return cmds


def test_java_decodes_our_frames(remoting_driver: RemotingRunner) -> None:
    cmds = our_commands()
    java_view = java_decode(remoting_driver, [c.encode() for c in cmds])
    for cmd, seen in zip(cmds, java_view, strict=True):
        expected = ours_as_java_sees_it(cmd)
        assert {k: seen.get(k) for k in expected} == expected, cmd  # fastjson leaves nulls out
        if cmd.code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            assert seen["sendHeader"] == {
                "producerGroup": "InteropProducer", "topic": "InteropTopic", "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4, "queueId": 3, "sysFlag": 0, "bornTimestamp": 1700000000123, "flag": 0,
                "properties": SEND_HEADER.properties, "reconsumeTimes": 0, "unitMode": False, "batch": False,
                "maxReconsumeTimes": 16,
            }  # bname is null on both sides, and fastjson leaves it out


# -- JSON bodies ---------------------------------------------------------------------------------

MQ = MessageQueueData(topic="T", broker_name="broker-a", queue_id=2)
BODIES: list[JsonBody] = [
    TopicRouteData(
        queue_datas=[QueueData(broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6)],
        broker_datas=[BrokerData(cluster="DefaultCluster", broker_name="broker-a",
                                 broker_addrs={0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})],
    ),
    ClusterInfo(
        broker_addr_table={"broker-a": BrokerData(cluster="C", broker_name="broker-a", broker_addrs={0: "h:1"})},
        cluster_addr_table={"C": ["broker-a"]},
    ),
    HeartbeatData(
        client_id="10.0.0.5@4242",
        producer_data_set=[ProducerData(group_name="PG")],
        consumer_data_set=[ConsumerData(
            group_name="CG", consume_type="CONSUME_PASSIVELY", message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            subscription_data_set=[SubscriptionData(topic="T", sub_string="tagA", tags_set=["tagA"],
                                                    code_set=[3552155], sub_version=1700000000000)],
        )],
    ),
    LockBatchRequestBody(consumer_group="CG", client_id="c1", mq_set=[MQ]),
    UnlockBatchRequestBody(consumer_group="CG", client_id="c1", mq_set=[MQ]),
    LockBatchResponseBody(lock_ok_mq_set=[MQ]),
    GetConsumerListByGroupResponseBody(consumer_id_list=["c1", "c2"]),
]


def test_java_decodes_our_bodies_and_writes_the_same_bytes(remoting_driver: RemotingRunner) -> None:
    stdin = "".join(f"{type(b).__name__} {b.encode().hex()}\n" for b in BODIES)
    lines = remoting_driver("body", stdin)
    assert [line["class"] for line in lines] == [type(b).__name__ for b in BODIES]
    for body, line in zip(BODIES, lines, strict=True):
        assert line["json"].encode() == body.encode(), type(body).__name__
        assert type(body).decode(line["json"].encode()) == body
    route = lines[0]
    assert b'"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}' in BODIES[0].encode()
    # HashMap<Long, String>.get(0L) finds the master: Java read our bare keys as numbers.
    assert route["masters"] == {"broker-a": "10.0.0.1:10911"}
