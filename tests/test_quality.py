"""Repository-level promises: lint and types are clean, and no package shadows the stdlib.

These run in CI like any other test so a lint or type regression fails the build.
"""

from __future__ import annotations

import datetime
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

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


# -- the documentation: README.md is the front door, docs/ holds one page per subject ----------

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 250
_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def _prose_lines(text: str) -> list[str]:
    """The lines of a markdown text outside fenced code blocks, where links and headings count."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, markup and punctuation dropped (but '-' and
    '_'), each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading counts by its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    """Every heading anchor of ``markdown``, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(markdown.read_text()):
        match = _HEADING.match(line)
        if match:
            slug = github_slug(match.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(markdown: Path) -> list[str]:
    """Relative links of ``markdown`` whose file does not exist, or whose #anchor names no heading
    of the markdown file it points into."""
    broken = []
    for line in _prose_lines(markdown.read_text()):
        for target in _LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
                continue
            path_part, _, anchor = target.partition("#")
            linked = (markdown.parent / path_part).resolve() if path_part else markdown
            if not linked.exists():
                broken.append(f"{target}: no such file {linked}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    return broken


def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_github_slug_follows_githubs_rules() -> None:
    assert github_slug("gRPC v2 endpoint against Apache RocketMQ's proxy") == \
        "grpc-v2-endpoint-against-apache-rocketmqs-proxy"
    assert github_slug("What tests/run does") == "what-testsrun-does"
    assert github_slug("`rocketstore admin` and broker_conf keys") == "rocketstore-admin-and-broker_conf-keys"


def test_broken_links_are_found(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing heading are reported, good links are not."""
    (tmp_path / "other.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#a-section) [ok](#page) [web](https://example.org/x.md)\n"
                    "[gone](missing.md) [no anchor](other.md#no-such-section)\n\n```\n[in code](nowhere.md)\n```\n")
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "other.md#no-such-section"]


def test_every_relative_link_of_the_docs_resolves() -> None:
    """README.md and docs/*.md link to files and headings that exist: a page moved or a heading
    renamed breaks the links to it, which GitHub shows as a 404 or a jump to the top."""
    assert (DOCS / "README.md").exists(), "docs/README.md, the index of the pages, is missing"
    broken = [f"{page.relative_to(ROOT)}: {b}" for page in doc_pages() for b in broken_links(page)]
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme_and_the_index() -> None:
    readme = README.read_text()
    index = (DOCS / "README.md").read_text()
    pages = [p.name for p in DOCS.glob("*.md") if p.name != "README.md"]
    assert [p for p in pages if f"(docs/{p})" not in readme] == []
    assert [p for p in pages if f"({p})" not in index] == []


def test_readme_stays_a_front_door() -> None:
    """README.md is what a newcomer reads first: what RocketStore is, the set-up and test commands,
    a tour, the layout, links. Everything else goes to a page under docs/."""
    lines = len(README.read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move a subject to docs/"


def _doc_blocks_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "bench" / "doc_blocks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_blocks_are_still_generated() -> None:
    """docs/benchmarks.md holds one block per benchmark that publishes figures (a script under bench/
    with a DOC_SECTION, or more: KILL_DOC_SECTION), each between its begin and end markers, once, in
    order, and opening with
    the line the block writer puts in naming the command and the date: a block edited by hand, or
    markers lost in an edit, would make the next `--doc` run fail or publish unsourced figures."""
    doc_blocks = _doc_blocks_module()
    writers = {m.group(1): script.name for script in (ROOT / "bench").glob("*.py")
               for m in re.finditer(r'^(?:[A-Z]+_)?DOC_SECTION = "(\w+)"$', script.read_text(), re.M)}
    sections = set(writers)
    assert sections >= {"store", "broker", "grpc", "timer"}
    page = DOCS / "benchmarks.md"
    text = page.read_text()
    on_own_line = set(re.findall(r"^<!-- bench:(\w+):(?:begin|end) -->$", text, re.M))
    assert on_own_line == sections, "blocks in docs/benchmarks.md and benchmarks writing them differ"
    # the generated-by line, as the writer builds it, with the command and the date left open
    sample = doc_blocks.generated_body(argv=[str(ROOT / "bench" / "COMMAND")], when=datetime.date(1999, 12, 31))
    head = re.escape(sample).replace(re.escape("bench/COMMAND"), r"bench/[\w.]+\.py[^`]*")
    head = head.replace("1999\\-12\\-31", r"\d{4}-\d{2}-\d{2}").replace("1999-12-31", r"\d{4}-\d{2}-\d{2}")
    for name in sorted(sections):
        text, start, stop = doc_blocks.check_section(page, name)  # exactly one pair, in order
        body = text[start:stop].strip()
        assert re.match(head + r"(\n|$)", body), f"bench:{name} block does not open with its generated-by line"
        assert f"`python3 bench/{writers[name]} " in body.splitlines()[0], f"bench:{name} names another command"
