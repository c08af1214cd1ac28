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
from collections.abc import Callable
from pathlib import Path

from integration.carryjob import PARTITIONS, RATE, CarryJob


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
