"""State as of a completed checkpoint or a savepoint, read from the checkpoint store.

What a ``checkpointed`` query and ``kstream query --checkpoint`` read: each task's
snapshot restored exactly as a restore after a failure would restore it
(:func:`kstream.snapshots.restore.restore_backend`, the machinery of ``kstream state
dump``) into a directory of this process, then read. A task's directory is restored
again in place for a newer checkpoint: the files it already has (an unchanged base,
earlier deltas) are reused, so only what changed is downloaded.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    MetadataError,
    latest_completed,
    read_metadata,
)
from kstream.checkpointstorage.savepoints import read_savepoint
from kstream.query.operators import QueryError
from kstream.query.read import Tables
from kstream.snapshots.restore import restore_backend
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend

LOCAL_KEPT = 2  # local copies of snapshots kept per task directory (for reuse)


class _Opened:
    """One task's restored backend."""

    def __init__(self, backend: RocksDBBackend) -> None:
        self.backend = backend

    def tables(self, operator: str) -> Tables:
        return Tables.of(
            operator,
            {n: partial(self.backend.table, TableSpec(n)) for n in self.backend.stored_tables()},
        )


class StoredState:
    """Snapshots of ``app_id`` restored under ``root`` (one directory per task), read
    under one lock (reads of a restored backend fill its caches)."""

    def __init__(self, store: CheckpointStore, app_id: str, root: Path | str) -> None:
        self.store = store
        self.app_id = app_id
        self.root = Path(root)
        self.lock = threading.Lock()
        self._open: dict[str, tuple[str, _Opened]] = {}  # task -> (manifest, backend)
        self._latest: tuple[float, CheckpointMetadata | None] = (0.0, None)

    def metadata(
        self, checkpoint: int | None = None, savepoint: str | None = None, *, fresh_s: float = 0.5
    ) -> CheckpointMetadata:
        """The checkpoint (default: the latest completed, looked up at most every
        ``fresh_s``) or savepoint to read; QueryError (404) if there is none."""
        try:
            if savepoint is not None:
                return read_savepoint(self.store, savepoint)
            if checkpoint is not None:
                return read_metadata(self.store, self.app_id, checkpoint)
            at, meta = self._latest
            if meta is None or time.monotonic() - at > fresh_s:
                meta = latest_completed(self.store, self.app_id)
                self._latest = (time.monotonic(), meta)
        except (MetadataError, ValueError) as e:
            raise QueryError(str(e), 404) from e
        if meta is None:
            raise QueryError(f"{self.app_id!r} has no completed checkpoint yet", 404)
        return meta

    def read(
        self, meta: CheckpointMetadata, task: str, operator: str, fn: Callable[[Tables], Any]
    ) -> Any:
        """``fn`` of ``task``'s tables of ``operator`` in ``meta`` (None: the checkpoint
        holds no state of that task)."""
        snap = meta.tasks.get(task)
        if snap is None or not snap.handle:
            return None
        with self.lock:
            opened = self._restored(task, snap.handle)
            return fn(opened.tables(operator))

    def _restored(self, task: str, handle: str) -> _Opened:
        held = self._open.get(task)
        if held is not None and held[0] == handle:
            return held[1]
        if held is not None:
            held[1].backend.close()
            del self._open[task]
        local = self.root / task
        backend, manifest = restore_backend(self.store, handle, local)
        snapshots = local / "snapshots"
        if snapshots.is_dir():  # keep the newest copies for the next restore's reuse
            old = sorted(snapshots.iterdir(), key=lambda d: d.stat().st_mtime)[:-LOCAL_KEPT]
            for d in old:
                if d.name != manifest.label:
                    shutil.rmtree(d, ignore_errors=True)
        opened = _Opened(backend)
        self._open[task] = (handle, opened)
        return opened

    def close(self) -> None:
        with self.lock:
            for _handle, opened in self._open.values():
                opened.backend.close()
            self._open = {}
