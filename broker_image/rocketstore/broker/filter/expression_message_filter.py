"""ExpressionMessageFilter: a SQL92 subscription as the store's MessageFilter.

RocketMQ's ExpressionMessageFilter lets every ConsumeQueue entry through (without bloom-filter
bit maps there is nothing to decide on) and evaluates the compiled expression on the message's
properties once the CommitLog record is read. The evaluation context is the property map as
stored, so ``TAGS`` and ``KEYS`` are properties like any other (MessageEvaluationContext).
Only a TRUE result delivers the message; FALSE, unknown (a missing property) and an evaluation
error filter it out (RocketMQ logs the error; here it is counted and logged at debug level).
"""

from __future__ import annotations

import logging

from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterData, ConsumerFilterManager, FilterStats
from rocketstore.broker.processor.send_back import PROPERTY_RETRY_TOPIC
from rocketstore.common.filter import EvaluationError
from rocketstore.common.message import StoredMessage, decode_record
from rocketstore.store.message_store import MessageFilter

log = logging.getLogger(__name__)


def _properties(record: bytes) -> dict[str, str]:
    decoded = decode_record(record, check_crc=False, read_body=False)
    return decoded.properties if isinstance(decoded, StoredMessage) else {}


class ExpressionMessageFilter:
    """Matches CommitLog records against one compiled SQL92 subscription, counting in ``stats``."""

    def __init__(self, filter_data: ConsumerFilterData, stats: FilterStats) -> None:
        self.filter_data = filter_data
        self.stats = stats

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        return self.matches(_properties(record))

    def matches(self, properties: dict[str, str]) -> bool:
        stats = self.stats
        stats.evaluations += 1
        try:
            matched = self.filter_data.selector.evaluate(properties) is True
        except EvaluationError as exc:
            stats.errors += 1
            log.debug("message filter error, group=%s topic=%s expression=%r properties=%s: %s",
                      self.filter_data.consumer_group, self.filter_data.topic, self.filter_data.expression,
                      properties, exc)
            return False
        if matched:
            stats.matched += 1
        return matched


class ExpressionForRetryMessageFilter:
    """``filterSupportRetry``: a pull of a group's retry topic (``%RETRY%group``, subscribed with
    a tag expression) also applies the group's SQL92 subscription of each message's original
    topic (its RETRY_TOPIC property), as RocketMQ's ExpressionForRetryMessageFilter does, so a
    message sent back for a retry is not redelivered after the group's selector changed to
    exclude it. A message whose original topic has no SQL92 subscription passes."""

    def __init__(self, tag_filter: MessageFilter, group: str, manager: ConsumerFilterManager) -> None:
        self.tag_filter = tag_filter
        self.group = group
        self.manager = manager

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return self.tag_filter.is_matched_by_consume_queue(tags_code)

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        properties = _properties(record)
        real_topic = properties.get(PROPERTY_RETRY_TOPIC)
        filter_data = self.manager.get(real_topic, self.group) if real_topic else None
        if filter_data is None:
            return True
        return ExpressionMessageFilter(filter_data, self.manager.stats).matches(properties)
