"""The frozen job plan: stages, tasks, internal topics, checkpoint participants."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from kstream.api.time import WatermarkStrategy
from kstream.api.topology import Node, SourceSpec, Topology
from kstream.config import Guarantee
from kstream.serde import Serde


class PlanError(ValueError):
    """The topology cannot run as given; the message says what to change."""


class InputKind(StrEnum):
    SOURCE = "source"  # a user topic read as a stream
    TABLE = "table"  # a user topic read as a changelog table
    INTERNAL = "internal"  # a repartition topic written by an upstream stage


class OutputKind(StrEnum):
    INTERNAL = "internal"
    SINK = "sink"


@dataclass(frozen=True)
class InternalTopic:
    """``<app>.<stage>.repartition``: written by every task of ``upstream_stage``
    (keys with ``key_serde``, values JSON), read by ``downstream_stage``."""

    name: str
    partitions: int
    upstream_stage: str
    downstream_stage: str
    key_serde: Serde
    key_by_node: int


@dataclass(frozen=True)
class SinkTopic:
    topic: str
    guarantee: Guarantee
    stage: str
    compacted: bool = False  # created with cleanup.policy=compact (an upsert topic)


@dataclass(frozen=True)
class InputSpec:
    """One topic-partition a task reads; ``upstream_tasks`` are the writers of an
    internal partition (empty for user topics)."""

    topic: str
    partition: int
    kind: InputKind
    upstream_tasks: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputSpec:
    """A topic a task writes; ``partitions`` is known for internal topics only."""

    topic: str
    kind: OutputKind
    partitions: int | None = None
    guarantee: Guarantee | None = None


@dataclass(frozen=True)
class StageSpec:
    """A connected part of the topology between Kafka topics."""

    name: str
    partitions: int
    node_ids: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    stateful: bool


@dataclass(frozen=True)
class TaskSpec:
    """One stage x one partition: the unit of state, alignment and acknowledgement."""

    task_id: str
    stage: str
    partition: int
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]


@dataclass(frozen=True)
class JobPlan:
    """Everything fixed for one deployment of a topology."""

    app_id: str
    topology: Topology
    stages: tuple[StageSpec, ...]
    tasks: tuple[TaskSpec, ...]
    internal_topics: tuple[InternalTopic, ...]
    sinks: tuple[SinkTopic, ...]
    source_partitions: tuple[tuple[str, int], ...]
    expected_tasks: frozenset[str]

    def task(self, task_id: str) -> TaskSpec:
        """The task called ``task_id``; ``KeyError`` naming the known ones otherwise."""
        for t in self.tasks:
            if t.task_id == task_id:
                return t
        raise KeyError(f"no task {task_id!r} in plan {self.app_id!r}")

    def stage(self, name: str) -> StageSpec:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage {name!r} in plan {self.app_id!r}")

    @property
    def source_topics(self) -> frozenset[str]:
        """User topics read (streams and tables)."""
        return frozenset(t for t, _ in self.source_partitions)

    @property
    def watermark_strategies(self) -> dict[str, WatermarkStrategy]:
        """Stream source topic -> its watermark strategy (tables have none)."""
        return {
            n.spec.topic: n.spec.watermark
            for n in self.topology.nodes
            if isinstance(n.spec, SourceSpec)
        }

    @property
    def internal_topic_partitions(self) -> dict[str, int]:
        return {t.name: t.partitions for t in self.internal_topics}

    def nodes_of(self, stage: str) -> list[Node]:
        """The topology nodes of ``stage`` in construction (topological) order."""
        ids = set(self.stage(stage).node_ids)
        return [n for n in self.topology.nodes if n.id in ids]
