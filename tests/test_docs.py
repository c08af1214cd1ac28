"""The documentation resolves and its runnable examples run.

* every relative link in ``docs/*.md`` and ``README.md`` names an existing file, and an
  existing heading where it gives an anchor;
* every ``docs/design.md §n`` / ``§n.m`` reference anywhere in the repository (code
  comments, docstrings, Markdown), and every bare ``§n`` inside ``docs/``, names a
  section or step of ``docs/design.md``;
* nothing in the repository points at the design notes outside it;
* every repository path and every ``Class.member`` written as code in ``docs/*.md``
  exists, so a rename that leaves the architecture page behind fails here;
* every fenced code block marked runnable — the line ``<!-- run -->`` right above its
  opening fence — runs: a ``python`` block as a script in a fresh interpreter with the
  repository on ``sys.path``, after which each ``test_*`` function it defines is
  called; a ``sh``/``bash`` block with ``bash -euo pipefail`` in the repository root.
  Mark only blocks that need no broker and take a few seconds at most.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"
RUN_MARKER = "<!-- run -->"
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", ".kstream", ".hypothesis"}  # fmt: skip
TEXT_SUFFIXES = {".py", ".md", ".txt", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".json",
                 ".sh", ".properties", ".j2", ""}  # fmt: skip


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def repository_files() -> list[Path]:
    """Every text file of the repository, generated and ignored directories left out."""
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in filenames:
            path = Path(dirpath) / name
            if path.suffix in TEXT_SUFFIXES or name in {"Makefile", "Dockerfile"}:
                out.append(path)
    return out


def without_code_blocks(text: str) -> str:
    """``text`` with fenced code blocks blanked (line numbers kept)."""
    return re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)


# ---- headings and anchors --------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(path.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return frozenset(out)


@cache
def design_sections() -> frozenset[str]:
    """``"5"``, ``"5.1"``, ... for every numbered heading of docs/design.md."""
    out = set()
    for line in without_code_blocks(DESIGN.read_text()).splitlines():
        m = re.match(r"#{2,3}\s+(\d+)(?:\.(\d+))?[.\s]", line)
        if m:
            out.add(m.group(1) if m.group(2) is None else f"{m.group(1)}.{m.group(2)}")
    return frozenset(out)


# ---- links -----------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(path: Path) -> list[tuple[int, str]]:
    text = without_code_blocks(path.read_text())
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text)  # inline code
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                continue
            out.append((lineno, target))
    return out


def broken_link(source: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``source``) does not resolve, or None."""
    where, _, anchor = target.partition("#")
    dest = (source.parent / where).resolve() if where else source
    if not dest.exists():
        return f"{target}: no such file"
    try:
        dest.relative_to(ROOT)
    except ValueError:
        return f"{target}: outside the repository"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    broken = [
        f"{path.relative_to(ROOT)}:{lineno}: {why}"
        for lineno, target in relative_links(path)
        if (why := broken_link(path, target)) is not None
    ]
    assert not broken, "\n".join(broken)


def test_the_docs_link_to_code() -> None:
    # The architecture page's promise: every step a link.
    assert len(relative_links(DOCS / "architecture.md")) > 100


# ---- § references ----------------------------------------------------------------------------

DESIGN_REF = re.compile(r"docs/design\.md\)?((?:[\s,;\u2013-]*(?:and\s+)?§\d+(?:\.\d+)?)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")


def section_refs(text: str, *, bare: bool) -> list[tuple[int, str]]:
    """(line, "n" or "n.m") of every design reference in ``text``: those after
    ``docs/design.md``, and with ``bare`` every ``§n`` at all."""
    out = []
    for m in (SECTION if bare else DESIGN_REF).finditer(text):
        lineno = text.count("\n", 0, m.start()) + 1
        refs = [m.group(1)] if bare else SECTION.findall(m.group(1))
        out += [(lineno, r) for r in refs]
    return out


def test_the_design_has_every_section_and_step() -> None:
    sections = design_sections()
    assert {str(n) for n in range(1, 13)} <= sections
    assert {f"5.{i}" for i in range(1, 10)} | {f"6.{i}" for i in range(1, 6)} <= sections


def test_every_design_reference_in_the_repository_resolves() -> None:
    sections = design_sections()
    found, missing = 0, []
    for path in repository_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        inside_docs = path.parent == DOCS
        for lineno, ref in section_refs(text, bare=inside_docs):
            found += 1
            if ref not in sections:
                missing.append(f"{path.relative_to(ROOT)}:{lineno}: §{ref}")
    assert found > 40  # the code cites the design: the scan saw the citations
    assert not missing, "no such section in docs/design.md:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository_for_the_design() -> None:
    # (Spelt in pieces, so this file does not match itself.)
    # ("app/./shared/../shared/x", a store path in a test, is not one.)
    forbidden = re.compile(
        r"(?<![\w./])\.\./" + "shared/|DESIGN" + r"(?:\.md| §)|/work/" + "shared"
    )
    hits = []
    for path in repository_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            hits += [f"{path.relative_to(ROOT)}:{lineno}: {m}" for m in forbidden.findall(line)]
    assert not hits, "cite docs/design.md instead:\n" + "\n".join(hits)


# ---- code named in the docs ------------------------------------------------------------------

REPO_PATH = re.compile(
    r"^(?:kstream|tests|integration|benchmarks|topologies|docker|docs)/[\w./-]*$"
)
MEMBER = re.compile(r"^([A-Z]\w*)\.(_?[a-z]\w*)$")


def code_spans(path: Path) -> list[str]:
    return re.findall(r"`([^`\n]+)`", without_code_blocks(path.read_text()))


@cache
def class_files() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in (ROOT / "kstream").rglob("*.py"):
        for name in re.findall(r"^class (\w+)", path.read_text(), flags=re.M):
            out.setdefault(name, []).append(path)
    return out


def has_member(cls: str, member: str) -> bool:
    """Whether a class ``cls`` of kstream defines ``member`` (a method, a field, an
    attribute set in its module)."""
    pattern = re.compile(
        rf"^\s+(?:async\s+)?(?:def\s+{member}\b|{member}\s*[:=]|self\.{member}\s*[:=])", re.M
    )
    return any(pattern.search(p.read_text()) for p in class_files().get(cls, []))


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_code_named_in_the_docs_exists(path: Path) -> None:
    wrong = []
    for span in code_spans(path):
        if REPO_PATH.match(span) and not (ROOT / span).exists():
            wrong.append(f"{span}: no such file")
        m = MEMBER.match(span)
        if m and m.group(1) in class_files() and not has_member(*m.groups()):
            wrong.append(f"{span}: {m.group(1)} has no {m.group(2)}")
        elif m and m.group(1) not in class_files():
            wrong.append(f"{span}: no class {m.group(1)} in kstream/")
    assert not wrong, f"{path.name} names code that does not exist:\n" + "\n".join(wrong)


# ---- runnable blocks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    code: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)```(\w+)", line)
        if not m or i == 0 or lines[i - 1].strip() != RUN_MARKER:
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = textwrap.dedent("\n".join(lines[i + 1 : end]))  # (a block in a list item)
        assert code.strip(), f"{path.name}:{i + 1}: an empty runnable block"
        out.append(Block(path, i + 1, m.group(2), code))
    return out


BLOCKS = [b for p in markdown_files() for b in runnable_blocks(p)]

CALL_TESTS = """
for _name, _fn in list(globals().items()):
    if _name.startswith("test_") and callable(_fn):
        _fn()
"""


def test_the_readme_has_a_runnable_example() -> None:
    assert any(b.path.name == "README.md" and b.lang == "python" for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_runnable_block_runs(block: Block, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.code + "\n" + CALL_TESTS)
        cmd = [sys.executable, str(script)]
    elif block.lang in ("sh", "bash", "shell"):
        cmd = ["bash", "-euo", "pipefail", "-c", block.code]
    else:
        pytest.fail(f"{block}: a runnable block must be python or sh, not {block.lang}")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{block} failed:\n{done.stdout}\n{done.stderr}"


# ---- the checks themselves can fail ----------------------------------------------------------


def test_broken_links_and_anchors_are_found() -> None:
    doc = ROOT / "docs" / "design.md"
    assert broken_link(doc, "architecture.md#package-map") is None
    assert broken_link(doc, "../kstream/runtime/task.py") is None
    assert broken_link(doc, "#5-checkpoints") is None
    assert broken_link(doc, "#51-who-must-acknowledge") is None
    assert "no such file" in (broken_link(doc, "../kstream/nowhere.py") or "")
    assert "no heading" in (broken_link(doc, "architecture.md#nowhere") or "")


def test_references_are_read_with_their_chains() -> None:
    text = "x (docs/design.md §4, §5.4) y docs/design.md §5-§7 and [z](docs/design.md) §12."
    assert [r for _, r in section_refs(text, bare=False)] == ["4", "5.4", "5", "7", "12"]
    assert slug("5.1 Who must acknowledge") == "51-who-must-acknowledge"
    assert slug("`kstream` — design") == "kstream--design"


def test_a_marked_block_is_found_and_an_unmarked_one_is_not(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("```python\nA = 1\n```\n\n<!-- run -->\n```python\nB = 2\n```\n")
    assert [(b.line, b.code) for b in runnable_blocks(md)] == [(6, "B = 2")]
