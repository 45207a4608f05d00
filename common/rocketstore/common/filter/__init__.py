"""RocketMQ 4.9.8's SQL92 message filter: the selector grammar (:mod:`.selector_parser`) and the
evaluation of a compiled selector against a message's properties (:mod:`.expression`).

Pure code, no I/O: the broker compiles a consumer's expression once and evaluates it per message
(rocketstore.broker.filter).
"""

from rocketstore.common.filter.expression import EvaluationError
from rocketstore.common.filter.selector_parser import Selector, SelectorSyntaxError, parse

#: ExpressionType.SQL92, the subscription expression type a SQL selector carries
SQL92 = "SQL92"
#: ExpressionType.TAG
TAG = "TAG"


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: no type, an empty one or "TAG" (case-sensitive, as in RocketMQ)."""
    return not expression_type or expression_type == TAG


__all__ = ["SQL92", "TAG", "EvaluationError", "Selector", "SelectorSyntaxError", "is_tag_type", "parse"]
