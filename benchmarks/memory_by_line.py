"""What grew per task between two tracemalloc snapshots of a worker, by source line.

Each traced block is put on the innermost line of kstream's own code in its traceback
(a dataclass's generated ``__init__``, a ``dict`` grown by the standard library... are
put on the kstream line that called them); a block with no kstream frame keeps its
innermost line. The snapshots come from ``python -m benchmarks.procs_per_task
--tracemalloc 16 --snapshots DIR`` (one per task count), or from any process:

    python -m benchmarks.memory_by_line 64 DIR/64.snap 256 DIR/256.snap [--top 30]
"""

from __future__ import annotations

import tracemalloc
from collections import Counter
from pathlib import Path

import click

PACKAGE = "/kstream/"


def _site(tb: tracemalloc.Traceback, package: str) -> str:
    frames = list(tb)  # oldest first
    inner = next((f for f in reversed(frames) if package in f.filename), frames[-1])
    name = inner.filename
    cut = name.rfind(package)
    return f"{name[cut + 1 :] if cut >= 0 else name.rsplit('/', 1)[-1]}:{inner.lineno}"


def by_site(
    snapshot: tracemalloc.Snapshot, package: str = PACKAGE
) -> tuple[Counter[str], Counter[str]]:
    """Bytes and blocks by site (see the module's docstring)."""
    size: Counter[str] = Counter()
    blocks: Counter[str] = Counter()
    for trace in snapshot.traces:
        site = _site(trace.traceback, package)
        size[site] += trace.size
        blocks[site] += 1
    return size, blocks


def growth_table(n0: int, snap0: Path, n1: int, snap1: Path, top: int = 30) -> str:
    """A markdown table of the ``top`` sites by bytes grown per task from ``n0`` tasks
    (``snap0``) to ``n1`` (``snap1``), with the traced total first."""
    size0, blocks0 = by_site(tracemalloc.Snapshot.load(str(snap0)))
    size1, blocks1 = by_site(tracemalloc.Snapshot.load(str(snap1)))
    per = float(n1 - n0)
    lines = [
        f"| traced Python memory by line | KB per task ({n0} -> {n1} tasks) | blocks per task "
        f"| MB at {n0} | MB at {n1} |",
        "|---|---|---|---|---|",
    ]
    total0, total1 = sum(size0.values()), sum(size1.values())
    lines.append(
        f"| all | {(total1 - total0) / per / 1024:.1f} "
        f"| {(sum(blocks1.values()) - sum(blocks0.values())) / per:.0f} "
        f"| {total0 / 2**20:.1f} | {total1 / 2**20:.1f} |"
    )
    grown = sorted(size1.keys() | size0.keys(), key=lambda s: size0[s] - size1[s])
    for site in grown[:top]:
        lines.append(
            f"| {site} | {(size1[site] - size0[site]) / per / 1024:.1f} "
            f"| {(blocks1[site] - blocks0[site]) / per:.0f} "
            f"| {size0[site] / 2**20:.2f} | {size1[site] / 2**20:.2f} |"
        )
    return "\n".join(lines)


@click.command()
@click.argument("n0", type=int)
@click.argument("snap0", type=click.Path(exists=True, path_type=Path))
@click.argument("n1", type=int)
@click.argument("snap1", type=click.Path(exists=True, path_type=Path))
@click.option("--top", type=int, default=30, show_default=True)
def main(n0: int, snap0: Path, n1: int, snap1: Path, top: int) -> None:
    """The sites that grew most per task from N0 tasks (SNAP0) to N1 (SNAP1)."""
    click.echo(growth_table(n0, snap0, n1, snap1, top))


if __name__ == "__main__":
    main()
