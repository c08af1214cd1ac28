"""A join under cooperative assignment (docs/design.md §6.8): the worker the group takes
partitions from releases those tasks — carried at their latest completed snapshots —
and the joiner adopts them; nothing else stops, rolls back or restores. The
coordinator's side and the worker protocol's; pure, with a fake clock."""

from __future__ import annotations

from kstream.checkpointstorage.metadata import carried_tasks
from kstream.protocol.adoption import ADOPT_WAIT_S
from kstream.protocol.elasticmessages import released_by
from kstream.protocol.failover import JobPhase
from kstream.protocol.handover import JOINING
from kstream.protocol.messages import (
    Adopt,
    AdoptRequest,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TasksReleased,
    TriggerCheckpoint,
)
from kstream.protocol.recovery import recover
from kstream.protocol.workerevents import Assigned, DropTasks, StopRequested, StopTasks
from tests.test_adoption import ack, cycle, running, sent
from tests.test_carrying import ISOLATED, OWNERS, completed, handle, job, metadata
from tests.test_coordinator import Harness, messages

ALL: dict[str, tuple[str, ...]] = {"w1": ("a",), "w2": ("b",), "w3": ("c",)}
AFTER: dict[str, tuple[str, ...]] = {"w1": ("a",), "w3": ("c",)}  # w2 released b, still live


def released_b(h: Harness, now: float = 2.0) -> list[Message]:
    """w2 releases b (a joiner w4 took its partition) at ``now``."""
    return messages(h.send(TasksReleased("w2", 1, 4, ("b",)), now))


def test_released_tasks_are_carried_and_adopted_by_the_joiner_and_nothing_else_stops() -> None:
    h = job(cooperative=True)
    out = cycle(h, 1.5, 2.5, ALL)
    assert not [m for m in out if isinstance(m, Restore)]
    out = released_b(h, 2.6)
    assert not [m for m in out if isinstance(m, Restore)]
    latest = h.c.latest_completed
    assert latest is not None
    assert h.c.carried.snapshots["b"] == latest.tasks["b"]
    assert h.c.failover.owners["b"] == released_by("w2")
    # w2 runs on with no task of the job's but heartbeats; w1 and w3 as before; the
    # checkpoints complete without b's acknowledgement (carried).
    out = cycle(h, 3.0, 4.0, {**AFTER, "w2": ()})
    done = completed(out)
    assert done and all(metadata(h, n).tasks["b"] == latest.tasks["b"] for n in done)
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    # The joiner, given b's partition in the group's next round, asks to adopt it: no
    # fence (w2 is live and runs on: its producer publishes its other tasks).
    latest = h.c.latest_completed
    assert latest is not None
    out = messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 4.1))
    assert out == [Adopt(1, "w4", latest.checkpoint_id, ("b",), ())]
    assert h.c.failover.owners["b"] == "w4"
    assert released_by("w2") not in h.c.carried.members
    assert released_by("w2") not in h.c.members.seen
    runs = {**AFTER, "w2": (), "w4": ("b",)}
    out = cycle(h, 4.5, 25.0, runs, generation=6)
    assert not [m for m in out if isinstance(m, Restore)]
    assert not [m for m in out if isinstance(m, TriggerCheckpoint) and m.hold]
    later = [n for n in completed(out) if n > latest.checkpoint_id + 1]
    assert len(later) >= 10
    for n in later:  # the adopter's own snapshots, nothing carried any more
        assert metadata(h, n).tasks["b"].handle == handle("b", n)
        assert carried_tasks(metadata(h, n)) == set()
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_the_releasers_snapshot_of_a_released_task_is_ignored_after_the_release() -> None:
    h = job(cooperative=True)
    cycle(h, 1.5, 2.5, ALL)
    latest = h.c.latest_completed
    assert latest is not None
    released_b(h, 2.6)
    out = messages(h.tick(3.5))  # (the interval since the last trigger passed)
    trig = [m for m in out if isinstance(m, TriggerCheckpoint)]
    assert trig
    n = trig[0].checkpoint_id
    ack(h, n, "w2", ("b",), 3.6)  # (a late one, from before its drop, say)
    out = ack(h, n, "w1", ("a",), 3.6) + ack(h, n, "w3", ("c",), 3.6)
    assert completed(out) == [n]
    assert metadata(h, n).tasks["b"] == latest.tasks["b"]


def test_released_tasks_nobody_adopts_are_restored_after_the_timeout_and_the_wait() -> None:
    h = job(cooperative=True)
    cycle(h, 1.5, 2.5, ALL)
    released_b(h, 2.6)
    quiet = cycle(h, 3.0, 2.6 + h.c.heartbeat_timeout + ADOPT_WAIT_S - 0.5, {**AFTER, "w2": ()})
    assert not [m for m in quiet if isinstance(m, Restore)]
    out = cycle(h, 2.6 + h.c.heartbeat_timeout + ADOPT_WAIT_S + 0.5, 20.0, {**AFTER, "w2": ()})
    assert [m.attempt for m in out if isinstance(m, Restore)] == [2]
    assert h.c.failover.failure_reason.startswith("tasks b released by w2 were not adopted")


def test_a_release_to_a_coordinator_that_does_not_adopt_restores() -> None:
    h = job(cooperative=False)
    cycle(h, 1.5, 2.5, ALL)
    released_b(h, 2.6)
    assert h.c.phase is JobPhase.SUSPENDED
    assert h.c.failover.failure_reason == (
        "worker w2 released tasks b; no adoption: the job does not adopt tasks"
    )


def test_a_release_of_tasks_the_member_does_not_own_changes_nothing() -> None:
    h = job(cooperative=True)
    cycle(h, 1.5, 2.5, ALL)
    assert messages(h.send(TasksReleased("w1", 1, 4, ("b",)), 2.6)) == []
    assert messages(h.send(TasksReleased("w2", 0, 4, ("b",)), 2.6)) == []  # another attempt
    assert h.c.failover.owners == OWNERS and not h.c.carried.members


def test_a_coordinator_started_after_a_release_adopts_the_released_tasks() -> None:
    history: list[Message] = [Resume(1, dict(OWNERS)), TasksReleased("w2", 1, 4, ("b",))]
    assert recover(history, [], None).owners == {**OWNERS, "b": released_by("w2")}
    adopted = [*history, Adopt(1, "w4", 3, ("b",))]
    assert recover(adopted, [], None).owners == {**OWNERS, "b": "w4"}
    h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=True)
    h.start(0.0)
    h.c.latest_completed = completed_at_1()
    cycle(h, 0.5, 1.0, {**AFTER, "w2": ()}, generation=6)
    out = messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 1.2))
    assert out[0] == Adopt(1, "w4", 1, ("b",))
    out = cycle(h, 1.5, 16.0, {**AFTER, "w2": (), "w4": ("b",)}, generation=6)
    assert not [m for m in out if isinstance(m, Restore)] and completed(out)


def completed_at_1():  # type: ignore[no-untyped-def]
    from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot

    return CheckpointMetadata(1, 1, 0.0, 0.1, {t: TaskSnapshot(handle(t, 1)) for t in OWNERS})


# -- the worker protocol -------------------------------------------------------------------


def test_a_worker_whose_partition_is_taken_cooperatively_releases_the_task_and_runs_on() -> None:
    p = running()
    p.handle(Assigned("w1", 4, ("a", "b"), True), 0.5)
    p.handle(Adopt(1, "w1", 1, ("b",)), 0.6)
    assert p.running == {"a", "b"}
    # In the revocation callback: b's partition taken, a stays.
    msg = p.release(("a",), 4)
    assert msg == TasksReleased("w1", 1, 4, ("b",))
    assert p.running == {"a"} and p.tasks == {"a"}
    # The Assigned the loop sees after the poll: b stopped, a runs on, nothing reported.
    cmds = p.handle(Assigned("w1", 5, ("a",), True), 1.0)
    assert cmds[0] == DropTasks(frozenset({"b"}), released=True)
    assert not [c for c in cmds if isinstance(c, StopTasks)]
    assert not [m for m in sent(cmds) if not isinstance(m, Heartbeat)]
    hb = p.current_heartbeat()
    assert hb is not None and hb.tasks == ("a",)
    assert p.handle(Assigned("w1", 5, ("a",), True), 1.1)[:1] != [DropTasks(frozenset({"b"}))]


def test_no_release_under_range_while_stopping_or_holding() -> None:
    """(A restoring worker releases too: tests/test_start_release.py.)"""
    assert running(cooperative=False).release((), 4) is None
    stopping = running()
    stopping.handle(StopRequested(), 0.5)
    assert stopping.release((), 4) is None
    holding = running()
    holding.handle(TriggerCheckpoint(2, 1, 500, hold=True), 0.5)
    assert holding.release((), 4) is None
    restoring = running(cooperative=False)
    restoring.handle(Restore(2, 1), 0.5)
    assert restoring.release((), 4) is None
    nothing_lost = running()
    assert nothing_lost.release(("a",), 4) is None


def test_a_cooperative_joiner_asks_to_adopt_what_it_is_given_without_a_hand_over() -> None:
    from kstream.protocol.worker import WorkerProtocol

    p = WorkerProtocol("w4", now=0.0, cooperative=True)
    p.learn([Restore(1, None), Resume(1, dict(OWNERS))])
    assert p.job_live and p.attempt == 1 and not p.restoring
    assert sent(p.handle(Assigned("w4", 5, (), False), 1.0)) == [Heartbeat("w4", (), 5)]
    cmds = p.handle(Assigned("w4", 6, ("b",), True), 1.5)
    assert AdoptRequest("w4", 1, 6, ("b",)) in sent(cmds)
    assert JOINING not in repr(cmds)


def test_once_the_adopters_heartbeat_names_an_adopted_task_the_next_checkpoints_wait_for_it() -> (
    None
):
    """Before, a checkpoint completed with the carried snapshot until one happened to get
    the adopter's own in time; now the adopter's heartbeat (sent once it restored them)
    makes every checkpoint triggered after it wait for its snapshot."""
    h = job(cooperative=True)
    cycle(h, 1.5, 2.5, ALL)
    released_b(h, 2.6)
    messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 2.7))
    messages(h.send(Heartbeat("w4", (), 6), 2.8))  # (restoring: b not named yet)
    out = messages(h.tick(3.5))
    first = [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)]
    assert first and "b" in h.c.pending[first[0]].acks  # (filled: not waited for)
    messages(h.send(Heartbeat("w4", ("b",), 6), 3.6))  # b runs there now
    for member, tasks in AFTER.items():
        ack(h, first[0], member, tasks, 3.7)
    out = messages(h.tick(5.6))
    later = [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)]
    assert later and "b" not in h.c.pending[later[0]].acks  # waits for w4's own
    done: list[Message] = []
    for member, tasks in AFTER.items():
        done += ack(h, later[0], member, tasks, 5.7)
    assert completed(done) == []
    done = ack(h, later[0], "w4", ("b",), 5.8)
    assert completed(done) == [later[0]]
    assert metadata(h, later[0]).tasks["b"].handle == handle("b", later[0])


def test_an_adopter_asks_for_a_checkpoint_with_its_first_output() -> None:
    p = running()
    p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0)
    p.handle(Adopt(1, "w1", 7, ("b",)), 1.2)
    assert p.awaiting_first_output


def test_a_publication_refused_for_an_older_generation_keeps_the_tasks_still_held_here() -> None:
    """Cooperatively, a rebalance can move the group's generation while a publication is
    in flight: the group refuses its offsets. A task whose inputs are still assigned
    here runs on (its epochs stay buffered for the next completion); one whose inputs
    left stops, as before. Found under two busy loops: the unmoved task was stopped, and
    its worker's heartbeat without it rolled every task back."""
    from types import SimpleNamespace
    from typing import Any, cast

    from kstream.kafka.sink import SinkGroupFencedError
    from kstream.protocol.worker import WorkerProtocol
    from kstream.worker.checkpointed import Checkpointed

    removed: list[str] = []
    runners = {t: SimpleNamespace(task_id=t, attempt=1) for t in ("a", "b")}
    tasks = SimpleNamespace(
        runners=runners,
        assigned=lambda: [SimpleNamespace(task_id="a")],
        remove=removed.append,
        ctx=SimpleNamespace(config=SimpleNamespace(app_id="app"), transactions=object()),
        aligner=SimpleNamespace(max_drift_ms={}),
    )
    protocol = running()  # (cooperative, runs a)
    control = SimpleNamespace(pulse=lambda msg: None)
    m = Checkpointed(protocol, cast(Any, control), cast(Any, tasks), cast(Any, None),
                     cast(Any, None), cast(Any, SimpleNamespace()), "w1")  # fmt: skip
    refused = SinkGroupFencedError("ILLEGAL_GENERATION")
    m._commits_ended({"a": refused, "b": refused}, 1.0)
    assert removed == ["b"]
    eager = WorkerProtocol("w1", now=0.0)
    m = Checkpointed(eager, cast(Any, None), cast(Any, tasks), cast(Any, None),
                     cast(Any, None), cast(Any, SimpleNamespace()), "w1")  # fmt: skip
    removed.clear()
    m._commits_ended({"a": refused}, 1.0)
    assert removed == ["a"]  # (the eager protocol: the inputs left)
