"""The pure parts of transactions over gRPC (grpc_v2/transaction.py): the transaction id, the
properties of a prepared send, and a transaction check as the Telemetry command a 5.x producer
answers. The whole path with the real Java client is in tests/compat/java5/test_java_5x_client.py."""

from __future__ import annotations

import asyncio

import pytest

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.grpc_v2.transaction import (
    TelemetryChannel,
    parse_transaction_id,
    recover_command,
    transaction_id,
    transaction_properties,
)
from rocketstore.broker.transaction.bridge import check_request_body, half_message
from rocketstore.common.message import HostAddress, Message, StoredMessage, decode_record, encode_message, stamp_record
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.headers import CheckTransactionStateRequestHeader


def test_a_transaction_id_names_the_half_message_offsets() -> None:
    assert parse_transaction_id(transaction_id(123_456_789_012, 42)) == (123_456_789_012, 42)
    for bad in ("", "12", "xyz-1", "1-", "-1-2"):
        with pytest.raises(ValueError, match="transaction id"):
            parse_transaction_id(bad)


def test_a_transactional_send_is_prepared_with_the_topic_as_producer_group() -> None:
    message = pb.Message(topic=pb.Resource(name="Orders"), body=b"x",
                         system_properties=pb.SystemProperties(message_type=pb.TRANSACTION))
    assert transaction_properties(message) == {"TRAN_MSG": "true", "PGROUP": "Orders"}
    message.system_properties.orphaned_transaction_recovery_duration.FromSeconds(7)
    assert transaction_properties(message)["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "7"


def _half(body: bytes) -> StoredMessage:
    """A half message as the store hands it to the check pass (stored at CommitLog offset 900, half
    queue offset 3)."""
    host = HostAddress("10.0.0.5", 40000)
    msg = half_message(Message(
        topic="Orders", body=body, queue_id=1, properties={"UNIQ_KEY": "MID", "TAGS": "T", "TRAN_MSG": "true",
                                                            "PGROUP": "Orders", "color": "red"},
        sys_flag=0, born_timestamp=1_000, born_host=host, store_host=HostAddress("10.0.0.1", 10911)))
    record = encode_message(msg)
    stamp_record(record, 0, 3, 900, 2_000, 0)
    decoded = decode_record(bytes(record))
    assert isinstance(decoded, StoredMessage)
    return decoded


def test_a_check_becomes_a_recover_orphaned_transaction_command() -> None:
    header = CheckTransactionStateRequestHeader(tran_state_table_offset=3, commit_log_offset=900, msg_id="MID")
    command = recover_command(header, check_request_body(_half(b"pay 5")), "10.0.0.1:10911")
    recover = command.recover_orphaned_transaction_command
    assert recover.transaction_id == transaction_id(900, 3)
    message = recover.message
    assert (message.topic.name, message.body, dict(message.user_properties)) == ("Orders", b"pay 5", {"color": "red"})
    system = message.system_properties
    assert (system.message_id, system.tag, system.message_type, system.queue_id) == ("MID", "T", pb.TRANSACTION, 1)
    assert not system.receipt_handle


def test_a_telemetry_channel_forwards_checks_only_while_open() -> None:
    async def run() -> list[pb.TelemetryCommand | None]:
        channel = TelemetryChannel(server=None, client_id="c1", topics=("Orders",))  # type: ignore[arg-type]
        header = CheckTransactionStateRequestHeader(tran_state_table_offset=3, commit_log_offset=900, msg_id="MID")
        body = check_request_body(_half(b"x"))
        assert channel.active
        channel.notify(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {})  # nothing a 5.x client understands
        channel.notify(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body)
        channel.close()
        channel.notify(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body)
        assert not channel.active
        return [channel.outgoing.get_nowait() for _ in range(channel.outgoing.qsize())]

    sent = asyncio.run(run())
    assert len(sent) == 2 and sent[1] is None
    assert sent[0] is not None and sent[0].recover_orphaned_transaction_command.transaction_id == "384-3"
