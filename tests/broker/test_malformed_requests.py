"""Malformed requests against a real broker process: a header field missing or unparsable is the
client's error. It is answered SYSTEM_ERROR with a remark naming the field, the connection stays
usable, and the broker's log gets no traceback and at most a line now and then however many
such requests arrive (any client can send them at will).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_process import Broker
from inprocess_broker import RawClient

from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand

pytestmark = pytest.mark.integration  # a broker process

TOPIC = "Malformed"
PULL_FIELDS = {
    "consumerGroup": "CG", "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
    "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
}
FLOOD = 1000


def test_malformed_headers_are_answered_and_logged_sparingly(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.start()
    client = RawClient("127.0.0.1", broker.listen_port)
    try:
        assert client.send_message(TOPIC, b"body").code == ResponseCode.SUCCESS

        missing = {k: v for k, v in PULL_FIELDS.items() if k != "queueId"}
        response = client.call(RequestCode.PULL_MESSAGE, missing)
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == "PULL_MESSAGE header field 'queueId' is missing"

        response = client.call(RequestCode.PULL_MESSAGE, {**PULL_FIELDS, "queueOffset": "soon"})
        assert response.code == ResponseCode.SYSTEM_ERROR
        assert response.remark == "PULL_MESSAGE header field 'queueOffset' must be a long integer, got 'soon'"

        response = client.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CG", "topic": TOPIC,
                                                                   "queueId": "9" * 40})
        assert response.code == ResponseCode.SYSTEM_ERROR and "'queueId' must be an integer" in (response.remark or "")

        # A remark quotes what the client sent, but only so much of it.
        response = client.call(RequestCode.PULL_MESSAGE, {**PULL_FIELDS, "queueOffset": "x" * 100_000})
        assert response.code == ResponseCode.SYSTEM_ERROR and (response.remark or "").endswith("...")
        assert "'queueOffset' must be a long integer" in (response.remark or "") and len(response.remark or "") <= 300

        # The same connection still serves well-formed requests.
        client.wait_dispatched(TOPIC, 0, 1)
        assert client.pull(TOPIC, 0, 0, sys_flag=0).code == ResponseCode.SUCCESS

        opaques = [client.send(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=missing))
                   for _ in range(FLOOD)]
        assert all(client.receive(opaque).code == ResponseCode.SYSTEM_ERROR for opaque in opaques)
        assert client.pull(TOPIC, 0, 0, sys_flag=0).code == ResponseCode.SUCCESS
    finally:
        client.close()
        broker.stop()
    (log_file,) = tmp_path.glob("broker-*.log")  # the broker's stderr
    log = log_file.read_text()
    assert "Traceback" not in log and "failed" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "malformed request" in line]
    assert 1 <= len(lines) <= 3, lines
    assert "'queueId' is missing" in lines[0]
