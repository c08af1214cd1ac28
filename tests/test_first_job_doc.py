"""docs/first-job.md without a broker: its marked blocks are well formed, and the files
it writes — the topology and its unit test — work (the whole page runs against a real
broker in integration/test_first_job.py).

Markers, on the line right above a fenced block: ``<!-- file: NAME -->`` (written to
NAME in the working directory), ``<!-- run: broker -->`` (a ``sh`` block run with
``bash -euo pipefail``), ``<!-- output: any order -->`` and ``<!-- output: prefix -->``
(what the run block before it prints: the same lines in any order, or lines starting
with these).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "first-job.md"
KINDS = re.compile(r"<!-- (file: \S+|run: broker|output: any order|output: prefix) -->")


@dataclass(frozen=True)
class Step:
    kind: str
    line: int
    lang: str
    code: str

    def __str__(self) -> str:
        return f"{PAGE.name}:{self.line} ({self.kind})"


def steps(path: Path) -> list[Step]:
    """The page's marked blocks, in order."""
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^```(\w+)", line)
        if not m or i == 0:
            continue
        marker = KINDS.fullmatch(lines[i - 1].strip())
        if marker is None:
            continue
        end = i + 1
        while lines[end] != "```":
            end += 1
        out.append(Step(marker.group(1), i + 1, m.group(1), "\n".join(lines[i + 1 : end])))
    return out


def test_the_walkthrough_has_every_step_and_outputs_follow_runs() -> None:
    found = steps(PAGE)
    assert [s.kind for s in found if s.kind.startswith("file: ")] == [
        "file: clicks.txt",
        "file: clicks.py",
        "file: test_clicks.py",
    ]
    previous = None
    for s in found:
        if s.kind.startswith("output: "):
            assert previous is not None and previous.kind == "run: broker", s
        if s.kind == "run: broker":
            assert s.lang == "sh", s
        previous = s
    runs = "\n".join(s.code for s in found if s.kind == "run: broker")
    for command in ("kstream dev topics create", "kstream dev produce", "kstream run",
                    "kstream dev consume", "kstream status", "kstream worker", "kill -9",
                    "pytest"):  # fmt: skip
        assert command in runs, command


def test_the_pages_topology_passes_the_pages_unit_test(tmp_path: Path) -> None:
    for s in steps(PAGE):
        if s.kind.startswith("file: "):
            (tmp_path / s.kind.removeprefix("file: ")).write_text(s.code + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_clicks.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "1 passed" in out.stdout
