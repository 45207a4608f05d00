"""The SQL92 selector (rocketstore.common.filter) against RocketMQ 4.9.8's own filter tests.

REFERENCE holds the cases of apache/rocketmq's filter/src/test ExpressionTest and ParserTest
(tag rocketmq-all-4.9.8), as (expression, properties, expected match). RocketMQ's evaluator sees
properties as strings, as a broker does (ExpressionTest also feeds Integers through its own
context; on a broker every property is a string, so those cases are given as strings here).
The property-based tests then check the same semantics over generated values: numeric and
string comparisons against Python's arithmetic, the three-valued logic of missing properties,
IN lists, quoting, and that any input either compiles or raises SelectorSyntaxError.
"""

from __future__ import annotations

import contextlib
import math
import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rocketstore.common.filter import EvaluationError, SelectorSyntaxError, parse
from rocketstore.common.filter.expression import java_parse_double, java_parse_integer

AND = "a=3 and b<>4 And c>5 AND d<=4"
OR = "a=3 or b<>4 Or c>5 OR d<=4"
IN = "a in ('3', '4', '5')"
NOT_IN = "a not in ('3', '4', '5')"
BETWEEN = "a between 2 and 10"
NOT_BETWEEN = "a not between 2 and 10"

#: (expression, properties, matches?) — ExpressionTest's cases
REFERENCE: list[tuple[str, dict[str, str], bool]] = [
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),  # stringHasString
    ("a > 3.1E10", {"a": str(3.1415 * 10**10)}, True),  # exponent
    ("a > 3.14", {"a": "3.1415"}, True),  # floatNumber
    ("a > b", {"a": "10", "b": "20"}, False),  # twoVariable
    ("a > b", {"a": "20", "b": "10"}, True),  # twoVariableGt
    ("a is null OR a='hello'", {}, True),  # nullOr
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),  # boolean
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),  # equal
    ("a is not null and a='hello'", {}, False),
    (AND, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),  # andTrue
    (AND, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),  # andFalse
    (OR, {"a": "3"}, True),  # orTrue
    (OR, {"a": "4", "b": "5"}, True),
    (OR, {"a": "4", "b": "4", "c": "6"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    (OR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),  # orFalse
    (IN, {"a": "3"}, True),  # inTrue
    (IN, {"a": "4"}, True),
    (IN, {"a": "5"}, True),
    (IN, {"a": "8"}, False),  # inFalse
    (NOT_IN, {"a": "8"}, True),  # notInTrue
    (NOT_IN, {"a": "3"}, False),  # notInFalse
    (NOT_IN, {"a": "4"}, False),
    (NOT_IN, {"a": "5"}, False),
    (BETWEEN, {"a": "2"}, True),  # betweenTrue
    (BETWEEN, {"a": "10"}, True),
    (BETWEEN, {"a": "3"}, True),
    (BETWEEN, {"a": "1"}, False),  # betweenFalse
    (BETWEEN, {"a": "11"}, False),
    (NOT_BETWEEN, {"a": "1"}, True),  # notBetweenTrue
    (NOT_BETWEEN, {"a": "11"}, True),
    (NOT_BETWEEN, {"a": "2"}, False),  # notBetweenFalse
    (NOT_BETWEEN, {"a": "10"}, False),
    (NOT_BETWEEN, {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),  # isNullTrue
    ("a is null", {"a": "2"}, False),  # isNullFalse
    ("a is not null", {"a": "2"}, True),  # isNotNullTrue
    ("a is not null", {"abc": "2"}, False),  # isNotNullFalse
    ("a between up and low", {"a": "3.14"}, False),  # stringCompare, first case: unknown
    ("a=b", {"a": "3.14", "b": "3.14"}, True),  # stringCompare's equality cases
    ("a<>b", {"a": "3.14", "b": "3.14"}, False),
    ("a<>b", {"a": "3.14", "b": "3.141"}, True),
    ("a <= now", {"a": "1", "now": "2"}, True),  # ParserTest: "now" is a property in 4.9.8
]

#: ExpressionTest.testEvaluate_stringCompare: these throw in RocketMQ (a string where a number
#: must be parsed); the broker then filters the message out
EVALUATION_ERRORS: list[tuple[str, dict[str, str]]] = [
    ("a between up and low", {"a": "3.14", "up": "up", "low": "low"}),
    ("key is not null and key between 0 and 100", {"key": "con"}),
    ("a between 0 and 100", {"a": "abc"}),
]

#: ParserTest's valid and invalid expressions, and the checks RocketMQ makes while building the tree
VALID = [AND, "a=3  and    b<>4 And c>5 AND d<=4", OR, IN, "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
         "(a between 2 and 10) AND (b not between 6 and 9)", "a is null", "a is not null", "a <= now",
         "TRUE", "NULL", "a", "NOT a", "1 = TRUE", "a > -0.5", "a between -5 and 5", "a = 1 -- comment"]
INVALID: list[tuple[str, str]] = [
    ("a and between 2 and 10", "encountered 'between' at line 1, column 7"),  # ParserTest invalid
    ("a > 100000000000000000000000", "out of the long range"),  # ParserTest decimal overflow
    ("a > 1" + "1" * 400 + "." + "1" * 400, "greater than"),  # ParserTest float overflow
    (" a between 10 and 0", "low value (10) must be less than or equal to the high value (0)"),  # illegalBetween
    ("a > 0.0", "less than Double.MIN_VALUE"),
    ("'abc'", "will not result in a boolean value"),
    ("5", "will not result in a boolean value"),
    ("a = NULL", "'NULL' cannot be compared"),
    ("TRUE = 'x'", "'TRUE' cannot be compared with ''x''"),
    ("a > 'x'", "value 'x' cannot be compared"),
    ("a > TRUE", "value TRUE cannot be compared"),
    ("(a > 1) > 2", "a condition is not a number"),
    ("a between 1 and NULL", "can not be NULL"),
    ("'x' in ('x')", "expected a property for IN"),
    ("a in (1, 2)", "expected \"STRING\""),
    ("a not like 'x'", "expected \"BETWEEN\" or \"IN\" after \"NOT\""),
    ("a = 'open", "unterminated string literal"),
    ("a # 1", "unexpected character '#'"),
    ("", "encountered end of input"),
    ("a is nul", "expected \"NULL\""),
    ("(a = 1", "expected \")\""),
]


@pytest.mark.parametrize(("sql", "props", "expected"), REFERENCE)
def test_reference_table(sql: str, props: dict[str, str], expected: bool) -> None:
    assert (parse(sql).evaluate(props) is True) is expected


@pytest.mark.parametrize(("sql", "props"), EVALUATION_ERRORS)
def test_reference_evaluation_errors(sql: str, props: dict[str, str]) -> None:
    with pytest.raises(EvaluationError):
        parse(sql).evaluate(props)


@pytest.mark.parametrize("sql", VALID)
def test_parser_accepts(sql: str) -> None:
    parse(sql)


@pytest.mark.parametrize(("sql", "reason"), INVALID)
def test_parser_names_the_error(sql: str, reason: str) -> None:
    with pytest.raises(SelectorSyntaxError) as err:
        parse(sql)
    assert reason in str(err.value), str(err.value)
    assert repr(sql) in str(err.value)  # the message quotes the selector


def test_trailing_text_is_ignored_as_rocketmq_does() -> None:
    selector = parse("a = 1 b = 2")
    assert selector.ignored == "b = 2"
    assert selector.evaluate({"a": "1"}) is True
    # 5.x's CONTAINS does not exist in 4.9.8: the selector is the property "a" used as a condition
    # (FALSE for any string value) and the rest is ignored, as RocketMQ 4.9.8 does
    contains = parse("a contains 'x'")
    assert (str(contains.expression), contains.ignored) == ("a", "contains 'x'")
    assert contains.evaluate({"a": "xyz"}) is False


# -- property-based -------------------------------------------------------------------------------

names = st.from_regex(r"[a-z_$][a-zA-Z0-9_$]{0,6}", fullmatch=True).filter(
    lambda n: n.upper() not in {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)
longs = st.integers(min_value=-(2**63) + 1, max_value=2**63 - 1)
finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300)


def literal(n: int | float) -> str:
    """A selector literal for ``n`` (literals are unsigned in the grammar: minus is an operator)."""
    text = repr(abs(n)) if isinstance(n, float) else str(abs(n))
    return f"-{text}" if (n < 0 or (isinstance(n, float) and math.copysign(1, n) < 0)) else text


def case_shuffle(text: str, data: st.DataObject) -> str:
    """Keywords in random case, blanks in random amounts: neither changes the result."""
    def keyword(m: re.Match[str]) -> str:
        return "".join(c.upper() if data.draw(st.booleans()) else c.lower() for c in m.group(0))
    out = re.sub(r"\b(and|or|not|between|in|is|null|true|false)\b", keyword, text, flags=re.IGNORECASE)
    return out.replace(" ", data.draw(st.sampled_from([" ", "  ", "\t", "\n", " /* c */ "])))


@settings(max_examples=200)
@given(row=st.sampled_from(REFERENCE), extra=st.dictionaries(st.from_regex(r"x[a-z]{1,5}", fullmatch=True),
                                                              st.text(max_size=8)), data=st.data())
def test_reference_rows_are_stable_under_case_blanks_and_unrelated_properties(
        row: tuple[str, dict[str, str], bool], extra: dict[str, str], data: st.DataObject) -> None:
    sql, props, expected = row
    assume("'''''" not in sql)  # quoted quotes are left alone by the case shuffle's regex anyway
    assert (parse(case_shuffle(sql, data)).evaluate({**extra, **props}) is True) is expected


@given(name=names, value=ints, bound=ints)
def test_integer_comparisons_follow_arithmetic(name: str, value: int, bound: int) -> None:
    props = {name: str(value)}
    for op, expected in ((">", value > bound), (">=", value >= bound), ("<", value < bound),
                         ("<=", value <= bound), ("=", value == bound), ("<>", value != bound)):
        assert (parse(f"{name} {op} {literal(bound)}").evaluate(props) is True) is expected


@given(name=names, value=longs, bound=st.integers(min_value=2**31, max_value=2**63 - 1))
def test_long_literals_parse_the_property_as_a_long(name: str, value: int, bound: int) -> None:
    assert (parse(f"{name} > {bound}").evaluate({name: str(value)}) is True) is (value > bound)


@given(name=names, value=st.integers(min_value=2**31, max_value=2**62), bound=st.integers(0, 2**31 - 1))
def test_a_property_past_the_int_range_against_an_int_literal_is_an_error(name: str, value: int, bound: int) -> None:
    """Integer.valueOf fails on it in RocketMQ: the message is filtered out, whatever the operator.
    (``-2147483648`` is minus a Long literal, so the bound is kept non-negative.)"""
    with pytest.raises(EvaluationError):
        parse(f"{name} > {literal(bound)}").evaluate({name: str(value)})


@given(name=names, value=finite, bound=finite)
def test_double_comparisons_follow_arithmetic(name: str, value: float, bound: float) -> None:
    assume(abs(bound) >= 5e-324)  # RocketMQ refuses float literals below Double.MIN_VALUE (0.0)
    props = {name: repr(value)}
    assert (parse(f"{name} > {literal(bound)}").evaluate(props) is True) is (value > bound)
    assert (parse(f"{name} <= {literal(bound)}").evaluate(props) is True) is (value <= bound)


@given(name=names, value=ints, low=ints, high=ints)
def test_between_is_inclusive_and_not_between_its_complement(name: str, value: int, low: int, high: int) -> None:
    assume(low <= high)
    props = {name: str(value)}
    inside = low <= value <= high
    assert (parse(f"{name} BETWEEN {literal(low)} AND {literal(high)}").evaluate(props) is True) is inside
    assert (parse(f"{name} NOT BETWEEN {literal(low)} AND {literal(high)}").evaluate(props) is True) is (not inside)


@given(a=names, b=names, x=st.text(max_size=5), y=st.text(max_size=5))
def test_string_properties_order_as_numbers_only(a: str, b: str, x: str, y: str) -> None:
    """Two strings under > are compared as doubles; when either is not a number RocketMQ throws."""
    assume(a != b)
    try:
        expected: bool | None = java_parse_double(x) > java_parse_double(y)
    except EvaluationError:
        expected = None
    selector = parse(f"{a} > {b}")
    if expected is None:
        with pytest.raises(EvaluationError):
            selector.evaluate({a: x, b: y})
    else:
        assert (selector.evaluate({a: x, b: y}) is True) is expected


@given(name=names, bound=ints, other=st.dictionaries(names, st.text(max_size=4)))
def test_a_missing_property_is_unknown_so_neither_a_test_nor_its_negation_matches(
        name: str, bound: int, other: dict[str, str]) -> None:
    other.pop(name, None)
    for sql in (f"{name} > {literal(bound)}", f"NOT ({name} > {literal(bound)})", f"{name} = 'v'",
                f"{name} <> 'v'", f"{name} IN ('v')", f"{name} NOT IN ('v')",
                f"{name} BETWEEN 1 AND 2", f"{name} NOT BETWEEN 1 AND 2"):
        assert parse(sql).evaluate(other) is None, sql
    assert parse(f"{name} IS NULL").evaluate(other) is True
    assert parse(f"{name} IS NOT NULL").evaluate(other) is False
    # three-valued logic: FALSE AND unknown is FALSE, TRUE OR unknown is TRUE
    assert parse(f"FALSE AND {name} > 1").evaluate(other) is False
    assert parse(f"{name} > 1 OR TRUE").evaluate(other) is True


@given(name=names, values=st.lists(st.text(max_size=6), min_size=1, max_size=8), value=st.text(max_size=6))
def test_in_lists(name: str, values: list[str], value: str) -> None:
    items = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    assert (parse(f"{name} IN ({items})").evaluate({name: value}) is True) is (value in values)
    assert (parse(f"{name} NOT IN ({items})").evaluate({name: value}) is True) is (value not in values)


@given(name=names, text=st.text(), other=st.text())
def test_quoted_strings_round_trip(name: str, text: str, other: str) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    assert parse(f"{name} = {quoted}").evaluate({name: text}) is True
    assert (parse(f"{name} = {quoted}").evaluate({name: other}) is True) is (other == text)


@given(name=names, flag=st.sampled_from(["true", "TRUE", "True", "false", "yes", "1", ""]))
def test_booleans_compare_by_boolean_value_of(name: str, flag: str) -> None:
    assert (parse(f"{name} = TRUE").evaluate({name: flag}) is True) is (flag.lower() == "true")
    assert (parse(f"{name} = FALSE").evaluate({name: flag}) is True) is (flag.lower() != "true")


@settings(max_examples=500)
@given(st.lists(st.sampled_from([*"ab01.'()=<>-+, \tEeL", "AND ", "OR ", "NOT ", "IN ", "IS ", "NULL ",
                                 "BETWEEN ", "TRUE "]), max_size=30).map("".join))
def test_any_input_compiles_or_raises_a_syntax_error(sql: str) -> None:
    try:
        selector = parse(sql)
    except SelectorSyntaxError:
        return
    with contextlib.suppress(EvaluationError):  # else TRUE, FALSE or unknown
        assert selector.evaluate({"a": "1", "b": "x"}) in (True, False, None)


def test_java_number_parsing() -> None:
    assert java_parse_integer("+42") == 42 and java_parse_integer("-7") == -7
    for bad in ("", "4 2", " 1", "1_0", "2147483648", "1.0"):
        with pytest.raises(EvaluationError):
            java_parse_integer(bad)
    assert java_parse_integer("2147483648", long=True) == 2**31
    assert java_parse_double(" 1.5 ") == 1.5 and java_parse_double("1e3") == 1000.0
    assert java_parse_double("2.5f") == 2.5 and java_parse_double("0x1p3") == 8.0
    assert math.isnan(java_parse_double("NaN")) and java_parse_double("-Infinity") == -math.inf
    for bad in ("", ".", "1e", "abc", "1_0", "0x1"):
        with pytest.raises(EvaluationError):
            java_parse_double(bad)


def test_java_quirks_kept() -> None:
    # NaN sorts above everything in Double.compareTo, so a "NaN" property is greater than any bound
    assert parse("a > 1.5").evaluate({"a": "NaN"}) is True
    # a boolean literal on the left of a string: RocketMQ's ClassCastException
    with pytest.raises(EvaluationError):
        parse("TRUE = a").evaluate({"a": "true"})
    # a property used as a condition is FALSE (strings are never booleans); NOT of it is TRUE
    assert parse("a").evaluate({"a": "true"}) is False
    assert parse("NOT a").evaluate({"a": "x"}) is True
    # unary minus of a string is null
    assert parse("-a > 1").evaluate({"a": "5"}) is None
    # Long compared with a double converts the long (with rounding), as Java's widening does
    assert parse("9007199254740993 = 9007199254740992.0").evaluate({}) is True
