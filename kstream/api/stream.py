"""Stream handles and the operators they add: each operator's typed spec sits next to
the DSL method that adds it (its runtime class registers for the spec, see
:mod:`kstream.api.spec`).

Adding an operator: a frozen ``OpSpec`` dataclass here (its parameters typed, its
planner flags set) and the method that adds it, plus its runtime class decorated
with ``@implements(TheSpec)`` in one of the modules of :mod:`kstream.operators` — nothing
else (a new module there is also listed in ``kstream.runtime.graph.OPERATOR_MODULES``).
``peek`` was added that way: ``PeekSpec`` and ``Stream.peek`` here, ``PeekOp`` in
:mod:`kstream.operators.core`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Self

from kstream.api.process import ListState, StateSpec, resolve_process
from kstream.api.spec import GraphBuilder, Node, OpSpec
from kstream.api.windows import (
    COUNT,
    Aggregation,
    Session,
    Sliding,
    WindowSpec,
    check_duration,
)
from kstream.config import Guarantee
from kstream.serde import Serde, serde_by_name

EMIT_ROLLING = ("change", "checkpoint")
SINK_TIMESTAMPS = ("event", "processing")  # .to(timestamp=...): what output records carry

SerdeLike = Serde | str


def as_serde(serde: SerdeLike) -> Serde:
    """A ``Serde`` from a serde or a built-in serde name ("bytes", "str", "json")."""
    return serde_by_name(serde) if isinstance(serde, str) else serde


@dataclass(frozen=True)
class MapSpec(OpSpec):
    kind: ClassVar[str] = "map"
    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class FilterSpec(OpSpec):
    kind: ClassVar[str] = "filter"
    fn: Callable[[Any], bool]


@dataclass(frozen=True)
class FlatMapSpec(OpSpec):
    kind: ClassVar[str] = "flat_map"
    fn: Callable[[Any], Iterable[Any]]


@dataclass(frozen=True)
class PeekSpec(OpSpec):
    kind: ClassVar[str] = "peek"
    fn: Callable[[Any], Any]


@dataclass(frozen=True)
class KeyBySpec(OpSpec):
    kind: ClassVar[str] = "key_by"
    keyed_output: ClassVar[bool | None] = True
    ends_stage: ClassVar[bool] = True
    fn: Callable[[Any], Any]
    key_serde: Serde | None
    partitions: int | None


@dataclass(frozen=True)
class SinkSpec(OpSpec):
    kind: ClassVar[str] = "sink"
    needs_consumer: ClassVar[bool] = False
    topic: str
    key_serde: Serde
    value_serde: Serde
    guarantee: Guarantee | None
    compacted: bool
    timestamp: str = "event"  # what the output records carry: see Stream.to

    def params(self) -> dict[str, Any]:
        # The default adds nothing: every existing plan keeps its fingerprint.
        out = super().params()
        if self.timestamp == "event":
            del out["timestamp"]
        return out


@dataclass(frozen=True)
class WindowOpSpec(OpSpec):
    kind: ClassVar[str] = "window"
    stateful: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    unkeyed_input: ClassVar[str | None] = (
        "window {name!r} is applied to the unkeyed stream {input!r}: "
        "call key_by(...) before window(...)"
    )
    spec: WindowSpec
    allowed_lateness_ms: int
    aggregation: Aggregation | None
    late_output: bool
    emit: str
    early_fire_ms: int | None

    def problem(self, name: str) -> str | None:
        if self.aggregation is None:
            return (
                f"window {name!r} has no aggregation: finish it with count(), "
                f"reduce(fn) or aggregate(init, add)"
            )
        return None

    def state_description(self) -> dict[str, Any]:
        agg = self.aggregation
        d: dict[str, Any] = {
            "window": self.spec,
            "aggregation": agg.kind if agg is not None else "none",
        }
        if agg is not None and agg.schema is not None and not isinstance(self.spec, Sliding):
            d["schemas"] = {"accumulator": agg.schema}
        return d


_PER_KEY = (
    "{kind} {name!r} is applied to the unkeyed stream {input!r}: "
    "call key_by(...) first (state is per key)"
)
_JOIN_INPUTS = "join {name!r} has the unkeyed input {input!r}: call key_by(...) on both sides first"


@dataclass(frozen=True)
class RollingSpec(OpSpec):
    kind: ClassVar[str] = "rolling"
    stateful: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    unkeyed_input: ClassVar[str | None] = _PER_KEY
    aggregation: Aggregation
    emit: str

    def state_description(self) -> dict[str, Any]:
        d: dict[str, Any] = {"aggregation": self.aggregation.kind}
        if self.aggregation.schema is not None:
            d["schemas"] = {"accumulator": self.aggregation.schema}
        return d


@dataclass(frozen=True)
class ProcessSpec(OpSpec):
    kind: ClassVar[str] = "process"
    stateful: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    unkeyed_input: ClassVar[str | None] = _PER_KEY
    fn: Any
    state: dict[str, StateSpec] = field(default_factory=dict)

    def state_description(self) -> dict[str, Any]:
        states = self.state or {}
        d: dict[str, Any] = {
            "state": ", ".join(f"{k}: {type(v).__name__}" for k, v in sorted(states.items()))
        }
        schemas = {
            k: v.schema
            for k, v in sorted(states.items())
            if not isinstance(v, ListState) and v.schema is not None
        }
        if schemas:
            d["schemas"] = schemas
        return d


@dataclass(frozen=True)
class JoinTableSpec(OpSpec):
    kind: ClassVar[str] = "join_table"
    stateful: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    unkeyed_input: ClassVar[str | None] = _JOIN_INPUTS
    joiner: Callable[[Any, Any], Any]
    left: bool


@dataclass(frozen=True)
class JoinWindowSpec(OpSpec):
    kind: ClassVar[str] = "join_window"
    stateful: ClassVar[bool] = True
    keyed_output: ClassVar[bool | None] = True
    unkeyed_input: ClassVar[str | None] = _JOIN_INPUTS
    joiner: Callable[[Any, Any], Any]
    before_ms: int
    after_ms: int
    how: str
    allowed_lateness_ms: int


class Stream:
    """A handle on one operator output; every method adds an operator."""

    def __init__(self, topology: GraphBuilder, node: Node, port: int = 0) -> None:
        self.topology = topology
        self.node = node
        self.port = port

    def _then(self, spec: OpSpec, name: str | None = None) -> Node:
        return self.topology._add(spec, [(self.node, self.port)], name)

    def _wrap(self, node: Node) -> Self:
        return type(self)(self.topology, node)

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None) -> Self:
        """Replace each value by ``fn(value)``."""
        return self._wrap(self._then(MapSpec(fn), name))

    def filter(self, predicate: Callable[[Any], bool], *, name: str | None = None) -> Self:
        """Keep the records whose value satisfies ``predicate``."""
        return self._wrap(self._then(FilterSpec(predicate), name))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> Self:
        """Replace each value by zero or more values (same key and timestamp)."""
        return self._wrap(self._then(FlatMapSpec(fn), name))

    def peek(self, fn: Callable[[Any], Any], *, name: str | None = None) -> Self:
        """Call ``fn(value)`` on each record (for debugging or side effects) and pass the
        record on unchanged; what ``fn`` returns is ignored. A record ``fn`` raises on
        follows the topology's ``on_error``, as in ``map``: it fails the task, or is
        dead-lettered and not passed on. ``fn`` may be called again for a record the job
        reprocesses after a failure (side effects are at least once)."""
        return self._wrap(self._then(PeekSpec(fn), name))

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
        ks = as_serde(key_serde) if key_serde is not None else None
        node = self._then(KeyBySpec(fn, ks, partitions), name)
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
            WindowOpSpec(spec, allowed_lateness_ms, None, False, emit, early_fire_ms), name
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
        sink = SinkSpec(
            topic, as_serde(key_serde), as_serde(value_serde), guarantee, compacted, timestamp
        )
        self._then(sink, f"sink:{topic}")


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
        node = self._then(ProcessSpec(fn, dict(state or {})), name)
        return KeyedStream(self.topology, node)

    def _rolling(self, aggregation: Aggregation, emit: str, name: str | None) -> KeyedStream:
        if emit not in EMIT_ROLLING:
            raise ValueError(f"emit must be one of {EMIT_ROLLING}, got {emit!r}")
        node = self._then(RollingSpec(aggregation, emit), name)
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
        schema: Any = None,
    ) -> KeyedStream:
        """A rolling aggregation without windows: ``add(acc, value)`` folded per key
        from ``init()``; the output is an update stream ``key -> new accumulator``
        (write it with ``.to(topic, compacted=True)``, read it back with
        ``topology.table(topic)``). An accumulator that becomes ``None`` deletes the key
        (the update is a tombstone). ``emit="change"`` emits on every record (its
        timestamp); ``emit="checkpoint"`` emits each changed key's latest value once
        per checkpoint, right before its snapshot (and at end of input; never when
        checkpointing is off). Accumulators must be JSON-compatible, or match
        ``schema`` (an Avro schema) when given: then they are stored as versioned Avro
        and the schema may evolve across savepoints (see ``ValueState(schema=...)``).
        """
        return self._rolling(Aggregation("aggregate", add, init, None, schema), emit, name)

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
            JoinTableSpec(joiner, left), [(self.node, self.port), (table.node, 0)], name
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
        spec = JoinWindowSpec(joiner, before_ms, after_ms, how, allowed_lateness_ms)
        node = self.topology._add(spec, [(self.node, self.port), (other.node, other.port)], name)
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

    def __init__(self, topology: GraphBuilder, node: Node) -> None:
        self.topology = topology
        self.node = node


class WindowedStream:
    """A keyed stream grouped into windows; choose exactly one aggregation."""

    def __init__(self, topology: GraphBuilder, node: Node) -> None:
        self.topology = topology
        self.node = node

    def _window(self) -> WindowOpSpec:
        assert isinstance(self.node.spec, WindowOpSpec)
        return self.node.spec

    def _set(self, aggregation: Aggregation) -> KeyedStream:
        window = self._window()
        if window.aggregation is not None:
            raise ValueError(f"window {self.node.name!r} already has an aggregation")
        if isinstance(window.spec, Session) and aggregation.merge is None:
            raise ValueError("session windows merge accumulators: pass merge=... to aggregate()")
        self.node.spec = replace(window, aggregation=aggregation)
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
        *,
        schema: Any = None,
    ) -> KeyedStream:
        """``add(acc, value)`` folded from ``init()``; ``merge`` is needed for sessions.
        With ``schema`` (an Avro schema) accumulators are stored as versioned Avro, so
        the schema may evolve across savepoints (a field added with a default). Sliding
        windows store values, not accumulators: there it is not used."""
        return self._set(Aggregation("aggregate", add, init, merge, schema))

    def late(self) -> Stream:
        """The side output of late records (original key, value and timestamp)."""
        self.node.spec = replace(self._window(), late_output=True)
        return Stream(self.topology, self.node, port=1)
