"""Operators: each processes a whole batch as parallel lists (keys, values,
timestamps) and pushes its result to its children. No per-record objects: the
stateless operators are one list comprehension each.

Each runtime operator class registers for the spec it runs (:mod:`kstream.api.spec`)
with ``@implements(TheSpec)`` and builds itself from it in ``from_spec``; a task's
graph (:mod:`kstream.runtime.graph`) is built through :func:`build_operator` only.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from typing import Any, Self, TypeVar

from kstream.api.spec import OpSpec
from kstream.api.stream import FilterSpec, FlatMapSpec, KeyBySpec, MapSpec, PeekSpec, SinkSpec
from kstream.api.topology import SourceSpec, TableSourceSpec
from kstream.elements.errors import OperatorErrors
from kstream.elements.events import MIN_TS
from kstream.elements.records import Output, OutputBatch
from kstream.operators.firing import Budget
from kstream.plan.model import InternalTopic
from kstream.serde import Serde, SerdeError
from kstream.state.base import KeyedStateBackend

Keys = list[Any]
Values = list[Any]
Stamps = list[int]


def partition_for_key(key: bytes | None, partitions: int) -> int:
    """Stable partition of a serialized key: ``crc32(key) % partitions``.

    Matches librdkafka's ``consistent`` partitioner; ``None`` keys go to partition 0.
    """
    return 0 if key is None else zlib.crc32(key) % partitions


def without_none_values(
    keys: Keys, values: Values, stamps: Stamps, metrics: dict[str, int]
) -> tuple[Keys, Values, Stamps]:
    """The batch without its records whose value is ``None``, which an aggregation (rolling
    or windowed) skips as Kafka Streams does; counted in ``null_values_skipped``."""
    keep = [v is not None for v in values]
    metrics["null_values_skipped"] += len(keep) - sum(keep)
    return list(compress(keys, keep)), list(compress(values, keep)), list(compress(stamps, keep))


@dataclass(frozen=True)
class Build:
    """What a task gives an operator it builds, besides the operator's spec."""

    name: str  # the node's name
    state_id: str  # a stateful operator's stable id (its state lives under it)
    backend: KeyedStateBackend
    metrics: dict[str, int]
    out: list[Output]  # where operators that write (key_by, sinks) append
    repartition: InternalTopic | None  # the topic a stage-ending operator writes


_RUNTIME: dict[type[OpSpec], Callable[[Any, Build], Operator]] = {}

OpClass = TypeVar("OpClass", bound="type[Operator]")


def implements(*specs: type[OpSpec]) -> Callable[[OpClass], OpClass]:
    """Class decorator: the decorated operator class runs ``specs`` (built with its
    ``from_spec``). One runtime class per spec class."""

    def register(cls: OpClass) -> OpClass:
        for spec in specs:
            if spec in _RUNTIME:
                raise TypeError(f"{spec.__name__} already has a runtime operator")
            _RUNTIME[spec] = cls.from_spec
        return cls

    return register


def build_operator(spec: OpSpec, build: Build) -> Operator:
    """The runtime operator of ``spec`` (``TypeError`` when none is registered)."""
    try:
        make = _RUNTIME[type(spec)]
    except KeyError:
        raise TypeError(
            f"no runtime operator runs {type(spec).__name__}: decorate its runtime class "
            f"with @implements({type(spec).__name__})"
        ) from None
    return make(spec, build)


class Operator:
    """A node of a task's operator chain."""

    stateful = False
    # While the task pushes a run of internal records whose writer's watermark is above
    # the task's: that watermark. Windows and joins judge lateness against the larger of
    # it and their own (they fire on their own), so a record its upstream task had made
    # late is late here whatever the other upstream tasks' progress.
    late_floor = MIN_TS

    @classmethod
    def from_spec(cls, spec: Any, build: Build) -> Operator:
        """The operator running ``spec`` in a task (see :func:`implements`)."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a spec")

    def __init__(self, name: str) -> None:
        self.name = name
        # on_error="dead_letter": where records whose user function raised go
        self.errors: OperatorErrors | None = None
        # Records behind this operator's watermark plus allowed lateness (windows, joins).
        self.late_dropped = 0
        self.late_side_output = 0
        # children[port] = [(operator, its input port)]
        self.children: list[list[tuple[Operator, int]]] = [[], []]

    def connect(self, port: int, child: Operator, child_port: int) -> None:
        self.children[port].append((child, child_port))

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        """Process one batch arriving on input ``port``."""
        raise NotImplementedError

    def _each(
        self, keys: Keys, values: Values, stamps: Stamps, call: Callable[[Any, Any], Any]
    ) -> tuple[Keys, Values, Stamps, list[Any]]:
        """The batch again record by record after ``call`` raised on it: the records it
        succeeds on with their results; the others dead-lettered (or the error raised
        again without ``errors``)."""
        errors = self.errors
        ok_k, ok_v, ok_t, results = [], [], [], []
        for k, v, t in zip(keys, values, stamps, strict=True):
            try:
                results.append(call(k, v))
            except Exception as e:
                if errors is None:
                    raise
                errors.dead_letter(self.name, k, v, t, e)
                continue
            ok_k.append(k)
            ok_v.append(v)
            ok_t.append(t)
        return ok_k, ok_v, ok_t, results

    def failed(
        self, key: Any, value: Any, ts: int, error: Exception, *, in_batch: bool = True
    ) -> None:
        """A user function raised on one record (called in the ``except`` block): with
        ``on_error="dead_letter"`` the record is dead-lettered and the caller goes on
        without it; otherwise the error propagates. ``in_batch``: the record came in the
        batch being pushed (else it was buffered earlier: no input topic to name)."""
        if self.errors is None:
            raise error
        self.errors.dead_letter(self.name, key, value, ts, error, in_batch=in_batch)

    def emit(self, keys: Keys, values: Values, stamps: Stamps, port: int = 0) -> None:
        if not keys:
            return
        for child, child_port in self.children[port]:
            child.push(keys, values, stamps, child_port)

    def advance(self, watermark: int, budget: Budget | None = None) -> bool:
        """Event time reached ``watermark``: fire timers up to it (stateful only).
        Operators whose firing is resumable (windows) stop when ``budget`` is spent
        and return False; the others do all of it and return True."""
        return True

    def on_processing_time(self, now_ms: int) -> None:
        """The wall clock reached ``now_ms`` (epoch ms): processing-time work."""

    def before_snapshot(self) -> None:
        """A checkpoint's state is about to be taken: emit what is due per checkpoint."""

    def finish(self) -> None:
        """All inputs ended: emit every pending result (stateful only)."""


@implements(SourceSpec, TableSourceSpec)
class Passthrough(Operator):
    """An input of the stage (source, table, internal topic): forwards batches."""

    @classmethod
    def from_spec(cls, spec: SourceSpec | TableSourceSpec, build: Build) -> Self:
        return cls(build.name)

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        self.emit(keys, values, stamps)


@implements(MapSpec)
class MapOp(Operator):
    def __init__(self, name: str, fn: Callable[[Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    @classmethod
    def from_spec(cls, spec: MapSpec, build: Build) -> Self:
        return cls(build.name, spec.fn)

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        fn = self.fn
        try:
            out = [fn(v) for v in values]
        except Exception:
            if self.errors is None:
                raise
            keys, _values, stamps, out = self._each(keys, values, stamps, lambda k, v: fn(v))
        self.emit(keys, out, stamps)


@implements(FilterSpec)
class FilterOp(Operator):
    def __init__(self, name: str, fn: Callable[[Any], bool]) -> None:
        super().__init__(name)
        self.fn = fn

    @classmethod
    def from_spec(cls, spec: FilterSpec, build: Build) -> Self:
        return cls(build.name, spec.fn)

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        fn = self.fn
        try:
            mask = [bool(fn(v)) for v in values]
        except Exception:
            if self.errors is None:
                raise
            keys, values, stamps, mask = self._each(keys, values, stamps, lambda k, v: bool(fn(v)))
        self.emit(
            list(compress(keys, mask)), list(compress(values, mask)), list(compress(stamps, mask))
        )


@implements(FlatMapSpec)
class FlatMapOp(Operator):
    def __init__(self, name: str, fn: Callable[[Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    @classmethod
    def from_spec(cls, spec: FlatMapSpec, build: Build) -> Self:
        return cls(build.name, spec.fn)

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        fn = self.fn
        try:
            triples = [
                (k, x, t) for k, v, t in zip(keys, values, stamps, strict=True) for x in fn(v)
            ]
        except Exception:
            if self.errors is None:
                raise
            keys, _values, stamps, outs = self._each(keys, values, stamps, lambda k, v: list(fn(v)))
            triples = [(k, x, t) for k, xs, t in zip(keys, outs, stamps, strict=True) for x in xs]
        if triples:
            ks, vs, ts = zip(*triples, strict=True)
            self.emit(list(ks), list(vs), list(ts))


@implements(PeekSpec)
class PeekOp(Operator):
    """Calls ``fn(value)`` on each record and forwards the batch unchanged (without the
    records ``fn`` raised on, when they are dead-lettered)."""

    def __init__(self, name: str, fn: Callable[[Any], Any]) -> None:
        super().__init__(name)
        self.fn = fn

    @classmethod
    def from_spec(cls, spec: PeekSpec, build: Build) -> Self:
        return cls(build.name, spec.fn)

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        fn = self.fn
        failed: list[int] = []
        for i, v in enumerate(values):
            try:
                fn(v)
            except Exception as e:
                self.failed(keys[i], v, stamps[i], e)  # raises unless dead-lettered
                failed.append(i)
        if failed:
            keep = [True] * len(values)
            for i in failed:
                keep[i] = False
            keys = list(compress(keys, keep))
            values = list(compress(values, keep))
            stamps = list(compress(stamps, keep))
        self.emit(keys, values, stamps)


@implements(KeyBySpec)
class KeyByOp(Operator):
    """Sets the key, serializes, and writes to the stage's repartition topic."""

    @classmethod
    def from_spec(cls, spec: KeyBySpec, build: Build) -> Self:
        t = build.repartition
        assert t is not None, f"key_by {build.name!r} has no repartition topic"
        return cls(build.name, spec.fn, t.name, t.partitions, t.key_serde, build.out)

    def __init__(
        self,
        name: str,
        fn: Callable[[Any], Any],
        topic: str,
        partitions: int,
        key_serde: Serde,
        out: list[Output],
    ) -> None:
        super().__init__(name)
        self.fn, self.topic, self.partitions, self.key_serde, self.out = (
            fn,
            topic,
            partitions,
            key_serde,
            out,
        )
        self._json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        fn, ser, enc, n = self.fn, self.key_serde.serialize, self._json, self.partitions
        try:
            kb = [ser(fn(v)) for v in values]
            vb = [None if v is None else enc(v).encode() for v in values]
        except Exception as e:
            if self.errors is not None:
                _k, values, stamps, pairs = self._each(
                    keys,
                    values,
                    stamps,
                    lambda k, v: (ser(fn(v)), None if v is None else enc(v).encode()),
                )
                kb, vb = [p[0] for p in pairs], [p[1] for p in pairs]
            elif not isinstance(e, SerdeError | TypeError | ValueError):
                raise
            else:
                raise SerdeError(
                    f"key_by {self.name!r} -> {self.topic}: a key or value cannot be serialized "
                    f"(keys must suit the key serde, values must be JSON-compatible): {e}"
                ) from e
        crc = zlib.crc32
        parts = [0 if k is None else crc(k) % n for k in kb]
        self.out.append(OutputBatch(self.topic, True, parts, kb, vb, list(stamps)))


@implements(SinkSpec)
class SinkOp(Operator):
    """Serializes records for a user topic (partition left to Kafka). ``timestamp``:
    the records keep their event times (``"event"``) or carry the wall clock when they
    are emitted (``"processing"``; see ``Stream.to``)."""

    @classmethod
    def from_spec(cls, spec: SinkSpec, build: Build) -> Self:
        return cls(
            build.name, spec.topic, spec.key_serde, spec.value_serde, build.out, spec.timestamp
        )

    def __init__(
        self,
        name: str,
        topic: str,
        key_serde: Serde,
        value_serde: Serde,
        out: list[Output],
        timestamp: str = "event",
    ) -> None:
        super().__init__(name)
        self.topic, self.key_serde, self.value_serde, self.out = (
            topic,
            key_serde,
            value_serde,
            out,
        )
        self.processing_time = timestamp == "processing"

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        try:
            kb = self.key_serde.serialize_many(keys)
            vb = self.value_serde.serialize_many(values)
        except SerdeError as e:
            raise SerdeError(f"sink {self.topic!r}: a record cannot be serialized: {e}") from e
        if self.processing_time:
            stamps = [int(time.time() * 1000)] * len(kb)
        self.out.append(OutputBatch(self.topic, False, None, kb, vb, list(stamps)))
