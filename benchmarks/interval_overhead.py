"""Workload 4's checkpoint overhead against the checkpoint interval.

    python -m benchmarks.interval_overhead                 # a local broker started for the run
    python -m benchmarks.interval_overhead --rounds 4 --intervals 1,5
    python -m benchmarks.interval_overhead --rounds 4 --intervals 1 --kafka-streams

Loads w4's input once, then runs its exactly-once checkpointed job at each interval and
its unchecked job (checkpointing off, at-least-once), interleaved round by round
(``Harness.run_once``: a fresh output topic, group and state per run, output verified).
Prints, per interval, the median records/s and range, the overhead of the medians
against off's, the median of each round's own overhead (the runs of a round, a minute apart,
share the host's mood better than two medians do) and the job's median CPU seconds.
About 20 s a run: 8 rounds of 1, 2, 5 s and off took 12 minutes.

``--kafka-streams`` measures the incumbent's own cost of the same guarantee in the same
rounds: Kafka Streams' window job (w2's) exactly-once with ``commit.interval.ms`` at each
interval, against the same job at-least-once committing only when it closes (``KS_OFF``:
its changelogs are still written as its record cache evicts, which is how its state is
durable at all). Its rows get their own table, each against ``KS_OFF``.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from benchmarks import generate
from benchmarks.broker import bootstrap_option, kafka
from benchmarks.generate import InputSpec
from benchmarks.harness import Expected, Harness
from benchmarks.lineup import Contender, Workload, workloads
from benchmarks.verify import expected_stateless, expected_windows

OFF = "off"
KS_OFF = "Kafka Streams, commit at close"
#: ``KS_OFF``'s commit interval, s: longer than any run, so it commits when it closes.
KS_NO_COMMIT_S = 3600
WINDOW_MS = 60_000  # w4's windows, as in ``benchmarks.run``'s default


@dataclass(frozen=True)
class Row:
    """One interval's (or off's) figures over the rounds."""

    name: str
    median: float
    low: float
    high: float
    overhead: float  # 1 - median / off's median
    paired: float  # the median over rounds of 1 - rate / off's rate in the same round
    cpu_s: float  # the job's median CPU seconds


def summarize(
    rates: dict[str, list[float]], cpu: dict[str, list[float]], baseline: str = OFF
) -> list[Row]:
    """Rows in the order of ``rates``; ``rates[baseline]`` is the baseline, round by round."""
    off = rates[baseline]
    off_median = statistics.median(off)
    rows = []
    for name, rs in rates.items():
        m = statistics.median(rs)
        pairs = [1 - r / o for r, o in zip(rs, off, strict=True)]
        rows.append(
            Row(name, m, min(rs), max(rs), 1 - m / off_median, statistics.median(pairs),
                statistics.median(cpu[name]))
        )  # fmt: skip
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| interval | records/s, median (range) | overhead of the medians "
        "| median of each round's overhead | job CPU s, median |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        over = ("-", "-") if r.name in (OFF, KS_OFF) else (f"{r.overhead:.1%}", f"{r.paired:.1%}")
        lines.append(
            f"| {r.name} | {r.median / 1e3:.1f} k ({r.low / 1e3:.1f}-{r.high / 1e3:.1f}) "
            f"| {over[0]} | {over[1]} | {r.cpu_s:.2f} |"
        )
    return "\n".join(lines)


def w4_workload() -> Workload:
    return next(wl for wl in workloads(WINDOW_MS) if wl.key == "w4")


def _with_interval(c: Contender, seconds: int, name: str) -> Contender:
    args = list(c.args)
    args[args.index("--commit-interval") + 1] = str(seconds)
    return dataclasses.replace(c, name=name, args=tuple(args))


def contenders(w4: Workload, intervals: list[int]) -> dict[str, Contender]:
    """w4's checkpointed contender at each interval (seconds), then its unchecked one."""
    on, off = w4.contenders
    out = {f"{s} s": _with_interval(on, s, f"kstream_ckpt_{s}s") for s in intervals}
    out[OFF] = off
    return out


def kafka_streams_contenders(intervals: list[int]) -> dict[str, Contender]:
    """Kafka Streams' window job exactly-once at each interval (seconds), then ``KS_OFF``."""
    by_key = {wl.key: wl for wl in workloads(WINDOW_MS)}
    eos, alo = (
        next(c for c in by_key[k].contenders if c.name == "kafka_streams") for k in ("w2", "w3")
    )
    out = {
        f"Kafka Streams, {s} s": _with_interval(eos, s, f"kafka_streams_{s}s") for s in intervals
    }
    out[KS_OFF] = _with_interval(alo, KS_NO_COMMIT_S, "kafka_streams_off")
    return out


def measure(
    bootstrap: str, rounds: int, intervals: list[int], spec: InputSpec, *, kafka_streams: bool
) -> list[list[Row]]:
    """kstream's rows against ``OFF``; with ``kafka_streams``, then Kafka Streams' rows."""
    w4 = w4_workload()
    ends = generate.load(bootstrap, spec)
    exp = Expected(expected_stateless(spec), expected_windows(spec, WINDOW_MS))
    runs = contenders(w4, intervals)
    ks = kafka_streams_contenders(intervals) if kafka_streams else {}
    runs.update(ks)
    rates: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    with tempfile.TemporaryDirectory(prefix="kstream-interval-") as wd:
        h = Harness(bootstrap, spec.partitions, Path(wd), 600)
        for i in range(rounds):
            for name, c in runs.items():
                x = h.run_once(w4, c, spec, ends, exp)
                if not x.valid:
                    raise click.ClickException(f"{name}: wrong output: {x.note}")
                rates[name].append(x.rate)
                cpu[name].append(x.cpu_s)
                click.echo(f"round {i + 1}/{rounds} {name}: {x.rate / 1e3:.1f} k records/s")
    ours = [n for n in runs if n not in ks]
    tables = [summarize({n: rates[n] for n in ours}, {n: cpu[n] for n in ours})]
    if ks:
        tables.append(
            summarize({n: rates[n] for n in ks}, {n: cpu[n] for n in ks}, baseline=KS_OFF)
        )
    return tables


@click.command()
@bootstrap_option
@click.option("--rounds", default=8, show_default=True)
@click.option("--intervals", default="1,2,5", show_default=True, help="seconds, comma-separated")
@click.option("--records", default=1_000_000, show_default=True)
@click.option("--keys", default=100_000, show_default=True)
@click.option(
    "--kafka-streams", is_flag=True, help="also Kafka Streams' own overhead, in the same rounds"
)
def main(
    bootstrap: str | None, rounds: int, intervals: str, records: int, keys: int,
    kafka_streams: bool,
) -> None:  # fmt: skip
    """Print w4's checkpoint overhead at each interval (see the module docstring)."""
    spec = InputSpec(records, keys, 4, event_rate=5_000, fmt="json")
    every = [int(s) for s in intervals.split(",")]
    with kafka(bootstrap) as (bootstrap_, _):
        tables = measure(bootstrap_, rounds, every, spec, kafka_streams=kafka_streams)
    click.echo("\n\n".join(table(rows) for rows in tables))


if __name__ == "__main__":
    main()
