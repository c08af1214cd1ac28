"""``Stream.peek(fn)``: ``fn`` sees each value, the record goes on unchanged; a record
``fn`` raises on follows ``on_error`` like ``map``. Added through the operator
registry: a spec in api/stream.py, a runtime class in operators/core.py."""

from __future__ import annotations

from typing import Any

import pytest

from kstream.api import Topology, Tumbling
from kstream.elements.records import DeadLetter, OutputBatch
from kstream.plan import plan_job
from kstream.plan.operators import describe, operator_ids
from kstream.testing import run_topology

ROWS = [("a", {"n": 1}, 10), ("b", {"n": 0}, 11), ("c", {"n": 4}, 12)]


def test_peek_calls_fn_on_each_value_in_order_and_passes_records_through() -> None:
    seen: list[Any] = []
    t = Topology("p")
    t.source("in").peek(seen.append).map(lambda v: v["n"]).peek(seen.append).to("out")
    run = run_topology(t, {"in": ROWS})
    assert seen == [{"n": 1}, {"n": 0}, {"n": 4}, 1, 0, 4]
    assert run.output("out") == [("a", 1, 10), ("b", 0, 11), ("c", 4, 12)]


def test_peek_ignores_what_fn_returns_and_keeps_a_keyed_stream_keyed() -> None:
    t = Topology("k")
    keyed = t.source("in", keyed=True).peek(lambda v: "ignored")
    keyed.window(Tumbling(100)).count().map(lambda r: r.value).to("out")  # needs keyed input
    run = run_topology(t, {"in": ROWS})
    assert sorted(run.output("out")) == [("a", 1, 99), ("b", 1, 99), ("c", 1, 99)]


def boom(v: dict[str, int]) -> None:
    if v["n"] == 0:
        raise ValueError("n is 0")


def test_a_raising_peek_dead_letters_the_record_and_passes_on_the_others(kit: Any) -> None:
    t = Topology("e", on_error="dead_letter")
    t.source("in").peek(boom, name="check").to("out")
    task = kit.task(plan_job(t, "e", {"in": 1}))
    task.feed_source("in", 0, kit.records(ROWS), 0.0)
    out = task.drain()
    assert [v for o in out if isinstance(o, OutputBatch) for v in o.values] == [
        b'{"n":1}',
        b'{"n":4}',
    ]
    assert [o for o in out if isinstance(o, DeadLetter)] == [
        DeadLetter(
            "in", 0, -1, "operator 'check' raised ValueError: n is 0", b"b", b'{"n":0}', 11, "check"
        )
    ]
    assert task.metrics["operator_errors"] == 1


def test_a_raising_peek_fails_the_task_by_default(kit: Any) -> None:
    t = Topology("f")
    t.source("in").peek(boom).to("out")
    task = kit.task(plan_job(t, "f", {"in": 1}))
    with pytest.raises(ValueError, match="n is 0"):
        task.feed_source("in", 0, kit.records(ROWS), 0.0)


def test_peek_is_stateless_so_it_shifts_no_stable_id_and_no_state_description() -> None:
    def build(with_peek: bool) -> Topology:
        t = Topology("ids")
        s = t.source("in", keyed=True)
        if with_peek:
            s = s.peek(print)
        s.count().to("out")
        return t

    plain, peeked = (plan_job(build(p), "ids", {"in": 2}) for p in (False, True))
    assert list(operator_ids(peeked).values()) == ["stage0.rolling0"]
    assert describe(peeked) == describe(plain)
