"""Request-reply over raw sockets: SEND_REPLY_MESSAGE (324) / _V2 (325) pushed to the requester with
PUSH_REPLY_MESSAGE_TO_CLIENT (326) and stored in ``{cluster}_REPLY_TOPIC`` (RocketMQ 4.9.8's
ReplyMessageProcessor).

The requester is a raw client that heartbeats as a producer (which is how the broker learns which
connection a client id is on) and answers the broker's push itself; the responder is another raw
client. What is checked: the pushed frame's header and properties, the response to the
responder, the record stored in the reply topic (read back with a pull), what the broker answers
when the requester is unknown, refuses or hangs up, and the /metrics counters.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.common.message import StoredMessage, properties_to_string, string_to_properties
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import SendMessageRequestHeader

pytestmark = pytest.mark.integration

REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"  # the test broker's cluster is BrokerConfig's default
REQUESTER_ID = "127.0.0.1@requester#1"


class Requester(RawClient):
    """A producer client that receives the broker's pushes (requests the broker sends it)."""

    def heartbeat(self, client_id: str = REQUESTER_ID) -> None:
        body = {"clientID": client_id, "producerDataSet": [{"groupName": "RequesterPG"}], "consumerDataSet": []}
        assert self.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode()).code == ResponseCode.SUCCESS

    def next_push(self, timeout: float = 10.0) -> RemotingCommand:
        """The next request the broker sends on this connection."""
        deadline = time.monotonic() + timeout
        while True:
            for opaque, cmd in list(self.pending.items()):
                if not cmd.is_response:
                    return self.pending.pop(opaque)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the broker pushed nothing")
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("broker closed the connection")
            for cmd in self.decoder.feed(data):
                self.pending[cmd.opaque] = cmd

    def answer(self, push: RemotingCommand, code: int, remark: str | None = None) -> None:
        self.sock.sendall(push.response(code, remark).encode())


def _reply_header(properties: dict[str, str], **overrides: object) -> SendMessageRequestHeader:
    fields: dict[str, object] = dict(
        producer_group="ResponderPG", topic=REPLY_TOPIC, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=0, sys_flag=0, born_timestamp=1_700_000_000_123, flag=7,
        properties=properties_to_string(properties), reconsume_times=0,
    )
    fields.update(overrides)
    return SendMessageRequestHeader(**fields)  # type: ignore[arg-type]


def _reply_properties(reply_to: str | None = REQUESTER_ID) -> dict[str, str]:
    """What MessageUtil.createReplyMessage puts on a reply (plus the client's unique id)."""
    props = {"MSG_TYPE": "reply", "CORRELATION_ID": "corr-42", "TTL": "3000",
             "UNIQ_KEY": "AC11000100002A9F0000000000000001"}
    if reply_to is not None:
        props["REPLY_TO_CLIENT"] = reply_to
    return props


def _send_reply_async(responder: RawClient, header: SendMessageRequestHeader, body: bytes, *,
                      v2: bool = True) -> Future[RemotingCommand]:
    """Send the reply from a thread: its response comes only after the requester answered the push."""
    future: Future[RemotingCommand] = Future()

    def run() -> None:
        try:
            if v2:
                future.set_result(responder.call(RequestCode.SEND_REPLY_MESSAGE_V2, header.to_v2_ext_fields(), body,
                                                 timeout=20))
            else:
                future.set_result(responder.call(RequestCode.SEND_REPLY_MESSAGE, header.to_ext_fields(), body,
                                                 timeout=20))
        except BaseException as exc:  # handed to the test thread
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


def _metric(broker: BrokerHandle, name: str) -> float:
    assert broker.controller.http is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.controller.http.port}/metrics", timeout=10) as resp:
        found = re.search(rf"^{name} (\S+)$", resp.read().decode(), re.MULTILINE)
    assert found is not None, f"{name} missing from /metrics"
    return float(found.group(1))


def _stored_replies(broker: BrokerHandle, client: RawClient) -> list[StoredMessage]:
    broker.wait_dispatched()
    reply = client.pull(REPLY_TOPIC, 0, 0)
    if reply.code != ResponseCode.SUCCESS:
        return []
    return decode_records(reply.body)


def test_reply_v2_is_pushed_to_the_requester_and_stored_as_sent(broker: BrokerHandle) -> None:
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    responder = broker.client()
    props = _reply_properties()
    header = _reply_header(props)
    before_ms = int(time.time() * 1000)
    answered = _send_reply_async(responder, header, b"the answer")

    push = requester.next_push()
    assert push.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT
    assert not push.is_oneway  # the broker waits for the requester's answer
    fields = push.ext_fields
    assert fields["topic"] == REPLY_TOPIC and fields["producerGroup"] == "ResponderPG"
    assert fields["queueId"] == "0" and fields["flag"] == "7" and fields["sysFlag"] == "0"
    assert fields["bornTimestamp"] == "1700000000123" and fields["reconsumeTimes"] == "0"
    assert fields["defaultTopic"] == "TBW102" and fields["defaultTopicQueueNums"] == "4"
    assert fields["unitMode"] == "false"
    assert fields["storeHost"] == f"127.0.0.1:{broker.port}"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", fields["bornHost"])
    assert before_ms <= int(fields["storeTimestamp"]) <= int(time.time() * 1000)
    pushed_props = string_to_properties(fields["properties"])
    push_time = int(pushed_props.pop("PUSH_REPLY_TIME"))
    assert before_ms <= push_time <= int(time.time() * 1000)
    assert pushed_props == props
    assert push.body == b"the answer"
    assert not answered.done(), "the responder was answered before the requester took the reply"
    requester.answer(push, ResponseCode.SUCCESS)

    response = answered.result(10)
    assert response.code == ResponseCode.SUCCESS, response.remark
    assert response.ext_fields["queueId"] == "0" and response.ext_fields["queueOffset"] == "0"
    stored = _stored_replies(broker, responder)
    assert len(stored) == 1
    record = stored[0]
    assert response.ext_fields["msgId"] == record.msg_id  # the put's offset message id, not "0"
    assert record.topic == REPLY_TOPIC and record.body == b"the answer" and record.flag == 7
    assert record.born_timestamp == 1_700_000_000_123
    # stored with the client's properties only: no CLUSTER (a send adds it), no PUSH_REPLY_TIME
    assert record.properties == props
    assert _metric(broker, "rocketstore_reply_messages_pushed") == 1
    assert _metric(broker, "rocketstore_reply_messages_without_requester") == 0


def test_reply_with_long_header_names_code_324(broker: BrokerHandle) -> None:
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    answered = _send_reply_async(broker.client(), _reply_header(_reply_properties()), b"v1", v2=False)
    push = requester.next_push()
    assert push.ext_fields["topic"] == REPLY_TOPIC and push.body == b"v1"
    requester.answer(push, ResponseCode.SUCCESS)
    assert answered.result(10).code == ResponseCode.SUCCESS


def test_reply_to_a_requester_that_is_gone_answers_system_error_and_is_still_stored(
        broker: BrokerHandle) -> None:
    responder = broker.client()
    gone = _reply_properties("10.9.9.9@gone")
    response = responder.call(RequestCode.SEND_REPLY_MESSAGE_V2, _reply_header(gone).to_v2_ext_fields(), b"late")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "push reply message fail, channel of <10.9.9.9@gone> not found."
    no_reply_to = _reply_properties(None)
    response = responder.call(RequestCode.SEND_REPLY_MESSAGE_V2, _reply_header(no_reply_to).to_v2_ext_fields(),
                              b"orphan")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "reply message properties[REPLY_TO_CLIENT] is null"
    # storeReplyMessageEnable (default true): RocketMQ stores the reply whatever the push did
    assert [r.body for r in _stored_replies(broker, responder)] == [b"late", b"orphan"]
    assert _metric(broker, "rocketstore_reply_messages_without_requester") == 2
    assert _metric(broker, "rocketstore_reply_messages_pushed") == 0


def test_requester_that_refuses_or_hangs_up_fails_the_reply(broker: BrokerHandle) -> None:
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    responder = broker.client()
    answered = _send_reply_async(responder, _reply_header(_reply_properties()), b"refused")
    requester.answer(requester.next_push(), ResponseCode.SYSTEM_ERROR, "process reply message fail")
    response = answered.result(10)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == f"push reply message to {REQUESTER_ID}fail."

    answered = _send_reply_async(responder, _reply_header(_reply_properties()), b"hung up")
    requester.next_push()
    requester.close()  # gone while the broker waits for its answer: no 10 s wait
    response = answered.result(5)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert _metric(broker, "rocketstore_reply_messages_push_failed") == 2


def test_store_reply_message_disabled_pushes_without_storing(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(store_reply_message_enable=False)
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    responder = broker.client()
    answered = _send_reply_async(responder, _reply_header(_reply_properties()), b"not kept")
    requester.answer(requester.next_push(), ResponseCode.SUCCESS)
    response = answered.result(10)
    assert response.code == ResponseCode.SUCCESS
    assert response.ext_fields["msgId"] == "0"  # what RocketMQ answers when nothing was stored
    assert _stored_replies(broker, responder) == []
    assert broker.store.get_max_offset_in_queue(REPLY_TOPIC, 0) == 0


def test_reply_to_a_topic_that_does_not_exist_is_refused_before_any_push(broker: BrokerHandle) -> None:
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    header = _reply_header(_reply_properties(), topic="No_Such_REPLY_TOPIC", default_topic="No_Such_Default")
    response = broker.client().call(RequestCode.SEND_REPLY_MESSAGE_V2, header.to_v2_ext_fields(), b"x")
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert not requester.pending


def test_requester_that_never_answers_times_out_and_its_late_answer_is_dropped(
        broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    import rocketstore.broker.processor.reply as reply_module

    monkeypatch.setattr(reply_module, "PUSH_REPLY_TIMEOUT_S", 0.5)  # RocketMQ waits 10 s
    requester = Requester("127.0.0.1", broker.port)
    broker.clients.append(requester)
    requester.heartbeat()
    began = time.monotonic()
    answered = _send_reply_async(broker.client(), _reply_header(_reply_properties()), b"too slow")
    push = requester.next_push()
    response = answered.result(10)
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == f"push reply message to {REQUESTER_ID}fail."
    assert 0.4 <= time.monotonic() - began < 5
    requester.answer(push, ResponseCode.SUCCESS)  # too late: dropped, the connection keeps working
    requester.heartbeat()
    assert _metric(broker, "rocketstore_reply_messages_push_failed") == 1
    assert _metric(broker, "rocketstore_reply_messages_pushed") == 0


def test_malformed_reply_header_is_answered_with_an_error_naming_the_field(broker: BrokerHandle) -> None:
    client = broker.client()
    fields = _reply_header(_reply_properties()).to_v2_ext_fields()
    del fields["b"]  # the topic
    response = client.call(RequestCode.SEND_REPLY_MESSAGE_V2, fields, b"x")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert response.remark == "SEND_MESSAGE_V2 header field 'b' is missing"
    fields = _reply_header(_reply_properties()).to_ext_fields()
    fields["queueId"] = "not a number"
    response = client.call(RequestCode.SEND_REPLY_MESSAGE, fields, b"x")
    assert response.code == ResponseCode.SYSTEM_ERROR and "queueId" in (response.remark or "")
    # the connection and the broker carry on
    assert client.call(RequestCode.SEND_REPLY_MESSAGE_V2, _reply_header(_reply_properties("x@gone")).to_v2_ext_fields(),
                       b"ok").remark == "push reply message fail, channel of <x@gone> not found."
