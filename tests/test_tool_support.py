"""tool_support: a missing tool fails the test under CI and skips it elsewhere, naming the tool."""

from __future__ import annotations

import pytest
from tool_support import require_executable, require_module, require_tool


def test_missing_tool_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"^frobnicator is missing: it frobs.*CI is set"):
        require_tool("frobnicator", False, "it frobs")


@pytest.mark.parametrize("value", [None, ""])
def test_missing_tool_skips_without_ci(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)  # set but empty counts as unset
    with pytest.raises(pytest.skip.Exception, match=r"^frobnicator is missing: it frobs.*under CI this fails"):
        require_tool("frobnicator", False, "it frobs")


def test_present_tool_neither_fails_nor_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    require_tool("python", True, "it is running this test")
    require_module("pytest", "pytest", "it is running this test")
    assert require_executable("sh", "POSIX shell").endswith("/sh")


def test_executable_and_module_checks_report_the_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "yes")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.fail.Exception, match=r"^sh is missing: POSIX shell"):
        require_executable("sh", "POSIX shell")
    with pytest.raises(pytest.fail.Exception, match=r"^the-extra is missing: needed for X"):
        require_module("rocketstore_no_such_module", "the-extra", "needed for X")
