"""The worker's half of the control protocol as a state machine: messages and a fake
clock in, exact actions out (no broker, no sleeps)."""

from __future__ import annotations

from kstream.protocol.commands import Send
from kstream.protocol.handover import LEAVING
from kstream.protocol.messages import (
    CheckpointCompleted,
    CheckpointRequest,
    Heartbeat,
    JobFailed,
    Restore,
    Resume,
    StopJob,
    TaskFailed,
    TasksReady,
    TriggerCheckpoint,
    WorkerStopped,
)
from kstream.protocol.worker import REASSIGNED, WorkerProtocol
from kstream.protocol.workerevents import (
    Assigned,
    CommitSinks,
    Exit,
    InputRead,
    OutputBuffered,
    QueriesServed,
    RestoreTasks,
    ResumeTasks,
    StopRequested,
    StopTasks,
    TaskStopped,
    TriggerTasks,
    Unrestorable,
)

TASKS = ("stage0-0", "stage1-0")


def protocol(
    *,
    heartbeat_interval: float = 1.0,
    stop_when_idle: float | None = None,
    drain_timeout_s: float = 30.0,
) -> WorkerProtocol:
    return WorkerProtocol(
        "w1",
        now=0.0,
        heartbeat_interval=heartbeat_interval,
        stop_when_idle=stop_when_idle,
        drain_timeout_s=drain_timeout_s,
    )


def running(p: WorkerProtocol, now: float = 1.0) -> WorkerProtocol:
    """``p`` after its first restore and a resume naming it the owner of both tasks."""
    p.handle(Assigned("m1", 3, TASKS, True), now)
    p.handle(Restore(1, None), now)
    p.handle(Resume(1, {t: "m1" for t in TASKS}), now)
    return p


def test_a_restore_restores_every_assigned_task_and_reports_each_ready() -> None:
    p = protocol()
    assert p.handle(Assigned("m1", 3, TASKS, True), 0.5) == [
        StopTasks(),
        Send(Heartbeat("m1", (), 3)),
    ]
    assert p.handle(Restore(1, 7), 1.0) == [
        RestoreTasks(1, 7),
        Send(TasksReady(1, ("stage0-0", "stage1-0"), "m1", 3)),  # one message for all
    ]
    assert p.restoring and p.tasks == set(TASKS) and p.running == set()
    # An old or repeated restore changes nothing.
    assert p.handle(Restore(1, 8), 1.1) == []
    assert p.handle(Restore(0, None), 1.1) == []


def test_a_restore_without_partitions_stops_every_task() -> None:
    p = protocol()
    assert p.handle(Restore(2, 5), 1.0) == [StopTasks()]
    assert (p.attempt, p.restore_point, p.restoring) == (2, 5, True)


def test_resume_runs_only_the_tasks_this_member_owns() -> None:
    p = protocol()
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    p.handle(Restore(1, None), 0.0)
    assert p.handle(Resume(2, {"stage0-0": "m1"}), 1.0) == []  # not this attempt
    assert p.handle(Resume(1, {"stage0-0": "m1", "stage1-0": "m2"}), 1.0) == [
        ResumeTasks(frozenset({"stage0-0"}))
    ]
    assert not p.restoring and p.tasks == {"stage0-0"} and p.running == {"stage0-0"}
    assert p.handle(Resume(1, {"stage0-0": "m1"}), 1.5) == []  # already resumed


def test_a_new_generation_during_a_restore_is_ready_again() -> None:
    p = protocol()
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    p.handle(Restore(1, 4), 0.0)
    assert p.handle(Assigned("m1", 4, ("stage0-0",), True), 2.0) == [
        RestoreTasks(1, 4),
        Send(TasksReady(1, ("stage0-0",), "m1", 4)),
        Send(Heartbeat("m1", ("stage0-0",), 4)),
    ]


def test_a_rebalance_after_the_resume_reports_the_held_tasks_failed() -> None:
    p = running(protocol())
    assert p.handle(Assigned("m1", 4, ("stage1-0",), True), 5.0) == [
        StopTasks(),
        Send(TaskFailed("stage1-0", "m1", 1, REASSIGNED)),
        Send(Heartbeat("m1", (), 4)),
    ]
    assert p.tasks == set() and p.running == set()


def test_triggers_of_the_current_attempt_reach_the_tasks_and_completions_commit() -> None:
    p = running(protocol())
    assert p.handle(TriggerCheckpoint(3, 0, 1000), 2.0) == []  # an older attempt's
    assert p.handle(TriggerCheckpoint(3, 1, 1000), 2.0) == [TriggerTasks(3, 1)]
    assert p.handle(CheckpointCompleted(3, 1), 2.5) == [CommitSinks(3)]
    assert p.trigger_seen == {}
    # A completion commits whatever attempt it names (a later one subsumes earlier ones).
    assert p.handle(CheckpointCompleted(2, 0), 2.6) == [CommitSinks(2)]


def test_the_first_output_after_a_restore_asks_for_a_checkpoint_once() -> None:
    p = protocol()
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    p.handle(Restore(2, 7), 0.0)
    assert not p.awaiting_first_output  # not before the resume: nothing runs
    assert p.handle(OutputBuffered(), 0.5) == []
    p.handle(Resume(2, {t: "m1" for t in TASKS}), 1.0)
    assert p.awaiting_first_output
    p.handle(InputRead(), 1.1)
    assert p.handle(OutputBuffered(), 1.1) == [
        Send(CheckpointRequest("m1", 2, "first output after a restore"))
    ]
    assert not p.awaiting_first_output
    # Once per restore: later output waits for the interval.
    assert p.handle(OutputBuffered(), 1.2) == []
    assert p.handle(OutputBuffered(), 5.0) == []


def test_a_job_started_without_a_checkpoint_waits_for_the_interval() -> None:
    p = running(protocol())  # restored to the start positions (checkpoint None)
    assert not p.awaiting_first_output
    assert p.handle(OutputBuffered(), 2.0) == []


def test_a_trigger_after_the_input_makes_the_first_output_request_needless() -> None:
    p = protocol()
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    p.handle(Restore(2, 7), 0.0)
    p.handle(Resume(2, {t: "m1" for t in TASKS}), 1.0)
    p.handle(InputRead(), 1.1)
    assert p.handle(TriggerCheckpoint(8, 2, 1200), 1.2) == [TriggerTasks(8, 2)]
    assert p.handle(OutputBuffered(), 1.2) == []  # checkpoint 8 covers it already
    assert not p.awaiting_first_output


def test_heartbeats_name_the_tasks_held_every_interval() -> None:
    p = running(protocol(heartbeat_interval=1.0), now=0.0)  # the assignment's beat at 0.0
    assert p.tick(0.5) == []
    assert p.tick(1.0) == [Send(Heartbeat("m1", TASKS, 3))]
    assert p.tick(1.9) == []
    assert p.handle(TaskStopped("stage1-0", 1, "ValueError: bad"), 2.0) == [
        Send(TaskFailed("stage1-0", "m1", 1, "ValueError: bad"))
    ]
    assert p.handle(TaskStopped("stage0-0", 1, None), 2.0) == []  # fenced: nothing to report
    assert p.tick(2.0) == [Send(Heartbeat("m1", (), 3))]


def test_a_restore_this_worker_cannot_do_leaves_it_no_task_and_heartbeats_carry_its_queries() -> (
    None
):
    p = protocol()
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    assert p.handle(QueriesServed("http://h:1"), 0.0) == []
    assert p.handle(Restore(1, 7), 0.5)[0] == RestoreTasks(1, 7)
    assert p.handle(Unrestorable(1), 0.5) == []
    assert p.tick(1.0) == [Send(Heartbeat("m1", (), 3, "", "http://h:1"))]


def test_no_heartbeat_before_the_group_is_joined() -> None:
    p = protocol()
    assert p.tick(5.0) == []


def test_a_graceful_stop_asks_for_a_checkpoint_and_stops_once_one_after_the_input_completed() -> (
    None
):
    p = running(protocol(drain_timeout_s=30.0), now=0.0)
    p.tick(0.0)
    assert p.handle(StopRequested(), 10.0) == []
    assert p.stopping
    assert p.tick(10.0) == [
        Send(CheckpointRequest("m1", 1, LEAVING)),
        Send(Heartbeat("m1", TASKS, 3)),
    ]
    assert p.tick(10.5) == []  # at most one request a second
    assert p.tick(11.0) == [
        Send(CheckpointRequest("m1", 1, LEAVING)),
        Send(Heartbeat("m1", TASKS, 3)),
    ]
    p.handle(TriggerCheckpoint(5, 1, 0), 11.2)
    assert p.tick(12.5) == [Send(Heartbeat("m1", TASKS, 3))]  # one is on its way: no request
    # A checkpoint triggered before the stop does not cover everything read.
    p.trigger_seen[4] = 9.0
    assert p.handle(CheckpointCompleted(4, 1), 12.6) == [CommitSinks(4)]
    assert not p.drained
    assert p.handle(CheckpointCompleted(5, 1), 12.7) == [CommitSinks(5)]
    assert p.drained
    why = "stopping: the final checkpoint completed"
    assert p.tick(12.8) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_graceful_stop_gives_up_after_the_drain_timeout() -> None:
    p = running(protocol(drain_timeout_s=5.0), now=0.0)
    p.handle(StopRequested(), 10.0)
    assert p.tick(14.9)[0] == Send(CheckpointRequest("m1", 1, LEAVING))
    why = "stopping: no final checkpoint in time"
    assert p.tick(15.0) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_stop_with_nothing_running_stops_at_once() -> None:
    p = protocol()
    p.handle(Assigned("m1", 3, (), False), 0.0)  # no partitions: nothing will run here
    p.handle(Restore(1, None), 0.0)  # restoring: nothing runs
    why = "stopping: nothing runs here, so nothing is left to commit"
    assert p.handle(StopRequested(), 1.0) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]
    assert p.handle(StopRequested(), 1.1) == []


def test_idle_asks_for_a_checkpoint_and_stops_once_the_input_is_committed() -> None:
    p = running(protocol(stop_when_idle=3.0, heartbeat_interval=100.0), now=0.0)
    p.handle(InputRead(), 1.0)
    assert p.tick(3.9) == []
    assert p.tick(4.0) == [Send(CheckpointRequest("m1", 1, "idle"))]
    p.handle(TriggerCheckpoint(2, 1, 0), 4.1)
    p.handle(CheckpointCompleted(2, 1), 4.5)
    # The coordinator and `kstream status` learn that this worker stopped, and why.
    why = "no input for 3.6s and all output committed"
    assert p.tick(4.6) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_no_checkpoint_request_while_restoring() -> None:
    p = protocol(stop_when_idle=1.0)
    p.handle(Assigned("m1", 3, TASKS, True), 0.0)
    p.handle(Restore(1, None), 0.0)
    assert p.tick(5.0) == [Send(Heartbeat("m1", TASKS, 3))]


def test_job_failed_exits_with_1() -> None:
    p = running(protocol())
    assert p.handle(JobFailed("3 successive checkpoints failed"), 2.0) == [
        Exit(1, "job failed: 3 successive checkpoints failed")
    ]


def test_a_late_worker_learns_the_attempt_from_the_history() -> None:
    p = protocol()
    p.learn([Restore(1, None), Resume(1, {"stage0-0": "m9"}), Restore(2, 4)])
    assert (p.attempt, p.restore_point, p.restoring) == (2, 4, True)
    p.learn([Resume(2, {})])
    assert not p.restoring
    # Resumed: a new assignment is a reassignment, reported at once.
    assert p.handle(Assigned("m1", 7, ("stage0-0",), True), 1.0)[1] == Send(
        TaskFailed("stage0-0", "m1", 2, REASSIGNED)
    )


def test_stop_job_then_a_trigger_in_the_same_poll_is_the_final_checkpoint() -> None:
    """`kstream savepoint --stop`: the coordinator's StopJob precedes the savepoint's
    trigger; both may arrive in one poll (same ``now``), before any input is read."""
    p = running(protocol(), now=0.0)
    assert p.handle(StopJob(0, "stop with savepoint x"), 5.0) == []  # another attempt
    assert not p.stopping
    assert p.handle(StopJob(1, "stop with savepoint x"), 5.0) == []
    assert p.stopping
    assert p.handle(TriggerCheckpoint(7, 1, 0), 5.0) == [TriggerTasks(7, 1)]
    assert p.handle(CheckpointCompleted(7, 1), 6.0) == [CommitSinks(7)]
    why = "stopping: the final checkpoint completed"
    assert p.tick(6.1) == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_trigger_in_flight_before_a_stop_with_savepoint_is_not_the_final_checkpoint() -> None:
    """The race CI met: the worker reads checkpoint 5's trigger and the StopJob of a
    savepoint (to be checkpoint 6) in one poll. Checkpoint 5 covers everything read, but
    it is not the savepoint: the worker waits for 6, or the coordinator aborts it."""
    p = running(protocol(), now=0.0)
    assert p.handle(TriggerCheckpoint(5, 1, 0), 5.0) == [TriggerTasks(5, 1)]
    assert p.handle(StopJob(1, "stop with savepoint x", after=5), 5.0) == []
    assert p.handle(CheckpointCompleted(5, 1), 6.0) == [CommitSinks(5)]
    assert Exit not in map(type, p.tick(6.1))  # (it asks for a checkpoint instead)
    assert p.handle(TriggerCheckpoint(6, 1, 0), 6.2) == [TriggerTasks(6, 1)]
    assert p.handle(CheckpointCompleted(6, 1), 6.5) == [CommitSinks(6)]
    why = "stopping: the final checkpoint completed"
    assert p.tick(6.6)[-2:] == [Send(WorkerStopped("m1", 1, why)), Exit(0, why)]


def test_a_hold_completed_before_a_stop_with_savepoint_does_not_end_the_worker() -> None:
    """Holding at a completed hand-over checkpoint ends a plain stop at once; a stop with
    a savepoint still waits for the savepoint's checkpoint."""
    p = running(protocol(), now=0.0)
    p.handle(TriggerCheckpoint(5, 1, 0, hold=True), 5.0)
    p.handle(CheckpointCompleted(5, 1), 5.5)
    assert p.held_at_completed == 5
    p.handle(StopJob(1, "stop with savepoint x", after=5), 5.6)
    assert Exit not in map(type, p.tick(5.7))
    p.handle(TriggerCheckpoint(6, 1, 0), 5.8)
    p.handle(CheckpointCompleted(6, 1), 6.0)
    assert p.tick(6.1)[-1] == Exit(0, "stopping: the final checkpoint completed")
