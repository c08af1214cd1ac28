"""The gate between query threads and the processing loop: a query reads only while
the loop is not touching state, and the loop waits for at most one read."""

from __future__ import annotations

import threading
import time

import pytest

from kstream.query.gate import GateTimeout, StateGate


def test_a_query_runs_at_once_while_the_loop_waits_for_input() -> None:
    gate = StateGate()
    assert gate.run(lambda: 41 + 1) == 42


def test_a_query_waits_for_the_loop_and_is_answered_between_two_feeds() -> None:
    gate = StateGate()
    gate.enter()  # the loop works
    inside = threading.Event()
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(gate.run(lambda: 7)))
    thread.start()
    deadline = time.monotonic() + 5
    while not gate._queue and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not results and len(gate._queue) == 1  # queued, not run: the loop holds the gate
    gate.serve()  # between two feeds: the loop answers it, in its own thread
    thread.join(5)
    assert results == [7]
    assert not inside.is_set()
    gate.leave()


def test_errors_reach_the_query_and_a_stalled_loop_times_the_query_out() -> None:
    gate = StateGate()

    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        gate.run(boom)
    gate.enter()
    with pytest.raises(GateTimeout):
        gate.run(lambda: 1, timeout=0.05)
    assert not gate._queue  # withdrawn: the loop will not run it later
    gate.leave()


def test_the_loop_waits_for_the_read_in_progress_only() -> None:
    gate = StateGate()
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(5)
        return 1

    thread = threading.Thread(target=gate.run, args=(slow,))
    thread.start()
    assert started.wait(5)
    entered = threading.Event()

    def loop_enters() -> None:
        gate.enter()
        entered.set()

    loop = threading.Thread(target=loop_enters)
    loop.start()
    assert not entered.wait(0.05)  # the one read in progress holds the loop
    release.set()
    assert entered.wait(5)
    thread.join(5)
    loop.join(5)
    gate.leave()
