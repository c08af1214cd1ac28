"""Running contenders: one run of one contender on one workload (fresh output topic, group and
state; its output read back and checked), and the recovery runs of workload 4."""

from __future__ import annotations

import re
import shutil
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import click

from benchmarks import generate, recovery
from benchmarks.generate import KEEP_FOREVER, InputSpec
from benchmarks.lineup import (
    PASS_THROUGH,
    PERF_CONSUMER,
    PERF_PRODUCER,
    REPO_DIR,
    Contender,
    Workload,
    recovery_contenders,
)
from benchmarks.machine import cpu_steal_s
from benchmarks.procstats import Child
from benchmarks.verify import Decode, OutputStats, read_output
from benchmarks.workloads import EndOffsets, Report
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin


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
    job_s: float = 0.0  # the harness's wall time: the contender process, start to exit
    check_s: float = 0.0  # ... reading its output back and checking it
    steal_s: float | None = None  # CPU time the hypervisor took from the machine meanwhile


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


@dataclass(frozen=True)
class Expected:
    """What a workload's output must be, computed from the input once per input set."""

    stateless: OutputStats  # workloads 1/5 (count and cents)
    windows: OutputStats | None = None  # workloads 2/3/4 (count and digest)
    dedup: OutputStats | None = None  # workload 6 (count)


def decode_for(wl: Workload, c: Contender) -> Decode | None:
    """How contender ``c``'s output in ``wl`` is checked beyond its record count."""
    if c.name in (PASS_THROUGH, PERF_PRODUCER, PERF_CONSUMER):
        return None
    if wl.stateless:
        return "avro" if wl.fmt == "avro-sr" else wl.fmt  # the same Avro output
    return "windows" if wl.windows else None


def check(
    wl: Workload, c: Contender, spec: InputSpec, report: Report, got: OutputStats, exp: Expected
) -> str:
    """Why a run is invalid ("" when its output is exactly what it must be)."""
    if report.records_in != spec.records:
        return f"processed {report.records_in} of {spec.records} records"
    if c.name == PASS_THROUGH and got.records != spec.records:
        return f"piped {got.records} of {spec.records} records"
    if c.name == PERF_PRODUCER and got.records != spec.records:
        return f"produced {got.records} of {spec.records} records"
    if c.name == PERF_CONSUMER:
        return "" if got.records == 0 else f"wrote {got.records} records"
    want = None
    if decode_for(wl, c) is not None:
        want = exp.windows if wl.windows else exp.stateless
    elif wl.dedup:
        want = exp.dedup
    if want is not None and got != want:
        return f"output {got} != expected {want}"
    return ""


@dataclass
class Harness:
    bootstrap: str
    partitions: int
    workdir: Path
    timeout: float
    log: list[str] = field(default_factory=list)
    #: The Schema Registry "avro-sr" workloads read through (``benchmarks.registry``).
    registry_url: str | None = None

    def say(self, text: str) -> None:
        """Print a progress line (and keep it)."""
        click.echo(text)
        self.log.append(text)

    def run_once(
        self, wl: Workload, c: Contender, spec: InputSpec, ends: EndOffsets, exp: Expected
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
        if wl.fmt == "avro-sr":
            common += [
                "--registry-url",
                self.registry_url or "",
                "--schema-id",
                str(spec.schema_id),
            ]
        t_start = time.monotonic()
        steal_start = cpu_steal_s()
        try:
            child = Child(c.argv(common), cwd=REPO_DIR, log_dir=self.workdir, name=f"{group}")
            res = child.wait(self.timeout)
            t_job = time.monotonic()
            steal_end = cpu_steal_s()
            if res.returncode != 0:
                raise RuntimeError(f"exit code {res.returncode}; stderr tail:\n{res.stderr_tail}")
            report = Report.parse(res.stdout)
            got = read_output(self.bootstrap, out, self.partitions, decode=decode_for(wl, c))
            note = check(wl, c, spec, report, got, exp)
            seconds = report.t_end - report.t_first
            fed = FED_LINE.search(res.stderr_tail)
            return RunResult(
                rate=report.records_in / seconds if seconds > 0 else float("inf"),
                seconds=seconds,
                cpu_s=res.cpu_s,
                peak_rss_mb=res.peak_rss_mb,
                records_in=report.records_in,
                records_out=got.records,
                valid=not note,
                note=note,
                fed_s=float(fed.group(1)) if fed else None,
                job_s=t_job - t_start,
                check_s=time.monotonic() - t_job,
                steal_s=None
                if steal_start is None or steal_end is None
                else steal_end - steal_start,
            )
        finally:
            for t in [out, *recovery.topics_of_group(self.bootstrap, group)]:
                generate.delete_topic(self.bootstrap, t)
            shutil.rmtree(state, ignore_errors=True)


#: Recovery is measured with the local state wiped after kill -9 (a replacement machine:
#: state comes from the changelog / kstream's checkpoint store) and/or kept (a restart on
#: the same machine). Result keys: the contender name, plus this suffix.
RECOVERY_MODES: dict[str, str] = {"wipe": "", "keep": " (local state kept)"}

RecoveryResults = dict[str, list[recovery.RecoveryResult] | str]


def run_recovery(h: Harness, keys: int, runs: int, local: str) -> RecoveryResults:
    """Workload 4's recovery runs, contenders interleaved, per mode of ``local`` (wipe, keep
    or both; see ``RECOVERY_MODES``)."""
    jobs = [
        (c, recovery.wait_checkpointed if c.name == "kstream" else recovery.wait_group_committed)
        for c in recovery_contenders()
    ]
    modes = ["wipe", "keep"] if local == "both" else [local]
    out: RecoveryResults = {}
    for mode in modes:
        for c, _ in jobs:
            why = c.unavailable()
            out[c.name + RECOVERY_MODES[mode]] = f"not available: {why}" if why else []

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
            for c, wait_built in jobs:
                row = c.name + RECOVERY_MODES[mode]
                results = out[row]
                if not isinstance(results, list) or run_no > c.runs(runs):
                    continue
                try:
                    r = recovery.measure_recovery(
                        h.bootstrap, argv_for(c), name=c.name, keys=keys, partitions=h.partitions,
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
