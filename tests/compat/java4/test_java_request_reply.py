"""Request-reply with the real RocketMQ 4.9.8 Java client against our broker.

The requester is ``DefaultMQProducer.request()`` (sync, and async with a RequestCallback), the
responder a ``DefaultMQPushConsumer`` that answers each request with
``MessageUtil.createReplyMessage`` sent by a producer (the driver modes ``request`` and ``respond``
of tests/support/drivers/java4, RequestReplyModes.java). Every request must come back with its own reply;
the recording proxy shows the responder's SEND_REPLY_MESSAGE_V2 and the broker's
PUSH_REPLY_MESSAGE_TO_CLIENT to the requester, answered SUCCESS; the replies are stored in
``E2ECluster_REPLY_TOPIC``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from recording_broker import RocketStoreBroker, java_driver

from rocketstore.client.consumer import PullConsumer, PullStatus
from rocketstore.common.message import string_to_properties
from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

COUNT = 5
REPLY_TOPIC = "E2ECluster_REPLY_TOPIC"  # conftest's broker runs cluster E2ECluster


def _stored_reply_bodies(broker: RocketStoreBroker) -> list[bytes]:
    with PullConsumer(broker.namesrv, "reply_topic_reader") as reader:
        bodies: list[bytes] = []
        for mq in reader.queues(REPLY_TOPIC):
            offset = 0
            while True:
                result = reader.pull(mq, offset)
                if result.status is not PullStatus.FOUND:
                    break
                bodies += [m.body for m in result.messages]
                offset = result.next_begin_offset
        return bodies


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_java_request_gets_the_reply_of_a_java_responder(
        mode: str, java_client_built: None, rocketstore_broker: RocketStoreBroker, tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    driver = java_driver(rocketstore_broker, tmp_path)
    topic, group = unique_name("Rpc"), unique_name("Responder")
    frames_before = len(rocketstore_broker.proxy.frames)
    stored_before = Counter(_stored_reply_bodies(rocketstore_broker))
    responder = driver.start("respond", "-t", topic, "-g", group, "-c", COUNT, "--linger", 500)
    responder.wait_started()
    requested = driver.run("request", "-t", topic, "-c", COUNT, "--mode", mode, "--ttl", 20000)
    responded = responder.wait()

    assert requested.summary["replied"] == COUNT, requested.errors
    replies = requested.of("replied")
    assert sorted(r["request"] for r in replies) == sorted(f"req-{i}" for i in range(COUNT))
    for reply in replies:
        assert reply["body"] == "reply-" + reply["request"]
        assert reply["correlationId"] == reply["requestCorrelationId"] is not None
        assert reply["replyTo"] == reply["requestReplyTo"] is not None
        assert reply["msgType"] == "reply" and reply["topic"] == REPLY_TOPIC
        assert reply["pushReplyTime"] is not None  # set by the broker when it pushed
        assert reply["storeHost"].endswith(f":{rocketstore_broker.port}")
    # the responder saw CLUSTER on each request (added by the broker's send) and replied with SEND_OK
    lines = responded.of("responded")
    assert len(lines) >= COUNT and all(r["cluster"] == "E2ECluster" for r in lines)
    assert all(r["sendStatus"] == "SEND_OK" and r["replyTopic"] == REPLY_TOPIC for r in lines)

    frames = list(rocketstore_broker.proxy.frames)[frames_before:]
    sent = [f for f in frames if f.outbound and not f.cmd.is_response
            and f.cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2]
    assert len(sent) >= COUNT
    pushes = [f for f in frames if not f.outbound and not f.cmd.is_response
              and f.cmd.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT]
    assert len(pushes) >= COUNT
    correlation_ids = {r["correlationId"] for r in replies}
    pushed_ids = {string_to_properties(p.cmd.ext_fields["properties"]).get("CORRELATION_ID") for p in pushes}
    assert correlation_ids <= pushed_ids
    for push in pushes:
        answers = [f.cmd for f in frames if f.conn == push.conn and f.outbound and f.cmd.is_response
                   and f.cmd.opaque == push.cmd.opaque]
        assert [a.code for a in answers] == [ResponseCode.SUCCESS]
    for frame in sent:
        answers = [f.cmd for f in frames if f.conn == frame.conn and not f.outbound and f.cmd.is_response
                   and f.cmd.opaque == frame.cmd.opaque]
        assert [a.code for a in answers] == [ResponseCode.SUCCESS]

    stored = Counter(_stored_reply_bodies(rocketstore_broker)) - stored_before
    assert {f"reply-req-{i}".encode() for i in range(COUNT)} <= set(stored)
