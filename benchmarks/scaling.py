"""Scaling curves: how kstream's cost grows with keys, state, output, workers and the
checkpoint interval. Writes ``benchmarks/SCALING.md`` (each curve's table, the date,
machine and command) and ``benchmarks/plots/*.png`` (matplotlib, the ``bench`` extra).

    python -m benchmarks.scaling            # full: about 20 min on 2 cores
    python -m benchmarks.scaling --quick    # small sizes: a couple of minutes

Without ``--bootstrap`` (or ``KSTREAM_TEST_BOOTSTRAP``) a local broker is started for
the run. The measurements are in ``benchmarks/scaling_runs.py``, SCALING.md's tables and
verdicts in ``benchmarks/scaling_report.py``.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import click

from benchmarks import machine, scaling_plots
from benchmarks.broker import bootstrap_option, kafka
from benchmarks.report import kept_sections
from benchmarks.scaling_report import report
from benchmarks.scaling_report import target_lines as target_lines
from benchmarks.scaling_runs import (
    MIB,
    UNBOUNDED,
    Env,
    Results,
    latency,
    latency_medians,
    rss_vs_output,
    state_curve,
    throughput_vs_keys,
    throughput_workers,
)

BENCH_DIR = Path(__file__).resolve().parent
T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    """What one mode measures."""

    keys: tuple[int, ...]  # w2 throughput vs keys
    keys_min_records: int
    state_keys: tuple[int, ...]  # checkpoint and recovery vs state size
    state_keys_kept: tuple[int, ...]  # recovery with local state kept
    worker_records: int
    worker_keys: int
    intervals: tuple[float, ...]
    latency_runs: int  # runs per interval (the median is reported), interleaved
    latency_rate: int
    latency_min_s: float
    latency_warmup_s: float  # the unreported warm-up run before the latency curve
    outputs: tuple[int, ...]  # peak RSS vs output per interval
    sink_budget: int  # the bounded runs' --sink-buffer-memory, bytes
    changed_intervals: int  # successive intervals with 1 % of the keys changed
    small_max: int  # points above this size are large
    small_limit_s: float  # time limit of a point
    large_limit_s: float


FULL = Sizes(
    keys=(10_000, 100_000, 1_000_000, 10_000_000),
    keys_min_records=1_000_000,
    state_keys=(100_000, 1_000_000, 10_000_000),
    state_keys_kept=(100_000, 1_000_000, 10_000_000),  # 10 M: the last point of its size
    worker_records=2_000_000,
    worker_keys=100_000,
    intervals=(0.2, 1.0, 5.0),
    latency_runs=3,
    latency_rate=2_000,
    latency_min_s=10.0,
    latency_warmup_s=30.0,
    outputs=(1_000_000, 2_000_000, 4_000_000),
    sink_budget=64 * MIB,  # the default
    changed_intervals=10,
    small_max=2_000_000,
    small_limit_s=300.0,
    large_limit_s=900.0,
)
QUICK = Sizes(
    keys=(1_000, 10_000, 100_000),
    keys_min_records=100_000,
    state_keys=(10_000, 100_000),
    state_keys_kept=(10_000,),
    worker_records=300_000,
    worker_keys=10_000,
    intervals=(0.2, 1.0, 5.0),
    latency_runs=1,
    latency_rate=1_000,
    latency_min_s=4.0,
    latency_warmup_s=5.0,
    outputs=(100_000, 200_000, 400_000),
    sink_budget=4 * MIB,  # small outputs: a small budget, so the quick run spills too
    changed_intervals=5,
    small_max=200_000,
    small_limit_s=180.0,
    large_limit_s=180.0,
)


def _attempt(env: Env, res: Results, what: str, fn: Callable[[], T]) -> T | None:
    """Run one point; a failure is reported (in SCALING.md too), not fatal."""
    env.say(f"{what} ...")
    t0 = time.monotonic()
    try:
        row = fn()
    except Exception as e:  # one point failing must not lose the others
        res.failures.append(f"{what}: {str(e)[:400]}")
        env.say(f"{what}: FAILED after {time.monotonic() - t0:.0f} s: {e}")
        return None
    env.say(f"{what}: {row} ({time.monotonic() - t0:.0f} s)")
    return row


@dataclass(frozen=True)
class Point:
    """One measurement: ``run`` adds its rows to the results; ``limit_s`` bounds it."""

    what: str
    size: int  # points run smallest first, so the largest are what a spent budget skips
    limit_s: float
    run: Callable[[], None]
    series: str = ""  # points of one series take time in proportion to their work
    work: int = 0  # what the point's time grows with (0: its size)

    @property
    def units(self) -> int:
        return self.work or self.size


#: The curves, as ``--curve`` names them.
CURVES = ("keys", "state", "workers", "latency", "rss")
#: Sections of SCALING.md written by hand from separate runs, kept by a regeneration.
KEPT_SECTIONS = (
    "## The state curves on their own",
    "## The coordinator at scale",
    "## Threads, open files and RSS of a worker by its tasks",
)


def points(env: Env, sizes: Sizes, res: Results, curves: tuple[str, ...] = CURVES) -> list[Point]:
    """Every point of ``sizes``, in the order they run: by size, then curve (of the
    points of one size the state curve's with the state wiped first: it measures
    targets of the issue; recovery with the state kept last)."""
    pts: list[Point] = []

    def add(
        what: str,
        size: int,
        fn: Callable[[], T],
        rows: Callable[[T], None],
        series: str = "",
        work: int = 0,
    ) -> None:
        limit = sizes.large_limit_s if size > sizes.small_max else sizes.small_limit_s

        def run() -> None:
            row = _attempt(env, res, what, fn)
            if row is not None:
                rows(row)

        pts.append(Point(what, size, limit, run, series, work))

    for procs in (1, 2) if "workers" in curves else ():
        add(f"w2 with {procs} worker process(es)", sizes.worker_records // 10,
            lambda p=procs: throughput_workers(env, p, sizes.worker_records, sizes.worker_keys),  # type: ignore[misc]
            res.workers.append, "workers")  # fmt: skip
    rounds = range(sizes.latency_runs) if "latency" in curves else range(0)
    if rounds:
        # The broker was just started: its JVM compiles its hot paths during the first
        # tens of seconds of traffic, and the first latency runs measured that (fresh
        # broker, p99 at 0.2 s of three runs in a row: 981 / 661 / 714 and
        # 1108 / 723 / 687 ms; PROFILE.md fifteenth round). A broker in service is warm.
        add(f"broker warm-up: the latency job for {sizes.latency_warmup_s:g} s, not reported",
            -1, lambda: latency(env, sizes.intervals[0], sizes.latency_rate,
                                sizes.latency_warmup_s),
            lambda _row: None)  # fmt: skip
    for run, interval in ((r, i) for r in rounds for i in sizes.intervals):
        seconds = max(sizes.latency_min_s, 3 * interval)
        add(f"latency, checkpoints every {interval} s (run {run + 1}/{sizes.latency_runs})", 0,
            lambda i=interval, s=seconds: latency(env, i, sizes.latency_rate, s),  # type: ignore[misc]
            res.latency.append, f"latency {interval}")  # fmt: skip
    for n in sizes.outputs if "rss" in curves else ():
        add(f"peak RSS, {n:,} output records in one interval, sink buffer "
            f"{sizes.sink_budget // MIB} MiB and unbounded",
            n, lambda n=n: rss_vs_output(env, n, [sizes.sink_budget, UNBOUNDED]),  # type: ignore[misc]
            res.outputs.extend, "rss")  # fmt: skip

    def state(k: int, wipe: bool) -> None:
        changes = sizes.changed_intervals if wipe else 0
        add(f"state of {k:,} keys: {changes} intervals with 1 % changed, recovery with "
            f"local state {'wiped' if wipe else 'kept'}", k,
            lambda: state_curve(env, k, wipe, 0.01, changes),
            res.state.append, "state wiped" if wipe else "state kept")  # fmt: skip

    for k in sizes.state_keys if "state" in curves else ():
        state(k, wipe=True)
    for k in sizes.keys if "keys" in curves else ():
        add(f"w2 throughput, {k:,} keys", k,
            lambda k=k: throughput_vs_keys(env, k, max(k, sizes.keys_min_records)),  # type: ignore[misc]
            res.keys.append, "keys", max(k, sizes.keys_min_records))  # fmt: skip
    for k in sizes.state_keys_kept if "state" in curves else ():
        state(k, wipe=False)  # last of its size: the first a spent budget skips
    return sorted(pts, key=lambda p: p.size)  # stable: curve order within a size


def measure(env: Env, sizes: Sizes, budget_s: float, curves: tuple[str, ...] = CURVES) -> Results:
    """Run every point, smallest first, within ``budget_s``. A point gets its own time
    limit, never more than what is left of the budget plus 5 minutes. A point is skipped
    (listed as not measured) once the budget is spent, or when it would not end within
    it: its estimate is the time the previous point of its series took, scaled by work
    (w2's points by their records, the others by their size)."""
    res = Results()
    t_start = time.monotonic()
    took: dict[str, tuple[int, float]] = {}  # series -> work and seconds of its last point
    for p in points(env, sizes, res, curves):
        left = budget_s - (time.monotonic() - t_start)
        estimate = _estimate(p, took.get(p.series))
        if left <= 0 or estimate > left:
            why = (
                f"the run's time budget ({budget_s:.0f} s) was spent"
                if left <= 0
                else f"about {estimate:.0f} s by the previous point of its series, "
                f"{left:.0f} s of the run's time budget ({budget_s:.0f} s) left"
            )
            res.failures.append(f"{p.what}: skipped, {why}")
            env.say(f"{p.what}: skipped ({why})")
            continue
        env.timeout = min(p.limit_s, left + 300.0)
        t0 = time.monotonic()
        p.run()
        if p.series:
            took[p.series] = (p.units, time.monotonic() - t0)
    res.latency = latency_medians(res.latency)
    return res


def _estimate(p: Point, previous: tuple[int, float] | None) -> float:
    """Seconds point ``p`` should take, from the previous point of its series (0: none)."""
    if previous is None:
        return 0.0
    units, seconds = previous
    return seconds * (p.units / units if units > 0 else 1.0)


@click.command()
@bootstrap_option
@click.option("--quick", is_flag=True, help="small sizes (a couple of minutes)")
@click.option("--partitions", default=4, show_default=True)
@click.option("--budget", default=None, type=float,
              help="seconds after which the largest points are skipped [full: 1200, quick: 300]")  # fmt: skip
@click.option("--curve", "curves", multiple=True, type=click.Choice(CURVES),
              help="measure only this curve (repeatable; default: every curve)")  # fmt: skip
@click.option("--out", type=click.Path(path_type=Path), default=BENCH_DIR / "SCALING.md",
              show_default=True)  # fmt: skip
def main(
    bootstrap: str | None, quick: bool, partitions: int, budget: float | None,
    curves: tuple[str, ...], out: Path,
) -> None:  # fmt: skip
    """Measure the scaling curves; write SCALING.md and the plots."""
    argv = ["python", "-m", "benchmarks.scaling", *sys.argv[1:]]
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    sizes = QUICK if quick else FULL
    budget_s = budget if budget is not None else (300.0 if quick else 1200.0)
    machine_lines = machine.describe(None)
    t0 = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kstream-scaling-") as wd,
        kafka(bootstrap, Path(wd)) as (bootstrap_, broker_text),
    ):
        res = _run(bootstrap_, partitions, Path(wd), sizes, budget_s, curves)
    minutes = (time.monotonic() - t0) / 60
    plots = scaling_plots.draw(res, out.parent / "plots")
    header = [
        "# kstream scaling curves",
        "",
        f"Run {started} ({'quick' if quick else 'full'} mode, {minutes:.1f} min). Command "
        "(from the repository root):",
        "",
        f"    {shlex.join(argv)}",
        "",
        "## Machine",
        "",
        *machine_lines,
        f"- Kafka: {broker_text}; {partitions} partitions per topic",
        "",
        "One run per point except the latency curve's (medians of 3 in full mode): the "
        "curves' shape is the point; compare ratios between rows of one run. Targets and ratios against other contenders: "
        "[RESULTS.md](RESULTS.md); checkpoint overhead, profile: [PROFILE.md](PROFILE.md).",
        "",
    ]
    previous = out.read_text() if out.is_file() else ""
    kept = kept_sections(previous, KEPT_SECTIONS)  # separate runs' sections, by hand
    text = "\n".join([*report(res, sizes, header, plots), *(["", *kept] if kept else [])])
    out.write_text(text)
    click.echo("\n" + text + f"\nwritten to {out}")


def _run(bootstrap: str, partitions: int, workdir: Path, sizes: Sizes, budget_s: float,
         curves: tuple[str, ...]) -> Results:  # fmt: skip
    env = Env(bootstrap, partitions, workdir, sizes.small_limit_s, say=click.echo,
              python=sys.executable)  # fmt: skip
    return measure(env, sizes, budget_s, curves or CURVES)


if __name__ == "__main__":
    main()
