"""Failover in the checkpoint coordinator state machine: a task failure suspends the
job, the restore of every task and the resume, ownership by generation, and the
restart strategy's timeouts, limits and delays; driven by messages and a fake clock
(no broker). The harness is ``tests.test_coordinator``'s."""

from __future__ import annotations

from kstream.config import RestartStrategy
from kstream.protocol.commands import CleanupCheckpoint, Fail, Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    CheckpointAborted,
    Heartbeat,
    JobFailed,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from tests.test_coordinator import Harness, triggers

# -- failover ----------------------------------------------------------------------------


def test_failure_suspends_and_nothing_is_triggered_until_every_task_is_ready() -> None:
    h = Harness()
    h.start(0.0)
    h.tick(1.0)
    h.ack(1, "a", 1.1)
    h.ack(1, "b", 1.2)  # checkpoint 1 completes
    assert triggers(h.tick(2.0)) == [2]
    out = h.send(TaskFailed("b", "w2", 0, "ValueError in map"), 2.1)
    assert out == [
        Send(CheckpointAborted(2, "job failover: task b failed on w2: ValueError in map")),
        CleanupCheckpoint(2, ()),
    ]
    assert h.c.phase is JobPhase.SUSPENDED
    assert h.c.failures.successive_failures == 0  # a failover abort is not a checkpoint failure
    # The first restart after a quiet spell starts at once (the delay spaces restarts).
    assert h.tick(2.15) == [Send(Restore(1, 1))]
    assert h.c.phase is JobPhase.RESTORING
    for t in (3.0, 4.0, 5.0, 6.0):
        assert h.tick(t) == []  # no triggers and no timeouts while restoring
    assert h.send(TaskReady(0, "a", "w1", 3), 6.1) == []  # older attempt: ignored
    assert h.send(TaskReady(1, "a", "w1", 3), 6.2) == []
    assert h.send(TaskFailed("a", "w1", 0, "old"), 6.2) == []  # failure of a superseded attempt
    assert h.send(TaskReady(1, "b", "w2", 3), 6.3) == [Send(Resume(1, {"a": "w1", "b": "w2"}))]
    assert h.c.phase is JobPhase.RUNNING
    assert h.tick(7.2) == []
    assert h.tick(7.3) == [Send(TriggerCheckpoint(3, 1, 7300))]
    assert h.ack(3, "a", 7.4, attempt=0) == []  # an ack from the old attempt is ignored


def test_newest_generation_wins_the_ownership() -> None:
    h = Harness()
    h.start(0.0)
    h.send(TaskFailed("a", "w1", 0, "x"), 1.0)
    h.tick(1.5)
    assert h.send(TaskReady(1, "a", "w1", 3), 1.6) == []
    assert h.send(TaskReady(1, "b", "w2", 4), 1.7) == []  # gen 4 voids a's gen-3 ready
    assert h.send(TaskReady(1, "a", "w1", 3), 1.8) == []  # stale generation
    assert h.send(TaskReady(1, "a", "w3", 4), 1.9) == [Send(Resume(1, {"a": "w3", "b": "w2"}))]


def test_a_restore_not_finished_in_time_starts_over_until_the_strategy_gives_up() -> None:
    h = Harness(
        restart=RestartStrategy(max_restarts=2, window=100.0, delay=0.5, restore_timeout=4.0)
    )
    h.start(0.0)
    h.send(TaskFailed("a", "w1", 0, "x"), 1.0)  # restart 1
    assert h.tick(1.5) == [Send(Restore(1, None))]  # no completed checkpoint: start positions
    h.send(TaskReady(1, "a", "w1", 1), 2.0)
    assert h.tick(5.5) == []  # restart 2 scheduled
    assert h.c.phase is JobPhase.SUSPENDED
    assert h.tick(6.0) == [Send(Restore(2, None))]
    out = h.tick(10.0)
    reason = (
        "restore of attempt 2 not finished within 4s of its last progress: no TaskReady from a, "
        "b; restart strategy "
        "exhausted: 2 restarts within 100s (max_restarts=2) -> job failed"
    )
    assert out == [Send(JobFailed(reason)), Fail(reason)]


def test_a_restore_that_moves_outlives_the_restore_timeout_one_that_stops_does_not() -> None:
    """A worker restoring hundreds of tasks says in its heartbeats how many it restored
    so far: the restore's deadline runs from the last increase (a fixed deadline started
    a 512-task restore over and over at 1024 partitions, benchmarks/SCALING.md)."""
    h = Harness(restart=RestartStrategy(max_restarts=3, window=100.0, restore_timeout=4.0))
    h.start(0.0)
    h.send(TaskFailed("a", "w1", 0, "x"), 1.0)
    assert h.tick(1.0) == [Send(Restore(1, None))]  # deadline 5.0
    h.send(Heartbeat("w1", (), 1, restored=3), 4.0)  # deadline 8.0
    h.send(Heartbeat("w1", (), 1, restored=3), 7.0)  # no progress: still 8.0
    h.send(Heartbeat("w2", (), 1, restored=1), 7.5)  # another worker's: 11.5
    assert h.tick(11.0) == []
    assert h.c.phase is JobPhase.RESTORING
    h.send(TaskReady(1, "a", "w1", 1), 11.2)  # a ready is not a heartbeat's progress
    assert h.tick(11.4) == [] and h.c.phase is JobPhase.RESTORING
    h.tick(11.5)
    assert h.c.phase is JobPhase.SUSPENDED  # 4 s without progress: it starts over
    assert h.tick(13.0) == [Send(Restore(2, None))]


def test_restarts_in_a_failure_loop_are_at_least_the_delay_apart() -> None:
    h = Harness(tasks=["a"], restart=RestartStrategy(max_restarts=5, window=100.0, delay=2.0))
    h.start(0.0)
    h.send(TaskFailed("a", "w1", 0, "boom"), 1.0)
    assert h.tick(1.0) == [Send(Restore(1, None))]  # first restart: at once
    h.send(TaskReady(1, "a", "w1", 1), 1.2)
    h.send(TaskFailed("a", "w1", 1, "boom again"), 1.5)
    assert h.tick(2.9) == []  # 2 s after the previous restart, not before
    assert h.tick(3.0) == [Send(Restore(2, None))]
    h.send(TaskReady(2, "a", "w1", 1), 3.1)
    h.send(TaskFailed("a", "w1", 2, "later"), 10.0)
    assert h.tick(10.0) == [Send(Restore(3, None))]  # long after the previous one: at once
