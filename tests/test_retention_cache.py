"""Incremental retention (issue 41): a pass reads only what is new since the last one,
and deletes exactly what a full scan deletes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kstream.checkpointstorage.base import ObjectExists
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import (
    manifest_path,
    metadata_path,
    savepoint_metadata_path,
    savepoint_path,
    shared_path,
)
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    read_metadata,
    write_metadata,
)
from kstream.checkpointstorage.savepoints import create_savepoint, delete_savepoint
from kstream.snapshots.retention import RetentionReport, apply_retention
from kstream.snapshots.retention_cache import RetentionCache
from kstream.snapshots.upload import FileEntry, SnapshotManifest, read_manifest

APP = "app"


class CountingStore(FileStore):
    """A file:// store that counts reads (``get_bytes``) by path."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: Counter[str] = Counter()

    def get_bytes(self, path: str) -> bytes:
        self.reads[path] += 1
        return super().get_bytes(path)

    def take_reads(self) -> Counter[str]:
        reads, self.reads = self.reads, Counter()
        return reads


def task(i: int) -> str:
    return f"stage1-{i}"


def upload(store: FileStore, task_id: str, n: int, files: list[str]) -> str:
    """Task ``task_id``'s chk-``n`` manifest naming shared files ``files`` (hashes), as an
    upload writes it: the files first, the manifest last."""
    entries = []
    for name in files:
        path = shared_path(APP, name)
        if not store.exists(path):
            store.put_bytes(path, name.encode())
        entries.append(FileEntry(name=f"{name}.sst", size=len(name), sha256=name, path=path))
    manifest = SnapshotManifest(APP, task_id, n, f"chk-{n}", 0, 1.0, n, ("t",), tuple(entries))
    mpath = manifest_path(APP, task_id, f"chk-{n}")
    store.put_bytes(mpath, manifest.to_json())
    return mpath


def complete(store: FileStore, n: int, handles: dict[str, str]) -> None:
    tasks = {t: TaskSnapshot(handle=h) for t, h in handles.items()}
    write_metadata(store, APP, CheckpointMetadata(n, 0, 1.0, 2.0, tasks))


def checkpoint(store: FileStore, n: int, tasks: int, *, completed: bool = True) -> list[str]:
    """Checkpoint ``n`` of ``tasks`` tasks: each task's manifest names a file every
    checkpoint shares (``base``), one it shares with the previous checkpoint (levels
    compacted every other checkpoint), one of its own, and one all tasks share at ``n``."""
    handles = {}
    for i in range(tasks):
        files = [f"base-{i}", f"level-{i}-{n // 2}", f"own-{i}-{n}", f"common-{n}"]
        handles[task(i)] = upload(store, task(i), n, files)
    if completed:
        complete(store, n, handles)
    return sorted(handles.values())


def test_a_pass_after_one_more_checkpoint_reads_only_that_checkpoints_metadata_and_manifests(
    tmp_path: Path,
) -> None:
    tasks, retained = 6, 3
    store = CountingStore(tmp_path / "store")
    cache = RetentionCache()
    for n in range(1, 5):
        checkpoint(store, n, tasks)
        apply_retention(store, APP, retained, grace_seconds=0.0, cache=cache)
    create_savepoint(store, APP, "sp", read_metadata(store, APP, 4))
    apply_retention(store, APP, retained, grace_seconds=0.0, cache=cache)
    store.take_reads()

    new = checkpoint(store, 5, tasks)
    store.take_reads()  # what writing the checkpoint read
    report = apply_retention(store, APP, retained, grace_seconds=0.0, cache=cache)

    # The new checkpoint's metadata, its manifests, once each, and the savepoint's metadata
    # (which tells whether its cached manifests still hold): 1 + tasks + 1 reads.
    assert store.take_reads() == Counter(
        [metadata_path(APP, 5), *new, savepoint_metadata_path(savepoint_path(APP, "sp"))]
    )
    assert report.retained == [3, 4, 5]
    assert report.deleted_metadata == [metadata_path(APP, 2)]
    assert report.deleted_manifests == sorted(
        manifest_path(APP, task(i), "chk-2") for i in range(6)
    )
    assert report.errors == []
    # Bounded: the retained checkpoints and the manifests still listed, nothing else.
    assert len(cache) == retained + retained * tasks + tasks

    # The same pass without the cache (a full scan) reads every retained checkpoint's
    # metadata and every remaining manifest: the cost this cache removes.
    apply_retention(store, APP, retained, grace_seconds=0.0)
    full = store.take_reads()
    assert sum(full.values()) == retained + retained * tasks + 1 + tasks


def test_manifests_of_a_checkpoint_in_flight_are_read_once(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    cache = RetentionCache()
    checkpoint(store, 1, 4)
    in_flight = checkpoint(store, 2, 4, completed=False)
    apply_retention(store, APP, 2, grace_seconds=0.0, cache=cache)
    assert {p for p in store.take_reads() if p in in_flight} == set(in_flight)

    complete(store, 2, {task(i): p for i, p in enumerate(in_flight)})
    store.take_reads()
    apply_retention(store, APP, 2, grace_seconds=0.0, cache=cache)
    assert store.take_reads() == Counter([metadata_path(APP, 2)])


def referenced(store: FileStore, report: RetentionReport) -> set[str]:
    """Every shared file the retained checkpoints and the savepoints name."""
    manifests = set()
    for n in report.retained:
        manifests |= {t.handle for t in read_metadata(store, APP, n).tasks.values()}
    manifests |= {p for p in store.list(f"{APP}/savepoints") if "/tasks/" in p}
    refs: set[str] = set()
    for p in manifests:
        refs |= read_manifest(store, p).shared_paths()
    return refs


def test_incremental_passes_delete_exactly_what_full_scans_delete(tmp_path: Path) -> None:
    """Two identical stores through the same history: one pass with a cache kept across
    checkpoints (replaced at a restart), one full scan each time."""
    full, incremental = FileStore(tmp_path / "full"), FileStore(tmp_path / "incremental")
    cache = RetentionCache()
    tasks, retained = 3, 2
    for n in range(1, 13):
        for store in (full, incremental):
            checkpoint(store, n, tasks, completed=n not in (4, 9))  # 4 and 9 aborted
            if n == 3:
                create_savepoint(store, APP, "kept", read_metadata(store, APP, 3))
            if n == 5:
                create_savepoint(store, APP, "sp", read_metadata(store, APP, 5))
            if n == 7:  # "sp" made again under the same name from another checkpoint
                delete_savepoint(store, savepoint_path(APP, "sp"))
                create_savepoint(store, APP, "sp", read_metadata(store, APP, 7))
            if n == 11:
                delete_savepoint(store, savepoint_path(APP, "kept"))
        if n == 8:
            cache = RetentionCache()  # the coordinator restarted: a full scan again
        a = apply_retention(full, APP, retained, grace_seconds=0.0)
        b = apply_retention(incremental, APP, retained, grace_seconds=0.0, cache=cache)
        assert (b.retained, b.errors) == (a.retained, [])
        assert b.deleted_metadata == a.deleted_metadata
        assert sorted(b.deleted_manifests) == sorted(a.deleted_manifests)
        assert sorted(b.deleted_files) == sorted(a.deleted_files)
        assert b.bytes_freed == a.bytes_freed
        assert set(incremental.list(APP)) == set(full.list(APP))
        # Nothing named is gone; everything no manifest names is.
        shared = set(incremental.list(f"{APP}/shared"))
        assert referenced(incremental, b) <= shared
        listed = {p for p in incremental.list(APP) if "/tasks/" in p}
        named = set().union(*(read_manifest(incremental, p).shared_paths() for p in listed))
        assert shared == named
    # Checkpoint 7's own files outlived its retention: the remade savepoint names them.
    assert {shared_path(APP, f"own-{i}-7") for i in range(tasks)} <= shared
    assert shared_path(APP, "own-0-5") not in shared
    assert shared_path(APP, "own-0-3") not in shared  # "kept" was deleted at 11


def test_a_savepoint_name_in_use_is_refused_before_its_manifests_are_overwritten(
    tmp_path: Path,
) -> None:
    """Retention caches a savepoint's manifests while its metadata is unchanged, so
    making one under a name in use must not rewrite that savepoint's manifests."""
    store = FileStore(tmp_path / "store")
    checkpoint(store, 1, 2)
    checkpoint(store, 2, 2)
    path = create_savepoint(store, APP, "sp", read_metadata(store, APP, 1))
    before = {p: store.get_bytes(p) for p in store.list(path)}

    with pytest.raises(ObjectExists) as refused:
        create_savepoint(store, APP, "sp", read_metadata(store, APP, 2))

    assert {p: store.get_bytes(p) for p in store.list(path)} == before
    assert str(refused.value) == (
        "savepoint app/savepoints/sp exists; choose another name or delete it first"
    )
