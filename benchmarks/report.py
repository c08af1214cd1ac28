"""Reporting: the results tables, the ratios against the targets, and RESULTS.md.

Pure functions of the measured runs (no broker): every figure is a median of valid runs,
every ratio is of medians measured in the same run.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from benchmarks.harness import RECOVERY_MODES, RecoveryResults, RunResult, Series
from benchmarks.lineup import (
    CHECKPOINT_OVERHEAD_BOUND,
    INFO_RATIOS,
    RECOVERY_TARGETS,
    TARGETS,
    RecoveryTarget,
    Workload,
)


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def steal_text(runs: list[RunResult]) -> str:
    """The median CPU steal of ``runs`` (seconds), or "-" where the machine has no counter."""
    steal = [r.steal_s for r in runs if r.steal_s is not None]
    return f"{statistics.median(steal):.2f}" if steal else "-"


def table(series: list[Series]) -> list[str]:
    """The markdown results table: medians over the valid runs."""
    rows = [
        "| workload | contender | runs ok | records/s (median) | min - max | s (median) "
        "| CPU s (median) | steal s (median) | peak RSS MB (median) | output records |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in series:
        label = f"{s.contender.name} (`{s.contender.module}`)"
        if s.unavailable is not None:
            rows.append(
                f"| {s.workload.key} | {label} | - | not available: {s.unavailable} | | | | | | |"
            )
            continue
        ok = s.ok_runs
        if not ok:
            why = "; ".join(s.failures + [r.note for r in s.runs if r.note])[:300]
            why = " ".join(why.split()).replace("|", "/")
            rows.append(
                f"| {s.workload.key} | {label} | 0/{len(s.runs) + len(s.failures)} | failed: {why} | | | | | | |"
            )
            continue
        rates = [r.rate for r in ok]
        outs = sorted({r.records_out for r in ok})
        rows.append(
            f"| {s.workload.key} | {label} | {len(ok)}/{len(s.runs) + len(s.failures)} "
            f"| {fmt_rate(s.median('rate'))} | {fmt_rate(min(rates))} - {fmt_rate(max(rates))} "
            f"| {s.median('seconds'):.2f} | {s.median('cpu_s'):.2f} | {steal_text(ok)} "
            f"| {s.median('peak_rss_mb'):.0f} | {', '.join(str(o) for o in outs)} |"
        )
    return rows


def commit_wait_lines(series: list[Series]) -> list[str]:
    """For contenders that report it (kstream): how much of a run was processing and how
    much the wait for the checkpoint / offset commit that made its output visible."""
    rows = []
    for s in series:
        ok = [r for r in s.ok_runs if r.fed_s is not None]
        if not ok:
            continue
        fed = statistics.median(r.fed_s for r in ok if r.fed_s is not None)
        total = statistics.median(r.seconds for r in ok)
        rows.append(f"| {s.workload.key} | {s.contender.name} | {fed:.2f} | {total:.2f} |")
    if not rows:
        return []
    return [
        "| workload | contender | all input fed to the tasks, s (median) "
        "| output committed, s (median) |",
        "|---|---|---|---|",
        *rows,
    ]


def ratio(series: list[Series], wl: str, num: str, den: str) -> tuple[float | None, str]:
    """``median rate(num) / median rate(den)`` in workload ``wl``, or None with the reason."""
    by = {(s.workload.key, s.contender.name): s for s in series}
    for name in (num, den):
        s = by.get((wl, name))
        if s is None:
            return None, f"{name} not run in {wl}"
        if s.unavailable is not None:
            return None, f"{name}: not available"
        if not s.ok_runs:
            return None, f"{name}: no valid run"
    return by[(wl, num)].median("rate") / by[(wl, den)].median("rate"), ""


@dataclass(frozen=True)
class Verdict:
    """One target as measured: the ratio (None: not measured), its text and whether it is met."""

    text: str
    value: float | None
    shown: str  # the measured figure as printed
    met: bool | None  # None: not measured

    def row(self) -> str:
        word = "not measured" if self.met is None else ("met" if self.met else "MISSED")
        return f"| {self.text} | {self.shown} | {word} |"


def verdicts(series: list[Series], rec: RecoveryResults) -> list[Verdict]:
    """Every target of ``lineup``: throughput ratios, checkpoint overhead, recovery ratios."""
    out = []
    for t in TARGETS:
        r, why = ratio(series, t.workload, t.numerator, t.denominator)
        out.append(
            Verdict(t.text, None, f"n/a ({why})", None)
            if r is None
            else Verdict(t.text, r, f"{r:.2f}x", r >= t.bound)
        )
    text = f"w4: checkpoint overhead at a 1 s interval <= {CHECKPOINT_OVERHEAD_BOUND * 100:.0f} %"
    r, why = ratio(series, "w4", "kstream_ckpt_1s", "kstream_ckpt_off")
    if r is None:
        out.append(Verdict(text, None, f"n/a ({why})", None))
    else:
        overhead = 1 - r
        out.append(
            Verdict(
                text, overhead, f"{overhead * 100:.1f} %", overhead <= CHECKPOINT_OVERHEAD_BOUND
            )
        )
    for rt in RECOVERY_TARGETS:
        v = recovery_verdict(rec, rt)
        if v is not None:
            out.append(v)
    return out


def recovery_verdict(rec: RecoveryResults, t: RecoveryTarget) -> Verdict | None:
    """A recovery target's verdict; None for the optional "keep" mode when it was not run."""
    suffix = RECOVERY_MODES[t.mode]
    if suffix and not any(name.endswith(suffix) for name in rec):
        return None
    k, q = rec.get(t.numerator + suffix), rec.get(t.denominator + suffix)
    if isinstance(k, list) and isinstance(q, list) and k and q:
        rk = statistics.median(x.recovery_s for x in k)
        rq = statistics.median(x.recovery_s for x in q)
        return Verdict(
            t.text, rk / rq, f"{rk / rq:.2f}x ({rk:.1f} s vs {rq:.1f} s)", rk / rq <= t.bound
        )
    why = "; ".join(
        f"{n}: {'not run' if v is None else v or 'no valid run'}"
        for n, v in ((t.numerator, k), (t.denominator, q))
        if not isinstance(v, list) or not v
    )
    return Verdict(t.text, None, f"n/a ({why})", None)


def ratio_lines(series: list[Series], rec: RecoveryResults) -> list[str]:
    """The targets as measured, met or missed, and informational ratios."""
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    lines += [v.row() for v in verdicts(series, rec)]
    lines += ["", "Informational ratios (records/s medians):", ""]
    for wl, num, den in INFO_RATIOS:
        r, why = ratio(series, wl, num, den)
        lines.append(
            f"- {wl}: {num} / {den} = " + (f"{r:.2f}x" if r is not None else f"n/a ({why})")
        )
    return lines


def recovery_lines(rec: RecoveryResults, keys: int) -> list[str]:
    """The recovery table of workload 4."""
    lines = [
        f"State of {keys:,} keys. Rows without a suffix: local state wiped after kill -9 "
        "(restored from Quix's / Kafka Streams' changelog topics, kstream's checkpoint store); "
        '"local state kept": restarted on the same machine with its local state.',
        "",
        "| contender | runs | kill -9 → first output, s (median) | min - max | build s (median) "
        "| restored / expected | restart CPU s | restart peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in rec.items():
        if isinstance(v, str):
            lines.append(f"| {name} | - | {' '.join(v.split()).replace('|', '/')} | | | | | |")
            continue
        if not v:
            lines.append(f"| {name} | 0 | no valid run | | | | | |")
            continue
        rs = [x.recovery_s for x in v]
        lines.append(
            f"| {name} | {len(v)} | {statistics.median(rs):.2f} | {min(rs):.2f} - {max(rs):.2f} "
            f"| {statistics.median(x.build_s for x in v):.1f} "
            f"| {', '.join(f'{x.restored}/{x.expected}' for x in v)} "
            f"| {statistics.median(x.restart_cpu_s for x in v):.2f} "
            f"| {statistics.median(x.restart_peak_rss_mb for x in v):.0f} |"
        )
    return lines


@dataclass(frozen=True)
class RunInfo:
    """What RESULTS.md says about the run itself."""

    started: str  # "2026-11-30 21:20 UTC"
    command: str
    machine_lines: list[str]
    broker_text: str
    partitions: int
    records: int
    keys: int
    event_rate: int
    window_ms: int
    recovery_keys: int
    quick: bool
    minutes: float  # wall-clock duration of the whole command


#: Sections of RESULTS.md another command measures (``benchmarks/bench_store.py``:
#: its table is added by hand): a regeneration keeps them from the previous file.
KEPT_SECTIONS = ("## Checkpoint store:",)


def kept_sections(previous: str, kept: tuple[str, ...] = KEPT_SECTIONS) -> list[str]:
    """The lines of the sections of ``previous`` (RESULTS.md, or SCALING.md) that a
    regeneration keeps, those whose heading starts with one of ``kept``: each from its
    heading to the next ``## `` heading or the end."""
    out: list[str] = []
    keep = False
    for line in previous.splitlines():
        if line.startswith("## "):
            keep = line.startswith(kept)
        if keep:
            out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def results_text(
    info: RunInfo,
    workloads: list[Workload],
    series: list[Series],
    rec: RecoveryResults,
    previous: str = "",
) -> str:
    """RESULTS.md for one run (the sections of ``previous`` in KEPT_SECTIONS at the end)."""
    lines = ["# kstream benchmark results", ""]
    if info.quick:
        lines += [
            "**Quick mode (`--quick`): small input, one run per contender: for development, "
            "not the figures to quote.**",
            "",
        ]
    lines += [
        f"Run {info.started}, {info.minutes:.1f} min. Command (from the repository root):",
        "",
        f"    {info.command}",
        "",
        "## Machine",
        "",
        *info.machine_lines,
        f"- Kafka: {info.broker_text}; {info.partitions} partitions per topic; every contender is 1 process",
        "",
        "## Throughput",
        "",
        f"{info.records:,} input records, {info.keys:,} keys, event rate {info.event_rate}/s of "
        f"event time, window {info.window_ms} ms. records/s = input records / (t_end - t_first), "
        "see docs/testing.md. steal s: CPU time the hypervisor gave to other guests while the "
        "contender's process ran, summed over this machine's CPUs (/proc/stat): a run with "
        "seconds of it ran on a slower machine than one without.",
        "",
        *table(series),
        "",
        "Workloads: " + "; ".join(wl.title for wl in workloads) + ".",
        "",
        "Ceilings (w1): `raw_pipe` forwards every record unchanged with plain confluent-kafka, "
        "no per-record callback (delivery reports only on error); `broker_producer_perf` and "
        "`broker_consumer_perf` are the broker's own `ProducerPerformance` and "
        "`ConsumerPerformance` (`kafka-producer-perf-test` / `kafka-consumer-perf-test`, from "
        "kafka-tools of the broker's version) on the same broker: the producer sends as many "
        "records as the input holds, values sampled from the input (no keys); the consumer "
        "reads the w1 input topic (its rate excludes the group join, like t_first).",
        "",
    ]
    waits = commit_wait_lines(series)
    if waits:
        lines += [
            "Where kstream's time goes (from its stderr): processing ends when every input "
            "record was fed to its task; the rest is the graceful stop: the final checkpoint "
            "the worker requests then (with checkpointing off, the output flush and offset "
            "commit), and closing the clients.",
            "",
            *waits,
            "",
        ]
    lines += [
        "Profiling, the hot-path fixes made for this benchmark and their before/after "
        "figures: [PROFILE.md](PROFILE.md). In w4, `kstream_ckpt_1s` has exactly-once "
        "output (as w2) and `kstream_ckpt_off` at-least-once (without checkpoints there "
        "is nothing to commit transactions on); w3 is checkpoints every 1 s with "
        "at-least-once output.",
        "",
    ]
    if rec:
        lines += ["## Recovery (workload 4)", "", *recovery_lines(rec, info.recovery_keys), ""]
    lines += ["## Targets", "", *ratio_lines(series, rec), ""]
    failures = [f"- {s.workload.key} {s.contender.name}: {f}" for s in series for f in s.failures]
    if failures:
        lines += ["## Failed runs", "", *[f.replace("\n", " ") for f in failures], ""]
    kept = kept_sections(previous)
    if kept:
        lines += [*kept, ""]
    return "\n".join(lines)
