"""Rescaling the state real operators wrote: a session window job whose source topic grows
from 4 to 12 partitions mid-stream — offline (``kstream state rescale``) or by starting
``--from-savepoint`` on the new counts — continues with exactly the output of a job that
never rescaled (without Kafka: the tasks are fed as Kafka's default partitioner spreads
keys); a key serde change is refused naming the operator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kstream.api import Session, Topology, WatermarkStrategy
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, read_metadata
from kstream.checkpointstorage.savepoints import create_savepoint
from kstream.checkpointstorage.startfrom import import_start
from kstream.config import StartFrom
from kstream.plan import plan_job
from kstream.plan.compat import IncompatibleStateError
from kstream.plan.operators import describe
from kstream.query.operators import partition_of
from kstream.rescale.routing import routes_of_plan
from kstream.rescale.savepoint import rescale_savepoint, rescaler
from kstream.runtime.task import Task
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.upload import SnapshotUploader
from kstream.state.rocksdb import RocksDBBackend
from tests.conftest import Kit


def topology() -> Topology:
    t = Topology("sess")
    t.source("in", keyed=True, watermark=WatermarkStrategy(0)).window(
        Session(100), name="sessions"
    ).count().map(lambda r: [r.key, r.start, r.end, r.value]).to("out")
    return t


def rows(first: int, last: int) -> list[tuple[str, int, int]]:
    """Records of 30 keys; each key is active in bursts, so sessions close and span phases."""
    return [
        (f"user{i}", 1, ts)
        for ts in range(first, last, 20)
        for i in range(30)
        if (ts // 200 + i) % 3  # a pause of 200 ms closes a key's session (gap 100 ms)
    ]


def feed(
    tasks: list[Task], rows: list[tuple[str, int, int]], kit: type[Kit], offsets: list[int]
) -> None:
    """Each record to the partition Kafka's default partitioner names for its key."""
    n = len(tasks)
    per: list[list[tuple[str, int, int]]] = [[] for _ in range(n)]
    for r in rows:
        per[partition_of(r[0].encode(), n, "murmur2")].append(r)
    for p, batch in enumerate(per):
        if batch:
            tasks[p].feed_source("in", p, kit.records(batch, offsets[p]), 0.0)
            offsets[p] += len(batch)


def finish(tasks: list[Task], kit: type[Kit]) -> list[Any]:
    out: list[Any] = []
    for p, task in enumerate(tasks):
        task.end_input("in", p, 0.0)
        out += [v for _k, v, _t in kit.sink(task.drain(), "out")]
    return out


def first_phase(tmp_path: Path, kit: type[Kit]) -> tuple[FileStore, str, list[Any], list[Any]]:
    """A savepoint of the 4-task job after the first phase, its output so far, and the
    whole output of the same job never rescaled."""
    old_plan = plan_job(topology(), "sess", {"in": 4})
    first, second = rows(0, 1500), rows(1500, 3000)
    ref = [
        Task(old_plan, f"stage0-{p}", RocksDBBackend(tmp_path / "ref" / str(p))) for p in range(4)
    ]
    offsets = [0] * 4
    feed(ref, first, kit, offsets)
    expected = [v for t in ref for _k, v, _t in kit.sink(t.drain(), "out")]
    feed(ref, second, kit, offsets)
    expected += finish(ref, kit)
    store = FileStore(tmp_path / "store")
    old = [
        Task(old_plan, f"stage0-{p}", RocksDBBackend(tmp_path / "old" / str(p))) for p in range(4)
    ]
    offsets = [0] * 4
    feed(old, first, kit, offsets)
    got = [v for t in old for _k, v, _t in kit.sink(t.drain(), "out")]
    snaps = {}
    for p, task in enumerate(old):
        backend = task.backend
        assert isinstance(backend, RocksDBBackend)
        up = SnapshotUploader(store, "sess", f"stage0-{p}")
        h = up.upload_now(backend.snapshot_sync(1), positions={f"in:{p}": offsets[p]})
        up.close()
        snaps[f"stage0-{p}"] = TaskSnapshot(h.manifest_path, offsets={f"in:{p}": offsets[p]})
        backend.close()
    src = create_savepoint(
        store, "sess", "sp", CheckpointMetadata(1, 0, 1.0, 2.0, snaps, describe(old_plan))
    )
    return store, src, got, expected


def second_phase(
    tmp_path: Path, kit: type[Kit], store: FileStore, meta: CheckpointMetadata
) -> list[Any]:
    """The rescaled job's output from ``meta``'s state on, over 12 partitions."""
    new_plan = plan_job(topology(), "sess", {"in": 12})
    new = []
    for q in range(12):
        handle = meta.tasks[f"stage0-{q}"].handle
        backend, _m = restore_backend(store, handle, tmp_path / "new" / str(q))
        new.append(Task(new_plan, f"stage0-{q}", backend))
    feed(new, rows(1500, 3000), kit, [0] * 12)
    return finish(new, kit)


def test_a_session_job_rescaled_offline_emits_what_a_never_rescaled_job_does(
    tmp_path: Path, kit: type[Kit]
) -> None:
    store, src, got, expected = first_phase(tmp_path, kit)
    new_plan = plan_job(topology(), "sess", {"in": 12})
    _path, meta = rescale_savepoint(
        store, src, "sp12", {"stage0": 12}, workdir=tmp_path / "w", routes=routes_of_plan(new_plan)
    )
    got += second_phase(tmp_path, kit, store, meta)
    assert sorted(got) == sorted(expected)
    assert len(expected) > 60  # sessions closed in both phases and across the rescale


def test_starting_from_a_savepoint_on_more_partitions_rescales_it(
    tmp_path: Path, kit: type[Kit]
) -> None:
    store, src, got, expected = first_phase(tmp_path, kit)
    desc = describe(plan_job(topology(), "sess", {"in": 12}))
    start = StartFrom(savepoint=src)
    # Without a rescaler (as before): refused.
    with pytest.raises(IncompatibleStateError, match="stage0 has 12 partitions but the"):
        import_start(store, "sess", start, next_id=2, attempt=0, description=desc, now=5.0)
    meta = import_start(
        store,
        "sess",
        start,
        next_id=2,
        attempt=0,
        description=desc,
        now=5.0,
        rescale=rescaler(store, "sess", 2),
    )
    assert meta is not None and meta == read_metadata(store, "sess", 2)
    assert sorted(meta.tasks) == sorted(f"stage0-{q}" for q in range(12))
    assert meta.tasks["stage0-3"].handle == "sess/tasks/stage0-3/rescale-2.json"
    got += second_phase(tmp_path, kit, store, meta)
    assert sorted(got) == sorted(expected)


def test_a_key_serde_change_is_refused_naming_the_operator_also_when_rescaling(
    tmp_path: Path, kit: type[Kit]
) -> None:
    store, src, _got, _expected = first_phase(tmp_path, kit)
    t = Topology("sess")
    t.source("in", keyed=True, key_serde="bytes", watermark=WatermarkStrategy(0)).window(
        Session(100), name="sessions"
    ).count().to("out")
    desc = describe(plan_job(t, "sess", {"in": 12}))
    with pytest.raises(
        IncompatibleStateError,
        match=r"^savepoint sess/savepoints/sp cannot be restored under this topology: "
        r"operator 'sessions': its key serde changed from 'str' to 'bytes'",
    ):
        import_start(
            store,
            "sess",
            StartFrom(savepoint=src),
            next_id=2,
            attempt=0,
            description=desc,
            now=5.0,
            rescale=rescaler(store, "sess", 2),
        )
    assert not store.list("sess/tasks/stage0-0/rescale")  # nothing written
