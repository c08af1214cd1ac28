"""Session windows: per key, records at most ``gap_ms`` apart share a session.

Semantics are documented in ``kstream.api.windows``; the shared parts (watermark,
late records, emission, resumable firing) are :class:`kstream.operators.windows.WindowOperator`'s.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kstream.api.windows import Aggregation, Session, WindowResult
from kstream.operators.core import Keys, Stamps, Values, without_none_values
from kstream.operators.firing import Budget, Cursor, Step, fire_scan
from kstream.operators.windows import WindowOperator
from kstream.state.base import KeyedStateBackend, StateKey

__all__ = ["SessionWindowOperator"]

_MISSING = object()


class SessionWindowOperator(WindowOperator):
    """Sessions: extents ``(key, start) -> [end, acc]`` and timers ``(end, key, start)``."""

    assigners = (Session,)

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
        self.sessions = self.accumulators("sessions", slot=1)  # [end, acc]
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
