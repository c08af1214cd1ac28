"""``RollingOperator``: an aggregation per key without windows (an update stream).

State: ``n<node>.acc`` ``(key,) -> accumulator`` (versioned Avro with the
aggregation's ``schema``: :class:`kstream.operators.stateschema.VersionedTable`). Each record folds into its key's
accumulator (a record whose value is ``None`` is skipped, as in Kafka Streams); an accumulator that becomes ``None`` deletes the key, and the update
is a tombstone (value ``None``). Emission:

* ``"change"``: every record emits ``(key, new accumulator)`` with its timestamp;
* ``"checkpoint"``: the keys changed since the last checkpoint emit their latest
  value (timestamp: the latest record's) right before each checkpoint's snapshot and
  at end of input, so the update belongs to that checkpoint's epoch. The set of
  changed keys is empty in every snapshot, so it needs no state of its own.
"""

from __future__ import annotations

from typing import Any, Self

from kstream.api.stream import RollingSpec
from kstream.api.windows import Aggregation
from kstream.operators.core import (
    Build,
    Keys,
    Operator,
    Stamps,
    Values,
    implements,
    without_none_values,
)
from kstream.operators.stateschema import VersionedTable
from kstream.state.base import KeyedStateBackend

_MISSING: Any = object()


@implements(RollingSpec)
class RollingOperator(Operator):
    stateful = True

    @classmethod
    def from_spec(cls, spec: RollingSpec, build: Build) -> Self:
        sid = build.state_id
        return cls(sid, sid, build.backend, spec.aggregation, spec.emit, build.metrics)

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        aggregation: Aggregation,
        emit: str,
        metrics: dict[str, int],
    ) -> None:
        super().__init__(name)
        self.metrics = metrics
        self.acc = VersionedTable.of(backend, state_id, "acc", name, aggregation.schema)
        self.agg = aggregation
        self.per_change = emit == "change"
        self.changed: dict[Any, tuple[Any, int]] = {}

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        if None in values:
            keys, values, stamps = without_none_values(keys, values, stamps, self.metrics)
        get, put, delete = self.acc.get, self.acc.put, self.acc.delete
        add, init = self.agg.add, self.agg.init

        def first(v: Any) -> Any:
            return v if init is None else add(init(), v)

        local: dict[Any, Any] = {}
        out: list[Any] = []
        failed: list[int] = []
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            a = local.get(k, _MISSING)
            if a is _MISSING:
                a = get((k,), _MISSING)
            try:
                # new, or deleted (None) earlier in this batch: start again
                a = first(v) if a is _MISSING or a is None else add(a, v)
            except Exception as e:
                self.failed(k, v, stamps[i], e)  # on_error="dead_letter": the key is unchanged
                failed.append(i)
                continue
            local[k] = a
            out.append(a)
        if failed:
            keys, stamps = _without(keys, failed), _without(stamps, failed)
        for k, a in local.items():
            if a is None:
                delete((k,))
            else:
                put((k,), a)
        if self.per_change:
            self.emit(keys, out, stamps)
            return
        changed = self.changed
        for k, a, t in zip(keys, out, stamps, strict=True):
            changed[k] = (a, t)

    def _flush(self) -> None:
        if not self.changed:
            return
        items = list(self.changed.items())
        self.changed = {}
        self.emit([k for k, _ in items], [a for _, (a, _t) in items], [t for _, (_a, t) in items])

    def before_snapshot(self) -> None:
        self._flush()

    def finish(self) -> None:
        self._flush()


def _without(items: list[Any], drop: list[int]) -> list[Any]:
    """``items`` without the positions in ``drop``."""
    gone = set(drop)
    return [x for i, x in enumerate(items) if i not in gone]
