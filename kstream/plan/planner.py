"""Topology -> stages -> tasks, with validation (``PlanError``).

Stages are the connected parts of the graph once every ``key_by`` edge is cut, the
readers of one ``key_by`` kept together (one stage reads each repartition topic);
they are numbered ``stage0, stage1, ...`` in dependency order. The repartition
topic of a ``key_by`` is ``<app>.<stage>.repartition`` named after the *writing*
stage (``<app>.<stage>.repartition<i>`` for its i-th further key_by, i >= 1).

Partition counts: a stage reading user topics has their common partition count
(they must agree: co-partitioning). A stage reading only repartition topics uses
the ``partitions=`` given to its key_bys (they must agree) or else the largest
partition count among the writing stages.
"""

from __future__ import annotations

from collections.abc import Mapping

from kstream.api.spec import Node, TopicInput
from kstream.api.stream import KeyBySpec, SinkSpec
from kstream.api.topology import Topology
from kstream.config import Guarantee
from kstream.names import repartition_topic
from kstream.plan.model import (
    InputKind,
    InputSpec,
    InternalTopic,
    JobPlan,
    OutputKind,
    OutputSpec,
    PlanError,
    SinkTopic,
    StageSpec,
    TaskSpec,
)
from kstream.plan.operators import operator_ids
from kstream.serde import JsonSerde, Serde


def _keyed(node: Node, memo: dict[int, bool]) -> bool:
    """True when ``node``'s output is partitioned by its key."""
    if node.id not in memo:
        inputs = all(_keyed(p, memo) for p, _ in node.parents)
        memo[node.id] = node.spec.output_keyed(inputs)
    return memo[node.id]


def _key_by(node: Node) -> KeyBySpec:
    """The spec of a node that ends a stage (a key_by)."""
    assert isinstance(node.spec, KeyBySpec), node
    return node.spec


def _topic_input(node: Node) -> TopicInput | None:
    return node.spec if isinstance(node.spec, TopicInput) else None


def _validate_nodes(topology: Topology) -> None:
    keyed: dict[int, bool] = {}
    seen_topics: dict[str, Node] = {}
    for n in topology.nodes:
        spec = n.spec
        if isinstance(spec, TopicInput):
            topic = spec.topic
            if topic in seen_topics:
                raise PlanError(
                    f"topic {topic!r} is read by two sources ({seen_topics[topic].name!r} and "
                    f"{n.name!r}); read it once and reuse the Stream"
                )
            seen_topics[topic] = n
        if spec.unkeyed_input is not None:
            for p, _ in n.parents:
                if not _keyed(p, keyed):
                    raise PlanError(
                        spec.unkeyed_input.format(kind=spec.kind, name=n.name, input=p.name)
                    )
        problem = spec.problem(n.name)
        if problem is not None:
            raise PlanError(problem)
    consumed = {p.id for n in topology.nodes for p, _ in n.parents}
    for n in topology.nodes:
        if n.spec.needs_consumer and n.id not in consumed:
            raise PlanError(
                f"the output of {n.kind} {n.name!r} goes nowhere: end it with .to(topic)"
            )


def _stages(topology: Topology) -> dict[int, int]:
    """Node id -> stage group root (union-find, cutting key_by -> child edges).

    Every consumer of one key_by joins one group: its repartition topic is read by
    one stage, whose tasks own its partitions (two stages reading one topic would
    split its partitions between them and each would miss the other's records)."""
    parent = {n.id: n.id for n in topology.nodes}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_consumer: dict[int, int] = {}
    for n in topology.nodes:
        for p, _ in n.parents:
            if not p.spec.ends_stage:
                parent[find(n.id)] = find(p.id)
            else:
                parent[find(n.id)] = find(first_consumer.setdefault(p.id, n.id))
    return {n.id: find(n.id) for n in topology.nodes}


def plan_job(
    topology: Topology,
    app_id: str,
    partition_counts: Mapping[str, int],
    *,
    default_guarantee: Guarantee | None = None,
) -> JobPlan:
    """Validate ``topology`` and lay it out over ``partition_counts`` (the existing
    source topics' partition counts). Raises ``PlanError`` with an actionable message.
    """
    if not topology.nodes:
        raise PlanError(f"topology {topology.name!r} is empty: add a source and a sink")
    guarantee_default = default_guarantee or topology.default_guarantee
    _validate_nodes(topology)
    groups = _stages(topology)
    by_id = {n.id: n for n in topology.nodes}

    # Order stage groups by dependency (a key_by feeds a later group).
    deps: dict[int, set[int]] = {g: set() for g in groups.values()}
    for n in topology.nodes:
        for p, _ in n.parents:
            if p.spec.ends_stage:
                deps[groups[n.id]].add(groups[p.id])
    order: list[int] = []
    ready = sorted(g for g, d in deps.items() if not d)
    while ready:
        g = ready.pop(0)
        order.append(g)
        for h in sorted(deps):
            if g in deps[h]:
                deps[h].discard(g)
                if not deps[h] and h not in order and h not in ready:
                    ready.append(h)
    if len(order) < len(deps):
        loop = sorted(
            {
                p.name
                for n in topology.nodes
                for p, _ in n.parents
                if p.spec.ends_stage and groups[n.id] not in order
            }
        )
        raise PlanError(
            f"the repartition topic of key_by {', '.join(map(repr, loop))} would be read by "
            f"the stage that writes it (the readers of one key_by form one stage, and one "
            f"of them also reads, with no key_by between, a stream this stage writes): "
            f"give one of those readers its own key_by (call key_by(...) a second time)"
        )
    stage_name = {g: f"stage{i}" for i, g in enumerate(order)}
    members: dict[int, list[Node]] = {g: [] for g in order}
    for n in topology.nodes:
        members[groups[n.id]].append(n)

    # Internal topics: one per key_by, named after the writing stage.
    internal_of: dict[int, str] = {}
    per_stage_count: dict[int, int] = {}
    for n in topology.nodes:
        if n.spec.ends_stage:
            g = groups[n.id]
            i = per_stage_count.get(g, 0)
            per_stage_count[g] = i + 1
            internal_of[n.id] = repartition_topic(app_id, stage_name[g], i)

    inputs_of = {n.id: ti for n in topology.nodes if (ti := _topic_input(n)) is not None}
    user_topics = {t.topic for t in inputs_of.values()}
    for n in topology.nodes:
        if not isinstance(n.spec, SinkSpec):
            continue
        if n.spec.topic in user_topics:
            raise PlanError(
                f"cycle: sink topic {n.spec.topic!r} is also read by this topology; "
                f"write to a different topic"
            )
        if n.spec.topic in internal_of.values():
            raise PlanError(f"sink topic {n.spec.topic!r} collides with an internal topic")
    for t in internal_of.values():
        if t in user_topics:
            raise PlanError(f"internal topic {t!r} collides with a user topic of the same name")

    for t in sorted(user_topics):
        if t not in partition_counts:
            raise PlanError(
                f"source topic {t!r} does not exist (known: {sorted(partition_counts) or 'none'}); "
                f"create it or fix the topic name"
            )
        if partition_counts[t] < 1:
            raise PlanError(f"source topic {t!r} has {partition_counts[t]} partitions")

    stage_parts: dict[int, int] = {}
    internal_topics: list[InternalTopic] = []
    for g in order:
        nodes = members[g]
        users = [inputs_of[n.id] for n in nodes if n.id in inputs_of]
        feeders = sorted({p.id for n in nodes for p, _ in n.parents if p.spec.ends_stage})
        if users:
            counts = {t.topic: partition_counts[t.topic] for t in users}
            if len(set(counts.values())) > 1:
                raise PlanError(
                    f"co-partitioning violated in {stage_name[g]}: topics {counts} must have "
                    f"the same partition count to be joined; repartition one side with key_by"
                )
            parts = next(iter(counts.values()))
        else:
            explicit = {want for f in feeders if (want := _key_by(by_id[f]).partitions)}
            if len(explicit) > 1:
                raise PlanError(
                    f"co-partitioning violated in {stage_name[g]}: key_by partitions "
                    f"{sorted(explicit)} differ"
                )
            parts = explicit.pop() if explicit else max(stage_parts[groups[f]] for f in feeders)
        for f in feeders:
            want = _key_by(by_id[f]).partitions
            if want and want != parts:
                raise PlanError(
                    f"co-partitioning violated in {stage_name[g]}: key_by {by_id[f].name!r} asks "
                    f"for {want} partitions but the stage has {parts}"
                )
        stage_parts[g] = parts
        # Key serde: what co-partitioned user topics use, so key bytes hash alike.
        user_key_serdes = [t.key_serde for t in users if t.changelog] + [
            t.key_serde for t in users if not t.changelog
        ]
        for f in feeders:
            ks: Serde | None = _key_by(by_id[f]).key_serde
            if ks is None:
                ks = user_key_serdes[0] if user_key_serdes else JsonSerde()
            internal_topics.append(
                InternalTopic(internal_of[f], parts, stage_name[groups[f]], stage_name[g], ks, f)
            )

    internal_by_name = {t.name: t for t in internal_topics}
    stages: list[StageSpec] = []
    tasks: list[TaskSpec] = []
    sinks: list[SinkTopic] = []
    for g in order:
        name = stage_name[g]
        nodes = members[g]
        in_topics: list[tuple[str, InputKind]] = [
            (ti.topic, InputKind.TABLE if ti.changelog else InputKind.SOURCE)
            for n in nodes
            if (ti := inputs_of.get(n.id)) is not None
        ]
        feeders = sorted({p.id for n in nodes for p, _ in n.parents if p.spec.ends_stage})
        in_topics += [(internal_of[f], InputKind.INTERNAL) for f in feeders]
        outs: list[OutputSpec] = []
        for n in nodes:
            if n.spec.ends_stage:
                it = internal_by_name[internal_of[n.id]]
                outs.append(OutputSpec(it.name, OutputKind.INTERNAL, it.partitions))
            elif isinstance(n.spec, SinkSpec):
                gu = n.spec.guarantee or guarantee_default
                outs.append(OutputSpec(n.spec.topic, OutputKind.SINK, None, gu))
                sinks.append(SinkTopic(n.spec.topic, gu, name, bool(n.spec.compacted)))
        stages.append(
            StageSpec(
                name,
                stage_parts[g],
                tuple(n.id for n in nodes),
                tuple(topic for topic, _ in in_topics),
                tuple(o.topic for o in outs),
                any(n.spec.stateful for n in nodes),
            )
        )
        for part in range(stage_parts[g]):
            inputs = []
            for topic, kind in in_topics:
                upstream: tuple[str, ...] = ()
                if kind is InputKind.INTERNAL:
                    up = internal_by_name[topic].upstream_stage
                    up_parts = next(stage_parts[x] for x in order if stage_name[x] == up)
                    upstream = tuple(f"{up}-{i}" for i in range(up_parts))
                inputs.append(InputSpec(topic, part, kind, upstream))
            tasks.append(TaskSpec(f"{name}-{part}", name, part, tuple(inputs), tuple(outs)))

    plan = JobPlan(
        app_id=app_id,
        topology=topology,
        stages=tuple(stages),
        tasks=tuple(tasks),
        internal_topics=tuple(internal_topics),
        sinks=tuple(sinks),
        source_partitions=tuple(sorted((t, partition_counts[t]) for t in user_topics)),
        expected_tasks=frozenset(t.task_id for t in tasks),
    )
    operator_ids(plan)  # stable state ids must be unique (PlanError otherwise)
    return plan
