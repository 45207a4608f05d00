"""``rocketstore store dump``: the records of a store's CommitLog, filtered, read without changing it."""

from __future__ import annotations

from collections.abc import Iterator

from rocketstore.common.message import KEY_SEPARATOR, StoredMessage, decode_record
from rocketstore.store.config import StoreConfig
from rocketstore.store.store_view import StoreView

__all__ = ["dump_messages"]


def dump_messages(
    config: StoreConfig,
    *,
    topic: str | None = None,
    queue_id: int | None = None,
    start_offset: int | None = None,
    end_offset: int | None = None,
    key: str | None = None,
) -> Iterator[StoredMessage]:
    """The records of the CommitLog in physical order, with their bodies, filtered.

    ``start_offset`` / ``end_offset`` bound the physical offset (start inclusive, end
    exclusive); ``key`` matches one of the KEYS values or the UNIQ_KEY. Records are decoded
    without the CRC check (``verify_store`` is for that) so a damaged store can still be read;
    undecodable bytes skip to the next segment. Raises
    :class:`~rocketstore.store.store_view.NotAStoreError` at once, not at the first ``next``.
    """
    store = StoreView(config)
    segments = store.segments()

    def generate() -> Iterator[StoredMessage]:
        with store.commit_log(segments) as view:
            start_index = 0 if start_offset is None else view.segment_index(start_offset)
            for step in view.walk(start_index, check_crc=False, read_body=False):
                msg = step.message
                if step.kind != "record" or msg is None:
                    continue
                at = step.offset
                if start_offset is not None and at < start_offset:
                    continue
                if end_offset is not None and at >= end_offset:
                    return
                if topic is not None and msg.topic != topic:
                    continue
                if queue_id is not None and msg.queue_id != queue_id:
                    continue
                if key is not None and key != msg.uniq_key and key not in (msg.keys or "").split(KEY_SEPARATOR):
                    continue
                full = decode_record(view.mapping(step.segment) or b"", step.pos, check_crc=False)
                if isinstance(full, StoredMessage):
                    yield full

    return generate()
