"""Signal handling of a worker process: graceful stop, then stop at once — from its
first moment on.

Handlers are installed before anything else (:func:`install_signal_handlers` with no
worker yet): the start-up reaches the cluster, checks the store and may wait out a
broker outage for up to ``--max-outage``, and a SIGTERM in that time used to kill the
process with the default action (exit -15, no log line). Until the worker exists a
signal ends the start-up at once with exit 0 (one log line) — nothing was read, so there is nothing
to checkpoint; once the worker is :meth:`StopSignals.attach`\\ ed, the first signal stops
it gracefully and a second one stops it at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from kstream.worker.loop import Worker

log = logging.getLogger(__name__)


class StopSignals:
    """SIGTERM/SIGINT of a worker process (see the module docstring)."""

    def __init__(self) -> None:
        self._worker: Worker | None = None

    def attach(self, worker: Worker) -> None:
        """From now on a signal stops ``worker`` (gracefully first)."""
        self._worker = worker

    def __call__(self, sig: int, _frame: Any) -> None:
        worker = self._worker
        if worker is None:
            # Exit here: an exception raised from a signal handler surfaces wherever the
            # main thread is (inside a Kafka client's callback, a property), not as a
            # clean exit. Nothing to close: no client has joined or written anything yet.
            log.warning("%s during start-up: exiting", signal.Signals(sig).name)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        # The first stops gracefully (Worker.request_stop); a second one stops after the
        # current batch without waiting for a final checkpoint.
        if worker.stop_requested.is_set():
            worker.stop_event.set()
        worker.request_stop()


def install_signal_handlers(worker: Worker | None = None) -> StopSignals:
    """SIGTERM and SIGINT handled by a :class:`StopSignals` (attached to ``worker`` if
    given); the caller attaches the worker once it exists."""
    handler = StopSignals()
    if worker is not None:
        handler.attach(worker)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return handler
