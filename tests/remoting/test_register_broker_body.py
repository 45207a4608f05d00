"""RegisterBrokerBody in RocketMQ 4.9.8's JSON and compressed forms (the Apache side of both is
exercised by tests/compat/apache_broker/test_join_cluster.py)."""

from __future__ import annotations

import struct
import zlib

import pytest

from rocketstore.common.data_version import DataVersion
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.remoting.command import MalformedRequestError
from rocketstore.remoting.register_broker_body import RegisterBrokerBody, TopicConfigSerializeWrapper

TABLE = {
    "Orders": TopicConfig("Orders", read_queue_nums=4, write_queue_nums=8, perm=6, topic_sys_flag=1, order=True),
    "TBW102": TopicConfig("TBW102", read_queue_nums=8, write_queue_nums=8, perm=7,
                          topic_filter_type=TopicFilterType.MULTI_TAG),
}
BODY = RegisterBrokerBody(TopicConfigSerializeWrapper(TABLE, DataVersion(7, 1700000000000)), ["10.0.0.9:7000"])


def test_json_form_round_trips_whole_topic_configs() -> None:
    data = BODY.encode()
    assert data.startswith(b'{"filterServerList":["10.0.0.9:7000"],"topicConfigSerializeWrapper":'
                           b'{"dataVersion":{"counter":7,"timestamp":1700000000000},"topicConfigTable":{')
    assert RegisterBrokerBody.decode(data, compressed=False) == BODY


def test_compressed_form_is_java_layout_and_drops_sys_flag_and_order() -> None:
    data = BODY.encode(compressed=True)
    raw = zlib.decompress(data)
    (version_len,) = struct.unpack_from(">i", raw, 0)
    assert raw[4:4 + version_len] == b'{"counter":7,"timestamp":1700000000000}'
    assert struct.unpack_from(">i", raw, 4 + version_len) == (2,)
    assert b"Orders 4 8 6 SINGLE_TAG" in raw and b"TBW102 8 8 7 MULTI_TAG" in raw
    assert raw.endswith(b'["10.0.0.9:7000"]')
    decoded = RegisterBrokerBody.decode(data, compressed=True)
    assert decoded.topic_config_serialize_wrapper.data_version == DataVersion(7, 1700000000000)
    orders = decoded.topic_config_serialize_wrapper.topic_config_table["Orders"]
    assert (orders.write_queue_nums, orders.topic_sys_flag, orders.order) == (8, 0, False)
    assert decoded.filter_server_list == ["10.0.0.9:7000"]


@pytest.mark.parametrize(("data", "compressed", "needle"), [
    (b"not zlib", True, "does not decode"),
    (zlib.compress(b"\x00\x00\x00\x40{}"), True, "ends inside the data version"),
    (zlib.compress(b"\x00\x00\x00\x02{}\x00\x00\x00\x01\x00\x00\x00\x03a b"), True, "is not 'name"),
    (b"[1,2]", False, "expected an object"),
    (b'{"filterServerList":[1]}', False, "filterServerList"),
    (b"\xff", False, "does not decode"),
])
def test_malformed_bodies_name_the_problem(data: bytes, compressed: bool, needle: str) -> None:
    with pytest.raises(MalformedRequestError, match=needle):
        RegisterBrokerBody.decode(data, compressed)
