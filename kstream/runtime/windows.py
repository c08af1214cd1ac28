"""Window operators; semantics are documented in ``kstream.api.windows``.

All state lives in the task's ``KeyedStateBackend`` (tables ``n<node>.<name>``):
accumulators, session extents, sliding-window buffers, the fire/expiry timer
indexes (keys that start with the window end, so firing is a range scan) and the
operator's watermark. A restored operator therefore resumes exactly, timers
included — also in the middle of a firing: a firing is resumable steps (fire, expire)
whose progress is state too (:mod:`kstream.runtime.firing`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from itertools import islice
from typing import Any

from kstream.api.windows import Aggregation, Hopping, Session, Sliding, Tumbling, WindowResult
from kstream.runtime.events import MAX_TIMESTAMP, MAX_TS, MIN_TS
from kstream.runtime.firing import FIRE_BATCH, Budget, Cursor, Firing, Step, fire_scan
from kstream.runtime.operators import Keys, Operator, Stamps, Values, without_none_values
from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

__all__ = [
    "FIRE_BATCH",
    "FixedWindowOperator",
    "SessionWindowOperator",
    "SlidingWindowOperator",
    "WindowOperator",
]

_MISSING = object()


class WindowOperator(Operator):
    """Shared parts: watermark bookkeeping, late records, result emission."""

    stateful = True

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
        self.acc = self.table("acc")

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


class SessionWindowOperator(WindowOperator):
    """Sessions: extents ``(key, start) -> [end, acc]`` and timers ``(end, key, start)``."""

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        spec: Session,
        aggregation: Aggregation,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
        emit: str = "final",
        early_fire_ms: int | None = None,
    ) -> None:
        super().__init__(
            name, state_id, backend, aggregation, allowed_lateness_ms, metrics, emit, early_fire_ms
        )
        self.gap = spec.gap_ms
        self.sessions = self.table("sessions")
        self.timers = self.table("timers")
        merge = aggregation.merge
        assert merge is not None, "session windows need a merge function"
        self.merge = merge

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        if None in values:
            keys, values, stamps = without_none_values(keys, values, stamps, self.metrics)
        gap, wm, allowed = self.gap, self.wm, self.allowed
        closed = max(wm, self.late_floor)
        sessions, timers = self.sessions, self.timers
        late: list[int] = []
        updates: list[WindowResult] | None = [] if self.updates else None
        for i, (k, v, t) in enumerate(zip(keys, values, stamps, strict=True)):
            start, end = t, t + gap
            touching = [
                (key[1], ext) for key, ext in sessions.scan((k,)) if key[1] <= end and ext[0] >= t
            ]
            for s, ext in touching:
                start, end = min(start, s), max(end, ext[0])
            if end + allowed < closed:  # the merged session expired already
                late.append(i)
                continue
            try:  # the functions first: one that raises leaves every session unchanged
                acc = self._first(v)
                for _s, ext in touching:
                    acc = self.merge(ext[1], acc)
            except Exception as e:
                self.failed(k, v, t, e)
                continue
            for s, ext in touching:
                sessions.delete((k, s))
                timers.delete((ext[0], k, s))
                if updates is not None and (s, ext[0]) != (start, end):
                    updates.append(WindowResult(k, s, ext[0], None))  # merged away
            sessions.put((k, start), [end, acc])
            timers.put((end, k, start), 0)
            if updates is not None:
                updates.append(WindowResult(k, start, end, acc))
            elif end < wm:  # fired already: each record fires it again, at once
                self._emit_results([WindowResult(k, start, end, acc)])
            elif self.early_ms is not None:
                self.early[(end, start, k)] = None
        if updates is not None:
            self._emit_results(updates)
        self._late(keys, values, stamps, late)

    def _current(self, end: int, start: int, key: Any) -> WindowResult | None:
        ext = self.sessions.get((key, start))  # the session may have grown since
        return None if ext is None else WindowResult(key, start, ext[0], ext[1])

    # A record at a session's end still joins it (touching sessions merge), so a
    # session is complete once the watermark has passed its end: it fires at
    # ``end < watermark`` and expires at ``end + allowed < watermark``.

    def _steps(self, old: int, new: int, upto: int) -> list[Step]:
        return [
            partial(self._fire, old, new),
            partial(self._delete_upto, self.timers, (upto,), self._drop_session),
        ]

    def _fire(
        self, old: int, new: int, cursor: Cursor | None, budget: Budget | None
    ) -> Cursor | None:
        if self.updates:
            return None
        get = self.sessions.get
        return fire_scan(
            self.timers.scan_range(cursor or (old,), (new,)),
            cursor,
            budget,
            lambda chunk: self._emit_results(
                [WindowResult(k, s, end, get((k, s))[1]) for (end, k, s), _ in chunk]
            ),
        )

    def _drop_session(self, timer: StateKey) -> None:
        _end, k, s = timer
        self.sessions.delete((k, s))


class SlidingWindowOperator(WindowOperator):
    """Kafka Streams' sliding windows over ``span = time_difference + 1`` ms: for each
    distinct timestamp ``t`` of a key its *left* window ``[t - d, t + 1)`` and, when it
    holds a record, its *right* window ``[t + 1, t + 1 + span)``; a window is known by
    its end, so a right window that equals a later record's left window is one window.

    State: values buffered ``(key, ts) -> [values]``, one timer ``(end, key)`` per
    window, and ``(ts + span, key, ts)`` to collect a buffer entry once no window that
    contains it (their ends lie in ``(ts, ts + span]``) can change any more."""

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        spec: Sliding,
        aggregation: Aggregation,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
        emit: str = "final",
        early_fire_ms: int | None = None,
    ) -> None:
        super().__init__(
            name, state_id, backend, aggregation, allowed_lateness_ms, metrics, emit, early_fire_ms
        )
        self.span = spec.time_difference_ms + 1
        self.buffer = self.table("buffer")
        self.timers = self.table("timers")
        self.gc = self.table("gc")

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        if None in values:
            keys, values, stamps = without_none_values(keys, values, stamps, self.metrics)
        span, wm = self.span, self.wm
        live = max(wm, self.late_floor) - self.allowed  # windows ending after it may change
        buf, timers = self.buffer, self.timers
        late: list[int] = []
        updates: list[WindowResult] | None = [] if self.updates else None
        for i, (k, v, t) in enumerate(zip(keys, values, stamps, strict=True)):
            if t + span <= live:  # every window containing t expired
                late.append(i)
                continue
            held = buf.get((k, t))
            new = held is None
            if new:
                buf.put((k, t), [v])
                self.gc.put((t + span, k, t), 0)
            else:
                buf.put((k, t), [*held, v])
            # Windows containing t end in (t, t + span]: right windows of earlier
            # timestamps t1 (end t1 + 1 + span) and left windows of t2 >= t (end t2 + 1).
            # A later t2 also makes the new timestamp's own right window non-empty.
            changed: list[int] = []
            later = edge = False
            for (_, t2), _vals in buf.scan_range((k, t - span), (k, t + span + 1)):
                if t2 < t:
                    e = t2 + 1 + span
                    if e > live:
                        timers.put((e, k), 0)  # may be new: its first record
                elif t2 == t:
                    e = t + 1
                    if new and e > live:
                        timers.put((e, k), 0)
                elif t2 == t + span:
                    edge = True  # t's right window is t2's left one, t not in it
                    continue
                else:
                    later = True
                    e = t2 + 1
                if e > live:
                    changed.append(e)
            if new and later and not edge:  # t's right window is new (not t2's left)
                e = t + 1 + span
                timers.put((e, k), 0)
                changed.append(e)
            refire: list[int] = []
            for e in sorted(set(changed)):  # a right window may be a left one too
                if updates is not None:
                    updates += self._results([(e, k)])
                elif e <= wm:
                    refire.append(e)
                elif self.early_ms is not None:
                    self.early[(e, e - span, k)] = None
            if refire:  # each record in fired windows fires them again, at once
                self._emit_results(self._results([(e, k) for e in refire]))
        if updates is not None:
            self._emit_results(updates)
        self._late(keys, values, stamps, late)

    def _current(self, end: int, start: int, key: Any) -> WindowResult | None:
        return self._result(end, key)

    def _result(self, end: int, key: Any) -> WindowResult | None:
        """The window's result; None if every value in it was dead-lettered."""
        acc: Any = _MISSING
        add = self.agg.add
        bad: list[tuple[int, int]] = []  # (timestamp, index) of values a function raised on
        for (_, t), vals in list(self.buffer.scan_range((key, end - self.span), (key, end))):
            for j, v in enumerate(vals):
                try:
                    acc = self._first(v) if acc is _MISSING else add(acc, v)
                except Exception as e:
                    self.failed(key, v, t, e, in_batch=False)
                    bad.append((t, j))
        for t, j in reversed(bad):  # dead-lettered: aggregated no more
            held = self.buffer.get((key, t))
            self.buffer.put((key, t), held[:j] + held[j + 1 :])
        return None if acc is _MISSING else WindowResult(key, end - self.span, end, acc)

    def _results(self, windows: list[tuple[int, Any]]) -> list[WindowResult]:
        """The results of windows ``(end, key)`` that have one."""
        out = [self._result(e, k) for e, k in windows]
        return [r for r in out if r is not None]

    def _steps(self, old: int, new: int, upto: int) -> list[Step]:
        return [
            partial(self._fire, old, new),
            partial(self._delete_upto, self.timers, (upto + 1,), None),
            partial(self._delete_upto, self.gc, (upto + 1,), self._drop_value),
        ]

    def _fire(
        self, old: int, new: int, cursor: Cursor | None, budget: Budget | None
    ) -> Cursor | None:
        if self.updates:
            return None
        return fire_scan(
            self.timers.scan_range(cursor or (old + 1,), (new + 1,)),
            cursor,
            budget,
            lambda chunk: self._emit_results(self._results([(e, k) for (e, k), _ in chunk])),
        )

    def _drop_value(self, gc_key: StateKey) -> None:
        _last, k, t = gc_key
        self.buffer.delete((k, t))
