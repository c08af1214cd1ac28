"""on_error="dead_letter" for stateful user functions (issue 13 point 4): rolling and
window aggregations, a session window's merge, a sliding window's aggregation at firing,
joiners and process functions. Each record a function raises on is dead-lettered with
the operator and the exception, changes no state its function did not write itself,
and the others give exactly the output they give without it; with on_error="fail" the
task fails."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from kstream.api import Hopping, Session, Sliding, Topology, Tumbling, ValueState, WatermarkStrategy
from kstream.elements.records import DeadLetter, OutputBatch
from kstream.plan import JobPlan, plan_job
from kstream.runtime.local import run_bounded
from tests.conftest import Kit

NO_DISORDER = WatermarkStrategy(max_out_of_orderness_ms=0, idle_timeout_s=None)


def _records(rows: list[tuple[str, Any, int]]) -> list[Any]:
    return Kit.records(rows)


def _run(build: Callable[[Topology], None], inputs: dict[str, list[tuple[str, Any, int]]],
         on_error: str = "dead_letter") -> tuple[list[Any], list[DeadLetter]]:  # fmt: skip
    t = Topology("e", on_error=on_error)
    build(t)
    plan = plan_job(t, "e", dict.fromkeys(inputs, 1))
    result = run_bounded(plan, {topic: [_records(rows)] for topic, rows in inputs.items()})
    rows = [
        (k.decode() if k else None, json.loads(v) if v else None) for k, v, _ in result.sinks["out"]
    ]
    return rows, result.dead_letters


def _source(t: Topology, topic: str = "in") -> Any:
    return t.source(topic, keyed=True, watermark=NO_DISORDER)


def _letters(letters: list[DeadLetter]) -> list[tuple[str, int, str | None, Any, int, str]]:
    return [
        (d.topic, d.partition, None if d.key is None else d.key.decode(), json.loads(d.value or b"null"),
         d.timestamp or 0, d.reason)
        for d in letters
    ]  # fmt: skip


def add_unless_negative(acc: int, v: int) -> int:
    if v < 0:
        raise ValueError(f"negative {v}")
    return acc + v


def test_rolling_aggregation(kit: type[Kit]) -> None:
    def build(t: Topology) -> None:
        _source(t).aggregate(lambda: 0, add_unless_negative, name="sum").to("out")

    inputs = {"in": [("a", 1, 1), ("a", -1, 2), ("b", 2, 3), ("a", 3, 4)]}
    rows, letters = _run(build, inputs)
    assert rows == [("a", 1), ("b", 2), ("a", 4)]  # a's sum never saw -1
    assert _letters(letters) == [
        ("in", 0, "a", -1, 2, "operator 'sum' raised ValueError: negative -1")
    ]
    assert letters[0].operator == "sum" and letters[0].offset == -1
    with pytest.raises(ValueError, match="negative -1"):
        _run(build, inputs, on_error="fail")


def test_a_hopping_window_record_changes_none_of_its_windows_when_one_raises() -> None:
    def add(acc: int, v: int) -> int:
        if acc + v == 13:  # only in the window [0, 20): [10, 30) is computed first
            raise ValueError("unlucky")
        return acc + v

    def build(t: Topology) -> None:
        (
            _source(t)
            .window(Hopping(20, 10))
            .aggregate(lambda: 0, add, lambda x, y: x + y)
            .map(lambda r: [r.start, r.value])
            .to("out")
        )

    inputs = {"in": [("a", 10, 1), ("a", 3, 12)]}
    rows, letters = _run(build, inputs)
    assert sorted(v for _k, v in rows) == [[-10, 10], [0, 10]]  # no window [10, 30) with 3
    assert _letters(letters) == [
        ("in", 0, "a", 3, 12, "operator 'stage0.window0' raised ValueError: unlucky")
    ]
    with pytest.raises(ValueError, match="unlucky"):
        _run(build, inputs, on_error="fail")


def test_a_tumbling_window_record_whose_function_raises_leaves_its_window_unchanged() -> None:
    def init() -> int:
        return 0

    def build(t: Topology) -> None:
        (
            _source(t)
            .window(Tumbling(10))
            .aggregate(init, add_unless_negative)
            .map(lambda r: [r.start, r.value])
            .to("out")
        )

    # A window's first record (-5 at 1: the init path) and a later one (-1 at 3) raise;
    # the same records pass or fail in one batch and one at a time.
    rows_in = [("a", -5, 1), ("a", 2, 2), ("a", -1, 3), ("b", 4, 4), ("a", 6, 12)]
    rows, letters = _run(build, {"in": rows_in})
    assert sorted((k, v) for k, v in rows) == [("a", [0, 2]), ("a", [10, 6]), ("b", [0, 4])]
    assert _letters(letters) == [
        ("in", 0, "a", -5, 1, "operator 'stage0.window0' raised ValueError: negative -5"),
        ("in", 0, "a", -1, 3, "operator 'stage0.window0' raised ValueError: negative -1"),
    ]
    with pytest.raises(ValueError, match="negative -5"):
        _run(build, {"in": rows_in}, on_error="fail")


def test_a_session_merge_that_raises_leaves_both_sessions() -> None:
    disorder = WatermarkStrategy(max_out_of_orderness_ms=1_000, idle_timeout_s=None)

    def merge(x: int, y: int) -> int:
        if x + y > 7:
            raise OverflowError("too big")
        return x + y

    def build(t: Topology) -> None:
        (
            t.source("in", keyed=True, watermark=disorder)
            .window(Session(60))
            .aggregate(lambda: 0, lambda a, v: a + v, merge)
            .map(lambda r: [r.start, r.end, r.value])
            .to("out")
        )

    # 55 would bridge [0, 60) (value 1) and [100, 160) (value 2): 5+1 merges, +2 raises.
    inputs = {"in": [("a", 1, 0), ("a", 2, 100), ("a", 5, 55)]}
    rows, letters = _run(build, inputs)
    assert sorted(v for _k, v in rows) == [[0, 60, 1], [100, 160, 2]]
    assert _letters(letters) == [
        ("in", 0, "a", 5, 55, "operator 'stage0.window0' raised OverflowError: too big")
    ]
    with pytest.raises(OverflowError):
        _run(build, inputs, on_error="fail")


def test_a_sliding_window_drops_a_value_its_function_raises_on_at_firing() -> None:
    def add(acc: list[int], v: int) -> list[int]:
        if v < 0:
            raise ValueError(f"negative {v}")
        return [*acc, v]

    def build(t: Topology) -> None:
        (
            _source(t)
            .window(Sliding(10))
            .aggregate(list, add, lambda x, y: x + y)
            .map(lambda r: [r.start, r.value])
            .to("out")
        )

    inputs = {"in": [("a", 1, 0), ("a", -1, 5), ("a", 2, 8)]}
    rows, letters = _run(build, inputs)
    assert all(-1 not in v[1] for _k, v in rows)
    # Left windows of 0, 5 and 8; right windows of 0 and 5 (5's value is gone).
    assert sorted(v for _k, v in rows) == [[-10, [1]], [-5, [1]], [-2, [1, 2]], [1, [2]], [6, [2]]]
    # Buffered when it raised: dead-lettered once, with no input topic.
    assert _letters(letters) == [
        ("", -1, "a", -1, 5, "operator 'stage0.window0' raised ValueError: negative -1")
    ]
    with pytest.raises(ValueError, match="negative -1"):
        _run(build, inputs, on_error="fail")


def test_table_join_joiner() -> None:
    def joiner(order: dict[str, int], customer: Any) -> int:
        return 100 // order["n"]

    def build(t: Topology) -> None:
        _source(t, "orders").join_table(t.table("customers"), joiner, left=True, name="j").to("out")

    inputs: dict[str, list[tuple[str, Any, int]]] = {
        "orders": [("c", {"n": 5}, 1), ("c", {"n": 0}, 2), ("d", {"n": 4}, 3)],
        "customers": [],
    }
    rows, letters = _run(build, inputs)
    assert rows == [("c", 20), ("d", 25)]
    assert _letters(letters) == [
        ("orders", 0, "c", {"n": 0}, 2, "operator 'j' raised ZeroDivisionError: integer division or modulo by zero")
    ]  # fmt: skip
    with pytest.raises(ZeroDivisionError):
        _run(build, inputs, on_error="fail")


def _interval_join() -> JobPlan:
    t = Topology("ij", on_error="dead_letter")

    def joiner(left: str, right: str) -> str:
        if left == "bad":
            raise KeyError(left)
        return f"{left}+{right}"

    _source(t, "l").join(_source(t, "r"), joiner, within_ms=10, name="ij").to(
        "out", value_serde="str"
    )
    return plan_job(t, "ij", {"l": 1, "r": 1})


def test_interval_join_a_record_whose_joiner_raises_emits_no_pair_and_is_not_buffered(
    kit: type[Kit],
) -> None:
    task = kit.task(_interval_join())
    task.feed_source("r", 0, kit.records([("a", "y", 3)]), 0.0)
    task.feed_source("l", 0, kit.records([("a", "x", 0), ("a", "bad", 5)]), 0.0)
    out = task.drain()
    assert [v for o in out if isinstance(o, OutputBatch) for v in o.values] == [b"x+y"]
    (letter,) = [o for o in out if isinstance(o, DeadLetter)]
    assert (letter.topic, letter.key, letter.value, letter.timestamp, letter.reason) == (
        "l",
        b"a",
        b"bad",
        5,
        "operator 'ij' raised KeyError: 'bad'",
    )
    # "bad" was not buffered: a later right record meets only "x".
    task.feed_source("r", 0, kit.records([("a", "z", 6)], first_offset=1), 0.0)
    out = task.drain()
    assert [v for o in out if isinstance(o, OutputBatch) for v in o.values] == [b"x+z"]
    assert not [o for o in out if isinstance(o, DeadLetter)]
    assert task.metrics["operator_errors"] == 1


def test_process_function_output_of_a_failing_record_is_discarded() -> None:
    def fn(key: str, value: int, ts: int, state: Any, out: Any) -> None:
        seen = state["seen"].get(0)
        out(value * 10)
        if value < 0:
            raise ValueError("negative")
        state["seen"].set(seen + 1)
        out(seen + 1)

    def build(t: Topology) -> None:
        _source(t).process(fn, state={"seen": ValueState()}, name="proc").to("out")

    inputs = {"in": [("a", 1, 1), ("a", -2, 2), ("a", 3, 3)]}
    rows, letters = _run(build, inputs)
    assert rows == [("a", 10), ("a", 1), ("a", 30), ("a", 2)]
    assert _letters(letters) == [
        ("in", 0, "a", -2, 2, "operator 'proc' raised ValueError: negative")
    ]
    with pytest.raises(ValueError, match="negative"):
        _run(build, inputs, on_error="fail")


class Alarm:
    """An event timer 10 ms after each record and a processing timer at ``value["pt"]``;
    a timer of key ``bad`` emits, writes state, then raises."""

    def process(self, key: str, value: Any, ts: int, state: Any, out: Any) -> None:
        state.register_event_timer(ts + 10)
        if "pt" in value:
            state.register_processing_timer(value["pt"])

    def on_timer(self, key: str, at: int, state: Any, out: Any) -> None:
        out([state.time_domain, at])
        state["fired"].set(state["fired"].get(0) + 1)
        if key == "bad":
            raise LookupError(f"no alarm for {key}")
        out(["fired", state["fired"].get()])


def _timer_task(kit: type[Kit], on_error: str) -> Any:
    t = Topology("e", on_error=on_error)
    _source(t).process(Alarm, state={"fired": ValueState()}, name="alarm").to("out")
    return kit.task(plan_job(t, "e", {"in": 1}))


def test_a_timer_callback_that_raises_is_dead_lettered_with_the_timer_and_its_output_discarded(
    kit: type[Kit],
) -> None:
    task = _timer_task(kit, "dead_letter")
    rows = [("ok", {}, 100), ("bad", {"pt": 5_000}, 105), ("ok", {}, 120), ("bad", {}, 200)]
    task.feed_source("in", 0, kit.records(rows), 0.0)  # watermark 200: timers at 110, 115, 130
    out = task.drain()
    assert kit.sink(out, "out") == [
        ("ok", ["event", 110], 110),
        ("ok", ["fired", 1], 110),
        ("ok", ["event", 130], 130),
        ("ok", ["fired", 2], 130),
    ]
    letters = [o for o in out if isinstance(o, DeadLetter)]
    assert letters == [
        DeadLetter(
            "", -1, -1,
            "operator 'alarm' raised LookupError: no alarm for bad (on_timer, event-time timer at 115)",
            b"bad", b'{"timer":"event","timestamp":115}', 115, "alarm",
        )
    ]  # fmt: skip
    task.tick(1.0, wall_ms=5_000)  # the processing timer; the state it wrote before stays
    out = task.drain()
    assert kit.sink(out, "out") == []
    assert [(d.key, d.value, d.reason) for d in out if isinstance(d, DeadLetter)] == [
        (
            b"bad",
            b'{"timer":"processing","timestamp":5000}',
            "operator 'alarm' raised LookupError: no alarm for bad (on_timer, processing-time timer at 5000)",
        )
    ]
    task.drain()
    assert task.metrics["operator_errors"] == 2
    task.feed_source("in", 0, kit.records([("ok", {}, 300)], first_offset=4), 0.0)
    # bad's timer at 210 raised again (state["fired"] is 3 by then: the writes stayed)
    assert [d.reason for d in task.drain() if isinstance(d, DeadLetter)] == [
        "operator 'alarm' raised LookupError: no alarm for bad (on_timer, event-time timer at 210)"
    ]
    assert task.metrics["operator_errors"] == 3


def test_a_timer_callback_that_raises_fails_the_task_under_on_error_fail(kit: type[Kit]) -> None:
    task = _timer_task(kit, "fail")
    with pytest.raises(LookupError, match="no alarm for bad"):
        task.feed_source("in", 0, kit.records([("bad", {}, 100), ("x", {}, 200)]), 0.0)
