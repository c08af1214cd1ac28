"""What a worker's RocksDB instances share (kstream.state.rocksdb_resources): one memtable
budget and one block cache for every task's DB, a fixed number of checkpoint threads
however many tasks snapshot, and an idle task's DB costing well under 1 MB of memory
(issue 41: RSS per idle task <= 1 MB at 256 tasks per worker)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from kstream.state.base import TableSpec
from kstream.state.localsnapshot import LocalSnapshots
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import CHECKPOINT_THREADS, StateResources

SPEC = TableSpec("counts")


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def _new_threads(others: set[threading.Thread], prefix: str) -> list[threading.Thread]:
    """Threads named ``prefix...`` not among ``others`` (other tests' may run on)."""
    return [t for t in set(threading.enumerate()) - others if t.name.startswith(prefix)]


def _fill(backend: RocksDBBackend, n: int, tag: str) -> None:
    table = backend.table(SPEC)
    for i in range(n):
        table.put((f"{tag}-{i}",), i)
    backend.flush()  # the write cache into RocksDB's memtable


def test_every_db_s_memtables_count_against_the_one_budget(tmp_path: Path) -> None:
    resources = StateResources(64 << 20)
    a = RocksDBBackend(tmp_path / "a", resources=resources)
    b = RocksDBBackend(tmp_path / "b", resources=resources)
    try:
        before = resources.write_buffers.get_usage()
        _fill(a, 5_000, "a")
        after_a = resources.write_buffers.get_usage()
        _fill(b, 5_000, "b")
        after_b = resources.write_buffers.get_usage()
        assert before < after_a < after_b  # b's memtable is charged to a's budget too
        assert resources.write_buffers.get_buffer_size() == 32 << 20  # half of the memory
        # ... and the memtables are charged to the block cache: one bound for both.
        assert resources.cache.get_usage() >= after_b
    finally:
        a.close()
        b.close()
        resources.close()


def test_idle_tasks_hold_a_small_part_of_the_memtable_budget(tmp_path: Path) -> None:
    """64 tasks that wrote a few keys each: ~10 MiB of memtables charged (a 160 KiB
    filter and a 256 KiB block taken as used). With RocksDB's 1 MiB memtable blocks
    it was 64 x 1.2 MiB, and 128 such tasks held all of a 256 MiB worker's budget."""
    resources = StateResources(256 << 20)
    dbs = [RocksDBBackend(tmp_path / f"t{i}", resources=resources) for i in range(64)]
    try:
        for db in dbs:
            _fill(db, 20, "k")
        assert resources.write_buffers.get_usage() < 64 * (512 << 10)
    finally:
        for db in dbs:
            db.close()
        resources.close()


def test_every_db_reads_through_the_one_block_cache(tmp_path: Path) -> None:
    resources = StateResources(64 << 20)
    dbs = [RocksDBBackend(tmp_path / n, resources=resources) for n in "ab"]
    for db in dbs:
        _fill(db, 2_000, "k")
        db.snapshot_sync(1)  # the memtable flushed into an SST file
        db.close()
    usage = [resources.cache.get_usage()]
    try:
        for n in "ab":  # reopened: the tables' own caches are empty, reads go to SSTs
            db = RocksDBBackend(tmp_path / n, resources=resources)
            dbs.append(db)
            assert db.table(SPEC).get(("k-1234",)) == 1234
            usage.append(resources.cache.get_usage())
        assert usage[0] < usage[1] < usage[2], usage  # each DB's blocks in the one cache
    finally:
        for db in dbs:
            db.close()
        resources.close()


def test_background_checkpoints_of_many_tasks_run_on_the_worker_s_few_threads(
    tmp_path: Path,
) -> None:
    others = set(threading.enumerate())
    resources = StateResources()
    dbs = [RocksDBBackend(tmp_path / f"t{i}", resources=resources) for i in range(16)]
    try:
        for i, db in enumerate(dbs):
            db.table(SPEC).put(("key",), i)
        snaps = [db.snapshot_sync(1, background=True) for db in dbs]
        for s in snaps:
            s.wait_ready()
        threads = _new_threads(others, "rocksdb-checkpoint")
        assert 1 <= len(threads) <= CHECKPOINT_THREADS == 4
        for i, db in enumerate(dbs):  # each task's checkpoint holds its own state
            db.close()
            shutil.copytree(snaps[i].directory, tmp_path / f"back{i}" / "db")
            dbs[i] = RocksDBBackend(tmp_path / f"back{i}", resources=resources)
            assert dbs[i].table(SPEC).get(("key",)) == i
    finally:
        for db in dbs:
            db.close()
        resources.close()
    assert not _new_threads(others, "rocksdb-checkpoint")


def test_an_idle_task_s_db_costs_well_under_a_megabyte(tmp_path: Path) -> None:
    """An open DB with a table and a few entries: ~0.45 MB. Before, its memtable's Bloom
    filter alone was 1.3 MB (allocated whole for RocksDB's 64 MiB memtable) and the
    default column family's as much: 2.9 MB a DB."""
    resources = StateResources()
    n = 32
    dbs: list[RocksDBBackend] = []
    try:
        _fill(RocksDBBackend(tmp_path / "warm", resources=resources), 20, "k")  # libraries
        start = _rss_kb()
        for i in range(n):
            db = RocksDBBackend(tmp_path / f"t{i}", resources=resources)
            dbs.append(db)
            _fill(db, 20, "k")
        per_db_mb = (_rss_kb() - start) / n / 1024
        assert per_db_mb < 1.0, f"{per_db_mb:.2f} MB of RSS per idle DB"
    finally:
        for db in dbs:
            db.close()
        resources.close()


def test_resources_refuse_nonsense_sizes() -> None:
    with pytest.raises(ValueError, match="state memory must be > 0 bytes, got 0"):
        StateResources(0)
    with pytest.raises(ValueError, match="checkpoint threads must be >= 1, got 0"):
        StateResources(checkpoint_threads=0)


def test_a_background_snapshot_makes_its_directory_off_the_processing_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's file system calls (the directory, an old one of the same label) run
    on the checkpoint thread: at 512 tasks a worker, on a busy disk, their stat and mkdir
    calls were most of a trigger's 7 s on the processing thread (benchmarks/SCALING.md)."""
    made: list[str] = []
    real = LocalSnapshots.make_room

    def make_room(self: LocalSnapshots, label: str) -> Path:
        made.append(threading.current_thread().name)
        return real(self, label)

    monkeypatch.setattr(LocalSnapshots, "make_room", make_room)
    resources = StateResources()
    db = RocksDBBackend(tmp_path / "t", resources=resources)
    try:
        for n in (1, 2):  # a full snapshot, then a delta
            db.table(SPEC).put(("key",), n)
            snap = db.snapshot_sync(n, background=True, deltas=True)
            snap.wait_ready()
            assert snap.directory.is_dir()
        assert len(made) == 2 and all(m.startswith("rocksdb-checkpoint") for m in made)
    finally:
        db.close()
        resources.close()
