"""A task's operator graph: the operators of its stage, wired as the plan says, and a
reader per input topic that decodes batches into the graph's entry operator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kstream.api.topology import Node
from kstream.api.windows import Hopping, Session, Sliding, Tumbling
from kstream.plan.model import JobPlan, TaskSpec
from kstream.plan.operators import operator_ids
from kstream.runtime.joins import IntervalJoinOperator, TableJoinOperator
from kstream.runtime.operators import (
    FilterOp,
    FlatMapOp,
    KeyByOp,
    MapOp,
    Operator,
    Passthrough,
    SinkOp,
)
from kstream.runtime.process import ProcessOperator
from kstream.runtime.reader import Reader
from kstream.runtime.records import Output
from kstream.runtime.rolling import RollingOperator
from kstream.runtime.windows import (
    FixedWindowOperator,
    SessionWindowOperator,
    SlidingWindowOperator,
)
from kstream.serde import JsonSerde
from kstream.state.base import KeyedStateBackend


@dataclass
class Graph:
    """The operators of one task (in plan order) and the reader of each input topic."""

    readers: dict[str, Reader]
    ops: list[Operator]
    stateful: list[Operator] = field(default_factory=list)


def build_graph(
    plan: JobPlan,
    spec: TaskSpec,
    backend: KeyedStateBackend,
    metrics: dict[str, int],
    out: list[Output],
) -> Graph:
    """The operators of ``spec``'s stage over ``backend``, with a reader per input topic.

    Operators that write (key_by, sinks) append to ``out``; operators count into
    ``metrics``."""
    nodes = plan.nodes_of(spec.stage)
    internal_by_keyby = {t.key_by_node: t for t in plan.internal_topics}
    ops: dict[int, Operator] = {}
    internal_inputs: dict[int, Operator] = {}
    state_ids = operator_ids(plan)
    graph = Graph({}, [])
    for n in nodes:
        op = _operator(n, internal_by_keyby, state_ids, backend, metrics, out)
        ops[n.id] = op
        graph.ops.append(op)
        if n.kind in ("source", "table"):
            graph.readers[n.params["topic"]] = Reader(
                op, n.params["key_serde"], n.params["value_serde"], n.params.get("timestamp")
            )
        for in_port, (parent, port) in enumerate(n.parents):
            if parent.id in ops:
                ops[parent.id].connect(port, op, in_port)
                continue
            # A key_by of an upstream stage: read its repartition topic.
            topic = internal_by_keyby[parent.id]
            if parent.id not in internal_inputs:
                entry = Passthrough(topic.name)
                internal_inputs[parent.id] = entry
                graph.readers[topic.name] = Reader(entry, topic.key_serde, JsonSerde(), None)
            internal_inputs[parent.id].connect(0, op, in_port)
    graph.stateful = [op for op in graph.ops if op.stateful]
    return graph


def _operator(
    n: Node,
    internal_by_keyby: Mapping[int, Any],
    state_ids: Mapping[int, str],
    backend: KeyedStateBackend,
    metrics: dict[str, int],
    out: list[Output],
) -> Operator:
    p = n.params
    if n.kind in ("source", "table"):
        return Passthrough(n.name)
    if n.kind == "map":
        return MapOp(n.name, p["fn"])
    if n.kind == "filter":
        return FilterOp(n.name, p["fn"])
    if n.kind == "flat_map":
        return FlatMapOp(n.name, p["fn"])
    if n.kind == "key_by":
        t = internal_by_keyby[n.id]
        return KeyByOp(n.name, p["fn"], t.name, t.partitions, t.key_serde, out)
    if n.kind == "sink":
        return SinkOp(n.name, p["topic"], p["key_serde"], p["value_serde"], out)
    # Stateful operators are named by their stable id; their state lives under it.
    sid = state_ids.get(n.id, n.name)
    if n.kind == "window":
        spec, agg, allowed = p["spec"], p["aggregation"], p["allowed_lateness_ms"]
        trigger = (p.get("emit", "final"), p.get("early_fire_ms"))
        if isinstance(spec, (Tumbling, Hopping)):
            return FixedWindowOperator(sid, sid, backend, spec, agg, allowed, metrics, *trigger)
        if isinstance(spec, Session):
            return SessionWindowOperator(sid, sid, backend, spec, agg, allowed, metrics, *trigger)
        if isinstance(spec, Sliding):
            return SlidingWindowOperator(sid, sid, backend, spec, agg, allowed, metrics, *trigger)
        raise TypeError(f"unknown window spec {spec!r}")
    if n.kind == "rolling":
        return RollingOperator(sid, sid, backend, p["aggregation"], p["emit"], metrics)
    if n.kind == "process":
        return ProcessOperator(sid, sid, backend, p["fn"], p["state"])
    if n.kind == "join_table":
        return TableJoinOperator(sid, sid, backend, p["joiner"], p["left"], metrics)
    if n.kind == "join_window":
        return IntervalJoinOperator(
            sid,
            sid,
            backend,
            p["joiner"],
            p["before_ms"],
            p["after_ms"],
            p["allowed_lateness_ms"],
            metrics,
            p["how"],
        )
    raise TypeError(f"unknown operator kind {n.kind!r}")
