"""DispatchRequest: what ReputMessageService hands each dispatcher for one CommitLog record.

It lives in the store, not beside the record codec in :mod:`rocketstore.common.message`,
because only the store's dispatchers (ConsumeQueue, IndexFile, arrival listeners) consume it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocketstore.common.message import StoredMessage, tags_code


@dataclass(slots=True)  # not frozen: built per message, and frozen init costs a setattr per field
class DispatchRequest:
    """What dispatch needs from one record: enough to build the ConsumeQueue entry and index keys."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int
    properties: dict[str, str]


def to_dispatch_request(msg: StoredMessage) -> DispatchRequest:
    """What dispatch needs of a decoded record."""
    return DispatchRequest(
        topic=msg.topic,
        queue_id=msg.queue_id,
        commit_log_offset=msg.physical_offset,
        msg_size=msg.total_size,
        tags_code=tags_code(msg.tags),
        store_timestamp=msg.store_timestamp,
        consume_queue_offset=msg.queue_offset,
        keys=msg.keys or "",
        uniq_key=msg.uniq_key,
        sys_flag=msg.sys_flag,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        properties=msg.properties,
    )
