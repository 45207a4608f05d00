"""ConsumerFilterManager: compiled SQL92 subscriptions by (topic, consumer group).

RocketMQ 4.9.8 compiles a consumer's non-tag expression when its heartbeat registers the
subscription (ConsumerFilterManager.register, via the REGISTER consumer-ids event) and, for a
pull carrying its own subscription, per request (ConsumerFilterManager.build). A registration
whose expression does not compile keeps no filter data, and the pull is then answered
FILTER_DATA_NOT_EXIST.

Here the registered subscriptions stay where the heartbeat put them (the ConsumerManager), and
this manager compiles on demand, once per (group, topic, expression type, expression): the cache
holds the compiled selector, or the syntax error, so neither a heartbeat every 30 s nor a pull
per message parses again. The cache is bounded (least recently used out) because a pull may
carry any expression.

Not kept from RocketMQ: the bloom-filter bit maps in the ConsumeQueue extension
(``enableCalcFilterBitMap``, off by default there too; every message is evaluated instead) and
``config/consumerFilter.json``, whose only use is that bloom data; after a restart consumers
re-register by heartbeat within 30 s.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from rocketstore.broker.client_manager import ConsumerManager
from rocketstore.common.filter import SQL92, Selector, SelectorSyntaxError, is_tag_type, parse
from rocketstore.remoting.body import SubscriptionData

log = logging.getLogger(__name__)

#: compiled expressions kept (RocketMQ's SelectorParser keeps 100 per JVM, its filter manager one
#: per registered (topic, group))
MAX_CACHED = 4096


@dataclass(frozen=True, slots=True)
class ConsumerFilterData:
    """One group's compiled expression on one topic."""

    consumer_group: str
    topic: str
    expression: str
    expression_type: str
    selector: Selector


@dataclass(slots=True)
class FilterStats:
    """Counters for /metrics: messages evaluated against a SQL92 subscription, how many matched,
    and how many evaluations failed (an unparsable number, a boolean compared with a string)."""

    evaluations: int = 0
    matched: int = 0
    errors: int = 0


def compile_expression(expression_type: str, expression: str | None) -> Selector:
    """The compiled selector for a non-tag subscription; SelectorSyntaxError says why not.

    Only SQL92 exists in 4.9.8's FilterFactory; another type fails here (RocketMQ fails on a null
    filter, with less to say).
    """
    if expression_type != SQL92:
        raise SelectorSyntaxError(expression or "", f"unsupported expression type {expression_type!r} (only SQL92)")
    if not expression:
        raise SelectorSyntaxError("", f"Expression can't be null! {expression_type}")
    return parse(expression)


class ConsumerFilterManager:
    """Compiled SQL92 subscriptions, looked up by (topic, group) as the pull processor needs them."""

    def __init__(self, consumer_manager: ConsumerManager, max_cached: int = MAX_CACHED) -> None:
        self.consumer_manager = consumer_manager
        self.max_cached = max_cached
        self.stats = FilterStats()
        self._cache: OrderedDict[tuple[str, str, str, str], ConsumerFilterData | SelectorSyntaxError] = OrderedDict()

    def build(self, topic: str, group: str, expression: str | None,
              expression_type: str) -> ConsumerFilterData | SelectorSyntaxError:
        """The compiled subscription (cached), or the syntax error it raised."""
        key = (group, topic, expression_type, expression or "")
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        try:
            selector = compile_expression(expression_type, expression)
            built: ConsumerFilterData | SelectorSyntaxError = ConsumerFilterData(
                group, topic, expression or "", expression_type, selector)
            if selector.ignored:
                log.warning("SQL92 subscription of group %s on topic %s: the text after the selector is ignored "
                            "(as RocketMQ ignores it): %r", group, topic, selector.ignored)
        except SelectorSyntaxError as exc:
            log.warning("parse error: group=%s topic=%s: %s", group, topic, exc)
            built = exc
        self._cache[key] = built
        if len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return built

    def get(self, topic: str, group: str) -> ConsumerFilterData | None:
        """The registered (heartbeat) subscription's compiled filter; None when the group has no
        non-tag subscription on the topic or its expression does not compile."""
        sub = self.consumer_manager.find_subscription_data(group, topic)
        if sub is None or is_tag_type(sub.expression_type):
            return None
        built = self.build(topic, group, sub.sub_string, sub.expression_type)
        return built if isinstance(built, ConsumerFilterData) else None

    def register(self, group: str, subscriptions: Iterable[SubscriptionData]) -> None:
        """Compile a heartbeat's non-tag subscriptions now, so a bad expression is logged when the
        consumer registers (as RocketMQ logs it) and the first pull finds the filter ready."""
        for sub in subscriptions:
            if not is_tag_type(sub.expression_type):
                self.build(sub.topic, group, sub.sub_string, sub.expression_type)
