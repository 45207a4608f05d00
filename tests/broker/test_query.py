"""VIEW_MESSAGE_BY_ID and QUERY_MESSAGE against a real broker."""

from __future__ import annotations

import time

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.common.message import decode_message_id
from rocketstore.remoting.codes import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


def test_view_message_by_id_returns_the_raw_record(broker: BrokerHandle, client: RawClient) -> None:
    client.send_message("TopicView", b"first")
    resp = client.send_message("TopicView", b"second", properties={"KEYS": "kv"})
    broker.wait_dispatched()
    _, offset = decode_message_id(resp.ext_fields["msgId"])
    view = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
    assert view.code == ResponseCode.SUCCESS
    pulled = client.pull("TopicView", 0, 1, max_msgs=1).body
    assert view.body == pulled  # byte for byte the record a pull ships
    (msg,) = decode_records(view.body)
    assert msg.body == b"second" and msg.physical_offset == offset

    inside = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset + 4)})
    assert inside.code == ResponseCode.SYSTEM_ERROR
    assert inside.remark == f"can not find message by the offset, {offset + 4}"
    beyond = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(10**9)})
    assert beyond.code == ResponseCode.SYSTEM_ERROR


def _query(client: RawClient, topic: str, key: str, *, unique: bool = False, max_num: int = 32,
           begin: int = 0) -> object:
    fields = {"topic": topic, "key": key, "maxNum": str(max_num), "beginTimestamp": str(begin),
              "endTimestamp": str(int(time.time() * 1000) + 60_000)}
    if unique:
        fields["_UNIQUE_KEY_QUERY"] = "true"
    return client.call(RequestCode.QUERY_MESSAGE, fields)


def test_query_by_key_and_unique_key(broker: BrokerHandle, client: RawClient) -> None:
    client.send_message("TopicIdx", b"one", properties={"KEYS": "order-1 shared", "UNIQ_KEY": "UNIQ0001"})
    client.send_message("TopicIdx", b"two", properties={"KEYS": "order-2 shared", "UNIQ_KEY": "UNIQ0002"})
    client.send_message("OtherTopic", b"elsewhere", properties={"KEYS": "shared"})
    broker.wait_dispatched()

    resp = _query(client, "TopicIdx", "shared")
    assert resp.code == ResponseCode.SUCCESS
    assert sorted(m.body for m in decode_records(resp.body)) == [b"one", b"two"]
    assert int(resp.ext_fields["indexLastUpdatePhyoffset"]) >= 0
    assert int(resp.ext_fields["indexLastUpdateTimestamp"]) > 0

    single = _query(client, "TopicIdx", "order-2")
    assert [m.body for m in decode_records(single.body)] == [b"two"]

    # maxNum=1 is replaced by defaultQueryMaxNum for a unique-key query
    uniq = _query(client, "TopicIdx", "UNIQ0001", unique=True, max_num=1)
    assert [m.body for m in decode_records(uniq.body)] == [b"one"]

    missing = _query(client, "TopicIdx", "nope")
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "can not find message, maybe time range not correct"
    assert "indexLastUpdateTimestamp" in missing.ext_fields

    too_late = _query(client, "TopicIdx", "shared", begin=int(time.time() * 1000) + 30_000)
    assert too_late.code == ResponseCode.QUERY_NOT_FOUND
