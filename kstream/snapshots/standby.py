"""Standby copies (``--standby-replicas``, docs/design.md "Standby copies"): a worker keeps
the latest completed checkpoint's snapshot of tasks it does not run on local disk, so
that when one of them moves here (a crash or a stop of its owner) the restore reuses the
files (task-local recovery, :mod:`kstream.snapshots.restore`) instead of downloading them.

Which tasks: the caller's (:mod:`kstream.protocol.placement`), set with ``want``. When:
``completed(n)`` after each completed checkpoint; one background thread then reads the
checkpoint's metadata and each wanted task's manifest, and builds the snapshot in
``<state_root>/<task>/snapshots/<label>/`` — the directory a restore looks in first —
hard-linking the files it already has (the previous copy's: incremental checkpoints
share most SSTs) and downloading only the others, one file at a time, at most
``bandwidth`` bytes per second, each checked against its SHA-256. It never runs on the
processing thread and the processing thread never waits for a download: ``want``,
``completed`` and ``claim`` only take a lock that the thread holds for renames.

A copy is built in a staging directory and renamed in whole; the previous copy of the
task is then deleted (one copy per task), and every copy of a task no longer wanted is
deleted (the copies carry a ``<label>.standby`` mark: only those are ever deleted here).
``claim(tasks)``: the tasks this worker restores and runs from now on — the thread does
not touch their directories any more (a restore reads them; the task's own snapshots
take over from there). A copy that could not be built (a file already collected by
retention, the store unreachable, a checksum mismatch) is logged and retried at the
next completed checkpoint.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kstream.checkpointstorage.base import CheckpointStore, StoreError
from kstream.checkpointstorage.metadata import MetadataError, read_metadata
from kstream.snapshots.restore import CorruptSnapshotError, download_file, place_file
from kstream.snapshots.upload import FileEntry, SnapshotManifest, read_manifest, sha256_file
from kstream.state.delta import DIR as DELTA_DIR
from kstream.state.localsnapshot import mark_uploaded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Copy:
    """A task's complete copy: its label and its files' SHA-256 by name, as the
    manifest it was made from gives them."""

    label: str
    files: dict[str, str]


MARK = ".standby"  # ``<label>.standby`` beside a copy this module made
DEFAULT_BANDWIDTH = 64 * 1024 * 1024  # bytes/s a worker's standby downloads take at most


@dataclass
class StandbyStats:
    """What the standby copies cost so far (read by tests and benchmarks)."""

    copies: int = 0  # copies completed
    files_downloaded: int = 0
    bytes_downloaded: int = 0
    files_linked: int = 0  # reused from a local copy
    failures: int = 0
    deleted: int = 0  # copies deleted (replaced, or their task no longer wanted)


def standby_marks(task_dir: Path) -> list[Path]:
    """The copies this module made in ``task_dir`` (their directories)."""
    root = task_dir / "snapshots"
    if not root.is_dir():
        return []
    return [m.with_suffix("") for m in root.glob(f"*{MARK}")]


class StandbyCopies:
    """Keeps the wanted tasks' latest completed snapshots in ``state_root`` (module
    docstring). ``start()`` runs it on a thread; tests call ``refresh()`` instead."""

    def __init__(
        self,
        store: CheckpointStore,
        app_id: str,
        state_root: Path,
        *,
        bandwidth: float | None = DEFAULT_BANDWIDTH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.app_id = app_id
        self.root = state_root
        self.bandwidth = bandwidth
        self.clock = clock
        self.stats = StandbyStats()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._want: frozenset[str] = frozenset()
        self._claimed: frozenset[str] = frozenset()
        self._latest: int | None = None  # the newest completed checkpoint announced
        self._done: int | None = None  # the checkpoint the last refresh went through
        self._want_changed = False
        self._closed = False
        self._copy: dict[str, _Copy] = {}  # task -> its complete copy
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    # ---- the processing thread's side: never waits for a download ------------------------

    def want(self, tasks: Iterable[str]) -> None:
        with self._lock:
            want = frozenset(tasks)
            if want != self._want:
                self._want, self._want_changed = want, True
                self._wake.notify()

    def completed(self, checkpoint_id: int) -> None:
        with self._lock:
            if self._latest is None or checkpoint_id > self._latest:
                self._latest = checkpoint_id
                self._wake.notify()

    def claim(self, tasks: Iterable[str]) -> None:
        """From now on ``tasks`` run here (and are restored first): leave their files alone."""
        with self._lock:
            self._claimed = frozenset(tasks)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="standby", daemon=True)
        self._thread.start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # ---- the background thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._due():
                    self._wake.wait()
                if self._closed:
                    return
            try:
                self.refresh()
            except Exception:  # a bug: logged, the worker goes on without fresh copies
                log.exception("standby copies: refresh failed")
                self.stats.failures += 1

    def _due(self) -> bool:
        return self._want_changed or (self._latest is not None and self._latest != self._done)

    def refresh(self) -> None:
        """Bring every wanted task's copy to the newest completed checkpoint announced, and
        delete the copies no longer wanted."""
        with self._lock:
            want, checkpoint = self._want - self._claimed, self._latest
            cleanup, self._want_changed = self._want_changed, False
        if cleanup:
            self._delete_unwanted(want)
        if checkpoint is None or not want:
            with self._lock:
                self._done = checkpoint
            return
        try:
            meta = read_metadata(self.store, self.app_id, checkpoint)
        except MetadataError as e:
            log.warning("standby copies: checkpoint %d: %s", checkpoint, e)
            self.stats.failures += 1
            with self._lock:
                self._done = checkpoint
            return
        for task in sorted(want):
            snap = meta.tasks.get(task)
            if snap is None or not snap.handle or self._closing():
                continue
            try:
                self._refresh_task(task, snap.handle)
            except (StoreError, CorruptSnapshotError, ValueError, OSError) as e:
                log.info("standby copy of task %s at checkpoint %d: %s", task, checkpoint, e)
                self.stats.failures += 1
        with self._lock:
            self._done = checkpoint

    def _closing(self) -> bool:
        with self._lock:
            return self._closed

    def _refresh_task(self, task: str, handle: str) -> None:
        manifest = read_manifest(self.store, handle)
        copy = self._copy.get(task)
        if copy is not None and copy.label == manifest.label:
            return
        task_dir = self.root / task
        target = task_dir / "snapshots" / manifest.label
        if target.is_dir():  # there already (the task's own, or a copy of an earlier run)
            self._install(task, manifest, None)
            return
        stage = task_dir / f".standby-{uuid.uuid4().hex}"
        (stage / DELTA_DIR).mkdir(parents=True)
        try:
            for entry in manifest.files:
                if self._claimed_now(task):
                    return
                if not self._link_local(task_dir, task, entry, stage):
                    self._download(manifest, handle, entry, stage)
            self._install(task, manifest, stage)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)

    def _claimed_now(self, task: str) -> bool:
        with self._lock:
            return task in self._claimed or self._closed

    def _link_local(self, task_dir: Path, task: str, entry: FileEntry, stage: Path) -> bool:
        """Put a local copy of ``entry`` into ``stage``: from this task's previous copy
        when that copy's manifest gave the file under this name the same checksum (its
        files were checked when it was made: no hashing here), else from any other local
        snapshot of the task whose file's checksum matches. Not by name and size alone:
        ``CURRENT`` has the same name and size in every snapshot, and other content once
        the task's DB was opened again (restored, or moved away and back)."""
        root = task_dir / "snapshots"
        previous = self._copy.get(task)
        if previous is not None and previous.files.get(entry.name) == entry.sha256:
            src = root / previous.label / entry.name
            if src.is_file() and src.stat().st_size == entry.size:
                return self._place(src, stage / entry.name, entry)
        if not root.is_dir():
            return False
        for d in root.iterdir():
            src = d / entry.name
            if (
                d.name != (previous.label if previous is not None else None)
                and src.is_file()
                and src.stat().st_size == entry.size
                and sha256_file(src) == entry.sha256
            ):
                return self._place(src, stage / entry.name, entry)
        return False

    def _place(self, src: Path, dst: Path, entry: FileEntry) -> bool:
        place_file(src, dst, entry)
        self.stats.files_linked += 1
        return True

    def _download(
        self, manifest: SnapshotManifest, handle: str, entry: FileEntry, stage: Path
    ) -> None:
        t0 = self.clock()
        download_file(self.store, manifest, handle, entry, stage)  # checked as a restore does
        self.stats.files_downloaded += 1
        self.stats.bytes_downloaded += entry.size
        if self.bandwidth:  # at most ``bandwidth`` bytes/s: wait out the rest of this file's share
            rest = entry.size / self.bandwidth - (self.clock() - t0)
            if rest > 0:
                self._stopped.wait(rest)  # (a close ends it)

    def _install(self, task: str, manifest: SnapshotManifest, stage: Path | None) -> None:
        """Rename ``stage`` to the task's copy of ``manifest`` (None: that directory is
        there already) and set the previous copy aside for deletion — unless the task was
        claimed meanwhile."""
        label = manifest.label
        root = self.root / task / "snapshots"
        trash: list[Path] = []
        with self._lock:
            if task in self._claimed or self._closed:
                return
            if stage is not None:
                root.mkdir(parents=True, exist_ok=True)
                target = root / label
                os.replace(stage, target)
                mark_uploaded(target)
                target.with_name(label + MARK).touch()
                self.stats.copies += 1
            for old in standby_marks(self.root / task):
                if old.name != label:
                    trash.append(self._set_aside(old))
            self._copy[task] = _Copy(label, {e.name: e.sha256 for e in manifest.files})
        self._delete(trash)

    def _set_aside(self, copy: Path) -> Path:
        """Move a copy out of the task's snapshots (under the lock), to delete after."""
        aside = copy.parent.parent / f".deleted-{uuid.uuid4().hex}"
        if copy.is_dir():
            os.replace(copy, aside)
        for suffix in (MARK, ".uploaded"):
            copy.with_name(copy.name + suffix).unlink(missing_ok=True)
        return aside

    def _delete(self, paths: list[Path]) -> None:
        for p in paths:
            shutil.rmtree(p, ignore_errors=True)
            self.stats.deleted += 1

    def _delete_unwanted(self, want: frozenset[str]) -> None:
        """Delete every copy made here of a task no longer wanted (nor claimed)."""
        if not self.root.is_dir():
            return
        trash: list[Path] = []
        with self._lock:
            for task_dir in self.root.iterdir():
                task = task_dir.name
                if task in want or task in self._claimed or not task_dir.is_dir():
                    continue
                for copy in standby_marks(task_dir):
                    trash.append(self._set_aside(copy))
                self._copy.pop(task, None)
        self._delete(trash)
