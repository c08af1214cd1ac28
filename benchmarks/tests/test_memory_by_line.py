"""memory_by_line: traced blocks put on the innermost line of the package's code."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from benchmarks.memory_by_line import by_site, growth_table

PACKAGE = "/benchmarks/tests/"


def _blocks(n: int) -> list[bytearray]:
    return [bytearray(1000) for _ in range(n)]  # the line the blocks are put on


def _snapshot(n: int, path: Path) -> Path:
    tracemalloc.start(4)
    try:
        kept = _blocks(n)
        tracemalloc.take_snapshot().dump(str(path))
    finally:
        tracemalloc.stop()
    del kept
    return path


def test_blocks_are_put_on_the_package_s_line(tmp_path: Path) -> None:
    snap = tracemalloc.Snapshot.load(str(_snapshot(200, tmp_path / "a.snap")))
    size, blocks = by_site(snap, PACKAGE)
    line = _blocks.__code__.co_firstlineno + 1
    site = f"benchmarks/tests/test_memory_by_line.py:{line}"
    assert blocks[site] >= 200  # the bytearrays (and the list holding them)
    assert size[site] >= 200 * 1000


def test_growth_table_per_task(tmp_path: Path) -> None:
    """200 more bytearrays of 1 000 bytes from 10 to 20 tasks: 20 per task, each two
    blocks (object and buffer); a block outside the package (here: every one) is put
    on its own innermost line."""
    a, b = _snapshot(100, tmp_path / "a.snap"), _snapshot(300, tmp_path / "b.snap")
    lines = growth_table(10, a, 20, b, top=3).splitlines()
    line = _blocks.__code__.co_firstlineno + 1
    assert [row.split(" | ")[:3] for row in lines] == [
        ["| traced Python memory by line", "KB per task (10 -> 20 tasks)", "blocks per task"],
        ["|---|---|---|---|---|"],
        ["| all", lines[2].split(" | ")[1], "40"],
        [f"| test_memory_by_line.py:{line}", lines[3].split(" | ")[1], "40"],
    ]
    assert 20 * 1000 / 1024 <= float(lines[3].split(" | ")[1]) < 2 * 20 * 1000 / 1024
