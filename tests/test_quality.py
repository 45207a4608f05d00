"""Repository-level promises: lint and types are clean, and no package shadows the stdlib.

These run in CI like any other test so a lint or type regression fails the build.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_clean() -> None:
    result = run(sys.executable, "-m", "ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_clean() -> None:
    result = run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_stdlib_operator_not_shadowed_from_repo_root() -> None:
    """The operator lives in operator/, which must never become an importable `operator` package."""
    result = run(sys.executable, "-c", "import operator, sys; print(operator.__file__); sys.exit(0)")
    assert result.returncode == 0, result.stderr
    assert str(ROOT) not in result.stdout, f"`import operator` resolved inside the repo: {result.stdout}"
    assert not (ROOT / "operator" / "__init__.py").exists()


def test_every_package_is_in_the_wheel() -> None:
    """pyproject lists the packages a wheel (the image, a pip install) holds: a package folder missing
    from the list is absent from every install but the editable one, where the tests would not see it."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = set(setup["package-dir"])  # each mapped folder is a package, with an __init__.py or not
    for name, folder in setup["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([name, *relative.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - found == set(), "listed in pyproject.toml but not a package folder"
