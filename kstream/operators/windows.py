"""Window operators' shared parts and fixed (tumbling, hopping) windows; semantics
are documented in ``kstream.api.windows``. Sessions: :mod:`kstream.operators.session_windows`,
sliding windows: :mod:`kstream.operators.sliding_windows`.

All state lives in the task's ``KeyedStateBackend`` (tables ``n<node>.<name>``):
accumulators, session extents, sliding-window buffers, the fire/expiry timer
indexes (keys that start with the window end, so firing is a range scan) and the
operator's watermark. A restored operator therefore resumes exactly, timers
included — also in the middle of a firing: a firing is resumable steps (fire, expire)
whose progress is state too (:mod:`kstream.operators.firing`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import islice
from typing import Any, ClassVar

from kstream.api.stream import WindowOpSpec
from kstream.api.windows import Aggregation, Hopping, Tumbling, WindowResult, WindowSpec
from kstream.elements.events import MAX_TIMESTAMP, MAX_TS, MIN_TS
from kstream.operators.core import (
    Build,
    Keys,
    Operator,
    Stamps,
    Values,
    implements,
    without_none_values,
)
from kstream.operators.firing import FIRE_BATCH, Budget, Cursor, Firing, Step, fire_scan
from kstream.operators.stateschema import VersionedTable
from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

__all__ = [
    "FIRE_BATCH",
    "FixedWindowOperator",
    "WindowOperator",
]

_MISSING = object()


@implements(WindowOpSpec)
class WindowOperator(Operator):
    """Shared parts: watermark bookkeeping, late records, result emission. Built as
    the subclass whose ``assigners`` include the spec's window assigner."""

    stateful = True
    assigners: ClassVar[tuple[type[WindowSpec], ...]] = ()

    @classmethod
    def from_spec(cls, spec: WindowOpSpec, build: Build) -> WindowOperator:
        assert spec.aggregation is not None, f"window {build.name!r} has no aggregation"
        for sub in cls.__subclasses__():
            if isinstance(spec.spec, sub.assigners):
                sid = build.state_id
                make: Callable[..., WindowOperator] = sub  # each takes its own assigner
                return make(
                    sid,
                    sid,
                    build.backend,
                    spec.spec,
                    spec.aggregation,
                    spec.allowed_lateness_ms,
                    build.metrics,
                    spec.emit,
                    spec.early_fire_ms,
                )
        raise TypeError(f"no window operator runs {spec.spec!r}")

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        aggregation: Aggregation,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
        emit: str = "final",
        early_fire_ms: int | None = None,
    ) -> None:
        super().__init__(name)
        self.prefix = state_id
        self.backend = backend
        self.agg = aggregation
        self.allowed = allowed_lateness_ms
        self.metrics = metrics
        self.meta = self.table("meta")
        self.wm: int = self.meta.get(("wm",), MIN_TS)
        self.firing = Firing(self.meta)  # restored mid-firing: advance goes on with it
        # emit="update": every change is emitted as it happens, nothing at firing.
        self.updates = emit == "update"
        # Early firing ("final" windows): windows changed since the last early firing,
        # by (end, start, key); in memory only (see kstream.api.windows).
        self.early_ms = early_fire_ms
        self.early: dict[tuple[int, int, Any], None] = {}
        self._next_early: int | None = None

    def table(self, name: str) -> Any:
        return self.backend.table(TableSpec(f"{self.prefix}.{name}"))

    def accumulators(self, name: str, slot: int | None = None) -> Any:
        """The table holding accumulators (in item ``slot`` of each stored list): with
        the aggregation's ``schema``, stored as versioned Avro
        (:class:`kstream.operators.stateschema.VersionedTable`)."""
        return VersionedTable.of(self.backend, self.prefix, name, self.name, self.agg.schema, slot)

    def _set_wm(self, watermark: int) -> None:
        self.wm = watermark
        self.meta.put(("wm",), watermark)

    def _first(self, value: Any) -> Any:
        init = self.agg.init
        return value if init is None else self.agg.add(init(), value)

    def _late(self, keys: Keys, values: Values, stamps: Stamps, idx: list[int]) -> None:
        """Records no window accepts: side output when wired, else dropped and counted."""
        if not idx:
            return
        if self.children[1]:
            self.emit([keys[i] for i in idx], [values[i] for i in idx], [stamps[i] for i in idx], 1)
            self.metrics["late_side_output"] += len(idx)
            self.late_side_output += len(idx)
        else:
            self.metrics["late_dropped"] += len(idx)
            self.late_dropped += len(idx)

    def _emit_results(self, results: list[WindowResult]) -> None:
        # A result's timestamp is its last instant, ``end - 1``, kept within Kafka's
        # timestamp range (a window of a record near 2**63 ends beyond it).
        if results:
            self.emit(
                [r.key for r in results],
                results,
                [r.end - 1 if r.end <= MAX_TIMESTAMP else MAX_TIMESTAMP for r in results],
            )

    def on_processing_time(self, now_ms: int) -> None:
        if self.early_ms is None:
            return
        if self._next_early is None:
            self._next_early = now_ms + self.early_ms
        if now_ms < self._next_early:
            return
        self._next_early = now_ms + self.early_ms
        due = sorted(wk for wk in self.early if wk[0] > self.wm)  # fired ones are final
        self.early = {}
        results: dict[tuple[Any, int, int], WindowResult] = {}
        for e, s, k in due:
            r = self._current(e, s, k)  # a session may have grown: one result per window
            if r is not None and r.end > self.wm:
                results[(r.key, r.start, r.end)] = r
        self._emit_results(list(results.values()))

    def _current(self, end: int, start: int, key: Any) -> WindowResult | None:
        """The current result of a window changed since the last early firing."""
        raise NotImplementedError

    def advance(self, watermark: int, budget: Budget | None = None) -> bool:
        """Fire the windows ``watermark`` closes, then expire those past the allowed
        lateness; with ``budget``, stop when it is spent (False: call again — also
        after a restore — to go on; the operator's watermark moves when it is done)."""
        while (target := self.firing.next_target(watermark, self.wm)) is not None:
            if not self.firing.run(
                target, self._steps(self.wm, target, target - self.allowed), budget
            ):
                return False
            self._set_wm(target)
        return True

    def finish(self) -> None:
        """Fire every window not fired yet and drop all window state; the stored
        watermark stays the last real one, so a later run continues from it."""
        if self.firing.target is not None:
            self.advance(self.firing.target)
        for step in self._steps(self.wm, MAX_TS - 1, MAX_TS - 1):
            step(None, None)

    def _steps(self, old: int, new: int, upto: int) -> list[Step]:
        """A firing from watermark ``old`` to ``new``: fire what is due, expire what
        ends at or before ``upto`` (the kind's own bound)."""
        raise NotImplementedError

    @staticmethod
    def _chunk(budget: Budget | None) -> int:
        return FIRE_BATCH if budget is None else budget.chunk

    def _delete_upto(
        self,
        table: StateTable,
        end: StateKey,
        also: Callable[[StateKey], None] | None,
        cursor: Cursor | None,
        budget: Budget | None,
    ) -> Cursor | None:
        """Expiry step: delete ``table``'s entries below ``end`` (and ``also`` per key)."""
        n = self._chunk(budget)
        while rows := list(islice(table.scan_range(cursor or (MIN_TS,), end), n)):
            for key, _ in rows:
                table.delete(key)
                if also is not None:
                    also(key)
            cursor = tuple(rows[-1][0])
            if budget is not None and budget.spent(len(rows)):
                return cursor
        return None


class FixedWindowOperator(WindowOperator):
    """Tumbling and hopping windows: accumulators keyed ``(end, start, key)``."""

    assigners = (Tumbling, Hopping)

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        spec: Tumbling | Hopping,
        aggregation: Aggregation,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
        emit: str = "final",
        early_fire_ms: int | None = None,
    ) -> None:
        super().__init__(
            name, state_id, backend, aggregation, allowed_lateness_ms, metrics, emit, early_fire_ms
        )
        self.size = spec.size_ms
        self.advance_ms = spec.advance_ms if isinstance(spec, Hopping) else spec.size_ms
        self.offset = spec.offset_ms
        self.acc = self.accumulators("acc")

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        if None in values:
            keys, values, stamps = without_none_values(keys, values, stamps, self.metrics)
        if self.advance_ms == self.size and not self.updates:
            self._push_tumbling(keys, values, stamps)
            return
        size, adv, off = self.size, self.advance_ms, self.offset
        live_after = max(self.wm, self.late_floor) - self.allowed
        acc_get, add, first = self.acc.get, self.agg.add, self._first
        local: dict[tuple[int, int, Any], Any] = {}
        late: list[int] = []
        wm = self.wm
        updates: list[WindowResult] | None = [] if self.updates else None
        for i, (k, v, t) in enumerate(zip(keys, values, stamps, strict=True)):
            latest = t - (t - off) % adv
            s = latest - (latest - (t - size) - 1) // adv * adv  # earliest first
            # Every window of the record first, then the updates: a function that raises
            # on one of them (on_error="dead_letter") leaves all of them unchanged.
            changed: list[tuple[tuple[int, int, Any], Any]] = []
            try:
                while s <= latest:
                    e = s + size
                    if e > live_after:
                        wk = (e, s, k)
                        a = local.get(wk, _MISSING)
                        if a is _MISSING:
                            a = acc_get(wk, _MISSING)
                        changed.append((wk, first(v) if a is _MISSING else add(a, v)))
                    s += adv
            except Exception as exc:
                self.failed(k, v, t, exc)
                continue
            if not changed:
                late.append(i)
            for wk, a in changed:
                local[wk] = a
                if updates is not None:
                    updates.append(WindowResult(k, wk[1], wk[0], a))
                elif wk[0] <= wm:  # each record in a fired window fires it again, at once
                    self._emit_results([WindowResult(k, wk[1], wk[0], a)])
        put = self.acc.put
        for wk, a in local.items():
            put(wk, a)
        if updates is not None:
            self._emit_results(updates)
        elif self.early_ms is not None:
            self.early.update(dict.fromkeys(wk for wk in local if wk[0] > wm))
        self._late(keys, values, stamps, late)

    def _push_tumbling(self, keys: Keys, values: Values, stamps: Stamps) -> None:
        """:meth:`push` for tumbling windows without ``emit="update"``, the per-record
        hot path of a windowed aggregation: each record is in exactly one window, so
        there is nothing to undo when the function raises; the same results in the same
        order as the general loop."""
        size, off, wm = self.size, self.offset, self.wm
        live_after = max(wm, self.late_floor) - self.allowed
        acc_get, add, init = self.acc.get, self.agg.add, self.agg.init
        local: dict[tuple[int, int, Any], Any] = {}
        local_get = local.get
        late: list[int] = []
        for i, (k, v, t) in enumerate(zip(keys, values, stamps, strict=True)):
            s = t - (t - off) % size
            e = s + size
            if e <= live_after:
                late.append(i)
                continue
            wk = (e, s, k)
            try:
                a = local_get(wk, _MISSING)
                if a is _MISSING:
                    a = acc_get(wk, _MISSING)
                a = (v if init is None else add(init(), v)) if a is _MISSING else add(a, v)
                local[wk] = a
            except Exception as exc:
                self.failed(k, v, t, exc)
                continue
            if e <= wm:  # each record in a fired window fires it again, at once
                self._emit_results([WindowResult(k, s, e, a)])
        put = self.acc.put
        for wk, a in local.items():
            put(wk, a)
        if self.early_ms is not None:
            self.early.update(dict.fromkeys(wk for wk in local if wk[0] > wm))
        self._late(keys, values, stamps, late)

    def _current(self, end: int, start: int, key: Any) -> WindowResult | None:
        a = self.acc.get((end, start, key), _MISSING)
        return None if a is _MISSING else WindowResult(key, start, end, a)

    def _ends_between(self, lo: int, hi: int) -> bool:
        """Whether a window end lies in ``(lo, hi]``: ends are ``offset + size`` modulo
        the advance, so most watermark steps cross none and need no state scan."""
        first = lo + 1 + (self.offset + self.size - lo - 1) % self.advance_ms
        return first <= hi

    def _steps(self, old: int, new: int, upto: int) -> list[Step]:
        return [partial(self._fire, old, new), partial(self._expire, old - self.allowed, upto)]

    def _fire(
        self, old: int, new: int, cursor: Cursor | None, budget: Budget | None
    ) -> Cursor | None:
        if not self._ends_between(old, new):
            return None
        lo, hi = (old + 1,), (new + 1,)
        if not self.updates:  # with emit="update" every change went out already
            # Lazily scanned: nothing downstream writes this operator's table.
            new_result = tuple.__new__  # WindowResult(...) without its Python-level __new__
            last = fire_scan(
                self.acc.scan_range(cursor or lo, hi),
                cursor,
                budget,
                lambda chunk: self._emit_results(
                    [new_result(WindowResult, (k[2], k[1], k[0], a)) for k, a in chunk]
                ),
            )
            if last is not None:
                if self.allowed == 0:  # what fired expires at once (see below)
                    self.acc.delete_range(lo, last)
                    self.acc.delete(last)
                return last
        if self.allowed == 0:  # no lateness: a window expires when it fires (see _expire)
            self.acc.delete_range(lo, hi)
        return None

    def _expire(
        self, since: int, upto: int, cursor: Cursor | None, budget: Budget | None
    ) -> Cursor | None:
        # Stored windows all end after the last expiry bound ``since = wm - allowed``
        # (push accepts no others), so only ends in (since, upto] can be due; without
        # lateness _fire already deleted exactly those.
        if self.allowed == 0 or not self._ends_between(since, upto):
            return None
        return self._delete_upto(self.acc, (upto + 1,), None, cursor, budget)
