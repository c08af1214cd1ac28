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

from kstream.runtime.events import MIN_TS, Watermark
from kstream.runtime.records import Output, OutputBatch, OutputEvent

if TYPE_CHECKING:
    from kstream.runtime.operators import Operator


class JudgedRuns:
    """Pushes runs of records judged against a watermark ahead of the task's, and tells
    downstream: before the first record such a run writes to an internal topic, a
    ``Watermark(task watermark, judged=floor)``; after the run's last, a plain
    ``Watermark(task watermark)`` again, so what the task writes otherwise (firings,
    timers, other runs) is judged against its own watermark there. A run that writes
    nothing downstream sends nothing; a reset still last in the outputs when the next
    judged run starts is taken back (the next run's marker replaces it, or is not
    needed when it judges against the same floor)."""

    __slots__ = ("_floor", "_resets", "out", "topics")

    def __init__(self, out: list[Output], topics: list[str]) -> None:
        self.out = out
        self.topics = topics  # the task's internal output topics
        self._resets: list[OutputEvent] = []
        self._floor = MIN_TS  # what downstream judges at until the resets are read

    def push(
        self,
        entry: Operator,
        stateful: Iterable[Operator],
        floor: int,
        watermark: int,
        keys: list[Any],
        values: list[Any],
        stamps: list[int],
    ) -> None:
        """``entry.emit`` the run with the ``stateful`` operators judging lateness against
        ``floor`` (``Operator.late_floor``, above the task's ``watermark``, which is the
        one last sent downstream); they fire on their own."""
        out, n = self.out, len(self.topics)
        current = MIN_TS  # what downstream judges the next record at
        resets = self._resets
        if resets and len(out) >= n and all(a is b for a, b in zip(out[-n:], resets, strict=True)):
            del out[-n:]  # nothing was written after them: downstream still has _floor
            current = self._floor
        self._resets = []
        at = len(out)
        if n and floor != current:
            out.extend(OutputEvent(t, True, Watermark(watermark, floor)) for t in self.topics)
        ops = list(stateful)
        for op in ops:
            op.late_floor = floor
        try:
            entry.emit(keys, values, stamps)
        finally:
            for op in ops:
                op.late_floor = MIN_TS
        if not n:
            return
        if any(type(o) is OutputBatch and o.internal for o in out[at:]):
            current = floor
        elif floor != current:
            del out[at : at + n]  # nothing written: the marker was not needed
        if current != MIN_TS:
            self._floor = current
            self._resets = [OutputEvent(t, True, Watermark(watermark)) for t in self.topics]
            out.extend(self._resets)


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
