"""Join operators: stream-table (lookup) and windowed stream-stream (interval: inner,
left or outer, symmetric or asymmetric bounds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from kstream.api.stream import JoinTableSpec, JoinWindowSpec
from kstream.elements.events import MAX_TS, MIN_TS
from kstream.operators.core import Build, Keys, Operator, Stamps, Values, implements
from kstream.operators.firing import Budget
from kstream.state.base import KeyedStateBackend, TableSpec

_MISSING = object()


@implements(JoinTableSpec)
class TableJoinOperator(Operator):
    """Port 0: the stream; port 1: the table changelog (``None`` deletes).

    Each stream record is joined with the table value present when it is processed.
    """

    stateful = True

    @classmethod
    def from_spec(cls, spec: JoinTableSpec, build: Build) -> Self:
        sid = build.state_id
        return cls(sid, sid, build.backend, spec.joiner, spec.left, build.metrics)

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        joiner: Callable[[Any, Any], Any],
        left: bool,
        metrics: dict[str, int],
    ) -> None:
        super().__init__(name)
        self.table = backend.table(TableSpec(f"{state_id}.table"))
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
        if self.left:
            found = [None if f is _MISSING else f for f in found]
            idx = list(range(len(keys)))
        else:
            idx = [i for i, f in enumerate(found) if f is not _MISSING]
            self.metrics["join_unmatched"] += len(keys) - len(idx)
        joiner = self.joiner
        try:
            joined = [joiner(values[i], found[i]) for i in idx]
        except Exception:
            if self.errors is None:
                raise
            joined, kept = [], []  # again record by record (on_error="dead_letter")
            for i in idx:
                try:
                    joined.append(joiner(values[i], found[i]))
                except Exception as e:
                    self.failed(keys[i], values[i], stamps[i], e)
                    continue
                kept.append(i)
            idx = kept
        self.emit([keys[i] for i in idx], joined, [stamps[i] for i in idx])


@implements(JoinWindowSpec)
class IntervalJoinOperator(Operator):
    """Port 0: left, port 1: right. A pair matches when ``l.ts - before <= r.ts <= l.ts
    + after``. Buffers ``(key, ts) -> [values]`` per side and an expiry index ``(ts,
    key)``; a buffered record expires once no non-late record of the other side can
    match it (left: ``ts + after + allowed_lateness < watermark``; right: ``ts + before
    + allowed_lateness < watermark``). Outer sides (``left``: the left one, ``outer``:
    both) also keep ``(key, ts, index) -> 0`` for each buffered record not matched
    yet; those still unmatched when they expire are emitted as ``joiner(l, None)`` /
    ``joiner(None, r)`` with their own timestamp. Late records go to output port 1
    (left) / 2 (right) when wired, else they are dropped and counted."""

    stateful = True

    @classmethod
    def from_spec(cls, spec: JoinWindowSpec, build: Build) -> Self:
        sid = build.state_id
        return cls(
            sid,
            sid,
            build.backend,
            spec.joiner,
            spec.before_ms,
            spec.after_ms,
            spec.allowed_lateness_ms,
            build.metrics,
            spec.how,
        )

    def __init__(
        self,
        name: str,
        state_id: str,
        backend: KeyedStateBackend,
        joiner: Callable[[Any, Any], Any],
        before_ms: int,
        after_ms: int,
        allowed_lateness_ms: int,
        metrics: dict[str, int],
        how: str = "inner",
    ) -> None:
        super().__init__(name)
        self.children.append([])  # port 2: late right records
        p = state_id
        self.buffers = [
            backend.table(TableSpec(f"{p}.left")),
            backend.table(TableSpec(f"{p}.right")),
        ]
        self.expiry = [
            backend.table(TableSpec(f"{p}.left_exp")),
            backend.table(TableSpec(f"{p}.right_exp")),
        ]
        outer = (how in ("left", "outer"), how == "outer")
        self.unmatched = [
            backend.table(TableSpec(f"{p}.{side}_un")) if o else None
            for side, o in zip(("left", "right"), outer, strict=True)
        ]
        self.meta = backend.table(TableSpec(f"{p}.meta"))
        self.wm: int = self.meta.get(("wm",), MIN_TS)
        self.joiner, self.allowed, self.metrics = joiner, allowed_lateness_ms, metrics
        # Partners of a record at t on side 0 lie in [t - before, t + after] on side 1,
        # of a record on side 1 in [t - after, t + before] on side 0.
        self.reach = [(before_ms, after_ms), (after_ms, before_ms)]

    def push(self, keys: Keys, values: Values, stamps: Stamps, port: int) -> None:
        mine, other, exp = self.buffers[port], self.buffers[1 - port], self.expiry[port]
        mine_un, other_un = self.unmatched[port], self.unmatched[1 - port]
        lo, hi = self.reach[port]
        joiner, oldest = self.joiner, max(self.wm, self.late_floor) - self.allowed
        ok: list[Any] = []
        ov: list[Any] = []
        ot: list[int] = []
        late: list[int] = []
        for i, (k, v, t) in enumerate(zip(keys, values, stamps, strict=True)):
            if t < oldest:
                late.append(i)
                continue
            # Every pair of the record first: a joiner that raises on one of them
            # (on_error="dead_letter") emits none, and the record is not buffered.
            pairs: list[tuple[Any, int, int, int]] = []  # (joined, ts, partner ts, index)
            try:
                for (_, t2), partners in other.scan_range((k, t - lo), (k, t + hi + 1)):
                    ts = t if t > t2 else t2
                    for j, v2 in enumerate(partners):
                        pairs.append((joiner(v, v2) if port == 0 else joiner(v2, v), ts, t2, j))
            except Exception as e:
                self.failed(k, v, t, e)
                continue
            for joined, ts, t2, j in pairs:
                ok.append(k)
                ov.append(joined)
                ot.append(ts)
                if other_un is not None:
                    other_un.delete((k, t2, j))
            matched = bool(pairs)
            held = mine.get((k, t))
            if held is None:
                mine.put((k, t), [v])
                exp.put((t, k), 0)
            else:
                mine.put((k, t), [*held, v])
            if mine_un is not None and not matched:
                mine_un.put((k, t, 0 if held is None else len(held)), 0)
        self._late(keys, values, stamps, late, port)
        self.emit(ok, ov, ot)

    def _late(self, keys: Keys, values: Values, stamps: Stamps, idx: list[int], side: int) -> None:
        if not idx:
            return
        if self.children[1 + side]:
            self.emit(
                [keys[i] for i in idx],
                [values[i] for i in idx],
                [stamps[i] for i in idx],
                1 + side,
            )
            self.metrics["late_side_output"] += len(idx)
            self.late_side_output += len(idx)
        else:
            self.metrics["late_dropped"] += len(idx)
            self.late_dropped += len(idx)

    def advance(self, watermark: int, budget: Budget | None = None) -> bool:
        # Not sliced: expiring the buffers (and emitting unmatched outer records) is
        # done at once.
        if watermark <= self.wm:
            return True
        self._expire(watermark)
        self.wm = watermark
        self.meta.put(("wm",), watermark)
        return True

    def finish(self) -> None:
        """End of input: every buffered record expires (unmatched outer ones are
        emitted); the stored watermark stays the last real one."""
        self._expire(MAX_TS - 1)

    def _expire(self, watermark: int) -> None:
        ok: list[Any] = []
        ov: list[Any] = []
        ot: list[int] = []
        for side in (0, 1):
            # entries with ts < horizon can no longer match a non-late record
            horizon = watermark - self.allowed - self.reach[side][1]
            buf, un, exp = self.buffers[side], self.unmatched[side], self.expiry[side]
            for (t, k), _ in list(exp.scan_range((MIN_TS,), (horizon,))):
                exp.delete((t, k))
                if un is not None:
                    held = buf.get((k, t), [])
                    for (_k, _t, j), _ in list(un.scan((k, t))):
                        un.delete((k, t, j))
                        try:
                            joined = (
                                self.joiner(held[j], None)
                                if side == 0
                                else self.joiner(None, held[j])
                            )
                        except Exception as e:
                            self.failed(k, held[j], t, e, in_batch=False)
                            continue
                        ok.append(k)
                        ov.append(joined)
                        ot.append(t)
                buf.delete((k, t))
        if ok:
            order = sorted(range(len(ok)), key=ot.__getitem__)  # unmatched in time order
            self.emit([ok[i] for i in order], [ov[i] for i in order], [ot[i] for i in order])
