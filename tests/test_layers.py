"""The package layers point only down, and no module imports itself back through others.

Layers, lowest first: common <- remoting <- {store, client} <- broker <- {cli, operator,
pipeline}. The operator talks to brokers through the client only; the pipeline reads store
directories through the store's read-only view and brokers through the client, never through
the broker process's code. Every import counts, including those inside functions, under ``TYPE_CHECKING``
and module names given to ``importlib`` as strings: a lazy import hides a cycle from the
interpreter, not from the design.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the folder holding each part of the ``rocketstore`` namespace (pyproject.toml's package-dir)
PARTS = {
    "common": "common",
    "remoting": "remoting",
    "store": "store",
    "client": "client",
    "broker": "broker_image",
    "cli": "cli",
    "operator": "operator",
    "pipeline": "pipeline",
}

#: what each part may import, besides itself
ALLOWED = {
    "common": set(),
    "remoting": {"common"},
    "store": {"common", "remoting"},
    "client": {"common", "remoting"},
    "broker": {"common", "remoting", "store", "client"},
    "cli": {"common", "remoting", "store", "client", "broker", "operator", "pipeline"},
    "operator": {"common", "remoting", "client"},
    "pipeline": {"common", "remoting", "store", "client"},
}


def modules() -> Iterator[tuple[str, Path]]:
    for part, folder in PARTS.items():
        base = ROOT / folder / "rocketstore" / part
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            names = [] if rel.parts == ("__init__",) else [p for p in rel.parts if p != "__init__"]
            yield ".".join(["rocketstore", part, *names]), path


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            # `from pkg import mod` imports the module pkg.mod when there is one
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            targets = [node.value]  # a module named in a string, for importlib.import_module
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    paths = dict(modules())
    known = set(paths)
    return {name: imports_of(name, path, known) for name, path in paths.items()}


def part_of(module: str) -> str:
    return module.split(".")[1]


def test_every_part_has_modules() -> None:
    parts = {part_of(name) for name in graph()}
    assert parts == set(PARTS), f"parts without modules: {set(PARTS) - parts}"


def test_layers_point_down() -> None:
    upward = sorted(
        f"{src} -> {dst}"
        for src, targets in graph().items()
        for dst in targets
        if part_of(dst) != part_of(src) and part_of(dst) not in ALLOWED[part_of(src)]
    )
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def strongly_connected(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; returns the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    cycles = strongly_connected(graph())
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_detector_sees_a_cycle() -> None:
    """The detector itself: a lazy import back is still a cycle."""
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_installing_claims_no_generic_top_level_name(tmp_path: Path) -> None:
    """Only ``rocketstore`` is installed: ``import store`` and friends find nothing of ours.

    Run from an empty directory so the repository's folders are not on the path, as for a user.
    """
    names = ["store", "pipeline", "remoting", "common", "client", "cli", "broker_image", "rocketstore_operator"]
    probe = "import importlib.util, sys; print([n for n in sys.argv[1:] if importlib.util.find_spec(n)])"
    out = subprocess.run([sys.executable, "-c", probe, *names], cwd=tmp_path, capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, check=True)
    assert out.stdout.strip() == "[]"
    rocketstore = subprocess.run([sys.executable, "-c", "import rocketstore.store.commit_log"], cwd=tmp_path,
                                 capture_output=True, text=True)
    assert rocketstore.returncode == 0, rocketstore.stderr


#: the operator's libraries, which only the ``operator`` extra installs
OPERATOR_LIBRARIES = ("kopf", "kubernetes", "aiohttp")

#: a subprocess prologue that makes the operator's libraries unimportable, as in a broker-only install
WITHOUT_OPERATOR_LIBRARIES = f"""
import importlib.abc, sys
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {OPERATOR_LIBRARIES!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def test_everything_but_the_operator_works_without_its_libraries() -> None:
    """kopf, kubernetes and aiohttp are the ``operator`` extra: every other module imports without
    them, ``rocketstore broker`` runs, and ``rocketstore operator`` names the extra to install."""
    names = [name for name, _ in modules() if part_of(name) != "operator" and not name.endswith(".__main__")]
    code = WITHOUT_OPERATOR_LIBRARIES + f"""
import importlib
for name in {names!r}:
    importlib.import_module(name)
from rocketstore.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

    def rocketstore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)

    broker = rocketstore("broker", "--help")
    assert broker.returncode == 0 and "--listen-port" in broker.stdout, broker.stderr
    operator = rocketstore("operator")
    assert operator.returncode == 2, operator.stderr
    assert "pip install 'rocketstore[operator]'" in operator.stderr, operator.stderr
    assert "Traceback" not in operator.stderr
