"""Resumable firing (issue 13 point 7): a watermark that makes a million windows due
is worked off in slices of bounded work, so the worker looks at signals and the
control topic, and barriers reach the task, between slices.

A firing is a list of *steps* (fire the due windows, expire what is past the allowed
lateness, ...). Each step scans a state table in key order from a *cursor* and
returns the key it stopped after when the slice's :class:`Budget` is spent (``None``:
the step is done). The operator keeps its firing target, the current step and the
cursor in its state (:class:`Firing`), next to the windows themselves: a snapshot
taken between two slices holds exactly the windows not fired yet and where to go on,
and a restored operator finishes the firing from there — the output is the same as
one unsliced firing, record for record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, Protocol

from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec

log = logging.getLogger(__name__)

FIRE_BATCH = 256
"""Windows fired per state scan and per downstream batch (also the budget's check
interval): a firing of a million windows holds one batch of results at a time, and
they die before CPython's default young-generation collection (every 700
allocations) moves them on to generations that full collections rescan. Firing 1 M
windows with the default GC thresholds: 2.2 s in batches of 256 vs 3.6 s in one
batch; with a worker's thresholds (kstream.hosting.tuning.tune_gc) 2.1 s vs 2.4 s."""

SLICE_S = 0.5
"""Firing work per task call in a worker (``Task(firing_budget=Budget(SLICE_S))``)."""


class Budget:
    """How much firing one task call may do: ``seconds`` of work on ``clock``, checked
    after every chunk of ``chunk`` windows, and at most ``max_items`` windows (tests
    use a small count for a deterministic slice size). :meth:`start` opens a slice."""

    def __init__(
        self,
        seconds: float = SLICE_S,
        *,
        clock: Callable[[], float] = time.perf_counter,
        max_items: int | None = None,
        chunk: int = FIRE_BATCH,
    ) -> None:
        self.seconds = seconds
        self.clock = clock
        self.max_items = max_items
        self.chunk = chunk if max_items is None else max(1, min(chunk, max_items))
        self._deadline = 0.0
        self._items = 0

    def start(self) -> Budget:
        self._deadline = self.clock() + self.seconds
        self._items = 0
        return self

    def spent(self, items: int) -> bool:
        """``items`` more were done; whether the slice is over."""
        self._items += items
        if self.max_items is not None and self._items >= self.max_items:
            return True
        return self.clock() >= self._deadline


Cursor = StateKey
Step = Callable[[Cursor | None, Budget | None], Cursor | None]
"""One step of a firing: go on after ``cursor`` (``None``: from the start) until done
(``None``) or until the budget is spent (the last key it handled)."""

_TARGET, _STEP, _CURSOR = ("firing.target",), ("firing.step",), "firing.cursor"


class Firing:
    """The firing in progress of one operator: its target watermark, step and cursor,
    kept in memory and written to the operator's ``meta`` table whenever a slice
    stops short (so a snapshot between slices holds them), cleared when it is done.
    A firing that fits in one slice touches no state."""

    def __init__(self, meta: StateTable) -> None:
        self.meta = meta
        self.target: int | None = meta.get(_TARGET)  # restored: go on with it
        self.step: int = meta.get(_STEP, 0) if self.target is not None else 0
        self.cursor: Cursor | None = None
        if self.target is not None:
            for key, _ in meta.scan((_CURSOR,)):
                self.cursor = tuple(key[1:])
        self._saved = self.target is not None

    def next_target(self, watermark: int, fired_up_to: int) -> int | None:
        """What to fire toward next: the firing in progress first, then ``watermark`` if
        it is past ``fired_up_to`` (``None``: nothing left to fire)."""
        if self.target is not None:
            return self.target
        return watermark if watermark > fired_up_to else None

    def run(self, target: int, steps: Sequence[Step], budget: Budget | None) -> bool:
        """Run (or go on with) the firing toward ``target``: ``steps`` in order. True
        when done; False when ``budget`` ran out (call again with the same target and
        steps, also after a restore)."""
        self.target = target
        while self.step < len(steps):
            stopped = steps[self.step](self.cursor, budget)
            if stopped is not None:
                self._save(stopped)
                return False
            self.step, self.cursor = self.step + 1, None
        if self._saved:
            self._forget()
        self.target, self.step, self.cursor = None, 0, None
        return True

    def _save(self, cursor: Cursor) -> None:
        meta = self.meta
        if self._saved:
            self._forget()
        meta.put(_TARGET, self.target)
        meta.put(_STEP, self.step)
        meta.put((_CURSOR, *cursor), 0)
        self.cursor, self._saved = cursor, True

    def _forget(self) -> None:
        meta = self.meta
        meta.delete(_TARGET)
        meta.delete(_STEP)
        for key, _ in list(meta.scan((_CURSOR,))):
            meta.delete(key)
        self._saved = False


class Advancing(Protocol):
    def advance(self, watermark: int, budget: Budget | None = None) -> bool: ...


class TaskFiring:
    """A task's firing in progress: the watermark its stateful operators fire toward,
    one after the other in plan order (one's results reach the next before that one
    fires), stored in the task's table ``task.firing`` once a slice stops short — a
    snapshot between slices has it, and a restored task goes on with it first. Without
    a ``budget`` (bounded runs, tests) every firing is done at once."""

    def __init__(self, task_id: str, backend: KeyedStateBackend, budget: Budget | None) -> None:
        self.task_id = task_id
        self.budget = budget
        self._table = backend.table(TableSpec("task.firing"))
        self.target: int | None = self._table.get(("target",))
        self._saved = self.target is not None
        self.slices = 0  # of the firing in progress, in this process (for the logs)
        self.work_s = 0.0
        if self.target is not None:
            log.info(
                "task %s: restored mid-firing: going on with windows up to %d", task_id, self.target
            )

    @property
    def active(self) -> bool:
        return self.target is not None

    def start(self, target: int, ops: Iterable[Advancing], *, sliced: bool = True) -> bool:
        """Fire toward ``target`` (one slice, or all of it unless ``sliced``)."""
        self.target = target
        if self.go_on(ops, sliced=sliced):
            return True
        log.info("task %s: firing windows up to %d in slices", self.task_id, target)
        return False

    def go_on(self, ops: Iterable[Advancing], *, sliced: bool = True) -> bool:
        """One more slice of the firing in progress; True when it is done."""
        target = self.target
        assert target is not None
        budget = self.budget.start() if sliced and self.budget is not None else None
        t0 = time.perf_counter()
        try:
            for op in ops:
                if not op.advance(target, budget):
                    if not self._saved:
                        self._table.put(("target",), target)
                        self._saved = True
                    return False
        finally:
            self.slices += 1
            self.work_s += time.perf_counter() - t0
        if self._saved:
            self._table.delete(("target",))
            self._saved = False
        if self.slices > 1:
            log.info(
                "task %s: windows up to %d fired (%d slices here, %.1f s of work)",
                self.task_id, target, self.slices, self.work_s,
            )  # fmt: skip
        self.target, self.slices, self.work_s = None, 0, 0.0
        return True

    def note_checkpoint(self, checkpoint_id: int) -> None:
        """A checkpoint's snapshot point was output (its state holds a firing in progress)."""
        if self.target is not None:
            log.info(
                "task %s: checkpoint %d taken mid-firing (%d slices here, %.1f s of work so far)",
                self.task_id, checkpoint_id, self.slices, self.work_s,
            )  # fmt: skip


def after(rows: list[tuple[Cursor, Any]], cursor: Cursor | None) -> list[tuple[Cursor, Any]]:
    """``rows`` of a scan that started at ``cursor`` without the cursor's own row."""
    if cursor is not None and rows and tuple(rows[0][0]) == cursor:
        return rows[1:]
    return rows


def fire_scan(
    rows: Iterator[tuple[Cursor, Any]],
    cursor: Cursor | None,
    budget: Budget | None,
    fire: Callable[[list[tuple[Cursor, Any]]], None],
) -> Cursor | None:
    """A firing step over ``rows`` (a scan started at ``cursor``): ``fire`` them a chunk
    at a time; the key of the last row fired when ``budget`` is spent (``None``: done)."""
    n, first = (FIRE_BATCH if budget is None else budget.chunk), True
    while chunk := list(islice(rows, n)):
        if first:
            chunk, first = after(chunk, cursor), False
        fire(chunk)
        if chunk and budget is not None and budget.spent(len(chunk)):
            return tuple(chunk[-1][0])
    return None
