"""Window firings in slices (issue 13 point 7): a watermark step that makes many windows
due fires them a slice at a time (the task yields between slices), a checkpoint taken
between two slices holds exactly the windows not fired yet, and a task restored from it
finishes the firing — for every window kind the output is record for record that of
one unsliced firing, and what fired before the barrier is in the checkpoint's epoch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.api import Hopping, Session, Sliding, Topology, Tumbling, WindowSpec
from kstream.elements.events import Barrier, Watermark
from kstream.operators.firing import Budget
from kstream.plan import JobPlan, plan_job
from kstream.runtime import InternalEvent, InternalRecord, OutputEvent, SnapshotPoint, Task
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import DrivenTask, Kit

KEYS = 60
SLICE = 7  # windows per slice: 7 per Budget(max_items=7)

SPECS: dict[str, tuple[WindowSpec, int]] = {
    # (spec, allowed lateness): every kind, with and without lateness
    "tumbling": (Tumbling(100), 0),
    "tumbling-lateness": (Tumbling(100), 150),
    "hopping": (Hopping(100, 50), 0),
    "sliding": (Sliding(40), 0),
    "sliding-lateness": (Sliding(40), 120),
    "session": (Session(30), 0),
    "session-lateness": (Session(30), 100),
}


def _rows(first_ts: int) -> list[tuple[str, int, int]]:
    """KEYS keys, a few records each within [first_ts, first_ts + 300)."""
    return [
        (f"k{k:03d}", k, first_ts + (k * 37 + j * 91) % 300) for k in range(KEYS) for j in range(3)
    ]


def _feeds(kit: type[Kit]) -> list[list[Any]]:
    """Three feeds (out-of-orderness 1000 ms): many windows; a watermark jump to 1300,
    far past all of them; records after the jump — one late beyond any lateness, one
    late within it (a late firing), new windows."""
    a = _rows(0)
    b = [("zz", 1, 2300)]
    c = [("k002", 1, 50), ("k001", 1, 1210), *_rows(1300)]
    out, off = [], 0
    for rows in (a, b, c):
        out.append(kit.records(rows, first_offset=off))
        off += len(rows)
    return out


def _plan(kit: type[Kit], kind: str) -> JobPlan:
    spec, lateness = SPECS[kind]
    return kit.window_job(spec, allowed_lateness_ms=lateness, out_of_orderness_ms=1000)


def _budget() -> Budget:
    return Budget(60.0, max_items=SLICE)


def _reference(kit: type[Kit], plan: JobPlan) -> list[Any]:
    task = kit.task(plan)
    for batch in _feeds(kit):
        task.feed_source("events", 0, batch, 0.0)
    task.tick(0.0)
    return kit.sink(task.drain(), "out")


def _settle(task: DrivenTask, ticks: list[int]) -> None:
    """Tick until the firing in progress is done, counting the slices."""
    while task.firing:
        task.tick(0.0)
        ticks[0] += 1
    task.tick(0.0)


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_sliced_firing_yields_and_gives_the_unsliced_output(kit: type[Kit], kind: str) -> None:
    plan = _plan(kit, kind)
    expected = _reference(kit, plan)
    feeds = _feeds(kit)
    task = kit.task(plan, firing_budget=_budget())
    task.feed_source("events", 0, feeds[0], 0.0)
    assert not task.firing and kit.sink(task.drain(), "out") == []
    task.feed_source("events", 0, feeds[1], 0.0)  # the jump: a firing in slices starts
    assert task.firing
    first = kit.sink(task.drain(), "out")
    assert 0 < len(first) <= SLICE  # one slice
    assert task.paused_inputs() == {("events", 0)}
    task.feed_source("events", 0, feeds[2], 0.0)  # waits for the firing, in order
    assert kit.sink(task.drain(), "out") == []
    ticks = [0]
    _settle(task, ticks)
    assert not task.firing and task.paused_inputs() == frozenset()
    assert first + kit.sink(task.drain(), "out") == expected
    assert ticks[0] >= 3, "the firing took several slices"
    assert len(expected) > 3 * SLICE


def _backend(kind: str, tmp_path: Path, name: str) -> Any:
    return MemoryBackend() if kind == "memory" else RocksDBBackend(tmp_path / name)


@pytest.mark.parametrize("backend_kind", ["memory", "rocksdb"])
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_checkpoint_between_slices_restores_into_the_rest_of_the_firing(
    kit: type[Kit], tmp_path: Path, kind: str, backend_kind: str
) -> None:
    plan = _plan(kit, kind)
    expected = _reference(kit, plan)
    feeds = _feeds(kit)
    backend = _backend(backend_kind, tmp_path, "a0")
    saved: dict[str, Any] = {}

    def on_snapshot(p: SnapshotPoint) -> None:
        saved["point"] = p
        if isinstance(backend, MemoryBackend):
            saved["state"] = backend.snapshot()
        else:
            saved["state"] = backend.snapshot_sync(p.checkpoint_id or 0).directory

    task = kit.task(plan, backend=backend, on_snapshot=on_snapshot, firing_budget=_budget())
    task.feed_source("events", 0, feeds[0], 0.0)
    task.feed_source("events", 0, feeds[1], 0.0)
    task.tick(0.0)  # a second slice
    assert task.firing
    task.feed_source("events", 0, feeds[2], 0.0)  # waits for the firing
    task.trigger_checkpoint(1, 0, 0.0)  # goes in before the waiting records
    out = task.drain()
    at = next(i for i, o in enumerate(out) if isinstance(o, SnapshotPoint))
    epoch1 = kit.sink(out[:at], "out")
    point = saved["point"]
    assert point.positions == {("events", 0): len(feeds[0]) + len(feeds[1])}
    assert 0 < len(epoch1) < len(expected) and expected[: len(epoch1)] == epoch1
    # The forwarded barrier carries the watermark all windows fired up to (not the jump).
    (barrier,) = [o.event for o in out[at:] if isinstance(o, OutputEvent)]
    assert isinstance(barrier, Barrier) and barrier.timestamp < 1000
    assert task.firing  # the first attempt goes on; its output after the barrier is lost

    if isinstance(backend, MemoryBackend):
        restored_backend: Any = MemoryBackend.restore(saved["state"])
    else:
        backend.close()
        shutil.copytree(saved["state"], tmp_path / "restored" / "db")
        restored_backend = RocksDBBackend(tmp_path / "restored")
    restored = DrivenTask(
        Task(
            plan,
            "stage0-0",
            restored_backend,
            attempt=1,
            restore_positions=point.positions,
            firing_budget=_budget(),
        ),
        None,
    )
    assert restored.firing  # the firing's target is in the checkpoint
    restored.feed_source("events", 0, feeds[2], 0.0)  # read again from the position
    ticks = [0]
    _settle(restored, ticks)
    assert epoch1 + kit.sink(restored.drain(), "out") == expected
    assert ticks[0] >= 2


# ---- a task reading an internal topic --------------------------------------------------

TOPIC = "r.stage0.repartition"


def _internal_plan() -> JobPlan:
    t = Topology("r")
    (
        t.source("words", value_serde="str")
        .key_by(lambda w: w)
        .window(Tumbling(10))
        .count()
        .map(lambda r: [r.key, r.start, r.value])
        .to("out")
    )
    return plan_job(t, "r", {"words": 1})


def _rec(off: int, key: str, ts: int) -> InternalRecord:
    return InternalRecord("stage0-0", 0, off, json.dumps(key).encode(), b'"x"', ts)


def _ev(off: int, event: Any) -> InternalEvent:
    return InternalEvent("stage0-0", 0, off, event)


def test_an_internal_barrier_goes_in_mid_firing_only_at_the_head_of_its_channel(
    kit: type[Kit],
) -> None:
    words = [_rec(i, f"w{i:03d}", i % 50) for i in range(100)]  # 100 windows, ends <= 50
    head = [*words, _ev(100, Watermark(1000))]
    # (a) The barrier is next on its channel: it goes in between two slices.
    task = kit.task(_internal_plan(), "stage1-0", firing_budget=_budget())
    task.feed_internal(TOPIC, 0, head, 0.0)
    assert task.firing
    task.feed_internal(TOPIC, 0, [_ev(101, Barrier(1, 0, 1000))], 0.0)
    out = task.drain()
    points = [o for o in out if isinstance(o, SnapshotPoint)]
    assert [p.positions for p in points] == [{(TOPIC, 0): {"stage0-0": 102}}]
    assert task.firing
    # (b) A record came first: it waits for the firing, and the barrier behind it.
    task2 = kit.task(_internal_plan(), "stage1-0", firing_budget=_budget())
    task2.feed_internal(TOPIC, 0, head, 0.0)
    task2.feed_internal(TOPIC, 0, [_rec(101, "late", 5), _ev(102, Barrier(1, 0, 1000))], 0.0)
    first2 = task2.drain()
    assert not [o for o in first2 if isinstance(o, SnapshotPoint)]
    assert task2.paused_inputs() == {(TOPIC, 0)}
    _settle(task2, [0])
    out2 = first2 + task2.drain()
    assert [p.positions for p in out2 if isinstance(p, SnapshotPoint)] == [
        {(TOPIC, 0): {"stage0-0": 103}}
    ]
    assert task2.metrics["late_dropped"] == 1  # judged after the firing, as unsliced
    # Both give the unsliced output.
    ref = kit.task(_internal_plan(), "stage1-0")
    ref.feed_internal(TOPIC, 0, [*head, _rec(101, "late", 5)], 0.0)
    expected = kit.sink(ref.drain(), "out")
    assert len(expected) == 100 and ref.metrics["late_dropped"] == 1
    _settle(task, [0])
    assert kit.sink(out + task.drain(), "out") == expected
    assert kit.sink(out2, "out") == expected


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(sorted(SPECS)),
    slice_items=st.integers(1, 40),
    checkpoint_after=st.integers(0, 30),
)
def test_any_slice_size_and_checkpoint_point_give_the_unsliced_output(
    kind: str, slice_items: int, checkpoint_after: int
) -> None:
    plan = _plan(Kit, kind)
    expected = _reference(Kit, plan)
    feeds = _feeds(Kit)
    backend = MemoryBackend()
    saved: dict[str, Any] = {}

    def on_snapshot(p: SnapshotPoint) -> None:
        saved["point"], saved["state"] = p, backend.snapshot()

    budget = Budget(60.0, max_items=slice_items)
    task = Kit.task(plan, backend=backend, on_snapshot=on_snapshot, firing_budget=budget)
    for batch in feeds[:2]:
        task.feed_source("events", 0, batch, 0.0)
    for _ in range(checkpoint_after):
        if task.firing:
            task.tick(0.0)
    task.trigger_checkpoint(1, 0, 0.0)
    out = task.drain()
    at = next(i for i, o in enumerate(out) if isinstance(o, SnapshotPoint))
    before = Kit.sink(out[:at], "out")
    restored = DrivenTask(
        Task(
            plan,
            "stage0-0",
            MemoryBackend.restore(saved["state"]),
            attempt=1,
            restore_positions=saved["point"].positions,
            firing_budget=budget,
        ),
        None,
    )
    pos = saved["point"].positions[("events", 0)]
    assert pos == len(feeds[0]) + len(feeds[1])
    restored.feed_source("events", 0, feeds[2], 0.0)
    _settle(restored, [0])
    assert before + Kit.sink(restored.drain(), "out") == expected


class Timers:
    """An event timer per record at its value; the timer emits and registers another
    one 5 ms later for its first firing (a timer registered while firing, due)."""

    def process(self, key: str, value: int, ts: int, state: Any, out: Any) -> None:
        state.register_event_timer(value)

    def on_timer(self, key: str, at: int, state: Any, out: Any) -> None:
        n = state["n"].get(0) + 1
        state["n"].set(n)
        out([key, at, n])
        if n == 1:
            state.register_event_timer(at + 5)


def _timer_plan() -> JobPlan:
    from kstream.api import ValueState, WatermarkStrategy

    t = Topology("tm")
    (
        t.source("in", keyed=True, watermark=WatermarkStrategy(max_out_of_orderness_ms=5000))
        .process(Timers, state={"n": ValueState()})
        .to("out")
    )
    return plan_job(t, "tm", {"in": 1})


def test_event_timers_fire_in_slices_and_restore_mid_firing(kit: type[Kit]) -> None:
    # 1200 timers and 300 more registered while firing: timers fire 256 per state scan
    # (TIMER_BATCH), and a slice stops only between two scans.
    rows = [(f"k{i % 300:03d}", 100 + (i * 13) % 2000, i) for i in range(1200)]
    feeds = [kit.records(rows), kit.records([("far", 10**6, 9000)], first_offset=1200)]
    ref = kit.task(_timer_plan())
    for f in feeds:
        ref.feed_source("in", 0, f, 0.0)
    expected = kit.sink(ref.drain(), "out")
    assert len(expected) == 1500
    backend = MemoryBackend()
    saved: dict[str, Any] = {}

    def on_snapshot(p: SnapshotPoint) -> None:
        saved["point"], saved["state"] = p, backend.snapshot()

    task = kit.task(
        _timer_plan(), backend=backend, on_snapshot=on_snapshot, firing_budget=_budget()
    )
    for f in feeds:
        task.feed_source("in", 0, f, 0.0)
    task.tick(0.0)
    assert task.firing
    task.trigger_checkpoint(1, 0, 0.0)
    out = task.drain()
    at = next(i for i, o in enumerate(out) if isinstance(o, SnapshotPoint))
    before = kit.sink(out[:at], "out")
    assert 0 < len(before) < len(expected)
    ticks = [0]
    _settle(task, ticks)
    assert before + kit.sink(out[at + 1 :] + task.drain(), "out") == expected
    assert ticks[0] >= 3
    restored = DrivenTask(
        Task(
            _timer_plan(),
            "stage0-0",
            MemoryBackend.restore(saved["state"]),
            attempt=1,
            restore_positions=saved["point"].positions,
            firing_budget=_budget(),
        ),
        None,
    )
    assert restored.firing
    _settle(restored, [0])
    assert before + kit.sink(restored.drain(), "out") == expected
