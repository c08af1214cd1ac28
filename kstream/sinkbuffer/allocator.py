"""Memory the sink buffers free goes back to the operating system (glibc's malloc).

A bounded sink buffer frees large blocks all the time: a spilled segment's encoded
bytes, a segment read back to be published, the column lists of a batch. glibc's
malloc serves a block of at least ``M_MMAP_THRESHOLD`` (128 KiB) with its own
``mmap`` and unmaps it when freed, but by default it raises that threshold to the
size of every such block freed (up to 32 MiB): from then on blocks of that size come
from the heap, whose freed space is kept by the process as long as anything above it
is in use. The process's memory then grows with the amount of output an interval
holds, although what it holds does not (4 sink tasks, a 64 MiB budget, 1 / 2 / 4 M
records in one interval; peak RSS 405 / 446 / 458 and 412 / 456 / 524 MB in two
runs of 2026-12-01 10:46 UTC).

:func:`return_large_blocks` fixes the threshold at its default, which also switches
the raising off, so large blocks are unmapped when freed (the same as the environment
variable ``MALLOC_MMAP_THRESHOLD_=131072``; interleaved with those runs: 387 / 414 /
418 and 387 / 382 / 430 MB, no slower). ``malloc_trim(0)`` after every 16 MiB spilled
instead was tried and bounded less (350 / 416 / 417 MB). Elsewhere than glibc it does
nothing. ``integration/test_multihost.py``, which had failed twice on a branch with
this setting, passed 3 of 3 runs with it (2026-12-01 10:35-10:45 UTC).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
import threading

log = logging.getLogger(__name__)

#: glibc's ``M_MMAP_THRESHOLD`` parameter of ``mallopt`` and its default value.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024

_lock = threading.Lock()
_done: bool | None = None


def return_large_blocks() -> bool:
    """Fix glibc's mmap threshold (once per process); whether it is fixed."""
    global _done
    with _lock:
        if _done is None:
            _done = _fix_threshold()
        return _done


def _fix_threshold() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError) as e:
        log.debug("could not fix malloc's mmap threshold: %s", e)
        return False
    if not ok:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")
    return ok
