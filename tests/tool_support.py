"""What a test does when a tool it needs is missing: fail under CI, skip on a developer machine.

CI (``.ci/run`` exports ``CI=true``; any non-empty value counts) installs every tool the suite
uses, so a missing one there is a broken environment and must turn the run red rather than shrink
it silently to the tests that happen to run. On a developer machine a skip naming the tool is
more useful than a failure. Every test and fixture that depends on an external tool (Java, Maven,
pyspark, the C++ client wheel, Docker, debootstrap, root for tmpfs mounts, ...) goes through
:func:`require_tool`, so the rule is written once.

Importable from any test directory: pyproject's pytest ``pythonpath`` puts ``tests/`` on sys.path.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def under_ci() -> bool:
    """True when the environment variable ``CI`` is set to a non-empty value."""
    return bool(os.environ.get("CI"))


def require_tool(name: str, available: bool, why: str) -> None:
    """Return if ``available``; otherwise fail (under CI) or skip, naming ``name`` and ``why``.

    Usable at module level too (a conftest that cannot even be imported without the tool).
    """
    if available:
        return
    message = f"{name} is missing: {why}"
    if under_ci():
        pytest.fail(f"{message} (CI is set, so a missing tool fails instead of skipping)", pytrace=False)
    pytest.skip(f"{message} (under CI this fails)", allow_module_level=True)


def require_executable(name: str, why: str) -> str:
    """The path of the executable ``name`` on PATH, or fail/skip as :func:`require_tool` does."""
    path = shutil.which(name)
    require_tool(name, path is not None, why)
    assert path is not None  # require_tool has failed or skipped otherwise
    return path


def require_module(module: str, tool: str, why: str) -> None:
    """``module`` is importable (found without importing it); ``tool`` names what to install."""
    require_tool(tool, importlib.util.find_spec(module) is not None, why)
