"""Process-level tuning of a worker or coordinator process."""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Process-level: make Python's cyclic garbage collector run far less often.

    A worker allocates millions of short-lived tuples and dicts (records, keys, window
    results) and keeps large live structures (caches, buffers); with the default
    thresholds the collector keeps rescanning them (~10-25 % of a window firing). The
    objects alive after start-up are frozen out of every collection, and a young
    collection runs every 100 000 net allocations instead of 700. Reference counting
    still frees all acyclic garbage at once; only cycles wait longer.

    Every process that hosts a coordinator applies it too (`kstream coordinator`; `run`
    and `worker` host theirs): a checkpoint of 100 000 tasks builds as many snapshots
    and their metadata, and the default thresholds rescan them many times over.
    """
    gc.freeze()
    gc.set_threshold(100_000, 50, 50)
