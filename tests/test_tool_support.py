"""tool_support: a missing tool fails the test under CI and skips it elsewhere, naming the tool."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tool_support
from tool_support import (
    go_sources_digest,
    go_tool_binary,
    go_tool_binary_path,
    require_executable,
    require_module,
    require_tool,
    run_tool,
)


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


def test_go_sources_digest_follows_file_names_and_contents(tmp_path: Path) -> None:
    (tmp_path / "main.go").write_text("package main\n")
    first = go_sources_digest(tmp_path)
    assert go_sources_digest(tmp_path) == first
    (tmp_path / "main.go").write_text("package main\n\n")
    second = go_sources_digest(tmp_path)
    (tmp_path / "main.go").rename(tmp_path / "other.go")
    assert len({first, second, go_sources_digest(tmp_path)}) == 3


def test_go_tool_binary_builds_once_per_source_and_names_a_failed_build(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    go = require_executable("go", "go_tool_binary runs `go build`")
    monkeypatch.setattr(tool_support, "TOOL_CACHE", tmp_path / "cache")
    source = tmp_path / "hello"
    source.mkdir()
    (source / "go.mod").write_text("module example.test/hello\n\ngo 1.21\n")
    (source / "main.go").write_text('package main\n\nimport "fmt"\n\n'
                                    'func main() { fmt.Println(`{"kind": "hello"}`) }\n')
    binary = go_tool_binary(go, source, "hello", "v1")
    assert binary == tmp_path / "cache" / "hello" / f"v1-{go_sources_digest(source)}" / "hello"
    built_at = binary.stat().st_mtime_ns
    assert run_tool([binary], env=os.environ, timeout=30).of("hello") == [{"kind": "hello"}]
    assert go_tool_binary(go, source, "hello", "v1") == binary and binary.stat().st_mtime_ns == built_at
    (source / "main.go").write_text("package main\n\nfunc main() { undefinedCall() }\n")
    with pytest.raises(RuntimeError, match=r"(?s)`go build` in .*hello failed: .*undefined: undefinedCall"):
        go_tool_binary(go, source, "hello", "v1")
    assert list(go_tool_binary_path(source, "hello", "v1").parent.iterdir()) == []  # nothing half-built left
