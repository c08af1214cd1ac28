"""Rolling aggregations without windows: update streams per change or per checkpoint,
tombstones, an upsert sink read back as a table."""

from __future__ import annotations

import json
import random
import runpy
from pathlib import Path
from typing import Any

import pytest

from kstream.api import Topology
from kstream.plan import JobPlan, plan_job
from kstream.runtime import partition_for_key
from kstream.runtime.local import run_bounded
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


def job(emit: str, kind: str = "aggregate") -> JobPlan:
    t = Topology("r")
    s = t.source("in", keyed=True)
    if kind == "count":
        out = s.count(emit=emit)
    elif kind == "reduce":
        out = s.reduce(lambda a, v: None if v == 0 else a + v, emit=emit)
    else:
        out = s.aggregate(lambda: [], lambda a, v: None if v == "del" else [*a, v], emit=emit)
    out.to("out", compacted=True)
    return plan_job(t, "r", {"in": 1})


def test_per_change_emits_every_update_and_tombstones(kit: type[Kit]) -> None:
    task = kit.task(job("change"))
    rows = [("a", "x", 1), ("b", "y", 2), ("a", "z", 3), ("a", "del", 4), ("a", "w", 5)]
    task.feed_source("in", 0, kit.records(rows), 0.0)
    assert kit.sink(task.drain(), "out") == [
        ("a", ["x"], 1),
        ("b", ["y"], 2),
        ("a", ["x", "z"], 3),
        ("a", None, 4),  # deleted: a tombstone
        ("a", ["w"], 5),  # starts again from init()
    ]
    task.feed_source("in", 0, kit.records([("a", "v", 6), ("b", "del", 7)], 5), 0.0)
    assert kit.sink(task.drain(), "out") == [("a", ["w", "v"], 6), ("b", None, 7)]


@pytest.mark.parametrize(
    ("kind", "values", "expected"),
    [("count", [5, 5, 5], [1, 2, 3]), ("reduce", [5, 2, 0, 4], [5, 7, None, 4])],
)
def test_count_and_reduce(
    kit: type[Kit], kind: str, values: list[int], expected: list[Any]
) -> None:
    task = kit.task(job("change", kind))
    task.feed_source("in", 0, kit.records([("k", v, i) for i, v in enumerate(values)]), 0.0)
    assert [v for _k, v, _t in kit.sink(task.drain(), "out")] == expected


def test_per_checkpoint_emits_latest_values_before_the_snapshot(kit: type[Kit]) -> None:
    task = kit.task(job("checkpoint"))
    task.feed_source("in", 0, kit.records([("a", "x", 1), ("b", "y", 2), ("a", "z", 3)]), 0.0)
    assert task.drain() == []
    task.trigger_checkpoint(1, 0, 0.0)
    out = task.drain()
    assert kit.trace(out) == ["data:out:2", "snapshot:1", "event:out:Barrier"]
    assert kit.sink(out, "out") == [("a", ["x", "z"], 3), ("b", ["y"], 2)]
    task.trigger_checkpoint(2, 0, 0.0)  # nothing changed: nothing emitted
    assert kit.trace(task.drain()) == ["snapshot:2", "event:out:Barrier"]
    task.feed_source("in", 0, kit.records([("a", "del", 4), ("b", "q", 5)], 3), 0.0)
    task.trigger_checkpoint(3, 0, 0.0)
    assert kit.sink(task.drain(), "out") == [("a", None, 4), ("b", ["y", "q"], 5)]


def test_sink_topic_is_compacted_in_the_plan() -> None:
    (sink,) = job("change").sinks
    assert sink.compacted
    with pytest.raises(ValueError, match="emit must be one of"):
        Topology("x").source("in", keyed=True).count(emit="sometimes")


def test_example_running_totals_compacts_to_expected_output_and_reads_back_as_a_table() -> None:
    module = runpy.run_path(str(TOPOLOGIES / "running_totals.py"))
    rng = random.Random(5)
    users = [f"u{i}" for i in range(9)]
    parts: list[list[tuple[bytes | None, bytes, int, int]]] = [[], [], []]
    rows = []
    for i in range(900):
        u = rng.choice(users) if i < 899 else "u0"
        p = users.index(u) % 3  # each user's records come from one partition
        value: dict[str, Any] = {"user": u, "amount": rng.randint(1, 50), "ts": i}
        if rng.random() < 0.03 or i == 899:
            value = {"user": u, "close": True, "ts": i}
        rows.append((None, value, i))
        parts[p].append((None, json.dumps(value).encode(), i, len(parts[p])))
    plan = plan_job(module["topology"], "rt", {"purchases": 3})
    result = run_bounded(plan, {"purchases": parts})
    compacted: dict[str, Any] = {}
    for k, v, _t in result.sinks["user-totals"]:
        assert k is not None
        compacted[k.decode()] = None if v is None else json.loads(v)
    assert compacted == module["expected_output"]({"purchases": rows})
    assert None in compacted.values() and len(compacted) == 9
    # One update per user (end of input is the only flush of a bounded run).
    assert len(result.sinks["user-totals"]) == 9

    # Read back: the upsert topic as the table side of a stream-table join.
    t = Topology("lookup")
    totals = t.table("user-totals")
    t.source("asks", keyed=True).join_table(totals, lambda ask, tot: [ask, tot], left=True).to(
        "answers"
    )
    lookup = plan_job(t, "lookup", {"user-totals": 3, "asks": 3})
    table_parts: list[list[Any]] = [[], [], []]
    for k, v, ts in result.sinks["user-totals"]:
        p = partition_for_key(k, 3)
        table_parts[p].append((k, v, ts, len(table_parts[p])))
    asks: list[list[Any]] = [[], [], []]
    for u in users:
        p = partition_for_key(u.encode(), 3)
        asks[p].append((u.encode(), json.dumps(u).encode(), 10_000, len(asks[p])))
    answers = run_bounded(lookup, {"user-totals": table_parts, "asks": asks})
    got = {json.loads(v)[0]: json.loads(v)[1] for _k, v, _t in answers.sinks["answers"] if v}
    assert got == compacted
