"""One crash-test run: start the job, write the input while killing processes, drain, read.

``run_job`` returns what the sink committed plus everything observed; the tests
make the assertions.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from integration.e2e.generator import Generator
from integration.e2e.harness import (
    PAUSE_MARKER,
    ControlLog,
    ControlWatcher,
    HarnessError,
    JobSettings,
    JobUnderTest,
    Read,
    RunReport,
    covers,
    create_topics,
    read_sink,
    report,
    source_ends,
    wait_until,
    write_renamed_topology,
)
from integration.e2e.scenarios import Scenario
from integration.edge_tools import markers
from kstream.checkpointstorage.base import StoreError
from kstream.checkpointstorage.metadata import read_metadata
from kstream.protocol.messages import CheckpointCompleted, Restore, Resume

# A kill plan is a list of steps: "worker" (random worker, random time), "coordinator",
# "after-snapshot" / "before-sink-commit" (targeted, via the worker's debug pause).
# The sink-commit pause needs output still being produced, so it comes early.
EXACTLY_ONCE_PLAN = [
    "worker",
    "before-sink-commit",
    "coordinator",
    "after-snapshot",
    "worker",
]


@dataclass
class TargetedKill:
    point: str
    marker: str  # the worker's marker line
    checkpoint_id: int
    task: str
    completed_before_kill: bool
    task_markers_before_kill: list[int]  # commit markers of the task at kill time


@dataclass
class RunResult:
    app: str
    sink_topic: str
    sink: list[Read]
    report: RunReport
    targeted: list[TargetedKill] = field(default_factory=list)
    control: ControlLog | None = None
    job: JobUnderTest | None = None
    renames: dict[str, str] = field(default_factory=dict)


def _marker_field(line: str, name: str) -> str:
    for part in line.split():
        if part.startswith(f"{name}="):
            return part.split("=", 1)[1]
    raise HarnessError(f"marker line without {name}=: {line!r}")


def run_job(
    bootstrap: str,
    scenario: Scenario,
    workdir: Path,
    *,
    seed: int,
    settings: JobSettings,
    plan: list[str],
    rate: float = 40.0,
    gate_late: bool = True,
    drain_timeout: float = 150.0,
    on_running: Callable[[JobUnderTest], None] | None = None,
    during: Callable[[JobUnderTest, ControlLog | None], None] | None = None,
    pre_create: Callable[[str, dict[str, str]], None] | None = None,
) -> RunResult:
    """Run ``scenario`` under ``plan``'s kills; SIGTERM everything once drained.

    ``pre_create(app, renames)`` runs before the job starts (e.g. to place topics on
    chosen brokers); ``during(job, control)`` runs with the input flowing, after the
    kill plan (e.g. broker failures).
    """
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:8]
    app = f"e2e-{scenario.name.replace('_', '-')}-{suffix}"
    renames = {t: f"{app}.in.{t}" for t in scenario.sources} | {
        scenario.sink: f"{app}.out.{scenario.sink}"
    }
    print(f"[e2e] {scenario.name}: seed {seed}, app {app}, workdir {workdir}", flush=True)
    create_topics(
        bootstrap,
        {renames[t]: n for t, n in scenario.sources.items()} | {renames[scenario.sink]: 3},
    )
    if pre_create is not None:
        pre_create(app, renames)
    topo = write_renamed_topology(scenario.topology_file, renames, workdir / "topology.py")
    job = JobUnderTest(bootstrap, app, topo, workdir, settings)
    control: ControlLog | None = None
    watcher: ControlWatcher | None = None
    gen: Generator | None = None
    targeted: list[TargetedKill] = []
    sink_topic = renames[scenario.sink]
    auto = settings.coordinator == "auto"
    try:
        if settings.checkpointing and not auto:
            job.start_coordinator()
        for slot in range(settings.workers):
            job.start_worker(slot)
        if settings.checkpointing:
            # The coordinator creates the control topic; watch it once it exists.
            wait_until(
                "the coordinator announces the first completed checkpoint",
                lambda: _first_completion(job),
                60.0,
                lambda: "\n".join(
                    job.current["worker-0" if auto else "coordinator"].text().splitlines()[-5:]
                ),
            )
            watcher = ControlWatcher(bootstrap, app)
            watcher.start()
            control = watcher.log
        if on_running is not None:
            on_running(job)

        committed_seen = [0.0]

        def late_gate() -> bool:
            # at most one read of the sink per second
            if time.monotonic() - committed_seen[0] < 1.0:
                return False
            committed_seen[0] = time.monotonic()
            return len(read_sink(bootstrap, sink_topic)) > 0

        gen = Generator(
            bootstrap,
            scenario.renamed(renames),
            rate,
            late_gate=late_gate if gate_late else None,
        )
        gen.start()

        for step in plan:
            job.assert_alive()
            wait = rng.uniform(2.0, 5.0)
            print(f"[e2e] next: {step} in {wait:.1f}s", flush=True)
            time.sleep(wait)  # a random moment to strike, not synchronisation
            if step == "worker":
                slot = rng.randrange(settings.workers)
                job.kill(f"worker-{slot}", "random worker at a random time")
                job.start_worker(slot)
            elif step == "coordinator":
                job.kill("coordinator", "the coordinator")
                job.start_coordinator()
            else:
                assert control is not None, "targeted kills need checkpointing"
                targeted.append(_targeted_kill(job, control, rng, step, bootstrap))
        if during is not None:
            during(job, control)
        print(
            f"[e2e] kill plan done; generator at {gen.produced}/{len(scenario.records)}", flush=True
        )
        wait_until(
            "the generator wrote the whole input",
            lambda: gen is not None and (gen.finished_at is not None or gen.error is not None),
            180.0,
            lambda: f"{gen.produced if gen else 0} of {len(scenario.records)}",
        )
        if gen.error is not None:
            raise gen.error
        job.assert_alive()
        ends = source_ends(bootstrap, {renames[t]: n for t, n in scenario.sources.items()})
        if control is not None:
            _wait_drained(job, control, bootstrap, sink_topic, ends, drain_timeout)
        else:
            wait_drained_unchecked(job, bootstrap, sink_topic, ends, drain_timeout)
        job.assert_alive()
        sink = read_sink(bootstrap, sink_topic)
        codes = job.stop_all()
        print(f"[e2e] stopped: exit codes {codes}", flush=True)
        rep = report(job, control) if control is not None else _empty_report(job)
        return RunResult(app, sink_topic, sink, rep, targeted, control, job, renames)
    finally:
        if gen is not None:
            gen.halt()
        if watcher is not None:
            watcher.stop()
        job.kill_everything()


def _first_completion(job: JobUnderTest) -> bool:
    job.assert_alive()
    try:
        from kstream.checkpointstorage.metadata import completed_ids

        return bool(completed_ids(job.store(), job.app))
    except StoreError:
        return False


def _targeted_kill(
    job: JobUnderTest, control: ControlLog, rng: random.Random, point: str, bootstrap: str
) -> TargetedKill:
    """Kill a random worker, restart it paused at ``point``, kill it there, restart it."""
    slot = rng.randrange(job.settings.workers)
    role = f"worker-{slot}"
    job.kill(role, f"to restart it with --debug-pause-at {point}")
    p = job.start_worker(slot, pause_at=point)
    line = job.wait_for_line(p, f"{PAUSE_MARKER} {point}", 90.0)
    n = int(_marker_field(line, "checkpoint"))
    task = _marker_field(line, "task")
    done = n in control.completed_ids() or _completed_in_store(job, n)
    task_markers = [m["checkpoint"] for m in markers(bootstrap, job.app) if m["task"] == task]
    job.kill(role, f"paused at {point}: {line.strip()}")
    job.start_worker(slot)
    return TargetedKill(point, line.strip(), n, task, done, task_markers)


def _completed_in_store(job: JobUnderTest, n: int) -> bool:
    try:
        read_metadata(job.store(), job.app, n)
        return True
    except StoreError:
        return False


def _wait_drained(
    job: JobUnderTest,
    control: ControlLog,
    bootstrap: str,
    sink_topic: str,
    ends: dict[tuple[str, int], int],
    timeout: float,
) -> None:
    """Drained: a completed checkpoint covers the whole input, and the committed output
    did not change over two further completed checkpoints without a restore between."""
    store = job.store()
    cover: list[int] = []

    def covered() -> bool:
        job.assert_alive()
        for n in control.completed_ids():
            if cover and n <= cover[0]:
                continue
            try:
                if covers(read_metadata(store, job.app, n), ends):
                    cover[:] = [n]
                    return True
            except StoreError:
                continue
        return False

    wait_until(
        "a completed checkpoint covers the end of every source partition",
        covered,
        timeout,
        lambda: f"completed {control.completed_ids()[-5:]}, ends {ends}",
    )
    print(f"[e2e] checkpoint {cover[0]} covers the input {ends}", flush=True)
    deadline = time.monotonic() + timeout
    while True:
        last = max(control.completed_ids())
        restores = len(control.of(Restore))
        before = len(read_sink(bootstrap, sink_topic))

        def two_more(last: int = last) -> bool:
            job.assert_alive()
            return max(control.completed_ids()) >= last + 2

        wait_until(
            f"two checkpoints complete after {last}",
            two_more,
            max(1.0, deadline - time.monotonic()),
            lambda: f"completed {control.completed_ids()[-5:]}",
        )
        after = len(read_sink(bootstrap, sink_topic))
        if after == before and len(control.of(Restore)) == restores and last >= cover[0] + 2:
            print(f"[e2e] drained: {after} committed output records", flush=True)
            return
        if time.monotonic() > deadline:
            raise HarnessError(f"output still changing: {before} -> {after} records")


def wait_drained_unchecked(
    job: JobUnderTest,
    bootstrap: str,
    sink_topic: str,
    ends: dict[tuple[str, int], int],
    timeout: float,
) -> dict[tuple[str, int], int]:
    """Checkpointing off: the group's committed offsets reach every source end offset,
    and the output stops changing for 3 s. Returns the committed source offsets."""
    from kstream.kafka.clients import TopicPartition, make_consumer

    c = make_consumer(bootstrap, job.app)
    seen: dict[tuple[str, int], int] = {}
    try:

        def committed() -> bool:
            job.assert_alive()
            tps = c.committed([TopicPartition(t, p) for t, p in ends], timeout=10)
            seen.clear()
            seen.update({(tp.topic, tp.partition): tp.offset for tp in tps})
            return all(seen[tp] >= end for tp, end in ends.items())

        wait_until(
            "the group's committed offsets reach the source end offsets",
            committed,
            timeout,
            lambda: f"committed {seen}, ends {ends}",
        )
    finally:
        c.close()
    stable_since = [time.monotonic(), len(read_sink(bootstrap, sink_topic))]

    def stable() -> bool:
        n = len(read_sink(bootstrap, sink_topic))
        if n != stable_since[1]:
            stable_since[:] = [time.monotonic(), n]
        return time.monotonic() - stable_since[0] >= 3.0

    wait_until("the output stops changing for 3 s", stable, timeout, lambda: f"{stable_since}")
    return dict(seen)


def _empty_report(job: JobUnderTest) -> RunReport:
    return RunReport(len(job.kills), 0, 0, 0, [], [], [], [])


def resumes_after(control: ControlLog, t: float) -> list[float]:
    return [x for x, _m in control.of(Resume) if x > t]


def completed_before(control: ControlLog, n: int) -> bool:
    return any(m.checkpoint_id == n for _t, m in control.of(CheckpointCompleted))
