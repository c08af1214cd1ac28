"""Rescaling keyed state (kstream.rescale): every row lands in exactly the task its
partitioner names, the union of the new tasks' state is the old union, positions follow
the documented rule, and unsound state is refused naming the operator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot
from kstream.checkpointstorage.savepoints import create_savepoint, read_savepoint
from kstream.cli.main import main
from kstream.config import ConfigError, StartFrom, parse_instant
from kstream.query.operators import murmur2, partition_of
from kstream.rescale.layout import RescaleError
from kstream.rescale.routing import murmur2 as fast_murmur2
from kstream.rescale.savepoint import rescale_savepoint
from kstream.snapshots.restore import restore_backend
from kstream.snapshots.upload import SnapshotUploader, read_manifest
from kstream.state.base import TableSpec
from kstream.state.rocksdb import RocksDBBackend

APP = "app"
OPS = {
    "win": {"kind": "window", "stage": "stage1", "key serde": "str"},
    "sess": {"kind": "window", "stage": "stage1", "key serde": "str"},
    "proc": {"kind": "process", "stage": "stage1", "key serde": "str"},
    "join": {"kind": "join_window", "stage": "stage1", "key serde": "str"},
    "roll": {"kind": "rolling", "stage": "stage1", "key serde": "str"},
}


def rows_of(key: str, n: int) -> list[tuple[str, tuple[Any, ...], Any]]:
    """Some state of record key ``key`` in every operator's tables (their real layouts)."""
    return [
        ("win.acc", (20_000 + 1000 * n, 19_000 + 1000 * n, key), n),  # (ends after every wm:
        ("sess.sessions", (key, n), [20_005 + n, n]),  # not fired yet)
        ("sess.timers", (20_005 + n, key, n), 0),
        ("proc.s.count", (key,), n),
        ("proc.s.seen", (key, f"m{n}"), True),
        ("proc.et", (n * 7, key), 0),
        ("proc.ttl", (n + 60, "count", key), 0),
        ("join.left", (key, n), [{"v": n}]),
        ("join.left_exp", (n, key), 0),
        ("join.left_un", (key, n, 0), 0),
        ("roll.acc", (key,), {"sum": n}),
    ]


def write_savepoint(
    tmp: Path, keys: dict[str, int], old_n: int, internal: bool, wms: list[int]
) -> tuple[FileStore, str]:
    """A savepoint of stage1 over ``old_n`` tasks holding ``keys``' state (key -> a
    number), each key in the task its partitioner names."""
    store = FileStore(tmp / "store")
    how = "crc32" if internal else "murmur2"
    tasks = {}
    for p in range(old_n):
        backend = RocksDBBackend(tmp / "old" / f"stage1-{p}")
        for key, n in keys.items():
            if partition_of(key.encode(), old_n, how) == p:
                for table, k, v in rows_of(key, n):
                    backend.table(TableSpec(table)).put(k, v)
        for op in OPS:
            backend.table(TableSpec(f"{op}.meta")).put(("wm",), wms[p % len(wms)])
        backend.table(TableSpec("proc.schemas")).put((1, "count"), "{}")
        topic = f"{APP}.rep" if internal else "in"
        position: Any = {"stage0-0": 10 + p} if internal else 10 + p
        up = SnapshotUploader(store, APP, f"stage1-{p}")
        h = up.upload_now(
            backend.snapshot_sync(7),
            positions={f"{topic}:{p}": position},
            watermarks=[[topic, p, "", 500 + p]],
        )
        up.close()
        backend.close()
        tasks[f"stage1-{p}"] = TaskSnapshot(h.manifest_path, offsets={f"{topic}:{p}": position})
    desc = {
        "version": 2,
        "operators": OPS,
        "stages": {"stage0": 1, "stage1": old_n},
        "internal_topics": {"rep": old_n} if internal else {},
    }
    tasks["stage0-0"] = TaskSnapshot("")
    meta = CheckpointMetadata(7, 0, 1.0, 2.0, tasks, desc)
    return store, create_savepoint(store, APP, "before", meta)


def handles_of(store: FileStore, savepoint: str) -> dict[str, str]:
    return {t: s.handle for t, s in read_savepoint(store, savepoint).tasks.items() if s.handle}


def read_tasks(store: FileStore, handles: dict[str, str], tmp: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for task, handle in sorted(handles.items()):
        backend, _ = restore_backend(store, handle, tmp / "read" / task)
        out[task] = {
            name: dict(backend.table(TableSpec(name)).scan()) for name in backend.stored_tables()
        }
        backend.close()
    return out


@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # (shrinking RocksDB runs is slow)
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    keys=st.dictionaries(st.text(min_size=0, max_size=6), st.integers(1, 50), max_size=25),
    old_n=st.integers(1, 5),
    new_n=st.integers(1, 9),
    internal=st.booleans(),
    wms=st.lists(st.integers(0, 10_000), min_size=1, max_size=3),
)
def test_every_row_goes_to_the_task_its_partitioner_names_and_nothing_is_lost(
    tmp_path_factory: pytest.TempPathFactory,
    keys: dict[str, int],
    old_n: int,
    new_n: int,
    internal: bool,
    wms: list[int],
) -> None:
    if not internal and new_n < old_n:
        new_n = old_n + new_n  # a source topic only grows
    tmp = tmp_path_factory.mktemp("rescale")
    store, src = write_savepoint(tmp, keys, old_n, internal, wms)
    path, meta = rescale_savepoint(store, src, "after", {"stage1": new_n}, workdir=tmp / "work")
    assert path == f"{APP}/savepoints/after"
    assert meta.description is not None and meta.description["stages"]["stage1"] == new_n
    assert sorted(meta.tasks) == sorted(["stage0-0", *(f"stage1-{q}" for q in range(new_n))])
    if internal:
        assert meta.description["internal_topics"] == {"rep": new_n}
    how = "crc32" if internal else "murmur2"
    handles = {t: s.handle for t, s in meta.tasks.items() if s.handle}
    state = read_tasks(store, handles, tmp)
    # Every keyed row exactly once, in the task its partitioner names.
    expected = {(t, k, json.dumps(v)) for key, n in keys.items() for t, k, v in rows_of(key, n)}
    found = set()
    for task, tables in state.items():
        q = int(task.rsplit("-", 1)[1])
        for table, rows in tables.items():
            if table.endswith((".meta", ".schemas")):
                continue
            for k, v in rows.items():
                rk = (
                    k[2]
                    if table in ("win.acc", "proc.ttl")
                    else k[1]
                    if table in ("sess.timers", "proc.et", "join.left_exp")
                    else k[0]
                )
                assert partition_of(rk.encode(), new_n, how) == q, (table, k, task)
                entry = (table, k, json.dumps(v))
                assert entry not in found
                found.add(entry)
    assert found == expected
    # Non-keyed: the lowest watermark and the schema history in every new task.
    for task, tables in state.items():
        q = int(task.rsplit("-", 1)[1])
        low = wms[q % len(wms)] if new_n == old_n else min(wms[p % len(wms)] for p in range(old_n))
        for op in OPS:
            assert tables[f"{op}.meta"] == {("wm",): low}
        assert tables["proc.schemas"] == {(1, "count"): "{}"}
    # Positions: a source partition that existed keeps its offset and watermark, a new
    # one starts from the job's start position; a new repartition topic starts empty.
    for q in range(new_n):
        m = read_manifest(store, meta.tasks[f"stage1-{q}"].handle)
        if new_n == old_n:  # not rescaled: the old snapshot as it was
            assert m.positions == {
                (f"{APP}.rep:{q}" if internal else f"in:{q}"): (
                    {"stage0-0": 10 + q} if internal else 10 + q
                )
            }
        elif internal or q >= old_n:
            assert (m.positions, m.watermarks) == ({}, [])
        else:
            assert (m.positions, m.watermarks) == ({f"in:{q}": 10 + q}, [["in", q, "", 500 + q]])
        assert meta.tasks[f"stage1-{q}"].offsets == m.positions


def test_the_cli_writes_a_savepoint_whose_dump_shows_every_key_once(tmp_path: Path) -> None:
    keys = {f"k{i}": i for i in range(1, 40)}
    store, src = write_savepoint(tmp_path, keys, 3, True, [100])
    url = f"file://{tmp_path / 'store'}"
    runner = CliRunner()
    result = runner.invoke(
        main, ["state", "rescale", src, "app/savepoints/x12", "--store", url, "--partitions",
               "stage1=12"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "app/savepoints/x12"
    assert "rescaled stage1 to 12 tasks (stages now: stage0=1, stage1=12)" in result.stderr
    result = runner.invoke(
        main, ["state", "dump", "--app-id", APP, "--store", url, "--savepoint", "app/savepoints/x12",
               "--operator", "roll"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    acc = [(r["key"][0], r["task"]) for r in rows if r["table"] == "acc"]
    assert sorted(k for k, _t in acc) == sorted(keys)  # every key once
    assert all(t == f"stage1-{partition_of(k.encode(), 12, 'crc32')}" for k, t in acc)
    # 12 -> 3 again: the same state as at first.
    result = runner.invoke(
        main, ["state", "rescale", "app/savepoints/x12", "x3", "--store", url, "--partitions",
               "stage1=3"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    before, after = (
        read_tasks(store, handles_of(store, sp), tmp_path / sp.rsplit("/", 1)[1])
        for sp in (src, "app/savepoints/x3")
    )
    assert after == before


def test_a_key_the_key_serde_cannot_write_is_refused_naming_the_operator(tmp_path: Path) -> None:
    store, src = write_savepoint(tmp_path, {"a": 1, "b": 2}, 2, True, [0])
    # The state says its keys are bytes, but they are stored as text: a key serde change.
    meta = read_savepoint(store, src)
    assert meta.description is not None
    ops = {**OPS, "win": {**OPS["win"], "key serde": "bytes"}}
    changed = CheckpointMetadata(7, 0, 1.0, 2.0, meta.tasks, {**meta.description, "operators": ops})
    src2 = create_savepoint(store, APP, "bytes-keys", changed)
    with pytest.raises(
        RescaleError, match=r"^operator 'win': stored key 'a' does not suit its key serde bytes"
    ):
        rescale_savepoint(store, src2, "after", {"stage1": 4}, workdir=tmp_path / "w")


def test_a_firing_in_progress_and_a_shrinking_source_are_refused(tmp_path: Path) -> None:
    store, src = write_savepoint(tmp_path, {"a": 1}, 2, False, [0])
    with pytest.raises(RescaleError, match="stage1 reads source topics, which cannot lose"):
        rescale_savepoint(store, src, "after", {"stage1": 1}, workdir=tmp_path / "w")
    backend = RocksDBBackend(tmp_path / "mid")
    backend.table(TableSpec("win.meta")).put(("firing.target",), 3000)
    backend.table(TableSpec("win.acc")).put((1000, 0, "a"), 1)
    up = SnapshotUploader(store, APP, "stage1-0")
    h = up.upload_now(backend.snapshot_sync(8), positions={"in:0": 1})
    up.close()
    backend.close()
    desc = {"version": 2, "operators": {"win": OPS["win"]}, "stages": {"stage1": 1}}
    sp = create_savepoint(
        store,
        APP,
        "mid",
        CheckpointMetadata(8, 0, 1.0, 2.0, {"stage1-0": TaskSnapshot(h.manifest_path)}, desc),
    )
    with pytest.raises(RescaleError, match=r"^operator 'win' was firing windows/timers in slices"):
        rescale_savepoint(store, sp, "after", {"stage1": 2}, workdir=tmp_path / "w2")
    result = CliRunner().invoke(
        main, ["state", "rescale", sp, "x", "--store", f"file://{tmp_path / 'store'}",
               "--partitions", "stage9=2"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.strip() == "kstream: no stage stage9 in this state (stages: stage1)"


@given(st.binary(max_size=300))
def test_the_fast_murmur2_is_kafkas(data: bytes) -> None:
    assert fast_murmur2(data) == murmur2(data)


def test_a_fired_window_kept_for_lateness_behind_another_tasks_watermark_is_refused(
    tmp_path: Path,
) -> None:
    """Task 0's watermark passed 1000: its window ending at 1000 fired and is kept for
    allowed lateness; at task 1's lower watermark it would fire again."""
    store = FileStore(tmp_path / "store")
    tasks = {}
    for p, (wm, rows) in enumerate([(5000, [((1000, 0, "a"), 3)]), (500, [])]):
        backend = RocksDBBackend(tmp_path / "old" / str(p))
        backend.table(TableSpec("win.meta")).put(("wm",), wm)
        for k, v in rows:
            backend.table(TableSpec("win.acc")).put(k, v)
        up = SnapshotUploader(store, APP, f"stage1-{p}")
        h = up.upload_now(backend.snapshot_sync(3), positions={f"in:{p}": 1})
        up.close()
        backend.close()
        tasks[f"stage1-{p}"] = TaskSnapshot(h.manifest_path)
    desc = {"version": 2, "operators": {"win": OPS["win"]}, "stages": {"stage1": 2}}
    sp = create_savepoint(store, APP, "late", CheckpointMetadata(3, 0, 1.0, 2.0, tasks, desc))
    with pytest.raises(
        RescaleError,
        match=r"^operator 'win': task stage1-0 \(watermark 5000\) keeps a fired window ending "
        r"at 1000 for allowed lateness, but another task's watermark is 500",
    ):
        rescale_savepoint(store, sp, "after", {"stage1": 3}, workdir=tmp_path / "w")


def test_new_source_partitions_start_where_the_given_time_resolves(tmp_path: Path) -> None:
    """``--new-partitions-from``: a source stage's added partitions start at the offsets
    the resolver names (asked once per topic, for the added partitions only); the old
    ones keep theirs; a repartition stage never asks."""
    keys = {f"k{i}": i for i in range(1, 30)}
    store, src = write_savepoint(tmp_path / "a", keys, 3, False, [100])
    asked: list[tuple[str, list[int]]] = []

    def at(topic: str, parts: list[int]) -> dict[int, int]:
        asked.append((topic, parts))
        return {p: 1000 + p for p in parts}

    _path, meta = rescale_savepoint(
        store, src, "grown", {"stage1": 5}, workdir=tmp_path / "w", new_positions=at
    )
    assert asked == [("in", [3, 4])]
    for q in range(5):
        m = read_manifest(store, meta.tasks[f"stage1-{q}"].handle)
        want = {f"in:{q}": 10 + q} if q < 3 else {f"in:{q}": 1000 + q}
        assert (m.positions, meta.tasks[f"stage1-{q}"].offsets) == (want, want)
        assert m.watermarks == ([["in", q, "", 500 + q]] if q < 3 else [])
    store, src = write_savepoint(tmp_path / "b", keys, 3, True, [100])
    rescale_savepoint(store, src, "more", {"stage1": 5}, workdir=tmp_path / "w2", new_positions=at)
    assert asked == [("in", [3, 4])]  # a new repartition topic starts empty


def test_new_source_partitions_not_found_are_refused_in_one_line(tmp_path: Path) -> None:
    store, src = write_savepoint(tmp_path, {"a": 1}, 2, False, [100])

    def missing(topic: str, parts: list[int]) -> dict[int, int]:
        raise LookupError(f"{topic} partitions {parts}: Unknown partition")

    with pytest.raises(RescaleError) as e:
        rescale_savepoint(
            store, src, "grown", {"stage1": 4}, workdir=tmp_path / "w", new_positions=missing
        )
    assert str(e.value) == (
        "where the partitions in gained start is not known: in partitions [2, 3]: Unknown "
        "partition (grow the topic before the state is rescaled)"
    )
    assert "\n" not in str(e.value)


def test_the_time_new_partitions_start_from_is_epoch_ms_or_iso_8601() -> None:
    assert parse_instant("1764871200000") == 1_764_871_200_000
    assert parse_instant("2025-12-04T18:00:00Z") == 1_764_871_200_000
    assert parse_instant("2025-12-04T18:00:00") == 1_764_871_200_000  # UTC by default
    assert parse_instant("2025-12-04T19:00:00+01:00") == 1_764_871_200_000
    assert parse_instant("2025-12-04T18:00:00.123+00:00") == 1_764_871_200_123  # exact ms
    with pytest.raises(ConfigError, match="not a time: give epoch milliseconds or ISO 8601"):
        parse_instant("yesterday")
    with pytest.raises(ConfigError, match="give --from-savepoint"):
        StartFrom(new_partitions_from=1)
    assert StartFrom(savepoint="a/savepoints/b", new_partitions_from=1).new_partitions_from == 1


def test_the_cli_refuses_a_bad_start_time_and_a_missing_broker_writing_nothing(
    tmp_path: Path,
) -> None:
    store, src = write_savepoint(tmp_path, {"a": 1}, 2, False, [100])
    url = f"file://{tmp_path / 'store'}"
    env = {"KSTREAM_BOOTSTRAP": None, "KSTREAM_DEV_STATE_DIR": str(tmp_path / "nokafka")}
    args = ["state", "rescale", src, "x4", "--store", url, "--partitions", "stage1=4"]
    bad = CliRunner().invoke(main, [*args, "--new-partitions-from", "yesterday"], env=env)
    assert bad.exit_code == 2
    assert "'yesterday' is not a time: give epoch milliseconds or ISO 8601" in bad.output
    alone = CliRunner().invoke(main, [*args, "--new-partitions-from", "2026-12-04"], env=env)
    assert alone.exit_code == 2
    assert "no bootstrap servers: give --bootstrap HOST:PORT" in alone.output
    assert store.list(f"{APP}/savepoints/x4") == []
