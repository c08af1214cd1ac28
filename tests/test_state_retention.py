"""Retention and GC: keep the last k completed checkpoints, never delete a referenced file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import manifest_path, numbered_manifest
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    read_metadata,
    write_metadata,
)
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.retention import apply_retention
from kstream.snapshots.upload import SnapshotUploader, StateHandle, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend

APP = "app"
TASK = "stage1-0"
SPEC = TableSpec("t")


def complete(store: CheckpointStore, n: int, handles: dict[str, str]) -> None:
    tasks = {task: TaskSnapshot(handle=h) for task, h in handles.items()}
    write_metadata(store, APP, CheckpointMetadata(n, 0, 1.0, 2.0, tasks))


def referenced_by_remaining_manifests(store: CheckpointStore) -> set[str]:
    refs: set[str] = set()
    for path in store.list(f"{APP}/tasks"):
        refs |= read_manifest(store, path).shared_paths()
    return refs


def age_everything(store: FileStore, seconds: float) -> None:
    past = time.time() - seconds
    for path in store.list(APP):
        os.utime(Path(store.root, path), (past, past))


def snapshot(backend: RocksDBBackend, uploader: SnapshotUploader, n: int, rows: int) -> StateHandle:
    t = backend.table(SPEC)
    for i in range(rows):
        t.put((i,), {"n": n, "i": i})
    backend.flush()
    return uploader.upload_now(backend.snapshot_sync(n), positions={"p": n})


def test_keeps_last_k_and_deletes_old_aborted_and_unreferenced(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    handles = {}
    for n in range(1, 8):
        handles[n] = snapshot(backend, uploader, n, rows=50 * n)
        if n not in (3, 7):  # 3 was aborted, 7 is still in flight
            complete(store, n, {TASK: handles[n].manifest_path})
    backend.table(SPEC).put(("savepoint",), 1)
    savepoint = uploader.upload_now(backend.snapshot_sync(0, label="savepoint-x"))
    age_everything(store, 3600)
    before = set(store.list(f"{APP}/shared"))

    report = apply_retention(store, APP, retained=2, grace_seconds=60)

    assert report.retained == [5, 6]
    assert report.deleted_metadata == [f"{APP}/checkpoints/chk-{n}.json" for n in (1, 2, 4)]
    assert sorted(report.deleted_manifests) == sorted(
        handles[n].manifest_path for n in (1, 2, 3, 4)
    )
    assert store.list(f"{APP}/tasks") == sorted(
        [
            handles[5].manifest_path,
            handles[6].manifest_path,
            handles[7].manifest_path,
            savepoint.manifest_path,
        ]
    )
    # Exactly the unreferenced shared files are gone; every referenced one is still there.
    refs = referenced_by_remaining_manifests(store)
    assert set(store.list(f"{APP}/shared")) == refs
    assert sorted(report.deleted_files) == sorted(before - refs)
    assert report.deleted_files  # there was garbage to collect
    assert report.bytes_freed > 0
    restored, manifest = restore_backend(store, handles[5].manifest_path, tmp_path / "r")
    assert manifest.checkpoint_id == 5 and restored.table(SPEC).get((249,)) == {"n": 5, "i": 249}
    restored.close()
    # A second run finds nothing more to delete.
    again = apply_retention(store, APP, retained=2, grace_seconds=60)
    assert (again.deleted_metadata, again.deleted_manifests, again.deleted_files) == ([], [], [])
    backend.close()
    uploader.close()


def two_checkpoints(
    store: FileStore, tmp_path: Path
) -> tuple[RocksDBBackend, SnapshotUploader, list[str]]:
    """Checkpoints 1 and 2 of one task; the shared files only checkpoint 1 references."""
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    h1 = snapshot(backend, uploader, 1, rows=100)
    complete(store, 1, {TASK: h1.manifest_path})
    h2 = snapshot(backend, uploader, 2, rows=200)
    complete(store, 2, {TASK: h2.manifest_path})
    garbage = sorted(
        read_manifest(store, h1.manifest_path).shared_paths()
        - read_manifest(store, h2.manifest_path).shared_paths()
    )
    assert garbage
    return backend, uploader, garbage


def test_unreferenced_files_younger_than_the_grace_period_are_kept(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend, uploader, garbage = two_checkpoints(store, tmp_path)
    young = apply_retention(store, APP, retained=1, grace_seconds=60)
    assert young.deleted_files == []
    assert sorted(young.kept_young_files) == garbage
    old = apply_retention(store, APP, retained=1, grace_seconds=60, clock=lambda: time.time() + 120)
    assert sorted(old.deleted_files) == garbage
    backend.close()
    uploader.close()


class CountingStore(FileStore):
    """Counts the age questions retention asks."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.asked: list[str] = []

    def mtime(self, path: str) -> float:
        self.asked.append(path)
        return super().mtime(path)


def test_young_files_are_asked_once_per_grace_period_when_the_caller_keeps_them(
    tmp_path: Path,
) -> None:
    store = CountingStore(tmp_path / "store")
    backend, uploader, garbage = two_checkpoints(store, tmp_path)
    young: dict[str, float] = {}
    first = apply_retention(store, APP, retained=1, grace_seconds=60, young=young)
    assert sorted(first.kept_young_files) == garbage and sorted(store.asked) == garbage
    assert sorted(young) == garbage
    store.asked.clear()
    again = apply_retention(store, APP, retained=1, grace_seconds=60, young=young)
    assert sorted(again.kept_young_files) == garbage and store.asked == []  # not asked again
    later = apply_retention(
        store, APP, retained=1, grace_seconds=60, clock=lambda: time.time() + 120, young=young
    )
    assert sorted(later.deleted_files) == garbage and sorted(store.asked) == garbage
    assert young == {}  # deleted: forgotten
    backend.close()
    uploader.close()


class GcDuringManifestWrite(FileStore):
    """Runs GC exactly between an upload's file phase and its manifest write."""

    def __init__(self, root: Path, grace: float) -> None:
        super().__init__(root)
        self.grace = grace
        self.armed_for: str | None = None
        self.reports: list = []

    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if path == self.armed_for:
            self.armed_for = None
            self.reports.append(apply_retention(self, APP, retained=1, grace_seconds=self.grace))
        super().put_bytes(path, data, exclusive=exclusive)


def _race_setup(
    tmp_path: Path, grace: float
) -> tuple[GcDuringManifestWrite, RocksDBBackend, set[str]]:
    """Another task's aborted manifest is the only reference to files our next upload reuses."""
    store = GcDuringManifestWrite(tmp_path / "store", grace)
    backend = RocksDBBackend(tmp_path / "task")
    other = SnapshotUploader(store, APP, "stage1-1")
    h1 = snapshot(backend, other, 1, rows=100)  # uploaded, then checkpoint 1 aborted
    other.close()
    # Checkpoint 2 completes (an empty task snapshot): other's chk-1 manifest is now garbage.
    empty = RocksDBBackend(tmp_path / "empty")
    h2 = SnapshotUploader(store, APP, "stage1-2").upload_now(empty.snapshot_sync(2))
    empty.close()
    complete(store, 2, {"stage1-2": h2.manifest_path})
    age_everything(store, 3600)
    # Files only the garbage manifest references (not also the live empty snapshot).
    only_old = (
        read_manifest(store, h1.manifest_path).shared_paths()
        - read_manifest(store, h2.manifest_path).shared_paths()
    )
    return store, backend, only_old


def test_gc_racing_an_upload_keeps_the_files_it_reuses_because_they_were_touched(
    tmp_path: Path,
) -> None:
    store, backend, reused = _race_setup(tmp_path, grace=60)
    uploader = SnapshotUploader(store, APP, TASK)
    snap = backend.snapshot_sync(3)
    store.armed_for = manifest_path(APP, TASK, "chk-3", uploader.writer)
    handle = uploader.upload_now(snap)
    (report,) = store.reports
    (deleted,) = report.deleted_manifests
    assert deleted.startswith(f"{APP}/tasks/stage1-1/") and numbered_manifest(deleted) == ("chk", 1)
    mine = read_manifest(store, handle.manifest_path).shared_paths()
    shared_with_old = reused & mine
    assert shared_with_old and set(report.kept_young_files) == shared_with_old
    assert not set(report.deleted_files) & mine
    assert handle.files_uploaded == 0  # unchanged state: every file was already stored
    restored, _ = restore_backend(store, handle.manifest_path, tmp_path / "r")
    assert restored.table(SPEC).get((99,)) == {"n": 1, "i": 99}
    restored.close()
    backend.close()
    uploader.close()


def test_a_reused_file_deleted_by_a_racing_gc_is_uploaded_again(tmp_path: Path) -> None:
    # grace 0: the touch does not protect, GC deletes the files the upload reuses.
    store, backend, reused = _race_setup(tmp_path, grace=0)
    uploader = SnapshotUploader(store, APP, TASK)
    store.armed_for = manifest_path(APP, TASK, "chk-3", uploader.writer)
    handle = uploader.upload_now(backend.snapshot_sync(3))
    (report,) = store.reports
    mine = read_manifest(store, handle.manifest_path).shared_paths()
    assert set(report.deleted_files) == reused  # the race happened ...
    assert reused & mine
    assert all(store.exists(p) for p in mine)  # ... and the uploader healed it
    restored, _ = restore_backend(store, handle.manifest_path, tmp_path / "r")
    assert restored.table(SPEC).get((99,)) == {"n": 1, "i": 99}
    restored.close()
    backend.close()
    uploader.close()


def test_concurrent_gc_never_deletes_a_file_a_retained_checkpoint_references(
    tmp_path: Path,
) -> None:
    """GC runs in a loop beside checkpoints being uploaded and completed.

    The grace period is the time an upload may take from its first file to its
    manifest (production: 10 minutes). GC here reads the time from ``gc_now``, set
    when each checkpoint starts: an upload takes no time on GC's clock, so however
    slowly a busy machine runs it, the grace covers it (a fixed 0.3 s did not), while
    the files of earlier unretained checkpoints age as the loop goes on. Whether GC
    never deletes what a checkpoint references is then down to what it reads and in
    which order, not to scheduling.
    """
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    stop = threading.Event()
    deleted: list[str] = []
    failures: list[BaseException] = []
    grace = 0.2
    gc_now = [time.time()]

    def gc_loop() -> None:
        try:
            while not stop.is_set():
                report = apply_retention(
                    store, APP, retained=2, grace_seconds=grace, clock=lambda: gc_now[0]
                )
                deleted.extend(report.deleted_files)
        except BaseException as e:  # surfaced by the assertion below
            failures.append(e)

    gc = threading.Thread(target=gc_loop)
    gc.start()
    n = 0
    deadline = time.monotonic() + 120  # generous: only a machine that stalls needs it
    try:
        while (n < 10 or not deleted) and time.monotonic() < deadline and not failures:
            n += 1
            gc_now[0] = time.time() - 0.05  # file times may lag the clock by a tick
            t = backend.table(SPEC)
            for i in range(0, 600, 3):
                t.put((i + n % 3,), {"n": n})
            handle = uploader.upload(backend.snapshot_sync(n)).result(timeout=60)
            complete(store, n, {TASK: handle.manifest_path})
            for path in read_manifest(store, handle.manifest_path).shared_paths():
                assert store.exists(path), f"checkpoint {n} references deleted {path}"
    finally:
        stop.set()
        gc.join(timeout=60)
    assert not failures, failures
    assert deleted, f"GC deleted nothing in {n} checkpoints: the test did not exercise it"
    final = apply_retention(store, APP, retained=2, grace_seconds=0.3)
    assert final.retained == [n - 1, n]
    for m in (n - 1, n):
        restored, manifest = restore_backend(
            store, manifest_path(APP, TASK, f"chk-{m}", uploader.writer), tmp_path / f"r{m}"
        )
        assert manifest.checkpoint_id == m
        assert restored.table(SPEC).get((m % 3,)) == {"n": m}
        restored.close()
    backend.close()
    uploader.close()


class VanishingStore(FileStore):
    """Deletes ``vanish`` just before it is read: another GC run (a coordinator that
    took over) deleted it between this run's listing and its read."""

    def __init__(self, root: Path, vanish: str) -> None:
        super().__init__(root)
        self.vanish = vanish

    def get_bytes(self, path: str) -> bytes:
        if path == self.vanish:
            self.delete(path)
        return super().get_bytes(path)


def test_a_manifest_another_run_deleted_meanwhile_is_no_error(tmp_path: Path) -> None:
    """An in-flight checkpoint's manifest (3), listed, then deleted as garbage by a
    concurrent run: it references nothing any more, so this run collects the rest."""
    backend, uploader, garbage = two_checkpoints(FileStore(tmp_path / "store"), tmp_path)
    h3 = snapshot(backend, uploader, 3, rows=300)  # (in flight: no metadata)
    store = VanishingStore(tmp_path / "store", h3.manifest_path)
    report = apply_retention(
        store, APP, retained=1, grace_seconds=60, clock=lambda: time.time() + 120
    )
    assert report.errors == []
    assert set(garbage) <= set(report.deleted_files)
    backend.close()
    uploader.close()


def test_a_missing_manifest_of_a_retained_checkpoint_deletes_no_shared_file(tmp_path: Path) -> None:
    backend, uploader, garbage = two_checkpoints(FileStore(tmp_path / "store"), tmp_path)
    retained = read_metadata(FileStore(tmp_path / "store"), APP, 2).tasks[TASK].handle
    store = VanishingStore(tmp_path / "store", retained)
    report = apply_retention(
        store, APP, retained=1, grace_seconds=60, clock=lambda: time.time() + 120
    )
    assert report.errors == [f"manifest {retained} of a retained checkpoint is missing"]
    assert report.deleted_files == [] and set(garbage) <= set(store.list(f"{APP}/shared"))
    backend.close()
    uploader.close()


def test_two_incarnations_of_a_task_never_write_the_same_manifest(tmp_path: Path) -> None:
    """A zombie and the worker that adopted its task both snapshot checkpoint 1: each
    manifest names its writer, so neither replaces the other, and GC (which reads both
    forms, with and without the writer's id) collects the one no checkpoint names."""
    store = FileStore(tmp_path / "store")
    zombie, adopter = SnapshotUploader(store, APP, TASK), SnapshotUploader(store, APP, TASK)
    backend = RocksDBBackend(tmp_path / "task")
    mine = snapshot(backend, adopter, 1, rows=100)
    theirs = snapshot(backend, zombie, 1, rows=200)  # after: it would have replaced mine
    assert mine.manifest_path != theirs.manifest_path
    restored, _ = restore_backend(store, mine.manifest_path, tmp_path / "r")
    assert restored.table(SPEC).get((99,)) == {"n": 1, "i": 99}
    assert restored.table(SPEC).get((150,)) is None  # (the zombie's rows are not in it)
    restored.close()
    assert mine.manifest_path == manifest_path(APP, TASK, "chk-1", adopter.writer)
    assert (
        numbered_manifest(mine.manifest_path)
        == numbered_manifest(
            f"{APP}/tasks/{TASK}/chk-1.json"  # (as older versions named it)
        )
        == ("chk", 1)
    )
    complete(store, 1, {TASK: mine.manifest_path})
    complete(store, 2, {TASK: snapshot(backend, adopter, 2, rows=300).manifest_path})
    report = apply_retention(store, APP, retained=1, grace_seconds=60)
    assert sorted(report.deleted_manifests) == sorted([mine.manifest_path, theirs.manifest_path])
    backend.close()
    zombie.close()
    adopter.close()
