"""Records read but not yet fed to their tasks, fed in time-bounded slices.

The worker loop looks at signals and the control topic once per iteration. A batch
of 2000 records through a user function taking 50 ms each would keep it away for
100 s: ``SIGTERM``, ``JobFailed`` and checkpoint triggers would wait for it. So
batches are fed in slices of at most about ``budget_s`` of work per loop iteration
(the slice size adapts to the measured cost per record); what is left waits in the
backlog for the next iteration, and no new records are read while it is not empty
(except internal records starved meanwhile, fed first: ``kstream.worker.internalfirst``).

A record in the backlog has not reached its task: the task's positions (and so a
checkpoint's offsets) do not include it. So the backlog is dropped on every seek
(restore, resume, rebalance: the records are read again from the new position), and
on a graceful stop its user-topic records are dropped with a seek of their
partitions back to the first dropped record — no later record of a partition may be
fed past a gap — so the final checkpoint is not delayed by them (a restart reads
them again). Internal-topic records are still fed: the final checkpoint's barriers
travel through them.

Watermark alignment holds a source partition that runs ahead: its records stay here,
unfed, while the others are fed and read (``feed(..., held)``). Holding is cheaper
than pausing the consumer — librdkafka drops what it prefetched for a paused
partition and fetches it again after the resume, and the loop idles meanwhile — so
the consumer pauses a held partition only once ``HOLD_MAX`` of its records wait here
(memory stays bounded); they are fed first when the hold ends, while the fetch of
the rest starts again. The hold is asked again after every slice (``recheck``): a
partition released is fed only until it runs ahead again — fed all at once, the
records that waited (up to ``HOLD_MAX``) would carry it far past the drift bound.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

TP = tuple[str, int]

BUDGET_S = 1.0
"""Work per loop iteration before the worker looks at signals and the control topic."""
SLICE_S = 0.25
"""Target work per slice (several slices fit in one budget)."""
FIRST_SLICE = 16
HOLD_MAX = 100_000
"""Records of a held partition kept here before its consumer is paused too (pausing
costs about a second of idle fetching after the resume; 100 000 records are some tens of
MB in memory)."""


class Backlog:
    """Pending records per partition, in arrival order (see the module docstring)."""

    def __init__(
        self,
        max_slice: int,
        *,
        budget_s: float = BUDGET_S,
        clock: Callable[[], float] = time.perf_counter,
        first: Callable[[str], bool] | None = None,
    ) -> None:
        self.max_slice = max_slice
        self.first = first  # topics whose records are fed before the others
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

    def partitions(self) -> set[TP]:
        """The partitions with pending records."""
        return {tp for tp, _records in self._pending}

    def feedable(self, held: AbstractSet[TP] = frozenset()) -> bool:
        """Whether records of a partition not in ``held`` are pending."""
        return any(tp not in held for tp, _records in self._pending)

    def full(self, held: AbstractSet[TP], limit: int = HOLD_MAX) -> set[TP]:
        """The partitions of ``held`` with at least ``limit`` records pending."""
        counts: dict[TP, int] = {}
        for tp, records in self._pending:
            if tp in held:
                counts[tp] = counts.get(tp, 0) + len(records)
        return {tp for tp, n in counts.items() if n >= limit}

    def add(self, batch: dict[TP, list[Any]]) -> None:
        self._pending.extend((tp, records) for tp, records in batch.items() if records)

    def clear(self) -> None:
        self._pending.clear()

    def drop_partitions(self, which: Callable[[TP], bool]) -> None:
        """Drop the pending records of the partitions ``which`` says (sought again, or
        of no running task); the others' stay, in order."""
        self._pending = deque((tp, rs) for tp, rs in self._pending if not which(tp))

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

    def feed(
        self,
        feed: Callable[[TP, list[Any]], None],
        held: AbstractSet[TP] = frozenset(),
        recheck: Callable[[TP], AbstractSet[TP]] | None = None,
    ) -> int:
        """Feed slices (in order per partition) of every partition not in ``held`` until
        none is left or ``budget_s`` is spent; the number of records fed. ``recheck``,
        asked after every slice, says which partitions are held from then on: a
        partition whose hold just ended is fed until it runs ahead again, not through
        everything read while it was held. It is given the partition just fed."""
        start = self.clock()
        fed = 0
        pending = self._pending
        while pending:
            i = 0
            if held:  # the first entry of a partition not held (its records keep their order)
                i = next((j for j, (tp, _r) in enumerate(pending) if tp not in held), -1)
                if i < 0:
                    break
            if self.first is not None and not self.first(pending[i][0][0]):
                # ``first`` topics before (kstream.worker.internalfirst)
                first = self.first
                i = next(
                    (j for j, (tp, _r) in enumerate(pending) if first(tp[0]) and tp not in held), i
                )
            tp, records = pending[i]
            part, rest = records[: self.slice], records[self.slice :]
            if rest:
                pending[i] = (tp, rest)
            else:
                del pending[i]
            t0 = self.clock()
            feed(tp, part)
            took = self.clock() - t0
            fed += len(part)
            if recheck is not None:
                held = recheck(tp)
            # The next slice takes about SLICE_S at the cost per record just measured.
            per_record = took / len(part)
            want = int(SLICE_S / per_record) if per_record > 0 else self.max_slice
            self.slice = max(1, min(self.max_slice, want))
            if self.clock() - start >= self.budget_s:
                break
        return fed
