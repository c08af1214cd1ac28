"""The handoff between query threads and the processing loop.

A task's state is the processing thread's: its tables' write cache is plain Python
dicts, and even a read fills a cache. So a query reads a task's state only while the
processing thread is not touching it. The processing thread holds the gate while it
works and lets go only while it waits for input (:meth:`StateGate.leave` /
:meth:`StateGate.enter` around the consumer's poll), and between two task feeds it
runs the queries that are waiting (:meth:`StateGate.serve`), one after the other.

A query thread (:meth:`StateGate.run`) takes the gate if it is free — the loop is
waiting for input — and reads at once; otherwise it queues the read and waits for
the loop to serve it, taking the gate itself if the loop lets go first. Either way
the loop waits for at most the one read in progress: the query path never blocks
processing for longer than one lookup.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
POLL_S = 0.002  # how often a waiting query looks whether the gate is free (waking costs
# the busy processing thread the GIL: not too often)


class GateTimeout(TimeoutError):
    """The processing loop did not get to the query in time (a long restore, a stall)."""


class _Job(Generic[T]):
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], T]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # handed to the waiting query thread
            self.error = e
        finally:
            self.done.set()


class StateGate:
    """See the module docstring. Created held by no one: the processing thread calls
    :meth:`enter` before it touches state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[_Job[Any]] = deque()
        self.served = 0  # queries answered (both ways), for tests and metrics
        # Called at every serve (the gate held): the endpoint answers what is ready.
        self.on_serve: Callable[[], None] | None = None

    # ---- the processing thread ---------------------------------------------------------------

    def enter(self) -> None:
        """Take the gate (waits for at most the one read in progress)."""
        self._lock.acquire()

    def leave(self) -> None:
        """Answer what waits, then let go (before waiting for input)."""
        self.serve()
        self._lock.release()

    def serve(self) -> None:
        """Answer the queries waiting (the gate held)."""
        if self.on_serve is not None:
            self.on_serve()
        queue = self._queue
        while queue:
            try:
                job = queue.popleft()
            except IndexError:
                return
            job.run()
            self.served += 1

    # ---- query threads -------------------------------------------------------------------------

    def take(self, timeout: float) -> bool:
        """Wait (without the GIL) until the loop lets go, and hold the gate; False after
        ``timeout``. The endpoint's thread answers with it while the loop waits for input."""
        return self._lock.acquire(timeout=timeout)

    def take_now(self) -> bool:
        """``take`` if the gate is free now, without waiting."""
        return self._lock.acquire(blocking=False)

    def give_back(self) -> None:
        self._lock.release()

    def run(self, fn: Callable[[], T], timeout: float = 5.0) -> T:
        """``fn()`` while the processing thread does not touch state (module doc);
        GateTimeout after ``timeout`` seconds without a chance."""
        if self._lock.acquire(blocking=False):
            try:
                self.served += 1
                return fn()
            finally:
                self._lock.release()
        job = _Job(fn)
        self._queue.append(job)
        deadline = time.monotonic() + timeout
        while not job.done.wait(POLL_S):
            if self._lock.acquire(blocking=False):
                try:
                    self.serve()
                finally:
                    self._lock.release()
            elif time.monotonic() > deadline:
                try:
                    self._queue.remove(job)
                except ValueError:
                    job.done.wait()  # being run right now: its result is a moment away
                    break
                raise GateTimeout(f"the processing loop did not answer within {timeout:.1f}s")
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]
