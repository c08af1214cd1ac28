"""The worker's side of its query sidecar (:mod:`kstream.query.sidecar`): the child
process started and stopped with the query endpoint, told of each running task's local
snapshot of every completed checkpoint, which it pins (:mod:`kstream.query.pinned`).

A sidecar that dies (killed, out of memory) is seen at once by a watcher thread: the
worker keeps its own handle of the public listening socket, so the port stays bound
and connections wait in its backlog; the worker's endpoint accepts on it meanwhile
(every query answered in-process, as without a sidecar) and a new sidecar is started
on the same socket — at once the first time, after a growing pause when it keeps
dying — and the worker leaves the port to it as soon as it serves.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import shutil
import socket
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.layout import CHECKPOINT_LABEL, snapshot_label
from kstream.query.operators import OperatorInfo
from kstream.query.pinned import write_pending
from kstream.query.server import QueryServer
from kstream.query.sidecar import run

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
RESTART_PAUSES_S = (0.0, 1.0, 5.0, 30.0)
"""Pause before a new sidecar, by how many died in a row (one that served STABLE_S
ends the row): the worker answers meanwhile."""
STABLE_S = 60.0


class QuerySidecar:
    """One worker's sidecar process and its pinned snapshots under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: Any = None
        self.restarts = 0  # new sidecars serving after one died
        self._conn: Any = None
        self._pinned = -1
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self._args: tuple[Any, ...] = ()
        self._worker: QueryServer | None = None
        self._serving = False
        self._pinning: tuple[int, frozenset[str]] = (-1, frozenset())

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
        worker: QueryServer,
        operators: Mapping[str, OperatorInfo],
        token: str | None,
    ) -> None:
        """Start the sidecar serving on ``listener`` (the public query port: this
        process keeps it bound and its endpoint ``worker`` serves it while no sidecar
        does), relaying to ``worker``, and watch it (module doc)."""
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(parents=True)
        self._args = (listener, f"127.0.0.1:{worker.port}", dict(operators), token)
        self._worker = worker
        if not self._spawn():
            worker.adopt(listener)
        self._watcher = threading.Thread(
            target=self._watch, args=(worker,), name="kstream-query-sidecar-watch", daemon=True
        )
        self._watcher.start()

    def _spawn(self) -> bool:
        """A sidecar process (``process``); whether it serves (said it is ready)."""
        listener, relay_to, operators, token = self._args
        ctx = multiprocessing.get_context("spawn")  # (the worker has threads: no fork)
        ours, theirs = ctx.Pipe()
        self.process = ctx.Process(
            target=run,
            args=(listener, relay_to, str(self.root), operators, token, theirs),
            name="kstream-query-sidecar",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self._conn = ours
        self._serving = False
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._closed.is_set() and time.monotonic() < deadline:
            if self._ready(0.2):
                return True
            if not self.process.is_alive():
                log.warning("the query sidecar exited as it started (exit code %s)",
                            self.process.exitcode)  # fmt: skip
                return False
        if not self._closed.is_set():
            log.warning("the query sidecar did not start within %.0f s: the worker answers "
                        "its queries meanwhile", START_TIMEOUT_S)  # fmt: skip
        return False

    def _ready(self, timeout: float) -> bool:
        """Whether the sidecar said it serves (within ``timeout`` s)."""
        try:
            if self._conn.poll(timeout):
                self._conn.recv()
                self._serving = True
        except (EOFError, OSError):
            pass  # it died: the watcher sees it
        return self._serving

    def _watch(self, worker: QueryServer) -> None:
        """Until :meth:`close`: when the sidecar dies, the worker serves its port, and a
        new one is started (module doc)."""
        listener = self._args[0]
        died = 0
        started = time.monotonic()
        while not self._closed.is_set():
            process = self.process
            wait([process.sentinel], timeout=0.2)
            if self._closed.is_set():
                return
            if process.is_alive():
                if not self._serving and self._ready(0):  # (a slow start: serves now)
                    worker.release(listener)
                    self.restarts += 1 if died else 0
                continue
            self._serving = False
            worker.adopt(listener)  # before anything else: queries wait for no one
            self._conn.close()
            if time.monotonic() - started >= STABLE_S:
                died = 0
            pause = RESTART_PAUSES_S[min(died, len(RESTART_PAUSES_S) - 1)]
            died += 1
            log.warning(
                "the query sidecar died (exit code %s): the worker answers its queries; "
                "a new one in %.0f s", process.exitcode, pause,
            )  # fmt: skip
            if self._closed.wait(pause):
                return
            started = time.monotonic()
            if self._spawn():
                worker.release(listener)
                self.restarts += 1
                log.warning("a new query sidecar serves the query port")

    def completed(self, checkpoint: int, backends: Mapping[str, Any], worker: str) -> None:
        """Checkpoint ``checkpoint`` completed: name the running tasks' local snapshots
        of it (``backends``: task -> its state backend) to the sidecar, which pins them
        (with its own GIL: links made here waited for the processing thread's, up to a
        switch interval per file)."""
        if self.process is None or checkpoint <= self._pinned:
            return
        label = snapshot_label(CHECKPOINT_LABEL, checkpoint)
        sources = {t: Path(b.snapshot_root) / label for t, b in backends.items()
                   if hasattr(b, "snapshot_root")}  # fmt: skip
        try:
            write_pending(self.root, checkpoint, worker, sources)  # (a small file, at once)
            self._pinning = (checkpoint, frozenset(sources))
        except OSError:
            log.exception("announcing checkpoint %d to the query sidecar failed", checkpoint)
        self._pinned = checkpoint

    def pinning(self, task: str, checkpoint: int | None) -> bool:
        """Whether a serving sidecar is given ``task``'s snapshot of ``checkpoint`` (it
        waits for it rather than have this worker read the store)."""
        n, tasks = self._pinning
        return self._serving and n == checkpoint and task in tasks

    def close(self) -> None:
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(START_TIMEOUT_S + 5)
        if self._conn is not None:
            self._conn.close()  # the sidecar stops
        if self.process is not None:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(5)
            self.process = None
        if self._args:
            if self._worker is not None:
                self._worker.release(self._args[0])
            self._args[0].close()  # the public port
            self._args = ()
        shutil.rmtree(self.root, ignore_errors=True)
