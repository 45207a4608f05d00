"""tests/run_summary.py: the phases file and JUnit reports tests/run writes, read back into one summary.

The sample report is what pytest 9 writes with ``--junitxml -o junit_family=xunit1`` for a module
with a pass, a failure, a skip, a failing method of a class and a fixture whose teardown raises
(messages shortened), plus the case pytest writes for a module that fails to import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_summary import GREEN, RED, Phase, main, read_phases, read_report, render

SAMPLE_REPORT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="2" failures="2" skipped="1" tests="6">
<testcase classname="tests.demo.test_demo" name="test_ok" file="tests/demo/test_demo.py" line="2" time="0.037"/>
<testcase classname="tests.demo.test_demo" name="test_bad" file="tests/demo/test_demo.py" line="5" time="0.001">
<failure message="assert 1 == 2">tests/demo/test_demo.py:7: AssertionError</failure></testcase>
<testcase classname="tests.demo.test_demo" name="test_skip" file="tests/demo/test_demo.py" line="8" time="0.000">
<skipped type="pytest.skip" message="no tool">tests/demo/test_demo.py:9: no tool</skipped></testcase>
<testcase classname="tests.demo.test_demo.TestGroup" name="test_in_class" file="tests/demo/test_demo.py" line="13">
<failure message="assert False">tests/demo/test_demo.py:15: AssertionError</failure></testcase>
<testcase classname="tests.demo.test_demo" name="test_teardown_error" file="tests/demo/test_demo.py" line="21">
<error message="failed on teardown with &quot;RuntimeError: teardown&quot;">RuntimeError</error></testcase>
<testcase classname="" name="tests.demo.test_broken" time="0.000">
<error message="collection failure">ImportError</error></testcase>
</testsuite></testsuites>
"""

PASSING_REPORT = """\
<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="1">
<testcase classname="tests.demo.test_fine" name="test_ok" file="tests/demo/test_fine.py" line="1"/>
</testsuite></testsuites>
"""


def write_phases(tmp_path: Path, lines: list[str]) -> Path:
    phases = tmp_path / "phases.tsv"
    phases.write_text("".join(line + "\n" for line in lines))
    return phases


def test_a_report_is_counted_per_outcome_and_names_what_failed_as_node_ids(tmp_path: Path) -> None:
    report = tmp_path / "demo.xml"
    report.write_text(SAMPLE_REPORT)

    counts = read_report(report)

    assert (counts.passed, counts.failed, counts.skipped, counts.errors) == (1, 2, 1, 2)
    assert counts.failed_tests == [
        "tests/demo/test_demo.py::test_bad",
        "tests/demo/test_demo.py::TestGroup::test_in_class",
        "tests/demo/test_demo.py::test_teardown_error (error)",
        "tests.demo.test_broken (error)",
    ]
    assert counts.reasons["tests/demo/test_demo.py::test_bad"] == "assert 1 == 2"


def test_a_failed_run_ends_with_every_phase_the_failed_tests_and_a_failed_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo.xml").write_text(SAMPLE_REPORT)
    (tmp_path / "fine.xml").write_text(PASSING_REPORT)
    phases = write_phases(tmp_path, [
        "install\t0\t61.2\t",
        f"tiers\t1\t1625.4\t{tmp_path / 'demo.xml'}",
        f"pure-python\t0\t95\t{tmp_path / 'fine.xml'}",
    ])

    status = main(["run_summary.py", str(phases)])

    out = capsys.readouterr().out
    assert status == 1
    lines = out.splitlines()
    assert lines[1].split() == ["install", "passed", "1m01s"]
    assert lines[2].split() == ["tiers", "FAILED", "1", "2", "1", "2", "27m05s"]
    assert lines[3].split() == ["pure-python", "passed", "1", "0", "0", "0", "1m35s"]
    assert "  tiers: tests/demo/test_demo.py::TestGroup::test_in_class" in lines
    # each failed test's message follows its name: a CI log may keep only the summary
    at = lines.index("  tiers: tests/demo/test_demo.py::TestGroup::test_in_class")
    assert lines[at + 1] == "      assert False"
    assert lines[lines.index("  tiers: tests/demo/test_demo.py::test_teardown_error (error)") + 1] == (
        '      failed on teardown with "RuntimeError: teardown"')
    assert lines[-1] == "tests/run: FAILED: tiers (total 29m42s)"
    assert "\033[" not in out, "no color when stdout is not a terminal"


def test_a_phase_fails_on_its_exit_status_even_without_failed_tests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pytest's exit code 5 (no tests collected) and a crash that left no report are failures."""
    phases = write_phases(tmp_path, [
        f"tiers\t5\t3\t{tmp_path / 'empty.xml'}",
        f"kubernetes\t2\t1\t{tmp_path / 'never-written.xml'}",
    ])
    (tmp_path / "empty.xml").write_text('<testsuites><testsuite name="pytest" tests="0"/></testsuites>')

    status = main(["run_summary.py", str(phases)])

    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    assert lines[1].split()[:6] == ["tiers", "FAILED", "0", "0", "0", "0"]
    assert lines[1].endswith("(exit status 5, no tests collected)")
    assert lines[2].split()[:2] == ["kubernetes", "FAILED"] and lines[2].endswith("(exit status 2)")
    assert lines[-1] == "tests/run: FAILED: tiers, kubernetes (total 0m04s)"


def test_a_run_where_every_phase_passed_says_so_and_exits_0(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "fine.xml").write_text(PASSING_REPORT)
    phases = write_phases(tmp_path, [f"quick\t0\t42\t{tmp_path / 'fine.xml'}"])

    assert main(["run_summary.py", str(phases)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "tests/run: passed: 1 of 1 phases (total 0m42s)"


def test_no_phases_at_all_is_a_failure(tmp_path: Path) -> None:
    assert main(["run_summary.py", str(write_phases(tmp_path, []))]) == 1


def test_phases_file_lines_keep_an_empty_report_path(tmp_path: Path) -> None:
    phases = read_phases(write_phases(tmp_path, ["go builds\t0\t12.5\t"]))

    assert [(p.name, p.status, p.seconds, p.counts) for p in phases] == [("go builds", 0, 12.5, None)]


def test_on_a_terminal_the_summary_is_red_when_a_phase_failed_and_green_otherwise() -> None:
    passed, failed = Phase("quick", 0, 1.0, None), Phase("tiers", 1, 1.0, None)

    assert render([passed, failed], color=True).startswith(RED)
    assert render([passed], color=True).startswith(GREEN)


def test_the_total_is_the_runs_length_when_phases_ran_side_by_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tests/run gives its own length: the image phase runs beside the tiers, so the sum overstates."""
    (tmp_path / "fine.xml").write_text(PASSING_REPORT)
    phases = write_phases(tmp_path, [f"tiers\t0\t600\t{tmp_path / 'fine.xml'}",
                                     f"image\t0\t300\t{tmp_path / 'fine.xml'}"])

    assert main(["run_summary.py", str(phases), "630"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "tests/run: passed: 2 of 2 phases (total 10m30s)"
