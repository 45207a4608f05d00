"""SelectorParser: RocketMQ 4.9.8's SQL92 message selector grammar (filter/.../SelectorParser.jj).

The language, as 4.9.8 defines it (5.x added CONTAINS / STARTSWITH / ENDSWITH; 4.9.8 has none)::

    selector    := or
    or          := and ( OR and )*
    and         := equality ( AND equality )*
    equality    := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
    comparison  := unary ( ('>'|'>='|'<'|'<=') unary | [NOT] BETWEEN unary AND unary
                         | [NOT] IN '(' string (',' string)* ')' )*
    unary       := '+' unary | '-' unary | NOT unary | primary
    primary     := literal | property | '(' or ')'
    literal     := 'string' | decimal | float | TRUE | FALSE | NULL

Keywords are case-insensitive; property names (``[A-Za-z_$][A-Za-z0-9_$]*``) are not. Strings
are single-quoted with ``''`` for a quote. A decimal is a Java ``Integer`` when it fits, else a
``Long`` (an ``l``/``L`` suffix is allowed and changes nothing); past the long range it is an
error. A float literal is a ``Double`` and must lie in ``[Double.MIN_VALUE, Double.MAX_VALUE]``:
RocketMQ refuses ``0.0`` (write ``0``). ``--`` line and ``/* */`` block comments are skipped.
There is no arithmetic besides unary minus.

The checks RocketMQ makes while building the tree are errors here too: ``> >= < <=`` and
BETWEEN take no string, boolean or NULL literal and no condition; ``=``/``<>`` take no NULL;
``TRUE = 'x'`` style literal pairs; BETWEEN bounds in the wrong order; IN on anything but a
property; a selector that is not a condition (``'abc'``, ``5``).

One quirk is kept on purpose: RocketMQ's grammar has no end-of-input rule, so the parser stops
after the longest valid selector and ignores what follows (``a = 1 b = 2`` selects ``a = 1``).
A client written against RocketMQ relies on such expressions being accepted; :func:`parse`
reports the ignored text (``Selector.ignored``) so the broker can log it.

Tokens are read lazily, one ahead (two after IS and NOT), as JavaCC's token manager does, so a
lexical error in the ignored tail is not an error either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocketstore.common.filter.expression import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    And,
    BooleanCast,
    Constant,
    Equal,
    EvaluationError,
    Expression,
    InList,
    JavaLong,
    Negate,
    Not,
    Or,
    Ordering,
    Property,
    java_compare,
)

DOUBLE_MAX = 1.7976931348623157e308
DOUBLE_MIN = 5e-324  # Java's Double.MIN_VALUE, the smallest positive double

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})

_SKIP = re.compile(r"[ \t\n\r\f]+|--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_EXPONENT = r"(?:[eE][+-]?[0-9]+)"
_FLOATS = (
    re.compile(rf"[0-9]+\.[0-9]*{_EXPONENT}?"),
    re.compile(rf"\.[0-9]+{_EXPONENT}?"),
    re.compile(rf"[0-9]+{_EXPONENT}"),
)
_STRING = re.compile(r"'(?:''|[^'])*'")
_OPERATORS = ("<>", "<=", ">=", "=", ">", "<", "(", ",", ")", "+", "-")


class SelectorSyntaxError(ValueError):
    """The selector does not compile (RocketMQ's MQFilterException "Invalid MessageSelector")."""

    def __init__(self, sql: str, reason: str) -> None:
        super().__init__(f"Invalid MessageSelector {sql!r}: {reason}")
        self.sql = sql
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # a keyword, an operator, "DECIMAL", "FLOAT", "STRING", "ID" or "EOF"
    text: str
    pos: int


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector: the condition tree and the input text the grammar stopped before."""

    expression: Expression
    ignored: str

    def evaluate(self, properties: dict[str, str]) -> object:
        """TRUE, FALSE or None (unknown); raises EvaluationError where RocketMQ's evaluation throws."""
        return self.expression.evaluate(properties)


def parse(sql: str) -> Selector:
    """Compile ``sql``; raises SelectorSyntaxError naming what is wrong and where."""
    parser = _Parser(sql)
    try:
        expression = parser.condition(parser.or_expression())
    except _Error as exc:
        raise SelectorSyntaxError(sql, str(exc)) from None
    ignored = sql[parser.peek().pos:].strip() if parser.peek().kind != "EOF" else ""
    return Selector(expression, ignored)


class _Error(Exception):
    """A syntax or semantic error inside the parser, turned into SelectorSyntaxError by parse()."""


def _where(sql: str, pos: int) -> str:
    line = sql.count("\n", 0, pos) + 1
    column = pos - (sql.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


class _Parser:
    def __init__(self, sql: str) -> None:
        self.sql = sql
        self.pos = 0  # scanning position of the next unread token
        self.ahead: list[Token] = []

    # -- tokens ------------------------------------------------------------------------------------
    def _scan(self) -> Token:
        sql, pos = self.sql, self.pos
        while (skip := _SKIP.match(sql, pos)) is not None:
            pos = skip.end()
        if pos >= len(sql):
            self.pos = pos
            return Token("EOF", "", pos)
        char = sql[pos]
        kind, end = "", pos
        if char.isascii() and (char.isalpha() or char in "_$"):
            end = _ID.match(sql, pos).end()  # type: ignore[union-attr]
            word = sql[pos:end]
            kind = word.upper() if word.upper() in KEYWORDS else "ID"
        elif char.isascii() and (char.isdigit() or char == "."):
            decimal = _DECIMAL.match(sql, pos)
            if decimal is not None:
                kind, end = "DECIMAL", decimal.end()
            for pattern in _FLOATS:
                found = pattern.match(sql, pos)
                if found is not None and found.end() > end:
                    kind, end = "FLOAT", found.end()
        elif char == "'":
            string = _STRING.match(sql, pos)
            if string is None:
                raise _Error(f"unterminated string literal at {_where(sql, pos)}")
            kind, end = "STRING", string.end()
        else:
            for op in _OPERATORS:
                if sql.startswith(op, pos):
                    kind, end = op, pos + len(op)
                    break
        if not kind:
            raise _Error(f"lexical error at {_where(sql, pos)}: unexpected character {char!r}")
        self.pos = end
        return Token(kind, sql[pos:end], pos)

    def peek(self, n: int = 1) -> Token:
        while len(self.ahead) < n:
            self.ahead.append(self._scan())
        return self.ahead[n - 1]

    def next(self) -> Token:
        token = self.peek()
        self.ahead.pop(0)
        return token

    def expect(self, kind: str) -> Token:
        token = self.peek()
        if token.kind != kind:
            raise self.unexpected(token, f'"{kind}"')
        return self.next()

    def unexpected(self, token: Token, wanted: str) -> _Error:
        found = "end of input" if token.kind == "EOF" else repr(token.text)
        return _Error(f"encountered {found} at {_where(self.sql, token.pos)}, expected {wanted}")

    # -- grammar -----------------------------------------------------------------------------------
    def condition(self, expr: Expression) -> Expression:
        """asBooleanExpression: a condition as it is, a property as a boolean cast, else an error."""
        if expr.is_boolean:
            return expr
        if isinstance(expr, Property):
            return BooleanCast(expr)
        raise _Error(f"expression {expr} will not result in a boolean value")

    def or_expression(self) -> Expression:
        left = self.and_expression()
        while self.peek().kind == "OR":
            self.next()
            right = self.and_expression()
            left = Or(self.condition(left), self.condition(right))
        return left

    def and_expression(self) -> Expression:
        left = self.equality_expression()
        while self.peek().kind == "AND":
            self.next()
            right = self.equality_expression()
            left = And(self.condition(left), self.condition(right))
        return left

    def equality_expression(self) -> Expression:
        left = self.comparison_expression()
        while True:
            kind = self.peek().kind
            if kind in ("=", "<>"):
                self.next()
                equal = _create_equal(left, self.comparison_expression())
                left = equal if kind == "=" else Not(equal)
            elif kind == "IS":
                self.next()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.next()
                self.expect("NULL")
                is_null = Equal(left, Constant(None, boolean=True))
                left = Not(is_null) if negated else is_null
            else:
                return left

    def comparison_expression(self) -> Expression:
        left = self.unary_expression()
        while True:
            token = self.peek()
            if token.kind in (">", ">=", "<", "<="):
                self.next()
                left = _create_ordering(left, self.unary_expression(), token.kind)
            elif token.kind == "BETWEEN" or (token.kind == "NOT" and self.peek(2).kind == "BETWEEN"):
                negated = token.kind == "NOT"
                self.next()
                if negated:
                    self.next()
                low = self.unary_expression()
                self.expect("AND")
                high = self.unary_expression()
                left = _create_not_between(left, low, high) if negated else _create_between(left, low, high)
            elif token.kind == "IN" or (token.kind == "NOT" and self.peek(2).kind == "IN"):
                negated = token.kind == "NOT"
                self.next()
                if negated:
                    self.next()
                left = self._in_list(left, negated)
            elif token.kind == "NOT":
                raise self.unexpected(self.peek(2), '"BETWEEN" or "IN" after "NOT"')
            else:
                return left

    def _in_list(self, left: Expression, negated: bool) -> Expression:
        self.expect("(")
        values = [self.string_literal()]
        while self.peek().kind == ",":
            self.next()
            values.append(self.string_literal())
        self.expect(")")
        if not isinstance(left, Property):
            raise _Error(f"expected a property for IN, got: {left}")
        return InList(left, frozenset(values), negated)

    def string_literal(self) -> str:
        return self.expect("STRING").text[1:-1].replace("''", "'")

    def unary_expression(self) -> Expression:
        kind = self.peek().kind
        if kind == "+":
            self.next()
            return self.unary_expression()
        if kind == "-":
            self.next()
            return Negate(self.unary_expression())
        if kind == "NOT":
            self.next()
            return Not(self.condition(self.unary_expression()))
        return self.primary_expression()

    def primary_expression(self) -> Expression:
        token = self.peek()
        if token.kind == "ID":
            self.next()
            return Property(token.text)
        if token.kind == "(":
            self.next()
            inner = self.or_expression()
            self.expect(")")
            return inner
        if token.kind in ("STRING", "DECIMAL", "FLOAT", "TRUE", "FALSE", "NULL"):
            return self.literal()
        raise self.unexpected(token, "a literal, a property, a unary operator or '('")

    def literal(self) -> Constant:
        token = self.next()
        if token.kind == "STRING":
            return Constant(token.text[1:-1].replace("''", "'"))
        if token.kind == "DECIMAL":
            return _decimal(token.text)
        if token.kind == "FLOAT":
            return _float(token.text)
        return Constant({"TRUE": True, "FALSE": False, "NULL": None}[token.kind], boolean=True)


def _decimal(text: str) -> Constant:
    """ConstantExpression.createFromDecimal: an Integer when it fits, else a Long, else an error."""
    value = int(text.rstrip("lL"))
    if value > LONG_MAX:
        raise _Error(f"decimal literal {text} is out of the long range")
    return Constant(value if INT_MIN <= value <= INT_MAX else JavaLong(value))


def _float(text: str) -> Constant:
    """ConstantExpression.createFloat: a double in [Double.MIN_VALUE, Double.MAX_VALUE]."""
    value = float(text)
    if value > DOUBLE_MAX:
        raise _Error(f"{text} is greater than {DOUBLE_MAX!r}")
    if value < DOUBLE_MIN:
        raise _Error(f"{text} is less than Double.MIN_VALUE (4.9E-324): RocketMQ refuses it, write 0 instead")
    return Constant(value)


def _create_equal(left: Expression, right: Expression) -> Expression:
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise _Error(f"'{side}' cannot be compared, use IS NULL / IS NOT NULL")
    if isinstance(left, Constant) and isinstance(right, Constant) and left.boolean and not right.boolean:
        raise _Error(f"'{left}' cannot be compared with '{right}'")
    return Equal(left, right)


def _check_ordering_operand(expr: Expression) -> None:
    """Only numbers (or properties, or unary minus) go into > >= < <= and BETWEEN."""
    if isinstance(expr, Constant):
        if type(expr.value) is bool or not isinstance(expr.value, int | float):
            raise _Error(f"value {expr} cannot be compared (only numbers go with > >= < <= BETWEEN)")
    elif expr.is_boolean:
        raise _Error(f"value {expr} cannot be compared (a condition is not a number)")


def _create_ordering(left: Expression, right: Expression, symbol: str) -> Expression:
    _check_ordering_operand(left)
    _check_ordering_operand(right)
    return Ordering(left, right, symbol)


def _create_between(value: Expression, low: Expression, high: Expression) -> Expression:
    if isinstance(low, Constant) and isinstance(high, Constant):
        if low.value is None or high.value is None:
            raise _Error("illegal values of BETWEEN, values can not be NULL")
        try:
            order = java_compare(high.value, low.value)
        except EvaluationError as exc:
            raise _Error(f"illegal values of BETWEEN: {exc}") from None
        if order < 0:
            raise _Error(f"illegal values of BETWEEN, the low value ({low}) must be less than "
                         f"or equal to the high value ({high})")
    return And(_create_ordering(value, low, ">="), _create_ordering(value, high, "<="))


def _create_not_between(value: Expression, low: Expression, high: Expression) -> Expression:
    return Or(_create_ordering(value, low, "<"), _create_ordering(value, high, ">"))
