"""The check listener (RocketMQ's AbstractTransactionalMessageCheckListener and its default
subclass): what a check pass does with a half message to check and with one checked too often.

Check: a one-way ``CHECK_TRANSACTION_STATE`` (39) to one live connection of the message's
producer group (``PGROUP``), taken in turn among the group's connections; header
CheckTransactionStateRequestHeader with the offsets of the copy just appended to the half queue,
body the message as a record of its real topic and queue (Broker2Client.checkProducerTransactionState).
The producer answers with END_TRANSACTION, ``fromTransactionCheck=true``. With no producer of the
group online nothing is sent; the copy waits for the next pass, where it counts as checked once
more, as in RocketMQ.

Discard: the half message goes to ``TRANS_CHECK_MAX_TIME_TOPIC``.

The pass runs in a worker thread; the producer table and the connections belong to the loop, so
the check request is built in the thread and handed to the loop to send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from rocketstore.broker.client_manager import ProducerManager
from rocketstore.broker.transaction.bridge import (
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    check_request_body,
    real_queue,
)
from rocketstore.broker.transaction.service import TransactionalMessageService
from rocketstore.common.message import StoredMessage
from rocketstore.remoting.codes import RequestCode
from rocketstore.remoting.headers import CheckTransactionStateRequestHeader

log = logging.getLogger(__name__)


class TransactionalMessageCheckListener:
    """Sends checks to producers and discards messages checked too often."""

    def __init__(self, service: TransactionalMessageService, producer_manager: ProducerManager,
                 loop: Callable[[], asyncio.AbstractEventLoop | None]) -> None:
        self.service = service
        self.producer_manager = producer_manager
        self._loop = loop

    def resolve_half_msg(self, msg: StoredMessage) -> None:
        """Ask a producer of the message's group about it (called in the pass's thread)."""
        group = msg.properties.get(PROPERTY_PRODUCER_GROUP)
        try:
            real_queue(msg)
        except ValueError as exc:
            log.error("transaction check skipped: %s", exc)
            return
        uniq_key = msg.uniq_key
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=msg.queue_offset, commit_log_offset=msg.physical_offset, msg_id=uniq_key,
            transaction_id=uniq_key, offset_msg_id=msg.msg_id)
        body = check_request_body(msg)
        loop = self._loop()
        if group is None or loop is None or loop.is_closed():
            log.warning("transaction check of %s not sent: producer group %s", uniq_key, group)
            return
        loop.call_soon_threadsafe(self._send_check, group, header, body)

    def _send_check(self, group: str, header: CheckTransactionStateRequestHeader, body: bytes) -> None:
        conn = self.producer_manager.available_channel(group)
        if conn is None:
            log.warning("transaction check of %s not sent: no producer of group %s online", header.msg_id, group)
            return
        conn.notify(RequestCode.CHECK_TRANSACTION_STATE, header.to_ext_fields(), body)
        self.service.metrics.checks += 1
        log.info("transaction check of %s (half queue offset %d) sent to %s of group %s", header.msg_id,
                 header.tran_state_table_offset, conn.peer, group)

    def resolve_discard_msg(self, msg: StoredMessage) -> None:
        """Move a message checked ``transactionCheckMax`` times out of the half queue (in the pass's thread)."""
        log.error("half message %s was checked %s times: moved to TRANS_CHECK_MAX_TIME_TOPIC", msg.uniq_key,
                  msg.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES))
        if self.service.bridge.put_discarded(msg):
            self.service.metrics.discarded += 1
