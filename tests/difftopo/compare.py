"""Running generated graphs in-process and reducing what they wrote to what is
deterministic: per sink, the sorted multiset of ``(key, value)``."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from kstream.api import Topology
from kstream.api.stream import SinkSpec
from kstream.elements.records import (
    DeadLetter,
    InternalEvent,
    InternalRecord,
    OutputBatch,
    OutputEvent,
    SourceRecord,
)
from kstream.plan import PlanError, plan_job
from kstream.plan.model import InputKind, JobPlan
from kstream.runtime.task import Task
from kstream.state.memory import MemoryBackend
from kstream.testing import Raw, TopologyRun, run_topology
from tests.difftopo.generate import Inputs
from tests.difftopo.grammar import Graph, build, render

Canonical = dict[str, list[tuple[Any, str]]]


def topology_of(graphs: Sequence[tuple[str, Graph]], name: str = "difftest") -> Topology:
    """One topology holding every ``(prefix, graph)`` as an independent sub-graph."""
    t = Topology(name)
    for prefix, g in graphs:
        build(g, t, prefix)
    return t


def partition_counts(g: Graph, prefix: str = "", *, all_one: bool = False) -> dict[str, int]:
    return {g.source_topic(prefix, i): 1 if all_one else s.partitions
            for i, s in enumerate(g.sources)}  # fmt: skip


def plan_problem(g: Graph, *, all_one: bool = False) -> str | None:
    """Why the planner refuses ``g`` (co-partitioning), or None."""
    try:
        plan_job(topology_of([("", g)]), "difftest", partition_counts(g, all_one=all_one))
    except PlanError as e:
        return str(e)
    return None


def topic_inputs(g: Graph, ins: Inputs, prefix: str = "", *, all_one: bool = False
                 ) -> dict[str, list[tuple[Any, ...]]]:  # fmt: skip
    return {g.source_topic(prefix, i): [(k, v, ts, 0 if all_one else p) for k, v, ts, p in rs]
            for i, rs in ins.items()}  # fmt: skip


def run_harness(g: Graph, ins: Inputs, prefix: str = "", *, all_one: bool = False) -> TopologyRun:
    return run_topology(
        topology_of([(prefix, g)]),
        topic_inputs(g, ins, prefix, all_one=all_one),
        partitions=partition_counts(g, prefix, all_one=all_one),
        app_id="difftest",
    )


def canonical(outputs: Mapping[str, Sequence[tuple[Any, Any, int]]]) -> Canonical:
    """Per sink: its ``(key, value as sorted JSON)`` sorted (timestamps dropped: a
    rolling count's depend on the order of its input)."""
    return {
        topic: sorted(
            ((k, json.dumps(v, sort_keys=True)) for k, v, *_ in records),
            key=lambda kv: (str(kv[0]), kv[1]),
        )
        for topic, records in outputs.items()
    }


def describe(g: Graph, ins: Inputs, prefix: str = "") -> str:
    """The failing case as a user would write it: the topology and its inputs."""
    lines = [render(g, prefix), "# inputs (key, value, ts, partition):"]
    for i, records in ins.items():
        shown = [(k, v.data if isinstance(v, Raw) else v, ts, p) for k, v, ts, p in records]
        lines.append(f"#   {g.source_topic(prefix, i)}: {shown}")
    lines.append(f"# graph json: {g.to_json()}")
    return "\n".join(lines)


def run_interleaved(
    g: Graph, ins: Inputs, seed: int, *, max_chunk: int = 4
) -> tuple[Canonical, list[DeadLetter]]:
    """Run every task of ``g``'s plan at once, feeding each a random chunk of one of its
    inputs in a random order (tables first, as ``run_topology`` does): the batching
    and interleaving a worker on a broker might see."""
    topology = topology_of([("", g)])
    plan = plan_job(topology, "difftest", partition_counts(g))
    fed = _encoded(topology, g, ins)
    return _drive(plan, fed, random.Random(seed), max_chunk, topology)


def _encoded(topology: Topology, g: Graph, ins: Inputs) -> dict[str, list[list[SourceRecord]]]:
    out: dict[str, list[list[SourceRecord]]] = {}
    for i, records in ins.items():
        parts: list[list[SourceRecord]] = [[] for _ in range(g.sources[i].partitions)]
        for k, v, ts, p in records:
            value = v.data if isinstance(v, Raw) else json.dumps(v).encode()
            parts[p].append((None if k is None else k.encode(), value, ts, len(parts[p])))
        out[g.source_topic("", i)] = parts
    return out


def _drive(plan: JobPlan, fed: dict[str, list[list[SourceRecord]]], rng: random.Random,
           max_chunk: int, topology: Topology) -> tuple[Canonical, list[DeadLetter]]:  # fmt: skip
    internal: dict[str, list[list[InternalRecord | InternalEvent]]] = {
        t.name: [[] for _ in range(t.partitions)] for t in plan.internal_topics
    }
    sinks: dict[str, list[tuple[Any, Any, int]]] = {}
    dead: list[DeadLetter] = []
    tasks = {t.task_id: Task(plan, t, MemoryBackend(), bounded=True) for t in plan.tasks}
    cursor: dict[tuple[str, str, int], int] = {}
    ended: set[tuple[str, str, int]] = set()
    for task in tasks.values():
        task.tick(0.0, wall_ms=0)
    specs = {t.task_id: t for t in plan.tasks}
    for tid, task in tasks.items():  # tables first, whole
        for inp in specs[tid].inputs:
            if inp.kind is InputKind.TABLE:
                records = _part(fed, inp.topic, inp.partition)
                if records:
                    task.feed_source(inp.topic, inp.partition, records, 0.0)
                task.end_input(inp.topic, inp.partition, 0.0)
                ended.add((tid, inp.topic, inp.partition))
        _collect(task, internal, sinks, dead)
    while True:
        ready: list[tuple[tuple[str, str, int], InputKind]] = []
        for tid, spec in specs.items():
            for inp in spec.inputs:
                key = (tid, inp.topic, inp.partition)
                if key in ended:
                    continue
                if inp.kind is InputKind.INTERNAL:
                    if cursor.get(key, 0) < len(internal[inp.topic][inp.partition]):
                        ready.append((key, inp.kind))
                else:
                    ready.append((key, inp.kind))
        if not ready:
            break
        (tid, topic, part), kind = rng.choice(ready)
        task, at, n = tasks[tid], cursor.get((tid, topic, part), 0), rng.randint(1, max_chunk)
        if kind is InputKind.INTERNAL:
            chunk = internal[topic][part][at : at + n]
            task.feed_internal(topic, part, chunk, 0.0)
            n = len(chunk)
        else:
            records = _part(fed, topic, part)
            chunk_s = records[at : at + n]
            if chunk_s:
                task.feed_source(topic, part, chunk_s, 0.0)
            n = len(chunk_s)
            if at + n >= len(records):
                task.end_input(topic, part, 0.0)
                ended.add((tid, topic, part))
        cursor[(tid, topic, part)] = at + n
        _collect(task, internal, sinks, dead)
    unfinished = [tid for tid, t in tasks.items() if not t.finished]
    assert not unfinished, f"tasks {unfinished} never finished"
    serdes = {n.spec.topic: n.spec.value_serde for n in topology.nodes
              if isinstance(n.spec, SinkSpec)}  # fmt: skip
    decoded = {
        topic: [(None if k is None else k.decode(),
                 None if v is None else serdes[topic].deserialize(v), ts) for k, v, ts in rs]
        for topic, rs in sinks.items()
    }  # fmt: skip
    for topic in serdes:
        decoded.setdefault(topic, [])
    return canonical(decoded), dead


def _part(fed: dict[str, list[list[SourceRecord]]], topic: str, p: int) -> list[SourceRecord]:
    parts = fed.get(topic, [])
    return parts[p] if p < len(parts) else []


def _collect(task: Task, internal: dict[str, list[list[InternalRecord | InternalEvent]]],
             sinks: dict[str, list[tuple[Any, Any, int]]], dead: list[DeadLetter]) -> None:  # fmt: skip
    for item in task.drain():
        if isinstance(item, OutputBatch):
            if item.internal:
                assert item.partitions is not None
                for p, k, v, t in zip(item.partitions, item.keys, item.values, item.timestamps,
                                      strict=True):  # fmt: skip
                    log = internal[item.topic][p]
                    log.append(InternalRecord(task.task_id, task.attempt, len(log), k, v, t))
            else:
                sinks.setdefault(item.topic, []).extend(
                    zip(item.keys, item.values, item.timestamps, strict=True)
                )
        elif isinstance(item, OutputEvent) and item.internal:
            for log in internal[item.topic]:
                log.append(InternalEvent(task.task_id, task.attempt, len(log), item.event))
        elif isinstance(item, DeadLetter):
            dead.append(item)
