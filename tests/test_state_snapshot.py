"""Snapshots: incremental upload, exact restore, task-local reuse, corruption and fallback."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import manifest_path
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.snapshots import upload as snapshot_module
from kstream.snapshots.restore import (
    CorruptSnapshotError,
    read_blob,
    restore_backend,
    restore_state,
)
from kstream.snapshots.upload import FileEntry, SnapshotManifest, SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import StateResources

APP = "app"
TASK = "stage1-0"
SPECS = [TableSpec("counts"), TableSpec("lists"), TableSpec("raw", value_serde="bytes")]


class CountingStore(FileStore):
    """A FileStore that records uploads and downloads, and can fail a chosen write."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.uploaded: list[str] = []
        self.downloaded: list[str] = []
        self.fail_put_bytes_under: str | None = None

    def put_file(self, path: str, local: Path) -> None:
        self.uploaded.append(path)
        super().put_file(path, local)

    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if self.fail_put_bytes_under and path.startswith(self.fail_put_bytes_under):
            raise StoreError(f"injected failure writing {path}")
        super().put_bytes(path, data, exclusive=exclusive)

    def get_file(self, path: str, local: Path) -> None:
        self.downloaded.append(path)
        super().get_file(path, local)


def contents(backend: RocksDBBackend) -> dict[str, list[tuple[Any, Any]]]:
    return {s.name: list(backend.table(s).scan()) for s in SPECS}


def complete(store: CheckpointStore, checkpoint_id: int, handle: str) -> None:
    """What the coordinator does when every task acknowledged: write the metadata."""
    write_metadata(
        store,
        APP,
        CheckpointMetadata(checkpoint_id, 0, 1.0, 2.0, {TASK: TaskSnapshot(handle=handle)}),
    )


op = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 2), st.integers(0, 30), st.integers(0, 9)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(0, 30), st.just(0)),
    st.tuples(st.just("merge"), st.integers(0, 2), st.integers(0, 30), st.integers(1, 5)),
    st.tuples(st.just("snapshot"), st.just(0), st.just(0), st.just(0)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(op, max_size=80),
    cache=st.sampled_from([1, 4, 1000]),
    background=st.booleans(),
    retained=st.sampled_from([1, 2]),
)
def test_every_snapshot_restores_to_exactly_its_contents(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int, int, int]],
    cache: int,
    background: bool,
    retained: int,
) -> None:
    """Also with the RocksDB checkpoint created in the background, as a worker takes
    it: the writes after ``snapshot_sync`` returned are never in that snapshot."""
    root = tmp_path_factory.mktemp("run")
    store = FileStore(root / "store")
    resources = StateResources()
    others = set(threading.enumerate())  # e.g. other tests' (the process's resources)
    backend = RocksDBBackend(
        root / "task", cache_entries=cache, local_retained=retained, resources=resources
    )
    uploader = SnapshotUploader(store, APP, TASK)
    taken: list[tuple[str, dict[str, list[tuple[Any, Any]]]]] = []
    futures = []
    n = 0
    model: list[dict[Any, Any]] = [{} for _ in SPECS]  # what every read must return
    for kind, ti, k, v in [*ops, ("snapshot", 0, 0, 0)]:
        table = backend.table(SPECS[ti])
        key = (f"k{k % 7}", k)
        value: Any = v if ti == 0 else ([v] if ti == 1 else bytes([v]))
        if kind == "put":
            table.put(key, value)
            model[ti][key] = value
        elif kind == "delete":
            table.delete(key)
            model[ti].pop(key, None)
        elif kind == "merge":  # reducing / list-append state: read-modify-write
            old = table.get(key)
            assert old == model[ti].get(key)
            table.put(key, value if old is None else old + value)
            model[ti][key] = table.get(key)
        else:
            n += 1
            expected = contents(backend)  # flushes first; snapshot must match it
            assert expected == {
                s.name: sorted(m.items()) for s, m in zip(SPECS, model, strict=True)
            }
            snap = backend.snapshot_sync(n, background=background)
            futures.append(uploader.upload(snap, positions={"in-0": n}))
            taken.append((f"chk-{n}", expected))
    handles = [f.result(timeout=30) for f in futures]
    uploader.close()
    backend.close()
    resources.close()
    assert not any(
        t.name.startswith("rocksdb-checkpoint") for t in set(threading.enumerate()) - others
    )
    for i, (handle, (label, expected)) in enumerate(zip(handles, taken, strict=True)):
        assert handle.label == label
        restored, manifest = restore_backend(store, handle.manifest_path, root / f"restore-{i}")
        assert manifest.positions == {"in-0": i + 1}
        assert contents(restored) == expected
        restored.close()


def _fill(backend: RocksDBBackend, n: int, version: int) -> None:
    t = backend.table(SPECS[0])
    for i in range(n):
        t.put(("key", i), {"v": version, "pad": "x" * 40})


def test_second_snapshot_after_changing_one_percent_uploads_only_new_files(
    tmp_path: Path,
) -> None:
    store = CountingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    _fill(backend, 20_000, 1)
    first = uploader.upload(backend.snapshot_sync(1)).result(timeout=30)
    m1 = read_manifest(store, first.manifest_path)
    assert first.bytes_uploaded == first.bytes_total == m1.total_bytes
    store.uploaded.clear()
    t = backend.table(SPECS[0])
    for i in range(0, 20_000, 100):  # 1 % of the keys
        t.put(("key", i), {"v": 2, "pad": "y" * 40})
    second = uploader.upload(backend.snapshot_sync(2)).result(timeout=30)
    m2 = read_manifest(store, second.manifest_path)
    new_paths = m2.shared_paths() - m1.shared_paths()
    assert sorted(store.uploaded) == sorted(new_paths)
    new_bytes = sum(f.size for f in m2.files if f.path in new_paths)
    assert second.bytes_uploaded == new_bytes
    assert second.bytes_uploaded < 0.10 * second.bytes_total
    # The big SST of checkpoint 1 is reused, not uploaded again.
    biggest = max(m1.files, key=lambda f: f.size)
    assert biggest in m2.files
    uploader.close()
    backend.close()


class AskingStore(CountingStore):
    """Records which paths were asked about (exists) and touched."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.asked: list[str] = []
        self.touched: list[str] = []

    def exists(self, path: str) -> bool:
        self.asked.append(path)
        return super().exists(path)

    def touch(self, path: str) -> None:
        self.touched.append(path)
        super().touch(path)


def test_files_written_or_touched_within_retouch_s_are_not_asked_about_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AskingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    _fill(backend, 2_000, 1)
    m1 = read_manifest(store, uploader.upload(backend.snapshot_sync(1)).result(30).manifest_path)
    files1 = {f.path for f in m1.files}
    store.asked.clear()
    h2 = uploader.upload(backend.snapshot_sync(2)).result(30)  # nothing changed: same files
    assert {f.path for f in read_manifest(store, h2.manifest_path).files} == files1
    assert store.touched == [] and h2.files_uploaded == 0
    assert sorted(store.asked) == sorted(files1)  # once each, by the check after the manifest
    monkeypatch.setattr(snapshot_module, "RETOUCH_S", 0.0)  # as if a minute had passed
    store.asked.clear()
    h3 = uploader.upload(backend.snapshot_sync(3)).result(30)
    assert sorted(store.touched) == sorted(files1) and h3.files_uploaded == 0
    uploader.close()
    backend.close()


class PairedStore(AskingStore):
    """Once armed, each ``exists`` waits for a second one to be in flight at once: a
    caller asking about one file after another fails with BrokenBarrierError."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.pair: threading.Barrier | None = None

    def exists(self, path: str) -> bool:
        if self.pair is not None:
            self.pair.wait()
        return super().exists(path)


def test_the_check_after_the_manifest_asks_about_the_files_in_parallel(tmp_path: Path) -> None:
    # One request after another was half of a steady-state upload to S3: ~12 files each
    # snapshot, a round trip each (benchmarks/PROFILE.md, sixteenth round).
    store = PairedStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    _fill(backend, 2_000, 1)
    files1 = {
        f.path
        for f in read_manifest(
            store, uploader.upload_now(backend.snapshot_sync(1)).manifest_path
        ).files
    }
    assert len(files1) >= 4 and store.concurrency >= 2
    store.asked.clear()
    store.pair = threading.Barrier(2, timeout=10)
    h2 = uploader.upload_now(backend.snapshot_sync(2))  # nothing new: only the check asks
    assert sorted(store.asked) == sorted(files1) and h2.files_uploaded == 0
    uploader.close()
    backend.close()


def test_local_copy_is_reused_and_nothing_is_downloaded(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    _fill(backend, 2_000, 1)
    uploader = SnapshotUploader(store, APP, TASK)
    handle = uploader.upload(backend.snapshot_sync(1), positions={"p": 1}).result(timeout=30)
    expected = contents(backend)
    _fill(backend, 2_000, 2)  # changes after the snapshot are rolled back by the restore
    backend.close()
    restored, manifest, stats = restore_state(store, handle.manifest_path, tmp_path / "task")
    assert store.downloaded == []
    assert stats.files_downloaded == 0
    assert stats.files_reused == len(manifest.files)
    assert contents(restored) == expected
    restored.close()
    # Elsewhere (another worker) everything is downloaded, with the same result.
    other, _, stats2 = restore_state(store, handle.manifest_path, tmp_path / "other")
    assert stats2.files_reused == 0
    assert stats2.files_downloaded == len(manifest.files)
    assert contents(other) == expected
    other.close()
    uploader.close()


def test_a_tampered_local_copy_is_not_reused(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    _fill(backend, 500, 1)
    uploader = SnapshotUploader(store, APP, TASK)
    snap = backend.snapshot_sync(1)
    handle = uploader.upload_now(snap)
    expected = contents(backend)
    backend.close()
    sst = next(p for p in snap.directory.iterdir() if p.suffix == ".sst")
    data = bytearray(sst.read_bytes())
    data[len(data) // 2] ^= 0xFF
    sst.unlink()  # break the hard link: tamper with the local copy only
    sst.write_bytes(bytes(data))
    restored, _, stats = restore_state(store, handle.manifest_path, tmp_path / "task")
    assert store.downloaded == [f"{APP}/shared/" + _sha_of(handle.manifest_path, store, sst.name)]
    assert stats.files_downloaded == 1
    assert contents(restored) == expected
    restored.close()
    uploader.close()


def _sha_of(manifest_path: str, store: CheckpointStore, name: str) -> str:
    return next(f.sha256 for f in read_manifest(store, manifest_path).files if f.name == name)


def _two_checkpoints(tmp_path: Path) -> tuple[CountingStore, list[Any], list[dict[str, Any]]]:
    store = CountingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    uploader = SnapshotUploader(store, APP, TASK)
    handles, states = [], []
    for n in (1, 2):
        _fill(backend, 300 * n, n)
        states.append(contents(backend))
        handles.append(uploader.upload_now(backend.snapshot_sync(n), positions={"p": n}))
        complete(store, n, handles[-1].manifest_path)
    backend.close()
    uploader.close()
    return store, handles, states


def test_corrupt_sst_is_detected_and_named_and_the_task_never_falls_back_by_itself(
    tmp_path: Path,
) -> None:
    """A task reports the corrupt object; choosing an older checkpoint is the
    coordinator's, for every task at once (kstream.protocol.failover)."""
    store, handles, states = _two_checkpoints(tmp_path)
    m1 = read_manifest(store, handles[0].manifest_path)
    m2 = read_manifest(store, handles[1].manifest_path)
    only_in_2 = next(f for f in m2.files if f.name.endswith(".sst") and f not in m1.files)
    victim = Path(store.root, only_in_2.path)
    data = bytearray(victim.read_bytes())
    data[10] ^= 0x01
    victim.write_bytes(bytes(data))

    with pytest.raises(CorruptSnapshotError) as err:
        restore_state(store, handles[1].manifest_path, tmp_path / "fresh")
    message = str(err.value)
    assert only_in_2.name in message and "chk-2" in message and "corrupt" in message
    assert err.value.file == only_in_2.name
    assert err.value.object == f"{store.url}/{only_in_2.path}"
    assert not (tmp_path / "fresh" / "db").exists()  # no half-built DB left behind
    assert store.downloaded.count(only_in_2.path) == 1  # no other checkpoint was tried
    assert not any("chk-1" in p for p in store.downloaded)

    # The older checkpoint, when the coordinator chooses it, restores exactly.
    restored, manifest, _ = restore_state(store, handles[0].manifest_path, tmp_path / "fresh")
    assert (manifest.checkpoint_id, manifest.positions) == (1, {"p": 1})
    assert contents(restored) == states[0]
    restored.close()


def test_a_missing_file_is_reported_naming_the_object(tmp_path: Path) -> None:
    store, handles, _ = _two_checkpoints(tmp_path)
    lost = next(
        f for f in read_manifest(store, handles[0].manifest_path).files if f.name.endswith(".sst")
    )
    store.delete(lost.path)  # checkpoint 1 (the oldest) loses an SST
    with pytest.raises(CorruptSnapshotError, match="missing from the store") as err:
        restore_backend(store, handles[0].manifest_path, tmp_path / "fresh")
    assert err.value.object == f"{store.url}/{lost.path}"


def test_half_written_checkpoint_is_never_taken_as_complete(tmp_path: Path) -> None:
    store, handles, states = _two_checkpoints(tmp_path)
    backend = RocksDBBackend(tmp_path / "task")
    _fill(backend, 900, 3)
    uploader = SnapshotUploader(store, APP, TASK)
    # The upload of checkpoint 3 dies after its files, before its manifest.
    store.fail_put_bytes_under = f"{APP}/tasks/"
    with pytest.raises(StoreError, match="injected"):
        uploader.upload(backend.snapshot_sync(3)).result(timeout=30)
    store.fail_put_bytes_under = None
    # A partially written object (temp file of a crashed writer) is not an object.
    Path(store.root, APP, "tasks", TASK, ".tmp-chk-3.json-dead").write_text("{")
    assert store.list(f"{APP}/tasks/{TASK}") == [handles[0].manifest_path, handles[1].manifest_path]
    # There is no manifest, so checkpoint 3 cannot be restored, and the coordinator never
    # completed it: the latest completed checkpoint is still 2.
    with pytest.raises(CorruptSnapshotError, match="is missing"):
        restore_backend(store, manifest_path(APP, TASK, "chk-3", uploader.writer), tmp_path / "x")
    restored, manifest = restore_backend(store, handles[1].manifest_path, tmp_path / "y")
    assert manifest.checkpoint_id == 2
    assert contents(restored) == states[1]
    restored.close()
    backend.close()
    uploader.close()


def test_blobs_and_savepoint_labels(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task")
    _fill(backend, 10, 1)
    uploader = SnapshotUploader(store, APP, TASK)
    buffer = json.dumps([{"epoch": 7, "records": ["a", "b"]}]).encode()
    handle = uploader.upload_now(
        backend.snapshot_sync(0, label="final"), blobs={"sink-buffer": buffer}, attempt=3
    )
    assert handle.manifest_path == f"{APP}/tasks/{TASK}/final.json"
    manifest = read_manifest(store, handle.manifest_path)
    assert (manifest.label, manifest.attempt) == ("final", 3)
    assert read_blob(store, manifest, "sink-buffer", handle.manifest_path) == buffer
    Path(store.root, manifest.blobs["sink-buffer"].path).write_bytes(b"tampered")
    with pytest.raises(CorruptSnapshotError, match="sink-buffer"):
        read_blob(store, manifest, "sink-buffer", handle.manifest_path)
    backend.close()
    uploader.close()


def test_local_snapshots_are_pruned_only_after_upload(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    backend = RocksDBBackend(tmp_path / "task", local_retained=2)
    uploader = SnapshotUploader(store, APP, TASK)
    local = tmp_path / "task" / "snapshots"

    def dirs() -> list[str]:
        return sorted(d.name for d in local.iterdir() if d.is_dir())

    pending = [backend.snapshot_sync(n) for n in (1, 2, 3)]  # none uploaded yet
    assert dirs() == ["chk-1", "chk-2", "chk-3"]
    uploader.upload_now(pending[0])
    uploader.upload_now(pending[1])
    backend.snapshot_sync(4)  # keeps chk-2 (newest uploaded), chk-3 (in flight) and chk-4
    assert dirs() == ["chk-2", "chk-3", "chk-4"]
    uploader.upload_now(pending[2])
    backend.snapshot_sync(5)
    assert dirs() == ["chk-3", "chk-4", "chk-5"]
    backend.close()
    uploader.close()


class UnreachableStore(CountingStore):
    """Every read fails as an unreachable object store's does (no FileNotFoundError cause)."""

    def get_file(self, path: str, local: Path) -> None:
        raise StoreError(f"downloading {path} failed: connection refused")


def test_an_unreachable_store_is_not_taken_for_a_corrupt_checkpoint(tmp_path: Path) -> None:
    store, handles, _ = _two_checkpoints(tmp_path)
    down = UnreachableStore(store.root)
    with pytest.raises(StoreError, match="connection refused") as err:
        restore_state(down, handles[1].manifest_path, tmp_path / "fresh")
    # Not a corrupt checkpoint: the store being down says nothing about checkpoint 2.
    assert not isinstance(err.value, CorruptSnapshotError)
    assert not (tmp_path / "fresh" / "db").exists()


def test_a_restore_downloads_in_parallel_and_logs_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, handles, states = _two_checkpoints(tmp_path)
    store.concurrency = 3
    caplog.set_level("INFO", logger="kstream.snapshots.restore")
    restored, _, stats = restore_state(store, handles[1].manifest_path, tmp_path / "fresh")
    assert contents(restored) == states[1]
    restored.close()
    files = read_manifest(store, handles[1].manifest_path).files
    assert stats.files_downloaded == len(files)
    assert sorted(store.downloaded) == sorted(f.path for f in files)
    total = sum(f.size for f in files)
    assert f"downloading {len(files)} files ({total} bytes), 0 reused locally" in caplog.text
    assert stats.bytes_downloaded == total


def test_the_manifest_carries_the_input_watermarks_and_reads_older_manifests() -> None:
    marks = [["in", 0, "", 900], ["app.stage0.repartition", 1, "stage0-1", 700]]
    m = SnapshotManifest("app", "stage0-0", 3, "chk-3", 1, 1.0, 7, (), (), watermarks=marks)
    assert SnapshotManifest.from_json(m.to_json()).watermarks == marks
    older = json.loads(m.to_json())
    del older["watermarks"]  # written before the watermarks were kept in the manifest
    assert SnapshotManifest.from_json(json.dumps(older).encode()).watermarks is None


def test_a_manifest_reads_back_equal_with_files_blobs_and_many_upstreams() -> None:
    ups = {f"stage0-{u}": 1000 + u for u in range(1024)}  # behind 1 024 upstream tasks
    m = SnapshotManifest(
        "app", "stage1-3", 4, "chk-4", 0, 1.0, 9, ("t",),
        (FileEntry("000009.sst", 10, "a" * 64, "shared/aa"),
         FileEntry("deltas/000001.delta", 5, "b" * 64, "shared/bb")),
        positions={"app.stage0.repartition": {"3": ups}},
        blobs={"sink": FileEntry("sink", 3, "c" * 64, "shared/cc")},
        watermarks=[["app.stage0.repartition", 3, up, 700] for up in ups],
    )  # fmt: skip
    data = m.to_json()
    assert SnapshotManifest.from_json(data) == m
    assert json.loads(data)["version"] == 2  # a delta file: older readers refuse it
