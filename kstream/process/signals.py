"""Signal handling of a worker process: graceful stop, then stop at once."""

from __future__ import annotations

import signal
from typing import Any

from kstream.worker.loop import Worker


def install_signal_handlers(worker: Worker) -> None:
    """The first SIGTERM/SIGINT stops gracefully (:meth:`Worker.request_stop`); a second
    one stops after the current batch without waiting for a final checkpoint."""

    def stop(_sig: int, _frame: Any) -> None:
        if worker.stop_requested.is_set():
            worker.stop_event.set()
        worker.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
