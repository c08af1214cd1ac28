"""The local snapshots of the last completed checkpoint, as the query sidecar reads them.

When a checkpoint completes, the worker names its tasks' local snapshots of it in the
*pending* file, ``<root>/pending``. The sidecar *pins* each (uploaded) one: hard links
of its files in ``<root>/<task>/chk-<n>/`` (the task's own copy may be pruned
meanwhile; its files are immutable), then says so in the *pointer*, ``<root>/current``,
a small JSON file replaced atomically: the checkpoint, the worker's member id, and per
task the directory pinned (what a sidecar started again opens first). The sidecar
(:class:`PinnedViews`) does this and follows the pointer in steps of a fraction of a
millisecond (:meth:`PinnedViews.step`), which the thread that answers lookups takes
between its answers — no second thread takes the GIL from it: opens each new directory
(:class:`~kstream.state.snapshotview.SnapshotView`, on the previous one's base when it
extends it), swaps the views in for the reads, and deletes the directories no view
reads any more (it alone deletes them while it runs).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kstream.state.localsnapshot import marker
from kstream.state.snapshotview import SnapshotView
from kstream.state.steps import Steps, drain

log = logging.getLogger(__name__)

POINTER = "current"
PENDING = "pending"  # the newest completed checkpoint, written before its pins
POLL_S = 0.01  # how often the sidecar looks at the pending file and the pointer (step)
RETIRE_S = 2.0  # a replaced view is closed this long after (a read in flight ends first)


def _replace(path: Path, body: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def write_pointer(root: Path, checkpoint: int, worker: str, tasks: dict[str, Path]) -> None:
    """Say that ``tasks``' snapshots of ``checkpoint`` are pinned (atomically)."""
    body = {
        "checkpoint": checkpoint,
        "worker": worker,
        "tasks": {t: str(d) for t, d in tasks.items()},
    }
    _replace(root / POINTER, body)


def write_pending(root: Path, checkpoint: int, worker: str, sources: dict[str, Path]) -> None:
    """Say that ``checkpoint`` completed and the snapshots of it in ``sources`` (task ->
    its local snapshot) are to be pinned: until the pointer names it, a lookup of one of
    those tasks waits for it (``PinnedViews.wait``) rather than going to the worker,
    which would read the checkpoint store."""
    body = {"checkpoint": checkpoint, "worker": worker,
            "tasks": {t: str(d) for t, d in sorted(sources.items())}}  # fmt: skip
    _replace(root / PENDING, body)


def pin_all(root: Path, checkpoint: int, worker: str, sources: dict[str, Path]) -> Steps[None]:
    """Pin the uploaded snapshots of ``sources`` (a step each) and point to them."""
    pinned: dict[str, Path] = {}
    for task, source in sources.items():
        if marker(source).exists():  # (uploaded: whole, and what the store holds)
            got = pin(source, root, task)
            if got is not None:
                pinned[task] = got
            yield
    write_pointer(root, checkpoint, worker, pinned)


def pin(source: Path, root: Path, task: str) -> Path | None:
    """Hard links of the local snapshot in ``source`` under ``root/task/``; None if it is
    gone (pruned meanwhile) or not whole."""
    target = root / task / source.name
    if target.is_dir():
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for dirpath, _dirs, files in os.walk(source):
            into = tmp / Path(dirpath).relative_to(source)
            into.mkdir(parents=True, exist_ok=True)
            for f in files:
                os.link(Path(dirpath) / f, into / f)
        if not (tmp / "CURRENT").is_file():
            raise FileNotFoundError(source / "CURRENT")
        tmp.rename(target)
    except OSError as e:
        log.debug("pinning %s for queries failed: %s", source, e)
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    return target


def _checkpoint_of(name: str) -> int | None:
    head, _, n = name.partition("-")
    return int(n) if head == "chk" and n.isdigit() else None


@dataclass
class Pinned:
    """What the reads see: the checkpoint, the worker and a view per task."""

    checkpoint: int | None = None
    worker: str = ""
    views: dict[str, SnapshotView] = field(default_factory=dict)


class PinnedViews:
    """The sidecar's views of the pinned snapshots (module doc); ``current`` is read
    without a lock (one reference, swapped whole)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.current = Pinned()
        self._seen: tuple[int, int] | None = None
        self._retired: list[tuple[float, SnapshotView, bool]] = []  # (when, view, its base too)
        self.pending: tuple[int, frozenset[str]] = (-1, frozenset())
        self._pending_seen: tuple[int, int] | None = None
        self._pending_lock = threading.Lock()
        self._to_pin: dict[str, Any] | None = None
        self._changed = threading.Condition()
        self._work: Steps[None] | None = None  # what ``step`` goes on with

    def start(self) -> PinnedViews:
        """Open what the pointer names now (a sidecar started again after one died:
        it answers from its first lookup on); then follow it with ``step``."""
        try:
            self.read_pending()
            self.pin_pending()
            self.refresh()
        except Exception:
            log.exception("opening the pinned snapshots for queries failed")
        return self

    def step(self) -> bool:
        """One step of following the pending file and the pointer: pinning a snapshot,
        a slice of opening one (well under a millisecond; a new base's RocksDB open 1-2
        ms), the swap. Whether there is more to do at once; else call again within
        ``POLL_S`` (it then looks for a change: two ``stat`` calls). One thread only."""
        try:
            if self._work is None:
                self.read_pending()
                self._work = self._following()
            next(self._work)
            return True
        except StopIteration:
            self._work = None
        except Exception:  # a bad pointer: the worker answers until the next one
            self._work = None
            log.exception("following the pinned snapshots for queries failed")
            self._swap(Pinned())
        return False

    def _following(self) -> Steps[None]:
        yield from self._pinning()
        yield from self._refreshing()

    def read_pending(self) -> None:
        """Follow the pending file if it changed (any thread)."""
        with self._pending_lock:
            try:
                st = os.stat(self.root / PENDING)
            except FileNotFoundError:
                return
            if (st.st_mtime_ns, st.st_ino) != self._pending_seen:
                body = json.loads((self.root / PENDING).read_text())
                self.pending = (int(body["checkpoint"]), frozenset(body["tasks"]))
                self._to_pin = body
                self._pending_seen = (st.st_mtime_ns, st.st_ino)

    def pin_pending(self) -> None:
        """Pin the snapshots the pending file names, once, now."""
        drain(self._pinning())

    def _pinning(self) -> Steps[None]:
        with self._pending_lock:  # (read_pending runs on lookups' threads too)
            body, self._to_pin = self._to_pin, None
        if body is not None:
            sources = {t: Path(d) for t, d in body["tasks"].items()}
            yield from pin_all(self.root, int(body["checkpoint"]), str(body["worker"]), sources)

    def expects(self, task: str) -> bool:
        """Whether a newer snapshot of ``task`` than the views' is being pinned."""
        n, tasks = self.pending
        current = self.current.checkpoint
        return task in tasks and (current is None or current < n)

    def wait(self, task: str, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until the views are of the pending checkpoint."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.expects(task) and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)

    def refresh(self) -> bool:
        """Follow the pointer now if it changed; whether it did."""
        return drain(self._refreshing())

    def _refreshing(self) -> Steps[bool]:
        try:
            st = os.stat(self.root / POINTER)
        except FileNotFoundError:
            return False
        stamp = (st.st_mtime_ns, st.st_ino)
        if stamp == self._seen:
            yield from self._retiring()
            return False
        self._seen = stamp
        body = json.loads((self.root / POINTER).read_text())
        old = self.current
        views: dict[str, SnapshotView] = {}
        try:
            for task, directory in body["tasks"].items():
                prev = old.views.get(task)
                try:
                    if prev is not None and prev.directory == Path(directory):
                        views[task] = prev
                    else:
                        views[task] = yield from SnapshotView.opening(directory, prev)
                except Exception:  # the worker answers for the task (never an older checkpoint)
                    log.exception("opening %s for queries failed", directory)
        except BaseException:  # (closed half way: what was opened for it goes)
            for task, view in views.items():
                if view is not old.views.get(task):
                    view.close(base=not any(view.shares_base(v) for v in old.views.values()))
            raise
        self._swap(Pinned(int(body["checkpoint"]), str(body.get("worker", "")), views))
        return True

    def _swap(self, pinned: Pinned) -> None:
        """Read ``pinned`` from now on; retire the views it does not keep."""
        old, self.current = self.current, pinned
        with self._changed:
            self._changed.notify_all()
        now = time.monotonic()
        kept = list(pinned.views.values())
        for task, prev in old.views.items():
            new = pinned.views.get(task)
            if new is not prev:
                shared = any(v.shares_base(prev) for v in kept)
                self._retired.append((now, prev, not shared))

    def _retiring(self) -> Steps[None]:
        """Close the views retired ``RETIRE_S`` ago, then delete the directories no view
        reads (a step each)."""
        now, closed = time.monotonic(), False
        while self._retired and now - self._retired[0][0] >= RETIRE_S:  # (oldest first)
            _, view, base = self._retired.pop(0)
            view.close(base=base)
            closed = True
            yield
        if not closed:
            return
        views = [*self.current.views.values(), *(v for _, v, _ in self._retired)]
        used = {v.directory for v in views} | {v.base_directory for v in views}
        newest = self.current.checkpoint
        for task_dir in [d for d in self.root.iterdir() if d.is_dir()]:
            for d in list(task_dir.iterdir()):
                n = _checkpoint_of(d.name)
                if d not in used and n is not None and newest is not None and n < newest:
                    shutil.rmtree(d, ignore_errors=True)  # (newer ones: not pointed to yet)
                    yield

    def close(self) -> None:
        """Close every view (no ``step`` runs now or later)."""
        if self._work is not None:
            self._work.close()
            self._work = None
        old, self.current = self.current, Pinned()
        for view in old.views.values():
            self._retired.append((0.0, view, True))
        bases: set[Path] = set()
        for _, view, _ in self._retired:  # each base once
            view.close(base=view.base_directory not in bases)
            bases.add(view.base_directory)
        self._retired = []
