"""One command for the whole benchmark: raw client, kstream and Quix Streams side by side.

    python -m benchmarks.run --bootstrap 127.0.0.1:19092 --records 1000000

Loads the input topics once, runs every available contender of every workload as its
own OS process on identical input (fresh output topic, group and state per run), runs
are interleaved round-robin across contenders, prints the table and writes
``benchmarks/RESULTS.md``. See benchmarks/README.md for the definitions.
"""

from __future__ import annotations

import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import click

from benchmarks import generate, machine, recovery
from benchmarks.generate import KEEP_FOREVER, Format, InputSpec
from benchmarks.procstats import Child
from benchmarks.verify import OutputStats, expected_dedup, expected_stateless, read_output
from benchmarks.workloads import EndOffsets, Report
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
CONTENDER_DIR = BENCH_DIR / "contenders"
QUIX_VENV = BENCH_DIR / ".venv-quix"
QUIX_PYTHON = QUIX_VENV / "bin" / "python"
QUIX_REQUIREMENT = "quixstreams[avro]==3.28.1"


# ------------------------------------------------------------------ what runs


@dataclass(frozen=True)
class Contender:
    """One contender process: a module in ``benchmarks/contenders`` and the env it runs in."""

    name: str  # the name ratios refer to: raw_pipe, raw_stateless, kstream, quix, ...
    module: str  # file name in benchmarks/contenders, without .py
    env: str = "kstream"  # "kstream": this interpreter; "quix": benchmarks/.venv-quix
    args: tuple[str, ...] = ()

    def unavailable(self) -> str | None:
        """Why this contender cannot run here, or None when it can."""
        if not (CONTENDER_DIR / f"{self.module}.py").exists():
            if self.module.startswith("kstream_"):
                return (
                    f"benchmarks/contenders/{self.module}.py does not exist yet "
                    "(the kstream worker is not built)"
                )
            return f"benchmarks/contenders/{self.module}.py is missing"
        if self.env == "quix" and not QUIX_PYTHON.exists():
            return "Quix Streams venv benchmarks/.venv-quix is missing (--no-quix-install)"
        return None

    def argv(self, common: Sequence[str]) -> list[str]:
        python = str(QUIX_PYTHON) if self.env == "quix" else sys.executable
        return [python, "-m", f"benchmarks.contenders.{self.module}", *common, *self.args]


@dataclass(frozen=True)
class Workload:
    """A job and its input, run by each of its contenders."""

    key: str
    title: str
    fmt: Format
    contenders: tuple[Contender, ...]
    stateless: bool  # output checked exactly against expected_stateless()
    args: tuple[str, ...] = ()
    dedup: bool = False  # output count checked exactly against expected_dedup()


def workloads(window_ms: int) -> list[Workload]:
    """Workloads 1, 2, 3, 4 (checkpoint overhead) and 5; workload 4's recovery is separate."""
    w = ("--window-ms", str(window_ms), "--commit-interval", "1")
    eos, alo = ("--guarantee", "exactly-once"), ("--guarantee", "at-least-once")

    def stateless(fmt: str) -> tuple[Contender, ...]:
        f = ("--format", fmt)
        return (
            Contender("raw_pipe", "raw_pipe", args=f),
            Contender("raw_stateless", "raw_stateless", args=f),
            Contender("kstream", "kstream_stateless", args=(*f, *alo)),
            Contender("quix", "quix_stateless", "quix", (*f, *alo)),
        )

    def window(g: tuple[str, str]) -> tuple[Contender, ...]:
        return (
            Contender("kstream", "kstream_window_count", args=(*w, *g)),
            Contender("quix", "quix_window_count", "quix", (*w, *g)),
        )

    return [
        Workload("w1", "1. JSON decode → filter → map → encode (stateless)", "json", stateless("json"), True),
        Workload("w2", "2. keyed tumbling-window count, RocksDB, exactly-once", "json", window(eos), False),
        Workload("w3", "3. keyed tumbling-window count, RocksDB, at-least-once", "json", window(alo), False),
        Workload(
            "w4",
            "4a. workload 2 in kstream: checkpoints every 1 s vs. off",
            "json",
            (
                Contender("kstream_ckpt_1s", "kstream_window_count", args=(*w, *eos, "--checkpointing", "on")),
                Contender("kstream_ckpt_off", "kstream_window_count", args=(*w, *alo, "--checkpointing", "off")),
            ),
            False,
        ),
        Workload("w5", "5. workload 1 with Avro (fastavro) values", "avro", stateless("avro"), True),
        Workload(
            "w6",
            "6. deduplication within an hour per key: process function (kstream) vs. stateful apply (Quix), RocksDB, at-least-once",
            "json",
            (
                Contender("kstream", "kstream_dedup", args=(*w, *alo)),
                Contender("quix", "quix_dedup", "quix", (*w, *alo)),
            ),
            False,
            dedup=True,
        ),
    ]  # fmt: skip


@dataclass(frozen=True)
class Target:
    """A claimed ratio: ``numerator / denominator`` (records/s) compared to ``bound``."""

    workload: str
    numerator: str
    denominator: str
    bound: float
    text: str


TARGETS = (
    Target("w1", "kstream", "quix", 2.0, "kstream >= 2x Quix Streams, workload 1"),
    Target("w2", "kstream", "quix", 2.0, "kstream >= 2x Quix Streams, workload 2"),
    Target("w3", "kstream", "quix", 2.0, "kstream >= 2x Quix Streams, workload 3"),
    Target("w1", "kstream", "raw_pipe", 0.6, "kstream workload 1 >= 0.6x the raw pipe"),
)
INFO_RATIOS = (
    ("w6", "kstream", "quix"),
    ("w5", "kstream", "quix"),
    ("w1", "kstream", "raw_stateless"),
    ("w5", "kstream", "raw_stateless"),
    ("w1", "quix", "raw_pipe"),
    ("w1", "raw_stateless", "raw_pipe"),
    ("w5", "raw_stateless", "raw_pipe"),
)


# ------------------------------------------------------------------ measuring


@dataclass
class RunResult:
    """One run of one contender."""

    rate: float  # records_in / (t_end - t_first)
    seconds: float
    cpu_s: float
    peak_rss_mb: float
    records_in: int
    records_out: int
    valid: bool
    note: str = ""
    fed_s: float | None = None  # kstream: t_first until every input record was fed to its task


#: A kstream contender's stderr line: processing time vs. time until the output was committed.
FED_LINE = re.compile(r"all input fed after ([0-9.]+) s, output committed after ([0-9.]+) s")


@dataclass
class Series:
    """All runs of one contender in one workload."""

    workload: Workload
    contender: Contender
    runs: list[RunResult] = field(default_factory=list)
    unavailable: str | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok_runs(self) -> list[RunResult]:
        return [r for r in self.runs if r.valid]

    def median(self, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in self.ok_runs)


@dataclass
class Harness:
    bootstrap: str
    partitions: int
    workdir: Path
    timeout: float
    log: list[str] = field(default_factory=list)

    def say(self, text: str) -> None:
        """Print a progress line (and keep it)."""
        click.echo(text)
        self.log.append(text)

    def run_once(
        self,
        wl: Workload,
        c: Contender,
        spec: InputSpec,
        ends: EndOffsets,
        expected: OutputStats | None,
    ) -> RunResult:
        """Run contender ``c`` once on ``wl``; verify its output; clean up its topics and state."""
        rid = uuid.uuid4().hex[:8]
        group = f"bench-{wl.key}-{c.name}-{rid}"
        out = f"bench.out.{wl.key}.{c.name}.{rid}"
        state = self.workdir / f"state-{group}"
        ensure_topics(make_admin(self.bootstrap), [TopicSpec(out, self.partitions, KEEP_FOREVER)])
        common = [
            "--bootstrap", self.bootstrap, "--input", spec.topic, "--output", out,
            "--group", group, "--end-offsets", ends.to_json(), "--state-dir", str(state),
        ]  # fmt: skip
        try:
            child = Child(c.argv(common), cwd=REPO_DIR, log_dir=self.workdir, name=f"{group}")
            res = child.wait(self.timeout)
            if res.returncode != 0:
                raise RuntimeError(f"exit code {res.returncode}; stderr tail:\n{res.stderr_tail}")
            report = Report.parse(res.stdout)
            decode = wl.fmt if wl.stateless and c.name != "raw_pipe" else None
            got = read_output(self.bootstrap, out, self.partitions, decode=decode)
            valid, note = True, ""
            if report.records_in != spec.records:
                valid, note = False, f"processed {report.records_in} of {spec.records} records"
            elif c.name == "raw_pipe" and got.records != spec.records:
                valid, note = False, f"piped {got.records} of {spec.records} records"
            elif decode is not None and expected is not None and got != expected:
                valid, note = False, f"output {got} != expected {expected}"
            elif wl.dedup and got.records != expected_dedup(spec).records:
                valid, note = False, f"kept {got.records}, expected {expected_dedup(spec).records}"
            seconds = report.t_end - report.t_first
            fed = FED_LINE.search(res.stderr_tail)
            return RunResult(
                rate=report.records_in / seconds if seconds > 0 else float("inf"),
                seconds=seconds,
                cpu_s=res.cpu_s,
                peak_rss_mb=res.peak_rss_mb,
                records_in=report.records_in,
                records_out=got.records,
                valid=valid,
                note=note,
                fed_s=float(fed.group(1)) if fed else None,
            )
        finally:
            for t in [out, *recovery.topics_of_group(self.bootstrap, group)]:
                generate.delete_topic(self.bootstrap, t)
            shutil.rmtree(state, ignore_errors=True)


# ------------------------------------------------------------------ reporting


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def table(series: list[Series]) -> list[str]:
    """The markdown results table: medians over the valid runs."""
    rows = [
        "| workload | contender | runs ok | records/s (median) | min - max | s (median) "
        "| CPU s (median) | peak RSS MB (median) | output records |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in series:
        label = f"{s.contender.name} (`{s.contender.module}`)"
        if s.unavailable is not None:
            rows.append(
                f"| {s.workload.key} | {label} | - | not available: {s.unavailable} | | | | | |"
            )
            continue
        ok = s.ok_runs
        if not ok:
            why = "; ".join(s.failures + [r.note for r in s.runs if r.note])[:300]
            rows.append(
                f"| {s.workload.key} | {label} | 0/{len(s.runs) + len(s.failures)} | failed: {why} | | | | | |"
            )
            continue
        rates = [r.rate for r in ok]
        outs = sorted({r.records_out for r in ok})
        rows.append(
            f"| {s.workload.key} | {label} | {len(ok)}/{len(s.runs) + len(s.failures)} "
            f"| {fmt_rate(s.median('rate'))} | {fmt_rate(min(rates))} - {fmt_rate(max(rates))} "
            f"| {s.median('seconds'):.2f} | {s.median('cpu_s'):.2f} | {s.median('peak_rss_mb'):.0f} "
            f"| {', '.join(str(o) for o in outs)} |"
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


def ratio_lines(
    series: list[Series], rec: dict[str, list[recovery.RecoveryResult] | str]
) -> list[str]:
    """The targets as measured, met or missed, and informational ratios."""
    lines = ["| target | measured | verdict |", "|---|---|---|"]
    for t in TARGETS:
        r, why = ratio(series, t.workload, t.numerator, t.denominator)
        if r is None:
            lines.append(f"| {t.text} | n/a ({why}) | not measured |")
        else:
            lines.append(f"| {t.text} | {r:.2f}x | {'met' if r >= t.bound else 'MISSED'} |")
    r, why = ratio(series, "w4", "kstream_ckpt_1s", "kstream_ckpt_off")
    if r is None:
        lines.append(f"| checkpoint overhead <= 10 % | n/a ({why}) | not measured |")
    else:
        overhead = 1 - r
        verdict = "met" if overhead <= 0.10 else "MISSED"
        lines.append(f"| checkpoint overhead <= 10 % | {overhead * 100:.1f} % | {verdict} |")
    lines.append(recovery_target(rec, "wipe"))
    if any(name.endswith(RECOVERY_MODES["keep"]) for name in rec):
        lines.append(recovery_target(rec, "keep"))
    lines += ["", "Informational ratios (records/s medians):", ""]
    for wl, num, den in INFO_RATIOS:
        r, why = ratio(series, wl, num, den)
        lines.append(
            f"- {wl}: {num} / {den} = " + (f"{r:.2f}x" if r is not None else f"n/a ({why})")
        )
    return lines


#: Recovery is measured with the local state wiped after kill -9 (a replacement machine:
#: state comes from Quix's changelog / kstream's checkpoint store) and/or kept (a
#: restart on the same machine). ``rec`` keys: the contender name, plus this suffix.
RECOVERY_MODES: dict[str, str] = {"wipe": "", "keep": " (local state kept)"}


def recovery_target(rec: dict[str, list[recovery.RecoveryResult] | str], mode: str) -> str:
    """The recovery target's row for one mode (wiped or kept local state)."""
    suffix = RECOVERY_MODES[mode]
    k, q = rec.get("kstream" + suffix), rec.get("quix" + suffix)
    text = (
        "recovery <= 0.2x Quix's recovery from its changelog (local state wiped)"
        if mode == "wipe"
        else "extra: recovery <= 0.2x Quix's with both local states kept (Quix skips its changelog)"
    )
    if isinstance(k, list) and isinstance(q, list) and k and q:
        rk = statistics.median(x.recovery_s for x in k)
        rq = statistics.median(x.recovery_s for x in q)
        verdict = "met" if rk / rq <= 0.2 else "MISSED"
        return f"| {text} | {rk / rq:.2f}x ({rk:.1f} s vs {rq:.1f} s) | {verdict} |"
    why = "; ".join(
        f"{n}: {'not run' if v is None else v or 'no valid run'}"
        for n, v in (("kstream", k), ("quix", q))
        if not isinstance(v, list) or not v
    )
    return f"| {text} | n/a ({why}) | not measured |"


def recovery_lines(rec: dict[str, list[recovery.RecoveryResult] | str], keys: int) -> list[str]:
    """The recovery table of workload 4."""
    lines = [
        f"State of {keys:,} keys. Rows without a suffix: local state wiped after kill -9 "
        "(restored from Quix's changelog topic / kstream's checkpoint store); "
        '"local state kept": restarted on the same machine with its local state.',
        "",
        "| contender | runs | kill -9 → first output, s (median) | min - max | build s (median) "
        "| restored / expected | restart CPU s | restart peak RSS MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in rec.items():
        if isinstance(v, str):
            lines.append(f"| {name} | - | {v} | | | | | |")
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


# ------------------------------------------------------------------ setup


def ensure_quix_venv(install: bool) -> None:
    """Create ``benchmarks/.venv-quix`` with Quix Streams when missing (a plain venv: Quix
    never shares an environment with kstream's dependencies)."""
    if QUIX_PYTHON.exists() or not install:
        return
    click.echo(f"creating {QUIX_VENV} with {QUIX_REQUIREMENT} ...")
    subprocess.run([sys.executable, "-m", "venv", str(QUIX_VENV)], check=True)
    subprocess.run([str(QUIX_PYTHON), "-m", "pip", "install", "-q", QUIX_REQUIREMENT], check=True)


@click.command()
@click.option(
    "--bootstrap",
    envvar="KSTREAM_TEST_BOOTSTRAP",
    default=None,
    help="Kafka to use [env KSTREAM_TEST_BOOTSTRAP]; without it a local broker is started.",
)
@click.option("--records", default=1_000_000, show_default=True, help="input records per workload")
@click.option("--keys", default=100_000, show_default=True, help="key cardinality")
@click.option("--partitions", default=4, show_default=True)
@click.option("--runs", default=3, show_default=True, help="runs per contender (median reported)")
@click.option("--event-rate", default=5_000, show_default=True, help="events per event-time second")
@click.option("--window-ms", default=60_000, show_default=True, help="tumbling window size")
@click.option("--recovery-keys", default=1_000_000, show_default=True)
@click.option(
    "--recovery-local",
    type=click.Choice(["wipe", "keep", "both"]),
    default="both",
    show_default=True,
    help="after kill -9, wipe the job's local state (a replacement machine), keep it "
    "(a restart in place), or measure both",
)
@click.option(
    "--workload",
    "only",
    multiple=True,
    type=click.Choice(["w1", "w2", "w3", "w4", "w5", "w6", "recovery"]),
    help="run only these (repeatable); default all",
)
@click.option("--timeout", default=1800.0, show_default=True, help="seconds per contender run")
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=BENCH_DIR / "RESULTS.md",
    show_default=True,
)
@click.option("--no-quix-install", is_flag=True, help="do not create benchmarks/.venv-quix")
def main(
    bootstrap: str | None,
    records: int,
    keys: int,
    partitions: int,
    runs: int,
    event_rate: int,
    window_ms: int,
    recovery_keys: int,
    recovery_local: str,
    only: tuple[str, ...],
    timeout: float,
    results: Path,
    no_quix_install: bool,
) -> None:
    """Benchmark the raw client, kstream and Quix Streams on identical input; write RESULTS.md."""  # fmt: skip
    command = reproducing_command(click.get_current_context())
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    if bootstrap is None:
        from kstream.dev.localbroker import LocalBroker

        with (
            tempfile.TemporaryDirectory(prefix="kstream-bench-broker-") as d,
            LocalBroker(d) as broker,
        ):
            click.echo(f"started a local broker at {broker.bootstrap}")
            _bench(
                broker.bootstrap,
                f"local broker started by the command (Kafka {broker.kafka_version})",
                records,
                keys,
                partitions,
                runs,
                event_rate,
                window_ms,
                recovery_keys,
                recovery_local,
                only,
                timeout,
                results,
                no_quix_install,
                command,
                started,
            )
    else:
        _bench(bootstrap, f"existing broker at {bootstrap}", records, keys, partitions, runs,
               event_rate, window_ms, recovery_keys, recovery_local, only, timeout,
               results, no_quix_install, command, started)  # fmt: skip


def reproducing_command(ctx: click.Context) -> str:
    """A shell command that repeats this run: every option that differs from its default."""
    argv = ["python", "-m", "benchmarks.run"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        value = ctx.params[param.name]
        flag = param.opts[-1] if len(param.opts) == 1 else max(param.opts, key=len)
        if param.is_flag:
            if value:
                argv.append(flag)
        elif param.multiple:
            for v in value:
                argv += [flag, str(v)]
        elif value is not None and value != param.default:
            argv += [flag, str(value)]
    return shlex.join(argv)


def _bench(
    bootstrap: str,
    broker_text: str,
    records: int,
    keys: int,
    partitions: int,
    runs: int,
    event_rate: int,
    window_ms: int,
    recovery_keys: int,
    recovery_local: str,
    only: tuple[str, ...],
    timeout: float,
    results: Path,
    no_quix_install: bool,
    command: str,
    started: str,
) -> None:
    ensure_quix_venv(not no_quix_install)
    selected = set(only) or {"w1", "w2", "w3", "w4", "w5", "w6", "recovery"}
    machine_lines = machine.describe(QUIX_PYTHON)  # load average before we add any
    with tempfile.TemporaryDirectory(prefix="kstream-bench-") as wd:
        h = Harness(bootstrap, partitions, Path(wd), timeout)
        series: list[Series] = []
        chosen = [wl for wl in workloads(window_ms) if wl.key in selected]
        # Every input is loaded (or found loaded) once, before any contender runs.
        inputs: dict[Format, tuple[InputSpec, EndOffsets, OutputStats]] = {}
        for fmt in dict.fromkeys(wl.fmt for wl in chosen):
            spec = InputSpec(records, keys, partitions, event_rate=event_rate, fmt=fmt)
            inputs[fmt] = (spec, generate.load(bootstrap, spec), expected_stateless(spec))
        for wl in chosen:
            spec, ends, expected = inputs[wl.fmt]
            wl_series = [Series(wl, c, unavailable=c.unavailable()) for c in wl.contenders]
            series += wl_series
            for run_no in range(1, runs + 1):  # round-robin: noise hits every contender alike
                for s in wl_series:
                    if s.unavailable is not None:
                        continue
                    try:
                        r = h.run_once(wl, s.contender, spec, ends, expected)
                    except (RuntimeError, TimeoutError, ValueError) as e:
                        s.failures.append(f"run {run_no}: {e}")
                        h.say(f"{wl.key} {s.contender.name} run {run_no}: FAILED: {e}")
                        continue
                    s.runs.append(r)
                    h.say(
                        f"{wl.key} {s.contender.name} run {run_no}: {fmt_rate(r.rate)} records/s, "
                        f"{r.seconds:.2f} s, CPU {r.cpu_s:.2f} s, RSS {r.peak_rss_mb:.0f} MB, "
                        f"out {r.records_out}{'' if r.valid else ' INVALID: ' + r.note}"
                    )
        rec: dict[str, list[recovery.RecoveryResult] | str] = {}
        if "recovery" in selected:
            rec = _recovery(h, recovery_keys, runs, recovery_local)
    lines = [
        "# kstream benchmark results",
        "",
        f"Run {started}. Command (from the repository root):",
        "",
        f"    {command}",
        "",
        "## Machine",
        "",
        *machine_lines,
        f"- Kafka: {broker_text}; {partitions} partitions per topic; every contender is 1 process",
        "",
        "## Throughput",
        "",
        f"{records:,} input records, {keys:,} keys, event rate {event_rate}/s of event time, "
        f"window {window_ms} ms. records/s = input records / (t_end - t_first), see README.md.",
        "",
        *table(series),
        "",
        "Workloads: " + "; ".join(wl.title for wl in workloads(window_ms)) + ".",
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
        lines += ["## Recovery (workload 4)", "", *recovery_lines(rec, recovery_keys), ""]
    lines += ["## Targets", "", *ratio_lines(series, rec), ""]
    failures = [f"- {s.workload.key} {s.contender.name}: {f}" for s in series for f in s.failures]
    if failures:
        lines += ["## Failed runs", "", *[f.replace("\n", " ") for f in failures], ""]
    text = "\n".join(lines)
    click.echo("\n" + text)
    results.write_text(text)
    click.echo(f"written to {results}")


def _recovery(
    h: Harness, keys: int, runs: int, local: str
) -> dict[str, list[recovery.RecoveryResult] | str]:
    """Workload 4's recovery runs, kstream and Quix interleaved, per mode of ``local``
    (wipe, keep or both; see ``RECOVERY_MODES``)."""
    jobs = {
        "kstream": (Contender("kstream", "kstream_recovery"), recovery.wait_checkpointed),
        "quix": (Contender("quix", "quix_recovery", "quix"), recovery.wait_group_committed),
    }
    modes = ["wipe", "keep"] if local == "both" else [local]
    out: dict[str, list[recovery.RecoveryResult] | str] = {}
    for mode in modes:
        for name, (c, _) in jobs.items():
            why = c.unavailable()
            out[name + RECOVERY_MODES[mode]] = f"not available: {why}" if why else []

    def argv_for(c: Contender) -> recovery.JobArgv:
        def build(topic_in: str, topic_out: str, group: str, state: Path, member: str) -> list[str]:
            return c.argv([
                "--bootstrap", h.bootstrap, "--input", topic_in, "--output", topic_out,
                "--group", group, "--state-dir", str(state), "--instance-id", member,
                "--guarantee", "exactly-once", "--commit-interval", "1",
                "--window-ms", str(recovery.RECOVERY_WINDOW_MS), "--forever",
            ])  # fmt: skip

        return build

    for run_no in range(1, runs + 1):
        for mode in modes:
            for name, (c, wait_built) in jobs.items():
                row = name + RECOVERY_MODES[mode]
                results = out[row]
                if not isinstance(results, list):
                    continue
                try:
                    r = recovery.measure_recovery(
                        h.bootstrap, argv_for(c), name=name, keys=keys, partitions=h.partitions,
                        workdir=h.workdir, cwd=REPO_DIR, wipe=mode == "wipe", timeout=h.timeout,
                        wait_built=wait_built,
                    )  # fmt: skip
                except (RuntimeError, TimeoutError, ValueError) as e:
                    h.say(f"recovery {row} run {run_no}: FAILED: {e}")
                    out[row] = f"failed: {str(e)[:300]}"
                    continue
                results.append(r)
                h.say(
                    f"recovery {row} run {run_no}: {r.recovery_s:.2f} s to first output "
                    f"(build {r.build_s:.1f} s, restored {r.restored}/{r.expected})"
                )
    return out


if __name__ == "__main__":
    main()
