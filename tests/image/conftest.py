"""Shows the image tests' measurements (image size, build and start-up times) in pytest's closing
summary, so a CI log has them without ``-s``."""

from __future__ import annotations

import pytest

_REPORT = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def image_report(pytestconfig: pytest.Config) -> list[str]:
    """Lines to print in the terminal summary under "rocketstore image"."""
    return pytestconfig.stash.setdefault(_REPORT, [])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(_REPORT, [])
    if lines:
        terminalreporter.section("rocketstore image")
        for line in lines:
            terminalreporter.write_line(line)
