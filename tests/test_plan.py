"""Planner: stages, tasks, internal topics, checkpoint participants, validation errors."""

from __future__ import annotations

import pytest

from kstream.api import Guarantee, Session, Topology, Tumbling
from kstream.plan import InputKind, InputSpec, OutputKind, OutputSpec, PlanError, plan_job


def wordcount() -> Topology:
    t = Topology("wc")
    (
        t.source("lines", value_serde="str")
        .flat_map(str.split)
        .key_by(lambda w: w)
        .window(Tumbling(1000))
        .count()
        .to("counts", guarantee=Guarantee.AT_LEAST_ONCE)
    )
    return t


def test_wordcount_plan_layout() -> None:
    plan = plan_job(wordcount(), "app", {"lines": 3, "other": 9})
    assert [(s.name, s.partitions, s.inputs, s.outputs, s.stateful) for s in plan.stages] == [
        ("stage0", 3, ("lines",), ("app.stage0.repartition",), False),
        ("stage1", 3, ("app.stage0.repartition",), ("counts",), True),
    ]
    assert plan.internal_topic_partitions == {"app.stage0.repartition": 3}
    assert plan.expected_tasks == frozenset(
        {"stage0-0", "stage0-1", "stage0-2", "stage1-0", "stage1-1", "stage1-2"}
    )
    t = plan.task("stage1-2")
    assert t.inputs == (
        InputSpec(
            "app.stage0.repartition",
            2,
            InputKind.INTERNAL,
            ("stage0-0", "stage0-1", "stage0-2"),
        ),
    )
    assert t.outputs == (OutputSpec("counts", OutputKind.SINK, None, Guarantee.AT_LEAST_ONCE),)
    assert plan.task("stage0-1").inputs == (InputSpec("lines", 1, InputKind.SOURCE),)
    assert [(s.topic, s.guarantee, s.stage) for s in plan.sinks] == [
        ("counts", Guarantee.AT_LEAST_ONCE, "stage1")
    ]
    assert plan.source_partitions == (("lines", 3),)


def test_repartition_stage_takes_max_upstream_partitions_and_explicit_counts() -> None:
    t = Topology("j")
    a = t.source("a").key_by(lambda v: v["k"])
    b = t.source("b").key_by(lambda v: v["k"])
    a.join(b, lambda x, y: [x, y], within_ms=10).to("out")
    plan = plan_job(t, "j", {"a": 2, "b": 5})
    assert plan.internal_topic_partitions == {"j.stage0.repartition": 5, "j.stage1.repartition": 5}
    assert plan.stage("stage2").partitions == 5
    assert plan.task("stage2-4").inputs[0].upstream_tasks == ("stage0-0", "stage0-1")

    t2 = Topology("j")
    t2.source("a").key_by(lambda v: v, partitions=7).window(Tumbling(5)).count().to("out")
    assert plan_job(t2, "j", {"a": 2}).internal_topic_partitions == {"j.stage0.repartition": 7}


def test_default_guarantee_comes_from_the_topology_or_the_caller() -> None:
    t = Topology("g", default_guarantee=Guarantee.AT_LEAST_ONCE)
    t.source("in").to("out")
    assert plan_job(t, "g", {"in": 1}).sinks[0].guarantee is Guarantee.AT_LEAST_ONCE
    plan = plan_job(t, "g", {"in": 1}, default_guarantee=Guarantee.EXACTLY_ONCE)
    assert plan.sinks[0].guarantee is Guarantee.EXACTLY_ONCE


def test_unknown_source_topic() -> None:
    with pytest.raises(PlanError, match=r"source topic 'lines' does not exist \(known: \['x'\]\)"):
        plan_job(wordcount(), "wc", {"x": 1})


def test_co_partitioning_violated_for_keyed_sources() -> None:
    t = Topology("j")
    t.source("a", keyed=True).join(t.source("b", keyed=True), lambda x, y: x, within_ms=1).to("o")
    with pytest.raises(
        PlanError, match=r"co-partitioning violated in stage0: topics \{'a': 2, 'b': 3\}"
    ):
        plan_job(t, "j", {"a": 2, "b": 3})


def test_co_partitioning_violated_by_explicit_key_by_partitions() -> None:
    t = Topology("j")
    s = t.source("s").key_by(lambda v: v, partitions=4)
    s.join_table(t.table("tbl"), lambda x, y: x).to("o")
    with pytest.raises(PlanError, match="asks for 4 partitions but the stage has 2"):
        plan_job(t, "j", {"s": 1, "tbl": 2})


def test_window_without_keyed_stream() -> None:
    t = Topology("w")
    t.source("in").window(Tumbling(10)).count().to("out")
    with pytest.raises(
        PlanError, match=r"unkeyed stream 'in': call key_by\(\.\.\.\) before window"
    ):
        plan_job(t, "w", {"in": 1})


def test_window_without_aggregation() -> None:
    t = Topology("w")
    w = t.source("in", keyed=True).window(Tumbling(10))
    w.late().to("late")
    with pytest.raises(PlanError, match="has no aggregation"):
        plan_job(t, "w", {"in": 1})


def test_join_needs_keyed_inputs() -> None:
    t = Topology("j")
    unkeyed = t.source("a")
    t.source("b", keyed=True).join(unkeyed, lambda x, y: x, within_ms=1).to("o")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="unkeyed input 'a'"):
        plan_job(t, "j", {"a": 1, "b": 1})


def test_cycle_through_a_topic() -> None:
    t = Topology("c")
    t.source("loop").map(lambda v: v).to("loop")
    with pytest.raises(PlanError, match="cycle: sink topic 'loop' is also read"):
        plan_job(t, "c", {"loop": 1})


def test_dangling_output_and_double_read() -> None:
    t = Topology("d")
    t.source("in").map(lambda v: v)
    with pytest.raises(PlanError, match=r"output of map 'map1' goes nowhere: end it with \.to"):
        plan_job(t, "d", {"in": 1})
    t2 = Topology("d")
    t2.source("in").to("a")
    t2.source("in").to("b")
    with pytest.raises(PlanError, match="read by two sources"):
        plan_job(t2, "d", {"in": 1})


def test_session_aggregate_needs_merge() -> None:
    t = Topology("s")
    with pytest.raises(ValueError, match="merge"):
        t.source("in", keyed=True).window(Session(5)).aggregate(lambda: 0, lambda a, v: a + v)


def test_watermark_strategies_are_those_of_the_stream_sources_not_the_tables() -> None:
    from kstream.api import WatermarkStrategy

    t = Topology("w")
    strategy = WatermarkStrategy(max_out_of_orderness_ms=5, max_drift_ms=1000)
    s = t.source("clicks", keyed=True, watermark=strategy)
    s.join_table(t.table("users"), lambda c, u: c).to("out")
    t.source("views").to("out2")
    plan = plan_job(t, "w", {"clicks": 2, "users": 2, "views": 1})
    assert plan.watermark_strategies == {"clicks": strategy, "views": WatermarkStrategy()}
