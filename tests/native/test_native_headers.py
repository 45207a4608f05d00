"""Differential test of typed header decoding: the Rust plan executor against the Python one.

For every typed header of rocketstore.remoting.headers and every name map it is decoded with
(SEND_MESSAGE_V2's one-letter names included), random extFields (fields present or missing,
integers in and out of Java's ranges or in syntax Java refuses, booleans in any case, any text)
must decode to the same values, and whenever Python refuses the fields, native must hand them
back (None) rather than decode them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from native_support import header_decode_plans, native_module

from rocketstore.remoting import header_codec
from rocketstore.remoting.command import MalformedRequestError

NATIVE: ModuleType = native_module()

PLANS = header_decode_plans()

VALUES = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", "+", "-", "+7", "-0", "007", " 1", "1 ", "1_000", "\u0661", "1e3", "0x10",
                     "true", "TRUE", "True", "false", "yes", "tru\u0117", "\u0130", "2147483648", "-2147483649",
                     "9223372036854775807", "9223372036854775808", "-9223372036854775808"]),
    st.text(max_size=8),
)


def test_every_header_has_a_plan() -> None:
    assert len(PLANS) > 20, [name for name, _ in PLANS]


@pytest.mark.parametrize(("name", "plan"), PLANS, ids=[p[0] for p in PLANS])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_header_fields_decode_alike(name: str, plan: tuple[Any, ...], data: st.DataObject) -> None:
    fields = {wire: data.draw(VALUES) for _, wire, _, _, _, _ in plan if data.draw(st.integers(0, 4))}
    fields |= data.draw(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))
    try:
        expected: dict[str, Any] | None = header_codec.decode_fields_python(fields, plan, name)
    except MalformedRequestError:
        expected = None
    actual = NATIVE.decode_header_fields(fields, plan)
    if actual is not None:
        assert expected is not None, f"native decoded fields Python refuses: {fields}"
        assert actual == expected
        assert [type(v) for v in actual.values()] == [type(v) for v in expected.values()]
    elif expected is not None:
        # handing valid fields back is allowed (non-ASCII booleans), but must stay the exception
        assert any(not v.isascii() for v in fields.values()), f"native refused valid fields: {fields}"
