"""A job of isolated tasks (source -> peek -> map -> exactly-once sink) on several
``kstream worker`` processes and an external ``kstream coordinator``, fed a steady
input, with the checks the crash-carry and cooperative tests share: exact output, no
failover, nothing processed twice (each process notes every record its ``peek`` saw).
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from integration.cli_job import CLI, CliJob
from integration.edge_tools import read_all
from integration.steadyfeed import SteadyFeed
from kstream.kafka.clients import TopicSpec, ensure_topics, make_admin

WORKERS = 3
PARTITIONS = 6
RATE = 150  # records a second

TOPOLOGY = """
import os

from kstream.api import Topology


def seen(value):
    with open(os.path.join({seen!r}, f"seen-{{os.getpid()}}"), "a") as f:
        f.write(value + "\\n")


topology = Topology("carry")
topology.source({src!r}, value_serde="str").peek(seen).map(str.upper).to(
    {dst!r}, value_serde="str", guarantee="exactly_once"
)
"""


def assert_exact(bootstrap: str, dst: str, produced: int, waiter: CliJob) -> None:
    """Every record of the ``produced`` (``r<i>``) is in ``dst``'s read_committed output
    exactly once (upper-cased), waited for up to 120 s (``waiter``'s tail on a failure)."""
    expected = Counter(f"R{i}" for i in range(produced))
    out: list[Counter[str]] = []

    def all_out() -> bool:
        out[:] = [Counter(r.value.decode() for r in read_all(bootstrap, dst) if r.value)]
        return sum(out[0].values()) >= produced

    try:
        waiter.wait_until(all_out, f"{produced} outputs", 120)
    except AssertionError:
        missing = expected - out[0]
        parts = Counter(int(r[1:]) % PARTITIONS for r in missing)
        first = sorted(int(r[1:]) for r in missing)[:5]
        raise AssertionError(
            f"{sum(missing.values())} of {produced} records missing, by partition "
            f"{dict(parts)}, the first {first}: {waiter.tail()}"
        ) from None
    assert out[0] == expected, (
        f"{sum(out[0].values())} outputs of {produced}: "
        f"{len(expected - out[0])} missing, {len(out[0] - expected)} extra"
    )


class CarryJob:
    """The job on ``WORKERS`` workers and an external coordinator, fed ``RATE`` records a
    second from :meth:`running_with_input` until :meth:`stop_feed`."""

    def __init__(
        self,
        bootstrap: str,
        unique_name: Callable[[str], str],
        tmp: Path,
        timeout: int = 10,
        *,
        cooperative: bool = False,
        workers: int = WORKERS,
        interval: int = 1,
        coordinator: bool = True,
    ) -> None:
        """``coordinator`` False: the workers start first, :meth:`start_coordinator` later."""
        src, self.dst, app = unique_name("in"), unique_name("out"), unique_name("app")
        ensure_topics(
            make_admin(bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(self.dst, PARTITIONS)]
        )
        self.bootstrap, self._tmp = bootstrap, tmp
        self.seen_dir = tmp / "seen"
        self.seen_dir.mkdir()
        topology = tmp / "carry.py"
        topology.write_text(TOPOLOGY.format(seen=str(self.seen_dir), src=src, dst=self.dst))
        job = [str(topology), "--bootstrap", bootstrap, "--app-id", app,
               "--store", f"file://{tmp}/store", "--interval", str(interval)]  # fmt: skip
        if cooperative:  # (the workers' group and the coordinator: docs/design.md §6.8)
            job += ["-X", "partition.assignment.strategy=cooperative-sticky"]
        self.checkpoints = tmp / "store" / app / "checkpoints"
        # ``timeout``: the coordinator's heartbeat timeout and the workers' session, equal
        # (the hold is timed on the first; the group's change comes after the second).
        self._coordinator = [*CLI, "-v", "coordinator", *job, "--heartbeat-timeout", str(timeout)]
        if coordinator:
            self.start_coordinator()
        worker = [*CLI, "-v", "worker", *job, "--coordinator", "external",
                  "--session-timeout", str(timeout)]  # fmt: skip
        self._worker, self.app = worker, app
        self.workers = [self._start_worker(i) for i in range(workers)]
        # (explicit partitions, round-robin: every task gets input)
        self.feed = SteadyFeed(bootstrap, src, lambda i: (i % PARTITIONS, f"r{i}"), RATE // 10)
        self._feeding = False

    def start_coordinator(self) -> None:
        self.coordinator = CliJob(self._coordinator, self._tmp / "coord.log")

    def _start_worker(self, i: int) -> CliJob:
        state = ["--state-dir", str(self._tmp / f"state-{i}")]
        return CliJob([*self._worker, *state], self._tmp / f"w{i}.log")

    def add_worker(self) -> CliJob:
        """One more worker joins the running job."""
        self.workers.append(self._start_worker(len(self.workers)))
        return self.workers[-1]

    def settled(self) -> None:
        """Until the job runs on every worker: the coordinator's last restore resumed,
        and each worker's latest word is that it runs tasks in that attempt (its Resume,
        or an adoption in it) — workers starting together rebalance the group several
        times, and a worker with no task yet is still being given some."""
        running = re.compile(
            r"attempt (\d+) (?:resumed|adopted [^\n]*the other tasks ran on): running \[([^\]]*)\]"
        )

        def every_worker_runs() -> bool:
            log = self.coordinator.log()
            resumed = re.findall(r"all tasks ready: resuming attempt (\d+)", log)
            if not resumed or log.count("restoring every task") > len(resumed):
                return False
            latest = [running.findall(w.log())[-1:] for w in self.workers]
            return all(m and m[0][0] == resumed[-1] and m[0][1] for m in latest)

        self.coordinator.wait_until(every_worker_runs, "every worker running tasks", 120)

    def publish_all(self, store: Path) -> None:
        """Savepoints (each completes a checkpoint) until every record produced is
        published: with checkpoints every minute, the job's own would come too late."""

        def published() -> int:
            return sum(1 for r in read_all(self.bootstrap, self.dst) if r.value)

        savepoint = [*CLI, "savepoint", "--app-id", self.app, "--bootstrap", self.bootstrap,
                     "--store", f"file://{store}", "--timeout", "60"]  # fmt: skip
        for _ in range(10):  # (a record read after a savepoint's barrier goes out with the next)
            subprocess.run(savepoint, check=True, capture_output=True, timeout=90)
            if published() >= self.produced:
                break

    def running_with_input(self) -> None:
        """Every worker runs its tasks, input flows, and three checkpoints completed since:
        every task has a snapshot with input."""
        for w in self.workers:  # (cooperatively, a later starter may adopt its first tasks)
            w.wait_for(r"(resumed|the other tasks ran on): running \['", 120)
        self.start_feed()
        first = self.latest()
        self.coordinator.wait_until(
            lambda: self.latest() >= first + 3, "three more checkpoints", 60
        )

    def wait_adopted(
        self, tasks: set[str], start: str = "checkpoint", more: bool = True, since: int = 0
    ) -> None:
        """Until the coordinator logged every one of ``tasks`` adopted (from ``start``: a
        checkpoint, or the start positions) after its log offset ``since``, and
        (``more``) three more checkpoints completed since (input after the adoption: what
        the checks cover)."""
        adopted: set[str] = set()

        def all_adopted() -> bool:
            log = self.coordinator.log()[since:]
            found = re.finditer(rf"worker \S+ adopts ([^\n]*) from {start}", log)
            adopted.update(t for m in found for t in m.group(1).split(", "))
            return adopted >= tasks

        self.coordinator.wait_until(all_adopted, f"{sorted(tasks)} adopted", 60)
        if not more:
            return
        at = self.latest()
        self.coordinator.wait_until(lambda: self.latest() >= at + 3, "three more checkpoints", 30)

    def latest(self) -> int:
        ids = [int(p.stem.split("-")[1]) for p in self.checkpoints.glob("chk-*.json")]
        return max(ids, default=0)

    @property
    def produced(self) -> int:
        return self.feed.produced

    def start_feed(self) -> None:
        if not self._feeding:
            self._feeding = True
            self.feed.__enter__()

    def stop_feed(self) -> None:
        if self._feeding:
            self._feeding = False
            self.feed.__exit__(None, None, None)

    def assert_exact(self) -> None:
        """Every record produced is in the read_committed output exactly once."""
        assert_exact(self.bootstrap, self.dst, self.produced, self.coordinator)

    def assert_only_moved(self, mark: int, stayed: list[CliJob], restores: list[int]) -> None:
        """With the feed stopped: the output is exact, and since the coordinator's log
        offset ``mark`` no failover, restart or hold happened, the workers that ``stayed``
        restored nothing more than ``restores``, and no process saw a record twice."""
        self.stop_feed()
        self.assert_exact()
        since = self.coordinator.log()[mark:]
        assert "failover (attempt" not in since and "restart (attempt" not in since, (
            self.coordinator.tail()
        )
        assert "holds every task" not in since
        assert [w.log().count("restore: attempt") for w in stayed] == restores
        assert [self.processed_twice(w) for w in self.workers] == [0] * len(self.workers)

    def processed_twice(self, w: CliJob) -> int:
        """Records worker ``w``'s peek saw more than once."""
        seen = self.seen_dir / f"seen-{w.proc.pid}"
        lines = seen.read_text().split() if seen.exists() else []  # (none: it saw nothing)
        return sum(1 for k in Counter(lines).values() if k > 1)

    def close(self) -> None:
        self.stop_feed()
        for w in self.workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
            w.kill()
        coordinator = getattr(self, "coordinator", None)  # (None: never started)
        if coordinator is not None and coordinator.proc.poll() is None:
            coordinator.proc.send_signal(signal.SIGTERM)
            coordinator.wait(timeout=60)
