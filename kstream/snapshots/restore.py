"""Restore a task's RocksDB state from a snapshot manifest (docs/design.md §6.3, §8).

Every file is checked against the manifest's SHA-256. A file the task still has
locally (in ``<local_dir>/snapshots/*/``, hard links of earlier snapshots) with a
matching checksum is reused — task-local recovery — and only the rest is
downloaded. A missing or corrupt file raises ``CorruptSnapshotError`` naming the
object and the checkpoint (a store that cannot be reached raises ``StoreError``
instead: that says nothing about the checkpoint). A task never falls back to
another checkpoint by itself: it reports the failure, and the coordinator restores
every task from one older retained checkpoint (:mod:`kstream.protocol.failover`),
so a job never runs a mix of checkpoints. The restored DB is built in a staging
directory and swapped in at the end, so a failed restore never leaves a half-built
DB behind.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
import uuid
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.progress import Progress
from kstream.snapshots.upload import (
    FileEntry,
    SnapshotManifest,
    read_manifest,
    sha256_file,
)
from kstream.state.delta import DIR as DELTA_DIR
from kstream.state.delta import DeltaError
from kstream.state.localsnapshot import mark_uploaded
from kstream.state.rocksdb import RocksDBBackend

log = logging.getLogger(__name__)


class CorruptSnapshotError(RuntimeError):
    """A snapshot file is missing or does not match its manifest checksum."""

    def __init__(
        self,
        message: str,
        *,
        manifest_path: str,
        file: str | None = None,
        object: str | None = None,
    ) -> None:
        super().__init__(message)
        self.manifest_path = manifest_path
        self.file = file
        self.object = object  # the full store name of the corrupt or missing object


class PublishedPastRestore(CorruptSnapshotError):
    """A sink of the task already published the output of a checkpoint newer than the
    one to restore (its commit marker says ``published``): restoring this checkpoint
    would process that output's input again and publish it twice, so for an
    exactly-once sink the checkpoint cannot be restored. ``object`` names the marker."""

    def __init__(self, message: str, *, manifest_path: str, object: str, published: int) -> None:
        super().__init__(message, manifest_path=manifest_path, object=object)
        self.published = published


@dataclass(frozen=True)
class RestoreStats:
    """How a restore went: which manifest was used, what was reused or downloaded."""

    manifest_path: str
    files_reused: int
    files_downloaded: int
    bytes_downloaded: int
    restore_ms: float


def _local_candidates(local_dir: Path, name: str, size: int, label: str) -> list[Path]:
    """Local copies of ``name`` with the right size, the snapshot's own dir first."""
    root = local_dir / "snapshots"
    if not root.is_dir():
        return []
    dirs = sorted(root.iterdir(), key=lambda d: d.name != label)
    return [d / name for d in dirs if (d / name).is_file() and (d / name).stat().st_size == size]


def place_file(src: Path, dst: Path, entry: FileEntry) -> None:
    """Put a verified local file at ``dst``: hard link for SSTs (immutable), copy otherwise."""
    if entry.name.endswith(".sst"):
        try:
            os.link(src, dst)
            return
        except OSError:
            pass  # another file system: fall through to a copy
    shutil.copyfile(src, dst)


def _restore_one(
    store: CheckpointStore,
    manifest_path: str,
    local_dir: Path,
    backend_kwargs: dict[str, Any],
    transfers: Executor | None = None,
) -> tuple[RocksDBBackend, SnapshotManifest, RestoreStats]:
    t0 = time.perf_counter()
    try:
        manifest = read_manifest(store, manifest_path)
    except StoreError as e:
        if not isinstance(e.__cause__, FileNotFoundError):
            raise  # the store is unreachable: no property of this checkpoint
        raise CorruptSnapshotError(
            f"snapshot manifest {store.url}/{manifest_path} is missing: {e}",
            manifest_path=manifest_path,
            object=f"{store.url}/{manifest_path}",
        ) from e
    except ValueError as e:
        raise CorruptSnapshotError(
            f"snapshot manifest {store.url}/{manifest_path} is missing or unreadable: {e}",
            manifest_path=manifest_path,
            object=getattr(e, "object", None) or f"{store.url}/{manifest_path}",
        ) from e
    stage = local_dir / f".restore-{uuid.uuid4().hex}"
    (stage / DELTA_DIR).mkdir(parents=True)
    deltas = local_dir / f".deltas-{uuid.uuid4().hex}"  # moved out of the DB's directory
    reused = 0
    progress = Progress(
        f"restore of task {manifest.task_id} from {manifest.label}",
        total_items=len(manifest.files),
        total_bytes=sum(e.size for e in manifest.files),
        log=log,
    )
    try:
        to_fetch: list[FileEntry] = []
        for entry in manifest.files:
            # 1. Task-local recovery: a local file whose checksum matches.
            for cand in _local_candidates(local_dir, entry.name, entry.size, manifest.label):
                if sha256_file(cand) == entry.sha256:
                    place_file(cand, stage / entry.name, entry)
                    reused += 1
                    progress.advance(1, entry.size)
                    break
            else:
                to_fetch.append(entry)
        # 2. Download the rest, in parallel (bounded by the store), verifying each.
        downloaded, downloaded_bytes = len(to_fetch), sum(e.size for e in to_fetch)
        if to_fetch:
            log.info(
                "task %s: restoring %s: downloading %d files (%d bytes), %d reused locally",
                manifest.task_id, manifest_path, downloaded, downloaded_bytes, reused,
            )  # fmt: skip

        def fetch(e: FileEntry) -> FileEntry:
            return download_file(store, manifest, manifest_path, e, stage)

        own = None  # without the worker's transfer threads: this restore's own
        pool: Executor
        if transfers is None:
            workers = max(1, min(store.concurrency, len(to_fetch)))
            pool = own = ThreadPoolExecutor(workers, thread_name_prefix=f"get-{manifest.task_id}")
        else:
            pool = transfers
        try:
            for entry in pool.map(fetch, to_fetch):
                progress.advance(1, entry.size)
        finally:
            if own is not None:
                own.shutdown()
        progress.finish()
        # 3. Swap the staged DB in and open it. Keep the staged copy as this
        #    snapshot's local copy too, so the next restore can reuse it.
        db_dir = local_dir / "db"
        if db_dir.exists():
            shutil.rmtree(db_dir)
        local_copy = local_dir / "snapshots" / manifest.label
        if not local_copy.exists():
            (local_copy / DELTA_DIR).mkdir(parents=True)
            for entry in manifest.files:
                place_file(stage / entry.name, local_copy / entry.name, entry)
            mark_uploaded(local_copy)
        os.replace(stage / DELTA_DIR, deltas)
        os.replace(stage, db_dir)
        backend = RocksDBBackend(local_dir, **backend_kwargs)
        if backend.sequence_number < manifest.sequence_number:
            backend.close()
            raise CorruptSnapshotError(
                f"snapshot {manifest.label} of task {manifest.task_id} ({manifest_path}) "
                f"restored to RocksDB sequence {backend.sequence_number}, below the "
                f"manifest's {manifest.sequence_number}: files are missing",
                manifest_path=manifest_path,
                object=f"{store.url}/{manifest_path}",
            )
        # 4. The changes since the base, in order (every file verified above).
        for entry in manifest.deltas():
            try:
                backend.apply_delta(
                    (deltas / Path(entry.name).name).read_bytes(), f"{store.url}/{entry.path}"
                )
            except DeltaError as e:
                backend.close()
                raise CorruptSnapshotError(
                    f"delta {entry.name} of snapshot {manifest.label} of task "
                    f"{manifest.task_id} ({manifest_path}): {e}",
                    manifest_path=manifest_path,
                    file=entry.name,
                    object=f"{store.url}/{entry.path}",
                ) from e
    finally:
        for d in (stage, deltas):
            if d.exists():
                shutil.rmtree(d, ignore_errors=True)
    stats = RestoreStats(
        manifest_path=manifest_path,
        files_reused=reused,
        files_downloaded=downloaded,
        bytes_downloaded=downloaded_bytes,
        restore_ms=(time.perf_counter() - t0) * 1000,
    )
    return backend, manifest, stats


def download_file(
    store: CheckpointStore, manifest: SnapshotManifest, mpath: str, entry: FileEntry, stage: Path
) -> FileEntry:
    """Fetch one snapshot file into ``stage`` and verify it; CorruptSnapshotError if it is
    missing or its checksum or size differs from the manifest's (a store that cannot be
    reached raises StoreError: that says nothing about the checkpoint)."""
    dst = stage / entry.name
    where = (
        f"file {entry.name} ({store.url}/{entry.path}) of snapshot "
        f"{manifest.label} of task {manifest.task_id} ({mpath})"
    )
    try:
        store.get_file(entry.path, dst)
    except StoreError as e:
        if not isinstance(e.__cause__, FileNotFoundError):
            raise
        raise CorruptSnapshotError(
            f"{where} is missing from the store",
            manifest_path=mpath,
            file=entry.name,
            object=e.object or f"{store.url}/{entry.path}",
        ) from e
    actual = sha256_file(dst)
    if actual != entry.sha256 or dst.stat().st_size != entry.size:
        raise CorruptSnapshotError(
            f"{where} is corrupt: sha256 {actual}, size {dst.stat().st_size}; "
            f"manifest says sha256 {entry.sha256}, size {entry.size}",
            manifest_path=mpath,
            file=entry.name,
            object=f"{store.url}/{entry.path}",
        )
    return entry


def restore_state(
    store: CheckpointStore,
    manifest_path: str,
    local_dir: Path | str,
    *,
    transfers: Executor | None = None,
    **backend_kwargs: Any,
) -> tuple[RocksDBBackend, SnapshotManifest, RestoreStats]:
    """Restore like ``restore_backend`` and also say how (reuse/download counts, time).
    ``transfers``: the threads that download the files (the worker's,
    ``TransferPools.transfers``); None: threads of this restore's own."""
    local = Path(local_dir)
    local.mkdir(parents=True, exist_ok=True)
    return _restore_one(store, manifest_path, local, backend_kwargs, transfers)


def restore_backend(
    store: CheckpointStore,
    manifest_path: str,
    local_dir: Path | str,
    **backend_kwargs: Any,
) -> tuple[RocksDBBackend, SnapshotManifest]:
    """Rebuild a task's state from the snapshot at ``manifest_path``.

    Returns the opened backend (its contents equal the snapshot exactly) and the
    manifest; the caller seeks its inputs to ``manifest.positions``. Raises
    CorruptSnapshotError naming the object and checkpoint otherwise.
    ``backend_kwargs`` go to ``RocksDBBackend`` (cache size, clock, ...). Any backend
    open on ``local_dir`` must be closed first: its live DB is replaced.
    """
    backend, manifest, _ = restore_state(store, manifest_path, local_dir, **backend_kwargs)
    return backend, manifest


def read_blob(store: CheckpointStore, manifest: SnapshotManifest, name: str, mpath: str) -> bytes:
    """Extra blob ``name`` of the snapshot whose manifest ``manifest`` is at ``mpath``,
    checksum-verified (CorruptSnapshotError otherwise)."""
    entry = manifest.blobs[name]
    where = f"blob {name} ({store.url}/{entry.path}) of snapshot {manifest.label} of task {manifest.task_id}"
    try:
        data = store.get_bytes(entry.path)
    except StoreError as e:
        if not isinstance(e.__cause__, FileNotFoundError):
            raise  # the store is unreachable: no property of this checkpoint
        raise CorruptSnapshotError(
            f"{where} is missing",
            manifest_path=mpath,
            file=name,
            object=f"{store.url}/{entry.path}",
        ) from e
    if hashlib.sha256(data).hexdigest() != entry.sha256:
        raise CorruptSnapshotError(
            f"{where} is corrupt",
            manifest_path=mpath,
            file=name,
            object=f"{store.url}/{entry.path}",
        )
    return data
