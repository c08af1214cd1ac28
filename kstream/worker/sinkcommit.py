"""Publishing a completed checkpoint's exactly-once output on every task of a worker.

Each task's exactly-once sink has its own transactional producer, and a commit is a
flush and an EndTxn round trip to the broker. One after the other, a worker with four
tasks waited four round trips at every completion: time taken from processing, and
added to the end-to-end latency of the last task's output. Here every task's
transactions are opened and filled on the processing thread first (in task order, as
before), then their commits run together on a few threads (the client releases the
GIL while it waits) while the processing thread goes on: new output goes into the
sinks' buffers, not to their producers. The processing thread collects the finished
commits (``collect``: the epochs dropped from the buffers, fenced tasks reported,
another failure raised) once per loop iteration, and waits for all of them before a
sink is used for anything but buffering: the next completion's commits, a restore, a
stop, the worker's exit. Until a commit is collected, a snapshot still holds its
epochs; a restore from it reads the task's marker and does not publish them twice.

A task whose commit fails is reported with its error, not raised: fenced (a newer
owner took it over: the worker stops it) or failed (e.g. a record over the producer's
``message.max.bytes``, a transaction the broker aborted: the task fails and the job
restores the checkpoint, whose restored sink publishes the epochs again).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TypeGuard

from kstream.kafka.exactly_once_sink import SinkCommit
from kstream.kafka.sink import SinkError, SinkFencedError
from kstream.sinkbuffer.epochs import SinkStateError
from kstream.worker.runner import TaskRunner

COMMIT_THREADS = 8


class SinkCommitter:
    """Commits the sinks of a worker's tasks, one completed checkpoint at a time."""

    def __init__(self, threads: int = COMMIT_THREADS) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        # The commits started and not collected: (task, commit, its publish).
        self._running: list[tuple[str, SinkCommit, Future[None]]] = []

    @property
    def busy(self) -> bool:
        """Whether commits were started and not collected."""
        return bool(self._running)

    def start(self, runners: Sequence[TaskRunner], checkpoint_id: int) -> dict[str, SinkError]:
        """Open each task's transactions for ``checkpoint_id`` on this thread and start
        their commits; returns the tasks fenced or failed while opening (``SinkFencedError``
        or another ``SinkError``). The previous commits must be collected first. After a
        task failed to open (other than fenced), no task after it is opened, as when the
        tasks were committed in turn, and the commits opened before it are collected
        (their outcomes returned too). Any other error is raised once they are."""
        if self._running:
            raise RuntimeError("the previous checkpoint's commits were not collected")
        outcomes: dict[str, SinkError] = {}
        started: list[tuple[str, SinkCommit]] = []
        error: Exception | None = None
        for r in runners:
            try:
                started += [(r.task_id, c) for c in r.begin_commit_sinks(checkpoint_id)]
            except SinkFencedError as e:
                outcomes[r.task_id] = e
            except Exception as e:
                if _reported(e):
                    outcomes[r.task_id] = e
                else:
                    error = e
                break
        if started and self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="sink-commit")
        for task_id, c in started:
            assert self._pool is not None
            self._running.append((task_id, c, self._pool.submit(c.publish)))
        if error is not None or any(not isinstance(e, SinkFencedError) for e in outcomes.values()):
            for task_id, err in self.collect(wait=True).items():
                outcomes.setdefault(task_id, err)
        if error is not None:
            raise error
        return outcomes

    def collect(self, *, wait: bool) -> dict[str, SinkError]:
        """The commits that finished (``wait``: all of them, once finished), in the order
        started: each published one drops its epochs here; returns the tasks fenced or
        whose commit failed (their epochs stay sealed: a restore publishes them). Any
        other error (a bug) is raised, the first, once every commit started finished."""
        running = self._running
        if not running:
            return {}
        if wait:
            wait_for([f for _, _, f in running])
        elif not all(f.done() for _, _, f in running):
            return {}  # all or nothing: the failure rule needs every outcome
        self._running = []
        outcomes: dict[str, SinkError] = {}
        error: BaseException | None = None
        for task_id, c, f in running:
            e = f.exception()
            if e is None:
                c.published()
            elif _reported(e):
                outcomes.setdefault(task_id, e)
            elif error is None:
                error = e
        if error is not None:
            raise error
        return outcomes

    def close(self) -> None:
        """Stop the commit threads (after the commits running, uncollected)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _reported(e: BaseException | None) -> TypeGuard[SinkError]:
    """Whether a commit's error is the task's outcome (a sink that could not commit)
    rather than a bug in the caller, which is raised."""
    return isinstance(e, SinkError) and not isinstance(e, SinkStateError)
