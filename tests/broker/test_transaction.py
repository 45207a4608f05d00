"""Transactional messages on a real broker, driven by a raw remoting client acting as the producer.

What RocketMQ 4.9.8 stores and sends, checked field by field: the half message in
RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC/REAL_QID, END_TRANSACTION's commit (the message
on its real queue, sysFlag COMMIT) and rollback, the op records (tag ``d``, body the half queue
offset), the check-back (CHECK_TRANSACTION_STATE to the producer's connection, with the offsets
of the put-back copy), the discard after transactionCheckMax, and the check resuming after a
restart from the CID_RMQ_SYS_TRANS offsets. The Java TransactionMQProducer runs the same paths in
tests/compat/java4/test_java_transaction.py.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from inprocess_broker import BrokerHandle, RawClient, decode_records
from polling import wait_until

from rocketstore.broker.transaction.service import calculate_op_offset, immunity_time_ms
from rocketstore.common.message import StoredMessage, decode_message_id, decode_record, transaction_type
from rocketstore.remoting.body import HeartbeatData, ProducerData
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
COMMIT, ROLLBACK, UNKNOWN = 0x8, 0xC, 0
GROUP = "TxGroup"

# short timers: a pass every 200 ms, messages older than 300 ms are checked
FAST_CHECKS = {"transaction_check_interval": 200, "transaction_time_out": 300}
# for tests whose producer answers a check: the answer must be applied before the next pass, or that
# pass asks again (as RocketMQ's would); a pass a second leaves room for a busy machine
ANSWERED_CHECKS = {"transaction_check_interval": 1000, "transaction_time_out": 300}


def send_half(client: RawClient, topic: str, body: bytes, *, queue_id: int = 1, uniq: str = "UNIQ-1",
              group: str = GROUP) -> RemotingCommand:
    """A prepared send as TransactionMQProducer makes it (TRAN_MSG, PGROUP, sysFlag PREPARED)."""
    reply = client.send_message(topic, body, queue_id=queue_id, producer_group=group, sys_flag=0x4, properties={
        "TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq, "TAGS": "t", "WAIT": "true"})
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    return reply


def end(client: RawClient, reply: RemotingCommand, kind: int, *, group: str = GROUP, from_check: bool = False,
        commit_log_offset: int | None = None, queue_offset: int | None = None) -> RemotingCommand:
    """END_TRANSACTION for the half message a send reply names (as the client derives the offsets)."""
    _, offset = decode_message_id(reply.ext_fields["msgId"])
    header = EndTransactionRequestHeader(
        producer_group=group, commit_or_rollback=kind, msg_id="UNIQ-1", from_transaction_check=from_check,
        tran_state_table_offset=int(reply.ext_fields["queueOffset"]) if queue_offset is None else queue_offset,
        commit_log_offset=offset if commit_log_offset is None else commit_log_offset)
    return client.call(RequestCode.END_TRANSACTION, header.to_ext_fields())


def queue_messages(broker: BrokerHandle, topic: str, queue_id: int) -> list[StoredMessage]:
    broker.wait_dispatched()
    got = broker.store.get_message("test", topic, queue_id, 0, 64)
    return [m for m in (decode_record(d, 0) for d in got.messages) if isinstance(m, StoredMessage)]


def metric(broker: BrokerHandle, name: str, suffix: str = "_total") -> float:
    """Counter ``rocketstore_{name}_total`` (a gauge with ``suffix=""``) of the broker's /metrics."""
    assert broker.controller.http is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.controller.http.port}/metrics", timeout=10) as resp:
        found = re.search(rf"^rocketstore_{name}{suffix} (\S+)$", resp.read().decode(), re.MULTILINE)
    assert found is not None, f"rocketstore_{name}{suffix} missing from /metrics"
    return float(found.group(1))


def register_producer(client: RawClient, group: str = GROUP, client_id: str = "127.0.0.1@tx") -> None:
    data = HeartbeatData(client_id=client_id, producer_data_set=[ProducerData(group_name=group)])
    assert client.call(RequestCode.HEART_BEAT, body=data.encode()).code == ResponseCode.SUCCESS


def wait_request(client: RawClient, code: int, timeout: float = 10.0) -> RemotingCommand:
    """The next request of ``code`` the broker sends on this connection (responses are kept for receive())."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no request {code} from the broker within {timeout} s")
        client.sock.settimeout(left)
        data = client.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("broker closed the connection")
        for cmd in client.decoder.feed(data):
            if not cmd.is_response and cmd.code == code:
                return cmd
            if cmd.is_response:
                client.pending[cmd.opaque] = cmd


def test_half_message_is_stored_as_rocketmq_stores_it_and_hidden(broker: BrokerHandle, client: RawClient) -> None:
    reply = send_half(client, "TxTopic", b"pay")
    assert reply.ext_fields["queueId"] == "1"  # the real queue, as RocketMQ answers
    assert reply.ext_fields["queueOffset"] == "0"  # offset in the half queue
    _, offset = decode_message_id(reply.ext_fields["msgId"])
    half = broker.store.look_message_by_offset(offset)
    assert half is not None
    assert (half.topic, half.queue_id, half.queue_offset) == (HALF, 0, 0)
    assert transaction_type(half.sys_flag) == 0  # parseHalfMessageInner resets it to TRANSACTION_NOT_TYPE
    assert half.properties["REAL_TOPIC"] == "TxTopic" and half.properties["REAL_QID"] == "1"
    assert half.properties["TRAN_MSG"] == "true" and half.properties["PGROUP"] == GROUP
    assert half.properties["WAIT"] == "true"  # dropped from plain messages, kept on half messages
    assert [m.physical_offset for m in queue_messages(broker, HALF, 0)] == [offset]
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0  # consumers see nothing
    assert metric(broker, "transaction_half_messages") == 1


def test_commit_puts_the_message_on_its_queue_and_writes_an_op_record(broker: BrokerHandle,
                                                                       client: RawClient) -> None:
    reply = send_half(client, "TxTopic", b"pay")
    _, half_offset = decode_message_id(reply.ext_fields["msgId"])
    assert end(client, reply, COMMIT).code == ResponseCode.SUCCESS
    [msg] = queue_messages(broker, "TxTopic", 1)
    assert msg.body == b"pay" and msg.queue_offset == 0
    assert transaction_type(msg.sys_flag) == COMMIT
    assert msg.prepared_transaction_offset == half_offset
    # RocketMQ keeps the half message's properties string on the committed message
    assert msg.properties["REAL_TOPIC"] == "TxTopic" and msg.properties["TRAN_MSG"] == "true"
    assert msg.properties["UNIQ_KEY"] == "UNIQ-1" and msg.properties["WAIT"] == "true"
    [op] = queue_messages(broker, OP, 0)
    assert (op.body, op.tags, op.queue_id, op.sys_flag & 0xC) == (b"0", "d", 0, 0)
    assert op.properties == {"WAIT": "true", "TAGS": "d"}
    assert metric(broker, "transaction_commits") == 1 and metric(broker, "transaction_rollbacks") == 0
    # the same message pulled by a consumer
    pulled = client.pull("TxTopic", 1, 0)
    assert pulled.code == ResponseCode.SUCCESS
    assert [m.body for m in decode_records(pulled.body)] == [b"pay"]


def test_rollback_writes_only_the_op_record(broker: BrokerHandle, client: RawClient) -> None:
    reply = send_half(client, "TxTopic", b"nope")
    assert end(client, reply, ROLLBACK).code == ResponseCode.SUCCESS
    [op] = queue_messages(broker, OP, 0)
    assert op.body == b"0"
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0
    assert metric(broker, "transaction_rollbacks") == 1 and metric(broker, "transaction_commits") == 0


def test_unknown_state_answers_nothing_and_changes_nothing(broker: BrokerHandle, client: RawClient) -> None:
    reply = send_half(client, "TxTopic", b"wait")
    _, offset = decode_message_id(reply.ext_fields["msgId"])
    header = EndTransactionRequestHeader(producer_group=GROUP, tran_state_table_offset=0, commit_or_rollback=UNKNOWN,
                                         msg_id="UNIQ-1", commit_log_offset=offset)
    opaque = client.send(RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields()))
    with pytest.raises(TimeoutError):
        client.receive(opaque, timeout=0.5)
    assert queue_messages(broker, OP, 0) == []
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0


def test_end_transaction_refuses_what_does_not_match(broker: BrokerHandle, client: RawClient) -> None:
    reply = send_half(client, "TxTopic", b"x")
    wrong_group = end(client, reply, COMMIT, group="Other")
    assert (wrong_group.code, wrong_group.remark) == (ResponseCode.SYSTEM_ERROR, "The producer group wrong")
    wrong_offset = end(client, reply, COMMIT, queue_offset=5)
    assert wrong_offset.remark == "The transaction state table offset wrong"
    plain = client.send_message("Plain", b"p")  # not a half message
    not_half = end(client, reply, COMMIT, commit_log_offset=decode_message_id(plain.ext_fields["msgId"])[1])
    assert (not_half.code, not_half.remark) == (ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
    beyond = end(client, reply, COMMIT, commit_log_offset=10**9)
    assert beyond.remark == "Find prepared transaction message failed"
    missing = client.call(RequestCode.END_TRANSACTION, {"producerGroup": GROUP})
    assert missing.code == ResponseCode.SYSTEM_ERROR and "tranStateTableOffset" in (missing.remark or "")
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0
    assert end(client, reply, COMMIT).code == ResponseCode.SUCCESS  # the connection still serves


def test_reject_transaction_message(broker_factory: Callable[..., BrokerHandle]) -> None:
    client = broker_factory(reject_transaction_message=True).client()
    reply = client.send_message("TxTopic", b"x", properties={"TRAN_MSG": "true", "PGROUP": GROUP})
    assert reply.code == ResponseCode.NO_PERMISSION
    assert "sending transaction message is forbidden" in (reply.remark or "")


def test_check_back_goes_to_a_live_producer_and_its_commit_lands(
        broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(**ANSWERED_CHECKS)
    producer = broker.client()
    register_producer(producer)
    reply = send_half(producer, "TxTopic", b"later")
    _, first_offset = decode_message_id(reply.ext_fields["msgId"])
    # the gauge reads the half topic's ConsumeQueue, which dispatch fills after the answer
    wait_until("the half message counted pending",
               lambda: metric(broker, "transaction_half_messages_pending", "") == 1, timeout=10, interval=0.02)
    check = wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE)
    assert check.is_oneway
    # once the pass has moved its offset past the original it put back: one pending, not two
    wait_until("the pass's half offset past the original", lambda: broker.controller.consumer_offset_manager
               .query_offset("CID_RMQ_SYS_TRANS", HALF, 0) >= 1, timeout=10, interval=0.02)
    wait_until("the copy counted pending once dispatched",
               lambda: metric(broker, "transaction_half_messages_pending", "") == 1, timeout=10, interval=0.02)
    header = CheckTransactionStateRequestHeader.from_ext_fields(check.ext_fields)
    # the copy the pass appended to the half queue is what is asked about
    assert header.tran_state_table_offset == 1 and header.commit_log_offset > first_offset
    assert header.msg_id == header.transaction_id == "UNIQ-1"
    assert decode_message_id(header.offset_msg_id or "")[1] == header.commit_log_offset
    body = decode_record(check.body, 0)
    assert isinstance(body, StoredMessage)
    assert (body.topic, body.queue_id, body.body) == ("TxTopic", 1, b"later")
    assert (body.queue_offset, body.physical_offset) == (1, header.commit_log_offset)
    assert body.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0
    # the producer answers as TransactionMQProducer does: one-way, fromTransactionCheck
    producer.oneway(RequestCode.END_TRANSACTION, EndTransactionRequestHeader(
        producer_group=GROUP, tran_state_table_offset=body.queue_offset, commit_log_offset=body.physical_offset,
        commit_or_rollback=COMMIT, msg_id="UNIQ-1", from_transaction_check=True).to_ext_fields())
    wait_until("the commit answering the check applied",
               lambda: broker.store.get_max_offset_in_queue("TxTopic", 1) > 0, timeout=10, interval=0.02)
    [msg] = queue_messages(broker, "TxTopic", 1)
    assert msg.body == b"later" and msg.prepared_transaction_offset == body.physical_offset
    assert metric(broker, "transaction_checks") >= 1
    # ended: a pass moves both offsets past it (the half offset past the original and its copy, the
    # op offset past the commit's op record); from then on no pass looks at it, so no more checks
    offsets = broker.controller.consumer_offset_manager
    wait_until("a pass moving the half and op offsets past the ended message",
               lambda: (offsets.query_offset("CID_RMQ_SYS_TRANS", HALF, 0),
                        offsets.query_offset("CID_RMQ_SYS_TRANS", OP, 0)) == (2, 1), timeout=10, interval=0.02)
    assert metric(broker, "transaction_checks") == 1
    # committed and passed: nothing held for a scale-down's drain to wait for
    assert metric(broker, "transaction_half_messages_pending", "") == 0


def test_no_check_before_transaction_timeout(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(transaction_check_interval=100, transaction_time_out=60_000)
    producer = broker.client()
    register_producer(producer)
    send_half(producer, "TxTopic", b"young")
    with pytest.raises(TimeoutError):
        wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE, timeout=1.0)
    assert metric(broker, "transaction_checks") == 0


def test_discarded_after_transaction_check_max(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(**FAST_CHECKS, transaction_check_max=2)
    producer = broker.client()
    register_producer(producer)
    send_half(producer, "TxTopic", b"silent")
    times = [CheckTransactionStateRequestHeader.from_ext_fields(
        wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE).ext_fields).tran_state_table_offset
        for _ in range(2)]
    assert times == [1, 2]  # each check asks about a new copy
    wait_until("the message discarded after transactionCheckMax checks",
               lambda: broker.store.get_max_offset_in_queue("TRANS_CHECK_MAX_TIME_TOPIC", 0) > 0, timeout=10)
    [gone] = queue_messages(broker, "TRANS_CHECK_MAX_TIME_TOPIC", 0)
    assert gone.body == b"silent" and gone.properties["TRANSACTION_CHECK_TIMES"] == "2"
    assert gone.properties["REAL_TOPIC"] == "TxTopic"
    assert metric(broker, "transaction_discarded") == 1 and metric(broker, "transaction_checks") == 2
    assert broker.store.get_max_offset_in_queue("TxTopic", 1) == 0
    with pytest.raises(TimeoutError):
        wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE, timeout=0.8)


def test_no_producer_online_means_no_check_until_one_is(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(**FAST_CHECKS)
    sender = broker.client()
    send_half(sender, "TxTopic", b"orphan")
    # every pass appends a copy (the check of the previous one found nobody to ask): once the second
    # copy is there, the first pass has handed its check to the loop, and a round trip through the
    # loop (call_soon) runs that hand-over before the counter is read
    wait_until("two passes over the orphan", lambda: broker.store.get_max_offset_in_queue(HALF, 0) >= 3,
               timeout=10, interval=0.02)
    broker.call_soon(lambda: None)
    assert metric(broker, "transaction_checks") == 0
    producer = broker.client()
    register_producer(producer)
    check = wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE)
    assert CheckTransactionStateRequestHeader.from_ext_fields(check.ext_fields).msg_id == "UNIQ-1"


def test_pending_half_message_is_checked_after_a_restart(tmp_path: Path,
                                                         broker_factory: Callable[..., BrokerHandle]) -> None:
    root = tmp_path / "store"
    first = broker_factory(root, transaction_check_interval=60_000, transaction_time_out=300)
    committed = send_half(first.client(), "TxTopic", b"done", uniq="U-done")
    pending = send_half(first.client(), "TxTopic", b"pending", uniq="U-pending")
    assert end(first.client(), committed, COMMIT).code == ResponseCode.SUCCESS
    first.stop()
    second = broker_factory(root, **ANSWERED_CHECKS)
    producer = second.client()
    register_producer(producer)
    check = wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE)
    header = CheckTransactionStateRequestHeader.from_ext_fields(check.ext_fields)
    assert header.msg_id == "U-pending"  # the committed one is ended by its op record
    assert pending.ext_fields["queueOffset"] == "1" and header.tran_state_table_offset == 2
    body = decode_record(check.body, 0)
    assert isinstance(body, StoredMessage)
    producer.oneway(RequestCode.END_TRANSACTION, EndTransactionRequestHeader(
        producer_group=GROUP, tran_state_table_offset=body.queue_offset, commit_log_offset=body.physical_offset,
        commit_or_rollback=ROLLBACK, msg_id="U-pending", from_transaction_check=True).to_ext_fields())
    # the one-way rollback is applied once its op record follows the commit's
    wait_until("the rollback's op record", lambda: second.store.get_max_offset_in_queue(OP, 0) >= 2,
               timeout=10, interval=0.02)
    assert [m.body for m in queue_messages(second, "TxTopic", 1)] == [b"done"]
    # what is under test here is an absence: no check of the rolled-back message in the next pass
    with pytest.raises(TimeoutError):
        wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE, timeout=1.5)


def test_check_immunity_time_delays_the_first_check(broker_factory: Callable[..., BrokerHandle]) -> None:
    broker = broker_factory(**FAST_CHECKS)
    producer = broker.client()
    register_producer(producer)
    born = time.monotonic()
    reply = producer.send_message("TxTopic", b"slow", queue_id=1, producer_group=GROUP, sys_flag=0x4, properties={
        "TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": "U-slow", "CHECK_IMMUNITY_TIME_IN_SECONDS": "2"})
    assert reply.code == ResponseCode.SUCCESS
    check = wait_request(producer, RequestCode.CHECK_TRANSACTION_STATE)
    assert time.monotonic() - born >= 1.9  # not after transactionTimeOut (300 ms): after its own 2 s
    body = decode_record(check.body, 0)
    assert isinstance(body, StoredMessage)
    # while immune, the pass re-appended it, remembering where the first copy sits
    assert body.properties["TRAN_PREPARED_QUEUE_OFFSET"] == "0"
    # RocketMQ raises TRANSACTION_CHECK_TIMES before it looks at the immunity, and the immune copy
    # keeps the raised count: every copy counts, one per pass, so the count is the copy's offset
    assert body.queue_offset >= 2
    assert body.properties["TRANSACTION_CHECK_TIMES"] == str(body.queue_offset)


def test_op_offset_advances_over_contiguous_used_records() -> None:
    assert calculate_op_offset([7, 5, 6, 9], 5) == 8
    assert calculate_op_offset([6], 5) == 5
    assert calculate_op_offset([], 3) == 3
    assert immunity_time_ms("-1", 6000) == 6000 and immunity_time_ms("x", 6000) == 6000
    assert immunity_time_ms("3", 6000) == 3000
