"""`kstream run`: a worker and its job's coordinator in one process."""

from __future__ import annotations

import logging
import threading

from kstream.hosting.coordinator import EXIT_FAILED, EXIT_OK
from kstream.hosting.startup import Coordination, coordinate
from kstream.worker.loop import Worker

log = logging.getLogger(__name__)


def run_embedded(worker: Worker) -> int:
    """Run ``worker`` with its job's coordinator in a thread of this process (`kstream run`).

    Exit code: the worker's, or the coordinator's when the worker's is 0 and the
    coordinator failed. A coordinator that fails on its own (fenced, failed, crashed)
    stops the worker at once: the process exits non-zero instead of running on without
    checkpoints. One that finishes cleanly (a stop with a savepoint) has already
    published the final checkpoint's completion: the worker stops gracefully, reading
    it, so its output is published (bounded by the drain timeout). Without
    checkpointing there is no coordinator.
    """
    cfg = worker.cfg
    codes: list[int] = []
    thread = None

    def coordinator_thread() -> None:
        code = EXIT_FAILED
        try:
            code = coordinate(
                cfg, Coordination.of(worker.plan), should_stop=worker.stop_event.is_set
            )
        except Exception:
            log.exception("kstream: the coordinator thread crashed")
        finally:
            codes.append(code)
            if worker.stop_event.is_set():
                pass  # the worker is stopping already
            elif code == EXIT_OK:
                worker.request_stop()
            else:
                log.error("kstream: the coordinator stopped (exit %d); stopping the worker", code)
                worker.stop_event.set()

    if worker.checkpointed:
        thread = threading.Thread(target=coordinator_thread, name="coordinator", daemon=True)
        thread.start()
    code = worker.run()
    worker.stop_event.set()
    if thread is not None:
        thread.join(30)
    return code or (codes[0] if codes else 0)
