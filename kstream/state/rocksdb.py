"""Keyed state on RocksDB (``rocksdict``): one DB per task, a column family per table.

Local layout of one task directory ``path``::

    path/db/                     the live RocksDB instance
    path/snapshots/<label>/      snapshots taken by snapshot_sync: RocksDB checkpoints
                                 (hard links), or a base's files and deltas/
    path/base/, path/deltas/     the last full snapshot and the deltas since it
                                 (``kstream.state.delta``)

The tables and their write cache: ``kstream.state.rocksdb_table``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

import rocksdict

from kstream.checkpointstorage.layout import CHECKPOINT_LABEL, snapshot_label
from kstream.state.base import SnapshottingBackend, StateTable, TableSpec
from kstream.state.delta import (
    OP_DELETE,
    OP_PUT,
    DeltaChain,
    DeltaPolicy,
    DeltaWriter,
    decompress,
    read_delta,
)
from kstream.state.localsnapshot import LocalSnapshot, LocalSnapshots
from kstream.state.rocksdb_options import cf_options, db_options, task_table, write_options
from kstream.state.rocksdb_resources import StateResources, default_resources
from kstream.state.rocksdb_table import RocksDBTable
from kstream.state.tablehost import NO_CF, Clock, StateError

__all__ = ["RocksDBBackend", "RocksDBTable", "StateError"]


class RocksDBBackend(SnapshottingBackend):
    """All keyed state of one task in one RocksDB instance under ``path``.

    ``cache_entries`` bounds each table's write cache; ``clock`` (seconds) drives
    TTLs; ``local_retained`` is how many local snapshots are kept for task-local
    recovery (older ones are deleted when a new one is taken, so an upload must
    finish before ``local_retained`` newer snapshots are taken); ``deltas`` says when
    ``snapshot_sync(deltas=True)`` takes a full snapshot instead of a delta.
    ``resources``: the block cache, memtable budget and checkpoint threads this DB
    shares with the worker's other DBs (default: the process's).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        cache_entries: int = 100_000,
        clock: Clock = time.time,
        local_retained: int = 2,
        deltas: DeltaPolicy | None = None,
        resources: StateResources | None = None,
    ) -> None:
        if cache_entries < 1:
            raise ValueError(f"cache_entries must be >= 1, got {cache_entries}")
        self.path = Path(path)
        self.db_path = self.path / "db"
        self.snapshot_root = self.path / "snapshots"
        self.cache_entries = cache_entries
        self.clock = clock
        self.resources = resources or default_resources()
        # A task that never writes state (a stateless stage's: its own tables are made
        # once written) never opens RocksDB: no DB files, an empty snapshot, an empty
        # restore. At 1024 partitions that is half a worker's tasks, and opening a DB per
        # task was 65 % of restoring 512 fresh tasks (benchmarks/SCALING.md).
        self._db: rocksdict.Rdict | None = None
        existing: list[str] = []
        if (self.db_path / "CURRENT").exists():
            existing = self._open()
        self._cfs: set[str] = set(existing)
        self._tables: dict[str, RocksDBTable] = {}
        self._closed = False
        self._checkpointing: Future[None] | None = None  # the one being created
        self._write_error: Exception | None = None  # its writing of the cached writes failed
        self._local = LocalSnapshots(self.snapshot_root, local_retained)
        self._chain = DeltaChain(self.path, deltas)
        self._logging = False  # tables log their changes for the next delta (a base exists)

    def _open(self) -> list[str]:
        """Open (or create) the DB; the names of its column families."""
        self.db_path.mkdir(parents=True, exist_ok=True)
        opts = db_options(self.resources)
        existing: list[str] = []
        if (self.db_path / "CURRENT").exists():
            existing = [
                n for n in rocksdict.Rdict.list_cf(str(self.db_path), opts) if n != "default"
            ]
        self._db = rocksdict.Rdict(
            str(self.db_path),
            opts,
            column_families={n: cf_options(self.resources, n) for n in existing},
        )
        self._db.set_write_options(write_options())
        return existing

    @property
    def _rdb(self) -> rocksdict.Rdict:
        """The DB, opened now if it was not yet."""
        if self._db is None:
            self._open()
        assert self._db is not None
        return self._db

    @property
    def opened(self) -> bool:
        """Whether the DB is open (state was written or restored)."""
        return self._db is not None

    def table(self, spec: TableSpec) -> RocksDBTable:
        """The table for ``spec`` (a column family named ``spec.name``; the task's own
        tables, ``rocksdb_options.task_table``, get theirs when first written)."""
        t = self._tables.get(spec.name)
        if t is not None:
            if t.spec != spec:
                raise StateError(
                    f"table {spec.name!r} is already open as {t.spec}; cannot reopen it as {spec}"
                )
            return t
        if spec.name == "default" or not spec.name:
            raise StateError(f"invalid table name {spec.name!r}")
        if spec.name not in self._cfs and task_table(spec.name):  # made once written
            t = RocksDBTable(self, spec, NO_CF, None)
        else:
            t = RocksDBTable(self, spec, *self.column_family(spec.name))
        self._tables[spec.name] = t
        return t

    def column_family(self, name: str) -> tuple[rocksdict.Rdict, Any]:
        """Table ``name``'s column family, made now if missing, and its handle."""
        return self._column_family(name), self._rdb.get_column_family_handle(name)

    def _column_family(self, name: str) -> rocksdict.Rdict:
        if name in self._cfs:
            return self._rdb.get_column_family(name)
        self.settle()
        cf = self._rdb.create_column_family(name, cf_options(self.resources, name))
        self._cfs.add(name)
        opened = self._tables.get(name)
        if opened is not None and opened._cf is NO_CF:  # (a delta applied under it)
            opened._cf, opened._handle = cf, self._rdb.get_column_family_handle(name)
        return cf

    def tables(self) -> dict[str, StateTable]:
        return dict(self._tables)

    def stored_tables(self) -> list[str]:
        """Names of every column family in the DB, opened as a table or not."""
        return sorted(self._cfs)

    def flush(self) -> int:
        """Write every table's cache to RocksDB; returns the number of entries written."""
        return sum(t.flush() for t in self._tables.values())

    def purge_expired(self) -> int:
        """Sweep every open TTL table; returns the number of expired entries deleted."""
        return sum(t.purge_expired() for t in self._tables.values())

    @property
    def sequence_number(self) -> int:
        """RocksDB's latest sequence number (after cached writes are flushed)."""
        return 0 if self._db is None else int(self._db.latest_sequence_number())

    def snapshot_sync(
        self,
        checkpoint_id: int,
        label: str | None = None,
        *,
        background: bool = False,
        deltas: bool = False,
    ) -> LocalSnapshot:
        """Synchronous part of a snapshot: flush the cache, take a RocksDB checkpoint.

        The checkpoint is hard links into ``snapshots/<label>`` (``label`` defaults
        to ``chk-<checkpoint_id>``) and is immutable; processing may continue at
        once while ``SnapshotUploader`` uploads it. Older local snapshots beyond
        ``local_retained`` are deleted.

        ``deltas``: unless the backend's ``DeltaPolicy`` wants a full one, the snapshot
        is a delta (``kstream.state.delta``): what changed since the last snapshot is
        encoded into a delta file and the write cache stays cached; the directory holds
        the last full snapshot's files and the delta files since it.

        ``background``: only encoding the write cache (into batches or a delta) is
        synchronous; writing batches to RocksDB (the GIL released), the RocksDB
        checkpoint (a memtable flush, hard links, a few synced files: I/O waits), writing
        a delta, linking and pruning run on a checkpoint thread of the worker's
        (``resources.checkpoints()``), and the snapshot's
        ``ready`` is done when they are. The state it holds is still this call's: the
        batches' writes stay readable from the tables (``_pending``) until then, and
        every later write to RocksDB (a cache flush, a range deletion, a new table) and
        every scan first waits for it (``settle``), while point reads go on.
        """
        label = label or snapshot_label(CHECKPOINT_LABEL, checkpoint_id)
        t0 = time.perf_counter()
        self.settle()
        for t in self._tables.values():
            t.materialize()  # a table holding changes has its column family in the snapshot
        if self._db is None:  # no state was ever written: an empty snapshot, no RocksDB
            self._chain.drop()
            target = self.snapshot_root / label
            job = partial(self._empty, target, label)
            return self._run(job, background, checkpoint_id, label, target, 0, (), t0)
        tables = tuple(sorted(self._cfs))
        # A delta also carries what cache flushes wrote to RocksDB since the last snapshot:
        # past a cache's worth, RocksDB has most of the changes already and a full
        # snapshot costs less than encoding them again (state much larger than the cache).
        flushed = sum(t.flushed_since_snapshot() for t in self._tables.values())
        if deltas and self._chain.sequence is not None and flushed <= self.cache_entries:
            out = DeltaWriter()
            for t in self._tables.values():
                t.take_delta(out)
            data = out.data() if out.records else None
            if self._chain.allows(len(data) if data else 0):
                name, files = self._chain.add(len(data)) if data else (None, self._chain.files)
                target = self.snapshot_root / label  # made room for by the job
                ranged = [t._cf for t in self._tables.values() if t.memtable_ranges]
                for t in self._tables.values():
                    t.memtable_ranges = 0
                job = partial(self._write_delta, target, label, files, name, data, ranged)
                seq = self._chain.sequence
                return self._run(job, background, checkpoint_id, label, target, seq, tables, t0)
        # 1. Cached writes into RocksDB, so the checkpoint holds all state: here, or
        #    (background) as batches the checkpoint's thread writes first.
        batches: list[rocksdict.WriteBatch] = []
        if background:
            for t in self._tables.values():
                batch = t.take_batch(pending=True)
                if batch is not None:
                    batches.append(batch)
        else:
            self.flush()
            self.settle()
        # RocksDB gives each operation of a batch the next sequence number.
        seq = self.sequence_number + sum(int(b.len()) for b in batches)
        self._logging = deltas  # changes from here on go into the next delta
        for t in self._tables.values():
            t._log, t.memtable_ranges = [], 0  # (the RocksDB checkpoint flushes memtables)
        if deltas:
            self._chain.start(seq)
        else:
            self._chain.drop()
        # 2. RocksDB checkpoint: flushes memtables and hard-links the live SSTs.
        target = self.snapshot_root / label  # made room for by the job
        job = partial(self._checkpoint, self._rdb, target, label, batches, deltas)
        return self._run(job, background, checkpoint_id, label, target, seq, tables, t0)

    def _run(
        self,
        job: Callable[[], None],
        background: bool,
        checkpoint_id: int,
        label: str,
        target: Path,
        seq: int,
        tables: tuple[str, ...],
        t0: float,
    ) -> LocalSnapshot:
        """Run a snapshot's ``job`` here or on a checkpoint thread (``background``)."""
        ready: Future[None] | None = None
        if background:
            ready = self._checkpointing = self.resources.checkpoints().submit(job)
        else:
            try:
                job()
            except BaseException:
                self._chain.drop()
                raise
        sync_ms = (time.perf_counter() - t0) * 1000
        return LocalSnapshot(checkpoint_id, label, target, seq, tables, sync_ms, ready=ready)

    def _checkpoint(
        self,
        db: rocksdict.Rdict,
        target: Path,
        label: str,
        batches: list[rocksdict.WriteBatch],
        base: bool,
    ) -> None:
        self._local.make_room(label)  # (file system calls: not on the processing thread)
        for batch in batches:
            try:
                db.write(batch)
            except Exception as e:
                self._write_error = e
                raise
        rocksdict.Checkpoint(db).create_checkpoint(str(target))
        if base:
            self._chain.set_base(target)
        self._local.prune(keep=label)

    def _empty(self, target: Path, label: str) -> None:
        self._local.make_room(label)
        target.mkdir(parents=True)
        self._local.prune(keep=label)

    def _write_delta(
        self,
        target: Path,
        label: str,
        files: list[str],
        name: str | None,
        data: bytes | None,
        ranged: list[rocksdict.Rdict],
    ) -> None:
        self._local.make_room(label)
        self._chain.write_snapshot(target, files, name, data)
        for cf in ranged:  # range tombstones out of the memtables (RocksDB waits: settle)
            cf.flush()
        self._local.prune(keep=label)

    def apply_delta(self, content: bytes, where: str) -> int:
        """Write a delta file's changes (``kstream.state.delta``) in one batch; returns
        how many changes it had. DeltaError (naming ``where``) if it is malformed:
        then nothing is written."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        handles: dict[str, Any] = {}
        n = 0
        for table, op, a, b in read_delta(decompress(content, where), where):
            handle = handles.get(table)
            if handle is None:
                self._column_family(table)
                handle = handles[table] = self._rdb.get_column_family_handle(table)
            if op == OP_PUT:
                batch.put(a, b, handle)
            elif op == OP_DELETE:
                batch.delete(a, handle)
            else:
                batch.delete_range(a, b, handle)
            n += 1
        self.settle()
        self._rdb.write(batch)
        return n

    @property
    def logging(self) -> bool:
        """The tables log their changes for the next delta (a base snapshot exists)."""
        return self._logging

    def write(self, batch: rocksdict.WriteBatch) -> None:
        """Write a table's ``batch``, once a checkpoint created in the background is done."""
        self.settle()
        self._rdb.write(batch)

    def settle(self) -> None:
        """Wait for a checkpoint being created in the background (RocksDB must not change
        under it). A failed checkpoint is not raised here (the snapshot's upload reports
        it; the next snapshot is full); failed writes of its batches are (StateError:
        RocksDB lacks state)."""
        pending = self._checkpointing
        if pending is None:
            return
        self._checkpointing = None
        if pending.exception() is not None:
            self._chain.drop()
        for t in self._tables.values():
            t._pending = {}
        failed, self._write_error = self._write_error, None
        if failed is not None:  # RocksDB lacks writes the tables' caches gave up: unusable
            raise StateError(
                f"writing a snapshot's cached writes to RocksDB at {self.db_path} failed: "
                f"{failed}; restore the task from a checkpoint"
            ) from failed

    def close(self) -> None:
        """Flush the cache and close the DB (idempotent)."""
        if self._closed:
            return
        self.flush()
        self.settle()
        for t in self._tables.values():
            t._detach()
        self._tables.clear()
        if self._db is not None:
            self._db.close()
        self._closed = True
