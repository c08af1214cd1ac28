"""The worker's side of its query sidecar (:mod:`kstream.query.sidecar`): the child
process started and stopped with the query endpoint, and the pinning of each running
task's local snapshot of every completed checkpoint for it (:mod:`kstream.query.pinned`).
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import shutil
import socket
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.layout import CHECKPOINT_LABEL, snapshot_label
from kstream.query.operators import OperatorInfo
from kstream.query.pinned import pin, write_pending, write_pointer
from kstream.query.sidecar import run
from kstream.state.localsnapshot import marker

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0


class QuerySidecar:
    """One worker's sidecar process and its pinned snapshots under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: Any = None
        self._conn: Any = None
        self._pins = ThreadPoolExecutor(1, thread_name_prefix="kstream-query-pin")
        self._pinned = -1

    @staticmethod
    def can_run(operators: Mapping[str, OperatorInfo]) -> bool:
        """Whether the operators' key serdes can be handed to a process (a user's serde
        class may not pickle: then the worker answers every query itself)."""
        try:
            pickle.dumps(dict(operators))
        except Exception as e:
            log.warning("no query sidecar (the operators' serdes do not pickle: %s)", e)
            return False
        return True

    def start(
        self,
        listener: socket.socket,
        worker: str,
        operators: Mapping[str, OperatorInfo],
        token: str | None,
    ) -> None:
        """Start the sidecar serving on ``listener`` (closed here: the child has it),
        relaying to the worker's endpoint at ``worker`` (``host:port``)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        ctx = multiprocessing.get_context("spawn")  # (the worker has threads: no fork)
        ours, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=run,
            args=(listener, worker, str(self.root), dict(operators), token, theirs),
            name="kstream-query-sidecar",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        listener.close()
        self._conn = ours
        if not ours.poll(START_TIMEOUT_S):
            log.warning("the query sidecar did not start within %.0f s", START_TIMEOUT_S)
        else:
            ours.recv()

    def completed(self, checkpoint: int, backends: Mapping[str, Any], worker: str) -> None:
        """Checkpoint ``checkpoint`` completed: pin the running tasks' local snapshots of
        it (``backends``: task -> its state backend) on a thread, then point to them."""
        if self.process is None or checkpoint <= self._pinned:
            return
        self._pinned = checkpoint
        label = snapshot_label(CHECKPOINT_LABEL, checkpoint)
        sources = {t: Path(b.snapshot_root) / label for t, b in backends.items()
                   if hasattr(b, "snapshot_root")}  # fmt: skip
        try:
            write_pending(self.root, checkpoint, list(sources))  # (a small file, at once)
        except OSError:
            log.exception("announcing checkpoint %d to the query sidecar failed", checkpoint)
        self._pins.submit(self._pin, checkpoint, sources, worker)

    def _pin(self, checkpoint: int, sources: dict[str, Path], worker: str) -> None:
        try:
            pinned: dict[str, Path] = {}
            for task, source in sources.items():
                if marker(source).exists():  # (uploaded: whole, and what the store holds)
                    got = pin(source, self.root, task)
                    if got is not None:
                        pinned[task] = got
            write_pointer(self.root, checkpoint, worker, pinned)
        except OSError:
            log.exception("pinning checkpoint %d for queries failed", checkpoint)

    def close(self) -> None:
        self._pins.shutdown(wait=True, cancel_futures=True)
        if self._conn is not None:
            self._conn.close()  # the sidecar stops
        if self.process is not None:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
            self.process = None
        shutil.rmtree(self.root, ignore_errors=True)
