"""VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12): reading messages outside the queues.

VIEW_MESSAGE_BY_ID   ``offset`` is a CommitLog physical offset (the tail of an offset message
                     id; the client decodes the id and connects to the broker it names). The
                     answer's body is that one raw record; an offset with no record behind it is
                     SYSTEM_ERROR "can not find message by the offset, N", as in RocketMQ.
QUERY_MESSAGE        messages of ``topic`` whose key (KEYS) or unique key (UNIQ_KEY) is ``key``
                     and whose store time is within [beginTimestamp, endTimestamp], through the
                     index files. When extFields carry ``_UNIQUE_KEY_QUERY=true`` the client is
                     resolving a unique message id and ``maxNum`` becomes the store's
                     ``defaultQueryMaxNum``, as RocketMQ's QueryMessageProcessor does. The body is
                     the raw records back to back; none found is QUERY_NOT_FOUND. Both answers
                     carry indexLastUpdateTimestamp / indexLastUpdatePhyoffset.

Index lookups may read cold index files, so QUERY_MESSAGE runs in a worker thread; a view by
offset reads one record from the mapped CommitLog and stays on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from rocketstore.broker.broker_context import BrokerContext
from rocketstore.broker.server import Connection, Handler
from rocketstore.common.message import StoredMessage, decode_record
from rocketstore.remoting.codes import RequestCode, ResponseCode
from rocketstore.remoting.command import RemotingCommand
from rocketstore.remoting.headers import QueryMessageRequestHeader, QueryMessageResponseHeader, ViewMessageRequestHeader
from rocketstore.store.message_store import DefaultMessageStore


def read_record(store: DefaultMessageStore, offset: int) -> bytes | None:
    """The raw record starting at CommitLog ``offset``, or None when there is no message there."""
    if offset < 0:
        return None
    head = store.select_one_message_by_offset(offset, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big", signed=True)
    if size <= 0:
        return None
    data = store.select_one_message_by_offset(offset, size)
    if data is None or not isinstance(decode_record(data, 0, check_crc=False, read_body=False), StoredMessage):
        return None  # not the start of a record (an offset inside one, or a blank)
    return data


def _query(store: DefaultMessageStore, header: QueryMessageRequestHeader, max_num: int) -> tuple[list[bytes], int, int]:
    result = store.query_message(header.topic, header.key, max_num, header.begin_timestamp, header.end_timestamp)
    records = [
        data for msg in result.messages
        if (data := store.select_one_message_by_offset(msg.physical_offset, msg.total_size)) is not None
    ]
    return records, result.index_last_update_timestamp, result.index_last_update_phyoffset


class QueryMessageProcessor:
    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker

    def handlers(self) -> Mapping[int, Handler]:
        return {RequestCode.VIEW_MESSAGE_BY_ID: self.view_message, RequestCode.QUERY_MESSAGE: self.query_message}

    def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        data = read_record(self.broker.store, header.offset)
        if data is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}")
        return request.response(ResponseCode.SUCCESS, body=data)

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        max_num = header.max_num
        if header.unique_key_query:
            max_num = self.broker.store_config.default_query_max_num
        records, index_ts, index_phy = await asyncio.to_thread(_query, self.broker.store, header, max_num)
        fields = QueryMessageResponseHeader(index_last_update_timestamp=index_ts,
                                           index_last_update_phyoffset=index_phy).to_ext_fields()
        if not records:
            return request.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct",
                                    fields)
        return request.response(ResponseCode.SUCCESS, None, fields, b"".join(records))
