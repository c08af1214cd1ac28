"""The topology DSL: a graph of ``Node``s built through ``Stream`` handles.

Records are ``(key, value, timestamp_ms)``. Stateless operators see the *value*
(``map``/``filter``/``flat_map``) and keep the key and timestamp; ``key_by`` sets
the key and ends a stage (records go through ``<app>.<stage>.repartition``).
Windows and joins need a keyed stream (``key_by``, a ``keyed=True`` source, or a
table). Building a topology does no I/O; ``kstream.plan.plan_job`` validates it.

Example::

    topology = Topology("wordcount")
    (topology.source("lines", value_serde="str")
        .flat_map(str.split)
        .key_by(lambda word: word)
        .window(Tumbling(60_000))
        .count()
        .map(lambda r: {"word": r.key, "start": r.start, "count": r.value})
        .to("word-counts"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, overload

from kstream.api.spec import Node, OpSpec, TopicInput
from kstream.api.stream import (
    JoinedStream,
    KeyedStream,
    SerdeLike,
    Stream,
    Table,
    WindowedStream,
    as_serde,
)
from kstream.api.time import TimestampExtractor, WatermarkStrategy
from kstream.config import Guarantee, OnError

__all__ = [
    "JoinedStream",
    "KeyedStream",
    "Node",
    "SerdeLike",
    "SourceSpec",
    "Stream",
    "Table",
    "TableSourceSpec",
    "Topology",
    "WindowedStream",
    "as_serde",
]


@dataclass(frozen=True)
class SourceSpec(TopicInput):
    kind: ClassVar[str] = "source"
    timestamp: TimestampExtractor | None
    watermark: WatermarkStrategy
    keyed: bool

    def output_keyed(self, inputs_keyed: bool) -> bool:
        return self.keyed


@dataclass(frozen=True)
class TableSourceSpec(TopicInput):
    kind: ClassVar[str] = "table"
    changelog: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    needs_consumer: ClassVar[bool] = False


class Topology:
    """A named job graph; ``name`` is the default app id."""

    def __init__(
        self,
        name: str,
        *,
        default_guarantee: Guarantee = Guarantee.EXACTLY_ONCE,
        on_error: OnError | str = OnError.FAIL,
    ):
        """``on_error``: what a user function that raises on a record does — ``"fail"``
        the task (the job rolls back; default) or ``"dead_letter"`` the record (to
        ``<app>.dlq`` with the operator's name and the exception, counted): ``map``,
        ``filter``, ``flat_map``, ``peek``, ``key_by``, aggregations, joiners and process
        functions and their timer callbacks (a dead letter describing the timer; see
        :mod:`kstream.elements.errors`)."""
        self.name = name
        self.default_guarantee = default_guarantee
        self.on_error = OnError(on_error)
        self.nodes: list[Node] = []

    def _add(self, spec: OpSpec, parents: list[tuple[Node, int]], name: str | None = None) -> Node:
        default = f"{spec.kind}{len(self.nodes)}"
        node = Node(len(self.nodes), name or default, spec, parents, name is not None)
        self.nodes.append(node)
        return node

    @overload
    def source(
        self,
        topic: str,
        *,
        key_serde: SerdeLike = ...,
        value_serde: SerdeLike = ...,
        timestamp: TimestampExtractor | None = ...,
        watermark: WatermarkStrategy | None = ...,
        keyed: Literal[True],
    ) -> KeyedStream: ...

    @overload
    def source(
        self,
        topic: str,
        *,
        key_serde: SerdeLike = ...,
        value_serde: SerdeLike = ...,
        timestamp: TimestampExtractor | None = ...,
        watermark: WatermarkStrategy | None = ...,
        keyed: bool = ...,
    ) -> Stream: ...

    def source(
        self,
        topic: str,
        *,
        key_serde: SerdeLike = "str",
        value_serde: SerdeLike = "json",
        timestamp: TimestampExtractor | None = None,
        watermark: WatermarkStrategy | None = None,
        keyed: bool = False,
    ) -> Stream:
        """Read ``topic``. Timestamps are the Kafka record timestamps unless
        ``timestamp(value, kafka_ts)`` is given. With ``keyed=True`` the topic's
        Kafka key is the grouping key and its partitioning is trusted (no repartition).
        """
        spec = SourceSpec(
            topic,
            as_serde(key_serde),
            as_serde(value_serde),
            timestamp,
            watermark or WatermarkStrategy(),
            keyed,
        )
        node = self._add(spec, [], name=topic)
        return KeyedStream(self, node) if keyed else Stream(self, node)

    def table(
        self, topic: str, *, key_serde: SerdeLike = "str", value_serde: SerdeLike = "json"
    ) -> Table:
        """A changelog topic read as a table: latest value per Kafka key, ``None``
        (tombstone) deletes. Used on the right side of ``KeyedStream.join_table``;
        must be co-partitioned with the stream (same partition count, same key bytes).
        """
        node = self._add(
            TableSourceSpec(topic, as_serde(key_serde), as_serde(value_serde)), [], name=topic
        )
        return Table(self, node)
