"""Window results equal plain-Python definitions for any arrival order within the
out-of-orderness bound and any batch boundaries."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.api import Hopping, Session, Sliding, Tumbling, WindowSpec
from tests.conftest import Kit

rows_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5_000)), max_size=40)
cuts_st = st.lists(st.integers(0, 40), max_size=5)
SETTINGS = settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


Rows = list[tuple[str, int]]


def run(kit: type[Kit], spec: WindowSpec, rows: Rows, cuts: list[int]) -> Counter[tuple[Any, ...]]:
    task = kit.task(kit.window_job(spec, out_of_orderness_ms=10_000))
    records = kit.records([(k, 0, ts) for k, ts in rows])
    bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    for lo, hi in itertools.pairwise(bounds):
        task.feed_source("events", 0, records[lo:hi], 0.0)
    task.end_input("events", 0, 0.0)
    assert task.metrics["late_dropped"] == 0
    return Counter(tuple(v) for _, v, _ in kit.sink(task.drain(), "out"))


@SETTINGS
@given(rows=rows_st, cuts=cuts_st)
def test_hopping_count(kit: type[Kit], rows: Rows, cuts: list[int]) -> None:
    size, adv = 1000, 250
    expected: Counter = Counter()
    for k, ts in rows:
        for s in range(ts - ts % adv - size + adv, ts + 1, adv):
            expected[(k, s, s + size)] += 1
    assert run(kit, Hopping(size, adv), rows, cuts) == Counter(
        {(k, s, e, n): 1 for (k, s, e), n in expected.items()}
    )


def session_counts(stamps_by_key: dict[Any, list[int]], gap: int) -> Counter:
    """The model of a session count: per key, timestamps at most ``gap`` apart share a
    session; one ``(key, first, last + gap, count)`` per session (also the rescaled
    job's model in ``integration/test_rescale_stateful.py``)."""
    out: Counter = Counter()
    for k, unsorted in stamps_by_key.items():
        stamps = sorted(unsorted)
        start, last, n = stamps[0], stamps[0], 0
        for t in stamps:
            if t - last > gap:
                out[(k, start, last + gap, n)] += 1
                start, n = t, 0
            last, n = t, n + 1
        out[(k, start, last + gap, n)] += 1
    return out


def kafka_streams_sliding(rows: list[tuple[str, int]], d: int) -> Counter:
    """Kafka Streams' sliding windows by definition: per distinct timestamp t of a key
    the left window [t - d, t] and, when non-empty, the right window [t + 1, t + 1 + d];
    as (key, start, exclusive end, count)."""
    out: set[tuple[str, int, int, int]] = set()
    for k, t in set(rows):
        for start in (t - d, t + 1):
            n = sum(1 for k2, t2 in rows if k2 == k and start <= t2 <= start + d)
            if n:
                out.add((k, start, start + d + 1, n))
    return Counter(dict.fromkeys(out, 1))


@SETTINGS
@given(rows=rows_st, cuts=cuts_st)
def test_sliding_count(kit: type[Kit], rows: Rows, cuts: list[int]) -> None:
    assert run(kit, Sliding(700), rows, cuts) == kafka_streams_sliding(rows, 700)


@SETTINGS
@given(rows=rows_st, cuts=cuts_st)
def test_session_count(kit: type[Kit], rows: Rows, cuts: list[int]) -> None:
    gap = 300
    by_key: dict[str, list[int]] = defaultdict(list)
    for k, ts in rows:
        by_key[k].append(ts)
    assert run(kit, Session(gap), rows, cuts) == session_counts(by_key, gap)


def outputs(
    kit: type[Kit], spec: WindowSpec, rows: Rows, cuts: list[int] | None, allowed: int
) -> tuple[Counter[tuple[Any, ...]], int]:
    """Results (as a multiset) and late count of ``rows`` fed in the batches ``cuts``
    makes (``None``: one record per batch)."""
    task = kit.task(kit.window_job(spec, out_of_orderness_ms=100, allowed_lateness_ms=allowed))
    records = kit.records([(k, 0, ts) for k, ts in rows])
    if cuts is None:
        bounds = list(range(len(records) + 1))
    else:
        bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    for lo, hi in itertools.pairwise(bounds):
        task.feed_source("events", 0, records[lo:hi], 0.0)
    task.end_input("events", 0, 0.0)
    return Counter(tuple(v) for _, v, _ in kit.sink(task.drain(), "out")), task.metrics[
        "late_dropped"
    ]


@SETTINGS
@given(
    rows=rows_st,
    cuts=cuts_st,
    allowed=st.sampled_from([0, 150]),
    spec=st.sampled_from([Tumbling(1000), Hopping(1000, 250), Sliding(300), Session(200)]),
)
def test_lateness_does_not_depend_on_how_records_are_batched(
    kit: type[Kit], rows: Rows, cuts: list[int], allowed: int, spec: WindowSpec
) -> None:
    """Per-record watermarks: every record is judged against the watermark just before
    it, so a batch gives what the same records one at a time give (a catch-up reads
    big batches, a live run small ones)."""
    assert outputs(kit, spec, rows, cuts, allowed) == outputs(kit, spec, rows, None, allowed)
