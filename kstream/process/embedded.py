"""`kstream run`: a worker and its job's coordinator in one process."""

from __future__ import annotations

import threading

from kstream.plan.operators import describe
from kstream.process.coordinator import run_coordinator
from kstream.worker.loop import Worker


def run_embedded(worker: Worker) -> int:
    """Run ``worker`` with its job's coordinator in a thread of this process (`kstream run`).

    Exit code: the worker's, or the coordinator's when the worker's is 0 and the
    coordinator failed. Without checkpointing there is no coordinator.
    """
    cfg = worker.cfg
    codes: list[int] = []
    thread = None
    if worker.checkpointed:
        thread = threading.Thread(
            target=lambda: codes.append(
                run_coordinator(
                    cfg,
                    worker.plan.expected_tasks,
                    should_stop=worker.stop_event.is_set,
                    description=describe(worker.plan),
                )
            ),
            name="coordinator",
            daemon=True,
        )
        thread.start()
    code = worker.run()
    worker.stop_event.set()
    if thread is not None:
        thread.join(30)
    return code or (codes[0] if codes else 0)
