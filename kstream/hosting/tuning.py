"""Process-level tuning of a worker or coordinator process."""

from __future__ import annotations

import gc
import logging
import resource

log = logging.getLogger(__name__)


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


def raise_open_files_limit() -> tuple[int, int]:
    """Process-level: raise the soft limit of open files to the hard limit; returns
    (soft before, soft now).

    A worker holds a few descriptors per task (its RocksDB's files, its snapshot's),
    over a thousand at 256 tasks (benchmarks/SCALING.md), past the soft limit of 1 024
    that a login shell or a systemd service gets by default while the hard limit is far
    higher; the JVM and Go's runtime raise it the same way. A hard limit below the soft
    one cannot be, and an unlimited one is capped at 1 048 576 (``ulimit -n``'s usual
    ceiling).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:  # e.g. a container's seccomp profile
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, e)
            return soft, soft
        log.debug("open-files limit raised from %d to %d", soft, target)
        return soft, target
    return soft, soft
