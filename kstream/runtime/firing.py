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

import time
from collections.abc import Callable, Sequence
from typing import Any

from kstream.state.base import StateKey, StateTable

FIRE_BATCH = 256
"""Windows fired per state scan and per downstream batch (also the budget's check
interval): a firing of a million windows holds one batch of results at a time, and
they die before CPython's default young-generation collection (every 700
allocations) moves them on to generations that full collections rescan. Firing 1 M
windows with the default GC thresholds: 2.2 s in batches of 256 vs 3.6 s in one
batch; with a worker's thresholds (kstream.process.tuning.tune_gc) 2.1 s vs 2.4 s."""

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


def after(rows: list[tuple[Cursor, Any]], cursor: Cursor | None) -> list[tuple[Cursor, Any]]:
    """``rows`` of a scan that started at ``cursor`` without the cursor's own row."""
    if cursor is not None and rows and tuple(rows[0][0]) == cursor:
        return rows[1:]
    return rows
