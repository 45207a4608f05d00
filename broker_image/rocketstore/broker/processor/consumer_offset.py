"""Consumer offsets and queue offsets: codes 14, 15, 29, 30, 31, 32 and 43.

QUERY_CONSUMER_OFFSET (14)      the group's committed offset. When the group has none, RocketMQ's
                                ConsumerManageProcessor answers offset 0 if the queue still
                                starts at 0 (min offset <= 0) and its first message is not "in
                                disk" (still within accessMessageInMemoryMaxRatio of the CommitLog
                                head), so a new group on a young queue starts from the beginning;
                                otherwise QUERY_NOT_FOUND (22), and the client applies its
                                consumeFromWhere.
UPDATE_CONSUMER_OFFSET (15)     commit an offset (clients send it one-way every 5 s).
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32) the store's answers, always SUCCESS, as AdminBrokerProcessor.
GET_ALL_CONSUMER_OFFSET (43)    the whole offset table as consumerOffset.json's JSON (slaves sync
                                with it), ``{"offsetTable":{}}`` when empty, as 4.9.7 answers.
                                On a SLAVE, commits are also noted for SlaveSynchronize, which
                                hands them to the master once it is back (slave_synchronize.py).

Committed offsets live in memory and are persisted by the broker's periodic flush
(``flushConsumerOffsetInterval``) and at shutdown, as RocketMQ does.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.server import Connection, Handler
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rocketstore.store.config import BrokerRole


def query_consumer_offset(broker: BrokerContext, header: QueryConsumerOffsetRequestHeader) -> int | None:
    """The offset QUERY_CONSUMER_OFFSET answers, or None for QUERY_NOT_FOUND."""
    offset = broker.consumer_offset_manager.query_offset(header.consumer_group, header.topic, header.queue_id)
    if offset >= 0:
        return offset
    store = broker.store
    if (store.get_min_offset_in_queue(header.topic, header.queue_id) <= 0
            and not store.check_in_disk_by_consume_offset(header.topic, header.queue_id, 0)):
        return 0
    return None


class ConsumerOffsetProcessor:
    """Committed and stored offsets (RocketMQ splits these between ConsumerManageProcessor and
    AdminBrokerProcessor)."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> Mapping[int, Handler]:
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_time,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_offsets,
        }

    def query_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = query_consumer_offset(self.broker, header)
        if offset is None:
            return request.response(ResponseCode.QUERY_NOT_FOUND,
                                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        return request.response(ResponseCode.SUCCESS,
                                ext_fields=QueryConsumerOffsetResponseHeader(offset=offset).to_ext_fields())

    def update_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        self.broker.consumer_offset_manager.commit_offset(header.consumer_group, header.topic, header.queue_id,
                                                          header.commit_offset)
        if self.broker.store_config.broker_role is BrokerRole.SLAVE:
            self.broker.slave_synchronize.committed_on_slave(header.consumer_group, header.topic, header.queue_id)
        return request.response(ResponseCode.SUCCESS)

    def search_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.store.get_offset_in_queue_by_time(header.topic, header.queue_id, header.timestamp)
        return request.response(ResponseCode.SUCCESS,
                                ext_fields=SearchOffsetResponseHeader(offset=offset).to_ext_fields())

    def max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.broker.store.get_max_offset_in_queue(header.topic, header.queue_id)
        return request.response(ResponseCode.SUCCESS,
                                ext_fields=GetMaxOffsetResponseHeader(offset=offset).to_ext_fields())

    def min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
        # RocketMQ creates a missing consume queue on this lookup and answers its min offset, 0
        offset = max(self.broker.store.get_min_offset_in_queue(header.topic, header.queue_id), 0)
        return request.response(ResponseCode.SUCCESS,
                                ext_fields=GetMinOffsetResponseHeader(offset=offset).to_ext_fields())

    def earliest_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetEarliestMsgStoretimeRequestHeader.from_ext_fields(request.ext_fields)
        timestamp = self.broker.store.get_earliest_message_time(header.topic, header.queue_id)
        return request.response(ResponseCode.SUCCESS,
                                ext_fields=GetEarliestMsgStoretimeResponseHeader(timestamp=timestamp).to_ext_fields())

    def all_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The whole table; an empty one too (``{"offsetTable":{}}``): 4.9.7's getAllConsumerOffset
        answers SYSTEM_ERROR only when encode() gives nothing, which it never does, so a slave's
        SlaveSynchronize of a master without offsets succeeds."""
        return request.response(ResponseCode.SUCCESS, body=self.broker.consumer_offset_manager.encode().encode())
