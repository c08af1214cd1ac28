"""Keyed process functions: state handles, TTL, event- and processing-time timers,
restore (timers fire exactly once across a checkpoint), and the three examples
against their ``expected_output``."""

from __future__ import annotations

import json
import random
import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest

from kstream.api import KeyedStream, ListState, MapState, Topology, ValueState, WatermarkStrategy
from kstream.plan import JobPlan, PlanError, plan_job
from kstream.runtime import SnapshotPoint, Task
from kstream.runtime.local import run_bounded
from kstream.state.memory import MemoryBackend
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def job(fn: Any, state: dict[str, Any] | None = None, ooo: int = 0) -> JobPlan:
    t = Topology("p")
    (
        t.source("in", keyed=True, watermark=WatermarkStrategy(max_out_of_orderness_ms=ooo))
        .process(fn, state=state)
        .to("out")
    )
    return plan_job(t, "p", {"in": 1})


class Recorder:
    """Emits what happens, registers a timer at ``value`` ms per record (event time by
    default, processing time for values ``{"pt": ms}``), deletes on ``{"del": ms}``."""

    def process(self, key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        state["n"].set(state["n"].get(0) + 1)
        if isinstance(value, dict) and "pt" in value:
            state.register_processing_timer(value["pt"])
        elif isinstance(value, dict) and "del" in value:
            state.delete_event_timer(value["del"])
        else:
            state.register_event_timer(value)
        out(["rec", value, state["n"].get()])

    def on_timer(self, key: Any, at: int, state: Any, out: Any) -> None:
        out([state.time_domain, at, state["n"].get()])
        if at == 5000:  # a timer registered while firing, already due: same pass
            state.register_event_timer(4000)


def test_event_timers_fire_in_order_once_per_key_and_time(kit: type[Kit]) -> None:
    task = kit.task(job(Recorder, {"n": ValueState()}))
    rows = [
        ("a", 3000, 10),
        ("b", 2000, 20),
        ("a", 3000, 30),
        ("a", 5000, 40),
        ("b", {"del": 2000}, 50),
    ]
    task.feed_source("in", 0, kit.records(rows), 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["rec", 3000, 1], 10),
        ("b", ["rec", 2000, 1], 20),
        ("a", ["rec", 3000, 2], 30),
        ("a", ["rec", 5000, 3], 40),
        ("b", ["rec", {"del": 2000}, 2], 50),
    ]
    task.feed_source("in", 0, kit.records([("c", 10**9, 6000)], 5), 0.0)  # watermark 6000
    assert kit.sink(task.drain(), "out") == [
        ("c", ["rec", 10**9, 1], 6000),
        ("a", ["event", 3000, 3], 3000),  # one timer for two registrations
        ("a", ["event", 5000, 3], 5000),
        ("a", ["event", 4000, 3], 4000),  # registered by the 5000 timer, already due
    ]
    task.feed_source("in", 0, kit.records([("c", 10**9, 7000)], 6), 0.0)
    assert kit.sink(task.drain(), "out") == [("c", ["rec", 10**9, 2], 7000)]


def test_processing_timers_fire_on_the_wall_clock(kit: type[Kit]) -> None:
    task = kit.task(job(Recorder, {"n": ValueState()}))
    task.feed_source(
        "in", 0, kit.records([("a", {"pt": 1_000_500}, 1), ("b", {"pt": 1_000_100}, 2)]), 0.0
    )
    task.drain()
    task.tick(1.0, wall_ms=1_000_099)
    assert kit.sink(task.drain(), "out") == []
    task.tick(2.0, wall_ms=1_000_500)
    assert kit.sink(task.drain(), "out") == [
        ("b", ["processing", 1_000_100, 1], 1_000_100),
        ("a", ["processing", 1_000_500, 1], 1_000_500),
    ]
    task.tick(3.0, wall_ms=2_000_000)
    assert kit.sink(task.drain(), "out") == []


def test_state_handles_value_map_list(kit: type[Kit]) -> None:
    def fn(key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        m, lst, v = state["m"], state["l"], state["v"]
        m.put(value, ts)
        lst.append(value)
        v.set({"last": value})
        if value == "x":
            m.delete("a")
        out([m.items(), m.contains("a"), lst.get(), v.get()])
        if value == "clear":
            m.clear()
            lst.clear()
            v.clear()
            out([m.items(), lst.get(), v.get("gone")])

    task = kit.task(job(fn, {"m": MapState(), "l": ListState(), "v": ValueState()}))
    task.feed_source(
        "in", 0, kit.records([("k", "b", 1), ("k", "a", 2), ("j", "a", 3), ("k", "x", 4)]), 0
    )
    task.feed_source("in", 0, kit.records([("k", "clear", 5)], 4), 0)
    assert [v for _k, v, _t in kit.sink(task.drain(), "out")] == [
        [[["b", 1]], False, ["b"], {"last": "b"}],
        [[["a", 2], ["b", 1]], True, ["b", "a"], {"last": "a"}],
        [[["a", 3]], True, ["a"], {"last": "a"}],
        [[["b", 1], ["x", 4]], False, ["b", "a", "x"], {"last": "x"}],
        [[["b", 1], ["clear", 5], ["x", 4]], False, ["b", "a", "x", "clear"], {"last": "clear"}],
        [[], [], "gone"],
    ]


def test_ttl_is_event_time_and_sweeps_expired_entries(kit: type[Kit]) -> None:
    def fn(key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        if value == "w":
            state["v"].set(ts)
            state["m"].put("x", ts)
        out([state["v"].get(), state["m"].items()])

    backend = MemoryBackend()
    task = kit.task(
        job(fn, {"v": ValueState(ttl_ms=1000), "m": MapState(ttl_ms=1000)}), backend=backend
    )
    task.feed_source("in", 0, kit.records([("k", "w", 100), ("k", "r", 1099)]), 0)  # wm 1099
    task.feed_source("in", 0, kit.records([("k", "r", 1100)], 2), 0)  # read at wm 1099: alive
    task.feed_source("in", 0, kit.records([("k", "r", 1101)], 3), 0)  # read at wm 1100: expired
    assert [v for _k, v, _t in kit.sink(task.drain(), "out")] == [
        [100, [["x", 100]]],
        [100, [["x", 100]]],
        [100, [["x", 100]]],
        [None, []],
    ]
    tables = backend.tables()
    assert [
        len(list(tables[n].scan()))
        for n in ("stage0.process0.s.v", "stage0.process0.s.m", "stage0.process0.ttl")
    ] == [0, 0, 0]
    # a rewrite renews: the old index entry is skipped
    task.feed_source(
        "in", 0, kit.records([("k", "w", 1500), ("k", "w", 2300), ("k", "r", 2600)], 4), 0
    )
    task.feed_source("in", 0, kit.records([("k", "r", 2601)], 7), 0)
    assert [v for _k, v, _t in kit.sink(task.drain(), "out")][-1] == [2300, [["x", 2300]]]


def test_timer_without_on_timer_is_an_error(kit: type[Kit]) -> None:
    def fn(key: Any, value: Any, ts: int, state: Any, out: Any) -> None:
        state.register_event_timer(ts + 1)

    task = kit.task(job(fn))
    with pytest.raises(TypeError, match="no on_timer"):
        task.feed_source("in", 0, kit.records([("k", 1, 1)]), 0)
    with pytest.raises(KeyError, match="no state 'nope'"):
        kit.task(job(lambda k, v, t, s, o: s["nope"])).feed_source(
            "in", 0, kit.records([("k", 1, 1)]), 0
        )


def test_process_needs_a_keyed_stream() -> None:
    t = Topology("p")
    assert not hasattr(t.source("x"), "process")
    KeyedStream(t, t.source("in").node).process(lambda k, v, ts, s, o: None).to("out")
    with pytest.raises(PlanError, match="unkeyed stream"):
        plan_job(t, "p", {"in": 1})
    with pytest.raises(TypeError, match="process\\(\\) needs a function"):
        Topology("q").source("in", keyed=True).process(42)


@pytest.mark.parametrize("backend_kind", ["memory", "rocksdb"])
def test_restore_fires_each_timer_exactly_once(
    kit: type[Kit], tmp_path: Path, backend_kind: str
) -> None:
    """Attempt 0 processes the input and fails after a checkpoint taken mid-way; the task
    restored from it replays the rest. Its output after the checkpoint plus attempt 0's
    output before it equals the failure-free run, timers and all."""
    plan = job(Recorder, {"n": ValueState()})
    rows = [(f"k{i % 5}", 1000 + 37 * i + (i % 3) * 100, 100 * i) for i in range(60)]
    records = kit.records(rows)

    def make(path: str) -> Any:
        return MemoryBackend() if backend_kind == "memory" else RocksDBBackend(tmp_path / path)

    reference = kit.task(plan, backend=make("ref"))
    for i in range(0, 60, 7):
        reference.feed_source("in", 0, records[i : i + 7], 0.0)
    reference.tick(0.0, wall_ms=0)
    expected = kit.sink(reference.drain(), "out")

    backend = make("a0")
    saved: list[SnapshotPoint] = []
    snap: dict[str, Any] = {}

    def on_snapshot(p: SnapshotPoint) -> None:
        saved.append(p)
        if isinstance(backend, MemoryBackend):
            snap["state"] = backend.snapshot()
        else:
            snap["state"] = backend.snapshot_sync(p.checkpoint_id or 0).directory

    first = kit.task(plan, backend=backend, on_snapshot=on_snapshot)
    before: list[Any] = []
    for i in range(0, 60, 7):
        first.feed_source("in", 0, records[i : i + 7], 0.0)
        if i == 28:
            first.trigger_checkpoint(1, 0, 0.0)
            before = kit.sink(first.drain(), "out")
    first.drain()  # attempt 0's output after the checkpoint is never published
    (point,) = saved
    pos = point.positions[("in", 0)]
    assert isinstance(pos, int)
    if isinstance(backend, MemoryBackend):
        restored_backend: Any = MemoryBackend.restore(snap["state"])
    else:
        backend.close()
        shutil.copytree(snap["state"], tmp_path / "restored" / "db")
        restored_backend = RocksDBBackend(tmp_path / "restored")
    restored = Task(
        plan,
        "stage0-0",
        restored_backend,
        attempt=1,
        restore_positions=point.positions,
        restore_watermarks=point.watermarks,
    )
    for i in range(pos, 60, 7):
        restored.feed_source("in", 0, records[i : i + 7], 0.0)
    after = kit.sink(restored.drain(), "out")
    assert sorted(map(json.dumps, before + after)) == sorted(map(json.dumps, expected))
    assert sum(1 for _k, v, _t in expected if v[0] == "event") > 10


def _example(name: str) -> dict[str, Any]:
    return runpy.run_path(str(TOPOLOGIES / f"{name}.py"))


def _input(name: str, rng: random.Random, n: int) -> list[tuple[str, dict[str, Any], int]]:
    rows = []
    now = 1_000_000
    for i in range(n):
        k = f"k{rng.randrange(12)}"
        # bursts and gaps so that dedup windows, inactivity and deadlines all trigger;
        # at most 4 s out of order (the examples' watermarks allow 5 s)
        now += rng.choice([200, 5_000, 60_000, 700_000])
        ts = now - rng.randrange(4000)
        if name == "order_states":
            event = rng.choice(["created", "created", "paid", "paid", "shipped", "bogus"])
            rows.append((k, {"order_id": k, "event": event, "ts": ts}, ts))
        else:
            rows.append((k, {"id": k, "user": k, "ts": ts, "n": i}, ts))
    return rows


@pytest.mark.parametrize("name", ["dedup", "inactivity", "order_states"])
@pytest.mark.parametrize("batch_size", [1, 7, 500])
def test_examples_match_their_expected_output(name: str, batch_size: int) -> None:
    module = _example(name)
    topic = module["SOURCE"]
    rows = _input(name, random.Random(7), 3000)
    plan = plan_job(module["topology"], name, {topic: 1})
    records = [(k.encode(), json.dumps(v).encode(), ts, i) for i, (k, v, ts) in enumerate(rows)]
    result = run_bounded(plan, {topic: [records]}, batch_size=batch_size)
    got = sorted(
        json.dumps(json.loads(v or b"null"), sort_keys=True)
        for _k, v, _t in result.sinks[module["SINK"]]
    )
    want = sorted(json.dumps(r, sort_keys=True) for r in module["expected_output"]({topic: rows}))
    assert got == want
    assert len(want) > 300


def test_a_due_processing_timer_fires_once_after_a_restore(kit: type[Kit]) -> None:
    """A processing-time timer registered before a checkpoint and fired after it (output
    never published) fires again, once, in the restored task."""
    plan = job(Recorder, {"n": ValueState()})
    backend = MemoryBackend()
    snap: dict[str, Any] = {}
    task = kit.task(plan, backend=backend, on_snapshot=lambda p: snap.update(s=backend.snapshot()))
    task.feed_source("in", 0, kit.records([("a", {"pt": 5_000}, 1)]), 0.0)
    task.trigger_checkpoint(1, 0, 0.0)
    task.tick(1.0, wall_ms=6_000)
    assert [v[0] for _k, v, _t in kit.sink(task.drain(), "out")] == ["rec", "processing"]
    restored = Task(plan, "stage0-0", MemoryBackend.restore(snap["s"]), attempt=1)
    restored.tick(0.0, wall_ms=9_000)
    restored.tick(0.1, wall_ms=9_500)
    assert kit.sink(restored.drain(), "out") == [("a", ["processing", 5_000, 1], 5_000)]
