"""Standby copies (kstream.snapshots.standby, kstream.worker.standbys): the wanted tasks'
latest completed snapshots on local disk, incrementally, and a restore from them that
downloads nothing."""

from __future__ import annotations

import time
from pathlib import Path

from kstream.checkpointstorage.base import CheckpointStore
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import numbered_manifest, task_prefix
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.protocol.messages import CheckpointCompleted, Resume
from kstream.snapshots.restore import restore_state
from kstream.snapshots.standby import StandbyCopies
from kstream.snapshots.upload import SnapshotManifest, SnapshotUploader, read_manifest, sha256_file
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.worker.standbys import Standbys

APP = "app"
TASK = "stage1-0"
SPEC = TableSpec("counts")


class CountingStore(FileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.downloaded: list[str] = []

    def get_file(self, path: str, local: Path) -> None:
        self.downloaded.append(path)
        super().get_file(path, local)


class Owner:
    """The task's owner elsewhere: its state, snapshots and the coordinator's metadata."""

    def __init__(self, store: CheckpointStore, root: Path) -> None:
        self.store = store
        self.backend = RocksDBBackend(root / TASK)
        self.uploader = SnapshotUploader(store, APP, TASK)

    def put(self, keys: range, version: int) -> None:
        t = self.backend.table(SPEC)
        for i in keys:
            t.put(("key", i), {"v": version, "pad": "x" * 40})

    def checkpoint(self, n: int) -> SnapshotManifest:
        handle = self.uploader.upload(self.backend.snapshot_sync(n)).result(timeout=30)
        snap = TaskSnapshot(handle=handle.manifest_path)
        write_metadata(self.store, APP, CheckpointMetadata(n, 0, 1.0, 2.0, {TASK: snap}))
        return read_manifest(self.store, handle.manifest_path)

    def close(self) -> None:
        self.uploader.close()
        self.backend.close()


def local_files(task_dir: Path) -> dict[str, dict[str, str]]:
    """label -> {file name: sha256} of every snapshot directory of the task."""
    root = task_dir / "snapshots"
    return {
        d.name: {str(f.relative_to(d)): sha256_file(f) for f in sorted(d.rglob("*")) if f.is_file()}
        for d in sorted(root.iterdir())
        if d.is_dir()
    }


def files_of(m: SnapshotManifest) -> dict[str, str]:
    return {e.name: e.sha256 for e in m.files}


def copied_once(
    tmp_path: Path, keys: int
) -> tuple[CountingStore, Owner, StandbyCopies, SnapshotManifest]:
    """An owner's checkpoint 1 of ``keys`` keys, and standby copies that copied it."""
    store = CountingStore(tmp_path / "store")
    owner = Owner(store, tmp_path / "owner")
    copies = StandbyCopies(store, APP, tmp_path / "standby", bandwidth=None)
    copies.want({TASK})
    owner.put(range(keys), 1)
    m1 = owner.checkpoint(1)
    copies.completed(1)
    copies.refresh()
    return store, owner, copies, m1


def test_copies_follow_completed_checkpoints_incrementally_and_a_restore_downloads_nothing(
    tmp_path: Path,
) -> None:
    store, owner, copies, m1 = copied_once(tmp_path, 20_000)
    task_dir = tmp_path / "standby" / TASK
    assert local_files(task_dir) == {m1.label: files_of(m1)}
    assert sorted(store.downloaded) == sorted(e.path for e in m1.files)
    assert copies.stats.bytes_downloaded == m1.total_bytes

    # 1 % of the keys change: only the new files are downloaded; the old copy goes.
    owner.put(range(0, 20_000, 100), 2)
    m2 = owner.checkpoint(2)
    store.downloaded.clear()
    copies.completed(2)
    copies.refresh()
    assert local_files(task_dir) == {m2.label: files_of(m2)}
    new = {e.path for e in m2.files} - {e.path for e in m1.files}
    assert sorted(store.downloaded) == sorted(new)
    assert sum(e.size for e in m2.files if e.path in new) < 0.2 * m2.total_bytes
    assert copies.stats.copies == 2 and copies.stats.deleted == 1

    # The task moves here: its restore reuses every file and downloads 0 bytes.
    store.downloaded.clear()
    copies.claim([TASK])
    restored, manifest, stats = restore_state(store, m2_path(store, m2), task_dir)
    assert (stats.files_downloaded, stats.bytes_downloaded) == (0, 0)
    assert stats.files_reused == len(manifest.files) and store.downloaded == []
    t = restored.table(SPEC)
    assert t.get(("key", 0)) == {"v": 2, "pad": "x" * 40}
    assert t.get(("key", 1)) == {"v": 1, "pad": "x" * 40}
    assert sum(1 for _ in t.scan()) == 20_000
    restored.close()
    owner.close()


def test_a_copy_takes_no_file_of_the_previous_copy_whose_content_changed_under_its_name(
    tmp_path: Path,
) -> None:
    """``CURRENT`` names the DB's MANIFEST: the same name and size (16 bytes) in every
    snapshot, other content once the DB was opened again (a restore; a task that moved
    away and back). The copy after such a snapshot must not take the previous copy's.
    CI at e2766f1: a hand-over moved a task, the next copy took the old ``CURRENT`` by name
    and size, and the moved task's restore found it wrong and downloaded it."""
    store, owner, copies, m1 = copied_once(tmp_path, 1_000)
    owner.backend.close()
    owner.backend = RocksDBBackend(tmp_path / "owner" / TASK)  # opened again: a new MANIFEST
    owner.put(range(0, 1_000, 10), 2)
    m2 = owner.checkpoint(2)
    current = [next(e for e in m.files if e.name == "CURRENT") for m in (m1, m2)]
    assert current[0].size == current[1].size and current[0].sha256 != current[1].sha256
    copies.completed(2)
    copies.refresh()
    task_dir = tmp_path / "standby" / TASK
    assert local_files(task_dir) == {m2.label: files_of(m2)}
    store.downloaded.clear()
    copies.claim([TASK])
    restored, _, stats = restore_state(store, m2_path(store, m2), task_dir)
    assert (stats.files_downloaded, stats.bytes_downloaded, store.downloaded) == (0, 0, [])
    assert restored.table(SPEC).get(("key", 10)) == {"v": 2, "pad": "x" * 40}
    restored.close()
    owner.close()


def m2_path(store: CheckpointStore, m: SnapshotManifest) -> str:
    """The stored path of manifest ``m`` (it names its writer: layout.manifest_path)."""
    (path,) = [
        p
        for p in store.list(task_prefix(m.app_id, m.task_id))
        if numbered_manifest(p) == ("chk", m.checkpoint_id)
    ]
    return path


def test_copies_of_tasks_no_longer_wanted_are_deleted_and_claimed_tasks_left_alone(
    tmp_path: Path,
) -> None:
    store = CountingStore(tmp_path / "store")
    owner = Owner(store, tmp_path / "owner")
    owner.put(range(1_000), 1)
    m1 = owner.checkpoint(1)
    copies = StandbyCopies(store, APP, tmp_path / "standby", bandwidth=None)
    task_dir = tmp_path / "standby" / TASK
    # Claimed (restored here): nothing is fetched for it, whatever is wanted.
    copies.claim([TASK])
    copies.want({TASK})
    copies.completed(1)
    copies.refresh()
    assert store.downloaded == [] and not task_dir.exists()
    copies.claim([])  # moved away: copied at the next refresh
    copies.refresh()
    assert local_files(task_dir) == {m1.label: files_of(m1)}
    # No longer wanted: its copy (and only the copy) is deleted.
    (task_dir / "snapshots" / "chk-0").mkdir()  # the task's own earlier snapshot
    copies.want(set())
    copies.refresh()
    assert sorted(p.name for p in (task_dir / "snapshots").iterdir()) == ["chk-0"]
    assert [p.name for p in task_dir.iterdir()] == ["snapshots"]  # no staging left
    owner.close()


def test_on_its_thread_a_completed_checkpoint_is_copied_without_waiting(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    owner = Owner(store, tmp_path / "owner")
    owner.put(range(1_000), 1)
    m1 = owner.checkpoint(1)
    copies = StandbyCopies(store, APP, tmp_path / "standby", bandwidth=None)
    copies.start()
    try:
        copies.want({TASK})
        copies.completed(1)
        deadline = time.monotonic() + 30
        while copies.stats.copies < 1:
            assert time.monotonic() < deadline, "no copy within 30 s"
            time.sleep(0.01)
        assert local_files(tmp_path / "standby" / TASK) == {m1.label: files_of(m1)}
    finally:
        copies.close()
        owner.close()


class Recorded:
    def __init__(self) -> None:
        self.wanted: list[set[str]] = []
        self.completed_ids: list[int] = []

    def want(self, tasks: frozenset[str]) -> None:
        self.wanted.append(set(tasks))

    def completed(self, n: int) -> None:
        self.completed_ids.append(n)


def test_the_feed_wants_what_the_member_would_get_if_another_left() -> None:
    class Spec:
        def __init__(self, task_id: str, p: int) -> None:
            self.task_id = task_id
            self.inputs = [type("I", (), {"topic": "in", "partition": p})()]

    plan = type("P", (), {"tasks": [Spec(f"s-{p}", p) for p in range(4)]})()
    rec = Recorded()
    feed = Standbys(rec, plan, 1, lambda: "m-b")  # type: ignore[arg-type]
    feed.observe(Resume(3, {"s-0": "m-a", "s-1": "m-a", "s-2": "m-b", "s-3": "m-b"}, 0, 2))
    assert rec.wanted == []  # one part of two
    feed.observe(Resume(3, {"s-0": "m-a", "s-1": "m-a", "s-2": "m-b", "s-3": "m-b"}, 1, 2))
    assert rec.wanted == [{"s-0", "s-1"}]
    feed.observe(CheckpointCompleted(7, 3))
    assert rec.completed_ids == [7]
    feed.observe(Resume(4, {"s-0": "m-x", "s-1": "m-x"}))  # not ours (an old incarnation)
    assert rec.wanted == [{"s-0", "s-1"}]
