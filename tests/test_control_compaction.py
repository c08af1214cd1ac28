"""A compacted control topic holds everything a starting process needs (issue 13 point 8):
the newest record per key (``record_key``) gives the coordinator's recovery and the
worker's history the same answers as the whole topic."""

from __future__ import annotations

import random
from typing import Any

import pytest

from kstream.checkpointstorage.metadata import TaskSnapshot
from kstream.protocol.messages import (
    AcknowledgeCheckpoint,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointRequest,
    Heartbeat,
    Message,
    Restore,
    Resume,
    TaskFailed,
    TaskReady,
    TriggerCheckpoint,
    record_key,
)
from kstream.protocol.recovery import recover
from kstream.protocol.worker import WorkerProtocol

TASKS = ("stage0-0", "stage0-1", "stage1-0")


def _history(rng: random.Random, *, ends_with: str) -> list[Message]:
    out: list[Message] = []
    n, attempt = 0, 0
    for _ in range(rng.randrange(3, 8)):  # restarts
        attempt += 1
        out.append(Restore(attempt, n or None))
        out += [TaskReady(attempt, t, "w1", attempt) for t in TASKS]
        out.append(Resume(attempt, {t: "w1" for t in TASKS}))
        for _ in range(rng.randrange(5, 40)):  # checkpoints, heartbeats in between
            n += 1
            out += [Heartbeat("w1", TASKS, attempt) for _ in range(rng.randrange(0, 5))]
            out.append(TriggerCheckpoint(n, attempt, n * 1000))
            out += [
                AcknowledgeCheckpoint(n, t, attempt, TaskSnapshot(f"app/tasks/{t}/chk-{n}.json"))
                for t in TASKS
            ]
            if rng.random() < 0.2:
                out.append(CheckpointAborted(n, "timeout"))
            else:
                out.append(CheckpointCompleted(n, attempt))
            if rng.random() < 0.1:
                out.append(CheckpointRequest("w1", attempt, "idle"))
        out.append(TaskFailed("stage1-0", "w1", attempt, "boom"))
    if ends_with == "in_flight":
        n += 1
        out += [
            TriggerCheckpoint(n, attempt, 0),
            AcknowledgeCheckpoint(n, "stage0-0", attempt, TaskSnapshot("h")),
        ]
    elif ends_with == "restoring":
        out.append(Restore(attempt + 1, n))
    return out


def _compacted(history: list[Message]) -> list[Message]:
    """What Kafka's log compaction leaves: the newest record per key, in log order."""
    last = {record_key(m): i for i, m in enumerate(history)}
    return [m for i, m in enumerate(history) if last[record_key(m)] == i]


@pytest.mark.parametrize("ends_with", ["resumed", "in_flight", "restoring"])
@pytest.mark.parametrize("seed", range(5))
def test_the_newest_record_per_key_recovers_the_same_state(seed: int, ends_with: str) -> None:
    full = _history(random.Random(seed), ends_with=ends_with)
    small = _compacted(full)
    assert len(small) <= 9 + 5 * len(TASKS)  # bounded by keys, not by the job's age
    assert len(full) > 3 * len(small)
    completed = sorted(m.checkpoint_id for m in full if isinstance(m, CheckpointCompleted))
    a, b = recover(full, completed, None), recover(small, completed, None)
    fields: list[Any] = ["max_checkpoint_id", "attempt", "last_lifecycle", "announced_id"]
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]
    assert (a.unhandled_failure, a.owners, a.in_flight) == (
        b.unhandled_failure,
        b.owners,
        b.in_flight,
    )
    w1, w2 = WorkerProtocol("w", now=0.0), WorkerProtocol("w", now=0.0)
    w1.learn(full)
    w2.learn(small)
    assert (w1.attempt, w1.restore_point, w1.restoring) == (
        w2.attempt,
        w2.restore_point,
        w2.restoring,
    )
