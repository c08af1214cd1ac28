"""Elastic jobs (issue 42): what a change of membership costs the tasks it does not touch.

Four ``kstream worker`` processes (they elect their coordinator) run a 2-stage keyed
window job, exactly-once, checkpoints every 2 s, on input produced live at a fixed rate:

    stage 1: source (8 partitions) -> peek (logs the record id) -> key_by("k<n>")
    stage 2: peek (logs the record id) -> 1 s tumbling window: count, sum of ids, max ts

Scenarios: ``rolling`` (SIGTERM each worker in turn, wait until it exited, start it
again: a Kubernetes rolling restart), ``scale`` (2 -> 4 workers, then 4 -> 2 by
SIGTERM), ``kill`` (kill -9 of one of 4 workers). A read_committed consumer notes when
each stage-2 task's output advances (the output key gives its task); the pure
definitions are in ``benchmarks/elastic_measure.py``. The output is checked exact against
the windows computed from what was produced (0 lost, 0 duplicated).

    python -m benchmarks.elastic [--scenario rolling|scale|kill ...] [--runs N]

Without ``--bootstrap`` a local broker (``kstream.dev.localbroker``) is started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import click

from benchmarks.broker import bootstrap_option, kafka
from benchmarks.elastic_measure import (
    Exactness,
    WindowKey,
    check_exact,
    longest_pause,
    owners_at,
    reprocessed,
    running_events,
    stall_time,
)
from benchmarks.generate import KEEP_FOREVER
from benchmarks.procstats import Child
from kstream.kafka.clients import (
    TopicPartition,
    TopicSpec,
    ensure_topics,
    make_consumer,
    make_producer,
)
from kstream.runtime.operators import partition_for_key

REPO_DIR = Path(__file__).resolve().parent.parent
PARTITIONS = 8  # input, repartition and output: 8 tasks per stage, 16 in all
KEYS = 96
WINDOW_MS = 1000
INTERVAL_S = 2.0
STALL_S = 2 * INTERVAL_S
SCENARIOS = ("rolling", "scale", "kill")

_TOPOLOGY = """\
import os
from kstream.api import Topology, Tumbling

_fds = {{}}


def _seen(stage):
    def log(v):
        fd = _fds.get(stage)
        if fd is None:
            path = os.path.join({seen_dir!r}, f"{{stage}}-{{os.getpid()}}.log")
            fd = _fds[stage] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"%d\\n" % v["n"])
    return log


topology = Topology({app!r})
(
    topology.source({topic!r}, key_serde="str", value_serde="json")
    .peek(_seen("s1"))
    .key_by(lambda v: "k%d" % v["k"], key_serde="str")
    .peek(_seen("s2"))
    .window(Tumbling({window_ms}))
    .aggregate(
        lambda: {{"c": 0, "s": 0, "m": 0}},
        lambda a, v: {{"c": a["c"] + 1, "s": a["s"] + v["n"], "m": max(a["m"], v["ts"])}},
    )
    .map(lambda r: {{"start": r.start, "c": r.value["c"], "s": r.value["s"], "m": r.value["m"]}})
    .to({output!r}, key_serde="str", value_serde="json")
)
"""


def task_of_key(key: str) -> int:
    """The stage-2 task (repartition partition) of output key ``key``: key_by writes the
    key with its serde (str: UTF-8) to kstream's ``partition_for_key`` of its bytes."""
    return partition_for_key(key.encode(), PARTITIONS)


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
    moved_pause_s: float
    stall_s: float  # the job's: see elastic_measure
    reprocessed_s1: int
    reprocessed_s2: int
    restores: int  # "task X restored checkpoint" log lines
    exact: Exactness
    produced: int
    seconds: float


class Run:
    """One scenario: broker topics, producer, output watcher and worker processes."""

    def __init__(self, bootstrap: str, workdir: Path, rate: int, timeout: float) -> None:
        rid = uuid.uuid4().hex[:8]
        self.bootstrap, self.rate, self.timeout = bootstrap, rate, timeout
        self.app = f"elastic-{rid}"
        self.topic, self.output = f"elastic.in.{rid}", f"elastic.out.{rid}"
        self.dir = workdir / self.app
        self.seen_dir = self.dir / "seen"
        self.seen_dir.mkdir(parents=True)
        self.topo = self.dir / "job.py"
        self.topo.write_text(
            _TOPOLOGY.format(
                app=self.app, topic=self.topic, output=self.output, window_ms=WINDOW_MS,
                seen_dir=str(self.seen_dir),
            )
        )  # fmt: skip
        from kstream.kafka.clients import make_admin

        ensure_topics(
            make_admin(bootstrap),
            [TopicSpec(t, PARTITIONS, KEEP_FOREVER) for t in (self.topic, self.output)],
        )
        self.produced: list[tuple[int, int, int]] = []  # (n, k, ts ms)
        self.advances: dict[int, list[float]] = defaultdict(list)  # task -> wall times
        self.windows: list[tuple[WindowKey, int, int]] = []
        self.stop_flag = threading.Event()
        self.stop_producing = threading.Event()
        self.workers: dict[str, Child] = {}  # incarnation name -> process
        self.slots: dict[int, str] = {}  # worker slot -> its current incarnation
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._watch, daemon=True),
        ]
        for t in self.threads:
            t.start()

    # -------------------------------------------------------------- input and output
    def _produce(self) -> None:
        producer = make_producer(self.bootstrap, extra={"linger.ms": 5})
        n, tick = 0, 0.05
        t0 = time.monotonic()
        while not self.stop_producing.is_set():
            due = t0 + n / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, tick))  # pacing the producer (not synchronisation)
                continue
            now = int(time.time() * 1000)
            k = n % KEYS
            value = json.dumps({"n": n, "k": k, "ts": now}).encode()
            producer.produce(self.topic, value, str(k).encode(), partition=n % PARTITIONS,
                             timestamp=now)  # fmt: skip
            self.produced.append((n, k, now))
            n += 1
            if n % 50 == 0:
                producer.poll(0)
        if producer.flush(30.0):
            raise RuntimeError("input not delivered")

    def _watch(self) -> None:
        consumer = make_consumer(self.bootstrap, f"{self.app}-watch", read_committed=True)
        consumer.assign([TopicPartition(self.output, p, 0) for p in range(PARTITIONS)])
        try:
            while not self.stop_flag.is_set():
                msgs = consumer.consume(num_messages=5000, timeout=0.05)
                now = time.time()
                for m in msgs:
                    if m.error() is not None:
                        continue
                    key = (m.key() or b"").decode()
                    v = json.loads(m.value() or b"{}")
                    self.windows.append(((key, int(v["start"])), int(v["c"]), int(v["s"])))
                    task = task_of_key(key)
                    adv = self.advances[task]
                    if not adv or adv[-1] != now:
                        adv.append(now)
        finally:
            consumer.close()

    # -------------------------------------------------------------- workers
    def start(self, slot: int) -> None:
        name = f"w{slot}.{sum(1 for w in self.workers if w.startswith(f'w{slot}.'))}"
        kstream = str(Path(sys.executable).with_name("kstream"))
        self.workers[name] = Child(
            [kstream, "worker", str(self.topo), "-b", self.bootstrap,
             "--store", f"file://{self.dir / 'store'}", "--state-dir", str(self.dir / f"state-{slot}"),
             "--interval", str(INTERVAL_S), "--guarantee", "exactly_once", "--coordinator", "auto"],
            cwd=REPO_DIR, log_dir=self.dir, name=name,
            env={**os.environ, "KSTREAM_LOG_FORMAT": "json"},
        )  # fmt: skip
        self.slots[slot] = name

    def stop(self, slot: int, sig: signal.Signals = signal.SIGTERM) -> None:
        """Signal a worker and wait until it exited (SIGKILL after 60 s)."""
        w = self.workers[self.slots.pop(slot)]
        w.kill(sig)
        deadline = time.monotonic() + 60
        while w.running and time.monotonic() < deadline:
            time.sleep(0.1)  # polling the process for its exit, with a deadline
        if w.running:
            w.stop(grace=0)

    def settle(self, since: float, advances: int = 2) -> float:
        """Wait until every task's output advanced ``advances`` times after ``since``
        (wall time); return when the last of them did."""
        deadline = time.monotonic() + self.timeout
        while True:
            after = [[t for t in self.advances.get(p, []) if t > since] for p in range(PARTITIONS)]
            if all(len(a) >= advances for a in after):
                return max(a[0] for a in after)
            for name in self.slots.values():
                if not self.workers[name].running:
                    raise RuntimeError(f"{name} exited:\n{self.workers[name].result().stderr_tail}")
            if time.monotonic() > deadline:
                missing = [p for p in range(PARTITIONS) if len(after[p]) < advances]
                raise TimeoutError(f"tasks {missing} produced no output within {self.timeout} s")
            time.sleep(0.2)  # polling the watcher's record for a condition, with a deadline

    def wait_stable(self) -> None:
        """Wait until the workers' last task assignment is 3 intervals old and covers
        every task (joins at start roll the job back a few times)."""
        deadline = time.monotonic() + self.timeout
        while True:
            events = self.ownership()
            now = time.time()
            if events and now - max(e[0] for e in events) > 3 * INTERVAL_S:
                owners = owners_at(events, now)
                if len(owners) == 2 * PARTITIONS and set(owners.values()) <= set(
                    self.slots.values()
                ):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job did not settle within {self.timeout} s")
            time.sleep(0.5)  # polling the logs for a condition, with a deadline

    def seen(self) -> dict[str, list[int]]:
        """Every record id each stage's peek logged so far."""
        return {
            stage: [
                int(x) for f in self.seen_dir.glob(f"{stage}-*.log") for x in f.read_text().split()
            ]
            for stage in ("s1", "s2")
        }

    def restores_since(self, t: float) -> int:
        """The "task X restored checkpoint" log lines after ``t`` (unix time)."""
        n = 0
        for name in self.workers:
            for line in (self.dir / f"{name}.err").read_text(errors="replace").splitlines():
                if "restored checkpoint" in line:
                    with contextlib.suppress(ValueError, KeyError):
                        if datetime.fromisoformat(json.loads(line)["time"]).timestamp() >= t:
                            n += 1
        return n

    def finish(
        self, baseline: dict[str, list[int]], since: float
    ) -> tuple[Exactness, int, int, int]:
        """Stop input; wait until every window ending 2 s before the last input is out;
        stop the workers; check exactness, count re-processing (beyond ``baseline``)
        and restores (after ``since``)."""
        self.stop_producing.set()
        self.threads[0].join(60)
        last_ts = self.produced[-1][2]
        cut = last_ts - last_ts % WINDOW_MS - 2 * WINDOW_MS
        reference: dict[WindowKey, tuple[int, int]] = {}
        for n, k, ts in self.produced:
            wk = (f"k{k}", ts - ts % WINDOW_MS)
            c, s = reference.get(wk, (0, 0))
            reference[wk] = (c + 1, s + n)
        want = {wk for wk in reference if wk[1] + WINDOW_MS <= cut}
        deadline = time.monotonic() + self.timeout
        while not want <= {wk for wk, _, _ in list(self.windows)}:
            if time.monotonic() > deadline:
                break  # counted as lost below
            time.sleep(0.2)  # polling the watcher's record for a condition, with a deadline
        time.sleep(2 * INTERVAL_S)  # let a duplicate, if any, become visible too
        for slot in list(self.slots):
            self.stop(slot)
        self.stop_flag.set()
        self.threads[1].join(30)
        exact = check_exact(reference, list(self.windows), cut, WINDOW_MS)
        seen = self.seen()
        re1, re2 = (reprocessed(seen[s]) - reprocessed(baseline[s]) for s in ("s1", "s2"))
        return exact, re1, re2, self.restores_since(since)

    def ownership(self) -> list[tuple[float, str, list[str]]]:
        events = []
        for name in self.workers:
            lines = (self.dir / f"{name}.err").read_text(errors="replace").splitlines()
            events += running_events(name, lines)
        return events

    def close(self) -> None:
        self.stop_producing.set()
        self.stop_flag.set()
        for w in self.workers.values():
            w.stop(grace=10)


def stage2_task(partition: int) -> str:
    """The id of the stage-2 task reading repartition ``partition`` (the planner names
    a stage's tasks ``<stage>-<partition>``, stages from 0)."""
    return f"stage1-{partition}"


def run_scenario(
    scenario: str,
    bootstrap: str,
    workdir: Path,
    rate: int,
    timeout: float,
    say: Callable[[str], None] = click.echo,
) -> Outcome:
    run = Run(bootstrap, workdir, rate, timeout)
    t_begin = time.time()
    steps: list[Step] = []
    try:
        first = 2 if scenario == "scale" else 4
        for slot in range(first):
            run.start(slot)
        run.settle(time.time(), advances=3)
        run.wait_stable()
        quiet_from = time.time()
        time.sleep(3 * INTERVAL_S)  # a quiet spell: the steady-state pause, for reference
        quiet_to = time.time()

        baseline = run.seen()

        def step(name: str, *actions: Callable[[], None]) -> None:
            s = Step(name, time.time())
            say(f"  {name}")
            for action in actions:
                action()
            run.settle(time.time())
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
            step("kill -9 w3", partial(run.stop, 3, signal.SIGKILL))
        else:
            raise click.UsageError(f"unknown scenario {scenario!r}")
        exact, re1, re2, restores = run.finish(baseline, steps[0].start)
        events = run.ownership()
        for s in steps:
            before, after = owners_at(events, s.start), owners_at(events, s.end)
            for p in range(PARTITIONS):
                tid = stage2_task(p)
                same = before.get(tid) is not None and before.get(tid) == after.get(tid)
                (s.unmoved if same else s.moved).add(str(p))
        adv = {p: sorted(run.advances.get(p, [])) for p in range(PARTITIONS)}
        job = sorted(t for a in adv.values() for t in a)

        def worst(pick: str) -> float:
            return max(
                (
                    longest_pause(adv[int(p)], s.start, s.end)
                    for s in steps
                    for p in getattr(s, pick)
                ),
                default=0.0,
            )

        return Outcome(
            scenario=scenario, rate=rate, steps=steps,
            steady_pause_s=max(longest_pause(adv[p], quiet_from, quiet_to) for p in adv),
            unmoved_pause_s=worst("unmoved"), moved_pause_s=worst("moved"),
            stall_s=stall_time(job, [(s.start, s.end) for s in steps], STALL_S),
            reprocessed_s1=re1, reprocessed_s2=re2, restores=restores, exact=exact,
            produced=len(run.produced), seconds=time.time() - t_begin,
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
        "| scenario | runs | steady pause s | unmoved tasks' longest pause s | moved tasks' "
        "longest pause s | job stall s | re-processed stage 1 / stage 2 | restores | exact |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for sc in SCENARIOS:
        os_ = [o for o in outcomes if o.scenario == sc]
        if not os_:
            continue
        unmoved = [o.unmoved_pause_s for o in os_]
        n_unmoved = [sum(len(s.unmoved) for s in o.steps) for o in os_]
        exact = all(o.exact.exact for o in os_)
        rows.append(
            f"| {sc} | {len(os_)} | {cell([o.steady_pause_s for o in os_], '.1f')} | "
            f"{cell(unmoved, '.1f') if any(n_unmoved) else '- (all moved)'} | "
            f"{cell([o.moved_pause_s for o in os_], '.1f')} | {cell([o.stall_s for o in os_], '.1f')} | "
            f"{cell([o.reprocessed_s1 for o in os_], '.0f')} / {cell([o.reprocessed_s2 for o in os_], '.0f')} | "
            f"{cell([o.restores for o in os_], '.0f')} | "
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
@click.option("--timeout", default=120.0, show_default=True, help="Seconds a step may take.")
def main(
    bootstrap: str | None,
    scenarios: tuple[str, ...],
    runs: int,
    rate: int,
    workdir: Path | None,
    timeout: float,
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
                o = run_scenario(sc, bootstrap, workdir, rate, timeout)
                outcomes.append(o)
                click.echo(
                    f"  {o.seconds:.0f} s, {o.produced} records; unmoved pause {o.unmoved_pause_s:.1f} s, "
                    f"moved {o.moved_pause_s:.1f} s, stall {o.stall_s:.1f} s, re-processed "
                    f"{o.reprocessed_s1}/{o.reprocessed_s2}, restores {o.restores}, {o.exact}; steps: "
                    + "; ".join(f"{s.name}: moved {sorted(s.moved)}" for s in o.steps)
                )  # fmt: skip
        shutil.rmtree(workdir / "kafka", ignore_errors=True)
    click.echo(table(outcomes))


if __name__ == "__main__":
    main()
