"""Hand-over checkpoints (docs/design.md §6.6): the coordinator's hold checkpoint, the
wire form and the worker protocol's hold and release, and the job the other hand-over
tests start from (``owned``, ``restarted``). A joiner's wait is in
``tests/test_handover_joining.py``, a leave during a restore or a hold in
``tests/test_handover_leaving.py``. Pure state machines with a fake clock (no broker)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kstream.config import RestartStrategy
from kstream.metrics.labels import restart_cause
from kstream.protocol.commands import Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.handover import HEARD_WITHIN_S, HOLD_TIMEOUT_S, JOINING, LEAVING
from kstream.protocol.messages import (
    REASSIGNED,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    DeclineCheckpoint,
    HandoverDeclined,
    Heartbeat,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    StopJob,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    WorkerStopped,
    decode,
    encode,
)
from kstream.protocol.worker import HOLD_MAX_S
from kstream.protocol.workerevents import (
    Assigned,
    ReleaseTasks,
    RestoreTasks,
    StopRequested,
    StopTasks,
    TriggerTasks,
)
from tests.test_coordinator import Harness, messages, triggers
from tests.test_worker_protocol import protocol, running

OWNERS = {"a": "w1", "b": "w2"}
R1: list[Message] = [Restore(1, None), Resume(1, {})]  # a history: attempt 1 runs


def owned(**checkpointing: Any) -> Harness:
    """Tasks a on w1 and b on w2 resumed in attempt 1, both heard at 0.0 (generation 4)."""
    h = Harness(history=[Resume(1, dict(OWNERS))], **checkpointing)
    h.start(0.0)
    beat(h, 0.0)
    return h


def beat(h: Harness, now: float, *members: str) -> None:
    for m in members or ("w1", "w2"):
        assert h.send(Heartbeat(m, tuple(t for t, o in OWNERS.items() if o == m), 4), now) == []


def complete(h: Harness, n: int, attempt: int, now: float) -> None:
    h.ack(n, "a", now, attempt=attempt)
    assert messages(h.ack(n, "b", now, attempt=attempt))[0] == CheckpointCompleted(n, attempt)


def quiet_until(h: Harness, start: float, end: float) -> None:
    """Every second from ``start`` to ``end`` (both owners beating): nothing sent."""
    t = start
    while t <= end:
        beat(h, t)
        assert h.tick(t) == [], t
        t += 1.0


# -- coordinator -------------------------------------------------------------------------


@pytest.mark.parametrize("reason", [LEAVING, JOINING])
def test_a_hand_over_request_triggers_one_hold_checkpoint_and_nothing_after_it(
    reason: str,
) -> None:
    # max_concurrent 2 and a long timeout: only the hold keeps further triggers back.
    h = owned(max_concurrent=2, timeout=100.0)
    assert h.send(CheckpointRequest("w3", 1, reason), 0.5) == []
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 1, 500, True))]
    assert h.send(CheckpointRequest("w3", 1, reason), 0.75) == []  # in flight already
    quiet_until(h, 1.0, 10.0)  # in flight (the interval is 1 s)
    complete(h, 1, 1, 10.0)
    assert h.send(CheckpointRequest("w1", 1, LEAVING), 10.5) == []  # holding already
    quiet_until(h, 11.0, 10.0 + HOLD_TIMEOUT_S - 1.0)
    beat(h, 29.75)
    assert h.tick(29.75) == []
    # No change of the group within HOLD_TIMEOUT_S of the completion: triggering resumes.
    assert h.tick(10.0 + HOLD_TIMEOUT_S) == [Send(TriggerCheckpoint(2, 1, 30000))]
    assert h.c.handover.checkpoint_id is None


def restarted() -> Harness:
    """``owned``, then a failover at 0.25 (a counted restart: Restore(2) at once) and the
    resume of attempt 2 with the same owners: the next restart waits 10 s (exponential)."""
    h = owned(restart=RestartStrategy(delay=10.0))
    h.send(TaskFailed("a", "w1", 1, "boom"), 0.25)
    assert h.tick(0.25) == [Send(Restore(2, None))]
    h.send(TaskReady(2, "a", "w1", 4), 0.25)
    assert messages(h.send(TaskReady(2, "b", "w2", 4), 0.25)) == [Resume(2, dict(OWNERS))]
    return h


@pytest.mark.parametrize(
    ("reason", "waits", "restore_at"), [(LEAVING, [], 1.25), ("idle", [1.25, 10.0], 10.25)]
)
def test_the_change_after_a_hold_checkpoint_is_restored_from_it_at_once(
    reason: str, waits: list[float], restore_at: float
) -> None:
    h = restarted()
    h.send(CheckpointRequest("w1", 2, reason), 0.5)
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 2, 500, reason == LEAVING))]
    complete(h, 1, 2, 0.75)
    assert h.send(WorkerStopped("w1", 2, "stopping: the final checkpoint completed"), 1.0) == []
    # w1 left the group: w2 reports the next generation.
    assert h.send(Heartbeat("w2", ("b",), 5), 1.25) == []
    assert h.c.phase is JobPhase.SUSPENDED
    for t in waits:
        assert h.tick(t) == [], t
    assert h.tick(restore_at) == [Send(Restore(3, 1))]  # from the hold checkpoint
    h.send(TaskReady(3, "a", "w2", 5), restore_at)
    resumed = h.send(TaskReady(3, "b", "w2", 5), restore_at)
    assert messages(resumed) == [Resume(3, {"a": "w2", "b": "w2"})]
    assert h.c.handover.checkpoint_id is None
    assert h.tick(restore_at + 0.75) == []
    t = restore_at + 1.0
    assert h.tick(t) == [Send(TriggerCheckpoint(2, 3, int(t * 1000)))]  # hold False


def test_a_change_while_the_hold_checkpoint_is_in_flight_is_an_ordinary_failover() -> None:
    h = restarted()
    h.send(CheckpointRequest("w1", 2, LEAVING), 0.5)
    assert triggers(h.tick(0.5)) == [1]
    out = h.send(Heartbeat("w2", ("b",), 5), 1.0)
    assert [type(m) for m in messages(out)] == [CheckpointAborted]
    assert h.tick(10.0) == []
    assert h.tick(10.25) == [Send(Restore(3, None))]  # delayed as any second restart


def test_a_hand_over_is_declined_while_an_owner_is_quiet() -> None:
    declined = [Send(HandoverDeclined("w3", "no heartbeat from w2"))]
    # interval 10: a trigger before it is a request's.
    never = Harness(history=[Resume(1, dict(OWNERS))], interval=10.0)
    never.start(0.0)
    beat(never, 0.0, "w1")  # w2 never heard by this coordinator
    # Started less than HEARD_WITHIN_S ago: no answer yet (the requests repeat).
    assert never.send(CheckpointRequest("w3", 1, JOINING), 2.75) == []
    assert never.tick(2.75) == []
    assert never.send(CheckpointRequest("w3", 1, JOINING), 3.0) == declined
    assert never.tick(3.0) == []  # nothing triggered

    silent = owned(interval=10.0)
    beat(silent, 4.0, "w1")  # w2 silent for 4 s
    assert silent.send(CheckpointRequest("w3", 1, JOINING), 4.0) == declined
    assert silent.tick(4.0) == []
    assert silent.tick(10.0) == [Send(TriggerCheckpoint(1, 1, 10000))]  # nothing wanted

    heard = owned(interval=10.0)
    beat(heard, HEARD_WITHIN_S, "w1")  # w2 silent for exactly HEARD_WITHIN_S: not quiet
    assert heard.send(CheckpointRequest("w3", 1, JOINING), HEARD_WITHIN_S) == []
    assert heard.tick(HEARD_WITHIN_S) == [Send(TriggerCheckpoint(1, 1, 3000, True))]


def test_a_declined_leaver_still_gets_its_final_checkpoint_at_once() -> None:
    """As before hand-overs (a "graceful stop" request): the leaver ignores the decline
    and waits for a checkpoint; with a 60 s interval its 30 s drain runs out first."""
    h = owned(interval=60.0)
    beat(h, 4.0, "w1")  # w2 silent for 4 s (killed)
    h.send(CheckpointRequest("w1", 1, LEAVING), 4.0)
    assert h.tick(4.0) == [Send(TriggerCheckpoint(1, 1, 4000))]


def test_a_hand_over_asked_for_before_the_job_stopped_is_forgotten_on_its_resume() -> None:
    h = owned()
    assert triggers(h.tick(1.0)) == [1]
    h.send(CheckpointRequest("w1", 1, LEAVING), 1.25)  # wanted: checkpoint 1 in flight
    complete(h, 1, 1, 1.5)
    h.send(WorkerStopped("w1", 1, "bye"), 1.5)
    assert isinstance(messages(h.send(WorkerStopped("w2", 1, "bye"), 1.5))[-1], JobStopped)
    h.send(Heartbeat("w3", (), 6), 1.5)  # w3 joins the stopped job: it starts again
    assert h.tick(1.5) == [Send(Restore(2, 1))]
    h.send(TaskReady(2, "a", "w3", 6), 2.0)
    h.send(TaskReady(2, "b", "w3", 6), 2.0)
    assert h.tick(3.0) == [Send(TriggerCheckpoint(2, 2, 3000))]  # not a hold


def test_a_failure_while_a_stopped_job_restarts_is_not_a_hand_over() -> None:
    """The hold completed, every owner stopped (JobStopped) and w3 restarted the job
    within HOLD_TIMEOUT_S: a task failure during that restore is no hand-over, so the
    exponential strategy delays it (10 s after the restart at 0.25)."""
    h = restarted()
    h.send(CheckpointRequest("w1", 2, LEAVING), 0.5)
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 2, 500, True))]
    complete(h, 1, 2, 0.75)
    h.send(WorkerStopped("w1", 2, "bye"), 1.0)
    assert isinstance(messages(h.send(WorkerStopped("w2", 2, "bye"), 1.0))[-1], JobStopped)
    h.send(Heartbeat("w3", (), 6), 2.0)
    assert h.tick(2.0) == [Send(Restore(3, 1))]
    h.send(TaskFailed("a", "w3", 3, "boom"), 2.5)
    assert h.tick(2.5) == []  # fails: Restore(4, 1) at once, uncounted


@pytest.mark.parametrize("how", ["declined", "timed out"])
def test_an_aborted_hold_checkpoint_blocks_nothing_and_a_new_request_holds_again(
    how: str,
) -> None:
    h = owned(timeout=5.0, interval=10.0)
    h.send(CheckpointRequest("w1", 1, LEAVING), 0.5)
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 1, 500, True))]
    assert h.send(CheckpointRequest("w3", 1, JOINING), 1.0) == []  # served by checkpoint 1
    beat(h, 5.0)
    if how == "declined":
        out = h.send(DeclineCheckpoint(1, "a", 1, "disk full"), 5.0)
        assert messages(out) == [CheckpointAborted(1, "checkpoint 1 declined by task a: disk full")]
        assert h.tick(5.5) == []
    else:
        assert h.tick(5.25) == []
        assert [type(m) for m in messages(h.tick(5.5))] == [CheckpointAborted]  # 5 s after
    assert h.c.handover.checkpoint_id is None
    beat(h, 10.5)
    assert h.tick(10.5) == [Send(TriggerCheckpoint(2, 1, 10500))]  # the interval's: no hold
    assert h.send(CheckpointRequest("w1", 1, LEAVING), 10.75) == []
    complete(h, 2, 1, 11.0)
    assert h.tick(11.0) == [Send(TriggerCheckpoint(3, 1, 11000, True))]


def test_a_hand_over_restore_is_counted_as_a_handover_not_a_rebalance() -> None:
    """``kstream status`` and ``kstream_job_restarts_total`` name the cause."""
    h = restarted()
    h.send(CheckpointRequest("w1", 2, LEAVING), 0.5)
    h.tick(0.5)
    complete(h, 1, 2, 0.75)
    h.send(Heartbeat("w2", ("b",), 5), 1.0)
    reason = h.c.failover.failure_reason
    assert reason.startswith("hand-over at checkpoint 1: ")
    assert restart_cause(reason) == "handover"
    assert restart_cause("consumer group generation changed 4 -> 5") == "rebalance"


# -- wire form ---------------------------------------------------------------------------


def test_a_trigger_without_hold_is_written_as_before_hold() -> None:
    plain, held = TriggerCheckpoint(1, 2, 3), TriggerCheckpoint(1, 2, 3, True)
    old = b'{"v":1,"type":"TriggerCheckpoint","checkpoint_id":1,"attempt":2,"timestamp":3}'
    assert encode(plain) == old  # what a reader of an older version decodes
    assert decode(old) == plain == TriggerCheckpoint(1, 2, 3, False)
    assert json.loads(encode(held)) == {**json.loads(old), "hold": True}
    assert decode(encode(held)) == held != plain


# -- worker protocol ---------------------------------------------------------------------


def test_a_hold_is_released_by_its_abort_or_a_later_trigger() -> None:
    p = running(protocol())
    assert p.handle(TriggerCheckpoint(4, 1, 0, True), 2.0) == [TriggerTasks(4, 1, True)]
    assert p.hold == (4, 2.0)
    assert p.handle(CheckpointAborted(3, "another"), 2.1) == []
    assert p.handle(CheckpointAborted(4, "declined"), 2.2) == [ReleaseTasks(4)]
    assert p.hold is None and p.handle(CheckpointAborted(4, "declined"), 2.3) == []
    p.handle(TriggerCheckpoint(5, 1, 0, True), 3.0)
    assert p.handle(TriggerCheckpoint(6, 0, 0), 3.5) == []  # another attempt's
    assert p.handle(TriggerCheckpoint(6, 1, 0), 4.0) == [ReleaseTasks(5), TriggerTasks(6, 1)]
    assert p.hold is None


def test_a_group_change_while_holding_keeps_the_held_tasks_for_the_restore() -> None:
    """The change a hold prepared reaches the worker as a new assignment before the
    coordinator's Restore: the tasks that hold are not stopped (the restore carries
    on those still assigned here); without a hold every task stops, as before."""
    p = running(protocol())
    p.handle(TriggerCheckpoint(4, 1, 0, True), 2.0)
    out = p.handle(Assigned("m1", 4, ("t0",), True), 3.0)
    assert out[0] == StopTasks(keep_held=True)
    assert Send(TaskFailed("t0", "m1", 1, REASSIGNED)) in out  # restored at once
    q = running(protocol())
    assert p.hold is not None and q.hold is None
    assert q.handle(Assigned("m1", 4, ("t0",), True), 3.0)[0] == StopTasks(keep_held=False)


def test_a_restore_read_between_revocation_and_assignment_keeps_the_held_tasks() -> None:
    """An eager rebalance revokes everything, then assigns in a later poll: a Restore
    read in between (no partitions yet) keeps the tasks that hold for the restore the
    assignment brings, which carries on those held at its checkpoint. Seen in a kill -9
    of a job without a shuffle (integration/test_crash_carry.py): they were stopped
    and restored from the store, the same state, but opened anew."""
    p = running(protocol())
    p.handle(TriggerCheckpoint(4, 1, 0, True), 2.0)
    assert p.handle(Assigned("m1", 4, (), False), 3.0)[0] == StopTasks(keep_held=True)
    assert p.handle(Restore(2, 4), 3.1) == [StopTasks(keep_held=True)]
    assert p.handle(Assigned("m1", 5, ("t0",), True), 3.2)[0] == RestoreTasks(2, 4)
    q = running(protocol())  # (no hold: every task stops, as before)
    q.handle(Assigned("m1", 4, (), False), 3.0)
    assert q.handle(Restore(2, 4), 3.1) == [StopTasks(keep_held=False)]


def test_a_restore_ends_the_hold_without_a_release() -> None:
    p = running(protocol())
    p.handle(TriggerCheckpoint(4, 1, 0, True), 2.0)
    assert p.handle(Restore(2, 4), 3.0)[0] == RestoreTasks(2, 4)
    assert p.hold is None
    assert p.handle(CheckpointAborted(4, "late"), 3.1) == []
    assert ReleaseTasks(4) not in p.tick(2.0 + HOLD_MAX_S)


def test_a_hold_nothing_ends_is_released_after_hold_max_s() -> None:
    assert HOLD_MAX_S == 2 * HOLD_TIMEOUT_S == 40.0
    p = running(protocol(heartbeat_interval=1000.0), now=0.0)  # no heartbeat due
    p.handle(TriggerCheckpoint(4, 1, 0, True), 2.0)
    assert p.tick(2.0 + HOLD_MAX_S - 0.25) == []
    assert p.tick(2.0 + HOLD_MAX_S) == [ReleaseTasks(4)]
    assert p.tick(3.0 + HOLD_MAX_S) == []


@pytest.mark.parametrize(
    ("history", "live"),
    [
        (R1, True),
        ([*R1, TriggerCheckpoint(3, 1, 0), CheckpointCompleted(3, 1)], True),
        ([*R1, Restore(2, 3)], True),  # restoring: a joiner waits for the Resume
        ([], False),
        ([*R1, JobStopped(1, "stopped")], False),
        ([*R1, JobFailed("boom")], False),
        ([*R1, JobStopped(1, "stopped"), Restore(2, 3), Resume(2, {})], True),
    ],
)
def test_learn_says_whether_the_job_is_live(history: list[Message], live: bool) -> None:
    p = protocol()
    p.learn(history)
    assert p.job_live is live


def test_a_leaver_and_a_joiner_ask_with_their_reasons() -> None:
    assert (LEAVING, JOINING) == ("graceful stop: leaving the group", "joining the group")
    leaver = running(protocol(), now=0.0)
    leaver.handle(StopRequested(), 10.0)
    assert leaver.tick(10.0)[0] == Send(CheckpointRequest("m1", 1, LEAVING))
    stopped = running(protocol(), now=0.0)
    stopped.handle(StopJob(1, "stop with savepoint x"), 10.0)
    assert stopped.tick(10.0)[0] == Send(CheckpointRequest("m1", 1, LEAVING))
    joiner = protocol()
    joiner.learn([Restore(3, 7), Resume(3, {"a": "m9"})])
    assert joiner.join_request() == [Send(CheckpointRequest("w1", 3, JOINING))]
