"""Transactional messages over gRPC, on the broker's 4.x transaction machinery (no second copy of it).

A TRANSACTION message is sent as a 4.x transactional producer sends its prepared message
(``TRAN_MSG=true``, sysFlag TRANSACTION_PREPARED, ``PGROUP``), so the send path stores it as a half
message in ``RMQ_SYS_TRANS_HALF_TOPIC`` and counts it. As RocketMQ's proxy does, the producer group
is the topic's name: a 5.x producer has no group, and its Telemetry settings name the topics it
publishes to, which is where the broker's check finds it.

The transaction id a client gets back names the half message: its CommitLog offset and its half
queue offset, the two things END_TRANSACTION needs (:func:`transaction_id`). It survives a broker
restart, as the half message does, so EndTransaction needs no table of open transactions.
EndTransaction becomes the END_TRANSACTION request a 4.x producer sends and goes through the
registered handler (processor/end_transaction.py: the checks, the commit put, the op record, the
transaction metrics).

Orphaned transactions: a producer's Telemetry stream is registered in the broker's
ProducerManager under each topic it publishes to, as a :class:`TelemetryChannel`. The transaction
check pass picks a channel of the message's group as it picks a remoting connection and sends its
CHECK_TRANSACTION_STATE; the channel turns it into a ``RecoverOrphanedTransactionCommand`` on the
stream (RocketMQ's GrpcClientChannel does the same). The client answers with EndTransaction,
source SERVER_CHECK.
"""

from __future__ import annotations

import asyncio
import dataclasses

from rocketstore.broker.grpc_v2 import message_convert
from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.broker.processor.send import PROPERTY_TRANSACTION_PREPARED
from rocketstore.broker.server import Connection
from rocketstore.broker.transaction.bridge import PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, PROPERTY_PRODUCER_GROUP
from rocketstore.common.message import StoredMessage, decode_record
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.headers import CheckTransactionStateRequestHeader


def transaction_properties(message: pb.Message) -> dict[str, str]:
    """The properties that make a send a prepared transactional one (SendMessageActivity's): the
    topic as producer group, and the client's orphaned-transaction recovery time, when it gives
    one, as the half message's check immunity (else the broker's ``transactionTimeOut`` applies)."""
    properties = {PROPERTY_TRANSACTION_PREPARED: "true", PROPERTY_PRODUCER_GROUP: message.topic.name}
    system = message.system_properties
    if system.HasField("orphaned_transaction_recovery_duration"):
        properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(
            system.orphaned_transaction_recovery_duration.seconds)
    return properties


def transaction_id(commit_log_offset: int, half_queue_offset: int) -> str:
    """The id of the transaction whose half message is at these offsets."""
    return f"{commit_log_offset:X}-{half_queue_offset:X}"


def parse_transaction_id(text: str) -> tuple[int, int]:
    """(CommitLog offset, half queue offset) of a :func:`transaction_id`; ValueError names what is wrong."""
    commit_log, sep, queue = text.partition("-")
    try:
        if not sep:
            raise ValueError
        offsets = int(commit_log, 16), int(queue, 16)
    except ValueError:
        raise ValueError(f"transaction id {text!r} is not one this broker gave out "
                         "(<CommitLog offset>-<half queue offset>, hex)") from None
    if min(offsets) < 0:
        raise ValueError(f"transaction id {text!r} has a negative offset")
    return offsets


@dataclasses.dataclass(eq=False)
class TelemetryChannel(Connection):
    """A producer's Telemetry stream as a member of its producer groups: what the broker sends it
    (only CHECK_TRANSACTION_STATE means anything to a 5.x client) goes into ``outgoing``, which the
    stream writes out; None there ends the stream."""

    client_id: str = ""
    #: the topics (producer groups) the client publishes to, from its settings
    topics: tuple[str, ...] = ()
    store_host: str = ""
    #: LanguageCode, for admin views of the group's connections
    language: int = 0
    outgoing: asyncio.Queue[pb.TelemetryCommand | None] = dataclasses.field(default_factory=asyncio.Queue)
    ended: bool = False

    @property
    def active(self) -> bool:
        return not self.ended

    def notify(self, code: int, ext_fields: dict[str, str], body: bytes = b"") -> None:
        if self.ended or code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        self.outgoing.put_nowait(recover_command(CheckTransactionStateRequestHeader.from_ext_fields(ext_fields),
                                                 body, self.store_host))

    def close(self) -> None:
        """End the stream (the broker dropped the client, or it is going away)."""
        if not self.ended:
            self.ended = True
            self.outgoing.put_nowait(None)
        self.closed.set()


def recover_command(header: CheckTransactionStateRequestHeader, body: bytes, store_host: str) -> pb.TelemetryCommand:
    """CHECK_TRANSACTION_STATE as the command a 5.x producer answers: the message (a record of its
    real topic, as the check sends it) and the id of the half message copy being checked."""
    decoded = decode_record(body)
    if not isinstance(decoded, StoredMessage):  # the check pass encodes it just before: never expected
        raise ValueError(f"transaction check body is not a message record: {decoded}")
    message = message_convert.to_message(decoded, store_host=store_host)
    return pb.TelemetryCommand(recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
        message=message, transaction_id=transaction_id(header.commit_log_offset, header.tran_state_table_offset)))
