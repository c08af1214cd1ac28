"""A second copy of an internal record or event (the idempotent producer wrote it twice:
same writer, same sequence number, a later offset) is dropped; nothing else is."""

from __future__ import annotations

import json

from kstream.elements.events import StreamEvent
from kstream.runtime import Barrier, InternalEvent, InternalRecord
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit
from tests.test_runtime_alignment import TOPIC, Snapshots, two_stage

WINDOW = "stage1.window0.acc"


def rec(up: str, off: int, word: str, seq: int | None, writer: str = "w1") -> InternalRecord:
    v = json.dumps(word).encode()
    return InternalRecord(up, 0, off, v, v, 100, None if seq is None else writer, seq)


def ev(up: str, off: int, event: StreamEvent, seq: int, writer: str = "w1") -> InternalEvent:
    return InternalEvent(up, 0, off, event, writer, seq)


def counts(state: dict) -> dict[str, int]:
    return {k[2]: v for k, v in state.get(WINDOW, {}).items()}


def test_a_second_copy_is_dropped_and_counted_once(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    task = kit.task(two_stage(partitions=1), "stage1-0", backend=backend)
    task.feed_internal(
        TOPIC,
        0,
        [rec("stage0-0", 0, "a", 0), rec("stage0-0", 1, "b", 1), rec("stage0-0", 2, "c", 2)],
        0.0,
    )
    # The producer's retry after a broker left: the batch of seq 1-2 again, then new ones.
    task.feed_internal(
        TOPIC,
        0,
        [rec("stage0-0", 3, "b", 1), rec("stage0-0", 4, "c", 2), rec("stage0-0", 5, "a", 3)],
        0.0,
    )
    assert counts(backend.snapshot()) == {"a": 2, "b": 1, "c": 1}
    assert task.metrics["duplicates_dropped"] == 2
    assert task.metrics["records_in"] == 4


def test_another_writer_of_the_same_task_counts_from_zero(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    task = kit.task(two_stage(partitions=1), "stage1-0", backend=backend)
    task.feed_internal(TOPIC, 0, [rec("stage0-0", 0, "a", 0), rec("stage0-0", 1, "a", 1)], 0.0)
    # The upstream task started again elsewhere (same attempt, no checkpoints): a new writer.
    task.feed_internal(
        TOPIC, 0, [rec("stage0-0", 2, "a", 0, "w2"), rec("stage0-0", 3, "a", 1, "w1")], 0.0
    )
    assert counts(backend.snapshot()) == {"a": 3}
    assert task.metrics["duplicates_dropped"] == 1  # w1's seq 1, again


def test_records_without_sequence_numbers_are_all_taken(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    task = kit.task(two_stage(partitions=1), "stage1-0", backend=backend)
    task.feed_internal(TOPIC, 0, [rec("stage0-0", i, "a", None) for i in range(3)], 0.0)
    assert counts(backend.snapshot()) == {"a": 3}
    assert task.metrics["duplicates_dropped"] == 0


def test_a_copy_that_arrives_while_its_first_waits_for_alignment_is_dropped(
    kit: type[Kit],
) -> None:
    backend = MemoryBackend()
    snaps = Snapshots(backend)
    task = kit.task(two_stage(), "stage1-0", backend=backend, on_snapshot=snaps)
    task.feed_internal(
        TOPIC,
        0,
        [
            rec("stage0-0", 0, "a", 0),
            ev("stage0-0", 1, Barrier(1, 0, 50), 1),
            rec("stage0-0", 2, "b", 2),  # after the barrier: waits in the buffer
            rec("stage0-0", 3, "b", 2),  # its copy: waits too
            rec("stage0-1", 4, "a", 0, "x1"),
        ],
        0.0,
    )
    assert snaps.points == []
    task.feed_internal(TOPIC, 0, [ev("stage0-1", 5, Barrier(1, 0, 50), 1, "x1")], 0.0)
    assert [p.checkpoint_id for p in snaps.points] == [1]
    assert counts(snaps.states[0]) == {"a": 2}
    assert counts(backend.snapshot()) == {"a": 2, "b": 1}  # the buffer replayed once
    assert task.metrics["duplicates_dropped"] == 1
    # The dropped copy is consumed: the next snapshot resumes after it.
    task.feed_internal(TOPIC, 0, [ev("stage0-0", 6, Barrier(2, 0, 60), 3)], 0.0)
    task.feed_internal(TOPIC, 0, [ev("stage0-1", 7, Barrier(2, 0, 60), 2, "x1")], 0.0)
    assert snaps.points[-1].positions == {(TOPIC, 0): {"stage0-0": 7, "stage0-1": 8}}


def test_a_second_copy_of_a_barrier_does_not_hold_the_next_checkpoint(kit: type[Kit]) -> None:
    backend = MemoryBackend()
    snaps = Snapshots(backend)
    task = kit.task(two_stage(), "stage1-0", backend=backend, on_snapshot=snaps)
    task.feed_internal(
        TOPIC,
        0,
        [ev("stage0-0", 0, Barrier(1, 0, 50), 0), ev("stage0-1", 1, Barrier(1, 0, 50), 0, "x1")],
        0.0,
    )
    task.feed_internal(TOPIC, 0, [ev("stage0-0", 2, Barrier(1, 0, 50), 0)], 0.0)  # a copy
    assert task.paused_inputs() == frozenset()
    task.feed_internal(
        TOPIC,
        0,
        [ev("stage0-0", 3, Barrier(2, 0, 60), 1), ev("stage0-1", 4, Barrier(2, 0, 60), 1, "x1")],
        0.0,
    )
    assert [p.checkpoint_id for p in snaps.points] == [1, 2]
    assert task.metrics["duplicates_dropped"] == 1
    assert task.metrics["stale_barriers"] == 0
