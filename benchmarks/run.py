"""One command for the whole benchmark: the raw client and the broker's own tools (ceilings),
kstream, Quix Streams and Kafka Streams side by side.

    python -m benchmarks.run                  # full size, a local broker started for the run
    python -m benchmarks.run --quick          # small sizes, one run: a few minutes

Loads the input topics once, runs every available contender of every workload as its
own OS process on identical input (fresh output topic, group and state per run), runs
are interleaved round-robin across contenders, prints the table and writes
``benchmarks/RESULTS.md``. See benchmarks/README.md for the definitions. What runs is
in ``lineup``, how one run is made and checked in ``harness``, the tables and ratios
in ``report``.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from benchmarks import generate, jvm, machine
from benchmarks.broker import bootstrap_option, kafka
from benchmarks.generate import Format, InputSpec
from benchmarks.harness import Expected, Harness, RecoveryResults, RunResult, Series, run_recovery
from benchmarks.lineup import BENCH_DIR, QUIX_PYTHON, QUIX_REQUIREMENT, QUIX_VENV, workloads
from benchmarks.registry import registry
from benchmarks.report import RunInfo, fmt_rate, results_text
from benchmarks.verify import expected_dedup, expected_stateless, expected_windows
from benchmarks.workloads import EndOffsets

ALL_WORKLOADS = ("w1", "w2", "w3", "w4", "w5", "w5r", "w6", "recovery")

#: ``--quick``: these replace the defaults of the options not given on the command line.
QUICK: dict[str, Any] = {
    "records": 100_000,
    "keys": 10_000,
    "runs": 1,
    "window_ms": 5_000,
    "recovery_keys": 100_000,
    "timeout": 300.0,
}


@dataclass(frozen=True)
class Settings:
    """The command's options, after ``--quick`` was applied."""

    records: int
    keys: int
    partitions: int
    runs: int
    event_rate: int
    window_ms: int
    recovery_keys: int
    recovery_local: str
    only: tuple[str, ...]
    timeout: float
    results: Path
    no_quix_install: bool
    quick: bool


def apply_quick(params: dict[str, Any], explicit: set[str]) -> dict[str, Any]:
    """``params`` with ``QUICK``'s values for every option not in ``explicit``."""
    if not params.get("quick"):
        return params
    return {k: (QUICK[k] if k in QUICK and k not in explicit else v) for k, v in params.items()}


def ensure_quix_venv(install: bool) -> None:
    """Create ``benchmarks/.venv-quix`` with Quix Streams when missing (a plain venv: Quix
    never shares an environment with kstream's dependencies)."""
    if QUIX_PYTHON.exists() or not install:
        return
    click.echo(f"creating {QUIX_VENV} with {QUIX_REQUIREMENT} ...")
    subprocess.run([sys.executable, "-m", "venv", str(QUIX_VENV)], check=True)
    subprocess.run([str(QUIX_PYTHON), "-m", "pip", "install", "-q", QUIX_REQUIREMENT], check=True)


def ensure_java() -> str | None:
    """Resolve and compile the Java contenders before any run (cached); why not, or None."""
    try:
        jvm.kafka_streams_app()
        jvm.broker_tools_app()
    except (jvm.JvmError, RuntimeError, OSError) as e:
        return str(e)
    return None


@click.command()
@bootstrap_option
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
    default="wipe",
    show_default=True,
    help="after kill -9, wipe the job's local state (a replacement machine), keep it "
    "(a restart in place), or measure both (adds about 8 minutes to the full run)",
)
@click.option(
    "--workload",
    "only",
    multiple=True,
    type=click.Choice(ALL_WORKLOADS),
    help="run only these (repeatable); default all",
)
@click.option("--timeout", default=1200.0, show_default=True, help="seconds per contender run")
@click.option(
    "--results",
    type=click.Path(path_type=Path),
    default=BENCH_DIR / "RESULTS.md",
    show_default=True,
)
@click.option("--no-quix-install", is_flag=True, help="do not create benchmarks/.venv-quix")
@click.option(
    "--quick",
    is_flag=True,
    help="development mode: "
    + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
    + " unless given",
)
def main(bootstrap: str | None, **params: Any) -> None:
    """Benchmark the raw client, kstream, Quix Streams and Kafka Streams on identical input;
    write RESULTS.md."""
    ctx = click.get_current_context()
    explicit = {k for k in params if ctx.get_parameter_source(k) != ParameterSource.DEFAULT}
    s = Settings(**apply_quick(params, explicit))
    command = reproducing_command(ctx)
    with kafka(bootstrap) as (bootstrap_, text):
        bench(bootstrap_, text, s, command)


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
        elif value is not None and (
            value != param.default
            # --quick changes the defaults: a value given as the default still counts
            or ctx.get_parameter_source(param.name) != ParameterSource.DEFAULT
        ):
            argv += [flag, str(value)]
    return shlex.join(argv)


def bench(bootstrap: str, broker_text: str, s: Settings, command: str) -> None:
    """Load the inputs, run every workload and the recovery runs, write RESULTS.md."""
    t0 = time.monotonic()
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine_lines = machine.describe(QUIX_PYTHON)  # load average before we add any
    steal_start = machine.cpu_steal_s()
    ensure_quix_venv(not s.no_quix_install)
    java_missing = ensure_java()
    if java_missing:
        click.echo(f"Java contenders not available: {java_missing}")
    selected = set(s.only) or set(ALL_WORKLOADS)
    chosen = [wl for wl in workloads(s.window_ms) if wl.key in selected]
    with (
        tempfile.TemporaryDirectory(prefix="kstream-bench-") as wd,
        registry(Path(wd), any(wl.fmt == "avro-sr" for wl in chosen)) as reg,
    ):
        h = Harness(bootstrap, s.partitions, Path(wd), s.timeout, registry_url=reg.url)
        series: list[Series] = []
        if reg.unavailable and any(wl.fmt == "avro-sr" for wl in chosen):
            click.echo(f"w5r not available: {reg.unavailable}")
        # Every input is loaded (or found loaded) once, before any contender runs.
        inputs: dict[Format, tuple[InputSpec, EndOffsets, Expected]] = {}
        for fmt in dict.fromkeys(wl.fmt for wl in chosen):
            if fmt == "avro-sr" and reg.unavailable:
                continue
            spec = InputSpec(
                s.records, s.keys, s.partitions, event_rate=s.event_rate, fmt=fmt,
                schema_id=reg.schema_id if fmt == "avro-sr" else 0,
            )  # fmt: skip
            ends = generate.load(bootstrap, spec)
            windows = any(wl.windows and wl.fmt == fmt for wl in chosen)
            dedup = any(wl.dedup and wl.fmt == fmt for wl in chosen)
            inputs[fmt] = (spec, ends, Expected(
                expected_stateless(spec),
                expected_windows(spec, s.window_ms) if windows else None,
                expected_dedup(spec) if dedup else None,
            ))  # fmt: skip
        for wl in chosen:
            if wl.fmt not in inputs:  # its registry did not start
                series += [Series(wl, c, unavailable=reg.unavailable) for c in wl.contenders]
                continue
            spec, ends, expected = inputs[wl.fmt]
            wl_series = [
                Series(wl, c, unavailable=unavailable(c, java_missing)) for c in wl.contenders
            ]
            series += wl_series
            for run_no in range(1, s.runs + 1):  # round-robin: noise hits every contender alike
                for sr in wl_series:
                    if sr.unavailable is None and run_no <= sr.contender.runs(s.runs):
                        run_one(h, sr, run_no, spec, ends, expected)
        rec: RecoveryResults = {}
        if "recovery" in selected:
            rec = run_recovery(h, s.recovery_keys, s.runs, s.recovery_local)
            if java_missing:
                for name in list(rec):
                    if name.startswith("kafka_streams"):
                        rec[name] = f"not available: {java_missing}"
    steal_end = machine.cpu_steal_s()
    if steal_start is not None and steal_end is not None:
        machine_lines.append(machine.steal_line(steal_end - steal_start, time.monotonic() - t0))
    info = RunInfo(
        started=started, command=command, machine_lines=machine_lines, broker_text=broker_text,
        partitions=s.partitions, records=s.records, keys=s.keys, event_rate=s.event_rate,
        window_ms=s.window_ms, recovery_keys=s.recovery_keys, quick=s.quick,
        minutes=(time.monotonic() - t0) / 60,
    )  # fmt: skip
    previous = s.results.read_text() if s.results.is_file() else ""
    text = results_text(info, workloads(s.window_ms), series, rec, previous)
    click.echo("\n" + text)
    s.results.write_text(text)
    click.echo(f"written to {s.results}")


def unavailable(c: Any, java_missing: str | None) -> str | None:
    """Why contender ``c`` cannot run (its module is missing, or Java is)."""
    why = c.unavailable()
    if why is None and java_missing and c.module in ("kafkastreams", "broker_perf"):
        return f"Java: {java_missing[:200]}"
    return why


def run_one(
    h: Harness, sr: Series, run_no: int, spec: InputSpec, ends: EndOffsets, exp: Expected
) -> None:
    """One run of one series' contender; its result or failure is added to the series."""
    wl, c = sr.workload, sr.contender
    try:
        r: RunResult = h.run_once(wl, c, spec, ends, exp)
    except (RuntimeError, TimeoutError, ValueError) as e:
        sr.failures.append(f"run {run_no}: {e}")
        h.say(f"{wl.key} {c.name} run {run_no}: FAILED: {e}")
        return
    sr.runs.append(r)
    h.say(
        f"{wl.key} {c.name} run {run_no}: {fmt_rate(r.rate)} records/s, "
        f"{r.seconds:.2f} s, CPU {r.cpu_s:.2f} s, steal {r.steal_s or 0:.2f} s, "
        f"RSS {r.peak_rss_mb:.0f} MB, "
        f"out {r.records_out}{'' if r.valid else ' INVALID: ' + r.note} "
        f"(process {r.job_s:.1f} s, output checked in {r.check_s:.1f} s)"
    )


if __name__ == "__main__":
    main()
