"""Heartbeats while the processing thread waits on the cluster.

The coordinator counts a worker lost once it has not heard a heartbeat for its
``heartbeat_timeout`` (10 s by default), and the processing thread sends them between
two steps of its loop. Some steps wait on the cluster for longer than that when a
broker restarts or a previous owner's transaction is still open: a restore (a task's
inputs' group offsets must be stable before its commit marker is read, downloads, the
restored output's publication) and the wait for a publication still committing. A
worker is not lost while it waits there: :func:`heartbeating` sends, from a thread of
its own, the heartbeat the loop would have sent at its start, every interval, until the
wait ends. Such a heartbeat says nothing new: the tasks it names are those the worker
held when the wait began; while a restore is in progress the coordinator notes that
it heard the worker, and — ``progress``: how many tasks it restored so far — that the
restore moves, which keeps the restore's deadline from passing while it does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from kstream.protocol.messages import Heartbeat

__all__ = ["heartbeating"]


@contextmanager
def heartbeating(
    heartbeat: Heartbeat | None,
    send: Callable[[Heartbeat], object],
    interval: float,
    progress: Callable[[], int] | None = None,
) -> Iterator[None]:
    """Send ``heartbeat`` every ``interval`` s from another thread while the body runs
    (nothing when it is None: no group generation yet, no heartbeat either), with
    ``restored=progress()`` when given."""
    if heartbeat is None:
        yield
        return
    done = threading.Event()

    def beat() -> None:
        while not done.wait(interval):
            send(heartbeat if progress is None else replace(heartbeat, restored=progress()))

    thread = threading.Thread(target=beat, name="kstream-keepalive", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
