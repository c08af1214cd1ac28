"""Window emission: ``emit="update"`` (every change, nothing at firing) for tumbling,
session and sliding windows, and early firing of ``"final"`` windows on processing time."""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Session, Sliding, Topology, Tumbling, WatermarkStrategy, WindowSpec
from kstream.plan import JobPlan, plan_job
from kstream.runtime.local import run_bounded
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def job(
    spec: WindowSpec, emit: str = "update", early: int | None = None, allowed: int = 0
) -> JobPlan:
    t = Topology("e")
    (
        t.source("events", keyed=True, watermark=WatermarkStrategy(max_out_of_orderness_ms=0))
        .window(spec, emit=emit, early_fire_ms=early, allowed_lateness_ms=allowed)
        .aggregate(lambda: 0, lambda a, v: a + v, lambda a, b: a + b)
        .map(lambda r: [r.key, r.start, r.end, r.value])
        .to("out")
    )
    return plan_job(t, "e", {"events": 1})


def test_tumbling_update_emits_every_change_and_nothing_at_firing(kit: type[Kit]) -> None:
    task = kit.task(job(Tumbling(1000), allowed=500))
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("b", 2, 200), ("a", 3, 900)]), 0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1000, 1], 999),
        ("b", ["b", 0, 1000, 2], 999),
        ("a", ["a", 0, 1000, 4], 999),
    ]
    task.feed_source("events", 0, kit.records([("a", 5, 1200)], 3), 0)  # wm 1200: [0, 1000) fires
    assert kit.sink(task.drain(), "out") == [("a", ["a", 1000, 2000, 5], 1999)]
    task.feed_source("events", 0, kit.records([("a", 7, 950)], 4), 0)  # late but allowed
    assert kit.sink(task.drain(), "out") == [("a", ["a", 0, 1000, 11], 999)]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == []


def test_session_update_retracts_merged_sessions_with_none(kit: type[Kit]) -> None:
    task = kit.task(job(Session(100), allowed=200))
    task.feed_source("events", 0, kit.records([("a", 1, 0), ("a", 2, 150)]), 0)
    task.feed_source("events", 0, kit.records([("a", 4, 80)], 2), 0)  # bridges both (wm 150)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 100, 1], 99),
        ("a", ["a", 150, 250, 2], 249),
        ("a", ["a", 0, 100, None], 99),  # merged away
        ("a", ["a", 150, 250, None], 249),
        ("a", ["a", 0, 250, 7], 249),
    ]
    task.end_input("events", 0, 0.0)
    assert kit.sink(task.drain(), "out") == []


def test_sliding_update_emits_every_window_containing_the_record(kit: type[Kit]) -> None:
    task = kit.task(job(Sliding(1000), allowed=200))
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("a", 2, 1500)]), 0)
    task.feed_source("events", 0, kit.records([("a", 4, 1400)], 2), 0)  # wm 1500, allowed
    # Kafka Streams' sliding windows (time difference 1000): left windows [t - 1000, t]
    # and non-empty right windows [t + 1, t + 1001], reported with end one past.
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1001, 1], 1000),
        ("a", ["a", 500, 1501, 3], 1500),
        ("a", ["a", 1001, 2002, 2], 2001),  # right window of 1000
        ("a", ["a", 400, 1401, 5], 1400),
        ("a", ["a", 500, 1501, 7], 1500),
        ("a", ["a", 1001, 2002, 6], 2001),
        ("a", ["a", 1401, 2402, 2], 2401),  # right window of 1400
    ]


def test_early_firing_emits_changed_open_windows_every_interval(kit: type[Kit]) -> None:
    task = kit.task(job(Tumbling(1000), emit="final", early=500))
    task.tick(0.0, wall_ms=10_000)  # starts the early-firing clock
    task.feed_source("events", 0, kit.records([("a", 1, 100), ("b", 2, 200), ("a", 3, 900)]), 0)
    task.tick(0.1, wall_ms=10_499)
    assert kit.sink(task.drain(), "out") == []
    task.tick(0.2, wall_ms=10_500)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1000, 4], 999),
        ("b", ["b", 0, 1000, 2], 999),
    ]
    task.feed_source("events", 0, kit.records([("b", 5, 300)], 3), 0)
    task.tick(0.3, wall_ms=10_900)
    assert kit.sink(task.drain(), "out") == []  # next early firing at 11_000
    task.tick(0.4, wall_ms=11_000)
    assert kit.sink(task.drain(), "out") == [("b", ["b", 0, 1000, 7], 999)]
    task.tick(0.5, wall_ms=11_600)
    assert kit.sink(task.drain(), "out") == []  # nothing changed
    task.feed_source("events", 0, kit.records([("c", 1, 1000)], 4), 0)  # [0, 1000) fires: final
    assert kit.sink(task.drain(), "out") == [
        ("a", ["a", 0, 1000, 4], 999),
        ("b", ["b", 0, 1000, 7], 999),
    ]


@pytest.mark.parametrize("spec", [Session(100), Sliding(1000)])
def test_early_firing_of_sessions_and_sliding_windows(kit: type[Kit], spec: WindowSpec) -> None:
    task = kit.task(job(spec, emit="final", early=100))
    task.tick(0.0, wall_ms=0)
    task.feed_source("events", 0, kit.records([("a", 1, 1000), ("a", 2, 1050)]), 0)
    task.tick(0.1, wall_ms=100)
    got = [v for _k, v, _t in kit.sink(task.drain(), "out")]
    want = (
        [["a", 1000, 1150, 3]]
        if isinstance(spec, Session)
        else [["a", 0, 1001, 1], ["a", 50, 1051, 3], ["a", 1001, 2002, 2]]  # + right window
    )
    assert got == want


def test_emit_validation() -> None:
    s = Topology("x").source("in", keyed=True)
    with pytest.raises(ValueError, match="emit must be"):
        s.window(Tumbling(10), emit="sometimes")
    with pytest.raises(ValueError, match="early_fire_ms needs"):
        s.window(Tumbling(10), emit="update", early_fire_ms=100)


def test_example_live_page_views() -> None:
    module = runpy.run_path(str(TOPOLOGIES / "live_page_views.py"))
    rng = random.Random(11)
    rows: list[tuple[str, dict[str, Any], int]] = []
    now = 1_000_000
    for _ in range(2000):
        now += rng.choice([100, 1000, 5000])
        ts = now - rng.randrange(4000)
        page = rng.choice(["home", "cart", "faq", "about"])
        rows.append((page, {"page": page, "ts": ts}, ts))
    records = [(k.encode(), json.dumps(v).encode(), ts, i) for i, (k, v, ts) in enumerate(rows)]
    plan = plan_job(module["topology"], "lpv", {"page-views": 1})
    result = run_bounded(plan, {"page-views": [records]})
    got = sorted(
        json.dumps(json.loads(v or b"null"), sort_keys=True)
        for _k, v, _t in result.sinks["live-page-views"]
    )
    want = sorted(
        json.dumps(r, sort_keys=True) for r in module["expected_output"]({"page-views": rows})
    )
    assert got == want and len(want) == 2000
