"""Leaving around a hand-over (docs/design.md §6.6): a worker told to stop during a
restore or while its tasks hold at a hand-over checkpoint, and the coordinator's side:
a leave read during a restore is answered at once, every worker leaving stops the job,
a second leaver is part of the same restore. Pure state machines with a fake clock (no
broker)."""

from __future__ import annotations

import pytest

from kstream.protocol.commands import Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.handover import HEARD_WITHIN_S, LEAVING
from kstream.protocol.messages import (
    CheckpointCompleted,
    CheckpointRequest,
    HandoverDeclined,
    Heartbeat,
    JobStopped,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    WorkerStopped,
)
from kstream.protocol.worker import LEAVE_ANSWER_S, WorkerProtocol
from kstream.protocol.workerevents import (
    Assigned,
    CommitSinks,
    Exit,
    ReleaseTasks,
    ResumeTasks,
    StopRequested,
    TriggerTasks,
)
from tests.test_coordinator import Harness, messages
from tests.test_handover import R1, beat, restarted
from tests.test_worker_protocol import protocol, running


def _stopped_during_restore() -> WorkerProtocol:
    """A worker restoring task a (attempt 1, checkpoint 7), then told to stop at 1.0."""
    p = protocol(heartbeat_interval=100.0)
    p.handle(Assigned("m1", 3, ("a",), True), 0.0)
    p.handle(Restore(1, 7), 0.0)
    assert p.handle(StopRequested(), 1.0) == [Send(CheckpointRequest("m1", 1, LEAVING))]
    return p


def test_a_stop_during_a_restore_leaves_once_the_coordinator_answers() -> None:
    """No task ran since the checkpoint being restored: its change can join the restore
    in progress. It asks first, because the coordinator may have resumed already: it
    leaves when the coordinator answers that it read the request while restoring (the
    coordinator's side is the next tests), not on another member's answer."""
    p = _stopped_during_restore()
    assert p.tick(2.0) == []  # waiting for the answer
    assert p.handle(HandoverDeclined("m2", "leaving during the restore of attempt 1"), 2.0) == []
    why = "stopping: during the restore of checkpoint 7, nothing ran since it"
    answer = HandoverDeclined("m1", "leaving during the restore of attempt 1: the Resume waits")
    assert p.handle(answer, 2.5) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_stop_during_a_restore_waits_for_the_answer_after_a_completed_checkpoint_too() -> None:
    """Its last checkpoint before the restore completed after its last input (drained):
    still the restore's question first, not "the final checkpoint completed" at once
    (seen in a scale-in run: the answer was not waited for)."""
    p = running(protocol(heartbeat_interval=100.0), now=0.0)
    p.handle(TriggerCheckpoint(4, 1, 0, True), 1.0)
    p.handle(CheckpointCompleted(4, 1), 1.5)
    assert p.drained
    p.handle(Restore(2, 4), 2.0)
    assert p.handle(StopRequested(), 2.5) == [Send(CheckpointRequest("m1", 2, LEAVING))]
    assert p.tick(2.6) == []


def test_a_stop_during_a_restore_whose_resume_was_already_written_hands_over() -> None:
    """The window this closes: the coordinator wrote the Resume (every task ready) before
    it read the request. Leaving at once then rolled back every task that ran since the
    Resume (re-processing, seen in a scale-in: benchmarks/ELASTIC.md). The Resume comes
    first on the control topic: the worker runs its task and hands it over at a hold
    checkpoint, as a running worker does."""
    p = _stopped_during_restore()
    assert p.handle(Resume(1, {"a": "m1"}), 1.2) == [ResumeTasks(frozenset({"a"}))]
    assert p.tick(1.5) == [Send(CheckpointRequest("m1", 1, LEAVING))]  # a running leaver's
    assert p.handle(TriggerCheckpoint(8, 1, 0, True), 2.0) == [TriggerTasks(8, 1, True)]
    assert p.handle(CheckpointCompleted(8, 1), 2.5) == [CommitSinks(8)]
    why = "stopping: the final checkpoint completed"
    assert p.tick(2.6) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_stop_during_a_restore_asks_again_in_a_new_attempt_or_leaves_unanswered() -> None:
    """A new restore meanwhile: it asks again for that attempt. A coordinator from before
    this answer (or none) says nothing: it leaves after LEAVE_ANSWER_S, as it used to at
    once."""
    p = _stopped_during_restore()
    p.handle(Restore(2, 8), 1.5)
    assert p.tick(2.0) == [Send(CheckpointRequest("m1", 2, LEAVING))]
    assert p.tick(2.0 + LEAVE_ANSWER_S - 0.1) == []
    why = (
        "stopping: during the restore of checkpoint 8, nothing ran since it (no answer from "
        f"the coordinator within {LEAVE_ANSWER_S:g}s)"
    )
    assert p.tick(2.0 + LEAVE_ANSWER_S) == [Send(WorkerStopped("m1", 2, why)), Exit(0, why)]


def test_a_stop_during_restores_that_keep_coming_ends_at_the_drain_timeout() -> None:
    """Each new attempt asks again (and waits LEAVE_ANSWER_S for its answer), but not
    past the drain timeout: a restore loop does not keep a stopping worker for good."""
    p = protocol(heartbeat_interval=100.0, drain_timeout_s=10.0)
    p.handle(Assigned("m1", 3, ("a",), True), 0.0)
    p.handle(Restore(1, 7), 0.0)
    p.handle(StopRequested(), 1.0)
    for attempt, t in [(2, 3.0), (3, 6.0), (4, 9.0)]:
        p.handle(Restore(attempt, 7), t)
        assert p.tick(t) == [Send(CheckpointRequest("m1", attempt, LEAVING))]
    p.handle(Restore(5, 7), 11.0)  # past the drain timeout: no more asking
    why = (
        "stopping: during the restore of checkpoint 7, nothing ran since it (no answer from "
        f"the coordinator within {LEAVE_ANSWER_S:g}s)"
    )
    assert p.tick(11.0) == [Send(WorkerStopped("m1", 5, why)), Exit(0, why)]


def test_a_leave_read_during_the_restore_is_answered_and_its_readies_never_count() -> None:
    """The coordinator reads w1's leave while restoring: it tells w1 to leave now,
    forgets the task w1 reported ready, and ignores w1's later readies (sent after a
    rebalance, before w1 read the answer): the Resume names the group's next owner."""
    h = restarted()
    h.send(TaskFailed("a", "w1", 2, "boom"), 20.0)
    beat(h, 39.9)  # both workers alive
    assert h.tick(40.0) == [Send(Restore(3, None))]
    assert h.send(TaskReady(3, "a", "w1", 4), 40.25) == []
    why = "leaving during the restore of attempt 3: the Resume waits"
    assert h.send(CheckpointRequest("w1", 3, LEAVING), 40.5) == [Send(HandoverDeclined("w1", why))]
    assert h.send(TaskReady(3, "b", "w2", 4), 40.6) == []  # a: its owner leaves
    assert h.send(TaskReady(3, "a", "w1", 4), 40.7) == []  # sent before it read the answer
    h.send(TaskReady(3, "a", "w2", 5), 41.0)
    resumed = h.send(TaskReady(3, "b", "w2", 5), 41.0)
    assert messages(resumed) == [Resume(3, {"a": "w2", "b": "w2"})]


def test_every_worker_leaving_during_a_restore_stops_the_job() -> None:
    """SIGTERM to every worker mid-restore (a deployment deleted): once the last worker
    heard from leaves, the job is stopped (``kstream status`` said "restoring" for
    good); a leaver's late heartbeat does not start it again, a new worker does."""
    h = restarted()
    h.send(TaskFailed("a", "w1", 2, "boom"), 20.0)
    beat(h, 39.9)  # both workers alive
    assert h.tick(40.0) == [Send(Restore(3, None))]
    h.send(TaskReady(3, "a", "w1", 4), 40.25)
    leaving = "leaving during the restore of attempt 3"
    first = h.send(CheckpointRequest("w1", 3, LEAVING), 40.5)
    assert messages(first) == [HandoverDeclined("w1", f"{leaving}: the Resume waits")]
    beat(h, 40.6)  # both still heartbeat: w1 is not live again
    last = messages(h.send(CheckpointRequest("w2", 3, LEAVING), 40.7))
    assert last == [
        HandoverDeclined("w2", f"{leaving}: the Resume waits"),
        JobStopped(3, "every worker stopped during the restore of attempt 3"),
    ]
    assert h.c.phase is JobPhase.STOPPED
    assert h.send(Heartbeat("w1", (), 5), 41.0) == []  # sent before it left
    assert h.send(Heartbeat("w3", (), 6), 60.0) == []
    assert h.tick(60.0) == [Send(Restore(4, None))]  # a new worker starts it again


def test_a_coordinator_that_just_started_does_not_stop_the_job_for_a_leave() -> None:
    """Up for less than HEARD_WITHIN_S, it may not have heard the other workers yet: a
    leave during its first restore stops nothing; later, with no one heard, it does."""
    h = Harness(history=R1)
    h.start(0.0)
    h.send(TaskFailed("a", "w1", 1, "boom"), 0.5)
    assert h.tick(0.5) == [Send(Restore(2, None))]
    why = "leaving during the restore of attempt 2: the Resume waits"
    assert messages(h.send(CheckpointRequest("w1", 2, LEAVING), 1.0)) == [
        HandoverDeclined("w1", why)
    ]
    assert messages(h.send(WorkerStopped("w2", 2, "stopping"), HEARD_WITHIN_S)) == [
        JobStopped(2, "every worker stopped during the restore of attempt 2")
    ]


def test_workers_that_exit_during_a_restore_without_asking_stop_the_job_too() -> None:
    """A worker that held no partition when told to stop (the group mid-rebalance), or
    one from before the leave request, exits with WorkerStopped alone: the last such
    one stops the job as well."""
    h = restarted()
    h.send(TaskFailed("a", "w1", 2, "boom"), 20.0)
    beat(h, 39.9)
    assert h.tick(40.0) == [Send(Restore(3, None))]
    assert h.send(WorkerStopped("w1", 3, "stopping: nothing runs here"), 40.5) == []
    last = h.send(WorkerStopped("w2", 3, "stopping: nothing runs here"), 40.6)
    assert messages(last) == [JobStopped(3, "every worker stopped during the restore of attempt 3")]


def test_a_leave_read_after_the_resume_is_a_hand_over() -> None:
    """The request was written before the Resume was read, but the coordinator resumed
    first: the leaver runs now, so its request is a running worker's (a hold checkpoint),
    and nobody is told to leave at once."""
    h = restarted()
    assert h.send(CheckpointRequest("w1", 2, LEAVING), 0.5) == []
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 2, 500, True))]


def test_a_worker_stopped_during_the_restore_is_not_named_in_the_resume() -> None:
    """w1 reported its task ready, then stopped: its readiness dies with it. The restore
    resumes once the task's next owner (the group's change) reports it ready."""
    h = restarted()
    h.send(TaskFailed("a", "w1", 2, "boom"), 20.0)
    beat(h, 39.9)  # both workers alive
    assert h.tick(40.0) == [Send(Restore(3, None))]
    assert h.send(TaskReady(3, "a", "w1", 4), 40.25) == []
    assert h.send(WorkerStopped("w1", 3, "stopping: during the restore"), 40.5) == []
    assert h.send(TaskReady(3, "b", "w2", 4), 40.75) == []  # a: its owner stopped
    h.send(TaskReady(3, "a", "w2", 5), 41.0)
    resumed = h.send(TaskReady(3, "b", "w2", 5), 41.0)
    assert messages(resumed) == [Resume(3, {"a": "w2", "b": "w2"})]


def test_a_stop_while_holding_at_a_completed_hand_over_checkpoint_exits_at_once() -> None:
    """Two workers stopped together: the second is told to stop after the first one's
    hold checkpoint completed. Its tasks hold at it, so that checkpoint is its final
    one: it leaves now, and its change joins the one the hold prepared (one restore,
    not two with a second hold between them)."""
    p = running(protocol(heartbeat_interval=100.0), now=0.0)
    p.handle(TriggerCheckpoint(4, 1, 0, True), 1.0)  # another worker's hand-over
    assert p.handle(CheckpointCompleted(4, 1), 1.5)[0] == CommitSinks(4)
    assert p.held_at_completed == 4
    assert p.handle(StopRequested(), 2.0) == []
    why = "stopping: the final checkpoint completed (its tasks hold at hand-over checkpoint 4)"
    assert p.tick(2.0) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


@pytest.mark.parametrize("ended_by", ["not completed yet", "released"])
def test_a_stop_while_a_hold_is_not_completed_or_over_waits_for_a_final_checkpoint(
    ended_by: str,
) -> None:
    """Only a hold that completed, with no release since, is final: a hold in flight
    may still abort (the tasks go on), and a released task ran on."""
    p = running(protocol(heartbeat_interval=100.0), now=0.0)
    p.handle(TriggerCheckpoint(4, 1, 0, True), 1.0)
    if ended_by != "not completed yet":
        p.handle(CheckpointCompleted(4, 1), 1.5)
    if ended_by == "released":
        assert p.handle(TriggerCheckpoint(5, 1, 0), 1.75)[0] == ReleaseTasks(4)
    assert p.held_at_completed is None
    p.handle(StopRequested(), 2.0)
    # Not an exit: it asks for its own final checkpoint, as any leaver.
    assert p.tick(2.0) == [Send(CheckpointRequest("m1", 1, LEAVING))]


def test_a_second_leaver_at_a_holding_checkpoint_is_part_of_the_same_restore() -> None:
    """w1 asks, its hold checkpoint completes; w2 stops without a checkpoint of its own
    (it holds at that one, above). Both leave; the surviving w3 reports the next
    generation: one restore from the hold checkpoint, at once."""
    owners = {"a": "w1", "b": "w2", "c": "w3"}
    h = Harness(("a", "b", "c"), history=[Resume(1, owners)])
    h.start(0.0)
    for m, t in owners.items():
        h.send(Heartbeat(t, (m,), 4), 0.0)
    h.send(CheckpointRequest("w1", 1, LEAVING), 0.5)
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 1, 500, True))]
    for task in owners:
        out = h.ack(1, task, 0.75, attempt=1)
    assert messages(out)[0] == CheckpointCompleted(1, 1)
    for w in ("w1", "w2"):
        assert h.send(WorkerStopped(w, 1, "stopping: the final checkpoint completed"), 1.0) == []
    assert h.send(Heartbeat("w3", ("a", "b", "c"), 5), 1.25) == []
    assert h.tick(1.25) == [Send(Restore(2, 1))]  # from the hold checkpoint, at once
    for task in owners:
        out = h.send(TaskReady(2, task, "w3", 5), 1.5)
    assert messages(out) == [Resume(2, {"a": "w3", "b": "w3", "c": "w3"})]
