"""Join operators: stream-table (lookup) and windowed stream-stream (interval)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kstream.runtime.events import MIN_TS
from kstream.runtime.operators import Keys, Operator, Stamps, Values
from kstream.state.base import KeyedStateBackend, TableSpec

_MISSING = object()


class TableJoinOperator(Operator):
    """Port 0: the stream; port 1: the table changelog (``None`` deletes).

    Each stream record is joined with the table value present when it is processed.
    """

    stateful = True

    def __init__(
        self,
        name: str,
        node_id: int,
        backend: KeyedStateBackend,
        joiner: Callable[[Any, Any], Any],
        left: bool,
        metrics: dict[str, int],
    ) -> None:
        super().__init__(name)
        self.table = backend.table(TableSpec(f"n{node_id}.table"))
        self.joiner, self.left, self.metrics = joiner, left, metrics

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        table = self.table
        if port == 1:
            for k, v in zip(keys, values, strict=True):
                if v is None:
                    table.delete((k,))
                else:
                    table.put((k,), v)
            return
        found = [table.get((k,), _MISSING) for k in keys]
        joiner = self.joiner
        if self.left:
            self.emit(
                keys,
                [
                    joiner(v, None if f is _MISSING else f)
                    for v, f in zip(values, found, strict=True)
                ],
                stamps,
            )
            return
        idx = [i for i, f in enumerate(found) if f is not _MISSING]
        self.metrics["join_unmatched"] += len(keys) - len(idx)
        self.emit(
            [keys[i] for i in idx],
            [joiner(values[i], found[i]) for i in idx],
            [stamps[i] for i in idx],
        )


class IntervalJoinOperator(Operator):
    """Port 0: left, port 1: right. Buffers ``(key, ts) -> [values]`` per side and
    an expiry index ``(ts, key)``; a buffered record is dropped once no non-late
    record can match it (``ts + within + allowed_lateness < watermark``)."""

    stateful = True

    def __init__(
        self,
        name: str,
        node_id: int,
        backend: KeyedStateBackend,
        joiner: Callable[[Any, Any], Any],
        within_ms: int,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
    ) -> None:
        super().__init__(name)
        p = f"n{node_id}"
        self.buffers = [
            backend.table(TableSpec(f"{p}.left")),
            backend.table(TableSpec(f"{p}.right")),
        ]
        self.expiry = [
            backend.table(TableSpec(f"{p}.left_exp")),
            backend.table(TableSpec(f"{p}.right_exp")),
        ]
        self.meta = backend.table(TableSpec(f"{p}.meta"))
        self.wm: int = self.meta.get(("wm",), MIN_TS)
        self.joiner, self.within, self.allowed, self.metrics = (
            joiner,
            within_ms,
            allowed_lateness_ms,
            metrics,
        )

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        mine, other, exp = self.buffers[port], self.buffers[1 - port], self.expiry[port]
        w, joiner, oldest = self.within, self.joiner, self.wm - self.allowed
        ok: list[Any] = []
        ov: list[Any] = []
        ot: list[int] = []
        late = 0
        for k, v, t in zip(keys, values, stamps, strict=True):
            if t < oldest:
                late += 1
                continue
            for (_, t2), partners in other.scan_range((k, t - w), (k, t + w + 1)):
                ts = t if t > t2 else t2
                for v2 in partners:
                    ok.append(k)
                    ov.append(joiner(v, v2) if port == 0 else joiner(v2, v))
                    ot.append(ts)
            held = mine.get((k, t))
            if held is None:
                mine.put((k, t), [v])
                exp.put((t, k), 0)
            else:
                mine.put((k, t), [*held, v])
        self.metrics["late_dropped"] += late
        self.late_dropped += late
        self.emit(ok, ov, ot)

    def advance(self, watermark: int) -> None:
        if watermark <= self.wm:
            return
        horizon = watermark - self.within - self.allowed  # entries with ts < horizon expire
        for side in (0, 1):
            for (t, k), _ in list(self.expiry[side].scan_range((MIN_TS,), (horizon,))):
                self.expiry[side].delete((t, k))
                self.buffers[side].delete((k, t))
        self.wm = watermark
        self.meta.put(("wm",), watermark)
