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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Self, overload

from kstream.api.process import StateSpec, resolve_process
from kstream.api.time import TimestampExtractor, WatermarkStrategy
from kstream.api.windows import COUNT, Aggregation, Session, WindowSpec, check_duration
from kstream.config import Guarantee, OnError
from kstream.serde import Serde, serde_by_name

EMIT_ROLLING = ("change", "checkpoint")
SINK_TIMESTAMPS = ("event", "processing")  # .to(timestamp=...): what output records carry

SerdeLike = Serde | str


def as_serde(serde: SerdeLike) -> Serde:
    """A ``Serde`` from a serde or a built-in serde name ("bytes", "str", "json")."""
    return serde_by_name(serde) if isinstance(serde, str) else serde


@dataclass(eq=False)
class Node:
    """One operator of the logical graph.

    ``kind`` is one of: source, table, map, filter, flat_map, key_by, window,
    join_table, join_window, sink. ``parents`` are ``(node, port)`` pairs; port 0 is
    the main output, port 1 a window's late-record side output (a join's: port 1
    late left, port 2 late right records).
    """

    id: int
    kind: str
    name: str
    parents: list[tuple[Node, int]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    named: bool = False  # the user gave ``name=`` (a stateful operator's stable id)

    def __repr__(self) -> str:
        return f"Node({self.id}, {self.kind}, {self.name!r})"


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
        ``filter``, ``flat_map``, ``key_by``, aggregations, joiners and process
        functions and their timer callbacks (a dead letter describing the timer; see
        :mod:`kstream.runtime.errors`)."""
        self.name = name
        self.default_guarantee = default_guarantee
        self.on_error = OnError(on_error)
        self.nodes: list[Node] = []

    def _add(
        self, kind: str, parents: list[tuple[Node, int]], name: str | None = None, **params: Any
    ) -> Node:
        default = f"{kind}{len(self.nodes)}"
        node = Node(len(self.nodes), kind, name or default, parents, params, name is not None)
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
        node = self._add(
            "source",
            [],
            name=topic,
            topic=topic,
            key_serde=as_serde(key_serde),
            value_serde=as_serde(value_serde),
            timestamp=timestamp,
            watermark=watermark or WatermarkStrategy(),
            keyed=keyed,
        )
        return KeyedStream(self, node) if keyed else Stream(self, node)

    def table(
        self, topic: str, *, key_serde: SerdeLike = "str", value_serde: SerdeLike = "json"
    ) -> Table:
        """A changelog topic read as a table: latest value per Kafka key, ``None``
        (tombstone) deletes. Used on the right side of ``KeyedStream.join_table``;
        must be co-partitioned with the stream (same partition count, same key bytes).
        """
        node = self._add(
            "table",
            [],
            name=topic,
            topic=topic,
            key_serde=as_serde(key_serde),
            value_serde=as_serde(value_serde),
        )
        return Table(self, node)


class Stream:
    """A handle on one operator output; every method adds an operator."""

    def __init__(self, topology: Topology, node: Node, port: int = 0) -> None:
        self.topology = topology
        self.node = node
        self.port = port

    def _then(self, kind: str, name: str | None = None, **params: Any) -> Node:
        return self.topology._add(kind, [(self.node, self.port)], name, **params)

    def _wrap(self, node: Node) -> Self:
        return type(self)(self.topology, node)

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None) -> Self:
        """Replace each value by ``fn(value)``."""
        return self._wrap(self._then("map", name, fn=fn))

    def filter(self, predicate: Callable[[Any], bool], *, name: str | None = None) -> Self:
        """Keep the records whose value satisfies ``predicate``."""
        return self._wrap(self._then("filter", name, fn=predicate))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> Self:
        """Replace each value by zero or more values (same key and timestamp)."""
        return self._wrap(self._then("flat_map", name, fn=fn))

    def key_by(
        self,
        fn: Callable[[Any], Any],
        *,
        key_serde: SerdeLike | None = None,
        partitions: int | None = None,
        name: str | None = None,
    ) -> KeyedStream:
        """Set the key to ``fn(value)`` and repartition by it (ends the stage).

        Keys must be ``str``, ``int``, ``bytes`` or ``None`` (they are state key
        components). The key is written with ``key_serde`` (default: the key serde
        of a table or keyed source it is joined with, else JSON) and the partition is
        ``crc32(key_bytes) % partitions`` (librdkafka's ``consistent`` partitioner).
        Values go through the internal topic as JSON.
        """
        node = self._then(
            "key_by",
            name,
            fn=fn,
            key_serde=as_serde(key_serde) if key_serde is not None else None,
            partitions=partitions,
        )
        return KeyedStream(self.topology, node)

    def window(
        self,
        spec: WindowSpec,
        *,
        allowed_lateness_ms: int = 0,
        emit: str = "final",
        early_fire_ms: int | None = None,
        name: str | None = None,
    ) -> WindowedStream:
        """Group a keyed stream into windows; finish with count/reduce/aggregate.

        ``emit="final"`` emits a window when it fires; with ``early_fire_ms`` also
        every ``early_fire_ms`` of processing time the current value of each open
        window that changed since. ``emit="update"`` emits every change of a window's
        value as it happens and nothing when it fires (see ``kstream.api.windows``).
        Only valid on a keyed stream; the planner rejects it otherwise.
        """
        check_duration("allowed_lateness_ms", allowed_lateness_ms)
        if emit not in ("final", "update"):
            raise ValueError(f'emit must be "final" or "update", got {emit!r}')
        if early_fire_ms is not None and (emit != "final" or early_fire_ms <= 0):
            raise ValueError(
                f'early_fire_ms needs emit="final" and a value > 0, got {early_fire_ms} '
                f"with emit={emit!r}"
            )
        node = self._then(
            "window",
            name,
            spec=spec,
            allowed_lateness_ms=allowed_lateness_ms,
            aggregation=None,
            late_output=False,
            emit=emit,
            early_fire_ms=early_fire_ms,
        )
        return WindowedStream(self.topology, node)

    def to(
        self,
        topic: str,
        *,
        key_serde: SerdeLike = "str",
        value_serde: SerdeLike = "json",
        guarantee: Guarantee | None = None,
        compacted: bool = False,
        timestamp: str = "event",
    ) -> None:
        """Write to ``topic`` with the sink ``guarantee`` (default: the topology's).
        A ``None`` value is written as a tombstone; ``compacted=True`` creates a missing
        topic with ``cleanup.policy=compact`` (an upsert topic, e.g. for an update stream).

        ``timestamp``: what the output records' Kafka timestamps are. ``"event"``
        (default): the record's event time (a window's result: its end - 1), so
        downstream jobs see event time; but the topic's time-based retention and
        segment rolling go by it, so output about old events may be deleted almost at
        once. ``"processing"``: the wall clock when the record was emitted, so retention
        counts from when it was written (downstream event time is then in the value,
        or lost). For the broker's own time, create the topic with
        ``message.timestamp.type=LogAppendTime``: the broker overwrites either."""
        if timestamp not in SINK_TIMESTAMPS:
            raise ValueError(f"timestamp must be one of {SINK_TIMESTAMPS}, got {timestamp!r}")
        self._then(
            "sink",
            f"sink:{topic}",
            topic=topic,
            key_serde=as_serde(key_serde),
            value_serde=as_serde(value_serde),
            guarantee=guarantee,
            compacted=compacted,
            # Only when not the default: every existing plan keeps its fingerprint.
            **({"timestamp": timestamp} if timestamp != "event" else {}),
        )


class KeyedStream(Stream):
    """A stream partitioned by its key: windows, joins and keyed state are allowed."""

    def process(
        self,
        fn: Any,
        *,
        state: dict[str, StateSpec] | None = None,
        name: str | None = None,
    ) -> KeyedStream:
        """Run a keyed process function with per-key ``state`` and timers (see
        ``kstream.api.process``): ``fn(key, value, timestamp, state, out)``, or an
        object or class with ``process(...)`` and ``on_timer(key, timestamp, state, out)``.
        Output keeps the key."""
        resolve_process(fn)  # fail early on something that is not a process function
        node = self._then("process", name, fn=fn, state=dict(state or {}))
        return KeyedStream(self.topology, node)

    def _rolling(self, aggregation: Aggregation, emit: str, name: str | None) -> KeyedStream:
        if emit not in EMIT_ROLLING:
            raise ValueError(f"emit must be one of {EMIT_ROLLING}, got {emit!r}")
        node = self._then("rolling", name, aggregation=aggregation, emit=emit)
        return KeyedStream(self.topology, node)

    def count(self, *, emit: str = "change", name: str | None = None) -> KeyedStream:
        """A running count per key, as an update stream ``key -> count`` (see ``aggregate``)."""
        return self._rolling(COUNT, emit, name)

    def reduce(
        self, fn: Callable[[Any, Any], Any], *, emit: str = "change", name: str | None = None
    ) -> KeyedStream:
        """``fn(acc, value)`` folded per key from its first value (see ``aggregate``)."""
        return self._rolling(Aggregation("reduce", fn, None, None), emit, name)

    def aggregate(
        self,
        init: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        *,
        emit: str = "change",
        name: str | None = None,
    ) -> KeyedStream:
        """A rolling aggregation without windows: ``add(acc, value)`` folded per key
        from ``init()``; the output is an update stream ``key -> new accumulator``
        (write it with ``.to(topic, compacted=True)``, read it back with
        ``topology.table(topic)``). An accumulator that becomes ``None`` deletes the key
        (the update is a tombstone). ``emit="change"`` emits on every record (its
        timestamp); ``emit="checkpoint"`` emits each changed key's latest value once
        per checkpoint, right before its snapshot (and at end of input; never when
        checkpointing is off). Accumulators must be JSON-compatible.
        """
        return self._rolling(Aggregation("aggregate", add, init, None), emit, name)

    def join_table(
        self,
        table: Table,
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool = False,
        name: str | None = None,
    ) -> KeyedStream:
        """For each record, ``joiner(value, table_value)`` with the table's current
        value for the same key (processing order: table updates apply as they
        arrive). Inner join drops records without a table value; ``left=True``
        passes ``None`` instead. Output keeps the record's key and timestamp.
        """
        node = self.topology._add(
            "join_table",
            [(self.node, self.port), (table.node, 0)],
            name,
            joiner=joiner,
            left=left,
        )
        return KeyedStream(self.topology, node)

    def join(
        self,
        other: KeyedStream,
        joiner: Callable[[Any, Any], Any],
        *,
        within_ms: int | None = None,
        before_ms: int | None = None,
        after_ms: int | None = None,
        how: str = "inner",
        allowed_lateness_ms: int = 0,
        name: str | None = None,
    ) -> JoinedStream:
        """Windowed stream-stream join: every pair ``(l, r)`` with equal keys and
        ``l.ts - before_ms <= r.ts <= l.ts + after_ms`` yields ``joiner(l.value,
        r.value)`` with timestamp ``max(l.ts, r.ts)``, emitted when the second of the
        pair arrives. ``within_ms=w`` is ``before_ms=after_ms=w`` (Kafka Streams'
        ``JoinWindows``; Flink's ``between(-before, after)``); bounds may be negative
        as long as ``before_ms + after_ms >= 0``.

        ``how="left"`` also emits ``joiner(l.value, None)`` for each left record that
        matched nothing, ``how="outer"`` that and ``joiner(None, r.value)`` for each
        such right record — when its window closes, i.e. once the watermark is past
        ``ts + after_ms + allowed_lateness_ms`` (right: ``ts + before_ms + ...``), with
        its own timestamp. A record more than ``allowed_lateness_ms`` behind the
        watermark is late: dropped and counted, or sent to ``.late("left"|"right")``.
        Both inputs must be co-partitioned.
        """
        if within_ms is not None:
            if before_ms is not None or after_ms is not None:
                raise ValueError("give either within_ms or before_ms/after_ms, not both")
            check_duration("within_ms", within_ms)
            before_ms = after_ms = within_ms
        if before_ms is None or after_ms is None:
            raise ValueError("join needs within_ms, or both before_ms and after_ms")
        if before_ms + after_ms < 0:
            raise ValueError(
                f"empty join interval: before_ms + after_ms must be >= 0, got {before_ms} + {after_ms}"
            )
        if how not in ("inner", "left", "outer"):
            raise ValueError(f'how must be "inner", "left" or "outer", got {how!r}')
        check_duration("allowed_lateness_ms", allowed_lateness_ms)
        node = self.topology._add(
            "join_window",
            [(self.node, self.port), (other.node, other.port)],
            name,
            joiner=joiner,
            before_ms=before_ms,
            after_ms=after_ms,
            how=how,
            allowed_lateness_ms=allowed_lateness_ms,
        )
        return JoinedStream(self.topology, node)


class JoinedStream(KeyedStream):
    """The output of a windowed join; ``late(side)`` is its side output of late records."""

    def late(self, side: str) -> Stream:
        """Late records of the ``"left"`` or ``"right"`` input (original key, value, time)."""
        if side not in ("left", "right"):
            raise ValueError(f'side must be "left" or "right", got {side!r}')
        return Stream(self.topology, self.node, port=1 if side == "left" else 2)


class Table:
    """A changelog topic as a keyed table (right side of ``join_table``)."""

    def __init__(self, topology: Topology, node: Node) -> None:
        self.topology = topology
        self.node = node


class WindowedStream:
    """A keyed stream grouped into windows; choose exactly one aggregation."""

    def __init__(self, topology: Topology, node: Node) -> None:
        self.topology = topology
        self.node = node

    def _set(self, aggregation: Aggregation) -> KeyedStream:
        if self.node.params["aggregation"] is not None:
            raise ValueError(f"window {self.node.name!r} already has an aggregation")
        if isinstance(self.node.params["spec"], Session) and aggregation.merge is None:
            raise ValueError("session windows merge accumulators: pass merge=... to aggregate()")
        self.node.params["aggregation"] = aggregation
        return KeyedStream(self.topology, self.node)

    def count(self) -> KeyedStream:
        """Number of records per key and window."""
        return self._set(COUNT)

    def reduce(self, fn: Callable[[Any, Any], Any]) -> KeyedStream:
        """``fn(acc, value)`` folded from the window's first value."""
        return self._set(Aggregation("reduce", fn, None, fn))

    def aggregate(
        self,
        init: Callable[[], Any],
        add: Callable[[Any, Any], Any],
        merge: Callable[[Any, Any], Any] | None = None,
    ) -> KeyedStream:
        """``add(acc, value)`` folded from ``init()``; ``merge`` is needed for sessions."""
        return self._set(Aggregation("aggregate", add, init, merge))

    def late(self) -> Stream:
        """The side output of late records (original key, value and timestamp)."""
        self.node.params["late_output"] = True
        return Stream(self.topology, self.node, port=1)
