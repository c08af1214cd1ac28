"""The threads that move snapshots between a worker's disk and the checkpoint store,
shared by all its tasks: their number is the worker's, not a multiple of its tasks.

A task's uploads still run one at a time in the order it submitted them
(:class:`SerialExecutor`, on the ``uploads`` threads); their file transfers, and the
downloads of restores, run on the ``transfers`` threads.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["UPLOAD_THREADS", "SerialExecutor", "TransferPools"]

T = TypeVar("T")

#: Threads running the tasks' uploads (hashing files, writing manifests, waiting on
#: their transfers), for every task of a worker.
UPLOAD_THREADS = 4


class TransferPools:
    """A worker's upload threads (``upload_threads``) and file-transfer threads
    (``transfer_threads``: the store's concurrency), each started on first use."""

    def __init__(self, transfer_threads: int, upload_threads: int = UPLOAD_THREADS) -> None:
        if transfer_threads < 1 or upload_threads < 1:
            raise ValueError(
                f"transfer and upload threads must be >= 1, got {transfer_threads} "
                f"and {upload_threads}"
            )
        self.transfer_threads = transfer_threads
        self.upload_threads = upload_threads
        self._lock = threading.Lock()
        self._uploads: ThreadPoolExecutor | None = None
        self._transfers: ThreadPoolExecutor | None = None

    def uploads(self) -> ThreadPoolExecutor:
        """The threads that run uploads (through each task's ``SerialExecutor``)."""
        with self._lock:
            if self._uploads is None:
                self._uploads = ThreadPoolExecutor(self.upload_threads, thread_name_prefix="upload")
            return self._uploads

    def transfers(self) -> ThreadPoolExecutor:
        """The threads that put, touch, ask about and get files. Nothing run on them
        waits for the uploads' threads, so uploads may wait for them."""
        with self._lock:
            if self._transfers is None:
                self._transfers = ThreadPoolExecutor(
                    self.transfer_threads, thread_name_prefix="transfer"
                )
            return self._transfers

    def close(self, wait: bool = True) -> None:
        """Stop the threads once they ran what they were given (with ``wait``, return
        then; without it, at once)."""
        with self._lock:
            pools, self._uploads, self._transfers = (self._uploads, self._transfers), None, None
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=wait)


class SerialExecutor:
    """Runs what is submitted to it one at a time, in submission order, on ``pool``'s
    threads: one of them at a time, and none while nothing is queued."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._draining = False
        self._running: Future[Any] | None = None
        self._shut = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot submit after shutdown")
            self._queue.append((future, lambda: fn(*args, **kwargs)))
            if self._draining:
                return future
            self._draining = True
        self._pool.submit(self._drain)
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                self._running = None
                if not self._queue:
                    self._draining = False
                    return
                future, job = self._queue.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                self._running = future
            try:
                future.set_result(job())
            except BaseException as e:  # the future carries it, as ThreadPoolExecutor's do
                future.set_exception(e)

    def shutdown(self, wait: bool = True) -> None:
        """Accept nothing more; with ``wait``, return once what was submitted ran
        (without it, at once: what was submitted still runs, as with ThreadPoolExecutor)."""
        with self._lock:
            self._shut = True
            pending = [f for f, _ in self._queue]
            running = self._running
        if wait:
            futures.wait([*pending, *([running] if running is not None else [])])
