"""A sink buffer's memory budget makes the process return freed large blocks to the OS
(kstream.sinkbuffer.allocator): measured in a fresh interpreter, since malloc's
settings are the process's."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the allocator setting is glibc's; elsewhere it does nothing",
)

# A large block freed raises glibc's dynamic mmap threshold; 64 blocks of 2 MiB then
# come from the heap, each followed by a small block that stays in use, so freeing the
# large ones gives nothing back unless the threshold is fixed. Prints RssAnon in KiB
# before, at the peak and after the free.
_PROBE = textwrap.dedent(
    """
    import sys
    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1])
    if sys.argv[1] == "budget":
        from kstream.sinkbuffer.budget import MemoryBudget
        MemoryBudget(64 * 1024 * 1024)
    big = b"x" * (16 << 20)
    del big
    before = anon()
    large, small = [], []
    for i in range(64):
        large.append(b"y" * (2 << 20))
        small.append(b"z" * 1000 + bytes([i]))
    peak = anon()
    del large
    print(before, peak, anon())
    """
)


def _probe(mode: str) -> tuple[int, int, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    before, peak, after = map(int, out)
    return before, peak, after


def test_freed_large_blocks_return_to_the_os_once_a_budget_exists() -> None:
    before, peak, after = _probe("budget")
    assert peak - before >= 100 * 1024  # the 128 MiB were resident
    assert after - before < 16 * 1024  # and are given back


def test_without_a_budget_glibc_keeps_them() -> None:
    # The control: the probe does show the retention the budget's setting removes.
    before, peak, after = _probe("plain")
    assert peak - before >= 100 * 1024
    assert after - before >= 100 * 1024
