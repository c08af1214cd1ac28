"""A task's operator graph: the operators of its stage, wired as the plan says, and a
reader per input topic that decodes batches into the graph's entry operator."""

from __future__ import annotations

from dataclasses import dataclass, field

from kstream.api.spec import TopicInput
from kstream.api.topology import SourceSpec
from kstream.elements.reader import Reader
from kstream.elements.records import Output
from kstream.operators import joins, process, rolling, session_windows, sliding_windows, windows
from kstream.operators.core import Build, Operator, Passthrough, build_operator
from kstream.plan.model import JobPlan, TaskSpec
from kstream.plan.operators import operator_ids
from kstream.serde import JsonSerde
from kstream.state.base import KeyedStateBackend

# The operator modules (kstream.operators): each registers its classes (``@implements``) on import.
OPERATOR_MODULES = (joins, process, rolling, session_windows, sliding_windows, windows)


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
        # Stateful operators are named by their stable id; their state lives under it.
        sid = state_ids.get(n.id, n.name)
        build = Build(n.name, sid, backend, metrics, out, internal_by_keyby.get(n.id))
        op = build_operator(n.spec, build)
        ops[n.id] = op
        graph.ops.append(op)
        reads = n.spec
        if isinstance(reads, TopicInput):
            timestamp = reads.timestamp if isinstance(reads, SourceSpec) else None
            graph.readers[reads.topic] = Reader(op, reads.key_serde, reads.value_serde, timestamp)
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
