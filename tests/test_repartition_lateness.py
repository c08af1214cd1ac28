"""Lateness behind a repartition does not depend on batching or on how the upstream
tasks' writes interleave in an internal partition.

source (3 partitions, one upstream task each) -> filter -> key_by -> 10 s tumbling
count, allowed lateness 0. The documented rule: a record is late when its window ended at or before
the watermark of its upstream task just before it — for a source task, its partition's
``max earlier timestamp - out_of_orderness``. The expected output is computed from the
input by that rule alone (not by another kstream run); every batching of the source
reads, every interleaving of the upstream tasks' write batches in each internal
partition and every read batching downstream must give it exactly (a live run and a
catch-up of a backlog are two of them).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.elements.events import MIN_TS
from kstream.elements.records import InternalEvent, InternalRecord
from kstream.plan import JobPlan, plan_job
from kstream.runtime import OutputBatch, OutputEvent, SourceRecord, Task
from kstream.state.memory import MemoryBackend

SIZE, OOO, PARTS, INTERNAL = 10_000, 5_000, 3, 2
KEYS = ["a", "b", "c", "d"]
DROPPED = "d"


def plan() -> JobPlan:
    t = Topology("late")
    s = t.source("events", watermark=WatermarkStrategy(max_out_of_orderness_ms=OOO))
    (
        s.filter(lambda v: v != DROPPED)  # a batch of only these writes nothing downstream
        .key_by(lambda v: v, key_serde="str", partitions=INTERNAL)
        .window(Tumbling(SIZE))
        .count()
        .map(lambda r: [r.key, r.start, r.end, r.value])
        .to("out")
    )
    return plan_job(t, "late", {"events": PARTS})


PLAN = plan()
STAGES = [s.name for s in PLAN.stages]
TOPIC = PLAN.internal_topics[0].name


def expected(parts: list[list[tuple[str, int]]]) -> Counter[tuple[Any, ...]]:
    counts: Counter[tuple[str, int]] = Counter()
    for rows in parts:
        wm = MIN_TS
        for key, ts in rows:
            start = ts - ts % SIZE
            if key != DROPPED and start + SIZE > wm:  # not filtered, not late
                counts[(key, start)] += 1
            wm = max(wm, ts - OOO)
    return Counter({(k, s, s + SIZE, n): 1 for (k, s), n in counts.items()})


def cut(n: int, sizes: list[int]) -> list[tuple[int, int]]:
    """``[lo, hi)`` batches of ``range(n)`` of the given sizes (cycled)."""
    out, lo, i = [], 0, 0
    while lo < n:
        hi = min(n, lo + max(1, sizes[i % len(sizes)]))
        out.append((lo, hi))
        lo, i = hi, i + 1
    return out


Chunk = list[tuple[str, Any]]  # ("r", (key, value, ts)) or ("e", event), one write batch


def run(
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    interleave: list[int],
    down_sizes: list[int],
) -> Counter[tuple[Any, ...]]:
    # Upstream: each task reads its partition in batches; what it writes to each internal
    # partition per call is one write batch (the worker's producer batches are larger
    # still: a chunk boundary is the finest a writer's stream is ever cut at).
    chunks: dict[int, dict[str, list[Chunk]]] = {p: {} for p in range(INTERNAL)}
    for p, rows in enumerate(parts):
        task = Task(PLAN, f"{STAGES[0]}-{p}", MemoryBackend(), bounded=True)
        records: list[SourceRecord] = [
            (None, json.dumps(k).encode(), ts, i) for i, (k, ts) in enumerate(rows)
        ]
        calls = [records[lo:hi] for lo, hi in cut(len(records), read_sizes)]
        for call in [*calls, None]:
            if call is None:
                task.end_input("events", p, 0.0)
            else:
                task.feed_source("events", p, call, 0.0)
            per: dict[int, Chunk] = {q: [] for q in range(INTERNAL)}
            for o in task.drain():
                if isinstance(o, OutputBatch) and o.internal:
                    assert o.partitions is not None
                    for q, k, v, t in zip(
                        o.partitions, o.keys, o.values, o.timestamps, strict=True
                    ):
                        per[q].append(("r", (k, v, t)))
                elif isinstance(o, OutputEvent) and o.internal:
                    for q in range(INTERNAL):
                        per[q].append(("e", o.event))
            for q, chunk in per.items():
                if chunk:
                    chunks[q].setdefault(task.task_id, []).append(chunk)
    # Each internal partition's log: the writers' batches in an arbitrary interleaving.
    out: Counter[tuple[Any, ...]] = Counter()
    for q in range(INTERNAL):
        pending = {w: list(cs) for w, cs in chunks[q].items()}
        log: list[InternalRecord | InternalEvent] = []
        i = 0
        while pending:
            writers = sorted(pending)
            w = (
                writers[interleave[i % len(interleave)] % len(writers)]
                if interleave
                else writers[0]
            )
            i += 1
            for kind, item in pending[w].pop(0):
                if kind == "r":
                    log.append(InternalRecord(w, 0, len(log), *item))
                else:
                    log.append(InternalEvent(w, 0, len(log), item))
            if not pending[w]:
                del pending[w]
        task = Task(PLAN, f"{STAGES[1]}-{q}", MemoryBackend(), bounded=True)
        for lo, hi in cut(len(log), down_sizes):
            task.feed_internal(TOPIC, q, log[lo:hi], 0.0)
        assert task.finished
        for o in task.drain():
            if isinstance(o, OutputBatch) and o.topic == "out":
                out.update(tuple(json.loads(v)) for v in o.values if v is not None)
    return out


def stream(draw: Any) -> list[tuple[str, int]]:
    """A partition's records: in order up to 2 s of disorder, now and then one 120-300 s
    late (the probe's kind of input, on a compressed time scale)."""
    rows, now = [], 0
    for _ in range(draw(st.integers(0, 40))):
        now += draw(st.integers(0, 3_000))
        kind = draw(st.sampled_from(["in order"] * 8 + ["disorder", "late"]))
        delay = {"in order": 0, "disorder": draw(st.integers(0, 2_000))}.get(
            kind, draw(st.integers(120_000, 300_000))
        )
        rows.append((draw(st.sampled_from(KEYS)), max(0, now - delay)))
    return rows


@st.composite
def inputs(draw: Any) -> list[list[tuple[str, int]]]:
    # Partitions start at different event times: a catch-up runs one ahead of another.
    return [[(k, t + draw(st.integers(0, 400_000))) for k, t in stream(draw)] for _ in range(PARTS)]


sizes = st.lists(st.integers(1, 50), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=inputs(),
    read_sizes=sizes,
    interleave=st.lists(st.integers(0, 5), max_size=20),
    down_sizes=sizes,
)
def test_lateness_behind_a_repartition_is_the_documented_rule_for_any_interleaving(
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    interleave: list[int],
    down_sizes: list[int],
) -> None:
    assert run(parts, read_sizes, interleave, down_sizes) == expected(parts)


def test_a_backlog_does_not_count_what_a_live_run_drops() -> None:
    """Partition 0 is far ahead of partition 1 (a backlog read one partition after the
    other): its late record must be dropped although partition 1's watermark, which the
    downstream task's watermark is the minimum of, is still far behind."""
    parts = [[("a", 200_000), ("a", 210_000), ("a", 1_000)], [("a", 5_000)], []]
    want = expected(parts)
    assert want == Counter(
        {("a", 200_000, 210_000, 1): 1, ("a", 210_000, 220_000, 1): 1, ("a", 0, 10_000, 1): 1}
    )
    assert run(parts, [50], [0], [50]) == want  # writer 0's batches all come first


def test_a_watermark_reached_without_writing_goes_downstream_before_the_next_record() -> None:
    """A batch the filter empties moves the upstream watermark (to 195 s) without
    writing; the next batch's first record (150 s, behind it) makes no cut, and it is
    late downstream all the same: the watermark goes out before it."""
    parts = [[("a", 100_000), (DROPPED, 200_000), ("a", 150_000)], [], []]
    assert expected(parts) == Counter({("a", 100_000, 110_000, 1): 1})
    assert run(parts, [1], [0], [50]) == expected(parts)
