"""A worker's snapshot threads (kstream.snapshots.transfers): each task's uploads run one
at a time in order, different tasks' side by side, on a number of threads that does not
grow with the tasks; what they upload restores to each task's own state."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kstream.checkpointstorage.urls import open_store
from kstream.snapshots.restore import restore_state
from kstream.snapshots.transfers import UPLOAD_THREADS, SerialExecutor, TransferPools
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend
from kstream.state.rocksdb_resources import StateResources

WAIT = 10.0  # seconds any condition below may take at most


def test_one_executor_runs_its_jobs_in_order_one_at_a_time() -> None:
    with ThreadPoolExecutor(4) as pool:
        serial = SerialExecutor(pool)
        ran: list[int] = []
        inside = threading.Semaphore(1)

        def job(i: int) -> int:
            assert inside.acquire(blocking=False), "two jobs of one executor at once"
            ran.append(i)
            inside.release()
            return i * 10

        futures = [serial.submit(job, i) for i in range(200)]
        assert [f.result(WAIT) for f in futures] == [i * 10 for i in range(200)]
        assert ran == list(range(200))


def test_two_executors_run_side_by_side_on_the_shared_threads() -> None:
    with ThreadPoolExecutor(2) as pool:
        a, b = SerialExecutor(pool), SerialExecutor(pool)
        b_ran = threading.Event()
        first = a.submit(b_ran.wait, WAIT)  # a's job waits for b's: a deadlock if serial
        b.submit(b_ran.set).result(WAIT)
        assert first.result(WAIT) is True


def test_a_failed_job_fails_its_future_and_the_next_one_still_runs() -> None:
    with ThreadPoolExecutor(1) as pool:
        serial = SerialExecutor(pool)
        failed = serial.submit(lambda: 1 // 0)
        after = serial.submit(lambda: "ran")
        with pytest.raises(ZeroDivisionError):
            failed.result(WAIT)
        assert after.result(WAIT) == "ran"


def test_shutdown_waits_for_what_was_submitted_and_refuses_more() -> None:
    with ThreadPoolExecutor(1) as pool:
        serial = SerialExecutor(pool)
        go = threading.Event()
        running = serial.submit(go.wait, WAIT)
        queued = serial.submit(lambda: "queued")
        threading.Timer(0.05, go.set).start()  # lets the running job end later
        serial.shutdown(wait=True)
        assert running.done() and queued.result(0) == "queued"
        with pytest.raises(RuntimeError, match="cannot submit after shutdown"):
            serial.submit(lambda: None)


def test_many_tasks_upload_and_restore_on_the_worker_s_threads(tmp_path: Path) -> None:
    """32 tasks' snapshots: 4 upload threads and the store's concurrency in transfer
    threads, not 1 + concurrency per task; each manifest restores its task's state."""
    others = set(threading.enumerate())  # other tests' may run on
    store = open_store(f"file://{tmp_path / 'store'}")
    pools = TransferPools(store.concurrency)
    resources = StateResources()
    spec = TableSpec("counts")
    tasks = [f"stage1-{i}" for i in range(32)]
    uploaders, handles = [], []
    try:
        for i, task in enumerate(tasks):
            backend = RocksDBBackend(tmp_path / "local" / task, resources=resources)
            for k in range(50):
                backend.table(spec).put((f"{task}-{k}",), i * k)
            snap = backend.snapshot_sync(1, background=True)
            uploader = SnapshotUploader(store, "app", task, pools=pools)
            uploaders.append(uploader)
            handles.append(uploader.upload(snap, positions={"in-0": i}))
            backend.close()
        results = [h.result(WAIT) for h in handles]
        names = [t.name for t in set(threading.enumerate()) - others]
        assert sum(n.startswith("upload") for n in names) <= UPLOAD_THREADS == 4
        assert sum(n.startswith("transfer") for n in names) <= store.concurrency == 4
        for i, (task, handle) in enumerate(zip(tasks, results, strict=True)):
            backend, manifest, _ = restore_state(
                store,
                handle.manifest_path,
                tmp_path / "restored" / task,
                transfers=pools.transfers(),
                resources=resources,
            )
            assert manifest.task_id == task and manifest.positions == {"in-0": i}
            table = backend.table(spec)
            assert [table.get((f"{task}-{k}",)) for k in range(50)] == [i * k for k in range(50)]
            assert len(list(table.scan())) == 50
            backend.close()
    finally:
        for u in uploaders:
            u.close()
        pools.close()
        resources.close()
    names = [t.name for t in set(threading.enumerate()) - others]
    assert not [n for n in names if n.startswith(("upload", "transfer", "put-", "get-"))]
