"""Elastic jobs (issue 42): what a change of membership costs the tasks it does not touch.

Four ``kstream worker`` processes (they elect their coordinator) run a 2-stage keyed
window job, exactly-once, checkpoints every 2 s, on input produced live at a fixed rate:

    stage 1: source (8 partitions) -> peek (logs the record id) -> key_by("k<n>")
    stage 2: peek (logs the record id) -> 1 s tumbling window: count, sum of ids, max ts

Scenarios: ``rolling`` (SIGTERM each worker in turn, wait until it exited, start it
again: a Kubernetes rolling restart), ``scale`` (2 -> 4 workers, then 4 -> 2 by
SIGTERM), ``kill`` (kill -9 of one of 4 workers). A read_committed consumer notes when
each stage-2 task's output advances (the output key gives its task); the pure
definitions are in ``benchmarks/elastic_measure.py``. Each run's advances and steps are
kept as ``timeline.json`` beside its workers' logs (``--workdir``). The output is
checked exact against the windows computed from what was produced (0 lost, 0
duplicated).

    python -m benchmarks.elastic [--scenario rolling|scale|kill ...] [--runs N] [--job keyed|local]

``--job local`` runs the job without the shuffle: the source is partitioned by the key
(``keyed=True``), one stage of 8 tasks (peek, then the window) — issue 42's target for a
kill -9 is stated for such a job. ``--cooperative`` (with ``--job local``) runs its group
with ``-X partition.assignment.strategy=cooperative-sticky`` (docs/design.md §6.8).

Without ``--bootstrap`` a local broker (``kstream.dev.localbroker``) is started.
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import click

from benchmarks.broker import bootstrap_option, kafka
from benchmarks.elastic_job import INTERVAL_S, JOBS, PARTITIONS, Run
from benchmarks.elastic_measure import (
    Exactness,
    gaps_clear_of,
    longest_pause,
    owners_at,
    reprocessed_by,
    stall_time,
)
from benchmarks.elastic_plot import Timeline, draw

STALL_S = 2 * INTERVAL_S
SCENARIOS = ("rolling", "scale", "kill")
REPO_DIR = Path(__file__).resolve().parent.parent


@dataclass
class Step:
    name: str
    start: float
    end: float = 0.0
    moved: set[str] = field(default_factory=set)
    unmoved: set[str] = field(default_factory=set)


@dataclass
class Outcome:
    scenario: str
    rate: int
    steps: list[Step]
    steady_pause_s: float  # the longest task pause in the quiet spell before the first step
    unmoved_pause_s: float  # the longest pause of a task that did not move in its step
    unmoved_clear_s: float  # the same, of the pauses that overlap none of its moves
    moved_pause_s: float
    stall_s: float  # the job's: see elastic_measure
    reprocessed_unmoved: int  # by tasks (either stage) that did not move in their step
    reprocessed_s1: int
    reprocessed_s2: int
    restores: int  # "task X restored checkpoint" log lines during the steps
    rollbacks: int  # the coordinator's "restoring every task to checkpoint" lines in the steps
    exact: Exactness
    output_stage: str  # the prefix of the tasks whose output is watched ("stage1-")
    produced: int
    seconds: float
    timeline: Timeline


def run_scenario(
    scenario: str,
    bootstrap: str,
    workdir: Path,
    rate: int,
    timeout: float,
    say: Callable[[str], None] = click.echo,
    job: str = "keyed",
    cooperative: bool = False,
    kill_coordinator: bool = False,
) -> Outcome:
    run = Run(bootstrap, workdir, rate, timeout, job, cooperative=cooperative)
    t_begin = time.time()
    steps: list[Step] = []
    try:
        first = 2 if scenario == "scale" else 4
        for slot in range(first):
            run.start(slot)
        run.settle(0.0, advances=3)
        run.wait_stable()
        quiet_from = time.time()
        time.sleep(3 * INTERVAL_S)  # a quiet spell: the steady-state pause, for reference
        quiet_to = time.time()

        def step(name: str, *actions: Callable[[], None]) -> None:
            s = Step(name, time.time())
            say(f"  {name}")
            for action in actions:
                action()
            run.settle(s.start)
            time.sleep(INTERVAL_S)  # the pauses overlapping the step have ended
            s.end = time.time()
            steps.append(s)

        if scenario == "rolling":
            for slot in range(4):
                step(f"restart w{slot}", partial(run.stop, slot), partial(run.start, slot))
        elif scenario == "scale":
            step("scale out 2->4", partial(run.start, 2), partial(run.start, 3))
            step("scale in 4->2", partial(run.stop, 3), partial(run.stop, 2))
        elif scenario == "kill":
            # A worker that does not host the coordinator (killing that one also stops
            # every checkpoint until the next election: --kill-coordinator).
            host = run.coordinator_slot()
            victim = host if kill_coordinator and host is not None else 3 if host != 3 else 2
            role = "the coordinator's host" if victim == host else "not the coordinator's host"
            step(f"kill -9 w{victim} ({role})", partial(run.stop, victim, signal.SIGKILL))
        else:
            raise click.UsageError(f"unknown scenario {scenario!r}")
        t0, t1 = steps[0].start, steps[-1].end
        seen = run.seen()
        every = run.tasks
        events = run.ownership()
        for s in steps:
            before, after = owners_at(events, s.start), owners_at(events, s.end)
            for tid in sorted(every):
                same = before.get(tid) is not None and before.get(tid) == after.get(tid)
                (s.unmoved if same else s.moved).add(tid)
        re1, re2 = (
            reprocessed_by(seen.get(st, []), t0, t1, partial(run.task_of_record, st), every)
            for st in ("s1", "s2")
        )
        re_unmoved = sum(
            reprocessed_by(seen[st], s.start, s.end, partial(run.task_of_record, st), s.unmoved)
            for st in run.stages
            for s in steps
        )
        restores = run.log_count("restored checkpoint", t0, t1)
        rollbacks = run.log_count("restoring every task to checkpoint", t0, t1)
        exact = run.finish()
        adv = {p: sorted(run.advances.get(p, [])) for p in range(PARTITIONS)}
        all_adv = sorted(t for a in adv.values() for t in a)
        # Kept beside the workers' logs, to read a pause against them afterwards.
        (run.dir / "timeline.json").write_text(
            json.dumps(
                {
                    "advances": {run.output_task(p): a for p, a in adv.items()},
                    "steps": [
                        {"name": s.name, "start": s.start, "end": s.end, "moved": sorted(s.moved)}
                        for s in steps
                    ],
                    "quiet": [quiet_from, quiet_to],
                }
            )
        )

        def moves(task: str) -> list[tuple[float, float]]:
            return [(s.start, s.end) for s in steps if task in s.moved]

        def worst(pick: str) -> float:
            return max(
                (
                    longest_pause(adv[p], s.start, s.end)
                    for s in steps
                    for p in range(PARTITIONS)
                    if run.output_task(p) in getattr(s, pick)
                ),
                default=0.0,
            )

        return Outcome(
            scenario=scenario, rate=rate, steps=steps,
            steady_pause_s=max(
                longest_pause([t for t in adv[p] if t <= quiet_to], quiet_from, quiet_to)
                for p in adv
            ),
            unmoved_pause_s=worst("unmoved"), moved_pause_s=worst("moved"),
            unmoved_clear_s=max(
                (
                    max(gaps_clear_of(adv[p], s.start, s.end, moves(run.output_task(p))), default=0.0)
                    for s in steps
                    for p in range(PARTITIONS)
                    if run.output_task(p) in s.unmoved
                ),
                default=0.0,
            ),
            stall_s=stall_time(all_adv, [(s.start, s.end) for s in steps], STALL_S),
            reprocessed_s1=re1, reprocessed_s2=re2, reprocessed_unmoved=re_unmoved, restores=restores, rollbacks=rollbacks, exact=exact,
            output_stage=run.output_task(0)[:-1],
            produced=len(run.produced), seconds=time.time() - t_begin,
            timeline=Timeline(
                f"{scenario} ({job} job): {rate} records/s, 4 workers, checkpoints every {INTERVAL_S:.0f} s",
                adv, [(s.name, s.start, s.end, frozenset(p for p in range(PARTITIONS) if run.output_task(p) in s.moved)) for s in steps],
            ),
        )  # fmt: skip
    finally:
        run.close()


def table(outcomes: list[Outcome]) -> str:
    """A Markdown table: one row per scenario, the median (min-max) of its runs."""

    def cell(vals: list[float], fmt: str) -> str:
        med = statistics.median(vals)
        if len(vals) == 1 or min(vals) == max(vals):
            return format(med, fmt)
        return f"{format(med, fmt)} ({format(min(vals), fmt)}-{format(max(vals), fmt)})"

    head = (
        "| scenario | runs | steady pause s | unmoved tasks' longest pause s | the same, clear of "
        "their moves s | moved tasks' longest pause s | job stall s | re-processed stage 1 / "
        "stage 2 (by unmoved tasks) | rollbacks / task restores | exact |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for sc in SCENARIOS:
        os_ = [o for o in outcomes if o.scenario == sc]
        if not os_:
            continue
        unmoved = [o.unmoved_pause_s for o in os_]
        n_unmoved = [
            sum(1 for s in o.steps for t in s.unmoved if t.startswith(o.output_stage)) for o in os_
        ]
        exact = all(o.exact.exact for o in os_)
        rows.append(
            f"| {sc} | {len(os_)} | {cell([o.steady_pause_s for o in os_], '.1f')} | "
            f"{cell(unmoved, '.1f') if any(n_unmoved) else '- (all moved)'} | "
            f"{cell([o.unmoved_clear_s for o in os_], '.1f') if any(n_unmoved) else '-'} | "
            f"{cell([o.moved_pause_s for o in os_], '.1f')} | {cell([o.stall_s for o in os_], '.1f')} | "
            f"{cell([o.reprocessed_s1 for o in os_], '.0f')} / {cell([o.reprocessed_s2 for o in os_], '.0f')} ({cell([o.reprocessed_unmoved for o in os_], '.0f')}) | "
            f"{cell([o.rollbacks for o in os_], '.0f')} / {cell([o.restores for o in os_], '.0f')} | "
            + ("yes" if exact else "NO: " + "; ".join(str(o.exact) for o in os_ if not o.exact.exact))
            + " |"
        )  # fmt: skip
    return head + "\n".join(rows) + "\n"


@click.command()
@bootstrap_option
@click.option("--scenario", "scenarios", type=click.Choice(SCENARIOS), multiple=True,
              help="Scenario to run (repeatable) [default: all].")  # fmt: skip
@click.option("--runs", default=1, show_default=True, help="Runs of each scenario.")
@click.option("--rate", default=200, show_default=True, help="Input records per second.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the workers' logs here [default: a temporary directory].",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=REPO_DIR / "benchmarks" / "plots" / "elastic.png",
    show_default=True,
    help="Where to draw the first run of each scenario (needs matplotlib).",
)
@click.option("--timeout", default=120.0, show_default=True, help="Seconds a step may take.")
@click.option(
    "--job",
    type=click.Choice(JOBS),
    default="keyed",
    show_default=True,
    help="keyed: a key_by between two stages; local: one stage, the source partitioned by key.",
)
@click.option(
    "--kill-coordinator",
    is_flag=True,
    help="kill: the worker hosting the coordinator (by default one that does not).",
)
@click.option(
    "--cooperative",
    is_flag=True,
    help="The workers' group assigns cooperatively (with --job local: docs/design.md §6.8).",
)
def main(
    bootstrap: str | None,
    scenarios: tuple[str, ...],
    runs: int,
    rate: int,
    workdir: Path | None,
    plot: Path,
    timeout: float,
    job: str,
    cooperative: bool,
    kill_coordinator: bool,
) -> None:
    """Measure what membership changes cost a running 4-worker job (see module doc)."""
    outcomes: list[Outcome] = []
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="kstream-elastic-"))
            )
        workdir.mkdir(parents=True, exist_ok=True)
        bootstrap, _ = stack.enter_context(kafka(bootstrap, workdir))
        for run_no in range(1, runs + 1):
            for sc in scenarios or SCENARIOS:
                click.echo(f"{sc} run {run_no}:")
                o = run_scenario(
                    sc, bootstrap, workdir, rate, timeout, job=job, cooperative=cooperative,
                    kill_coordinator=kill_coordinator,
                )  # fmt: skip
                outcomes.append(o)
                click.echo(
                    f"  {o.seconds:.0f} s, {o.produced} records; unmoved pause {o.unmoved_pause_s:.1f} s, "
                    f"moved {o.moved_pause_s:.1f} s, stall {o.stall_s:.1f} s, re-processed "
                    f"{o.reprocessed_s1}/{o.reprocessed_s2} (unmoved {o.reprocessed_unmoved}), rollbacks {o.rollbacks}, restores {o.restores}, {o.exact}; steps: "
                    + "; ".join(f"{s.name}: moved {len(s.moved)}/{len(s.moved) + len(s.unmoved)}" for s in o.steps)
                )  # fmt: skip
        shutil.rmtree(workdir / "kafka", ignore_errors=True)
    click.echo(table(outcomes))
    firsts = [
        next(o for o in outcomes if o.scenario == sc)
        for sc in SCENARIOS
        if any(o.scenario == sc for o in outcomes)
    ]
    if draw([o.timeline for o in firsts], plot):
        click.echo(f"plot: {plot}")


if __name__ == "__main__":
    main()
