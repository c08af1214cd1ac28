"""The heartbeat-load benchmark's bookkeeping: a process's CPU time from /proc, and the
member processes' assignments counted from their pipes."""

from __future__ import annotations

import os
import time

import pytest

from benchmarks.heartbeat_load import _assignments, broker_cpu_s


def test_cpu_seconds_of_a_process_grow_with_its_work() -> None:
    before = broker_cpu_s(os.getpid())
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert 0.2 <= broker_cpu_s(os.getpid()) - before < 5


def test_assignments_are_counted_across_lines_read_together() -> None:
    r, w = os.pipe()
    os.write(w, b"assigned\nassigned\nassigned\n")
    assert _assignments([r]) == 3
    assert _assignments([r]) == 0  # nothing more within 0.5 s
    os.close(w)
    with pytest.raises(SystemExit, match="a member process exited"):
        _assignments([r])
    os.close(r)
