"""Lateness across every stage boundary: a record late where it entered the job is late
at every later stage, however the upstream tasks' writes interleave and whatever the
batching.

source (3 partitions) -> filter -> key_by (2 partitions) -> a rolling reduce (records
pass through, each with its timestamp) or a 10 s tumbling count -> key_by (3
partitions) -> a tumbling count. The middle stage's tasks judge a run of one upstream
task's records against that task's watermark when it is ahead of their own (the
minimum over upstream tasks); the third stage must judge what they write against the
same watermark (``Watermark.judged``), not against the middle tasks' minimum. The
expected output is computed from the input by the documented rule alone: a record is
late when its window ended at or before its source partition's ``max earlier
timestamp - out_of_orderness``; a window result of the middle stage (timestamp ``end -
1``, written before the watermark that fired it) is never late downstream.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.api import Topology, Tumbling, WatermarkStrategy
from kstream.elements.events import MIN_TS
from kstream.elements.records import InternalEvent, InternalRecord
from kstream.plan import JobPlan, plan_job
from kstream.runtime import OutputBatch, OutputEvent, SourceRecord, Task
from kstream.state.memory import MemoryBackend
from tests.test_repartition_lateness import DROPPED, OOO, PARTS, SIZE, cut, inputs, sizes

WIDE = 3 * SIZE  # the third stage's window over the middle stage's window results


def plan(middle: str) -> JobPlan:
    t = Topology("late3")
    s = t.source("events", watermark=WatermarkStrategy(max_out_of_orderness_ms=OOO))
    keyed = s.filter(lambda v: v != DROPPED).key_by(lambda v: v, key_serde="str", partitions=2)
    if middle == "rolling":
        mid = keyed.reduce(lambda a, b: b)  # every record goes on, with its timestamp
        size = SIZE
    else:
        mid = keyed.window(Tumbling(SIZE)).count().map(lambda r: r.key)
        size = WIDE
    (
        mid.key_by(lambda v: v, key_serde="str", partitions=3)
        .window(Tumbling(size))
        .count()
        .map(lambda r: [r.key, r.start, r.end, r.value])
        .to("out")
    )
    return plan_job(t, "late3", {"events": PARTS})


PLANS = {m: plan(m) for m in ("rolling", "window")}


def expected(middle: str, parts: list[list[tuple[str, int]]]) -> Counter[tuple[Any, ...]]:
    """The documented rule, applied to the input alone."""
    counts: Counter[tuple[str, int]] = Counter()  # (key, 10 s window start): records
    for rows in parts:
        wm = MIN_TS
        for key, ts in rows:
            start = ts - ts % SIZE
            if key != DROPPED and start + SIZE > wm:
                counts[(key, start)] += 1
            wm = max(wm, ts - OOO)
    if middle == "window":  # one result per 10 s window, counted per 30 s window
        counts = Counter((k, s - s % WIDE) for k, s in counts)
    size = SIZE if middle == "rolling" else WIDE
    return Counter({(k, s, s + size, n): 1 for (k, s), n in counts.items()})


Chunk = list[tuple[str, Any]]  # ("r", (partition, key, value, ts)) or ("e", event)
Writes = dict[str, list[Chunk]]  # per writing task: its write batches, in order


def drained(task: Task, topic: str | None) -> tuple[Chunk, list[bytes]]:
    """What one call wrote to ``topic`` (one write batch) and the sink values."""
    chunk: Chunk = []
    sink: list[bytes] = []
    for o in task.drain():
        if isinstance(o, OutputBatch) and o.internal and o.topic == topic:
            assert o.partitions is not None
            rows = zip(o.partitions, o.keys, o.values, o.timestamps, strict=True)
            chunk += [("r", row) for row in rows]
        elif isinstance(o, OutputEvent) and o.internal and o.topic == topic:
            chunk.append(("e", o.event))
        elif isinstance(o, OutputBatch) and o.topic == "out":
            sink += [v for v in o.values if v is not None]
    return chunk, sink


def per_partition(writes: Writes, partitions: int) -> list[dict[str, list[Chunk]]]:
    """Each writer's batches as they reach each partition (events go to every one)."""
    out: list[dict[str, list[Chunk]]] = [{} for _ in range(partitions)]
    for w, chunks in writes.items():
        for chunk in chunks:
            split: list[Chunk] = [[] for _ in range(partitions)]
            for kind, item in chunk:
                if kind == "r":
                    split[item[0]].append(("r", item[1:]))
                else:
                    for q in range(partitions):
                        split[q].append(("e", item))
            for q, part in enumerate(split):
                if part:
                    out[q].setdefault(w, []).append(part)
    return out


def interleaved(by_writer: dict[str, list[Chunk]], order: list[int]) -> list[Any]:
    """A partition's log: the writers' batches in the interleaving ``order`` picks."""
    pending = {w: list(cs) for w, cs in by_writer.items()}
    log: list[InternalRecord | InternalEvent] = []
    i = 0
    while pending:
        writers = sorted(pending)
        w = writers[order[i % len(order)] % len(writers)] if order else writers[0]
        i += 1
        for kind, item in pending[w].pop(0):
            if kind == "r":
                log.append(InternalRecord(w, 0, len(log), *item))
            else:
                log.append(InternalEvent(w, 0, len(log), item))
        if not pending[w]:
            del pending[w]
    return log


def run(
    middle: str,
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    orders: list[list[int]],
    down_sizes: list[int],
) -> Counter[tuple[Any, ...]]:
    return Counter(run_plan(PLANS[middle], parts, read_sizes, orders, down_sizes))


def run_plan(
    p: JobPlan,
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    orders: list[list[int]],
    down_sizes: list[int],
) -> list[tuple[Any, ...]]:
    """``p`` run over the input with the given batchings and interleavings (one order
    per hop): what its sink ``out`` got, in the order the last stage's tasks wrote it."""
    stages = [s.name for s in p.stages]
    topics = [t.name for t in p.internal_topics]
    writes: Writes = {}
    for i, rows in enumerate(parts):
        task = Task(p, f"{stages[0]}-{i}", MemoryBackend(), bounded=True)
        records: list[SourceRecord] = [
            (None, json.dumps(k).encode(), ts, n) for n, (k, ts) in enumerate(rows)
        ]
        for call in [*(records[lo:hi] for lo, hi in cut(len(records), read_sizes)), None]:
            if call is None:
                task.end_input("events", i, 0.0)
            else:
                task.feed_source("events", i, call, 0.0)
            chunk, _ = drained(task, topics[0])
            if chunk:
                writes.setdefault(task.task_id, []).append(chunk)
    out: list[tuple[Any, ...]] = []
    for hop, topic in enumerate(topics):
        following = topics[hop + 1] if hop + 1 < len(topics) else None
        spec = next(t for t in p.internal_topics if t.name == topic)
        nxt: Writes = {}
        for q, by_writer in enumerate(per_partition(writes, spec.partitions)):
            task = Task(p, f"{stages[hop + 1]}-{q}", MemoryBackend(), bounded=True)
            log = interleaved(by_writer, orders[hop])
            for lo, hi in cut(len(log), down_sizes):
                task.feed_internal(topic, q, log[lo:hi], 0.0)
                chunk, sink = drained(task, following)
                if chunk:
                    nxt.setdefault(task.task_id, []).append(chunk)
                out += [tuple(json.loads(v)) for v in sink]
            assert task.finished
        writes = nxt
    return out


@pytest.mark.parametrize("middle", ["rolling", "window"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=inputs(),
    read_sizes=sizes,
    orders=st.lists(st.lists(st.integers(0, 5), max_size=20), min_size=2, max_size=2),
    down_sizes=sizes,
)
def test_lateness_is_the_documented_rule_at_every_stage_boundary(
    middle: str,
    parts: list[list[tuple[str, int]]],
    read_sizes: list[int],
    orders: list[list[int]],
    down_sizes: list[int],
) -> None:
    assert run(middle, parts, read_sizes, orders, down_sizes) == expected(middle, parts)


def test_a_third_stage_drops_what_the_source_made_late() -> None:
    """Partition 0 runs far ahead (its batches first at every hop): its record at 1 s is
    late at the source (watermark 205 s); the middle stage passes it on (a rolling
    reduce judges nothing) while its own watermark is still partition 1's, and the third
    stage must drop it all the same."""
    parts = [[("a", 200_000), ("a", 210_000), ("a", 1_000)], [("a", 5_000)], []]
    want = expected("rolling", parts)
    assert want == Counter(
        {("a", 200_000, 210_000, 1): 1, ("a", 210_000, 220_000, 1): 1, ("a", 0, 10_000, 1): 1}
    )
    assert run("rolling", parts, [50], [[0], [0]], [50]) == want
