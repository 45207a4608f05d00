"""The broker's request path against real broker processes, on both event loops.

* Which hot path (native or pure Python) and which event loop (uvloop or asyncio) run is logged at
  start-up and exported on /metrics as ``rocketstore_hot_path_info``; ``ROCKETSTORE_NATIVE=0``
  and ``ROCKETSTORE_UVLOOP=0`` switch them.
* Many requests pipelined in one write on one connection are all answered: those answered inline
  (ASYNC_FLUSH sends, offsets, heartbeats, pulls that find messages, errors) and those that wait
  (SYNC_FLUSH sends, a held pull), one-way requests included, in the order that inline handling
  keeps (an offset updated then queried in the same read reads back the update).

How responses to one read are coalesced into one write is observed in test_connection_protocol.py,
where the transport can count writes; over a real socket TCP may split or merge them at will.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from importlib.util import find_spec
from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import RawClient, decode_records

from rocketstore.common import native
from rocketstore.common.message import properties_to_string
from rocketstore.remoting.body import HeartbeatData, ProducerData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RPC_ONEWAY, RemotingCommand
from rocketstore.remoting.headers import PullSysFlag, SendMessageRequestHeader

pytestmark = pytest.mark.integration  # broker processes

TOPIC = "Pipelined"
SENDS = 50
LOOPS = ("uvloop", "asyncio")
_INFO = re.compile(r"^rocketstore_hot_path_info\{(?P<labels>[^}]*)\} 1\.0$", re.MULTILINE)


def _loop_env(loop: str) -> dict[str, str]:
    if loop == "uvloop" and find_spec("uvloop") is None:
        pytest.fail("uvloop is a dependency of the broker on Linux but is not installed")
    return {"ROCKETSTORE_UVLOOP": "1" if loop == "uvloop" else "0"}


def _hot_path_info(broker: Broker) -> dict[str, str]:
    found = _INFO.search(broker.metrics())
    assert found is not None, "rocketstore_hot_path_info missing from /metrics"
    return dict(re.findall(r'(\w+)="([^"]*)"', found.group("labels")))


@pytest.mark.parametrize(("env", "implementation", "loop"), [
    ({}, native.IMPLEMENTATION, "uvloop"),  # the test process and the broker see the same extension
    ({"ROCKETSTORE_NATIVE": "0"}, "python", "asyncio"),
], ids=["default", "pure-python-asyncio"])
def test_log_and_metrics_name_the_hot_path_and_the_event_loop(tmp_path: Path, env: dict[str, str],
                                                              implementation: str, loop: str) -> None:
    broker = Broker(tmp_path, env={**env, **_loop_env(loop)})
    broker.start()
    try:
        assert _hot_path_info(broker) == {"implementation": implementation, "event_loop": loop}
    finally:
        broker.stop()
    assert f"hot path: {implementation} (" in broker.log_text()
    assert f"event loop: {loop}" in broker.log_text()


def _frame(code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"", *, opaque: int,
           flag: int = 0) -> bytes:
    return RemotingCommand(code=code, opaque=opaque, flag=flag, ext_fields=ext_fields or {}, body=body).encode()


def _send_fields() -> dict[str, str]:
    header = SendMessageRequestHeader(
        producer_group="PG", topic=TOPIC, default_topic="TBW102", default_topic_queue_nums=4, queue_id=0,
        sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0, properties=properties_to_string({"TAGS": "A"}))
    return header.to_v2_ext_fields()


def _offset_fields(offset: int | None = None) -> dict[str, str]:
    fields = {"consumerGroup": "CG", "topic": TOPIC, "queueId": "1"}
    return fields if offset is None else {**fields, "commitOffset": str(offset)}


def _pull_fields(queue_id: int, sys_flag: int, suspend_ms: int) -> dict[str, str]:
    return {"consumerGroup": "CG", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": str(sys_flag), "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
            "subscription": "*", "subVersion": "0", "expressionType": "TAG"}


def _heartbeat_body() -> bytes:
    """A producer's heartbeat (a consumer's would make the broker send NOTIFY_CONSUMER_IDS_CHANGED
    requests, whose opaques RawClient would mistake for responses)."""
    return HeartbeatData(client_id="pipelined@1", producer_data_set=[ProducerData(group_name="PG")]).encode()


def _max_offset(client: RawClient) -> int:
    response = client.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
    assert response.code == ResponseCode.SUCCESS
    return int(response.ext_fields["offset"])


def _receive_all(client: RawClient, opaques: Iterable[int]) -> dict[int, RemotingCommand]:
    return {opaque: client.receive(opaque, timeout=20) for opaque in opaques}


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_requests_on_one_connection_are_all_answered(tmp_path: Path, loop: str, flush: str) -> None:
    broker = Broker(tmp_path, flush_disk_type=flush, env=_loop_env(loop))
    broker.start()
    client = RawClient("127.0.0.1", broker.listen_port)
    try:
        send = _send_fields()
        last = SENDS + 8
        wire = b"".join(_frame(RequestCode.SEND_MESSAGE_V2, send, b"m%d" % n, opaque=n) for n in range(1, SENDS + 1))
        wire += b"".join([
            _frame(RequestCode.UPDATE_CONSUMER_OFFSET, _offset_fields(7), opaque=SENDS + 1),
            _frame(RequestCode.QUERY_CONSUMER_OFFSET, _offset_fields(), opaque=SENDS + 2),
            _frame(RequestCode.UPDATE_CONSUMER_OFFSET, _offset_fields(9), opaque=SENDS + 3, flag=RPC_ONEWAY),
            _frame(RequestCode.QUERY_CONSUMER_OFFSET, _offset_fields(), opaque=SENDS + 4),
            _frame(RequestCode.HEART_BEAT, body=_heartbeat_body(), opaque=SENDS + 5),
            _frame(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC}, opaque=SENDS + 6),  # queueId missing
            _frame(9999, opaque=SENDS + 7),
            # queue 3 stays empty: held until its suspend time runs out, then answered
            _frame(RequestCode.PULL_MESSAGE, _pull_fields(3, PullSysFlag.SUSPEND, 300), opaque=last),
        ])
        client.sock.sendall(wire)  # one write: the broker reads it in as few reads as the kernel hands over
        answers = _receive_all(client, (n for n in range(1, last + 1) if n != SENDS + 3))

        sends = [answers[n] for n in range(1, SENDS + 1)]
        assert {r.code for r in sends} == {ResponseCode.SUCCESS}
        offsets = [int(r.ext_fields["queueOffset"]) for r in sends]
        if flush == "ASYNC_FLUSH":  # stored inline, in request order
            assert offsets == list(range(SENDS))
        else:  # each put waits for its flush in a worker thread: any order
            assert sorted(offsets) == list(range(SENDS))
        assert answers[SENDS + 1].code == ResponseCode.SUCCESS
        assert (answers[SENDS + 2].code, answers[SENDS + 2].ext_fields["offset"]) == (ResponseCode.SUCCESS, "7")
        assert SENDS + 3 not in client.pending  # one-way: not answered, but applied before the next query
        assert (answers[SENDS + 4].code, answers[SENDS + 4].ext_fields["offset"]) == (ResponseCode.SUCCESS, "9")
        assert answers[SENDS + 5].code == ResponseCode.SUCCESS
        assert (answers[SENDS + 6].code, answers[SENDS + 6].remark) == (
            ResponseCode.SYSTEM_ERROR, "GET_MAX_OFFSET header field 'queueId' is missing")
        assert answers[SENDS + 7].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert answers[last].code == ResponseCode.PULL_NOT_FOUND

        deadline = time.monotonic() + 10
        while _max_offset(client) != SENDS:
            assert time.monotonic() < deadline, "the sends were not dispatched"
            time.sleep(0.01)
        pulls = range(1000, 1020)
        client.sock.sendall(b"".join(_frame(RequestCode.PULL_MESSAGE, _pull_fields(0, 0, 0), opaque=n)
                                     for n in pulls))
        stored = [b"m%d" % n for _, n in sorted(zip(offsets, range(1, SENDS + 1), strict=True))]  # in queue order
        for response in _receive_all(client, pulls).values():
            assert response.code == ResponseCode.SUCCESS
            assert [m.body for m in decode_records(response.body)] == stored[:32]
    finally:
        client.close()
        broker.stop()
    assert f"event loop: {loop}" in broker.log_text() and "Traceback" not in broker.log_text()
