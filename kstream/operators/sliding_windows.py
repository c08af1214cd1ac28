"""Sliding windows (Kafka Streams'): a window per distinct record timestamp and its right neighbour.

Semantics are documented in ``kstream.api.windows``; the shared parts (watermark,
late records, emission, resumable firing) are :class:`kstream.operators.windows.WindowOperator`'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kstream.api.windows import Aggregation, Sliding, WindowResult
from kstream.operators.core import Keys, Stamps, Values, without_none_values
from kstream.operators.firing import Budget, Cursor, Step, fire_scan
from kstream.operators.windows import WindowOperator
from kstream.state.base import KeyedStateBackend, StateKey

__all__ = ["SlidingWindowOperator"]

_MISSING = object()


class SlidingWindowOperator(WindowOperator):
    """Kafka Streams' sliding windows over ``span = time_difference + 1`` ms: for each
    distinct timestamp ``t`` of a key its *left* window ``[t - d, t + 1)`` and, when it
    holds a record, its *right* window ``[t + 1, t + 1 + span)``; a window is known by
    its end, so a right window that equals a later record's left window is one window.

    State: values buffered ``(key, ts) -> [values]``, one timer ``(end, key)`` per
    window, and ``(ts + span, key, ts)`` to collect a buffer entry once no window that
    contains it (their ends lie in ``(ts, ts + span]``) can change any more.

    A record judged against a watermark ahead of the operator's (``late_floor``: its
    upstream task's, behind a repartition) may be late for some of its windows only:
    those ending at or before that watermark minus the allowed lateness had closed
    where it was written, though they have not fired here yet. It is buffered as any
    other (the windows it opens are the same), and ``excluded`` ``(key, ts) -> [[index
    in the buffer's list, after]]`` keeps it out of every window ending at or before
    ``after`` (their count in ``meta``: none, nothing to look up)."""

    assigners = (Sliding,)

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
        self.excluded = self.table("excluded")
        self._excluded: int = self.meta.get(("excluded",), 0)

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
            if t + 1 <= live and live > wm - self.allowed:  # its first windows closed
                self._exclude(k, t, 0 if held is None else len(held), live)
            # Windows containing t end in (t, t + span]: right windows of earlier
            # timestamps t1 (end t1 + 1 + span) and left windows of t2 >= t (end t2 + 1).
            # A later t2 also makes the new timestamp's own right window non-empty.
            changed: list[int] = []
            later = edge = False
            for (_, t2), vals in buf.scan_range((k, t - span), (k, t + span + 1)):
                if t2 < t:
                    e = t2 + 1 + span
                    if e > live:
                        timers.put((e, k), 0)  # may be new: its first record
                elif t2 == t:
                    e = t + 1
                    if (new or self._excluded) and e > live:  # (its first was excluded)
                        timers.put((e, k), 0)
                elif t2 == t + span:
                    edge = True  # t's right window is t2's left one, t not in it
                    continue
                else:
                    later = True
                    e = t2 + 1
                    if self._excluded:  # its records may all be late for it: no window
                        if not self._opened(k, t2, len(vals)):
                            continue
                        if e > live:
                            timers.put((e, k), 0)  # (new if its first were late for it)
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

    def _exclude(self, k: Any, t: int, j: int, after: int) -> None:
        """The buffer's ``j``-th value at ``(k, t)`` counts in no window ending at or
        before ``after``."""
        held = self.excluded.get((k, t))
        if held is None:
            held = []
            self._excluded += 1
            self.meta.put(("excluded",), self._excluded)
        self.excluded.put((k, t), [*held, [j, after]])

    def _opened(self, k: Any, t: int, n: int) -> bool:
        """Whether one of the ``n`` values buffered at ``(k, t)`` counts in its left window
        (it was not late for it): that window exists."""
        held = self.excluded.get((k, t))
        return held is None or sum(1 for _j, after in held if after > t) < n

    def _skipped(self, end: int, key: Any) -> dict[int, set[int]]:
        """Per timestamp, the indexes of the buffered values window ``end`` leaves out."""
        skip: dict[int, set[int]] = {}
        for (_, t), held in self.excluded.scan_range((key, end - self.span), (key, end)):
            if out := {j for j, after in held if end <= after}:
                skip[t] = out
        return skip

    def _result(self, end: int, key: Any) -> WindowResult | None:
        """The window's result; None if every value in it was dead-lettered."""
        acc: Any = _MISSING
        add = self.agg.add
        bad: list[tuple[int, int]] = []  # (timestamp, index) of values a function raised on
        skip = self._skipped(end, key) if self._excluded else None
        for (_, t), vals in list(self.buffer.scan_range((key, end - self.span), (key, end))):
            out = skip.get(t) if skip else None
            for j, v in enumerate(vals):
                if out is not None and j in out:
                    continue
                try:
                    acc = self._first(v) if acc is _MISSING else add(acc, v)
                except Exception as e:
                    self.failed(key, v, t, e, in_batch=False)
                    bad.append((t, j))
        for t, j in reversed(bad):  # dead-lettered: aggregated no more
            held = self.buffer.get((key, t))
            self.buffer.put((key, t), held[:j] + held[j + 1 :])
            if self._excluded and (ex := self.excluded.get((key, t))) is not None:
                ex = [[i - (i > j), after] for i, after in ex if i != j]
                self.excluded.put((key, t), ex)  # (an empty list goes with the buffer entry)
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
        if self._excluded and self.excluded.get((k, t)) is not None:
            self.excluded.delete((k, t))
            self._excluded -= 1
            self.meta.put(("excluded",), self._excluded)
