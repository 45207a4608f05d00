"""The one summary that ends ``tests/run``: every phase with its counts and time, then the failed tests.

``tests/run`` runs several pytest calls (phases) and a few steps that are not pytest (the install,
the wait for the Go builds). Each pytest phase writes a JUnit XML report (``--junitxml``,
``junit_family=xunit1`` so every test case carries its file); ``tests/run`` appends one line per
phase to a tab-separated file: name, exit status, seconds, and the report's path (empty for a step
that is not pytest). This script reads that file and prints one table, so the outcome of a run
of half an hour is not scattered over thousands of lines of log.

A phase failed when its exit status is not 0, whatever its report says: pytest's exit code 5 (no
tests collected) is a failure, and so is a crash that left no report. The table is red when
anything failed and green otherwise, on a terminal; the words FAILED and passed say the same
where there is no color (CI logs). The exit status is 1 when any phase failed. The total is the
run's length when ``tests/run`` gives it (some phases run side by side, so their times overlap),
else the sum of the phases' times.

    python3 tests/run_summary.py PHASES_TSV [RUN_SECONDS]
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

RED = "\033[31;1m"
GREEN = "\033[32;1m"
RESET = "\033[0m"


#: how much of a failure's message the summary shows: its first line, cut to this length
REASON_CHARS = 300


@dataclass
class Counts:
    """Test outcomes of one JUnit report; ``failed_tests`` names the failed and errored ones and
    ``reasons`` gives each its message's first line (a CI log may keep only the summary)."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    failed_tests: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class Phase:
    """One line of the phases file, with the counts of its report when it has one."""

    name: str
    status: int
    seconds: float
    counts: Counts | None

    @property
    def ok(self) -> bool:
        return self.status == 0


def node_id(case: ET.Element) -> str:
    """The pytest node id of a JUnit test case, so it can be pasted after ``tests/run``.

    xunit1 reports give the file (``tests/store/test_x.py``) and a dotted classname that starts
    with the module's dotted path (``tests.store.test_x.TestY``); what follows the module is the
    class. Without a file attribute (an xunit2 report), the classname and name are joined as they are.
    """
    name = case.get("name", "?")
    classname = case.get("classname", "")
    file = case.get("file")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    classes = classname.removeprefix(module).strip(".") if classname.startswith(module) else ""
    return "::".join(part for part in (file, *classes.split("."), name) if part)


def read_report(path: Path) -> Counts:
    """Counts of the test cases in the JUnit report at ``path``.

    Each test case is classified by its first outcome child: pytest writes a test that passed
    its call and failed its teardown as one case with an ``error`` child, and an xfail as
    ``skipped``.
    """
    counts = Counts()
    for case in ET.parse(path).getroot().iter("testcase"):
        outcomes = {child.tag: child for child in case}
        if "failure" in outcomes or "error" in outcomes:
            failed = "failure" in outcomes
            name = node_id(case) if failed else f"{node_id(case)} (error)"
            if failed:
                counts.failed += 1
            else:
                counts.errors += 1
            counts.failed_tests.append(name)
            message = (outcomes["failure" if failed else "error"].get("message") or "").strip()
            if message:
                counts.reasons[name] = message.splitlines()[0][:REASON_CHARS]
        elif "skipped" in outcomes:
            counts.skipped += 1
        else:
            counts.passed += 1
    return counts


def read_phases(path: Path) -> list[Phase]:
    """The phases file written by ``tests/run``: name, status, seconds, report path (may be empty)."""
    phases = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        name, status, seconds, report = (line.split("\t") + [""] * 4)[:4]
        counts = None
        if report:
            report_path = Path(report)
            if report_path.is_file() and report_path.stat().st_size > 0:
                try:
                    counts = read_report(report_path)
                except ET.ParseError:
                    counts = None
        phases.append(Phase(name, int(status), float(seconds), counts))
    return phases


def minutes(seconds: float) -> str:
    """``83.4`` -> ``1m23s``: phases run for seconds to tens of minutes."""
    whole = round(seconds)
    return f"{whole // 60}m{whole % 60:02d}s"


def render(phases: list[Phase], *, color: bool, run_seconds: float | None = None) -> str:
    """The summary table and the failed tests' names, ending with one overall verdict line whose
    total is ``run_seconds`` when given, else the sum of the phases' times."""
    failed = [phase for phase in phases if not phase.ok]
    width = max([len(phase.name) for phase in phases] + [5])
    lines = [f"{'phase':<{width}}  result  {'passed':>6} {'failed':>6} {'skipped':>7} {'errors':>6}  {'time':>7}"]
    for phase in phases:
        result = "passed" if phase.ok else "FAILED"
        if phase.counts is None:
            numbers = f"{'':>6} {'':>6} {'':>7} {'':>6}"
        else:
            c = phase.counts
            numbers = f"{c.passed:>6} {c.failed:>6} {c.skipped:>7} {c.errors:>6}"
        detail = ""
        if not phase.ok and (phase.counts is None or not phase.counts.failed_tests):
            detail = f"  (exit status {phase.status}" + (", no tests collected)" if phase.status == 5 else ")")
        lines.append(f"{phase.name:<{width}}  {result:<6}  {numbers}  {minutes(phase.seconds):>7}{detail}")
    total = sum(phase.seconds for phase in phases) if run_seconds is None else run_seconds
    names = []
    for phase in phases:
        counts = phase.counts
        if counts is None:
            continue
        for test in counts.failed_tests:
            names.append(f"  {phase.name}: {test}")
            if test in counts.reasons:
                names.append(f"      {counts.reasons[test]}")
    if names:
        lines.append("failed tests:")
        lines.extend(names)
    if failed:
        verdict = f"tests/run: FAILED: {', '.join(phase.name for phase in failed)} (total {minutes(total)})"
    else:
        verdict = f"tests/run: passed: {len(phases)} of {len(phases)} phases (total {minutes(total)})"
    lines.append(verdict)
    text = "\n".join(lines)
    if color:
        text = f"{RED if failed else GREEN}{text}{RESET}"
    return text


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    phases = read_phases(Path(argv[1]))
    run_seconds = float(argv[2]) if len(argv) == 3 else None
    color = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    print(render(phases, color=color, run_seconds=run_seconds))
    return 0 if phases and all(phase.ok for phase in phases) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
