"""Bounded (batch) runs end to end over the example topologies, against each
topology's independent ``expected_output``; plus properties over batch boundaries."""

from __future__ import annotations

import itertools
import json
import random
import runpy
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.api import Tumbling
from kstream.plan import plan_job
from kstream.runtime.local import run_bounded
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def _json(value: bytes | None) -> Any:
    assert value is not None
    return json.loads(value)


def load(name: str) -> dict[str, Any]:
    return runpy.run_path(str(TOPOLOGIES / f"{name}.py"))


def encode(rows: list[tuple[Any, Any, int]], value_format: str = "json") -> list:
    enc = (lambda v: v.encode()) if value_format == "str" else (lambda v: json.dumps(v).encode())
    return [(None if k is None else k.encode(), enc(v), ts, i) for i, (k, v, ts) in enumerate(rows)]


def partitioned(rows: list[tuple[Any, Any, int]], n: int, rnd: random.Random) -> list[list]:
    parts: list[list] = [[] for _ in range(n)]
    for r in rows:
        parts[rnd.randrange(n)].append(r)
    return parts


def test_wordcount_bounded_run_matches_expected_output() -> None:
    mod = load("wordcount")
    rnd = random.Random(7)
    vocab = ["kafka", "stream", "window", "barrier", "state", "task"]
    rows = []
    ts = 0
    for _ in range(300):
        ts += rnd.randrange(0, 2_000)
        rows.append((None, " ".join(rnd.choices(vocab, k=rnd.randrange(0, 6))), ts))
    parts = partitioned(rows, 3, rnd)
    plan = plan_job(mod["topology"], "wordcount", {"lines": 3})
    result = run_bounded(plan, {"lines": [encode(p, "str") for p in parts]}, batch_size=17)
    got = sorted(
        (_json(v) for _, v, _ in result.sinks["word-counts"]),
        key=lambda r: (r["start"], r["word"]),
    )
    assert got == mod["expected_output"]({"lines": rows})
    assert len(got) > 20
    # The state is handed over exactly once per task, at the end, without a barrier.
    assert set(result.final_states) == plan.expected_tasks
    assert all(p.final and p.checkpoint_id is None for p in result.final_states.values())
    assert sum(m["late_dropped"] for m in result.metrics.values()) == 0


def test_sessionization_bounded_run_matches_expected_output() -> None:
    mod = load("sessionization")
    rnd = random.Random(11)
    users = [f"u{i}" for i in range(8)]
    rows = []
    ts = 1_700_000_000_000
    for _ in range(400):
        ts += rnd.choice([1_000, 60_000, 5 * 60_000, 40 * 60_000])
        user = rnd.choice(users)
        click = {"user": user, "page": rnd.choice("abcde"), "ts": ts}
        rows.append((user, click, ts))
    parts = partitioned(rows, 2, rnd)
    plan = plan_job(mod["topology"], "sessionization", {"clicks": 2})
    result = run_bounded(plan, {"clicks": [encode(p) for p in parts]}, batch_size=23)
    got = sorted(
        (_json(v) for _, v, _ in result.sinks["sessions"]),
        key=lambda r: (r["user"], r["start"]),
    )
    assert got == mod["expected_output"]({"clicks": rows})
    assert any(r["clicks"] > 1 for r in got)


def test_orders_payments_bounded_run_matches_expected_output() -> None:
    mod = load("orders_payments")
    rnd = random.Random(3)
    orders, payments = [], []
    ts = 1_700_000_000_000
    for i in range(150):
        ts += rnd.randrange(0, 30_000)
        oid = f"o{i}"
        orders.append((oid, {"order_id": oid, "amount": i, "ts": ts}, ts))
        for _ in range(rnd.choice([0, 1, 1, 2])):
            pts = ts + rnd.randrange(-12 * 60_000, 12 * 60_000)
            payments.append((oid, {"order_id": oid, "paid": i, "ts": pts}, pts))
    payments.sort(key=lambda r: r[2])  # each partition in event-time order
    plan = plan_job(mod["topology"], "orders_payments", {"orders": 3, "payments": 2})
    inputs = {
        "orders": [encode(p) for p in partitioned(orders, 3, rnd)],
        "payments": [encode(p) for p in partitioned(payments, 2, rnd)],
    }
    result = run_bounded(plan, inputs, batch_size=13)
    got = sorted(
        (_json(v) for _, v, _ in result.sinks["paid-orders"]),
        key=lambda r: (r["order_id"], r["order_ts"], r["payment_ts"]),
    )
    expected = mod["expected_output"]({"orders": orders, "payments": payments})
    assert got == expected
    assert 50 < len(expected) < 300


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # kit is a stateless helper class
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 9_999)), max_size=60
    ),
    cuts=st.lists(st.integers(0, 60), max_size=6),
    size=st.sampled_from([1, 7, 1000, 2500]),
)
def test_tumbling_count_equals_group_by_whatever_the_batches(
    kit: type[Kit], rows: list[tuple[str, int]], cuts: list[int], size: int
) -> None:
    task = kit.task(kit.window_job(Tumbling(size), out_of_orderness_ms=10_000))
    records = kit.records([(k, 0, ts) for k, ts in rows])
    bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    for lo, hi in itertools.pairwise(bounds):
        task.feed_source("events", 0, records[lo:hi], 0.0)
    task.end_input("events", 0, 0.0)
    got = Counter((v[0], v[1], v[2], v[3]) for _, v, _ in kit.sink(task.drain(), "out"))
    groups = Counter((k, ts - ts % size) for k, ts in rows)
    expected = Counter({(k, s, s + size, n): 1 for (k, s), n in groups.items()})
    assert got == expected
