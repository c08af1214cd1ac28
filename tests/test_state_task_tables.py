"""The task's own tables on RocksDB (``task.watermarks``, ``task.firing``): a column
family only once written and no memtable Bloom filter, so an idle task's DB holds no
column family it never wrote (issue 41: RSS per idle task <= 1 MB at 256 tasks)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from kstream.checkpointstorage.file import FileStore
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import StateResources

FIRING = TableSpec("task.firing")
COUNTS = TableSpec("counts")


def test_a_task_table_gets_its_column_family_when_first_written(tmp_path: Path) -> None:
    backend = RocksDBBackend(tmp_path / "t")
    table = backend.table(FIRING)
    assert backend.stored_tables() == []
    assert table.get(("target",)) is None
    assert list(table.scan()) == []
    table.delete_range(("a",), ("z",))  # nothing in RocksDB to delete
    assert table.purge_expired() == 0
    backend.snapshot_sync(1)
    assert backend.stored_tables() == []  # reads, deletions and snapshots make none
    table.put(("target",), 42)
    assert table.get(("target",)) == 42
    assert backend.stored_tables() == []  # still in the write cache
    assert table.flush() == 1
    assert backend.stored_tables() == ["task.firing"]
    assert list(table.scan()) == [(("target",), 42)]
    backend.close()
    again = RocksDBBackend(tmp_path / "t")
    assert again.stored_tables() == ["task.firing"]
    assert again.table(FIRING).get(("target",)) == 42
    again.close()


def test_other_tables_get_their_column_family_when_opened(tmp_path: Path) -> None:
    backend = RocksDBBackend(tmp_path / "t")
    backend.table(COUNTS)
    backend.table(TableSpec("stage1.window0.meta"))
    assert backend.stored_tables() == ["counts", "stage1.window0.meta"]
    backend.close()


def test_a_task_table_written_between_snapshots_is_in_the_next_one(tmp_path: Path) -> None:
    """Written into a delta only (never flushed), in a background full snapshot, and
    range-deleted: each snapshot restores to exactly what the table held, and its
    manifest names the table once it holds something."""
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "t")
    uploader = SnapshotUploader(store, "app", "stage0-0")
    firing, counts = backend.table(FIRING), backend.table(COUNTS)
    counts.put(("k",), 1)
    first = uploader.upload_now(backend.snapshot_sync(1, deltas=True))  # the base
    firing.put(("target",), 7)
    delta = uploader.upload_now(backend.snapshot_sync(2, deltas=True))
    firing.delete_range(("a",), ("z",))
    counts.put(("k",), 2)
    third = uploader.upload_now(backend.snapshot_sync(3, background=True))
    third_manifest = read_manifest(store, third.manifest_path)
    backend.close()
    assert read_manifest(store, first.manifest_path).tables == ("counts",)
    delta_manifest = read_manifest(store, delta.manifest_path)
    assert [d.name for d in delta_manifest.deltas()] == ["deltas/000001.kvd"]
    assert delta_manifest.tables == ("counts", "task.firing")
    assert third_manifest.tables == ("counts", "task.firing")
    expected = [
        ([], [(("k",), 1)]),
        ([(("target",), 7)], [(("k",), 1)]),
        ([], [(("k",), 2)]),
    ]
    for i, handle in enumerate((first, delta, third)):
        restored, _ = restore_backend(store, handle.manifest_path, tmp_path / f"r{i}")
        got = (list(restored.table(FIRING).scan()), list(restored.table(COUNTS).scan()))
        assert got == expected[i], i
        restored.close()


def test_a_background_snapshot_writes_a_new_task_table(tmp_path: Path) -> None:
    backend = RocksDBBackend(tmp_path / "t")
    firing = backend.table(FIRING)
    firing.put(("target",), 3)
    snap = backend.snapshot_sync(1, background=True)
    assert firing.get(("target",)) == 3  # readable while the thread writes it
    snap.wait_ready()
    backend.close()
    copy = tmp_path / "copy"
    (copy / "db").parent.mkdir(parents=True, exist_ok=True)
    snap.directory.rename(copy / "db")
    restored = RocksDBBackend(copy)
    assert restored.table(FIRING).get(("target",)) == 3
    restored.close()


def test_task_tables_charge_no_memtable_filter_to_the_budget(tmp_path: Path) -> None:
    """A data table's memtable comes with a 164 KiB Bloom filter, charged whole to the
    worker's memtable budget as soon as the column family exists; a task table's
    memtable with no filter is charged its first 2 KiB block only."""
    resources = StateResources(64 << 20)
    backend = RocksDBBackend(tmp_path / "t", resources=resources)
    try:
        usage = [resources.write_buffers.get_usage()]
        for spec in (FIRING, TableSpec("task.watermarks"), COUNTS):
            backend.table(spec).put(("k",), 1)
            backend.flush()
            usage.append(resources.write_buffers.get_usage())
        grown = [b - a for a, b in pairwise(usage)]
        assert grown[0] < 16 << 10 and grown[1] < 16 << 10, grown
        assert grown[2] > 160 << 10, grown
    finally:
        backend.close()
        resources.close()
