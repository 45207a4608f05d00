"""The SQL92 selector's expression tree and its evaluation, with RocketMQ 4.9.8's value semantics.

RocketMQ's filter module (``org.apache.rocketmq.filter.expression``) evaluates a selector against
a message's properties, which are all strings, and compares them to literals that are Java
``Integer``, ``Long``, ``Double``, ``Boolean`` or ``String`` values. The outcome of a comparison
depends on those Java types, so the values here keep them:

========================  ==========================================================
Java                      Python
========================  ==========================================================
``null``                  ``None``
``Boolean``               ``bool``
``String``                ``str``
``Integer``               ``int``
``Long``                  :class:`JavaLong` (a literal outside the int range)
``Double``                ``float``
========================  ==========================================================

The rules, from ComparisonExpression / LogicExpression / UnaryExpression:

* a missing property is ``null``; any comparison with ``null`` is ``null`` (unknown), and a
  selector whose result is not ``TRUE`` does not match. ``=`` is the exception: ``null = null``
  is TRUE (that is how ``IS NULL`` works) and ``value = null`` is FALSE;
* AND / OR are three-valued (FALSE AND unknown is FALSE, TRUE OR unknown is TRUE);
* values of different types are converted before comparing (``__compare``): a number widens to
  the other side's number type (``Long`` to ``Double`` rounds, as Java's cast does); a string
  facing a number is parsed as that number type (``Integer.valueOf``, ``Long.valueOf`` or
  ``Double.valueOf``), a string facing a boolean is ``Boolean.valueOf``; a failed parse is an
  evaluation error. Any other mix compares as "less than" (so ``=`` is FALSE, ``<>`` TRUE);
* ``> >= < <=`` on two strings parse both as doubles (``'10' > '9'`` is TRUE), else fail;
* ``TRUE = 'x'`` (a boolean on the left, a string on the right) fails with a ClassCastException
  in RocketMQ: an evaluation error here too;
* IN / NOT IN test a string property against string literals; a non-string is unknown;
* unary minus of a non-number is ``null``; a property used as a condition (``a AND b``) is
  TRUE only when its value is a boolean TRUE, which a string property never is.

An evaluation error (:class:`EvaluationError`) means "no match" to the broker, as RocketMQ's
ExpressionMessageFilter logs the exception and filters the message out.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: what a selector evaluates to: TRUE, FALSE or unknown (None)
Value = object


class JavaLong(int):
    """A Java ``Long``: a decimal literal outside the int range (RocketMQ keeps smaller ones as
    ``Integer``). The distinction matters when a string is compared with it: the string is parsed
    with ``Long.valueOf`` rather than ``Integer.valueOf``, which accepts a wider range."""

    __slots__ = ()


class EvaluationError(Exception):
    """A comparison RocketMQ's evaluator throws on (a number that does not parse, a boolean
    compared with a string); the message is then not delivered to the subscription."""


INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# Integer.parseInt / Long.parseLong: an optional sign and decimal digits (Character.digit takes
# any Unicode decimal digit, as \d does); no blanks, no underscores.
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Double.valueOf (FloatingDecimal.readJavaFormatString): NaN, Infinity, decimal with optional
# exponent and an ignored f/F/d/D suffix, or a hexadecimal float; ASCII digits only.
_JAVA_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?", re.ASCII)
_JAVA_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?", re.ASCII)
_JAVA_SPECIAL = re.compile(r"([+-]?)(NaN|Infinity)")
# String.trim(): every char at or below U+0020
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


def java_parse_integer(text: str, long: bool = False) -> int:
    """``Integer.valueOf`` (or ``Long.valueOf``): raises EvaluationError as Java throws
    NumberFormatException."""
    if _JAVA_INTEGER.fullmatch(text):
        value = int(text)
        low, high = (LONG_MIN, LONG_MAX) if long else (INT_MIN, INT_MAX)
        if low <= value <= high:
            return JavaLong(value) if long else value
    raise EvaluationError(f'For input string: "{text}" (not a Java {"long" if long else "int"})')


def java_parse_double(text: str) -> float:
    """``Double.valueOf``: surrounding blanks are trimmed, ``NaN``/``Infinity``, decimal and hex forms."""
    trimmed = text.strip(_JAVA_TRIM)
    special = _JAVA_SPECIAL.fullmatch(trimmed)
    if special:
        value = math.nan if special.group(2) == "NaN" else math.inf
        return -value if special.group(1) == "-" else value
    if _JAVA_DECIMAL.fullmatch(trimmed):
        return float(trimmed.rstrip("fFdD"))
    if _JAVA_HEX.fullmatch(trimmed):
        return float.fromhex(trimmed.rstrip("fFdD"))
    raise EvaluationError(f'For input string: "{text}" (not a Java double)')


def java_boolean_value_of(text: str) -> bool:
    """``Boolean.valueOf``: "true" in any case; everything else is false."""
    return text.lower() == "true"


def _double_compare(a: float, b: float) -> int:
    """``Double.compareTo``: a total order where -0.0 < 0.0 and NaN is above everything (equal to itself)."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = math.isnan(a), math.isnan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return int(math.copysign(1, a) > math.copysign(1, b)) - int(math.copysign(1, a) < math.copysign(1, b))


_NUMBERS = (int, JavaLong, float)


def _from_string(text: str, number_type: type) -> object:
    if number_type is float:
        return java_parse_double(text)
    return java_parse_integer(text, long=number_type is JavaLong)


def java_compare(lv: object, rv: object) -> int:
    """ComparisonExpression.__compare with string conversion on (as SelectorParser.parse sets it):
    negative, zero or positive; -1 for types that do not convert; EvaluationError where Java throws."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            if rt is str:  # RocketMQ casts the Boolean itself to String here: ClassCastException
                raise EvaluationError(f"a boolean ({lv}) cannot be compared with the string '{rv}'")
            return -1
        if lt in _NUMBERS:
            if rt in _NUMBERS:
                if lt is float or rt is float:
                    lv, rv = float(lv), float(rv)  # type: ignore[arg-type]
            elif rt is str:
                rv = _from_string(rv, lt)  # type: ignore[arg-type]
            else:
                return -1
        elif lt is str:
            if rt is bool:
                lv = java_boolean_value_of(lv)  # type: ignore[arg-type]
            elif rt in _NUMBERS:
                lv = _from_string(lv, rt)  # type: ignore[arg-type]
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return _double_compare(lv, rv)  # type: ignore[arg-type]
    return int(lv > rv) - int(lv < rv)  # type: ignore[operator]


class Expression(ABC):
    """A node of a compiled selector. ``evaluate`` takes the message's properties."""

    __slots__ = ()

    #: RocketMQ's BooleanExpression marker: may stand as a condition (AND/OR/NOT operand, the selector)
    is_boolean = False

    @abstractmethod
    def evaluate(self, properties: Mapping[str, str]) -> Value: ...


@dataclass(frozen=True, slots=True)
class Constant(Expression):
    """A literal. ``boolean`` marks TRUE, FALSE and NULL (BooleanConstantExpression)."""

    value: object
    boolean: bool = False

    @property
    def is_boolean(self) -> bool:  # type: ignore[override]
        return self.boolean

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        return self.value

    def __str__(self) -> str:
        if self.value is None:
            return "NULL"
        if isinstance(self.value, bool):
            return "TRUE" if self.value else "FALSE"
        if isinstance(self.value, str):
            return "'" + self.value.replace("'", "''") + "'"
        return repr(self.value) if isinstance(self.value, float) else str(int(self.value))  # type: ignore[call-overload]


@dataclass(frozen=True, slots=True)
class Property(Expression):
    """A message property by name (``TAGS`` and ``KEYS`` are properties too); None when absent."""

    name: str

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        return properties.get(self.name)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Negate(Expression):
    """Unary minus; a non-number (a string property) negates to null."""

    operand: Expression

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        value = self.operand.evaluate(properties)
        if type(value) in _NUMBERS:
            return type(value)(-value)  # type: ignore[call-arg, operator]
        return None

    def __str__(self) -> str:
        return f"(- {self.operand})"


@dataclass(frozen=True, slots=True)
class BooleanCast(Expression):
    """A property standing as a condition: its value if that is a boolean, FALSE for anything else."""

    operand: Expression
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        value = self.operand.evaluate(properties)
        if value is None:
            return None
        return value if type(value) is bool else False

    def __str__(self) -> str:
        return str(self.operand)


@dataclass(frozen=True, slots=True)
class Not(Expression):
    operand: Expression
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        value = self.operand.evaluate(properties)
        return None if value is None else not value

    def __str__(self) -> str:
        return f"(NOT {self.operand})"


@dataclass(frozen=True, slots=True)
class And(Expression):
    left: Expression
    right: Expression
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        lv = self.left.evaluate(properties)
        if lv is False:
            return False
        rv = self.right.evaluate(properties)
        if rv is False:
            return False
        return None if lv is None or rv is None else True

    def __str__(self) -> str:
        return f"({self.left} AND {self.right})"


@dataclass(frozen=True, slots=True)
class Or(Expression):
    left: Expression
    right: Expression
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        lv = self.left.evaluate(properties)
        if lv is True:
            return True
        rv = self.right.evaluate(properties)
        if rv is True:
            return True
        return None if lv is None or rv is None else False

    def __str__(self) -> str:
        return f"({self.left} OR {self.right})"


@dataclass(frozen=True, slots=True)
class Equal(Expression):
    """``=`` (and ``IS NULL`` as ``= NULL``): null = null is TRUE, null on one side only is
    unknown when it is the left side and FALSE when it is the right one, as RocketMQ has it."""

    left: Expression
    right: Expression
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        lv = self.left.evaluate(properties)
        rv = self.right.evaluate(properties)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0

    def __str__(self) -> str:
        return f"({self.left} = {self.right})"


_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


@dataclass(frozen=True, slots=True)
class Ordering(Expression):
    """``> >= < <=``: unknown when either side is null; two strings are compared as doubles."""

    left: Expression
    right: Expression
    symbol: str
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        lv = self.left.evaluate(properties)
        if lv is None:
            return None
        rv = self.right.evaluate(properties)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            try:
                lv, rv = java_parse_double(lv), java_parse_double(rv)
            except EvaluationError as exc:
                raise EvaluationError(f"It's illegal to compare string by '{self.symbol}': {lv!r}, {rv!r}") from exc
        return _ORDERINGS[self.symbol](java_compare(lv, rv))

    def __str__(self) -> str:
        return f"({self.left} {self.symbol} {self.right})"


@dataclass(frozen=True, slots=True)
class InList(Expression):
    """``prop IN ('a', 'b')`` / ``NOT IN``: unknown when the property is missing."""

    operand: Property
    values: frozenset[str]
    negated: bool
    is_boolean = True

    def evaluate(self, properties: Mapping[str, str]) -> Value:
        value = self.operand.evaluate(properties)
        if type(value) is not str:
            return None
        return (value in self.values) != self.negated

    def __str__(self) -> str:
        items = ", ".join(str(Constant(v)) for v in sorted(self.values))
        return f"{self.operand} {'NOT IN' if self.negated else 'IN'} ({items})"
