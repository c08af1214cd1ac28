"""``ProcessOperator``: a keyed process function with state and timers.

Semantics are documented in ``kstream.api.process``. Per batch: the scope is
rebound to each record in turn (key, timestamp) and the function called; what it
emits is collected in three lists and pushed downstream once per batch. Event-time
timers fire in timestamp order when the watermark reaches them (``advance``),
processing-time timers when the worker's wall clock does (``on_processing_time``);
timers a callback registers at or before that time fire in the same pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from kstream.api.process import StateSpec, resolve_process
from kstream.api.stream import ProcessSpec
from kstream.elements.events import MAX_TS, MIN_TS
from kstream.operators.core import Build, Keys, Operator, Stamps, Values, implements
from kstream.operators.firing import Budget, Cursor, Firing
from kstream.operators.keyedstate import KeyScope, TimerQueue
from kstream.state.base import KeyedStateBackend, TableSpec

# Timers fired per state scan; output goes downstream per chunk.
TIMER_BATCH = 256


class Collector:
    """``out(value, timestamp=None)``: emit with the current key."""

    __slots__ = ("keys", "scope", "stamps", "values")

    def __init__(self, scope: KeyScope) -> None:
        self.scope = scope
        self.keys: Keys = []
        self.values: Values = []
        self.stamps: Stamps = []

    def __call__(self, value: Any, timestamp: int | None = None) -> None:
        self.keys.append(self.scope.key)
        self.values.append(value)
        self.stamps.append(self.scope.timestamp if timestamp is None else int(timestamp))

    def truncate(self, n: int) -> None:
        """Forget what was collected after the first ``n`` records."""
        del self.keys[n:], self.values[n:], self.stamps[n:]

    def take(self) -> tuple[Keys, Values, Stamps]:
        out = self.keys, self.values, self.stamps
        self.keys, self.values, self.stamps = [], [], []
        return out


@implements(ProcessSpec)
class ProcessOperator(Operator):
    """Runs ``fn`` per record with per-key state; fires its timers."""

    stateful = True

    @classmethod
    def from_spec(cls, spec: ProcessSpec, build: Build) -> Self:
        return cls(build.state_id, build.state_id, build.backend, spec.fn, spec.state)

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        fn: Any,
        state: Mapping[str, StateSpec],
    ) -> None:
        super().__init__(name)
        self.process_fn, self.on_timer = resolve_process(fn)
        prefix = state_id
        self.scope = KeyScope(prefix, backend, state, operator=name)
        self.scope.timers_allowed = self.on_timer is not None
        self.out = Collector(self.scope)
        self.meta = backend.table(TableSpec(f"{prefix}.meta"))
        self.wm: int = self.meta.get(("wm",), MIN_TS)
        self.scope.watermark = self.wm
        self.firing = Firing(self.meta)  # restored mid-firing: advance goes on with it

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        scope, fn, out = self.scope, self.process_fn, self.out
        scope.time_domain = None
        for k, v, t in zip(keys, values, stamps, strict=True):
            scope.key = k
            scope.timestamp = t
            emitted = len(out.keys)
            try:
                fn(k, v, t, scope, out)
            except Exception as e:
                self.failed(k, v, t, e)  # on_error="dead_letter": its output is discarded
                out.truncate(emitted)
        self.emit(*out.take())

    def advance(self, watermark: int, budget: Budget | None = None) -> bool:
        """Event-time timers due by ``watermark`` fire, then TTL expiry; with ``budget``
        in slices (fired timers leave the timer table, so the rest is what is left)."""
        while (target := self.firing.next_target(watermark, self.wm)) is not None:
            self.scope.watermark = target
            if not self.firing.run(target, [self._fire_event, self._expire], budget):
                return False
            self.wm = target
            self.meta.put(("wm",), target)
        return True

    def _fire_event(self, _cursor: Cursor | None, budget: Budget | None) -> Cursor | None:
        return self._fire(self.scope.event_timers, self.scope.watermark, "event", budget)

    def _expire(self, _cursor: Cursor | None, _budget: Budget | None) -> Cursor | None:
        self.scope.expire(self.scope.watermark)
        return None

    def on_processing_time(self, now_ms: int) -> None:
        self.scope.processing_time = now_ms
        self._fire(self.scope.processing_timers, now_ms, "processing")

    def finish(self) -> None:
        """End of input: every event-time timer fires (the watermark is at the end of
        time); the stored watermark stays the last real one."""
        if self.firing.target is not None:
            self.advance(self.firing.target)
        self.scope.watermark = MAX_TS - 1
        self._fire(self.scope.event_timers, MAX_TS - 1, "event")

    def _fire(
        self, queue: TimerQueue, upto: int, domain: str, budget: Budget | None = None
    ) -> Cursor | None:
        """Fire the timers of ``queue`` due by ``upto``; ``()`` when ``budget`` ran out
        first (the rest are still in the queue)."""
        on_timer = self.on_timer
        if on_timer is None or upto < queue.next:
            return None
        scope, out, errors = self.scope, self.out, self.errors
        record_time = scope.timestamp
        stopped: Cursor | None = None
        # Always TIMER_BATCH per scan, also in slices: a timer registered while firing
        # fires in the next scan, so the chunking is part of the order of the output.
        while chunk := queue.due(upto, TIMER_BATCH):
            scope.time_domain = domain
            for ts, k in chunk:
                scope.key = k
                scope.timestamp = ts
                emitted = len(out.keys)
                try:
                    on_timer(k, ts, scope, out)
                except Exception as e:
                    if errors is None:
                        raise
                    out.truncate(emitted)  # on_error="dead_letter": its output is discarded
                    errors.timer_failed(self.name, k, ts, domain, e)
            self.emit(*out.take())
            if budget is not None and budget.spent(len(chunk)):
                stopped = ()
                break
        scope.time_domain = None
        scope.timestamp = record_time
        return stopped
