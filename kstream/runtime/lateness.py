"""Late records: what a run of records is judged against, and the per-operator summary.

A record is *late* at a window or windowed join when every window (or join interval)
it could still change is past the watermark plus the allowed lateness (see
``kstream.api.windows``); it is dropped, or sent to the window's ``late()`` side
output. Each such operator counts them (``Operator.late_dropped`` and
``late_side_output``); ``Task.late_counts()`` lists them by operator name — what the
Prometheus metrics export (``kstream.metrics``) and what a worker logs with
``late_summary`` when it stops. ``Task.metrics`` holds the task-wide totals.

Behind a repartition a run of one upstream task's records is judged against the
watermark that task judged them against, when it is ahead of the operators' own
(:class:`JudgedRuns`): their own is the minimum over all upstream tasks, which depends
on how the catch-up interleaves their writes; the writer's does not. The writer's is
its watermark where it wrote them (its ``Watermark`` events, in order with its
records) or, when it judged them against one ahead of its own in turn, that one
(``Watermark.judged``): so a record late at any stage boundary is late at every
later one, however many stages and repartitions the job has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kstream.elements.events import MIN_TS, Barrier, Watermark
from kstream.elements.records import Output, OutputBatch, OutputEvent

if TYPE_CHECKING:
    from kstream.operators.core import Operator


class JudgedRuns:
    """Pushes runs of records judged against a watermark ahead of the task's, and tells
    downstream. The task's drained outputs get a ``Watermark(last watermark sent,
    judged=floor)`` before an internal batch written under another floor than the one
    downstream judges that topic's records at now (a plain ``Watermark`` for a batch
    written at the task's own watermark: firings, timers, other runs) — only where the
    floor changes and the batch holds a record behind one of the two floors (one at or
    after both is late under neither), so records on time cost no event. A ``Watermark`` or ``Barrier`` the task sends
    resets it downstream (so a task restored at a barrier judges what follows as the
    failure-free run did: the floor is never part of a snapshot)."""

    __slots__ = ("_judged", "_last", "_spans", "internal")

    def __init__(self, topics: list[str]) -> None:
        self.internal = bool(topics)  # whether the task writes internal topics
        self._spans: list[tuple[int, int, int]] = []  # (first, end, floor) in the outputs
        self._judged: dict[str, int] = {}  # topic -> its floor downstream (absent: none)
        self._last = MIN_TS  # the last watermark sent downstream before these outputs

    def push(
        self,
        out: list[Output],
        entry: Operator,
        stateful: Iterable[Operator],
        floor: int,
        keys: list[Any],
        values: list[Any],
        stamps: list[int],
    ) -> None:
        """``entry.emit`` the run with the ``stateful`` operators judging lateness against
        ``floor`` (``Operator.late_floor``, above the task's watermark); they fire on
        their own. What it writes to ``out`` is marked as judged there."""
        at = len(out)
        ops = list(stateful)
        for op in ops:
            op.late_floor = floor
        try:
            entry.emit(keys, values, stamps)
        finally:
            for op in ops:
                op.late_floor = MIN_TS
        if self.internal and len(out) > at:
            self._spans.append((at, len(out), floor))

    def drained(self, out: list[Output], sent: int) -> list[Output]:
        """``out`` (the task's outputs since the last drain) with the markers; ``sent``:
        the last watermark the task sent downstream, at their end."""
        if not self._spans and not self._judged:
            self._last = sent
            return out
        spans, judged, last = self._spans, self._judged, self._last
        self._spans = []
        res: list[Output] = []
        s = 0
        for i, o in enumerate(out):
            if type(o) is OutputEvent and o.internal:
                if type(o.event) is Watermark or type(o.event) is Barrier:
                    last = o.event.timestamp
                    judged.pop(o.topic, None)  # downstream resets its floor
            elif type(o) is OutputBatch and o.internal:
                while s < len(spans) and spans[s][1] <= i:
                    s += 1
                f = spans[s][2] if s < len(spans) and spans[s][0] <= i else MIN_TS
                f = f if f > last else MIN_TS  # (at most the watermark: nothing to tell)
                cur = judged.get(o.topic, MIN_TS)
                cur = cur if cur > last else MIN_TS
                # A record at or after both floors is late under neither: only a batch
                # with one behind them needs downstream to judge at exactly its own.
                if f != cur and min(o.timestamps) < (f if f > cur else cur):
                    marker = Watermark(last, None if f == MIN_TS else f)
                    res.append(OutputEvent(o.topic, True, marker))
                    judged[o.topic] = f
            res.append(o)
        self._last = sent
        return res


def late_counts(ops: Iterable[Operator]) -> dict[str, tuple[int, int]]:
    """Per operator that saw late records: (dropped, sent to the side output)."""
    return {
        op.name: (op.late_dropped, op.late_side_output)
        for op in ops
        if op.late_dropped or op.late_side_output
    }


def late_summary(per_task: Iterable[tuple[str, Mapping[str, tuple[int, int]]]]) -> str | None:
    """One line per operator with late records (``None`` when there were none), from
    ``(task id, Task.late_counts())`` pairs, e.g. ``stage1-0 window: 12 late (10
    dropped, 2 to the late output)``."""
    lines = [
        f"{task} {op}: {dropped + side} late ({dropped} dropped, {side} to the late output)"
        for task, counts in per_task
        for op, (dropped, side) in sorted(counts.items())
        if dropped + side
    ]
    return "\n".join(lines) if lines else None
