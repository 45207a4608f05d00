"""What a test does when a tool it needs is missing: fail under CI, skip on a developer machine.

CI (``.ci/run`` exports ``CI=true``; any non-empty value counts) installs every tool the suite
uses, so a missing one there is a broken environment and must turn the run red rather than shrink
it silently to the tests that happen to run. On a developer machine a skip naming the tool is
more useful than a failure. Every test and fixture that depends on an external tool (Java, Maven,
pyspark, the C++ client wheel, Docker, debootstrap, root for tmpfs mounts, ...) goes through
:func:`require_tool`, so the rule is written once.

:func:`pip_tool_venv` builds (once, cached) the virtualenv of a client installed from PyPI that
must not share an environment with ours; :func:`npm_tool_modules` does the same for an npm
package (``npm ci`` of a lockfile in the repository); :func:`go_tool_binary` builds (once, cached)
a driver program of a client that comes from the Go module proxy; :func:`cargo_tool_binary` a Rust
program of ours (bench/loadgen).

Importable from any test directory: pyproject's pytest ``pythonpath`` puts tests/support on sys.path.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: the driver programs of the compatibility tests (Maven, Go and npm projects, scripts), one folder
#: per client or Apache component they run: java4, java5, go5, node5, python5, cpp, mqadmin,
#: apache_broker, apache_classes
DRIVERS_DIR = Path(__file__).resolve().parent / "drivers"


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


#: where test tools installed from a package registry are cached, one folder per tool and version
#: (the cache directory the build scripts use too: $XDG_CACHE_HOME, else ~/.cache)
TOOL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rocketstore"
PIP_TIMEOUT_S = 600


def pip_tool_venv_dir(package: str, version: str) -> Path:
    """The virtualenv :func:`pip_tool_venv` builds for ``package==version``."""
    return TOOL_CACHE / "venvs" / f"{package}-{version}"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _has_package(venv: Path, package: str, version: str, module: str) -> bool:
    python = _venv_python(venv)
    if not python.exists():
        return False
    probe = f"import importlib.metadata as m, {module}; assert m.version({package!r}) == {version!r}"
    return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60, check=False).returncode == 0


def pip_tool_venv(package: str, version: str, module: str) -> Path:
    """The interpreter of a virtualenv of its own holding ``package==version`` (from PyPI, through pip),
    built on first use under :data:`TOOL_CACHE` and reused afterwards.

    A client package that installs a generic top-level name (both RocketMQ Python clients install
    ``rocketmq``) must not share an environment with another one or with ours; tests run it as a
    subprocess with this interpreter. Built atomically: a half-built one is never left at its
    place. ``module`` is imported to check the installation. Raises RuntimeError (or
    subprocess.TimeoutExpired) when it cannot be built: callers hand that to :func:`require_tool`.
    """
    venv = pip_tool_venv_dir(package, version)
    if _has_package(venv, package, version, module):
        return _venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    staging = venv.with_name(f"{venv.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for cmd in ([sys.executable, "-m", "venv", str(staging)],
                    [str(_venv_python(staging)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                     f"{package}=={version}"]):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd[-3:])} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        if venv.exists() and not _has_package(venv, package, version, module):
            shutil.rmtree(venv)
        if not venv.exists():
            # a venv's interpreter finds its site-packages relative to itself, so it survives the rename
            os.rename(staging, venv)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _has_package(venv, package, version, module):
        raise RuntimeError(f"{package}=={version} installed but `import {module}` fails")
    return _venv_python(venv)


GO_BUILD_TIMEOUT_S = 900


def go_sources_digest(source: Path) -> str:
    """A hash of every file under ``source`` (names and contents): a changed driver or go.sum gets
    a binary of its own instead of a stale one."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(source).as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def go_tool_binary_path(source: Path, name: str, version: str) -> Path:
    """Where :func:`go_tool_binary` keeps the program built from ``source``."""
    return TOOL_CACHE / name / f"{version}-{go_sources_digest(source)}" / name


def go_tool_binary(go: str, source: Path, name: str, version: str) -> Path:
    """The executable ``go build`` makes of the Go module in ``source`` (a driver program of a client
    pinned to ``version`` by its go.mod and go.sum), built on first use under :data:`TOOL_CACHE`
    and reused while the sources are unchanged.

    Modules come through the ordinary module proxy of ``go`` into its module cache, which may be
    empty (a fresh CI machine): go.sum pins every one, and ``-mod=readonly`` refuses to build
    rather than resolve anything go.sum does not name. Built atomically (into a temporary name,
    then renamed). Raises RuntimeError (or subprocess.TimeoutExpired) when it cannot be built:
    callers hand that to :func:`require_tool`.
    """
    binary = go_tool_binary_path(source, name, version)
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    staging = binary.with_name(f"{name}.tmp-{os.getpid()}")
    # GOWORK=off: a go.work above the checkout must not pull other modules in; -trimpath and
    # -buildvcs=false: the binary does not depend on where the checkout is or on its git state
    env = {**os.environ, "GOWORK": "off", "CGO_ENABLED": "0"}
    cmd = [go, "build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-o", str(staging), "."]
    try:
        proc = subprocess.run(cmd, cwd=source, capture_output=True, text=True, timeout=GO_BUILD_TIMEOUT_S,
                              env=env, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"`go build` in {source} failed: {proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        os.replace(staging, binary)
    finally:
        staging.unlink(missing_ok=True)
    return binary


CARGO_BUILD_TIMEOUT_S = 900


def cargo_tool_binary(cargo: str, manifest: Path, name: str) -> Path:
    """The release binary ``name`` of the Cargo package ``manifest`` (bench/loadgen), built by cargo
    into a target directory of its own under :data:`TOOL_CACHE`: cargo rebuilds it when its sources
    change and takes about a second when they did not. ``--locked``: the committed Cargo.lock pins
    every crate. Raises RuntimeError when it cannot be built: callers hand that to :func:`require_tool`."""
    target = TOOL_CACHE / f"{manifest.parent.name}-target"
    proc = subprocess.run([cargo, "build", "--release", "--locked", "--quiet", "--manifest-path", str(manifest)],
                          capture_output=True, text=True, timeout=CARGO_BUILD_TIMEOUT_S, check=False,
                          env={**os.environ, "CARGO_TARGET_DIR": str(target)})
    if proc.returncode != 0:
        raise RuntimeError(f"`cargo build` of {manifest} failed: {proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return target / "release" / name


NPM_TIMEOUT_S = 600


def npm_pinned_version(project: Path, package: str) -> str:
    """The version of ``package`` that ``project``'s package.json pins (an exact version, no range)."""
    return str(json.loads((project / "package.json").read_text())["dependencies"][package])


def npm_tool_modules_dir(name: str, project: Path, package: str) -> Path:
    """The node_modules :func:`npm_tool_modules` installs: keyed by the pinned version and the
    lockfile's hash, so a changed lockfile gets a fresh install and an unchanged one is reused."""
    lock = hashlib.sha256((project / "package-lock.json").read_bytes()).hexdigest()[:16]
    return TOOL_CACHE / name / f"{npm_pinned_version(project, package)}-{lock}" / "node_modules"


def _has_npm_package(modules: Path, package: str, version: str) -> bool:
    manifest = modules / package / "package.json"
    return manifest.exists() and json.loads(manifest.read_text()).get("version") == version


def npm_tool_modules(name: str, project: Path, package: str, npm: str) -> Path:
    """A node_modules folder holding exactly what ``project``'s package-lock.json pins (``npm ci``
    with the ``npm`` executable, from the npm registry), built on first use under
    :data:`TOOL_CACHE` and reused afterwards; scripts point NODE_PATH at it.

    Install scripts do not run (``--ignore-scripts``): the clients we test need none, and nothing
    from the registry runs before the test does. Built atomically, as :func:`pip_tool_venv` is.
    Raises RuntimeError (or subprocess.TimeoutExpired) when it cannot be built: callers hand that
    to :func:`require_tool`.
    """
    modules = npm_tool_modules_dir(name, project, package)
    version = npm_pinned_version(project, package)
    if _has_npm_package(modules, package, version):
        return modules
    modules.parent.parent.mkdir(parents=True, exist_ok=True)
    staging = modules.parent.with_name(f"{modules.parent.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for manifest in ("package.json", "package-lock.json"):
            shutil.copy(project / manifest, staging / manifest)
        cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
        proc = subprocess.run(cmd, cwd=staging, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        if modules.parent.exists() and not _has_npm_package(modules, package, version):
            shutil.rmtree(modules.parent)
        if not modules.parent.exists():
            os.rename(staging, modules.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not _has_npm_package(modules, package, version):
        raise RuntimeError(f"npm ci ran but {modules / package} is not version {version}")
    return modules


@dataclass
class ScriptRun:
    """What a client script run in a tool's virtualenv printed: its JSON lines (each with a
    ``kind``), its exit code and its stderr."""

    returncode: int
    lines: list[dict[str, Any]]
    stderr: str

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("kind") == kind]


def run_tool_script(interpreter: Path | str, script: Path, args: Sequence[str | int], *, home: Path,
                    timeout: float, env: Mapping[str, str] | None = None) -> ScriptRun:
    """Run ``script`` with a tool's ``interpreter`` (a tool virtualenv's python, or node), HOME at
    ``home`` (clients write logs there), ``env`` added, and no PYTHONPATH (nothing of ours may
    shadow the client's own package)."""
    full_env = {**os.environ, "HOME": str(home), **(env or {})}
    full_env.pop("PYTHONPATH", None)
    return run_tool([interpreter, script, *args], env=full_env, timeout=timeout)


def run_tool(cmd: Sequence[str | int | Path], *, env: Mapping[str, str], timeout: float) -> ScriptRun:
    """Run a client driver ``cmd`` that prints JSON lines on stdout (other lines are ignored)."""
    proc = subprocess.run([str(part) for part in cmd], capture_output=True, text=True, timeout=timeout,
                          env=dict(env), check=False)
    lines = [json.loads(raw) for raw in proc.stdout.splitlines() if raw.startswith("{")]
    return ScriptRun(proc.returncode, lines, proc.stderr)
