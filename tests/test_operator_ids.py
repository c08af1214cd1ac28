"""Stable operator ids and the restore compatibility rule (job upgrades), no broker.

A stateful operator's id is its ``name=`` or ``<stage>.<kind><k>`` (k counts the
stateful operators of that kind in the stage); its state lives under that id, so
a new topology version with stateless operators added or removed restores it.
"""

from __future__ import annotations

from typing import Any

import pytest

from kstream.api import Hopping, Topology, Tumbling, WatermarkStrategy
from kstream.api.process import MapState, ValueState
from kstream.plan import plan_job
from kstream.plan.compat import IncompatibleStateError, check_restorable, incompatibilities
from kstream.plan.model import JobPlan, PlanError
from kstream.plan.operators import describe, operator_ids
from kstream.runtime.task import Task
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit


def wordcount(
    *,
    v2: bool = False,
    window: Any = None,
    agg: str = "count",
    key_serde: str = "str",
    partitions: int | None = None,
    name: str | None = None,
    extra_process: bool = False,
) -> JobPlan:
    """Word count; ``v2`` adds a filter before the window and a map after it (in both
    stages) — stateless operators only."""
    t = Topology("wc")
    s = t.source("lines", value_serde="str", watermark=WatermarkStrategy(0))
    if v2:
        s = s.filter(lambda line: not line.startswith("#"))
    k: Any = s.flat_map(str.split).key_by(lambda w: w, key_serde=key_serde, partitions=partitions)
    if v2:
        k = k.filter(lambda w: w != "ignored")
    w = k.window(window or Tumbling(1000), name=name)
    res = w.count() if agg == "count" else w.aggregate(lambda: 0, lambda a, v: a + 1)
    if extra_process:
        res = res.process(lambda key, value, ts, state, out: out(value), state={"m": MapState()})
    out = res.map(lambda r: [r.key, r.start, r.end, r.value])
    if v2:
        out = out.map(lambda row: row)
    out.to("counts")
    return plan_job(t, "wc", {"lines": 2})


def test_default_ids_ignore_stateless_operators() -> None:
    v1, v2 = wordcount(), wordcount(v2=True)
    assert list(operator_ids(v1).values()) == ["stage1.window0"]
    assert list(operator_ids(v2).values()) == ["stage1.window0"]
    # The node ids moved (a filter came first), the stable id did not.
    assert operator_ids(v1).keys() != operator_ids(v2).keys()
    assert incompatibilities(describe(v1), describe(v2)) == []


def test_ids_count_per_kind_within_the_stage_and_names_win() -> None:
    plan = wordcount(extra_process=True)
    assert sorted(operator_ids(plan).values()) == ["stage1.process0", "stage1.window0"]
    named = wordcount(name="counts")
    assert list(operator_ids(named).values()) == ["counts"]


def test_duplicate_names_are_refused() -> None:
    t = Topology("dup")
    k = t.source("in", keyed=True)
    k.window(Tumbling(10), name="x").count().process(lambda *a: None, name="x").to("out")
    with pytest.raises(PlanError, match="two stateful operators have the id 'x'"):
        plan_job(t, "dup", {"in": 1})


def test_changed_window_spec_is_refused_naming_the_operator() -> None:
    problems = incompatibilities(describe(wordcount()), describe(wordcount(window=Tumbling(2000))))
    assert problems == [
        "operator 'stage1.window0': its window changed from "
        "'Tumbling(size_ms=1000, offset_ms=0)' to 'Tumbling(size_ms=2000, offset_ms=0)'; its "
        "state cannot be read as the new one (give the changed operator a new name=... to "
        "start it empty)"
    ]
    kinds = incompatibilities(describe(wordcount()), describe(wordcount(window=Hopping(1000, 500))))
    assert len(kinds) == 1 and "its window changed" in kinds[0]


def test_changed_aggregation_and_key_serde_are_refused() -> None:
    agg = incompatibilities(describe(wordcount()), describe(wordcount(agg="aggregate")))
    assert len(agg) == 1
    assert agg[0].startswith("operator 'stage1.window0': its aggregation changed from 'count'")
    ks = incompatibilities(describe(wordcount()), describe(wordcount(key_serde="json")))
    assert len(ks) == 1
    assert ks[0].startswith("operator 'stage1.window0': its key serde changed from 'str' to 'json'")


def test_changed_process_state_is_refused() -> None:
    def job(state: dict[str, Any]) -> JobPlan:
        t = Topology("p")
        t.source("in", keyed=True).process(lambda *a: None, state=state, name="f").to("out")
        return plan_job(t, "p", {"in": 1})

    ok = describe(job({"m": MapState()}))
    assert incompatibilities(ok, describe(job({"m": MapState(ttl_ms=5)}))) == []
    (problem,) = incompatibilities(ok, describe(job({"m": ValueState()})))
    assert "operator 'f': its state changed from 'm: MapState' to 'm: ValueState'" in problem


def test_state_of_a_removed_operator_is_refused_unless_allowed() -> None:
    old, new = describe(wordcount(extra_process=True)), describe(wordcount())
    with pytest.raises(IncompatibleStateError) as e:
        check_restorable(old, new, what="savepoint sp-1")
    assert str(e.value).startswith(
        "savepoint sp-1 cannot be restored under this topology: operator 'stage1.process0' "
        "(process) has state in the checkpoint but is not in this topology"
    )
    check_restorable(old, new, allow_non_restored_state=True)  # dropped on purpose
    check_restorable(new, old)  # a new operator starts empty
    check_restorable(None, new)  # a checkpoint from before descriptions


def test_changed_internal_partition_count_is_refused() -> None:
    problems = incompatibilities(describe(wordcount()), describe(wordcount(partitions=4)))
    assert problems == [
        "stage1 has 4 partitions but the checkpoint has 2: state is partitioned by key, so a "
        "changed partition count cannot be restored",
        "internal topic <app>.stage0.repartition has 4 partitions but 2 in the checkpoint: "
        "changing an internal topic's partition count is not supported (state is partitioned "
        "by key)",
    ]


def keyed_count(*, v2: bool) -> JobPlan:
    """One stage: keyed source -> [filter] -> window count -> [map] -> map -> sink."""
    t = Topology("wc")
    s: Any = t.source("events", keyed=True, watermark=WatermarkStrategy(0))
    if v2:
        s = s.filter(lambda v: v != "skip")
    res = s.window(Tumbling(1000)).count()
    if v2:
        res = res.map(lambda r: r)
    res.map(lambda r: [r.key, r.start, r.end, r.value]).to("out")
    return plan_job(t, "wc", {"events": 1})


def test_state_survives_an_upgrade_that_adds_stateless_operators(kit: type[Kit]) -> None:
    """v1 counts part of a window; v2 (a filter before the window, a map after it) on the
    same state finishes it: the count continues, it does not restart at zero."""
    backend = MemoryBackend()
    v1 = Task(keyed_count(v2=False), "stage0-0", backend)
    v1.feed_source("events", 0, kit.records([("a", 1, 100), ("a", 1, 200)]), 0.0)
    assert kit.sink(v1.drain(), "out") == []
    assert "stage0.window0.acc" in backend.tables()
    v2 = Task(keyed_count(v2=True), "stage0-0", backend)  # same tables, new topology
    v2.feed_source("events", 0, kit.records([("a", "skip", 300), ("a", 1, 1500)], 2), 0.0)
    assert kit.sink(v2.drain(), "out") == [("a", ["a", 0, 1000, 2], 999)]
