"""Cooperative assignment before any checkpoint completed (docs/design.md §6.8): tasks a
worker releases, or a stopped worker leaves, are adopted afresh — their new owner starts
them at the start positions with empty state — instead of a restore of every task. Nothing
of them was published (output goes out at completions) and no task reads another's
output, so only they start over. The coordinator's side and the worker protocol's; pure,
with a fake clock."""

from __future__ import annotations

from kstream.protocol.adoption import ADOPT_WAIT_S
from kstream.protocol.elasticmessages import released_by
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    Adopt,
    AdoptRequest,
    CheckpointAborted,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TasksReleased,
    TriggerCheckpoint,
    WorkerStopped,
)
from kstream.protocol.workerevents import AdoptTasks, Assigned
from tests.test_adoption import ack, cycle, running
from tests.test_carrying import (
    ISOLATED,
    OWNERS,
    beat,
    completed,
    handle,
    metadata,
    started,
)
from tests.test_coordinator import Harness, messages

AFTER: dict[str, tuple[str, ...]] = {"w1": ("a",), "w2": (), "w3": ("c",)}  # w2 released b


def first_checkpoint_in_flight() -> Harness:
    """Attempt 1 running a, b, c on w1, w2, w3 (generation 4); checkpoint 1 triggered at
    1.0 s and acknowledged by w1 and w2 only: no checkpoint has completed."""
    h = started(ISOLATED, cooperative=True)
    beat(h, 0.0)
    out = messages(h.tick(1.0))
    assert [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)] == [1]
    ack(h, 1, "w1", ("a",), 1.1)
    ack(h, 1, "w2", ("b",), 1.1)
    assert h.c.latest_completed is None and 1 in h.c.pending
    return h


def aborted(out: list[Message]) -> list[int]:
    return [m.checkpoint_id for m in out if isinstance(m, CheckpointAborted)]


def test_a_release_before_the_first_completion_is_adopted_afresh_and_nothing_else_restores() -> (
    None
):
    h = first_checkpoint_in_flight()
    out = messages(h.send(TasksReleased("w2", 1, 4, ("b",)), 1.2))
    # Checkpoint 1 cannot complete any more (nobody snapshots b for it): aborted, and no
    # task restores.
    assert aborted(out) == [1] and not [m for m in out if isinstance(m, Restore)]
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    assert h.c.failover.owners["b"] == released_by("w2") and h.c.carried.fresh == {"b"}
    # Until b is adopted, a checkpoint triggered meanwhile waits (b has no snapshot).
    out = cycle(h, 1.5, 3.0, AFTER)
    waiting = [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)]
    assert waiting and completed(out) == []
    # The joiner adopts b from the start positions; the checkpoint that waited is aborted
    # (the adopter's new task never saw its trigger).
    out = messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 3.1))
    assert aborted(out) == waiting
    assert [m for m in out if isinstance(m, Adopt)] == [Adopt(1, "w4", None, ("b",), ())]
    assert h.c.failover.owners["b"] == "w4" and not h.c.carried.fresh
    assert released_by("w2") not in h.c.carried.members
    # From then on every checkpoint completes with the adopter's own snapshot of b.
    out = cycle(h, 3.5, 10.0, {**AFTER, "w4": ("b",)}, generation=6)
    done = completed(out)
    assert len(done) >= 3 and not [m for m in out if isinstance(m, Restore)]
    for n in done:
        assert metadata(h, n).tasks["b"].handle == handle("b", n)
    assert not h.c.carried.adopted and h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_a_fresh_release_nobody_adopts_restores_every_task_after_the_timeout_and_the_wait() -> None:
    h = first_checkpoint_in_flight()
    messages(h.send(TasksReleased("w2", 1, 4, ("b",)), 1.2))
    end = 1.2 + h.c.heartbeat_timeout + ADOPT_WAIT_S
    assert not [m for m in cycle(h, 1.5, end - 0.5, AFTER) if isinstance(m, Restore)]
    out = cycle(h, end + 0.5, end + 2.0, AFTER)
    assert [(m.attempt, m.checkpoint_id) for m in out if isinstance(m, Restore)] == [(2, None)]
    assert h.c.failover.failure_reason.startswith("tasks b released by w2 were not adopted")


def test_a_worker_stopped_before_the_first_completion_has_its_tasks_adopted_afresh() -> None:
    h = first_checkpoint_in_flight()
    out = messages(h.send(WorkerStopped("w2", 1, "SIGTERM"), 1.2))
    assert aborted(out) == [1] and h.c.carried.fresh == {"b"}
    assert not [m for m in out if isinstance(m, Restore)]
    out = messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 1.4))
    assert [m for m in out if isinstance(m, Adopt)] == [Adopt(1, "w1", None, ("b",), ())]
    out = cycle(h, 1.5, 6.0, {"w1": ("a", "b"), "w3": ("c",)}, generation=5)
    assert completed(out) and not [m for m in out if isinstance(m, Restore)]


def test_a_coordinator_started_after_a_fresh_release_adopts_the_tasks_afresh() -> None:
    history: list[Message] = [Resume(1, dict(OWNERS)), TasksReleased("w2", 1, 4, ("b",))]
    h = Harness(tasks=OWNERS, history=history, description=ISOLATED, cooperative=True)
    h.start(0.0)
    assert h.c.latest_completed is None
    cycle(h, 0.5, 1.0, AFTER, generation=6)
    out = messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 1.2))
    assert [m for m in out if isinstance(m, Adopt)] == [Adopt(1, "w4", None, ("b",), ())]
    out = cycle(h, 1.5, 8.0, {**AFTER, "w4": ("b",)}, generation=6)
    assert completed(out) and not [m for m in out if isinstance(m, Restore)]


def test_a_release_once_a_checkpoint_completed_is_adopted_from_it_not_afresh() -> None:
    h = first_checkpoint_in_flight()
    ack(h, 1, "w3", ("c",), 1.2)
    assert h.c.latest_completed is not None
    messages(h.send(TasksReleased("w2", 1, 4, ("b",)), 1.3))
    assert not h.c.carried.fresh and h.c.carried.snapshots["b"].handle == handle("b", 1)
    out = messages(h.send(AdoptRequest("w4", 1, 6, ("b",)), 1.4))
    assert [m for m in out if isinstance(m, Adopt)] == [Adopt(1, "w4", 1, ("b",), ())]


def test_the_worker_adopts_afresh_what_it_is_told_to() -> None:
    p = running()
    p.handle(Assigned("w1", 5, ("a", "b"), True), 1.0)
    cmds = p.handle(Adopt(1, "w1", None, ("b",)), 1.2)
    assert AdoptTasks(1, None, frozenset({"b"})) in cmds
    assert p.running == {"a", "b"} and p.awaiting_first_output


LIVE: dict[str, tuple[str, ...]] = {"w1": ("a",), "w3": ("c",)}


def carried_afresh() -> tuple[Harness, list[Message]]:
    """w2 (task b) silent from 0.0 s, killed before any checkpoint completed: by 4.0 s
    its task is carried at the start positions, and nothing restores."""
    h = first_checkpoint_in_flight()
    out = cycle(h, 1.5, 4.0, LIVE)
    assert h.c.carried.members == {"w2": ("b",)} and h.c.carried.fresh == {"b"}
    assert 1 in aborted(out)  # (nobody snapshots b for it any more)
    assert not [m for m in out if isinstance(m, Restore)] and completed(out) == []
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1
    return h, out


def test_a_worker_killed_before_the_first_completion_has_its_tasks_adopted_afresh() -> None:
    h, out = carried_afresh()
    # A checkpoint triggered since waits for b: a late acknowledgement of its silent
    # owner does not count (completed, it would publish b's output, which the adopter
    # then produces again from the start positions).
    waiting = [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)][-1]
    assert waiting in h.c.pending
    assert completed(ack(h, waiting, "w2", ("b",), 4.1)) == []
    # The group gives b to w1 (w2's session ended): adopted afresh, the waiting one aborted.
    out = messages(h.send(AdoptRequest("w1", 1, 5, ("b",)), 4.2))
    assert [m for m in out if isinstance(m, Adopt)] == [Adopt(1, "w1", None, ("b",), ())]
    assert waiting in aborted(out) and not h.c.carried.fresh
    runs = {"w1": ("a", "b"), "w3": ("c",)}
    out = cycle(h, 4.5, 20.0, runs, generation=5)
    done = completed(out)
    assert len(done) >= 3 and not [m for m in out if isinstance(m, Restore)]
    for n in done:  # the adopter's own snapshots of b
        assert metadata(h, n).tasks["b"].handle == handle("b", n)
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1 and not h.c.carried.members


def test_a_worker_carried_afresh_and_heard_again_runs_on_and_nothing_restores() -> None:
    """Frozen, not dead: its pulse or heartbeat ends the carry; the checkpoints that
    ignored its snapshots meanwhile are aborted, and the next ones complete with them."""
    h, out = carried_afresh()
    waiting = [m.checkpoint_id for m in out if isinstance(m, TriggerCheckpoint)][-1]
    out = messages(h.send(Heartbeat("w2", ("b",), 4), 4.2))
    assert waiting in aborted(out)
    assert not h.c.carried.members and not h.c.carried.fresh
    out = cycle(h, 4.5, 12.0, {**LIVE, "w2": ("b",)})
    done = completed(out)
    assert done and not [m for m in out if isinstance(m, Restore)]
    assert metadata(h, done[-1]).tasks["b"].handle == handle("b", done[-1])
    assert h.c.phase is JobPhase.RUNNING and h.c.attempt == 1


def test_with_range_assignment_a_worker_killed_before_the_first_completion_restores_all() -> None:
    """No adopter would start its tasks afresh: the ordinary failover, as before."""
    h = started(ISOLATED)
    beat(h, 0.0)
    h.tick(1.0)
    out = cycle(h, 1.5, 4.0, LIVE)
    assert not h.c.carried.members and not aborted(out)
    out = cycle(h, 4.5, 12.0, LIVE)
    assert [(m.attempt, m.checkpoint_id) for m in out if isinstance(m, Restore)] == [(2, None)]
