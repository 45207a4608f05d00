"""END_TRANSACTION (37): a producer commits or rolls back a half message (EndTransactionProcessor).

The header names the half message by CommitLog offset, with its half queue offset and producer
group; all three must match the stored message (checkPrepareMessage), else SYSTEM_ERROR.

* commit: the message is put to its real topic and queue (sysFlag TRANSACTION_COMMIT_TYPE, see
  :func:`~rocketstore.broker.transaction.bridge.commit_message`), then an op record ends the half
  message. A put that fails answers its error and writes no op record, so the half message is
  checked later. With SYNC_FLUSH the answer waits until both are durable (RocketMQ's put blocks
  for the flush; the op record, appended after the commit, covers both).
* rollback: only the op record.
* TRANSACTION_NOT_TYPE (the producer does not know yet) and any other value: no response, as in
  RocketMQ; the check pass asks again later.

``fromTransactionCheck`` (an answer to CHECK_TRANSACTION_STATE) changes only what is logged.
Java producers send END_TRANSACTION one-way, so the response is mostly for other clients; a slave
answers SLAVE_NOT_AVAILABLE. As in RocketMQ nothing stops a second commit of the same half
message from putting it twice: producers answer once per check.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.processor.send import put_status_response, put_waits, wait_until_stored
from rocketstore.broker.server import Connection, Handler, Reply
from rocketstore.broker.transaction.bridge import PROPERTY_PRODUCER_GROUP, commit_message
from rocketstore.common.message import StoredMessage, SysFlag
from rocketstore.common.topic_validator import RMQ_SYS_TRANS_HALF_TOPIC
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import EndTransactionRequestHeader
from rocketstore.store.commit_log import PutMessageResult
from rocketstore.store.config import BrokerRole

log = logging.getLogger(__name__)

#: END_TRANSACTION's commitOrRollback values that end a transaction (MessageSysFlag's types)
_KIND = {SysFlag.TRANSACTION_COMMIT: "commit", SysFlag.TRANSACTION_ROLLBACK: "rollback"}


def check_prepare_message(half: StoredMessage | None, header: EndTransactionRequestHeader) -> str | None:
    """Why the stored message cannot be the one the header ends (checkPrepareMessage), or None."""
    if half is None or half.topic != RMQ_SYS_TRANS_HALF_TOPIC:
        return "Find prepared transaction message failed"
    if half.properties.get(PROPERTY_PRODUCER_GROUP) != header.producer_group:
        return "The producer group wrong"
    if half.queue_offset != header.tran_state_table_offset:
        return "The transaction state table offset wrong"
    if half.physical_offset != header.commit_log_offset:
        return "The commit log offset wrong"
    return None


class EndTransactionProcessor:
    """Registered for END_TRANSACTION."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        service = broker.transactional_message_service
        self.bridge = service.bridge
        self.metrics = service.metrics

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.END_TRANSACTION: self.handle}

    def handle(self, conn: Connection, request: RemotingCommand) -> Reply:
        header = EndTransactionRequestHeader.from_ext_fields(request.ext_fields)
        if self.broker.store_config.broker_role is BrokerRole.SLAVE:
            return request.response(ResponseCode.SLAVE_NOT_AVAILABLE, "end transaction is forbidden on a slave")
        kind = _KIND.get(header.commit_or_rollback)
        source = "check answer" if header.from_transaction_check else "end"
        if kind is None:
            log.info("transaction %s of %s from %s: state %d (still pending or unknown), nothing done",
                     source, header.msg_id, conn.peer, header.commit_or_rollback)
            return None
        log.info("transaction %s of %s from %s: %s", source, header.msg_id, conn.peer, kind)
        half = self.bridge.look_message_by_offset(header.commit_log_offset)
        refusal = check_prepare_message(half, header)
        if refusal is not None:
            return request.response(ResponseCode.SYSTEM_ERROR, refusal)
        assert half is not None
        if header.commit_or_rollback == SysFlag.TRANSACTION_ROLLBACK:
            if self.bridge.put_op_message(half).ok:
                self.metrics.rollbacks += 1
            return request.response(ResponseCode.SUCCESS, None)
        return self._commit(request, half)

    def _commit(self, request: RemotingCommand, half: StoredMessage) -> Reply:
        try:
            msg = commit_message(half)
        except ValueError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        store = self.broker.store
        result = store.put_message(msg, wait_flush=False)
        if not result.ok:
            code, remark = put_status_response(self.broker, result.status)
            return request.response(code, remark)
        op = self.bridge.put_op_message(half)
        self.metrics.commits += 1
        flush, replica = put_waits(self.broker.store_config, msg.properties)
        if flush or replica:
            return self._answer_when_stored(request, op if op.ok else result, flush=flush, replica=replica)
        return request.response(ResponseCode.SUCCESS, None)

    async def _answer_when_stored(self, request: RemotingCommand, last: PutMessageResult, *, flush: bool,
                                  replica: bool) -> RemotingCommand:
        """sendFinalMessage waits for the store (durable, on a slave: up to ``last``, the op record
        appended after the final message) and counts a flush or slave timeout, or no slave, as
        success: the message is stored here."""
        await wait_until_stored(self.broker, last, flush=flush, replica=replica)
        return request.response(ResponseCode.SUCCESS, None)
