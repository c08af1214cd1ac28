"""Restore: a task rebuilt from a snapshot, its positions and a new attempt gives
the same result as a run without failure (exactly-once state)."""

from __future__ import annotations

from typing import Any

from kstream.api import Topology, Tumbling
from kstream.plan import JobPlan, plan_job
from kstream.runtime import (
    MIN_TS,
    Barrier,
    EndOfInput,
    InternalEvent,
    InternalRecord,
    Output,
    OutputBatch,
    SnapshotPoint,
    Watermark,
)
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit

TOPIC = "r.stage0.repartition"


def plan() -> JobPlan:
    t = Topology("r")
    (
        t.source("words", value_serde="str")
        .key_by(lambda w: w)
        .window(Tumbling(1000))
        .count()
        .map(lambda r: [r.key, r.start, r.value])
        .to("out")
    )
    return plan_job(t, "r", {"words": 2})


def keys_to(outputs: list[Output], topic: str) -> list[bytes | None]:
    return [k for o in outputs if isinstance(o, OutputBatch) and o.topic == topic for k in o.keys]


def rec(up: str, attempt: int, off: int, ts: int) -> InternalRecord:
    return InternalRecord(up, attempt, off, b'"a"', b'"a"', ts)


def test_restored_task_matches_the_failure_free_run(kit: type[Kit]) -> None:
    log = [
        rec("stage0-0", 0, 0, 100),
        rec("stage0-1", 0, 1, 200),
        InternalEvent("stage0-0", 0, 2, Barrier(1, 0, 0)),
        rec("stage0-0", 0, 3, 300),  # after stage0-0's barrier: not in checkpoint 1
        rec("stage0-1", 0, 4, 400),
        InternalEvent("stage0-1", 0, 5, Barrier(1, 0, 0)),
        rec("stage0-1", 0, 6, 500),  # attempt 0 fails here
    ]
    backend = MemoryBackend()
    saved: list[tuple[SnapshotPoint, dict]] = []
    task = kit.task(
        plan(),
        "stage1-0",
        backend=backend,
        on_snapshot=lambda p: saved.append((p, backend.snapshot())),
    )
    task.feed_internal(TOPIC, 0, log, 0.0)
    ((point, state),) = saved
    assert point.positions == {(TOPIC, 0): {"stage0-0": 3, "stage0-1": 6}}

    # Attempt 1: upstream tasks were rolled back too and write their output again.
    log += [
        rec("stage0-0", 1, 7, 300),
        rec("stage0-1", 1, 8, 500),
        InternalEvent("stage0-0", 1, 9, EndOfInput()),
        InternalEvent("stage0-1", 1, 10, EndOfInput()),
    ]
    restored = kit.task(
        plan(),
        "stage1-0",
        backend=MemoryBackend.restore(state),
        attempt=1,
        restore_positions=point.positions,
        restore_watermarks=point.watermarks,
    )
    seek = restored.seek_positions()[(TOPIC, 0)]
    assert seek == 3
    restored.feed_internal(TOPIC, 0, log[seek:], 0.0)
    assert kit.sink(restored.drain(), "out") == [("a", ["a", 0, 5], 999)]
    assert restored.metrics["stale_dropped"] == 2  # offsets 3 and 6 of attempt 0
    assert restored.metrics["restored_skipped"] == 2  # offsets 4 and 5: in the snapshot

    # The failure-free run, for reference.
    clean = kit.task(plan(), "stage1-0")
    clean.feed_internal(
        TOPIC,
        0,
        [
            *log[:7],
            InternalEvent("stage0-0", 0, 7, EndOfInput()),
            InternalEvent("stage0-1", 0, 8, EndOfInput()),
        ],
        0.0,
    )
    assert kit.sink(clean.drain(), "out") == [("a", ["a", 0, 5], 999)]


def test_restored_window_watermark_does_not_refire(kit: type[Kit]) -> None:
    t = Topology("w")
    t.source("in", keyed=True).window(Tumbling(10)).count().map(
        lambda r: [r.key, r.start, r.value]
    ).to("out")
    p = plan_job(t, "w", {"in": 1})
    backend = MemoryBackend()
    task = kit.task(p, backend=backend)
    task.feed_source("in", 0, [(b"k", b"0", 5, 0), (b"k", b"0", 25, 1)], 0.0)
    assert kit.sink(task.drain(), "out") == [("k", ["k", 0, 1], 9)]
    task.trigger_checkpoint(1, 0, 0.0)
    (point,) = [o for o in task.drain() if isinstance(o, SnapshotPoint)]
    restored = kit.task(
        p,
        backend=MemoryBackend.restore(backend.snapshot()),
        attempt=1,
        restore_positions=point.positions,
        restore_watermarks=point.watermarks,
    )
    assert restored.seek_positions() == {("in", 0): 2}
    # A replayed record behind the restored operator watermark is late, not a new window.
    restored.feed_source("in", 0, [(b"k", b"0", 7, 2), (b"k", b"0", 26, 3)], 0.0)
    restored.end_input("in", 0, 0.0)
    assert kit.sink(restored.drain(), "out") == [("k", ["k", 20, 2], 29)]
    assert restored.metrics["late_dropped"] == 1


def test_a_rewound_consumer_never_makes_a_task_process_an_offset_twice(kit: type[Kit]) -> None:
    """integration/test_bounded_run.py's re-count: the worker seeks a freshly assigned
    partition to its restored position, then librdkafka's own start-offset lookup
    resets the fetch to the earliest offset, so records below the position arrive
    again — even inside one batch. The task skips every offset it already holds."""
    # Source side: restored at offset 2 of "words"[0].
    source = kit.task(plan(), "stage0-0", restore_positions={("words", 0): 2})
    words = [(None, w.encode(), 100, off) for off, w in enumerate(["x", "y", "a", "b"])]
    source.feed_source("words", 0, [words[2], words[0], words[1], words[2], words[3]], 0.0)
    source.feed_source("words", 0, words, 0.0)
    assert keys_to(source.drain(), TOPIC) == [b'"a"', b'"b"']
    assert source.metrics["restored_skipped"] == 3 + 4
    # Internal side: per upstream, below each one's position.
    task = kit.task(
        plan(), "stage1-0", restore_positions={(TOPIC, 0): {"stage0-0": 1, "stage0-1": 2}}
    )
    log = [rec("stage0-0", 0, 0, 100), rec("stage0-1", 0, 1, 200), rec("stage0-0", 0, 2, 300)]
    end = [
        InternalEvent("stage0-0", 0, 3, EndOfInput()),
        InternalEvent("stage0-1", 0, 4, EndOfInput()),
    ]
    task.feed_internal(TOPIC, 0, [log[2], *log, *end], 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1], 999)]
    assert task.metrics["restored_skipped"] == 3


def test_a_bounded_task_ignores_input_after_its_end(kit: type[Kit]) -> None:
    """Records fetched past a bounded run's end offsets are the next run's input."""
    task = kit.task(plan(), "stage0-0", bounded=True)
    task.feed_source("words", 0, [(None, b"a", 100, 0)], 0.0)
    task.end_input("words", 0, 0.0)
    task.feed_source("words", 0, [(None, b"b", 100, 1)], 0.0)
    outs = task.drain()
    assert keys_to(outs, TOPIC) == [b'"a"']
    (final,) = [o for o in outs if isinstance(o, SnapshotPoint)]
    assert final.positions == {("words", 0): 1}


def test_a_restored_task_resumes_its_input_watermarks(kit: type[Kit]) -> None:
    """Input watermarks are part of the snapshot: after a restore, a record read again is
    judged against the watermarks the failure-free run had there, not fresh ones."""
    backend = MemoryBackend()
    states: list[dict] = []
    task = kit.task(
        plan(),
        "stage1-0",
        backend=backend,
        on_snapshot=lambda _p: states.append(backend.snapshot()),
    )
    before = [
        InternalEvent("stage0-0", 0, 0, Watermark(2500)),
        InternalEvent("stage0-0", 0, 1, Barrier(1, 0, MIN_TS)),
        InternalEvent("stage0-1", 0, 2, Barrier(1, 0, MIN_TS)),
    ]
    after = [
        InternalEvent("stage0-1", 0, 3, Watermark(3000)),  # the task watermark: 2500
        rec("stage0-0", 0, 4, 500),  # its window [0, 1000) ended: late
        InternalEvent("stage0-0", 0, 5, EndOfInput()),
        InternalEvent("stage0-1", 0, 6, EndOfInput()),
    ]
    task.feed_internal(TOPIC, 0, before + after, 0.0)
    (point,) = [o for o in task.drain() if isinstance(o, SnapshotPoint)]
    assert task.metrics["late_dropped"] == 1
    restored = kit.task(
        plan(), "stage1-0", backend=MemoryBackend.restore(states[0]), attempt=1,
        restore_positions=point.positions,
        restore_watermarks=point.watermarks,
    )  # fmt: skip
    restored.feed_internal(TOPIC, 0, [replace_attempt(i, 1) for i in after], 0.0)
    assert kit.sink(restored.drain(), "out") == []
    assert restored.metrics["late_dropped"] == 1


def replace_attempt(item: Any, attempt: int) -> Any:
    return item._replace(attempt=attempt)


def test_a_stateless_task_snapshot_writes_nothing_to_its_state(kit: type[Kit]) -> None:
    """The input watermarks travel with the snapshot point (the manifest): a stateless
    task's snapshot leaves its state untouched, so a RocksDB checkpoint of it makes no
    new file (each used to add an SST and grow the manifest, ~5 KB per checkpoint)."""
    backend = MemoryBackend()
    task = kit.task(plan(), "stage0-0", backend=backend)
    task.feed_source("words", 0, [(None, b"a", 500, 0), (None, b"b", 900, 1)], 0.0)
    task.drain()
    before = backend.snapshot()
    task.trigger_checkpoint(1, 0, 0.0)
    (point,) = [o for o in task.drain() if isinstance(o, SnapshotPoint)]
    assert point.watermarks == {("words", 0, ""): 900} and point.positions == {("words", 0): 2}
    assert backend.snapshot() == before
