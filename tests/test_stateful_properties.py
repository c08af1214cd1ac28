"""Exactly-once state and timers, property-based: for any input within the examples'
out-of-orderness bound, any batch boundaries and a checkpoint at any point, the
output published before the checkpoint plus the output of a task restored from it
equals the example's ``expected_output`` (and so does the failure-free run)."""

from __future__ import annotations

import itertools
import json
import runpy
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.plan import plan_job
from kstream.runtime import SnapshotPoint
from kstream.state.memory import MemoryBackend
from tests.conftest import Kit

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
steps_st = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["created", "created", "paid", "shipped"]),
        st.sampled_from([0, 1_000, 60_000, 900_000, 2_000_000]),  # event-time step
        st.integers(0, 3_999),  # disorder, within the examples' 5 s bound
    ),
    max_size=30,
)
cuts_st = st.lists(st.integers(0, 30), max_size=4)


def _rows(name: str, steps: list[tuple[str, str, int, int]]) -> list[tuple[str, Any, int]]:
    now, rows = 10_000_000, []
    for key, event, step, jitter in steps:
        now += step
        ts = now - jitter
        value = (
            {"order_id": key, "event": event, "ts": ts}
            if name == "order_states"
            else {"user": key, "ts": ts}
        )
        rows.append((key, value, ts))
    return rows


def _canon(rows: list[tuple[Any, Any, int]]) -> Counter[str]:
    return Counter(json.dumps(v, sort_keys=True) for _k, v, _t in rows)


def _check(
    kit: type[Kit], name: str, steps: list[tuple[str, str, int, int]], cuts: list[int], at: int
) -> None:
    module = runpy.run_path(str(TOPOLOGIES / f"{name}.py"))
    topic, sink = module["SOURCE"], module["SINK"]
    plan = plan_job(module["topology"], name, {topic: 1})
    rows = _rows(name, steps)
    records = kit.records(rows)
    n = len(records)
    at = min(at, n)
    bounds = sorted({0, n, at, *(c for c in cuts if c <= n)})
    backend = MemoryBackend()
    saved: dict[str, Any] = {}

    def on_snapshot(p: SnapshotPoint) -> None:
        saved["point"], saved["state"] = p, backend.snapshot()

    task = kit.task(plan, "stage0-0", backend=backend, on_snapshot=on_snapshot)
    before: list[tuple[Any, Any, int]] = []
    for lo, hi in itertools.pairwise(bounds):
        if lo == at:
            task.trigger_checkpoint(1, 0, 0.0)
            before = kit.sink(task.drain(), sink)
        task.feed_source(topic, 0, records[lo:hi], 0.0)
    if at == n:
        task.trigger_checkpoint(1, 0, 0.0)
        before = kit.sink(task.drain(), sink)
    task.end_input(topic, 0, 0.0)
    after_failure_free = kit.sink(task.drain(), sink)

    restored = kit.task(plan, "stage0-0", backend=MemoryBackend.restore(saved["state"]), attempt=1)
    position = saved["point"].positions[(topic, 0)] or 0
    for lo, hi in itertools.pairwise(sorted({position, n, *(b for b in bounds if b > position)})):
        restored.feed_source(topic, 0, records[lo:hi], 0.0)
    restored.end_input(topic, 0, 0.0)
    replayed = kit.sink(restored.drain(), sink)

    expected = Counter(
        json.dumps(r, sort_keys=True) for r in module["expected_output"]({topic: rows})
    )
    assert _canon(before + after_failure_free) == expected
    assert _canon(before + replayed) == expected


@SETTINGS
@given(steps=steps_st, cuts=cuts_st, at=st.integers(0, 30))
def test_order_state_machine_exactly_once_across_a_restore(
    kit: type[Kit], steps: list[tuple[str, str, int, int]], cuts: list[int], at: int
) -> None:
    _check(kit, "order_states", steps, cuts, at)


@SETTINGS
@given(steps=steps_st, cuts=cuts_st, at=st.integers(0, 30))
def test_inactivity_alerts_exactly_once_across_a_restore(
    kit: type[Kit], steps: list[tuple[str, str, int, int]], cuts: list[int], at: int
) -> None:
    _check(kit, "inactivity", steps, cuts, at)


@SETTINGS
@given(steps=steps_st, cuts=cuts_st, at=st.integers(0, 30))
def test_dedup_exactly_once_across_a_restore(
    kit: type[Kit], steps: list[tuple[str, str, int, int]], cuts: list[int], at: int
) -> None:
    _check(kit, "dedup", steps, cuts, at)
