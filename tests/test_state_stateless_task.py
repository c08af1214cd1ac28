"""A task that never writes state opens no RocksDB: its snapshots are empty (a manifest
with no files), its restore opens nothing, and its first write opens the DB, whose next
snapshot is a full one. At 1024 partitions half a worker's tasks are a stateless
stage's, and opening their DBs was most of a worker's start (benchmarks/SCALING.md)."""

from __future__ import annotations

from pathlib import Path

from kstream.checkpointstorage.file import FileStore
from kstream.rescale.savepoint import _Restored
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import StateResources

OWN = (TableSpec("task.firing"), TableSpec("task.watermarks"))  # every task's own tables
COUNTS = TableSpec("counts")


def test_a_task_without_state_snapshots_and_restores_without_rocksdb(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    resources = StateResources()
    backend = RocksDBBackend(tmp_path / "task", resources=resources)
    uploader = SnapshotUploader(store, "app", "stage0-0")
    try:
        for spec in OWN:
            assert dict(backend.table(spec).scan()) == {}  # read, never written
        snaps = [backend.snapshot_sync(n, background=True, deltas=True) for n in (1, 2)]
        handles = [uploader.upload_now(s, positions={"in:0": 10 * n}) for n, s in enumerate(snaps)]
        assert not backend.opened and not (tmp_path / "task" / "db" / "CURRENT").exists()
        assert list(snaps[1].directory.iterdir()) == []
        manifest = read_manifest(store, handles[1].manifest_path)
        assert (manifest.files, manifest.tables, manifest.positions) == ((), (), {"in:0": 10})
    finally:
        backend.close()

    restored, _ = restore_backend(store, handles[1].manifest_path, tmp_path / "elsewhere")
    try:
        assert not restored.opened and restored.stored_tables() == []
        assert dict(restored.table(OWN[1]).scan()) == {}
        restored.table(COUNTS).put(("k",), 3)  # the first write opens the DB
        assert restored.opened
        again = uploader.upload_now(restored.snapshot_sync(3, deltas=True))
        assert not read_manifest(store, again.manifest_path).deltas()  # a full one: a base
    finally:
        restored.close()
        uploader.close()
        resources.close()
    back, _ = restore_backend(store, again.manifest_path, tmp_path / "third")
    assert back.table(COUNTS).get(("k",)) == 3 and back.stored_tables() == ["counts"]
    back.close()


def test_a_savepoint_rescale_reads_an_old_task_without_state_as_empty(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, "app", "stage0-0")
    handle = uploader.upload_now(backend.snapshot_sync(4))
    uploader.close()
    backend.close()
    restored, _ = restore_backend(store, handle.manifest_path, tmp_path / "old")
    tables = restored.stored_tables()
    restored.close()
    old = _Restored("stage0-0", tmp_path / "old", tables)
    assert old.table_names() == [] and list(old.raw_rows("task.watermarks")) == []
    old.close()
