"""Windowed joins: left and outer (unmatched records emitted when their window closes),
asymmetric bounds, late side outputs, and the reconciliation example."""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Topology, WatermarkStrategy
from kstream.plan import JobPlan, plan_job
from kstream.runtime.local import run_bounded
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def job(
    how: str = "inner",
    late: bool = False,
    allowed: int = 0,
    *,
    within_ms: int | None = None,
    before_ms: int | None = None,
    after_ms: int | None = None,
) -> JobPlan:
    t = Topology("oj")
    wm = WatermarkStrategy(max_out_of_orderness_ms=0)
    left = t.source("l", keyed=True, watermark=wm)
    right = t.source("r", keyed=True, watermark=wm)
    joined = left.join(
        right,
        lambda a, b: [a, b],
        how=how,
        allowed_lateness_ms=allowed,
        within_ms=within_ms,
        before_ms=before_ms,
        after_ms=after_ms,
    )
    joined.to("out")
    if late:
        joined.late("left").to("late-l")
        joined.late("right").to("late-r")
    return plan_job(t, "oj", {"l": 1, "r": 1})


def test_asymmetric_bounds(kit: type[Kit]) -> None:
    # a right record matches a left one at t when t - 100 <= r.ts <= t + 500
    task = kit.task(job(before_ms=100, after_ms=500))
    task.feed_source("l", 0, kit.records([("k", "l1", 1000)]), 0.0)
    task.feed_source(
        "r",
        0,
        kit.records(
            [("k", "r-early", 899), ("k", "r0", 900), ("k", "r1", 1500), ("k", "r2", 1501)]
        ),
        0,
    )
    assert kit.sink(task.drain(), "out") == [("k", ["l1", "r0"], 1000), ("k", ["l1", "r1"], 1500)]
    # a later left record at 1100 matches the buffered right records in [1000, 1600]
    task.feed_source("l", 0, kit.records([("k", "l2", 1100)], 1), 0.0)
    assert kit.sink(task.drain(), "out") == [("k", ["l2", "r1"], 1500), ("k", ["l2", "r2"], 1501)]


def test_negative_bound_means_strictly_after() -> None:
    with pytest.raises(ValueError, match="empty join interval"):
        job(before_ms=-10, after_ms=5)
    job(before_ms=-1, after_ms=5)  # right strictly after left, at most 5 ms
    with pytest.raises(ValueError, match="either within_ms or"):
        job(within_ms=5, after_ms=5)
    with pytest.raises(ValueError, match="how must be"):
        job(how="right", within_ms=5)


def test_left_join_emits_unmatched_left_records_when_their_window_closes(kit: type[Kit]) -> None:
    task = kit.task(job("left", within_ms=100))
    task.feed_source(
        "l", 0, kit.records([("a", "l1", 1000), ("b", "l2", 1000), ("a", "l3", 1000)]), 0
    )
    task.feed_source("r", 0, kit.records([("b", "r1", 1050), ("c", "r2", 1060)]), 0)
    assert kit.sink(task.drain(), "out") == [("b", ["l2", "r1"], 1050)]
    # window of the left records closes when the watermark passes 1000 + 100
    task.feed_source("l", 0, kit.records([("z", "l4", 1100)], 3), 0)
    task.feed_source("r", 0, kit.records([("z", "r3", 1100)], 2), 0)
    assert kit.sink(task.drain(), "out") == [("z", ["l4", "r3"], 1100)]
    task.feed_source("l", 0, kit.records([("z", "l5", 1101)], 4), 0)
    task.feed_source("r", 0, kit.records([("z", "r4", 1101)], 3), 0)  # wm 1101
    assert kit.sink(task.drain(), "out") == [
        ("z", ["l5", "r3"], 1101),
        ("z", ["l4", "r4"], 1101),
        ("z", ["l5", "r4"], 1101),
        ("a", ["l1", None], 1000),
        ("a", ["l3", None], 1000),
    ]
    task.end_input("l", 0, 0.0)
    task.end_input("r", 0, 0.0)
    assert kit.sink(task.drain(), "out") == []  # unmatched right records are not emitted


def test_outer_join_emits_both_sides_unmatched_also_at_end_of_input(kit: type[Kit]) -> None:
    task = kit.task(job("outer", within_ms=100))
    task.feed_source("l", 0, kit.records([("a", "l1", 1000), ("b", "l2", 1000)]), 0)
    task.feed_source(
        "r", 0, kit.records([("b", "r1", 1050), ("c", "r2", 1060), ("c", "r3", 1060)]), 0
    )
    task.feed_source("l", 0, kit.records([("d", "l3", 1300)], 2), 0)
    task.feed_source(
        "r", 0, kit.records([("d", "r4", 1300)], 3), 0
    )  # wm 1300: 1000s and 1060s close
    assert kit.sink(task.drain(), "out") == [
        ("b", ["l2", "r1"], 1050),
        ("d", ["l3", "r4"], 1300),
        ("a", ["l1", None], 1000),
        ("c", [None, "r2"], 1060),
        ("c", [None, "r3"], 1060),
    ]
    task.feed_source("l", 0, kit.records([("e", "l5", 1350)], 3), 0)
    task.end_input("l", 0, 0.0)
    task.end_input("r", 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("e", ["l5", None], 1350)]


def test_late_records_of_each_side_go_to_their_side_output(kit: type[Kit]) -> None:
    task = kit.task(job("inner", late=True, within_ms=10, allowed=100))
    task.feed_source("l", 0, kit.records([("a", "l1", 1000)]), 0)
    task.feed_source("r", 0, kit.records([("a", "r1", 1000)]), 0)  # wm 1000
    task.feed_source("l", 0, kit.records([("a", "l-ok", 900), ("a", "l-late", 899)], 1), 0)
    task.feed_source("r", 0, kit.records([("a", "r-late", 800)], 1), 0)
    out = task.drain()
    assert kit.sink(out, "late-l") == [("a", "l-late", 899)]
    assert kit.sink(out, "late-r") == [("a", "r-late", 800)]
    assert task.metrics["late_side_output"] == 2 and task.metrics["late_dropped"] == 0


def test_example_payment_reconciliation() -> None:
    module = runpy.run_path(str(TOPOLOGIES / "payment_reconciliation.py"))
    rng = random.Random(3)
    rows: dict[str, list[tuple[None, dict[str, Any], int]]] = {"orders": [], "payments": []}
    events = []
    for i in range(400):
        ts = 1_000_000 + i * 5_000
        events.append((ts, "orders", {"order_id": f"o{i}", "amount": i, "ts": ts}))
        for _ in range(rng.choice([0, 1, 1, 2])):
            pts = ts + rng.randrange(-120_000, 900_000)
            events.append(
                (
                    pts,
                    "payments",
                    {"order_id": f"o{rng.choice([i, i, i + 10**6])}", "paid": i, "ts": pts},
                )
            )
    events.sort(key=lambda e: e[0])
    parts: dict[str, list[list[Any]]] = {"orders": [[], []], "payments": [[], []]}
    for n, (ts, topic, value) in enumerate(events):
        rows[topic].append((None, value, ts))
        p = parts[topic][n % 2]
        p.append((None, json.dumps(value).encode(), ts, len(p)))
    plan = plan_job(module["topology"], "pr", {"orders": 2, "payments": 2})
    result = run_bounded(plan, {"orders": parts["orders"], "payments": parts["payments"]})
    got = sorted(
        json.dumps(json.loads(v or b"null"), sort_keys=True)
        for _k, v, _t in result.sinks["reconciliation"]
    )
    want = sorted(json.dumps(r, sort_keys=True) for r in module["expected_output"](rows))
    assert got == want
    statuses = {json.loads(r)["status"] for r in want}
    assert statuses == {"paid", "unpaid", "unknown-payment"}
