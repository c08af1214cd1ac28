"""How the checkpoint coordinator starts: restarted from its persisted state (the
control topic's history and the store's metadata, ids and attempts continue), and a
job's first start and the owners' check of a restarted coordinator; driven by
messages and a fake clock (no broker). The harness is ``tests.test_coordinator``'s."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import TaskSnapshot, write_metadata
from kstream.protocol.commands import CleanupCheckpoint, Send
from kstream.protocol.failover import JobPhase
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
)
from tests.test_coordinator import Harness, messages, triggers

# -- restart of the coordinator ----------------------------------------------------------


def test_ids_and_attempts_continue_after_a_restart_from_persisted_state(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = Harness(tasks=["a"], store=store)
    first.start(0.0)
    first.tick(1.0)
    first.ack(1, "a", 1.1)
    first.send(TaskFailed("a", "w1", 0, "x"), 1.2)
    first.tick(1.75)
    first.send(TaskReady(1, "a", "w1", 2), 2.0)
    first.tick(3.0)
    first.ack(2, "a", 3.25, attempt=1)
    first.tick(4.0)  # checkpoint 3 triggered, never acknowledged: the coordinator "dies"
    assert triggers(first.executed) == [1, 2, 3]
    history = [*first.sent(), AcknowledgeCheckpoint(3, "a", 1, TaskSnapshot("h/a/3"))]

    second = Harness(tasks=["a"], store=store, history=history)
    assert second.start(10.0) == [
        Send(CheckpointAborted(3, "coordinator restarted")),
        CleanupCheckpoint(3, ("h/a/3",)),
    ]
    assert second.c.phase is JobPhase.RUNNING
    assert second.tick(11.0) == [Send(TriggerCheckpoint(4, 1, 11000))]


def test_a_lost_announcement_is_repeated_and_the_store_raises_the_next_id(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    h = Harness(tasks=["a"], store=store)
    h.start(0.0)
    h.tick(1.0)
    h.ack(1, "a", 1.1)
    # Crash between metadata and message: checkpoint 2's metadata exists, its
    # announcement (and even its trigger) never reached the topic.
    meta = h.c.latest_completed
    assert meta is not None
    write_metadata(store, "app", replace(meta, checkpoint_id=2))
    second = Harness(tasks=["a"], store=store, history=[Resume(0, {}), *h.sent()])
    assert second.start(5.0) == [Send(CheckpointCompleted(2, 0))]
    assert triggers(second.tick(6.0)) == [3]
    third = Harness(tasks=["a"], store=store, history=[*h.sent(), CheckpointCompleted(2, 0)])
    assert third.start(5.0) == []  # already announced: nothing repeated


def test_a_coordinator_restarted_during_a_restore_restores_again() -> None:
    history: list[Message] = [
        TriggerCheckpoint(4, 2, 0),
        CheckpointAborted(4, "x"),
        Restore(3, None),
    ]
    h = Harness(history=history)
    assert h.start(0.0) == []
    assert h.c.phase is JobPhase.SUSPENDED
    assert h.tick(0.5) == [Send(Restore(4, None))]
    h.send(TaskReady(4, "a", "w", 1), 0.6)
    h.send(TaskReady(4, "b", "w", 1), 0.7)
    assert triggers(h.tick(1.7)) == [5]


def test_an_unhandled_task_failure_in_the_history_causes_a_restore() -> None:
    history: list[Message] = [Resume(2, {"a": "w", "b": "w"}), TaskFailed("a", "w", 2, "boom")]
    h = Harness(history=history)
    h.start(0.0)
    assert h.c.failover.failure_reason == "task a failed on w: boom"
    assert h.tick(0.5) == [Send(Restore(3, None))]


# -- first start and ownership ------------------------------------------------------------


def test_a_job_that_never_ran_restores_and_resumes_every_task_before_any_trigger() -> None:
    h = Harness(tasks=["a", "b"], history=[])
    assert h.start(0.0) == []
    assert messages(h.tick(0.0)) == [Restore(1, None)]
    assert triggers(h.tick(2.0)) == []  # no trigger before every task is ready
    h.send(TaskReady(1, "a", "w1", 3), 2.1)
    assert messages(h.send(TaskReady(1, "b", "w2", 3), 2.2)) == [Resume(1, {"a": "w1", "b": "w2"})]
    assert triggers(h.tick(3.3)) == [1]
    assert h.c.failover.failure_reason == "job start"


def test_a_worker_that_does_not_run_exactly_its_owned_tasks_causes_a_failover() -> None:
    h2 = Harness(tasks=["a", "b"], history=[Resume(1, {"a": "w1", "b": "w2"})])
    h2.start(0.0)
    assert h2.send(Heartbeat("w2", ("b",), 4), 0.1) == []
    # A coordinator restarted after a rebalance sees no generation change, but w1
    # stopped its tasks: it must not go unnoticed.
    h2.send(Heartbeat("w1", (), 4), 0.1)
    assert h2.c.phase is JobPhase.SUSPENDED
    # Described as the normal rejoin it is, not as a mismatch.
    assert h2.c.failover.failure_reason == (
        "worker w1 no longer runs its tasks a of attempt 1 (the group rebalanced or the "
        "worker restarted): restoring them"
    )
    # A worker running tasks it does not own is a real mismatch.
    h3 = Harness(tasks=["a", "b"], history=[Resume(1, {"a": "w1", "b": "w2"})])
    h3.start(0.0)
    h3.send(Heartbeat("w1", ("a", "b"), 4), 0.1)
    assert h3.c.failover.failure_reason == (
        "worker w1 runs tasks ['a', 'b'] but owns ['a'] in attempt 1"
    )
