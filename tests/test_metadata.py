"""Checkpoint metadata in the store: exclusive creation, listing, latest completed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kstream.checkpointstorage.base import ObjectExists, StoreError
from kstream.checkpointstorage.file import FileStore
from kstream.checkpointstorage.layout import index_path, metadata_path
from kstream.checkpointstorage.metadata import (
    INDENTED_TASKS,
    INDEX_LENGTH,
    CheckpointMetadata,
    MetadataError,
    TaskSnapshot,
    completed_ids,
    known_completed,
    latest_completed,
    list_checkpoints,
    purgeable_offsets,
    read_index,
    read_metadata,
    write_metadata,
)


def _meta(n: int, size: int = 10) -> CheckpointMetadata:
    return CheckpointMetadata(
        checkpoint_id=n,
        attempt=1,
        trigger_time=100.0,
        complete_time=100.25,
        tasks={
            "s-0": TaskSnapshot("app/m/s-0", {"in:0": 5}, state_size=size, uploaded_size=3),
            "s-1": TaskSnapshot("app/m/s-1", {"in:1": 9}, state_size=size, async_ms=4.0),
        },
    )


def test_write_then_read_round_trips_with_statistics(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert write_metadata(store, "app", _meta(3)) == "app/checkpoints/chk-3.json"
    got = read_metadata(store, "app", 3)
    assert got == _meta(3)
    assert got.duration_ms == 250.0
    assert got.state_size == 20
    assert got.uploaded_size == 3


def test_metadata_is_never_overwritten(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    write_metadata(store, "app", _meta(3, size=1))
    with pytest.raises(ObjectExists):
        write_metadata(store, "app", _meta(3, size=2))
    assert read_metadata(store, "app", 3).state_size == 2  # the first one (1 per task)


def test_listing_is_numeric_and_latest_skips_corrupt(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for n in (2, 10, 9):
        write_metadata(store, "app", _meta(n))
    store.put_bytes("app/checkpoints/unrelated.txt", b"x")
    assert completed_ids(store, "app") == [2, 9, 10]
    assert [m.checkpoint_id for m in list_checkpoints(store, "app")] == [2, 9, 10]
    store.put_bytes(metadata_path("app", 11), b"{garbage")
    latest = latest_completed(store, "app", known=completed_ids(store, "app"))
    assert latest is not None and latest.checkpoint_id == 10
    with pytest.raises(MetadataError, match="not valid checkpoint metadata"):
        read_metadata(store, "app", 11)


class NoListing(FileStore):
    """A store whose listing fails: the checkpoint path must never list."""

    def list(self, prefix: str) -> list[str]:
        raise AssertionError(f"listed {prefix!r}")


def test_latest_is_found_from_the_index_and_candidates_without_listing(tmp_path: Path) -> None:
    store = NoListing(tmp_path)
    for n in (2, 9, 10):
        write_metadata(store, "app", _meta(n))
    assert read_index(store, "app") == [2, 9, 10]
    assert known_completed(store, "app") == [2, 9, 10]
    latest = latest_completed(store, "app")
    assert latest is not None and latest.checkpoint_id == 10
    # A coordinator died between metadata and index: the control topic names the id.
    store.put_bytes(metadata_path("app", 12), _meta(12).to_json(), exclusive=True)
    assert known_completed(store, "app") == [2, 9, 10]
    assert known_completed(store, "app", [12, 13]) == [2, 9, 10, 12]  # 13 never completed
    latest = latest_completed(store, "app", known_completed(store, "app", [12]))
    assert latest is not None and latest.checkpoint_id == 12
    # Retention deleted 2's metadata: the index still names it, the reader drops it.
    store.delete(metadata_path("app", 2))
    assert known_completed(store, "app") == [9, 10]
    # A corrupt newest checkpoint falls back to the next one.
    store.put_bytes(metadata_path("app", 14), b"{garbage")
    latest = latest_completed(store, "app", known_completed(store, "app", [14]))
    assert latest is not None and latest.checkpoint_id == 10


def test_the_index_keeps_the_newest_ids_and_tolerates_garbage(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    for n in range(1, INDEX_LENGTH + 6):
        write_metadata(store, "app", _meta(n))
    assert read_index(store, "app") == list(range(6, INDEX_LENGTH + 6))
    store.put_bytes(index_path("app"), b"not json")
    assert read_index(store, "app") == []
    write_metadata(store, "app", _meta(100))  # rewrites a valid index
    assert read_index(store, "app") == [100]


class IndexWriteFails(FileStore):
    def put_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> None:
        if path.endswith("index.json"):
            raise StoreError("store is down")
        super().put_bytes(path, data, exclusive=exclusive)


def test_a_failed_index_write_does_not_fail_the_checkpoint(tmp_path: Path) -> None:
    store = IndexWriteFails(tmp_path)
    assert write_metadata(store, "app", _meta(3)) == metadata_path("app", 3)
    assert read_index(store, "app") == []
    assert known_completed(store, "app", [3]) == [3]


def test_no_checkpoint(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    assert latest_completed(store, "app") is None
    with pytest.raises(MetadataError, match="checkpoint 1 of 'app'"):
        read_metadata(store, "app", 1)


def _with_offsets(n: int, offsets: dict[str, dict[str, object]]) -> CheckpointMetadata:
    tasks = {t: TaskSnapshot(f"app/m/{t}/{n}", o) for t, o in offsets.items()}
    return CheckpointMetadata(n, 1, 0.0, 1.0, tasks)


def test_purgeable_offsets_are_the_smallest_seek_of_every_retained_checkpoint() -> None:
    older = _with_offsets(
        1,
        {
            "src-0": {"in:0": 50},  # a user topic: never purged
            "agg-0": {"app.s0.repartition:0": {"src-0": 40, "src-1": 42}},
            "agg-1": {"app.s0.repartition:1": {"src-0": 7, "src-1": 9}},
        },
    )
    newer = _with_offsets(
        2,
        {
            "src-0": {"in:0": 90},
            "agg-0": {"app.s0.repartition:0": {"src-0": 80, "src-1": 30}},
            "agg-1": {"app.s0.repartition:1": {"src-0": 20, "src-1": 21}},
            "agg-2": {"app.s0.repartition:2": {"src-0": 5}},  # not in the older one
        },
    )
    assert purgeable_offsets([older, newer]) == {
        ("app.s0.repartition", 0): 30,
        ("app.s0.repartition", 1): 7,
    }
    assert purgeable_offsets([newer]) == {
        ("app.s0.repartition", 0): 30,
        ("app.s0.repartition", 1): 20,
        ("app.s0.repartition", 2): 5,
    }
    assert purgeable_offsets([]) == {}


def test_metadata_of_many_tasks_is_written_in_columns_and_reads_back(tmp_path: Path) -> None:
    """Past INDENTED_TASKS tasks (the coordinator writes it at every checkpoint) the tasks
    are columns, not an object each (issue 41: 20 MB, not 31 MB, at 100 000 tasks)."""
    tasks = {
        f"s-{i}": TaskSnapshot(
            f"app/m/s-{i}", {"in:0": {"up-0": i}}, i, 1, 0.5, 1.5, 2.5, 7.0, f"w{i}"
        )
        for i in range(INDENTED_TASKS + 1)
    }
    meta = CheckpointMetadata(4, 2, 100.0, 101.0, tasks, {"op": "d"}, "chk-1", "plan9")
    data = meta.to_json()
    columns = json.loads(data)["task_columns"]
    assert "tasks" not in json.loads(data) and b"\n" not in data
    assert columns["task"] == list(tasks)  # (in the order of the metadata's tasks)
    assert columns["handle"][:2] == ["app/m/s-0", "app/m/s-1"]
    assert columns["offsets"][1] == {"in:0": {"up-0": 1}}
    assert columns["member"][999:] == ["w999", "w1000"]
    store = FileStore(tmp_path)
    write_metadata(store, "app", meta)
    assert read_metadata(store, "app", 4) == meta


def test_metadata_of_few_tasks_keeps_one_object_per_task_as_before() -> None:
    data = _meta(3).to_json()
    assert json.loads(data)["tasks"]["s-0"]["handle"] == "app/m/s-0"
    assert data.startswith(b'{\n "attempt": 1,')  # indented
    old = {**json.loads(data), "tasks": {"s-0": {"handle": "h", "offsets": {"in:0": 1}}}}
    got = CheckpointMetadata.from_json(json.dumps(old).encode())
    assert got.tasks == {"s-0": TaskSnapshot("h", {"in:0": 1})}  # (fields of older versions)


def test_columns_of_unequal_length_are_invalid_metadata() -> None:
    body = json.loads(_meta(3).to_json())
    del body["tasks"]
    body["task_columns"] = {"task": ["a", "b"], "handle": ["h"]}
    with pytest.raises(MetadataError, match="not all of the same length"):
        CheckpointMetadata.from_json(json.dumps(body).encode())
    body["task_columns"] = {"task": ["a"], "handle": ["h"], "colour": ["red"]}
    with pytest.raises(MetadataError, match="colour"):
        CheckpointMetadata.from_json(json.dumps(body).encode())
