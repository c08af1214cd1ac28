"""A task's local snapshots: directories on local disk, their "uploaded" mark, pruning."""

from __future__ import annotations

import shutil
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


class LocalSnapshots:
    """The local snapshot directories under ``root`` in creation order (an earlier
    run's by modification time), pruned once uploaded beyond ``retained``."""

    def __init__(self, root: Path, retained: int) -> None:
        self.root = root
        self.retained = retained
        self.order: list[str] = []
        if root.is_dir():
            found = [d for d in root.iterdir() if d.is_dir()]
            self.order = [d.name for d in sorted(found, key=lambda d: d.stat().st_mtime_ns)]

    def make_room(self, label: str) -> Path:
        """The (empty, not yet created) directory of a new snapshot ``label``."""
        target = self.root / label
        if target.exists():
            shutil.rmtree(target)
        marker(target).unlink(missing_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        if label in self.order:
            self.order.remove(label)
        self.order.append(label)
        return target

    def prune(self, keep: str) -> None:
        """Delete local snapshots no longer useful, never one an upload may still read.

        Uploads of one task finish in order, so every snapshot older than the newest
        uploaded one is finished (uploaded, or failed: useless). Keep the newest
        ``retained`` uploaded ones and everything newer than the newest uploaded.
        """
        self.order = [n for n in self.order if (self.root / n).is_dir()]
        dirs = [self.root / n for n in self.order if n != keep]
        uploaded = [d for d in dirs if marker(d).exists()]
        if not uploaded:
            return
        newest_uploaded = dirs.index(uploaded[-1])
        keep_uploaded = set(uploaded[-max(0, self.retained - 1) :] if self.retained > 1 else [])
        for d in dirs[: newest_uploaded + 1]:
            if d not in keep_uploaded:
                shutil.rmtree(d, ignore_errors=True)
                marker(d).unlink(missing_ok=True)
