"""kill -9 or a freeze of a worker in a job without a shuffle, on a real broker
(docs/design.md §6.7).

Three ``kstream worker`` processes and a ``kstream coordinator`` run a job whose tasks
exchange no records (source -> peek -> map -> exactly-once sink), fed 150 records a
second throughout. One worker is killed (SIGKILL). The coordinator carries its tasks at
their last completed snapshot, so checkpoints keep completing with the other two; before
the dead worker is lost it triggers a hold checkpoint, and the group's change is a
hand-over at it: the two survivors carry on where they held and process nothing twice
(each process notes every record its ``peek`` saw), only the dead worker's tasks are
restored. The output is exact: every record once. Before, the kill rolled every task
back to the latest completed checkpoint and the survivors processed that interval again.

A worker frozen (SIGSTOP) for 5 s has its tasks carried too; thawed before the hold, it
is carried no more: nothing is restored, the completions made without it publish
nothing of its tasks (it logs so), and the output is exact.
"""

from __future__ import annotations

import os
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
    ) -> None:
        src, self.dst, app = unique_name("in"), unique_name("out"), unique_name("app")
        ensure_topics(
            make_admin(bootstrap), [TopicSpec(src, PARTITIONS), TopicSpec(self.dst, PARTITIONS)]
        )
        self.bootstrap = bootstrap
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
        self.coordinator = CliJob(
            [*CLI, "-v", "coordinator", *job, "--heartbeat-timeout", str(timeout)],
            tmp / "coord.log",
        )
        worker = [*CLI, "-v", "worker", *job, "--coordinator", "external",
                  "--session-timeout", str(timeout)]  # fmt: skip
        self._worker, self._tmp, self.app = worker, tmp, app
        self.workers = [self._start_worker(i) for i in range(workers)]
        # (explicit partitions, round-robin: every task gets input)
        self.feed = SteadyFeed(bootstrap, src, lambda i: (i % PARTITIONS, f"r{i}"), RATE // 10)
        self._feeding = False

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
        if self.coordinator.proc.poll() is None:
            self.coordinator.proc.send_signal(signal.SIGTERM)
            self.coordinator.wait(timeout=60)


def test_a_killed_workers_tasks_are_carried_and_the_others_process_nothing_twice(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, timeout=6)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        victim, survivors = job.workers[1], [job.workers[0], job.workers[2]]
        victim.kill()
        carried = coordinator.wait_for(r"its tasks ([^\n]*) are carried at checkpoint (\d+)", 30)
        # The hand-over after the carry (not one of the start, when the workers joined).
        handover = coordinator.wait_for(
            r"are carried at checkpoint[^\n]*\n(?:.*\n)*?"
            r".*restart \(attempt \d+ -> (\d+)\): hand-over at checkpoint (\d+)",
            60,
        )
        attempt = int(handover.group(1))
        assert int(handover.group(2)) > int(carried.group(2))
        for w in survivors:
            held = rf"attempt {attempt}: restored \d+ task\(s\)[^\n]*carried on where they held"
            w.wait_for(held, 60)
            w.wait_for(rf"attempt {attempt} resumed", 60)
        resumed = job.latest()  # more input after the change: what the assertions cover
        coordinator.wait_until(lambda: job.latest() >= resumed + 2, "two more checkpoints", 30)
        job.stop_feed()
        job.assert_exact()
        since_kill = coordinator.log()[carried.start() :]
        assert "failover (attempt" not in since_kill, coordinator.tail()
        # The survivors processed nothing twice: each record at most once per process.
        assert [job.processed_twice(w) for w in survivors] == [0, 0]
    finally:
        job.close()


def test_a_worker_frozen_for_a_while_is_carried_then_goes_on_without_a_restore(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path)  # (thawed before the hold)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        frozen = job.workers[1]
        restores = coordinator.log().count("restoring every task")
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        coordinator.wait_for(r"its tasks [^\n]* are carried at checkpoint", 30)
        carried_at = job.latest()
        # Checkpoints complete without it (the others' output goes on).
        coordinator.wait_until(
            lambda: job.latest() >= carried_at + 2, "two completions while it is frozen", 30
        )
        os.kill(frozen.proc.pid, signal.SIGCONT)
        coordinator.wait_for(r"heard again: its tasks [^\n]* are carried no more", 30)
        # The completions made while it was frozen published nothing of its tasks.
        frozen.wait_for(r"carried this worker's tasks [^\n]* their output is not published", 30)
        thawed = job.latest()
        coordinator.wait_until(lambda: job.latest() >= thawed + 3, "three more checkpoints", 30)
        job.stop_feed()
        job.assert_exact()
        assert coordinator.log().count("restoring every task") == restores, coordinator.tail()
        assert [job.processed_twice(w) for w in job.workers] == [0, 0, 0]
    finally:
        job.close()


def test_with_cooperative_assignment_a_killed_workers_tasks_are_adopted_and_nothing_restores(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The group moves only the dead worker's partitions; the worker given them adopts
    its tasks from their carried snapshots, and no other task stops: no hold, no restore,
    no Resume (docs/design.md §6.8)."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, timeout=6, cooperative=True)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        victim, survivors = job.workers[1], [job.workers[0], job.workers[2]]
        restores = [w.log().count("restore: attempt") for w in survivors]
        victim.kill()
        carried = coordinator.wait_for(r"its tasks ([^\n]*) are carried at checkpoint (\d+)", 30)
        job.wait_adopted(set(carried.group(1).split(", ")))
        job.stop_feed()
        job.assert_exact()
        since_kill = coordinator.log()[carried.start() :]
        assert "failover (attempt" not in since_kill and "restart (attempt" not in since_kill, (
            coordinator.tail()
        )
        assert "hold checkpoint" not in since_kill
        # The survivors restored nothing: the adopter built only the adopted tasks.
        assert [w.log().count("restore: attempt") for w in survivors] == restores
        assert any("adopted" in w.log() for w in survivors)
        assert [job.processed_twice(w) for w in survivors] == [0, 0]
    finally:
        job.close()


def test_with_cooperative_assignment_a_worker_frozen_past_its_session_is_a_fenced_zombie(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Frozen (SIGSTOP) for longer than its session: the group moves its partitions, the
    others adopt its tasks and fence its sinks' producer. Thawed, it publishes nothing of
    them (fenced), its acknowledgements do not count, and the output stays exact."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, timeout=6, cooperative=True)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        frozen = job.workers[1]
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        carried = coordinator.wait_for(r"its tasks ([^\n]*) are carried at checkpoint (\d+)", 30)
        lost = set(carried.group(1).split(", "))
        coordinator.wait_for(r"worker \S+ lost: every task it ran is adopted", 60)
        adopted_at = job.latest()
        coordinator.wait_until(lambda: job.latest() >= adopted_at + 2, "two more checkpoints", 30)
        os.kill(frozen.proc.pid, signal.SIGCONT)
        # It finds itself out of the group; whatever it does next, it publishes nothing
        # twice: the job goes on (a rejoin may restore), and the output is exact.
        thawed = job.latest()
        coordinator.wait_until(lambda: job.latest() >= thawed + 4, "four more checkpoints", 90)
        job.stop_feed()
        job.assert_exact()
        assert lost and all(t in coordinator.log() for t in lost)
    finally:
        job.close()


def test_with_cooperative_assignment_a_worker_stopped_gracefully_hands_its_tasks_over_by_adoption(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """SIGTERM: the leaver drains with a plain checkpoint (no hold of the others), its
    tasks are carried at its final snapshots, and the workers the group gives them adopt
    them; nothing else restores, nothing is processed twice (docs/design.md §6.8)."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, cooperative=True)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        leaver, survivors = job.workers[1], [job.workers[0], job.workers[2]]
        restores = [w.log().count("restore: attempt") for w in survivors]
        mark = len(coordinator.log())
        leaver.proc.send_signal(signal.SIGTERM)
        assert leaver.wait(timeout=60) == 0
        carried = coordinator.wait_for(r"stopped: its tasks ([^\n]*) are carried at checkpoint", 30)
        job.wait_adopted(set(carried.group(1).split(", ")))
        job.assert_only_moved(mark, survivors, restores)
    finally:
        job.close()


def test_with_cooperative_assignment_a_joining_worker_adopts_what_the_others_release(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A fourth worker joins: the group takes partitions from some of the three and gives
    them to it; those workers release the tasks (carried at their latest completed
    snapshots) and run their others on, and the joiner adopts them. No hold, no restore
    of any other task, nothing processed twice by any process, exact output
    (docs/design.md §6.8)."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, cooperative=True)
    coordinator = job.coordinator
    try:
        job.running_with_input()
        first = list(job.workers)
        restores = [w.log().count("restore: attempt") for w in first]
        mark = len(coordinator.log())
        joiner = job.add_worker()
        released: set[str] = set()

        def some_released() -> bool:
            log = coordinator.log()[mark:]
            found = re.finditer(r"worker \S+ released ([^\n]*) \(the group gave", log)
            released.update(t for m in found for t in m.group(1).split(", "))
            return bool(released)

        coordinator.wait_until(some_released, "tasks released", 60)
        job.wait_adopted(released)
        assert re.search(r"adopting .* from checkpoint", joiner.log()), joiner.tail()
        job.assert_only_moved(mark, first, restores)
    finally:
        job.close()


def test_with_cooperative_assignment_a_worker_joining_before_the_first_checkpoint_adopts_afresh(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A job's first start, its workers starting one after the other: the first runs
    every task and reads input, and the group gives half of them to the second before
    any checkpoint completed (checkpoints every 60 s). The released tasks start afresh
    at the start positions on the joiner — nothing of them was published, and no task
    reads another's output — while the first worker's other tasks run on: no restore of
    the job (before, every task restored from nothing). Savepoints then complete
    checkpoints until the output is exact (docs/design.md §6.8)."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, cooperative=True, workers=1,
                   interval=60)  # fmt: skip
    coordinator = job.coordinator
    try:
        first = job.workers[0]
        first.wait_for(r"resumed: running \['", 120)
        job.start_feed()  # (the released tasks' first records: read again by the joiner)
        coordinator.wait_until(lambda: job.produced >= RATE, "a second of input", 30)
        mark = len(coordinator.log())
        restores = [first.log().count("restore: attempt")]  # (the start's, or none read)
        joiner = job.add_worker()
        joiner.wait_for(r"adopted .* from the start positions, the other tasks ran on", 120)
        released: set[str] = set()
        for m in re.finditer(r"worker \S+ released ([^\n]*) \(the group gave", coordinator.log()):
            released.update(m.group(1).split(", "))
        assert len(released) == PARTITIONS // 2, coordinator.tail()
        job.wait_adopted(released, "the start positions", more=False)
        at = job.produced
        coordinator.wait_until(lambda: job.produced >= at + RATE, "a second more of input", 30)
        job.stop_feed()
        job.publish_all(tmp_path / "store")
        job.assert_only_moved(mark, [first], restores)
        assert joiner.log().count("restore: attempt") == 0, joiner.tail()
    finally:
        job.close()


def test_with_cooperative_assignment_a_worker_killed_before_the_first_checkpoint_is_adopted_afresh(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A worker frozen before any checkpoint completed (checkpoints every 60 s; the
    others' first output asks for checkpoint 1, which then waits for it), then killed:
    its tasks are carried at the start positions, that checkpoint is aborted, and the
    worker the group gives them starts them afresh while the others run on — no restore
    of the job (before, it was lost and every task restored from nothing). Savepoints
    then complete checkpoints until the output is exact (docs/design.md §6.8)."""
    job = CarryJob(kafka_bootstrap, unique_name, tmp_path, timeout=6, cooperative=True,
                   interval=60)  # fmt: skip
    coordinator = job.coordinator
    try:
        job.settled()
        victim, survivors = job.workers[1], [job.workers[0], job.workers[2]]
        restores = [w.log().count("restore: attempt") for w in survivors]
        mark = len(coordinator.log())
        os.kill(victim.proc.pid, signal.SIGSTOP)
        job.start_feed()
        carried = coordinator.wait_for(
            r"silent for [^\n]*: its tasks ([^\n]*) are carried at the start positions", 30, mark
        )
        assert job.latest() == 0, coordinator.tail()
        victim.kill()
        job.wait_adopted(set(carried.group(1).split(", ")), "the start positions", False, mark)
        at = job.produced
        coordinator.wait_until(lambda: job.produced >= at + RATE, "a second more of input", 30)
        job.stop_feed()
        job.publish_all(tmp_path / "store")
        job.assert_only_moved(mark, survivors, restores)
    finally:
        job.close()
