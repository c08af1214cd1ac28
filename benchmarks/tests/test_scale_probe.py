"""The probe's summary of where a checkpoint's time went over its tasks, read from the
checkpoints' metadata in the store."""

from __future__ import annotations

from pathlib import Path

from benchmarks.scale_probe import checkpoint_phases
from kstream.checkpointstorage.metadata import CheckpointMetadata, TaskSnapshot, write_metadata
from kstream.checkpointstorage.urls import open_store


def test_the_phases_of_each_checkpoint_over_its_tasks(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}")
    tasks = {
        f"t{i}": TaskSnapshot(f"h{i}", alignment_ms=i, sync_ms=2 * i, async_ms=10 * i,
                              ack_delay_ms=100 + i)
        for i in range(10)
    }  # fmt: skip
    write_metadata(store, "app", CheckpointMetadata(7, 0, 100.0, 102.5, tasks))
    [row] = checkpoint_phases(store, "app")
    assert row == {
        "checkpoint": 7,
        "ms": 2500.0,
        "alignment_ms": [5, 9, 9],
        "sync_ms": [10, 18, 18],
        "async_ms": [50, 90, 90],
        "ack_delay_ms": [105, 109, 109],
    }
