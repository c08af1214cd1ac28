"""Hand-over checkpoints (docs/design.md §6.6): the coordinator's hold checkpoint, the
worker protocol's hold and release, the wire form, and a joiner's wait. Pure state
machines with a fake clock (no broker)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from kstream.config import CheckpointingConfig, RestartStrategy
from kstream.kafka.control import ControlClient
from kstream.metrics.labels import restart_cause
from kstream.protocol.commands import Send
from kstream.protocol.failover import JOIN_WAIT_S, JobPhase
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
from kstream.protocol.worker import HOLD_MAX_S, LEAVE_ANSWER_S, REQUEST_EVERY_S, WorkerProtocol
from kstream.protocol.workerevents import (
    Assigned,
    CommitSinks,
    Exit,
    ReleaseTasks,
    RestoreTasks,
    ResumeTasks,
    StopRequested,
    StopTasks,
    TriggerTasks,
)
from kstream.worker.joining import POLL_S, wait_for_handover
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


# -- joining -----------------------------------------------------------------------------


class FakeControl:
    """Replies to the n-th poll (from 1) with ``replies[n]``; each poll advances the clock
    by its timeout; what is posted is recorded with the time."""

    def __init__(self, replies: dict[int, list[Message]]) -> None:
        self.replies = replies
        self.polls = 0
        self.ms = 0  # the fake clock, in whole milliseconds (exact sums)
        self.posted: list[tuple[float, list[Message]]] = []

    def clock(self) -> float:
        return self.ms / 1000

    def poll(self, timeout: float) -> list[Message]:
        self.polls += 1
        self.ms += round(timeout * 1000)
        return self.replies.get(self.polls, [])

    def post_all(self, msgs: list[Message]) -> None:
        self.posted.append((self.clock(), list(msgs)))


def wait(
    replies: dict[int, list[Message]],
    *,
    interval: float = 1.0,
    timeout: float = 60.0,
    refuse: bool = False,
    history: tuple[Message, ...] = (Restore(1, None), Resume(1, {"a": "w9"})),
    heartbeat_interval: float = 100.0,
) -> tuple[list[Message], FakeControl, list[CheckpointCompleted]]:
    """``wait_for_handover`` of a worker that read ``history``, with ``replies`` (other
    workers' heartbeats are not modelled unless ``heartbeat_interval`` is short: a
    wait with none ends after two intervals)."""
    control = FakeControl(replies)
    p = protocol()
    p.heartbeat_interval = heartbeat_interval
    p.learn(history)
    seen: list[CheckpointCompleted] = []

    def backed(msg: CheckpointCompleted) -> bool:
        seen.append(msg)
        return not refuse

    config = CheckpointingConfig(interval=interval, timeout=timeout)
    read = wait_for_handover(cast(ControlClient, control), p, config, control.clock, backed)
    return read, control, seen


def request(attempt: int) -> list[Message]:
    return [CheckpointRequest("w1", attempt, JOINING)]


HOLD, HOLD2 = TriggerCheckpoint(7, 1, 0, True), TriggerCheckpoint(7, 2, 0, True)


def test_a_joiner_asks_every_second_until_its_hold_checkpoint_completed() -> None:
    assert (POLL_S, REQUEST_EVERY_S) == (0.1, 1.0)
    hb = Heartbeat("w9", ("a",), 4)
    replies: dict[int, list[Message]] = {
        5: [hb],
        15: [TriggerCheckpoint(6, 1, 0)],  # a normal one: no answer
        20: [HandoverDeclined("w8", "no heartbeat from w2")],  # another joiner's
        25: [HOLD],
        35: [CheckpointCompleted(6, 1)],  # another checkpoint's
        40: [CheckpointCompleted(7, 1), hb],
    }
    read, control, backed = wait(replies)
    assert read == [m for n in sorted(replies) for m in replies[n]]  # the whole last batch too
    assert control.polls == 40
    assert control.posted == [(float(t), request(1)) for t in range(4)]  # 0.0 to 3.0
    assert backed == [CheckpointCompleted(7, 1)]


@pytest.mark.parametrize(
    "end",
    [
        [HandoverDeclined("w1", "no heartbeat from w2")],
        [HOLD, CheckpointAborted(6, "x"), CheckpointAborted(7, "x")],
        [HOLD, JobStopped(1, "stopped")],
        [JobFailed("boom")],
    ],
)
def test_a_joiner_joins_without_a_hand_over(end: list[Message]) -> None:
    read, control, backed = wait({3: end})
    assert read == end
    assert control.polls == 3 and control.posted == [(0.0, request(1))] and backed == []


@pytest.mark.parametrize(("interval", "polls"), [(1.0, 50), (4.0, 100)])
def test_a_joiner_joins_when_no_coordinator_answers(interval: float, polls: int) -> None:
    hb = Heartbeat("w9", ("a",), 4)  # a worker's: not a coordinator's answer
    read, control, _ = wait({30: [hb]}, interval=interval)
    assert read == [hb]
    assert control.polls == polls  # quiet: max(5 s, 2.5 intervals)
    assert [t for t, _ in control.posted] == [float(s) for s in range(polls // 10)]


def test_a_joiner_joins_when_the_coordinator_keeps_triggering_without_a_hold() -> None:
    """An older coordinator knows no hand-overs: it triggers a plain checkpoint for each
    request. The joiner joins once one is still read HEARD_WITHIN_S and a request period
    after the first (4 s), not at the deadline (timeout + 2 intervals: 62 s here)."""
    plain: dict[int, list[Message]] = {
        n: [TriggerCheckpoint(n, 1, 0), CheckpointCompleted(n, 1)] for n in range(2, 80, 10)
    }
    read, control, backed = wait(plain)
    assert control.polls == 42  # the trigger read at 4.2 s, 4.0 s after the first (0.2 s)
    assert read == [m for n in sorted(plain) if n <= 42 for m in plain[n]]
    assert backed == [] and len(control.posted) == 5  # 0.0 to 4.0
    # A coordinator that holds at last, within that time, is waited for.
    late_hold: dict[int, list[Message]] = {
        2: [TriggerCheckpoint(3, 1, 0)],
        30: [HOLD],
        35: [CheckpointCompleted(7, 1)],
    }
    read, control, backed = wait(late_hold)
    assert (control.polls, backed) == (35, [CheckpointCompleted(7, 1)])
    # A restore meanwhile starts the count again.
    restored: dict[int, list[Message]] = {
        2: [TriggerCheckpoint(3, 1, 0)],
        10: [Restore(2, 3)],
        12: [Resume(2, {})],
        40: [TriggerCheckpoint(4, 2, 0)],
        60: [TriggerCheckpoint(5, 2, 0)],
        81: [TriggerCheckpoint(6, 2, 0)],
    }
    read, control, _ = wait(restored)
    assert control.polls == 81  # 4.1 s after the first plain one since the Resume (4.0 s)


def test_a_completion_the_store_does_not_back_does_not_end_the_wait() -> None:
    replies: dict[int, list[Message]] = {10: [HOLD], 20: [CheckpointCompleted(7, 1)]}
    read, control, backed = wait(replies, refuse=True)
    assert read == [HOLD, CheckpointCompleted(7, 1)]
    assert backed == [CheckpointCompleted(7, 1)]
    assert control.polls == 70  # 5 s after the last coordinator message (at 2.0 s)
    # With a checkpoint timeout of 1 s: no later than timeout + 2 intervals (3 s).
    read, control, _ = wait(replies, timeout=1.0, refuse=True)
    assert (read, control.polls) == ([HOLD, CheckpointCompleted(7, 1)], 30)


def test_a_restore_meanwhile_is_waited_out_and_the_joiner_asks_again() -> None:
    hold = TriggerCheckpoint(9, 2, 0, True)
    replies: dict[int, list[Message]] = {
        3: [Restore(2, 6)],
        6: [TriggerCheckpoint(8, 1, 0, True)],  # (an old attempt's, while restoring)
        8: [Resume(2, {})],
        12: [hold],
        15: [CheckpointCompleted(9, 2)],
    }
    read, control, _ = wait(replies)
    assert read == [m for n in sorted(replies) for m in replies[n]]
    # Asked when the restore began (a coordinator from before answers nothing then),
    # and again once it resumed.
    posted = [(0.0, request(1)), (0.3, request(2)), (0.8, request(2))]
    assert (control.polls, control.posted) == (15, posted)


def test_a_joiner_asks_during_a_restore_and_joins_once_the_coordinator_answers() -> None:
    """Nothing runs until the Resume: a coordinator that knows joins during a restore
    answers at once (and waits with the Resume for this worker); one from before
    answers nothing, and the joiner asks again once the job resumed, as it did."""
    restoring: tuple[Message, ...] = (*R1, Restore(2, 3))
    now = HandoverDeclined("w1", "joining during the restore of attempt 2: the Resume waits")
    read, control, _ = wait({2: [now]}, history=restoring)
    assert (read, control.polls, control.posted) == ([now], 2, [(0.0, request(2))])
    replies: dict[int, list[Message]] = {
        5: [Resume(2, {})],
        8: [HOLD2],
        9: [CheckpointCompleted(7, 2)],
    }
    read, control, _ = wait(replies, history=restoring)
    assert read == [Resume(2, {}), HOLD2, CheckpointCompleted(7, 2)]
    assert (control.polls, control.posted) == (9, [(0.0, request(2)), (0.5, request(2))])
    read, control, _ = wait({5: [JobStopped(2, "stopped")]}, history=restoring)
    assert (read, control.posted) == ([JobStopped(2, "stopped")], [(0.0, request(2))])


def restoring_after(reason: str) -> Harness:
    """``restarted``, then w3 asks for a hand-over with ``reason``; its hold checkpoint 1
    completes and the group changes (generation 5): restoring attempt 3 from it."""
    h = restarted()
    h.send(CheckpointRequest("w3", 2, reason), 0.5)
    assert h.tick(0.5) == [Send(TriggerCheckpoint(1, 2, 500, True))]
    complete(h, 1, 2, 0.75)
    h.send(Heartbeat("w2", ("b",), 5), 1.25)
    assert h.tick(1.25) == [Send(Restore(3, 1))]
    return h


def test_the_resume_waits_for_a_worker_that_joins_during_a_joiners_restore() -> None:
    """A scale-out: a second worker asks to join while the first one's change is being
    restored. Nothing runs until the Resume, so the coordinator lets it join now and
    resumes only once it is in the group's newest generation — its join's change is
    part of this restore, not a rollback just after the Resume. It asked under its
    client id (``host:pid``), before the group named it ``host:pid-<uuid>``."""
    joiner = "vm:9-0b555490-24df-4714-b92a-b564921f7ef4"
    h = restoring_after(JOINING)
    out = h.send(CheckpointRequest("vm:9", 3, JOINING), 1.3)
    why = "joining during the restore of attempt 3: the Resume waits"
    assert messages(out) == [HandoverDeclined("vm:9", why)]
    h.send(TaskReady(3, "a", "w1", 5), 1.4)
    assert h.send(TaskReady(3, "b", "w2", 5), 1.4) == []  # every task, but vm:9 awaited
    assert h.tick(1.5) == []
    assert h.send(Heartbeat(joiner, ("b",), 6), 2.0) == []  # in the group; readies of 5 void
    h.send(TaskReady(3, "a", "w1", 6), 2.1)
    resumed = h.send(TaskReady(3, "b", joiner, 6), 2.1)
    assert messages(resumed) == [Resume(3, {"a": "w1", "b": joiner})]
    assert not h.c.handover.joins_welcome


@pytest.mark.parametrize("cause", [LEAVING, "a failure"])
def test_a_joiner_is_not_let_in_during_a_restore_another_change_began(cause: str) -> None:
    """A rolling restart: the restarted worker starts while its predecessor's leave is
    restored. Waiting for it would make every task's pause one long one (its start and
    join) instead of two short ones: no answer, the joiner asks again after the Resume."""
    if cause == LEAVING:
        h = restoring_after(LEAVING)
    else:
        h = restarted()
        h.send(TaskFailed("a", "w1", 2, "boom"), 20.0)
        assert h.tick(40.0) == [Send(Restore(3, None))]
    assert h.send(CheckpointRequest("vm:9", 3, JOINING), 40.1) == []
    h.send(TaskReady(3, "a", "w1", 5), 40.2)
    assert messages(h.send(TaskReady(3, "b", "w2", 5), 40.2)) == [Resume(3, dict(OWNERS))]


def test_a_joiner_that_never_comes_is_awaited_join_wait_s_at_most() -> None:
    h = restoring_after(JOINING)
    h.send(CheckpointRequest("vm:9", 3, JOINING), 1.5)
    h.send(TaskReady(3, "a", "w1", 5), 1.6)
    assert h.send(TaskReady(3, "b", "w2", 5), 1.6) == []
    for w in ("w1", "w2"):
        h.send(Heartbeat(w, (), 5), 1.5 + JOIN_WAIT_S - 1.0)
    assert messages(h.tick(1.5 + JOIN_WAIT_S - 0.5)) == []
    late = messages(h.tick(1.5 + JOIN_WAIT_S))
    assert late[0] == Resume(3, dict(OWNERS))


@pytest.mark.parametrize(
    ("history", "batches"),
    [
        (R1, [[HOLD], [CheckpointCompleted(7, 1), Restore(2, 7)]]),
        ([*R1, Restore(2, 3)], [[Resume(2, {}), HOLD2], [CheckpointCompleted(7, 2)]]),
    ],
)
def test_every_message_a_poll_returned_is_read(
    history: list[Message], batches: list[list[Message]]
) -> None:
    read, control, _ = wait(dict(enumerate(batches, 1)), history=tuple(history))
    assert (read, control.polls) == ([m for b in batches for m in b], 2)


def test_a_joiner_joins_at_once_when_no_other_worker_heartbeats() -> None:
    """The job's workers were all killed and this one restarts it: nobody is left to
    hold, so it joins after three heartbeat intervals (3 s at least) without one, not after ``quiet``."""
    read, control, _backed = wait({}, heartbeat_interval=1.0)
    assert (read, control.polls) == ([], 30)
    hb = Heartbeat("w9", ("a",), 4)
    read, control, _backed = wait({5: [hb]}, heartbeat_interval=1.0)
    assert (read, control.polls) == ([hb], 50)  # alive: waits for the coordinator (quiet)


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
