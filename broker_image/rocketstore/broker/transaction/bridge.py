"""TransactionalMessageBridge: the records of a transaction as RocketMQ 4.9.8 stores them, and the
store I/O the transaction service needs.

Records (the pure functions below build them; their field choices follow RocketMQ's, quirks
included, so that a store written by either broker reads the same to the other):

* half message (:func:`half_message`, parseHalfMessageInner): the producer's message moved to
  ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its topic and queue in ``REAL_TOPIC``/``REAL_QID``, its
  sysFlag's transaction bits cleared (TRANSACTION_NOT_TYPE), so it gets a ConsumeQueue entry of
  the half topic: the check pass reads the half queue through it. No consumer subscribes there.
* op message (:func:`op_message`, addRemoveTagInTransactionOp): one per commit or rollback, in
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` on the half message's queue id, tag ``d``, body the decimal
  queue offset of the half message it ends. Its stored properties are ``WAIT=true`` and
  ``TAGS=d``: RocketMQ fixes the properties string while its map holds those two (HashMap order
  puts WAIT first) and only then adds WAIT=false and a UNIQ_KEY to the map.
* commit (:func:`commit_message`, EndTransactionProcessor.endMessageTransaction): the half
  message re-put to its real topic and queue, sysFlag TRANSACTION_COMMIT_TYPE,
  preparedTransactionOffset the half message's CommitLog offset. RocketMQ stores the half
  message's properties string unchanged, so ``REAL_TOPIC``, ``REAL_QID`` and ``TRAN_MSG=true``
  stay on the committed message (clearing them touches only the map, after the string was made).
* put-back (:func:`renew_half_message`, renewHalfMessageInner): a half message appended again to
  the half queue when it is checked, with ``TRANSACTION_CHECK_TIMES`` counting the checks, so the
  queue itself records the check count. As in RocketMQ the copy keeps neither the flag nor the
  reconsume count (the record's fields are 0), and a later commit copies that.
* discard (:func:`discard_message`, DefaultTransactionalMessageCheckListener): a half message
  checked ``transactionCheckMax`` times moves to ``TRANS_CHECK_MAX_TIME_TOPIC`` (1 queue).

Progress lives in the consumer offsets of group ``CID_RMQ_SYS_TRANS`` on the half and op topics
(``consumerOffset.json``), so after a restart the check pass resumes where it was.

Threading: :class:`TransactionalMessageBridge`'s calls block (store reads, and puts that wait for
a SYNC_FLUSH), except :meth:`~TransactionalMessageBridge.put_op_message`, which never waits for a
flush and runs on the loop (END_TRANSACTION).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rocketstore.client.consumer import PullStatus
from rocketstore.common.clock import now_ms
from rocketstore.common.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
    HostAddress,
    Message,
    StoredMessage,
    SysFlag,
    decode_record,
    encode_message,
    stamp_record,
    with_host_flags,
)
from rocketstore.common.mix_all import CID_SYS_RMQ_TRANS
from rocketstore.common.perm_name import PERM_READ, PERM_WRITE
from rocketstore.common.topic_config import TopicConfig
from rocketstore.common.topic_validator import (
    RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
    RMQ_SYS_TRANS_OP_HALF_TOPIC,
)
from rocketstore.store.commit_log import PROPERTY_WAIT_STORE_MSG_OK, PutMessageResult
from rocketstore.store.config_manager import ConsumerOffsetManager
from rocketstore.store.message_store import DefaultMessageStore
from rocketstore.store.status import GetMessageStatus, PutMessageStatus

log = logging.getLogger(__name__)

#: TransactionalMessageUtil.REMOVETAG: the tag of an op message (the half message is done).
REMOVE_TAG = "d"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"

#: Queues of TRANS_CHECK_MAX_TIME_TOPIC (AbstractTransactionalMessageCheckListener.TCMT_QUEUE_NUMS).
TCMT_QUEUE_NUMS = 1

_PULL_STATUS = {
    GetMessageStatus.FOUND: PullStatus.FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
}


def reset_transaction_value(sys_flag: int, transaction_type: int) -> int:
    """MessageSysFlag.resetTransactionValue: ``sys_flag`` with its transaction bits replaced."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | transaction_type


def real_queue(half: StoredMessage) -> tuple[str, int]:
    """The topic and queue a half message was sent to; ValueError when it does not say (not a
    half message, or a damaged one)."""
    topic = half.properties.get(PROPERTY_REAL_TOPIC)
    queue = half.properties.get(PROPERTY_REAL_QUEUE_ID)
    if not topic or queue is None:
        raise ValueError(f"the message at CommitLog offset {half.physical_offset} (topic {half.topic}) "
                         f"has no {PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QUEUE_ID}: not a half message")
    try:
        return topic, int(queue)
    except ValueError:
        raise ValueError(f"the half message at CommitLog offset {half.physical_offset} has "
                         f"{PROPERTY_REAL_QUEUE_ID}={queue!r}, not a queue id") from None


def half_message(msg: Message) -> Message:
    """The half message stored for a prepared send of ``msg`` (parseHalfMessageInner)."""
    properties = dict(msg.properties)
    properties[PROPERTY_REAL_TOPIC] = msg.topic
    properties[PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=RMQ_SYS_TRANS_HALF_TOPIC, queue_id=0, properties=properties,
                               sys_flag=reset_transaction_value(msg.sys_flag, TRANSACTION_NOT_TYPE))


def commit_message(half: StoredMessage) -> Message:
    """The message a commit puts on the real topic (endMessageTransaction and what
    EndTransactionProcessor sets on it); ValueError if ``half`` is not a half message."""
    topic, queue_id = real_queue(half)
    return Message(
        topic=topic, body=half.body, queue_id=queue_id, flag=half.flag, properties=dict(half.properties),
        sys_flag=reset_transaction_value(half.sys_flag, SysFlag.TRANSACTION_COMMIT),
        born_timestamp=half.born_timestamp, born_host=half.born_host, store_host=half.store_host,
        reconsume_times=half.reconsume_times, prepared_transaction_offset=half.physical_offset,
    )


def op_message(half_queue_offset: int, queue_id: int, store_host: HostAddress, born_timestamp: int) -> Message:
    """The op record ending the half message at ``half_queue_offset`` (see the module docstring)."""
    return Message(
        topic=RMQ_SYS_TRANS_OP_HALF_TOPIC, body=str(half_queue_offset).encode(), queue_id=queue_id,
        properties={PROPERTY_WAIT_STORE_MSG_OK: "true", PROPERTY_TAGS: REMOVE_TAG}, sys_flag=0,
        born_timestamp=born_timestamp, born_host=store_host, store_host=store_host,
    )


def renew_half_message(half: StoredMessage, *, immunity: bool = False) -> Message:
    """``half`` appended again to the half queue (renewHalfMessageInner), with its current
    properties. ``immunity`` (renewImmunityHalfMessageInner) also records where the first copy
    sits, in ``TRAN_PREPARED_QUEUE_OFFSET``, so an op record for it still ends the copy."""
    properties = dict(half.properties)
    if immunity:
        properties.setdefault(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET, str(half.queue_offset))
    return Message(topic=half.topic, body=half.body, queue_id=half.queue_id, properties=properties,
                   sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
                   store_host=half.store_host)


def discard_message(half: StoredMessage) -> Message:
    """A half message checked too often, as put to TRANS_CHECK_MAX_TIME_TOPIC (toMessageExtBrokerInner)."""
    return Message(topic=RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, body=half.body, queue_id=0, flag=half.flag,
                   properties=dict(half.properties), sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
                   born_host=half.born_host, store_host=half.store_host, reconsume_times=half.reconsume_times)


def check_request_body(half: StoredMessage) -> bytes:
    """CHECK_TRANSACTION_STATE's body: the half message as a record of its real topic and queue,
    with the half queue's offsets (MessageDecoder.encode of the restored MessageExt). The producer
    answers with these offsets, so they must be those of the copy being checked."""
    topic, queue_id = real_queue(half)
    record = encode_message(Message(
        topic=topic, body=half.body, queue_id=queue_id, flag=half.flag, properties=half.properties,
        sys_flag=half.sys_flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
        store_host=half.store_host, reconsume_times=half.reconsume_times,
        prepared_transaction_offset=half.prepared_transaction_offset,
    ))
    sys_flag = with_host_flags(half.sys_flag, half.born_host, half.store_host)
    stamp_record(record, 0, half.queue_offset, half.physical_offset, half.store_timestamp, sys_flag)
    return bytes(record)


@dataclass(slots=True)
class PullResult:
    """A read of the half or op queue, as the check pass sees it (RocketMQ's PullResult)."""

    status: PullStatus
    next_begin_offset: int
    messages: list[StoredMessage] | None = None


class TransactionalMessageBridge:
    """Store access for the transaction service: the two queues, their offsets, the puts."""

    def __init__(self, store: DefaultMessageStore, offsets: ConsumerOffsetManager,
                 create_topic: Callable[[str, int, int, int], TopicConfig],
                 store_host: Callable[[], HostAddress]) -> None:
        self.store = store
        self.offsets = offsets
        self._create_topic = create_topic  # createTopicInSendMessageBackMethod
        self._store_host = store_host  # read at use: the port is known only once the broker listens

    def half_queue_ids(self) -> range:
        """fetchMessageQueues(half topic): its read queues, the topic created (1 queue) if missing."""
        config = self._create_topic(RMQ_SYS_TRANS_HALF_TOPIC, 1, PERM_WRITE | PERM_READ, 0)
        return range(config.read_queue_nums)

    def fetch_consume_offset(self, topic: str, queue_id: int) -> int:
        """The group's offset on the queue, else the queue's first offset (0 for a queue with no
        messages yet: RocketMQ's getMinOffsetInQueue creates a missing queue, ours answers -1)."""
        offset = self.offsets.query_offset(CID_SYS_RMQ_TRANS, topic, queue_id)
        return max(self.store.get_min_offset_in_queue(topic, queue_id), 0) if offset == -1 else offset

    def half_pending(self, queue_ids: Iterable[int]) -> int:
        """Half messages at or past the check's offset in the half queues ``queue_ids``: those no
        check pass has found resolved yet (a message put back to wait is counted once, where it now
        is). They are committed, rolled back or checked on this broker only."""
        return sum(max(self.store.get_max_offset_in_queue(RMQ_SYS_TRANS_HALF_TOPIC, q)
                       - self.fetch_consume_offset(RMQ_SYS_TRANS_HALF_TOPIC, q), 0) for q in queue_ids)

    def update_consume_offset(self, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit_offset(CID_SYS_RMQ_TRANS, topic, queue_id, offset)

    def get_messages(self, topic: str, queue_id: int, offset: int, nums: int) -> PullResult:
        """Up to ``nums`` messages of the half or op queue from ``offset`` (getMessage)."""
        got = self.store.get_message(CID_SYS_RMQ_TRANS, topic, queue_id, offset, nums)
        status = _PULL_STATUS.get(got.status, PullStatus.OFFSET_ILLEGAL)
        if status is not PullStatus.FOUND:
            return PullResult(status, got.next_begin_offset)
        messages = []
        for data in got.messages:
            decoded = decode_record(data, 0, check_crc=False)
            if isinstance(decoded, StoredMessage):
                messages.append(decoded)
            else:
                log.error("unreadable record in %s-%d near offset %d: %s", topic, queue_id, offset, decoded)
        return PullResult(status, got.next_begin_offset, messages)

    def look_message_by_offset(self, commit_log_offset: int) -> StoredMessage | None:
        return self.store.look_message_by_offset(commit_log_offset)

    def put_message(self, msg: Message) -> PutMessageResult:
        """A put that, with SYNC_FLUSH, returns once durable (blocks: call it off the loop)."""
        return self.store.put_message(msg)

    def put_discarded(self, half: StoredMessage) -> bool:
        """Move a half message checked too often to TRANS_CHECK_MAX_TIME_TOPIC (blocks)."""
        self._create_topic(RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC, TCMT_QUEUE_NUMS, PERM_READ | PERM_WRITE, 0)
        result = self.store.put_message(discard_message(half))
        if result.status is not PutMessageStatus.PUT_OK:
            log.error("moving half message %s to %s failed: %s", half.uniq_key, RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC,
                      result.status.name)
            return False
        return True

    def put_op_message(self, half: StoredMessage) -> PutMessageResult:
        """Write the op record ending ``half`` (deletePrepareMessage); never waits for a flush."""
        msg = op_message(half.queue_offset, half.queue_id, self._store_host(), now_ms())
        result = self.store.put_message(msg, wait_flush=False)
        if not result.ok:
            log.error("writing the op record of half message %s (queue offset %d) failed: %s",
                      half.uniq_key, half.queue_offset, result.status.name)
        return result
