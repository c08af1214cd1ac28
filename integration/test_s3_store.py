"""The object-store checkpoint store against a real S3 server (S3Proxy, started by kstream's
own launcher): the store contract, snapshots and restores through it, an outage."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from integration.s3server import S3Server
from kstream.checkpointstorage.base import ObjectExists, ObjectNotFound, StoreError
from kstream.checkpointstorage.metadata import (
    CheckpointMetadata,
    TaskSnapshot,
    known_completed,
    latest_completed,
    write_metadata,
)
from kstream.checkpointstorage.objectstore import ObjectStore
from kstream.checkpointstorage.urls import open_store
from kstream.snapshots.restore import CorruptSnapshotError, restore_state
from kstream.snapshots.retention import apply_retention
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend

pytestmark = pytest.mark.integration

SPEC = TableSpec("counts")


def _store(s3: S3Server, **extra: str) -> ObjectStore:
    store = open_store(s3.fresh_url(), s3.options(**extra))
    assert isinstance(store, ObjectStore)
    return store


def test_the_store_contract_on_s3(s3_server: S3Server, tmp_path: Path) -> None:
    store = _store(s3_server)
    prefix = store.url.removeprefix("s3://kstream/")
    store.put_bytes("app/a", b"one")
    assert store.get_bytes("app/a") == b"one"
    assert store.exists("app/a") and not store.exists("app/b")
    assert store.size("app/a") == 3
    assert abs(store.mtime("app/a") - time.time()) < 120
    # The object is really in the server's bucket, under the URL's prefix.
    assert (s3_server.bucket_dir / prefix / "app" / "a").read_bytes() == b"one"
    # Exclusive creation refuses an existing object and leaves it unchanged.
    with pytest.raises(ObjectExists):
        store.put_bytes("app/a", b"two", exclusive=True)
    assert store.get_bytes("app/a") == b"one"
    store.put_bytes("app/c", b"three", exclusive=True)
    # Missing objects: StoreError caused by FileNotFoundError (what a restore tells apart).
    with pytest.raises(StoreError) as err:
        store.get_bytes("app/missing")
    assert isinstance(err.value, ObjectNotFound)  # (as the file store's: GC tells it apart)
    assert isinstance(err.value.__cause__, FileNotFoundError)
    with pytest.raises(StoreError) as err:
        store.get_file("app/missing", tmp_path / "x")
    assert isinstance(err.value.__cause__, FileNotFoundError)
    assert not (tmp_path / "x").exists()
    # A file above the part size goes up in parts and comes back byte for byte.
    big = tmp_path / "big"
    big.write_bytes(os.urandom(11 * 1024 * 1024 + 17))
    small_parts = _store(s3_server, part_size=str(5 * 1024 * 1024))
    small_parts.put_file("app/big", big)
    small_parts.get_file("app/big", tmp_path / "big2")
    assert (tmp_path / "big2").read_bytes() == big.read_bytes()
    assert small_parts.size("app/big") == big.stat().st_size
    assert store.list("app") == ["app/a", "app/c"]
    store.delete("app/a")
    store.delete("app/a")  # absent: not an error
    assert store.list("app") == ["app/c"]


def test_snapshots_restore_and_gc_through_s3(s3_server: S3Server, tmp_path: Path) -> None:
    store = _store(s3_server, concurrency="4")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, "app", "s-0")
    states = []
    for n in (1, 2, 3):
        table = backend.table(SPEC)
        for i in range(2000):
            table.put(("k", i), i * n)
        states.append(sorted(backend.table(SPEC).scan()))
        h = uploader.upload_now(backend.snapshot_sync(n), positions={"in:0": n * 10})
        meta = CheckpointMetadata(n, 0, 1.0, 2.0, {"s-0": TaskSnapshot(h.manifest_path)})
        write_metadata(store, "app", meta)
    backend.close()
    uploader.close()
    # Found without listing (the index), restored on a fresh machine (no local state).
    assert known_completed(store, "app") == [1, 2, 3]
    latest = latest_completed(store, "app")
    assert latest is not None and latest.checkpoint_id == 3
    restored, manifest, stats = restore_state(store, latest.tasks["s-0"].handle, tmp_path / "fresh")
    assert sorted(restored.table(SPEC).scan()) == states[2]
    assert manifest.positions == {"in:0": 30} and stats.files_downloaded > 0
    restored.close()
    # Retention keeps 2 checkpoints: checkpoint 1's metadata goes, 2 and 3 still restore.
    report = apply_retention(store, "app", retained=2, grace_seconds=0.0)
    assert report.retained == [2, 3] and not report.errors
    assert known_completed(store, "app") == [2, 3]
    # A missing SST of checkpoint 3 is reported as such, naming the object.
    m3 = read_manifest(store, latest.tasks["s-0"].handle)
    sst = next(f for f in m3.files if f.name.endswith(".sst"))
    store.delete(sst.path)
    with pytest.raises(CorruptSnapshotError, match="missing from the store") as err:
        restore_state(store, latest.tasks["s-0"].handle, tmp_path / "fresh2")
    assert err.value.file == sst.name and sst.path in str(err.value)


def test_a_stopped_server_fails_operations_within_the_retry_bound_then_recovers(
    s3_server: S3Server,
) -> None:
    store = _store(s3_server, max_retries="2", retry_timeout="3", init_backoff="0.05")
    store.put_bytes("app/x", b"x")
    s3_server.stop()
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError) as err:
            store.put_bytes("app/y", b"y")
        assert time.monotonic() - t0 < 20
        assert not isinstance(err.value.__cause__, FileNotFoundError)  # down, not missing
        with pytest.raises(StoreError):
            store.exists("app/x")  # unknown while down: never "absent"
    finally:
        s3_server.restart()
    store.put_bytes("app/y", b"y")
    assert store.get_bytes("app/x") == b"x"
