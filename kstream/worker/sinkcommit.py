"""Publishing a completed checkpoint's exactly-once output on every task of a worker.

Each task's exactly-once sink has its own transactional producer, and a commit is a
flush and an EndTxn round trip to the broker. One after the other, a worker with four
tasks waited four round trips at every completion: time taken from processing, and
added to the end-to-end latency of the last task's output. Here every task's
transactions are opened and filled on the calling thread first (in task order, as
before), then their commits wait together on a few threads (the client releases the
GIL while it waits). The calling thread waits for every commit before it returns, so
no sink is used by two threads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from kstream.kafka.sink import SinkFencedError
from kstream.worker.runner import TaskRunner

COMMIT_THREADS = 8


class SinkCommitter:
    """Commits the sinks of a worker's tasks for one completed checkpoint at a time."""

    def __init__(self, threads: int = COMMIT_THREADS) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def commit(
        self, runners: Sequence[TaskRunner], checkpoint_id: int
    ) -> dict[str, SinkFencedError]:
        """Publish each task's output for ``checkpoint_id``. Returns the tasks a newer
        owner took over (fenced: they published nothing more); any other failure is
        raised, the first in task order, once every commit has finished."""
        fenced: dict[str, SinkFencedError] = {}
        started: list[tuple[str, list[Callable[[], int]]]] = []
        failed: Exception | None = None  # opening a task's transactions failed: none after it
        for r in runners:
            try:
                started.append((r.task_id, r.begin_commit_sinks(checkpoint_id)))
            except SinkFencedError as e:
                fenced[r.task_id] = e
            except Exception as e:  # the commits opened before it are finished first
                failed = e
                break
        for task_id, error in self._run(started):
            if isinstance(error, SinkFencedError):
                fenced[task_id] = error
            elif error is not None:
                raise error
        if failed is not None:
            raise failed
        return fenced

    def _run(
        self, started: list[tuple[str, list[Callable[[], int]]]]
    ) -> list[tuple[str, BaseException | None]]:
        """Every commit of ``started``, together; each task's first error (None: none).
        A single commit runs on the calling thread: there is nothing to wait for with it."""
        if sum(len(cs) for _, cs in started) <= 1:
            return [(task_id, _first_error([_call(c) for c in cs])) for task_id, cs in started]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="sink-commit")
        futures = [(task_id, [self._pool.submit(c) for c in cs]) for task_id, cs in started]
        wait([f for _, fs in futures for f in fs])
        return [(task_id, _first_error(fs)) for task_id, fs in futures]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _call(commit: Callable[[], int]) -> Future[int]:
    """``commit`` run here, its outcome as a finished future."""
    done: Future[int] = Future()
    try:
        done.set_result(commit())
    except Exception as e:
        done.set_exception(e)
    return done


def _first_error(futures: list[Future[int]]) -> BaseException | None:
    for f in futures:
        e = f.exception()
        if e is not None:
            return e
    return None
