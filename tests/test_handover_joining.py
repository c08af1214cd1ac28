"""A joiner's hand-over (docs/design.md §6.6): ``wait_for_handover`` against a fake
control topic (when a joining worker asks, waits and joins), and the coordinator
letting a worker join during a restore (the Resume waits for it, ``JOIN_WAIT_S`` at
most). Pure state machines with a fake clock (no broker)."""

from __future__ import annotations

from typing import cast

import pytest

from kstream.config import CheckpointingConfig
from kstream.kafka.control import ControlClient
from kstream.protocol.commands import Send
from kstream.protocol.failover import JOIN_WAIT_S
from kstream.protocol.handover import JOINING, LEAVING
from kstream.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    HandoverDeclined,
    Heartbeat,
    JobFailed,
    JobStopped,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from kstream.protocol.worker import REQUEST_EVERY_S
from kstream.worker.joining import POLL_S, wait_for_handover
from tests.test_coordinator import Harness, messages
from tests.test_handover import OWNERS, R1, complete, restarted
from tests.test_worker_protocol import protocol

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
