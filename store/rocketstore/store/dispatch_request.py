"""DispatchRequest: RocketMQ's per-record dispatch input, for code that indexes one record at a time.

Live dispatch works a pass at a time (:mod:`rocketstore.store.dispatch_scan`); this is what
:meth:`rocketstore.store.index_file.IndexService.build_index` takes when a caller has one record
(the pipeline's offline reindex, tests).
"""

from __future__ import annotations

from dataclasses import dataclass


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
