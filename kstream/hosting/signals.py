"""Signal handling of a kstream process: graceful stop, then stop at once — from its
first moment on.

Handlers are installed before anything else (:func:`install_signal_handlers`, nothing
attached yet): the start-up reaches the cluster, checks the store and may wait out a
broker outage for up to ``--max-outage``, and a SIGTERM in that time used to kill the
process with the default action (exit -15, no log line). Until what runs the job is
attached (:meth:`StopSignals.attach`), a signal ends the start-up at once with exit 0
and one log line — nothing was read, so there is nothing to checkpoint; once attached,
a signal calls its stop (a worker's: :func:`worker_stop`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from kstream.worker.loop import Worker

log = logging.getLogger(__name__)


class StopSignals:
    """SIGTERM/SIGINT of a process (see the module docstring)."""

    def __init__(self) -> None:
        self._stop: Callable[[], None] | None = None

    def attach(self, stop: Callable[[], None]) -> None:
        """From now on a signal calls ``stop`` (safe to call from a signal handler)."""
        self._stop = stop

    def __call__(self, sig: int, _frame: Any) -> None:
        stop = self._stop
        if stop is None:
            # Exit here: an exception raised from a signal handler surfaces wherever the
            # main thread is (inside a Kafka client's callback, a property), not as a
            # clean exit. Nothing to close: no client has joined or written anything yet.
            log.warning("%s during start-up: exiting", signal.Signals(sig).name)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        stop()


def worker_stop(worker: Worker) -> Callable[[], None]:
    """A worker's stop: the first signal stops gracefully (:meth:`Worker.request_stop`);
    a second one stops after the current batch without waiting for a final checkpoint."""

    def stop() -> None:
        if worker.stop_requested.is_set():
            worker.stop_event.set()
        worker.request_stop()

    return stop


def install_signal_handlers(worker: Worker | None = None) -> StopSignals:
    """SIGTERM and SIGINT handled by a new :class:`StopSignals`, attached to ``worker``'s
    stop if given; else the caller attaches its stop once what runs the job exists."""
    handler = StopSignals()
    if worker is not None:
        handler.attach(worker_stop(worker))
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return handler
