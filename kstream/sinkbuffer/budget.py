"""The memory budget the exactly-once sink buffers of one worker process share.

Every :class:`~kstream.sinkbuffer.buffer.EpochBuffer` charges what it holds in memory
(estimated bytes) to a budget; once the budget's total passes its limit, the buffer that
is growing spills what it holds to disk. A worker gives all its exactly-once sink tasks
one budget (``--sink-buffer-memory``), so the bound is the process's, whatever the
number of tasks: the buffers together hold at most about ``limit`` plus ``min_spill``
per buffer (a buffer spills only once it holds ``min_spill``, so an almost empty one
does not spill one tiny segment per record while others hold the budget). A budget
also makes the process give freed large blocks back to the operating system
(:mod:`kstream.sinkbuffer.allocator`): without that, the memory a spilling buffer frees
stays with the process and its peak RSS grows with the output of an interval.
"""

from __future__ import annotations

import threading

from kstream.sinkbuffer.allocator import return_large_blocks

#: Least a buffer holds before it spills (unless the budget is smaller).
MIN_SPILL = 256 * 1024


class MemoryBudget:
    """``limit`` bytes of buffered sink output, shared by the buffers charged to it.
    Thread-safe: buffers are written by the worker loop and released by commits."""

    def __init__(self, limit: int, min_spill: int = MIN_SPILL) -> None:
        if limit <= 0:
            raise ValueError(f"a spilling buffer needs a positive memory budget, got {limit}")
        self.limit = limit
        self.min_spill = min(min_spill, limit)
        self._held = 0
        self._lock = threading.Lock()
        return_large_blocks()

    @property
    def held(self) -> int:
        """Bytes every buffer charged to this budget holds in memory (estimated)."""
        return self._held

    def charge(self, n: int) -> bool:
        """Add ``n`` bytes (negative: released); whether the total is now over the limit."""
        with self._lock:
            self._held += n
            return self._held > self.limit
