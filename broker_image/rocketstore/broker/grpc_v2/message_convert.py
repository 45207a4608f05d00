"""Between gRPC v2 messages and the broker's stored ones (pure functions, no I/O).

A 5.x client sends system properties as protobuf fields; the store keeps RocketMQ's property
map. The mapping is the one RocketMQ's proxy applies: tag -> ``TAGS``, keys -> ``KEYS``
(space-joined), the client's message id -> ``UNIQ_KEY``, message group -> ``__SHARDINGKEY``,
delivery timestamp -> ``TIMER_DELIVER_MS`` (the broker's timer store delivers it then), trace
context -> ``TRACE_CONTEXT``; user properties go in as they are. A received message carries the
user properties back without RocketMQ's own keys, so a consumer sees what its producer set.

The response codes of the remoting send path map to v2 codes as the proxy maps them, so a 5.x
client reacts (retries, gives up) as it does against RocketMQ.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
from typing import Final

from google.protobuf.timestamp_pb2 import Timestamp

from rocketstore.broker.grpc_v2 import messaging_pb2 as pb
from rocketstore.common.message import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    StoredMessage,
    SysFlag,
    java_string_hash,
)
from rocketstore.common.native import NATIVE
from rocketstore.remoting.codes import ResponseCode

PROPERTY_SHARDING_KEY: Final = "__SHARDINGKEY"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"

#: RocketMQ's own property keys (MessageConst's reserved names): never user properties.
SYSTEM_PROPERTY_KEYS: Final = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
    "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME",
    "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
    "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT",
    "TTL", "ARRIVE_TIME", "MSG_TYPE", "CLUSTER", "__SHARDINGKEY", "TRACE_CONTEXT", "__STARTDELIVERTIME",
    "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_DEL_UNIQKEY", "TIMER_ROLL_TIMES", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "DUP_INFO",
    "EXTEND_UNIQ_INFO", "INNER_NUM", "INNER_BASE", "bname",
})


class BadMessage(ValueError):
    """A message the broker refuses before storing it; ``code`` is the v2 status to answer."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code


def store_properties(message: pb.Message) -> dict[str, str]:
    """The property map a v2 message is stored with; BadMessage names what is wrong."""
    system = message.system_properties
    properties: dict[str, str] = {}
    for key, value in message.user_properties.items():
        if key in SYSTEM_PROPERTY_KEYS:
            raise BadMessage(pb.ILLEGAL_MESSAGE_PROPERTY_KEY, f"user property {key!r} is reserved by RocketMQ")
        properties[key] = value
    if system.HasField("tag"):
        if not system.tag.strip() or "|" in system.tag:
            raise BadMessage(pb.ILLEGAL_MESSAGE_TAG, f"tag {system.tag!r} is blank or contains '|'")
        properties[PROPERTY_TAGS] = system.tag
    if system.keys:
        if any(not key.strip() for key in system.keys):
            raise BadMessage(pb.ILLEGAL_MESSAGE_KEY, "a message key is blank")
        properties[PROPERTY_KEYS] = KEY_SEPARATOR.join(system.keys)
    if system.message_id:
        properties[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = system.message_id
    if system.HasField("message_group"):
        if not system.message_group.strip():
            raise BadMessage(pb.ILLEGAL_MESSAGE_GROUP, "message group is blank")
        properties[PROPERTY_SHARDING_KEY] = system.message_group
    if system.HasField("delivery_timestamp"):
        properties[PROPERTY_TIMER_DELIVER_MS] = str(system.delivery_timestamp.ToMilliseconds())
    if system.HasField("trace_context") and system.trace_context:
        properties[PROPERTY_TRACE_CONTEXT] = system.trace_context
    return properties


def fifo_queue(message_group: str, queue_nums: int) -> int:
    """The queue of a FIFO message group: its Java hash code modulo the queue count (never negative),
    so every message of a group lands in one queue, as RocketMQ's proxy places them."""
    return java_string_hash(message_group) % queue_nums if queue_nums > 0 else 0


def _timestamp(ms: int) -> Timestamp:
    # the constructor, not FromMilliseconds: one call into upb instead of Python-level setters
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def received_message(stored: StoredMessage, *, receipt_handle: str, attempt: int, invisible_ms: int,
                     store_host: str) -> pb.Message:
    """A stored message as a ReceiveMessage response carries it (see :func:`to_message`)."""
    message = to_message(stored, store_host=store_host)
    system = message.system_properties
    system.receipt_handle = receipt_handle
    system.invisible_duration.seconds = invisible_ms // 1000
    system.invisible_duration.nanos = (invisible_ms % 1000) * 1_000_000
    system.delivery_attempt = attempt
    return message


def received_message_response_python(stored: StoredMessage, *, receipt_handle: str, attempt: int, invisible_ms: int,
                                     store_host: str) -> bytes:
    """The serialized ReceiveMessageResponse carrying ``stored`` (see :func:`received_message`): what
    a receive streams for each message. The reference of the native twin, which writes the same
    fields without building protobuf objects."""
    return pb.ReceiveMessageResponse(message=received_message(  # type: ignore[no-any-return]
        stored, receipt_handle=receipt_handle, attempt=attempt, invisible_ms=invisible_ms, store_host=store_host,
    )).SerializeToString()


def _received_message_response_native(stored: StoredMessage, *, receipt_handle: str, attempt: int,
                                      invisible_ms: int, store_host: str) -> bytes:
    assert NATIVE is not None
    raw: bytes | None = NATIVE.received_message_response(
        stored, receipt_handle=receipt_handle, attempt=attempt, invisible_ms=invisible_ms, store_host=store_host,
        system_keys=SYSTEM_PROPERTY_KEYS)
    if raw is None:  # what the native twin leaves to this one (a compressed body, an unusual delivery time)
        return received_message_response_python(stored, receipt_handle=receipt_handle, attempt=attempt,
                                                invisible_ms=invisible_ms, store_host=store_host)
    return raw


received_message_response = (_received_message_response_native if NATIVE is not None
                             else received_message_response_python)


def to_message(stored: StoredMessage, *, store_host: str) -> pb.Message:
    """A stored message as v2 carries it outside a delivery (GrpcConverter.buildMessage): body plain,
    no receipt handle (a recover-orphaned-transaction command sends it so).

    The body digest is MD5 in upper-case hex, as RocketMQ's proxy sends it: every client checks it
    the same way. (A CRC32 digest is not: the Java client formats its own without leading zeros,
    the Python client zero-pads it, so one of them would take every eighth message as corrupted,
    and a push consumer discards a corrupted message.)"""
    body = stored.body
    if stored.sys_flag & SysFlag.COMPRESSED:  # 4.x producers deflate large bodies
        body = zlib.decompress(body)
    props = stored.properties
    system = pb.SystemProperties(
        keys=[key for key in (props.get(PROPERTY_KEYS) or "").split(KEY_SEPARATOR) if key],
        message_id=stored.uniq_key or stored.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        message_type=message_type(props),
        born_timestamp=_timestamp(stored.born_timestamp),
        born_host=stored.born_host.host,
        store_timestamp=_timestamp(stored.store_timestamp),
        store_host=store_host,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
    )
    if stored.tags is not None:
        system.tag = stored.tags
    if PROPERTY_SHARDING_KEY in props:
        system.message_group = props[PROPERTY_SHARDING_KEY]
    if PROPERTY_TIMER_DELIVER_MS in props:
        system.delivery_timestamp.CopyFrom(_timestamp(int(props[PROPERTY_TIMER_DELIVER_MS])))
    if PROPERTY_TRACE_CONTEXT in props:
        system.trace_context = props[PROPERTY_TRACE_CONTEXT]
    return pb.Message(topic=pb.Resource(name=stored.topic), user_properties=user_properties(props),
                      system_properties=system, body=body)


def user_properties(props: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in props.items() if key not in SYSTEM_PROPERTY_KEYS}


def message_type(props: Mapping[str, str]) -> pb.MessageType:
    """TRANSACTION, FIFO (a message group), DELAY (a delivery time) or NORMAL, as the message was sent
    (a committed transactional message keeps ``TRAN_MSG=true``)."""
    if props.get("TRAN_MSG") == "true":
        return pb.TRANSACTION
    if PROPERTY_SHARDING_KEY in props:
        return pb.FIFO
    if PROPERTY_TIMER_DELIVER_MS in props or "DELAY" in props:
        return pb.DELAY
    return pb.NORMAL


#: remoting response code -> v2 code, for a send's outcome
_SEND_CODES: Final[Mapping[int, int]] = {
    ResponseCode.SUCCESS: pb.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST: pb.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: pb.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: pb.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: pb.INTERNAL_SERVER_ERROR,
}


def send_status_code(response_code: int) -> int:
    """The v2 code of a remoting send response's code (INTERNAL_SERVER_ERROR for the rest)."""
    return int(_SEND_CODES.get(response_code, pb.INTERNAL_SERVER_ERROR))
