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

from rocketstore.broker.filter.consumer_filter_manager import ConsumerFilterData, FilterStats
from rocketstore.common.filter import EvaluationError
from rocketstore.common.message import StoredMessage, decode_record

log = logging.getLogger(__name__)


class ExpressionMessageFilter:
    """Matches CommitLog records against one compiled SQL92 subscription, counting in ``stats``."""

    def __init__(self, filter_data: ConsumerFilterData, stats: FilterStats) -> None:
        self.filter_data = filter_data
        self.stats = stats

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        decoded = decode_record(record, check_crc=False, read_body=False)
        properties = decoded.properties if isinstance(decoded, StoredMessage) else {}
        return self.matches(properties)

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
