"""Fan-out: one stream read by several operators — after a key_by (its repartition
topic is read by one stage), a window, a join and a table — planned and run exactly."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from kstream.api import Topology
from kstream.plan import InputKind, PlanError, plan_job
from kstream.testing import run_topology

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

EXAMPLE = runpy.run_path(str(TOPOLOGIES / "fanout.py"))


def fanout() -> Topology:
    topology: Topology = runpy.run_path(str(TOPOLOGIES / "fanout.py"))["topology"]
    return topology


def test_every_reader_of_a_key_by_is_in_one_stage() -> None:
    t = Topology("f")
    keyed = t.source("in").key_by(lambda v: v, key_serde="str", name="k")
    keyed.count().to("out1")
    keyed.map(lambda v: v).to("out2")
    plan = plan_job(t, "app", {"in": 2})
    assert [(s.name, s.inputs, s.outputs) for s in plan.stages] == [
        ("stage0", ("in",), ("app.stage0.repartition",)),
        ("stage1", ("app.stage0.repartition",), ("out1", "out2")),
    ]
    assert [(i.name, i.upstream_stage, i.downstream_stage) for i in plan.internal_topics] == [
        ("app.stage0.repartition", "stage0", "stage1")
    ]


def test_each_internal_partition_is_read_by_exactly_one_task() -> None:
    plan = plan_job(fanout(), "app", {"clicks": 2, "orders": 3, "profiles": 2})
    readers: dict[tuple[str, int], list[str]] = {}
    for task in plan.tasks:
        for i in task.inputs:
            if i.kind is InputKind.INTERNAL:
                readers.setdefault((i.topic, i.partition), []).append(task.task_id)
    assert readers == {
        ("app.stage0.repartition", 0): ["stage2-0"],
        ("app.stage0.repartition", 1): ["stage2-1"],
        ("app.stage1.repartition", 0): ["stage2-0"],
        ("app.stage1.repartition", 1): ["stage2-1"],
    }
    assert plan.stage("stage2").inputs == (
        "profiles",
        "app.stage0.repartition",
        "app.stage1.repartition",
    )


def test_a_key_by_read_back_by_the_stage_that_writes_it_is_refused() -> None:
    # The join reads k1 and k2; k2 is written by the map reading k1: one stage would
    # read its own output.
    t = Topology("loop")
    keyed = t.source("in").key_by(lambda v: v, name="k1")
    rekeyed = keyed.map(lambda v: v).key_by(lambda v: v, name="k2")
    keyed.join(rekeyed, lambda a, b: [a, b], within_ms=10).to("out")
    with pytest.raises(
        PlanError, match=r"repartition topic of key_by 'k1', 'k2' would be read by the stage"
    ):
        plan_job(t, "loop", {"in": 1})


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_fan_out_after_key_by_window_join_and_table_is_exact(parts: int) -> None:
    run = run_topology(
        fanout(),
        EXAMPLE["SAMPLE"],
        partitions={"clicks": parts, "orders": parts, "profiles": parts},
    )
    assert {topic: sorted((k, v) for k, v, _ in recs) for topic, recs in run.outputs.items()} == (
        EXAMPLE["EXPECTED"]
    )
    assert run.metrics.get("late_dropped", 0) == 0
