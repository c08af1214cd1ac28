"""Barrier alignment, barriers as watermarks, snapshot points, stale attempts,
restore filtering, dead letters, idleness and periodic watermarks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.elements.events import StreamEvent
from kstream.plan import JobPlan, plan_job
from kstream.runtime import (
    AlignmentAborted,
    Barrier,
    DeadLetter,
    EndOfInput,
    InternalEvent,
    InternalRecord,
    Output,
    OutputBatch,
    OutputEvent,
    PipelinedEventError,
    SnapshotPoint,
    Watermark,
)
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit

TOPIC = "j.stage0.repartition"
WIN = ("stage1.window0.acc", (1000, 0, "a"))


def two_stage(partitions: int = 2, idle_timeout_s: float | None = None) -> JobPlan:
    t = Topology("j")
    (
        t.source("words", value_serde="str", watermark=WatermarkStrategy(0, idle_timeout_s))
        .key_by(lambda w: w)
        .window(Tumbling(1000))
        .count()
        .map(lambda r: [r.key, r.start, r.value])
        .to("out")
    )
    return plan_job(t, "j", {"words": partitions})


def rec(up: str, off: int, word: str, ts: int, attempt: int = 0) -> InternalRecord:
    return InternalRecord(
        up, attempt, off, json.dumps(word).encode(), json.dumps(word).encode(), ts
    )


def ev(up: str, off: int, event: StreamEvent, attempt: int = 0) -> InternalEvent:
    return InternalEvent(up, attempt, off, event)


class Snapshots:
    """Captures the state at each snapshot point (what the worker would persist)."""

    def __init__(self, backend: MemoryBackend) -> None:
        self.backend = backend
        self.points: list[SnapshotPoint] = []
        self.states: list[dict] = []

    def __call__(self, point: SnapshotPoint) -> None:
        self.points.append(point)
        self.states.append(self.backend.snapshot())


def acc(state: dict) -> int | None:
    return state.get(WIN[0], {}).get(WIN[1])


def test_skewed_upstreams_post_barrier_records_wait_for_the_snapshot(kit: type[Kit]) -> None:
    plan = two_stage()
    backend = MemoryBackend()
    snaps = Snapshots(backend)
    task = kit.task(plan, "stage1-0", backend=backend, on_snapshot=snaps)
    # stage0-0 is fast: its barrier and a post-barrier record arrive first.
    task.feed_internal(
        TOPIC,
        0,
        [
            rec("stage0-0", 0, "a", 100),
            ev("stage0-0", 1, Barrier(1, 0, 500)),
            rec("stage0-0", 2, "a", 200),
            rec("stage0-1", 3, "a", 150),
        ],
        0.0,
    )
    assert snaps.points == []
    assert task.paused_inputs() == frozenset()  # stage0-1 must still deliver: keep reading
    task.feed_internal(
        TOPIC, 0, [rec("stage0-1", 4, "a", 300), ev("stage0-1", 5, Barrier(1, 0, 400))], 0.0
    )
    assert len(snaps.points) == 1
    assert snaps.points[0].checkpoint_id == 1
    assert snaps.points[0].positions == {(TOPIC, 0): {"stage0-0": 2, "stage0-1": 6}}
    assert acc(snaps.states[0]) == 3  # 100, 150, 300 - not the post-barrier 200
    assert acc(backend.snapshot()) == 4  # replayed right after the snapshot
    out = task.drain()
    assert kit.trace(out) == ["snapshot:1", "event:out:Barrier"]
    assert out[1] == OutputEvent("out", False, Barrier(1, 0, 400))


def test_single_upstream_partition_is_paused_until_aligned(kit: type[Kit]) -> None:
    plan = two_stage(partitions=1)
    task = kit.task(plan, "stage1-0")
    task.feed_internal(TOPIC, 0, [ev("stage0-0", 0, Barrier(3, 0, 10))], 0.0)
    assert task.paused_inputs() == frozenset()  # one upstream: aligned at once
    assert kit.trace(task.drain()) == ["snapshot:3", "event:out:Barrier"]


def test_barrier_timestamps_fire_windows_before_the_snapshot(kit: type[Kit]) -> None:
    plan = two_stage()
    backend = MemoryBackend()
    snaps = Snapshots(backend)
    task = kit.task(plan, "stage1-0", backend=backend, on_snapshot=snaps)
    task.feed_internal(
        TOPIC,
        0,
        [
            rec("stage0-0", 0, "a", 100),
            ev("stage0-0", 1, Barrier(1, 0, 1200)),
            rec("stage0-0", 2, "a", 700),  # after the barrier: window [0,1000) fires first
            rec("stage0-1", 3, "a", 150),
            ev("stage0-1", 4, Barrier(1, 0, 1000)),
        ],
        0.0,
    )
    out = task.drain()
    assert kit.trace(out) == ["data:out:1", "snapshot:1", "event:out:Barrier"]
    assert kit.sink(out, "out") == [("a", ["a", 0, 2], 999)]
    assert out[2] == OutputEvent("out", False, Barrier(1, 0, 1000))
    assert task.watermark == 1000
    assert task.metrics["late_dropped"] == 1  # the replayed 700 is behind barrier time


def test_newer_barrier_aborts_unaligned_checkpoint(kit: type[Kit]) -> None:
    plan = two_stage()
    snaps = Snapshots(MemoryBackend())
    task = kit.task(plan, "stage1-0", on_snapshot=snaps)
    task.feed_internal(TOPIC, 0, [ev("stage0-0", 0, Barrier(1, 0, 0))], 0.0)
    task.feed_internal(TOPIC, 0, [ev("stage0-1", 1, Barrier(2, 0, 0))], 0.0)
    out = task.drain()
    assert len(out) == 1 and isinstance(out[0], AlignmentAborted) and out[0].checkpoint_id == 1
    task.feed_internal(TOPIC, 0, [ev("stage0-0", 2, Barrier(2, 0, 0))], 0.0)
    assert [p.checkpoint_id for p in snaps.points] == [2]


def test_source_task_trigger_records_positions_and_forwards_barrier(kit: type[Kit]) -> None:
    plan = two_stage()
    task = kit.task(plan, "stage0-1")
    task.feed_source("words", 1, [(None, b"a", 500, 40), (None, b"b", 800, 41)], 0.0)
    task.drain()
    task.trigger_checkpoint(7, 0, 0.0)
    out = task.drain()
    assert out == [
        # The input watermarks are part of the snapshot (the partition's, 800 here).
        SnapshotPoint("stage0-1", 7, 0, {("words", 1): 42}, watermarks={("words", 1, ""): 800}),
        OutputEvent(TOPIC, True, Barrier(7, 0, 800)),
    ]


def test_stale_attempt_records_are_dropped(kit: type[Kit]) -> None:
    plan = two_stage(partitions=1)
    backend = MemoryBackend()
    task = kit.task(plan, "stage1-0", backend=backend, attempt=2)
    task.feed_internal(
        TOPIC,
        0,
        [rec("stage0-0", 0, "a", 1, attempt=1), rec("stage0-0", 1, "a", 2, attempt=2)],
        0.0,
    )
    assert task.metrics["stale_dropped"] == 1
    assert acc(backend.snapshot()) == 1


def test_restore_skips_each_upstreams_records_below_its_barrier_offset(kit: type[Kit]) -> None:
    plan = two_stage()
    backend = MemoryBackend()
    task = kit.task(
        plan,
        "stage1-0",
        backend=backend,
        restore_positions={(TOPIC, 0): {"stage0-0": 5, "stage0-1": 3}},
    )
    assert task.seek_positions() == {(TOPIC, 0): 3}
    task.feed_internal(
        TOPIC,
        0,
        [
            rec("stage0-0", 3, "a", 1),  # in the restored state already
            rec("stage0-1", 4, "a", 1),
            rec("stage0-0", 5, "a", 1),
        ],
        0.0,
    )
    assert task.metrics["restored_skipped"] == 1
    assert acc(backend.snapshot()) == 2


def test_undecodable_records_become_dead_letters(kit: type[Kit]) -> None:
    t = Topology("d")
    t.source("in", keyed=True).window(Tumbling(10)).count().to("out")
    plan = plan_job(t, "d", {"in": 1})
    task = kit.task(plan)
    task.feed_source(
        "in", 0, [(b"k", b"1", 1, 10), (b"k", b"{nope", 2, 11), (b"k", b"2", 3, 12)], 0
    )
    out = task.drain()
    assert [o for o in out if isinstance(o, DeadLetter)] == [
        DeadLetter(
            "in",
            0,
            11,
            "invalid JSON: Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1)",
            b"k",
            b"{nope",
            2,  # the record's timestamp travels to the ks.timestamp header
        )
    ]
    task.end_input("in", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("k", ["k", 0, 10, 2], 9)]


def test_idle_upstream_does_not_stall_the_watermark(kit: type[Kit]) -> None:
    plan = two_stage(idle_timeout_s=5.0)
    task = kit.task(plan, "stage1-0", watermark_interval_s=0.0)
    task.feed_internal(
        TOPIC, 0, [rec("stage0-0", 0, "a", 100), ev("stage0-0", 1, Watermark(2000))], 1.0
    )
    assert kit.sink(task.drain(), "out") == []  # stage0-1 said nothing yet, not idle yet
    task.tick(4.9)
    assert kit.sink(task.drain(), "out") == []
    task.tick(5.0)  # stage0-1 idle for 5 s: only stage0-0 counts
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1], 999)]
    assert task.watermark == 2000


def test_without_idleness_a_silent_upstream_holds_the_watermark(kit: type[Kit]) -> None:
    plan = two_stage()
    task = kit.task(plan, "stage1-0")
    task.feed_internal(
        TOPIC, 0, [rec("stage0-0", 0, "a", 100), ev("stage0-0", 1, Watermark(2000))], 1.0
    )
    task.tick(1000.0)
    assert kit.sink(task.drain(), "out") == []
    task.feed_internal(TOPIC, 0, [ev("stage0-1", 2, Watermark(1500))], 1000.0)
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1], 999)]


def test_watermarks_follow_the_data_and_the_interval_covers_the_rest(kit: type[Kit]) -> None:
    """Downstream keeps up with the data: a Watermark follows every batch written to an
    internal topic and precedes a record that was behind the watermark; without data,
    progress (here: an idle partition) is sent every watermark_interval_s."""
    task = kit.task(two_stage(idle_timeout_s=5.0), "stage0-0", watermark_interval_s=1.0)

    def events(outputs: list[Output]) -> list[Any]:
        out: list[Any] = []
        for o in outputs:
            if isinstance(o, OutputEvent):
                assert isinstance(o.event, Watermark | Barrier)
                out.append(o.event.timestamp)
            elif isinstance(o, OutputBatch) and o.topic == TOPIC:
                out.append(list(o.timestamps))
        return out

    task.feed_source("words", 0, [(None, b"a", 100, 0)], 0.5)
    assert events(task.drain()) == [[100], 100]
    task.feed_source(
        "words", 0, [(None, b"a", 300, 1), (None, b"b", 50, 2), (None, b"c", 400, 3)], 0.6
    )
    assert events(task.drain()) == [[300], 300, [50, 400], 400]
    task.tick(3.0)
    assert events(task.drain()) == []  # the watermark did not move


def test_bounded_task_fails_fast_on_a_barrier(kit: type[Kit]) -> None:
    plan = two_stage()
    task = kit.task(plan, "stage1-0", bounded=True)
    with pytest.raises(PipelinedEventError) as err:
        task.feed_internal(TOPIC, 0, [ev("stage0-1", 9, Barrier(4, 0, 0))], 0.0)
    msg = str(err.value)
    assert "Barrier(checkpoint_id=4, attempt=0, timestamp=0)" in msg
    assert f"{TOPIC}[0]" in msg and "stage1-0" in msg and "bounded" in msg


def test_bounded_source_task_refuses_a_checkpoint_trigger(kit: type[Kit]) -> None:
    plan = two_stage()
    task = kit.task(plan, "stage0-1", bounded=True)
    with pytest.raises(PipelinedEventError, match=r"words\[1\]"):
        task.trigger_checkpoint(1, 0, 0.0)


def test_end_of_input_from_every_upstream_fires_all_and_hands_over_state(kit: type[Kit]) -> None:
    plan = two_stage()
    snaps = Snapshots(MemoryBackend())
    task = kit.task(plan, "stage1-0", bounded=True, on_snapshot=snaps)
    task.feed_internal(
        TOPIC,
        0,
        [
            rec("stage0-0", 0, "a", 100),
            ev("stage0-0", 1, EndOfInput()),
            rec("stage0-1", 2, "a", 5000),
            ev("stage0-1", 3, EndOfInput()),
        ],
        0.0,
    )
    out = task.drain()
    assert kit.sink(out, "out") == [("a", ["a", 0, 1], 999), ("a", ["a", 5000, 1], 5999)]
    assert kit.trace(out)[-2:] == ["event:out:EndOfInput", "snapshot:None"]
    assert len(snaps.points) == 1 and snaps.points[0].final
    assert task.finished
