"""Child process for the SIGKILL test: dies inside an open sink transaction.

Usage: ``python -m integration.sink_crash_child BOOTSTRAP APP TASK TOPIC COUNT BLOB_PATH``

It starts an exactly-once sink, buffers COUNT records as epoch 1, writes the
snapshot blob to BLOB_PATH, then handles ``CheckpointCompleted(1)`` through the
real commit path — except that ``commit_transaction`` only flushes (every record
and the marker are on the broker, inside the open transaction), prints
``IN-TRANSACTION`` and waits to be killed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from kstream.kafka.exactly_once_sink import ExactlyOnceSink


class _HangAtCommit:
    """Wraps the sink's producer; its commit_transaction flushes, reports, and never returns."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def commit_transaction(self, timeout: float = -1) -> None:
        left = self._producer.flush(30.0)
        print(f"IN-TRANSACTION undelivered={left}", flush=True)
        threading.Event().wait()  # until SIGKILL


def main(argv: list[str]) -> None:
    bootstrap, app, task, topic, count, blob_path = argv
    sink = ExactlyOnceSink(app, task, bootstrap)
    sink.recover(None, attempt=1)
    sink.write_batch(
        (topic, None, f"k{i}".encode(), f"v{i}".encode(), None, None) for i in range(int(count))
    )
    sink.on_barrier(1)
    Path(blob_path).write_bytes(sink.buffer_blob())
    sink.transactions._producer = _HangAtCommit(sink.transactions._producer)
    sink.on_checkpoint_completed(1)


if __name__ == "__main__":
    main(sys.argv[1:])
