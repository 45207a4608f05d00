"""Waiting for a real part to reach a state: the one polling helper of the tests.

A test waits on something it can observe (an offset, a /metrics value, a route) rather than sleeping
for a time that a busy machine may not honour; the timeout is only the point of giving up, so it can
be generous without slowing a passing run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 0.25) -> Any:
    """Poll ``check`` until it returns something truthy and return that; fail naming ``what`` (and
    the last exception ``check`` raised, which is often the reason) after ``timeout`` seconds.

    An exception from ``check`` counts as "not yet": an invariant that must hold on every look is
    recorded by ``check`` and asserted after the wait, not asserted inside it."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))
