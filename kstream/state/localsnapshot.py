"""A task's local snapshot: a RocksDB checkpoint on local disk, and its "uploaded" mark."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalSnapshot:
    """A RocksDB checkpoint on local disk: what the asynchronous upload reads.

    ``label`` names the snapshot's manifest (``chk-<n>`` for a checkpoint, a
    caller-chosen label for a savepoint / a bounded run's final state).
    """

    checkpoint_id: int
    label: str
    directory: Path
    sequence_number: int
    tables: tuple[str, ...]
    sync_ms: float
    ready: Future[None] | None = None
    """Set while the RocksDB checkpoint is created in the background
    (``snapshot_sync(background=True)``): ``directory`` is whole once it is done."""

    def wait_ready(self) -> None:
        """Wait until ``directory`` is whole; raises what creating it raised."""
        if self.ready is not None:
            self.ready.result()


def marker(snapshot_dir: Path) -> Path:
    return snapshot_dir.with_name(snapshot_dir.name + ".uploaded")


def mark_uploaded(snapshot_dir: Path) -> None:
    """Record that the local snapshot in ``snapshot_dir`` is safely in the store.

    Only marked snapshots (and older failed ones) are pruned by ``snapshot_sync``.
    """
    marker(snapshot_dir).touch()
