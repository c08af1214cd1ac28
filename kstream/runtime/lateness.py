"""Late records: what a run of records is judged against, and the per-operator summary.

A record is *late* at a window or windowed join when every window (or join interval)
it could still change is past the watermark plus the allowed lateness (see
``kstream.api.windows``); it is dropped, or sent to the window's ``late()`` side
output. Each such operator counts them (``Operator.late_dropped`` and
``late_side_output``); ``Task.late_counts()`` lists them by operator name — what the
Prometheus metrics export (``kstream.metrics``) and what a worker logs with
``late_summary`` when it stops. ``Task.metrics`` holds the task-wide totals.

Behind a repartition a run of one upstream task's records is judged against that
task's watermark where it wrote them, when it is ahead of the operators' own
(:func:`push_judged_at`): their own is the minimum over all upstream tasks, which
depends on how the catch-up interleaves their writes; the writer's does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from kstream.runtime.events import MIN_TS

if TYPE_CHECKING:
    from kstream.runtime.operators import Operator


def push_judged_at(
    entry: Operator,
    stateful: Iterable[Operator],
    watermark: int,
    keys: list[Any],
    values: list[Any],
    stamps: list[int],
) -> None:
    """``entry.emit`` the run with the ``stateful`` operators judging lateness against
    at least ``watermark`` (``Operator.late_floor``); they fire on their own."""
    ops = list(stateful)
    for op in ops:
        op.late_floor = watermark
    try:
        entry.emit(keys, values, stamps)
    finally:
        for op in ops:
            op.late_floor = MIN_TS


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
