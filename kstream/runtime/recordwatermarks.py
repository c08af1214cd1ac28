"""Per-record watermarks within a source batch: where the task must cut the batch.

A source partition's watermark is ``max timestamp - out_of_orderness``, a running
maximum over its records. The partition's watermark before record *i* of a batch is
``max(its watermark before the batch, max(stamps[:i]) - out_of_orderness)``, and the
task's is the minimum of that and the other inputs' (``cap``). A record at or after the
task watermark just before it is treated alike under any older watermark (each window
containing it ends after it, so none has fired), so only a record *behind* it needs
that exact watermark: the batch is cut there and the task advances to it (windows fire,
downstream gets a ``Watermark``) before it goes on. In-order input and disorder within
the bound make no cut. Pure: the running maximum and the comparisons run in C.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate, islice
from operator import le, lt


def watermark_cuts(
    stamps: list[int],
    out_of_orderness: int,
    start: int,
    cap: Callable[[], int],
    task_watermark: int,
) -> tuple[int, list[tuple[int, int]]]:
    """``(the partition's watermark after the batch, cuts)`` for a non-empty batch with
    timestamps ``stamps``, the partition's watermark ``start`` before it and the task's
    ``task_watermark``; ``cap()`` is the minimum of the other live inputs' watermarks
    (``MAX_TS``: none), asked only when a record may be behind. Each cut ``(i,
    watermark)``: advance the task to ``watermark`` before record ``i``."""
    ooo = out_of_orderness
    if all(map(le, stamps, islice(stamps, 1, None))):  # in order: nothing behind
        return max(start, stamps[-1] - ooo), []
    running = list(accumulate(stamps, max))
    after = max(start, running[-1] - ooo)
    # Record i >= 1 is behind its partition's running watermark when
    # stamps[i] + ooo < running[i - 1].
    lifted = stamps if ooo == 0 else [t + ooo for t in stamps]
    if not any(map(lt, islice(lifted, 1, None), running)):
        return after, []
    limit = cap()
    cuts: list[tuple[int, int]] = []
    for i in range(1, len(stamps)):
        if lifted[i] >= running[i - 1]:
            continue
        before = min(limit, max(start, running[i - 1] - ooo))
        if stamps[i] >= before or before <= task_watermark:
            continue  # not behind the task watermark, or the task is there already
        cuts.append((i, before))
        task_watermark = before
    return after, cuts


__all__ = ["watermark_cuts"]
