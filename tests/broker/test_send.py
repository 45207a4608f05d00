"""SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE over real sockets against a real broker."""

from __future__ import annotations

import time

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records

from rocketstore.broker.processor.send import put_status_response
from rocketstore.common.message import BatchItem, SysFlag, decode_message_id, encode_batch
from rocketstore.common.topic_config import TopicConfig, TopicFilterType
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.headers import SendMessageRequestHeader
from rocketstore.store.config import FlushDiskType
from rocketstore.store.status import PutMessageStatus

pytestmark = pytest.mark.integration


def _pull_all(client: RawClient, topic: str, queue_id: int = 0, offset: int = 0) -> list:
    resp = client.pull(topic, queue_id, offset)
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return decode_records(resp.body)


def test_v1_and_v2_round_trip_bodies_properties_offsets(broker: BrokerHandle, client: RawClient) -> None:
    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AC1100010000ABCDEF", "WAIT": "true", "custom": "v\u00e9"}
    bodies = [b"\x00binary\xffbody", "unicode \u2603".encode(), b""]
    answers = []
    for i, body in enumerate(bodies):
        answers.append(client.send_message("TopicSend", body, properties=props, v2=(i % 2 == 0), flag=7 + i,
                                           born_timestamp=1_700_000_000_000 + i, reconsume_times=i))
    for i, resp in enumerate(answers):
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["queueId"] == "0"
        assert resp.ext_fields["queueOffset"] == str(i)
        assert resp.ext_fields["MSG_REGION"] == "DefaultRegion" and resp.ext_fields["TRACE_ON"] == "true"
    broker.wait_dispatched()
    msgs = _pull_all(client, "TopicSend")
    assert [m.body for m in msgs] == bodies
    local = client.sock.getsockname()
    expected_props = {k: v for k, v in props.items() if k != "WAIT"} | {"CLUSTER": "DefaultCluster"}
    for i, (msg, resp) in enumerate(zip(msgs, answers, strict=True)):
        assert msg.properties == expected_props  # WAIT=true is not stored (4.9.8), CLUSTER is added
        assert msg.flag == 7 + i and msg.born_timestamp == 1_700_000_000_000 + i and msg.reconsume_times == i
        assert msg.queue_offset == i
        assert (msg.born_host.host, msg.born_host.port) == (local[0], local[1])
        assert msg.store_host == broker.controller.store_host
        host, offset = decode_message_id(resp.ext_fields["msgId"])
        assert (host, offset) == (broker.controller.store_host, msg.physical_offset)


def test_wait_false_is_kept_and_sync_flush_put_succeeds(broker_factory) -> None:
    broker = broker_factory(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    client = broker.client()
    r1 = client.send_message("TopicSync", b"durable", properties={"WAIT": "true"})
    r2 = client.send_message("TopicSync", b"no-wait", properties={"WAIT": "false"})
    assert (r1.code, r2.code) == (ResponseCode.SUCCESS, ResponseCode.SUCCESS)
    # SYNC_FLUSH with WAIT=true answers only once the record is flushed
    assert broker.store.commit_log.mapped_file_queue.flushed_where >= int(
        decode_message_id(r1.ext_fields["msgId"])[1]) + 1
    broker.wait_dispatched()
    msgs = _pull_all(client, "TopicSync")
    assert [m.body for m in msgs] == [b"durable", b"no-wait"]
    assert "WAIT" not in msgs[0].properties and msgs[1].properties["WAIT"] == "false"


def test_batch_send_ids_offsets_and_properties(broker: BrokerHandle, client: RawClient) -> None:
    client.send_message("TopicBatch", b"first")  # the batch starts at queue offset 1
    items = [BatchItem(b"b0", 1, {"TAGS": "x", "UNIQ_KEY": "U0"}), BatchItem(b"b1" * 100, 2, {}),
             BatchItem(b"b2", 3, {"KEYS": "kb"})]
    header = SendMessageRequestHeader(producer_group="PG", topic="TopicBatch", default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                      born_timestamp=int(time.time() * 1000), flag=0, properties="", batch=True)
    resp = client.call(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext_fields(), encode_batch(items))
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueOffset"] == "1"
    ids = resp.ext_fields["msgId"].split(",")
    assert len(ids) == 3
    broker.wait_dispatched()
    msgs = _pull_all(client, "TopicBatch", offset=1)
    assert [m.body for m in msgs] == [i.body for i in items]
    assert [m.flag for m in msgs] == [1, 2, 3]
    assert [m.queue_offset for m in msgs] == [1, 2, 3]
    assert [decode_message_id(i)[1] for i in ids] == [m.physical_offset for m in msgs]
    for msg, item in zip(msgs, items, strict=True):
        assert msg.properties == item.properties | {"CLUSTER": "DefaultCluster"}


def test_malformed_batch_body_is_message_illegal(client: RawClient) -> None:
    header = SendMessageRequestHeader(producer_group="PG", topic="TopicBadBatch", default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=0,
                                      flag=0, batch=True)
    resp = client.call(RequestCode.SEND_BATCH_MESSAGE, header.to_v2_ext_fields(), b"\x00\x00\x00\x30garbage")
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert "batch" in (resp.remark or "")


def test_auto_create_topic_takes_min_of_client_and_default_queue_nums(broker: BrokerHandle, client: RawClient) -> None:
    resp = client.send_message("TopicAuto", b"x", default_topic_queue_nums=3)
    assert resp.code == ResponseCode.SUCCESS
    created = broker.controller.topic_config_manager.get("TopicAuto")
    assert created is not None and created.write_queue_nums == 3 and created.read_queue_nums == 3
    # queue ids past the topic's queues are refused with RocketMQ's remark
    bad = client.send_message("TopicAuto", b"x", queue_id=3)
    assert bad.code == ResponseCode.SYSTEM_ERROR
    assert "request queueId[3] is illegal" in (bad.remark or "")


def test_topic_not_exist_when_auto_create_is_off(broker_factory) -> None:
    broker = broker_factory(auto_create_topic_enable=False)
    resp = broker.client().send_message("TopicNoAuto", b"x")
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    assert "topic[TopicNoAuto] not exist" in (resp.remark or "")
    assert broker.controller.topic_config_manager.get("TopicNoAuto") is None


def test_negative_queue_id_picks_a_writable_queue(broker: BrokerHandle, client: RawClient) -> None:
    seen = set()
    for _ in range(20):
        resp = client.send_message("TopicAnyQueue", b"x", queue_id=-1, default_topic_queue_nums=4)
        assert resp.code == ResponseCode.SUCCESS
        seen.add(int(resp.ext_fields["queueId"]))
    assert seen <= {0, 1, 2, 3} and len(seen) > 1


def test_topic_name_checks(client: RawClient) -> None:
    bad = client.send_message("bad topic!", b"x")
    assert bad.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in (bad.remark or "")
    forbidden = client.send_message("SCHEDULE_TOPIC_XXXX", b"x")
    assert forbidden.code == ResponseCode.NO_PERMISSION
    assert "forbidden" in (forbidden.remark or "")


def test_oversized_body_is_message_illegal(broker_factory) -> None:
    broker = broker_factory(max_message_size=1024)
    client = broker.client()
    resp = client.send_message("TopicBig", b"x" * 2048)
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert "msg body length limit 1024B" in (resp.remark or "")
    assert client.send_message("TopicBig", b"x" * 100).code == ResponseCode.SUCCESS


def test_disk_full_answers_service_not_available(broker: BrokerHandle, client: RawClient) -> None:
    assert client.send_message("TopicDisk", b"before").code == ResponseCode.SUCCESS
    # Fault injection: the cleanup service raises this flag when the disk passes
    # diskSpaceWarningLevelRatio; a test cannot fill the real disk, so it raises the flag itself.
    broker.store.running_flags.make_disk_full()
    resp = client.send_message("TopicDisk", b"refused")
    assert resp.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "disk is full" in (resp.remark or "")
    broker.store.running_flags.make_disk_ok()
    assert client.send_message("TopicDisk", b"after").code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert [m.body for m in _pull_all(client, "TopicDisk")] == [b"before", b"after"]


def test_retry_topic_past_max_reconsume_goes_to_dlq(broker: BrokerHandle, client: RawClient) -> None:
    ok = client.send_message("%RETRY%GroupR", b"retry-me", reconsume_times=1, max_reconsume_times=3)
    assert ok.code == ResponseCode.SUCCESS
    dead = client.send_message("%RETRY%GroupR", b"dead", reconsume_times=3, max_reconsume_times=3)
    assert dead.code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert [m.body for m in _pull_all(client, "%RETRY%GroupR")] == [b"retry-me"]
    dlq = _pull_all(client, "%DLQ%GroupR")
    assert [m.body for m in dlq] == [b"dead"] and dlq[0].reconsume_times == 3


def test_multi_tag_topic_sets_sys_flag(broker: BrokerHandle, client: RawClient) -> None:
    broker.controller.topic_config_manager.put(
        TopicConfig("TopicMulti", 1, 1, topic_filter_type=TopicFilterType.MULTI_TAG))
    assert client.send_message("TopicMulti", b"x").code == ResponseCode.SUCCESS
    broker.wait_dispatched()
    assert _pull_all(client, "TopicMulti")[0].sys_flag & SysFlag.MULTI_TAGS


def test_put_status_mapping(broker: BrokerHandle) -> None:
    """The mapping table of handlePutMessageResult, status by status."""
    expected = {
        PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
        PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
        PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
        PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
        PutMessageStatus.CREATE_MAPPED_FILE_FAILED: ResponseCode.SYSTEM_ERROR,
        PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
        PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
        PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_ERROR,
        PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
    }
    for status, code in expected.items():
        assert put_status_response(broker.controller, status)[0] == code, status
    assert put_status_response(broker.controller, PutMessageStatus.OS_PAGECACHE_BUSY)[1] == (
        "[PC_SYNCHRONIZED]broker busy, start flow control for a while")
