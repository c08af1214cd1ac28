"""Lateness behind a repartition for sliding windows and for an allowed lateness above
0: the windows a record counts in follow the documented rule, whatever the batching
and the interleaving of the upstream tasks' writes.

The rule: a record counts in exactly the windows that end after ``W - allowed``, where
``W`` is the watermark it was judged against where it entered the job (its source
partition's ``max earlier timestamp - out_of_orderness``). Behind a repartition
downstream windows fire on the minimum over upstream tasks, so a window that ends at or
before ``W - allowed`` may not have fired yet when the record arrives: a sliding
window computes its result from a buffer it shares with its neighbours, and the record
must stay out of it all the same. With an allowed lateness above 0 a record inside it
may arrive before or after its window first fired (that depends on the other upstream
tasks' progress): how often a window is emitted may differ, its last (final) value may
not. Source (3 partitions) -> filter -> key_by -> window count; the expected output is
computed from the input alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.api import Sliding, Topology, Tumbling, WatermarkStrategy
from kstream.elements.events import MIN_TS
from kstream.plan import JobPlan, plan_job
from tests.test_lateness_three_stages import run_plan
from tests.test_repartition_lateness import DROPPED, OOO, PARTS, SIZE, inputs, sizes

DIFF = 10_000  # sliding windows: records at most 10 s apart
SPAN = DIFF + 1
ALLOWED = 4_000


def plan(kind: str, allowed: int) -> JobPlan:
    t = Topology("latew")
    s = t.source("events", watermark=WatermarkStrategy(max_out_of_orderness_ms=OOO))
    spec = Sliding(DIFF) if kind == "sliding" else Tumbling(SIZE)
    (
        s.filter(lambda v: v != DROPPED)
        .key_by(lambda v: v, key_serde="str", partitions=2)
        .window(spec, allowed_lateness_ms=allowed)
        .count()
        .map(lambda r: [r.key, r.start, r.end, r.value])
        .to("out")
    )
    return plan_job(t, "latew", {"events": PARTS})


CASES = [("sliding", 0), ("sliding", ALLOWED), ("tumbling", ALLOWED)]
PLANS = {case: plan(*case) for case in CASES}


def judged(parts: list[list[tuple[str, int]]], allowed: int) -> dict[str, list[tuple[int, int]]]:
    """Per key, ``(timestamp, after)`` of each record: it counts in the windows ending
    after ``after``."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for rows in parts:
        wm = MIN_TS
        for key, ts in rows:
            if key != DROPPED:
                out[key].append((ts, wm - allowed))
            wm = max(wm, ts - OOO)
    return out


def expected(kind: str, allowed: int, parts: list[list[tuple[str, int]]]) -> set[tuple[Any, ...]]:
    """The final result of every window, by the rule alone."""
    results: set[tuple[Any, ...]] = set()
    for key, recs in judged(parts, allowed).items():
        if kind == "tumbling":
            ends = {t - t % SIZE + SIZE for t, _ in recs}
            size = SIZE
        else:  # Kafka Streams' windows: the left one of each record not late for it
            # (its first window), the right one of each record not late for all of them
            ends = {t + 1 for t, after in recs if t + 1 > after}
            ends |= {t + 1 + SPAN for t, after in recs if t + SPAN > after}
            size = SPAN
        for e in ends:
            n = sum(1 for t, after in recs if e - size <= t < e and e > after)
            if n:
                results.add((key, e - size, e, n))
    return results


@pytest.mark.parametrize("case", CASES, ids=[f"{k}-allowed{a}" for k, a in CASES])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=inputs(), read_sizes=sizes, order=st.lists(st.integers(0, 5), max_size=20))
def test_windows_count_a_record_as_the_rule_says_for_any_interleaving(
    case: tuple[str, int],
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    order: list[int],
) -> None:
    kind, allowed = case
    got = run_plan(PLANS[case], parts, read_sizes, [order], read_sizes[::-1])
    last = {tuple(r[:3]): r for r in got}  # each window's final value: its last result
    assert set(last.values()) == expected(kind, allowed, parts)
    if allowed == 0:  # every window once
        assert len(got) == len(last)
    else:  # a late firing only ever adds to a window
        assert all(r[3] <= last[tuple(r[:3])][3] for r in got)


def test_a_sliding_window_closed_at_the_writer_leaves_its_partly_late_record_out() -> None:
    """Partition 0's record at 8 s arrives when its watermark is 15 s: the windows
    ending at or before 15 s closed there — [0, 10 001), the left window of its record
    at 10 s, among them, which has not fired downstream yet (partition 1's watermark
    holds it back) — and it counts in no window ending later either, but it opens its
    right window [8 001, 18 002) (it is not late for all its windows)."""
    parts = [[("a", 10_000), ("a", 20_000), ("a", 8_000)], [("a", 0)], []]
    want = expected("sliding", 0, parts)
    assert ("a", 0, 10_001, 2) in want  # the records at 0 s and 10 s, not the one at 8 s
    assert ("a", 8_001, 18_002, 1) in want
    assert Counter(run_plan(PLANS[("sliding", 0)], parts, [50], [[0]], [50])) == Counter(
        dict.fromkeys(want, 1)
    )
