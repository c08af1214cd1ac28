"""Heartbeats and lost workers: the coordinator state machine fed messages and a clock."""

from __future__ import annotations

from kstream.protocol.commands import Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    Heartbeat,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from tests.test_coordinator import Harness, messages


def test_a_lost_worker_or_a_new_generation_fails_over() -> None:
    h = Harness(heartbeat_timeout=3.0, interval=100.0, history=[Resume(0, {"a": "w1", "b": "w2"})])
    h.start(0.0)
    assert h.send(Heartbeat("w1", ("a",), 5), 0.5) == []
    assert h.send(Heartbeat("w2", ("b",), 5), 0.5) == []
    h.send(Heartbeat("w1", ("a",), 5), 3.0)
    assert h.tick(3.5) == []
    out = h.tick(3.6)
    assert h.c.failover.failure_reason == "worker w2 lost: no heartbeat for 3.1s (tasks b)"
    assert out == [Send(Restore(1, None))]  # the first restart in the window: at once
    assert h.c.phase is JobPhase.RESTORING
    h.send(TaskReady(1, "a", "w1", 6), 4.2)
    assert messages(h.send(TaskReady(1, "b", "w1", 6), 4.3)) == [Resume(1, {"a": "w1", "b": "w1"})]
    h.send(Heartbeat("w1", ("a", "b"), 6), 4.4)
    assert h.c.phase is JobPhase.RUNNING
    h.send(Heartbeat("w1", ("a",), 7), 4.5)
    assert h.c.phase is JobPhase.SUSPENDED
    assert h.c.failover.failure_reason == (
        "consumer group generation changed 6 -> 7 (partitions were reassigned)"
    )


def test_a_silent_member_that_owns_nothing_is_forgotten_without_a_restore() -> None:
    # The predecessor of a restarted worker (seeded from the control history) owned
    # the tasks in attempt 1; attempt 2 gave them to its successor w2.
    h = Harness(tasks=["a"], history=[Resume(1, {"a": "w1"})], heartbeat_timeout=3.0)
    h.start(0.0)
    h.send(TaskFailed("a", "w2", 1, "its partitions were reassigned"), 0.5)
    assert h.tick(0.5) == [Send(Restore(2, None))]
    assert messages(h.send(TaskReady(2, "a", "w2", 1), 0.6)) == [Resume(2, {"a": "w2"})]
    for t in (1.0, 2.0, 3.0):
        h.send(Heartbeat("w2", ("a",), 1), t)
    h.tick(3.5)  # w1 silent for 3.5 s: forgotten, it owns nothing now
    assert h.c.phase is JobPhase.RUNNING
    assert h.c.attempt == 2


def test_owners_that_never_heartbeat_after_a_coordinator_restart_are_lost() -> None:
    h = Harness(tasks=["a"], history=[Resume(2, {"a": "w1"})], heartbeat_timeout=3.0)
    h.start(10.0)
    assert h.tick(12.0) == [Send(TriggerCheckpoint(1, 2, 12000))]
    h.tick(13.5)
    assert h.c.phase is JobPhase.RESTORING
    assert "worker w1 lost" in h.c.failover.failure_reason


def test_silence_during_the_coordinators_own_outage_does_not_lose_a_worker() -> None:
    h = Harness(heartbeat_timeout=3.0, interval=100.0, history=[Resume(0, {"a": "w1", "b": "w2"})])
    h.start(0.0)
    h.send(Heartbeat("w1", ("a",), 5), 0.5)
    h.send(Heartbeat("w2", ("b",), 5), 0.5)
    # Cut off from the brokers from 1.0 to 20.0: no heartbeat can arrive meanwhile.
    h.c.cut_off(20.0)
    assert h.tick(20.0) == []
    h.send(Heartbeat("w1", ("a",), 5), 21.0)  # w1 is back; w2 stays silent
    assert h.tick(23.0) == []
    assert h.c.phase is JobPhase.RUNNING
    out = h.tick(23.1)  # a whole timeout after the outage ended
    assert h.c.failover.failure_reason == "worker w2 lost: no heartbeat for 3.1s (tasks b)"
    assert out == [Send(Restore(1, None))]


def test_without_the_cut_off_the_same_silence_loses_both_workers() -> None:
    h = Harness(heartbeat_timeout=3.0, interval=100.0, history=[Resume(0, {"a": "w1", "b": "w2"})])
    h.start(0.0)
    h.send(Heartbeat("w1", ("a",), 5), 0.5)
    h.send(Heartbeat("w2", ("b",), 5), 0.5)
    h.tick(20.0)
    assert h.c.phase is JobPhase.RESTORING
    assert "lost: no heartbeat for 19.5s" in h.c.failover.failure_reason
