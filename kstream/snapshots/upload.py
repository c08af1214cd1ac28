"""Asynchronous, incremental upload of a task's local snapshot to the checkpoint store.

A snapshot is content-addressed shared files plus a per-task manifest written last
(paths: :mod:`kstream.checkpointstorage.layout`). Retention and GC: ``kstream.snapshots.retention``.
Restore: ``kstream.snapshots.restore``.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.layout import manifest_path, shared_path
from kstream.snapshots.transfers import SerialExecutor, TransferPools
from kstream.state.delta import DIR as DELTA_DIR
from kstream.state.localsnapshot import LocalSnapshot, mark_uploaded

MANIFEST_VERSION = 1
DELTA_MANIFEST_VERSION = (
    2  # its files include delta files (``deltas/...``): older readers refuse it
)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a local file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class DeferredBlob(Protocol):
    """A blob written on the upload thread rather than handed over as bytes (a sink
    buffer spilled to disk): ``write_to`` writes it once, ``close`` frees what it holds."""

    size: int

    def write_to(self, out: BinaryIO) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FileEntry:
    """One file of a snapshot: local name, size, content hash, where it is stored."""

    name: str
    size: int
    sha256: str
    path: str


@dataclass(frozen=True)
class SnapshotManifest:
    """What one task's snapshot consists of; see the module docstring."""

    app_id: str
    task_id: str
    checkpoint_id: int
    label: str
    attempt: int
    created: float
    sequence_number: int
    tables: tuple[str, ...]
    files: tuple[FileEntry, ...]
    positions: dict[str, Any] = field(default_factory=dict)
    blobs: dict[str, FileEntry] = field(default_factory=dict)
    # The task's input watermarks, [topic, partition, upstream or "", watermark] each;
    # None in manifests written before they were kept here (then they are in the state).
    watermarks: list[list[Any]] | None = None

    @property
    def total_bytes(self) -> int:
        """Size of all files and blobs of this snapshot."""
        return sum(f.size for f in self.files) + sum(b.size for b in self.blobs.values())

    def deltas(self) -> list[FileEntry]:
        """The delta files (``kstream.state.delta``), in the order a restore applies them."""
        deltas = (f for f in self.files if f.name.startswith(DELTA_DIR + "/"))
        return sorted(deltas, key=attrgetter("name"))

    def shared_paths(self) -> set[str]:
        """Every shared store path this manifest references."""
        return {f.path for f in self.files} | {b.path for b in self.blobs.values()}

    def to_json(self) -> bytes:
        """The manifest file's content. A task behind a repartition topic of 1 024
        partitions has 1 024 upstream positions and watermarks: ``asdict``'s deep copy
        and an indented (pure-Python) encoding took 8.5 ms a manifest, holding the GIL
        on the upload threads; a shallow copy and the C encoder take 0.6 ms."""
        body = {name: getattr(self, name) for name in self.__dataclass_fields__}
        body["files"] = [vars(f) for f in self.files]
        body["blobs"] = {name: vars(b) for name, b in self.blobs.items()}
        body["version"] = DELTA_MANIFEST_VERSION if self.deltas() else MANIFEST_VERSION
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> SnapshotManifest:
        """Parse a manifest; ValueError (with the reason) if it is not one."""
        try:
            obj = json.loads(data)
            if obj.get("version") not in (MANIFEST_VERSION, DELTA_MANIFEST_VERSION):
                raise ValueError(f"unsupported manifest version {obj.get('version')!r}")
            return cls(
                app_id=str(obj["app_id"]),
                task_id=str(obj["task_id"]),
                checkpoint_id=int(obj["checkpoint_id"]),
                label=str(obj["label"]),
                attempt=int(obj["attempt"]),
                created=float(obj["created"]),
                sequence_number=int(obj["sequence_number"]),
                tables=tuple(obj["tables"]),
                files=tuple(FileEntry(**f) for f in obj["files"]),
                positions=dict(obj["positions"]),
                blobs={str(k): FileEntry(**v) for k, v in obj["blobs"].items()},
                watermarks=(
                    [list(w) for w in obj["watermarks"]]
                    if obj.get("watermarks") is not None
                    else None
                ),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a snapshot manifest: {e!r}") from e


@dataclass(frozen=True)
class StateHandle:
    """The result of an uploaded snapshot: what a task acknowledges (docs/design.md §5.5)."""

    manifest_path: str
    checkpoint_id: int
    label: str
    bytes_total: int
    bytes_uploaded: int
    files_total: int
    files_uploaded: int
    sync_ms: float
    upload_ms: float


RETOUCH_S = 60.0
"""A shared file the uploader wrote or touched less than this long ago is reused without
asking the store again (every interval asked two requests per file of the task). It is
then still far younger than retention's grace period (``retention.DEFAULT_GRACE_SECONDS``,
10 minutes), so no GC deletes it before the manifest referencing it is written; and the
check after the manifest write puts back any referenced file that is missing."""


class SnapshotUploader:
    """Uploads local snapshots of one task, incrementally, in the background.

    ``upload`` returns at once with a future; snapshots of one task are uploaded
    in submission order. Hashes of hard-linked SSTs are remembered by inode, so an
    SST is hashed once however many snapshots contain it. ``pools``: the worker's
    upload and transfer threads, shared by its tasks' uploaders (None: this uploader's
    own, one upload thread and the store's concurrency in transfer threads).
    """

    def __init__(
        self,
        store: CheckpointStore,
        app_id: str,
        task_id: str,
        *,
        clock: Callable[[], float] = time.time,
        pools: TransferPools | None = None,
    ) -> None:
        self.store = store
        self.app_id = app_id
        self.task_id = task_id
        self.clock = clock
        self.writer = secrets.token_hex(6)  # names its checkpoints' manifests (layout)
        self._own = pools is None  # closed with this uploader
        self._pools = pools or TransferPools(max(1, store.concurrency), upload_threads=1)
        self._executor = SerialExecutor(self._pools.uploads())
        self._touched: dict[str, float] = {}  # shared path -> when we last wrote or touched it
        self._hashes: dict[tuple[int, int, int, int], str] = {}

    def upload(
        self,
        snapshot: LocalSnapshot,
        *,
        positions: Mapping[str, Any] | None = None,
        attempt: int = 0,
        blobs: Mapping[str, bytes | DeferredBlob] | None = None,
        watermarks: list[list[Any]] | None = None,
    ) -> Future[StateHandle]:
        """Upload ``snapshot`` in the background; the future's result is its StateHandle."""
        return self._executor.submit(
            self.upload_now,
            snapshot,
            positions=positions,
            attempt=attempt,
            blobs=blobs,
            watermarks=watermarks,
        )

    def upload_now(
        self,
        snapshot: LocalSnapshot,
        *,
        positions: Mapping[str, Any] | None = None,
        attempt: int = 0,
        blobs: Mapping[str, bytes | DeferredBlob] | None = None,
        watermarks: list[list[Any]] | None = None,
    ) -> StateHandle:
        """Upload ``snapshot`` on the calling thread (what ``upload`` runs). A
        ``DeferredBlob`` is written to a local file next to the snapshot first."""
        temps: list[Path] = []
        try:
            return self._upload(snapshot, positions, attempt, blobs or {}, temps, watermarks)
        finally:
            for b in (blobs or {}).values():
                if not isinstance(b, bytes):
                    b.close()
            for t in temps:
                t.unlink(missing_ok=True)

    def _upload(
        self,
        snapshot: LocalSnapshot,
        positions: Mapping[str, Any] | None,
        attempt: int,
        blobs: Mapping[str, bytes | DeferredBlob],
        temps: list[Path],
        watermarks: list[list[Any]] | None = None,
    ) -> StateHandle:
        t0 = time.perf_counter()
        snapshot.wait_ready()
        store = self.store
        uploaded_bytes = 0
        uploaded_files = 0
        # 1. Hash every file (cached per inode: SSTs are immutable).
        files: list[FileEntry] = []
        local_of: dict[str, Path] = {}
        for local in _snapshot_files(snapshot.directory):
            sha, size = self._hash(local)
            name = local.name if local.parent == snapshot.directory else f"{DELTA_DIR}/{local.name}"
            entry = FileEntry(name, size, sha, shared_path(self.app_id, sha))
            files.append(entry)
            local_of[entry.path] = local

        # 2. Upload what the store lacks; touch what it has, so a concurrent GC
        #    (which only deletes unreferenced files older than its grace period)
        #    leaves it alone until our manifest references it. Files in parallel,
        #    bounded by the store's concurrency; any failure fails the upload.
        #    A file this uploader wrote or touched less than RETOUCH_S ago is not asked
        #    about again.
        touched, now = self._touched, time.monotonic()
        for path in [p for p, at in touched.items() if now - at >= RETOUCH_S]:
            del touched[path]

        def put_missing(entry: FileEntry) -> bool:
            if entry.path in touched:
                return False
            at = time.monotonic()  # the file's time in the store is at least this recent
            if store.exists(entry.path):
                store.touch(entry.path)
                uploaded = False
            else:
                store.put_file(entry.path, local_of[entry.path])
                uploaded = True
            touched[entry.path] = at
            return uploaded

        # 3. The blobs: their content and hash here, then asked about (touched or put)
        #    along with the files of step 2, in parallel.
        blob_entries: dict[str, FileEntry] = {}
        blob_data: dict[str, bytes | Path] = {}
        for name, data in sorted(blobs.items()):
            if isinstance(data, bytes):
                sha, size = hashlib.sha256(data).hexdigest(), len(data)
                content: bytes | Path = data
            else:
                content = snapshot.directory.parent / f".blob-{snapshot.label}-{name}.tmp"
                temps.append(content)
                with open(content, "wb") as f:
                    size = data.write_to(f)
                sha = sha256_file(content)
            entry = FileEntry(name, size, sha, shared_path(self.app_id, sha))
            blob_entries[name] = entry
            blob_data[entry.path] = content

        def put_blob(entry: FileEntry) -> bool:
            if store.exists(entry.path):
                store.touch(entry.path)
                return False
            _put(store, entry.path, blob_data[entry.path])
            return True

        jobs = [(put_missing, e) for e in files if e.path not in touched]
        jobs += [(put_blob, e) for e in {e.path: e for e in blob_entries.values()}.values()]
        done = self._pools.transfers().map(lambda job: job[0](job[1]), jobs)
        for (_, entry), uploaded in zip(jobs, done, strict=True):
            if uploaded:
                uploaded_bytes += entry.size
                uploaded_files += 1
        manifest = SnapshotManifest(
            app_id=self.app_id,
            task_id=self.task_id,
            checkpoint_id=snapshot.checkpoint_id,
            label=snapshot.label,
            attempt=attempt,
            created=self.clock(),
            sequence_number=snapshot.sequence_number,
            tables=snapshot.tables,
            files=tuple(files),
            positions=dict(positions or {}),
            blobs=blob_entries,
            watermarks=watermarks,
        )
        # 4. The manifest last, atomically: once it exists the snapshot is whole.
        path = manifest_path(self.app_id, self.task_id, snapshot.label, self.writer)
        store.put_bytes(path, manifest.to_json())
        # 5. Heal a race with a GC that listed manifests before step 4 and deleted a
        #    file we reused: now that the manifest references it, put it back. Asked
        #    in parallel, as in steps 2 and 3: one request after another was half of a
        #    steady-state upload to an object store (PROFILE.md, sixteenth round).
        paths = sorted(manifest.shared_paths())
        present = self._pools.transfers().map(store.exists, paths)
        for p, there in zip(paths, present, strict=True):
            if not there:
                if p in local_of:
                    store.put_file(p, local_of[p])
                else:
                    _put(store, p, blob_data[p])
        # 6. The local copy may now be pruned (once newer snapshots exist).
        mark_uploaded(snapshot.directory)
        return StateHandle(
            manifest_path=path,
            checkpoint_id=snapshot.checkpoint_id,
            label=snapshot.label,
            bytes_total=manifest.total_bytes,
            bytes_uploaded=uploaded_bytes,
            files_total=len(files) + len(blob_entries),
            files_uploaded=uploaded_files,
            sync_ms=snapshot.sync_ms,
            upload_ms=(time.perf_counter() - t0) * 1000,
        )

    def _hash(self, local: Path) -> tuple[str, int]:
        """The SHA-256 and size of a snapshot's file. A snapshot's files are never written
        again (its RocksDB files and the base's are hard links or copies, its deltas are
        new files): a file with the same inode, size and mtime is not read again."""
        st = local.stat()
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        sha = self._hashes.get(key)
        if sha is None:
            sha = self._hashes[key] = sha256_file(local)
        return sha, st.st_size

    def close(self, wait: bool = True) -> None:
        """Accept no more uploads; with ``wait``, return once the pending ones ran. Its
        own threads (no ``pools`` given) stop then; the worker's are the worker's."""
        self._executor.shutdown(wait=wait)
        if self._own:
            self._pools.close(wait=wait)


def _snapshot_files(directory: Path) -> list[Path]:
    """A local snapshot's files: RocksDB's, then its delta files, each sorted by name."""
    files = sorted(p for p in directory.iterdir() if p.is_file())
    deltas = directory / DELTA_DIR
    return files + (sorted(deltas.iterdir()) if deltas.is_dir() else [])


def _put(store: CheckpointStore, path: str, content: bytes | Path) -> None:
    if isinstance(content, bytes):
        store.put_bytes(path, content)
    else:
        store.put_file(path, content)


def read_manifest(store: CheckpointStore, path: str) -> SnapshotManifest:
    """The manifest at ``path``; ValueError naming the path if it is not valid."""
    data = store.get_bytes(path)
    try:
        return SnapshotManifest.from_json(data)
    except ValueError as e:
        raise ValueError(f"{store.url}/{path}: {e}") from e
