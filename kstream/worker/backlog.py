"""Records read but not yet fed to their tasks, fed in time-bounded slices.

The worker loop looks at signals and the control topic once per iteration. A batch
of 2000 records through a user function taking 50 ms each would keep it away for
100 s: ``SIGTERM``, ``JobFailed`` and checkpoint triggers would wait for it. So
batches are fed in slices of at most about ``budget_s`` of work per loop iteration
(the slice size adapts to the measured cost per record); what is left waits in the
backlog for the next iteration, and no new records are read while it is not empty.

A record in the backlog has not reached its task: the task's positions (and so a
checkpoint's offsets) do not include it. So the backlog is dropped on every seek
(restore, resume, rebalance: the records are read again from the new position), and
on a graceful stop its user-topic records are dropped with a seek of their
partitions back to the first dropped record — no later record of a partition may be
fed past a gap — so the final checkpoint is not delayed by them (a restart reads
them again). Internal-topic records are still fed: the final checkpoint's barriers
travel through them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

TP = tuple[str, int]

BUDGET_S = 1.0
"""Work per loop iteration before the worker looks at signals and the control topic."""
SLICE_S = 0.25
"""Target work per slice (several slices fit in one budget)."""
FIRST_SLICE = 16


class Backlog:
    """Pending records per partition, in arrival order (see the module docstring)."""

    def __init__(
        self,
        max_slice: int,
        *,
        budget_s: float = BUDGET_S,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.max_slice = max_slice
        # Records per slice, adapted to their measured cost; small at first, since a
        # slow function's first slice would otherwise be a whole batch.
        self.slice = min(max_slice, FIRST_SLICE)
        self.budget_s = budget_s
        self.clock = clock
        self._pending: deque[tuple[TP, list[Any]]] = deque()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def __len__(self) -> int:
        return sum(len(records) for _tp, records in self._pending)

    def has_topic(self, topics: Callable[[str], bool]) -> bool:
        """Whether records of ``topics`` are pending."""
        return any(topics(tp[0]) for tp, _records in self._pending)

    def add(self, batch: dict[TP, list[Any]]) -> None:
        self._pending.extend((tp, records) for tp, records in batch.items() if records)

    def clear(self) -> None:
        self._pending.clear()

    def drop(self, topics: Callable[[str], bool]) -> dict[TP, int]:
        """Drop the pending records of the partitions of ``topics``; the first dropped
        offset per partition (``RawRecord`` offset, index 3), where to seek back to."""
        first: dict[TP, int] = {}
        kept: deque[tuple[TP, list[Any]]] = deque()
        for tp, records in self._pending:
            if topics(tp[0]):
                first.setdefault(tp, records[0][3])
            else:
                kept.append((tp, records))
        self._pending = kept
        return first

    def feed(self, feed: Callable[[TP, list[Any]], None]) -> int:
        """Feed slices (in order) until the backlog is empty or ``budget_s`` is spent;
        the number of records fed."""
        start = self.clock()
        fed = 0
        while self._pending:
            tp, records = self._pending[0]
            part, rest = records[: self.slice], records[self.slice :]
            if rest:
                self._pending[0] = (tp, rest)
            else:
                self._pending.popleft()
            t0 = self.clock()
            feed(tp, part)
            took = self.clock() - t0
            fed += len(part)
            # The next slice takes about SLICE_S at the cost per record just measured.
            per_record = took / len(part)
            want = int(SLICE_S / per_record) if per_record > 0 else self.max_slice
            self.slice = max(1, min(self.max_slice, want))
            if self.clock() - start >= self.budget_s:
                break
        return fed
