"""Interleaved A/B of kstream's own contenders between two source trees: the same input,
the same broker, runs alternating A B / B A, ratios taken pair by pair (machine drift
hits both sides alike). Each contender process runs with its tree as working directory,
so ``python -m`` imports that tree's ``kstream`` and ``benchmarks`` first; both trees
must take the contender options this tree's harness passes.

Run: ``python -m benchmarks.ab_trees BEFORE_TREE [--after TREE] [--workload w1 --workload
w2] [--records N] [--rounds R]`` (a local broker is started for the run, as
``benchmarks.run`` does without ``--bootstrap``). Make the BEFORE tree with ``git
worktree add --detach /tmp/before REV``.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import click

from benchmarks import generate, harness
from benchmarks.broker import kafka
from benchmarks.generate import InputSpec
from benchmarks.harness import Expected, Harness
from benchmarks.lineup import workloads
from benchmarks.verify import expected_stateless, expected_windows

WINDOW_MS = 5_000


def ab(
    bootstrap: str,
    trees: dict[str, Path],
    keys: tuple[str, ...],
    records: int,
    rounds: int,
    distinct: int = 20_000,
) -> dict[tuple[str, str], list[float]]:
    """Records/s per (workload, side), runs interleaved; every run's output checked."""
    wls = {w.key: w for w in workloads(WINDOW_MS)}
    spec = InputSpec(records, distinct, 4, event_rate=5_000, fmt="json")
    ends = generate.load(bootstrap, spec)
    exp = Expected(expected_stateless(spec), expected_windows(spec, WINDOW_MS), None)
    rates: dict[tuple[str, str], list[float]] = {}
    sides = list(trees)
    with tempfile.TemporaryDirectory(prefix="kstream-ab-") as wd:
        h = Harness(bootstrap, spec.partitions, Path(wd), 600)
        for r in range(rounds):
            for key in keys:
                c = next(c for c in wls[key].contenders if c.name == "kstream")
                for side in sides if r % 2 == 0 else sides[::-1]:
                    harness.REPO_DIR = trees[side]
                    res = h.run_once(wls[key], c, spec, ends, exp)
                    if not res.valid:
                        raise click.ClickException(f"{key} {side}: {res.note}")
                    rates.setdefault((key, side), []).append(res.rate)
                    click.echo(f"round {r} {key} {side} {res.rate:,.0f} rec/s")
    return rates


@click.command(help=__doc__.split("\n\n")[0])
@click.argument("before", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--after", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=harness.REPO_DIR, show_default=True)  # fmt: skip
@click.option("--workload", "keys", multiple=True, type=click.Choice(["w1", "w2", "w3"]),
              default=("w1", "w2"), show_default=True)  # fmt: skip
@click.option("--records", default=200_000, show_default=True)
@click.option("--rounds", default=4, show_default=True)
@click.option("--keys", "distinct", default=20_000, show_default=True, help="distinct keys")
def main(
    before: Path, after: Path, keys: tuple[str, ...], records: int, rounds: int, distinct: int
) -> None:
    with kafka(None) as (bootstrap, text):
        click.echo(text)
        rates = ab(bootstrap, {"before": before, "after": after}, keys, records, rounds, distinct)
    for key in keys:
        b, a = rates[(key, "before")], rates[(key, "after")]
        ratios = [x / y for x, y in zip(a, b, strict=True)]
        click.echo(
            f"{key}: before median {statistics.median(b):,.0f} ({min(b):,.0f}-{max(b):,.0f}), "
            f"after median {statistics.median(a):,.0f} ({min(a):,.0f}-{max(a):,.0f}); "
            f"after/before per pair {[round(x, 3) for x in ratios]}, "
            f"median {statistics.median(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
