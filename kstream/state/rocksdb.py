"""Keyed state on RocksDB (``rocksdict``): one DB per task, a column family per table.

Local layout of one task directory ``path``::

    path/db/                     the live RocksDB instance
    path/snapshots/chk-<n>/      RocksDB checkpoints (hard links) taken by snapshot_sync

Keys are encoded with ``kstream.state.keys`` (order-preserving, prefix-friendly),
values as ``kstream.state.valueformat`` says.

A *write cache* sits in front of RocksDB: ``put``/``delete`` land in a per-table
dict of decoded Python objects; ``get`` looks there first. The cache is encoded
into one WriteBatch and written when a table's cache exceeds ``cache_entries``
entries, before that table is scanned, and before a snapshot. The counters and
deletions written stay readable from memory (the *read cache*: the newest
``cache_entries`` compact ints and tombstones flushed, dropped by a range deletion
over them): a snapshot every second must not turn every counter's next ``get``
into a RocksDB read and a decode (tables without TTL). A worker's snapshot leaves
writing the batches to the checkpoint's thread; until it wrote them they are read
from the table (``_pending``), and scans and later writes wait for it. Writes skip the WAL:
durability comes from snapshots, never from the live DB (a crashed task restores
from a snapshot, DESIGN §6.3).

TTL: entries of a table with ``TableSpec.ttl`` whose last write is older than the
TTL (by the injected clock) are invisible to ``get``/``scan``; ``get`` deletes them
lazily and ``purge_expired`` sweeps whole tables (call it from a timer).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import Any

import rocksdict

from kstream.serde import JsonSerde
from kstream.state.base import KeyedStateBackend, StateKey, StateTable, TableSpec
from kstream.state.keys import decode_key, encode_key, prefix_upper_bound
from kstream.state.localsnapshot import LocalSnapshot, marker
from kstream.state.rocksdb_options import cf_options, db_options, write_options
from kstream.state.valueformat import (
    HAS_TIME,
    HEADERS,
    INT_BODIES,
    IS_INT,
    IS_NONE,
    SMALL_INTS,
    TIME,
    int_value,
    value_serde_for,
)
from kstream.store.layout import CHECKPOINT_LABEL, snapshot_label

_TOMBSTONE: Any = object()
_MISSING: Any = object()

Clock = Callable[[], float]
_DROPPED_RANGES = 8  # range deletions checked lazily on read-cache hits, at most


class StateError(RuntimeError):
    """The state backend cannot do what was asked; the message says what and where."""


class _Timed:
    """A cached value of a TTL table together with its write time (seconds)."""

    __slots__ = ("at", "value")

    def __init__(self, value: Any, at: float) -> None:
        self.value = value
        self.at = at


class RocksDBTable(StateTable):
    """One column family behind a write cache; see the module docstring."""

    def __init__(self, backend: RocksDBBackend, spec: TableSpec, cf: rocksdict.Rdict) -> None:
        self.name = spec.name
        self.spec = spec
        self._backend = backend
        self._cf: Any = cf
        self._handle: Any = backend._db.get_column_family_handle(spec.name)
        self._serde = value_serde_for(spec)
        # Ints take the compact body only where the serde would return them as ints.
        self._compact_ints = type(self._serde) is JsonSerde
        self._ttl = spec.ttl
        self._dirty: dict[StateKey, Any] = {}
        # The read cache (no TTL only): entries written by earlier flushes, each with its
        # encoded key (a range deletion drops the entries in its range by it), oldest
        # first, at most ``cache_entries``.
        self._clean: dict[StateKey, Any] = {}
        self._clean_keys: dict[StateKey, bytes] = {}
        self._read_keys: dict[StateKey, bytes] = {}  # encoded keys read since the last flush
        # Range deletions since the read cache was last filtered (merged, [lo, hi) each):
        # a cached entry in one of them is dropped when read (checked lazily: a fire
        # in slices deletes a range per slice, each a full pass over the cache).
        self._dropped: list[tuple[bytes, bytes]] = []
        # The cached writes of a snapshot while a thread writes them to RocksDB
        # (``snapshot_sync(background=True)``), read before the read cache and RocksDB.
        self._pending: dict[StateKey, Any] = {}
        self._limit = backend.cache_entries

    # -- encoding -------------------------------------------------------------

    def _encode_value(self, value: Any, at: float | None) -> bytes:
        if type(value) is int and self._compact_ints:
            compact = int_value(value)
            if compact is not None:
                if at is None:
                    return compact
                return HEADERS[IS_INT | HAS_TIME] + TIME.pack(int(at * 1000)) + compact[1:]
        header = 0
        body = b""
        if value is None:
            header |= IS_NONE
        else:
            data = self._serde.serialize(value)
            body = data if data is not None else b""
        if at is not None:
            return HEADERS[header | HAS_TIME] + TIME.pack(int(at * 1000)) + body
        return HEADERS[header] + body

    def _decode_value(self, raw: bytes, now: float | None) -> Any:
        """The stored value, or _MISSING if it has expired (``now`` given)."""
        header = raw[0]
        pos = 1
        if header & HAS_TIME:
            if now is not None and self._ttl is not None:
                (ms,) = TIME.unpack_from(raw, 1)
                if now - ms / 1000.0 > self._ttl:
                    return _MISSING
            pos = 9
        if header & IS_NONE:
            return None
        if header & IS_INT:
            unpack = INT_BODIES.get(len(raw) - pos)
            if unpack is None:
                raise StateError(
                    f"table {self.name!r}: corrupt stored value {raw!r} (an int body must "
                    "have 1, 2, 4 or 8 bytes); restore the task's state from a checkpoint"
                )
            return unpack(raw, pos)[0]
        return self._serde.deserialize(raw[pos:])

    # -- StateTable -------------------------------------------------------------

    def get(self, key: StateKey, default: Any = None) -> Any:
        entry = self._dirty.get(key, _MISSING)
        if entry is _MISSING and self._pending:
            entry = self._pending.get(key, _MISSING)
        if entry is not _MISSING:
            if entry is _TOMBSTONE:
                return default
            if self._ttl is None:
                return entry.value if type(entry) is _Timed else entry
            if type(entry) is _Timed:
                if self._backend.clock() - entry.at > self._ttl:
                    self._dirty[key] = _TOMBSTONE
                    return default
                return entry.value
            return entry
        entry = self._clean.get(key, _MISSING)
        if entry is not _MISSING:
            if not self._dropped or not self._was_dropped(key):
                return default if entry is _TOMBSTONE else entry
            del self._clean[key], self._clean_keys[key]  # RocksDB has what is current
        ek = encode_key(key)
        raw = self._cf.get(ek)
        if len(self._read_keys) < self._limit:
            self._read_keys[key] = ek  # a put of it usually follows: its flush reuses it
        if raw is None:
            return default
        now = self._backend.clock() if self._ttl is not None else None
        value = self._decode_value(raw, now)
        if value is _MISSING:
            self.delete(key)  # lazy purge of an expired entry
            return default
        return value

    def put(self, key: StateKey, value: Any) -> None:
        d = self._dirty
        d[key] = value if self._ttl is None else _Timed(value, self._backend.clock())
        if len(d) > self._limit:
            self.flush()

    def delete(self, key: StateKey) -> None:
        d = self._dirty
        d[key] = _TOMBSTONE
        if len(d) > self._limit:
            self.flush()

    def scan(self, prefix: StateKey = ()) -> Iterator[tuple[StateKey, Any]]:
        start = encode_key(prefix)
        return self._iterate(start, prefix_upper_bound(start))

    def scan_range(self, start: StateKey, end: StateKey) -> Iterator[tuple[StateKey, Any]]:
        return self._iterate(encode_key(start), encode_key(end))

    def delete_range(self, start: StateKey, end: StateKey) -> None:
        """One RocksDB range deletion; cached writes in the range are dropped with it."""
        lo, hi = encode_key(start), encode_key(end)
        if lo >= hi:
            return
        if self._dirty:
            self._dirty = {k: v for k, v in self._dirty.items() if not lo <= encode_key(k) < hi}
        if self._clean:
            self._drop_cached(lo, hi)
        batch = rocksdict.WriteBatch(raw_mode=True)
        batch.delete_range(lo, hi, self._handle)
        self._backend.settle()
        self._backend._db.write(batch)

    # -- internals ------------------------------------------------------------------

    def _iterate(self, start: bytes, end: bytes | None) -> Iterator[tuple[StateKey, Any]]:
        self.flush()  # scans read RocksDB only, so cached writes go there first
        self._backend.settle()
        opts = rocksdict.ReadOptions()
        if end is not None:
            opts.set_iterate_upper_bound(end)
        # One call per entry into rocksdict (the items iterator) instead of four.
        entries = self._cf.items(from_key=start, read_opt=opts)
        decode = self._decode_value
        if self._ttl is not None:
            now = self._backend.clock()
            for k, raw in entries:
                value = decode(raw, now)
                if value is not _MISSING:
                    yield decode_key(k), value
            return
        int_bodies = INT_BODIES
        for k, raw in entries:  # nothing expires: no _MISSING; compact ints inline
            unpack = int_bodies.get(len(raw) - 1) if raw[0] == IS_INT else None
            if unpack is not None:
                yield decode_key(k), unpack(raw, 1)[0]
            else:
                yield decode_key(k), decode(raw, None)

    def flush(self) -> int:
        """Write this table's cached entries to RocksDB in one batch; returns how many.

        The compact ints and deletions written join the read cache: they read back
        exactly as written (other values go through their serde, which may not
        return an equal object, so they leave it), so the cache never changes what
        ``get`` returns. The read cache keeps the newest ``cache_entries`` of them."""
        batch = self.take_batch()
        if batch is None:
            return 0
        n = int(batch.len())  # (a batch written is consumed)
        self._backend.settle()
        self._backend._db.write(batch)
        return n

    def take_batch(self, *, pending: bool = False) -> rocksdict.WriteBatch | None:
        """The cached writes as one batch (None: none), the cache emptied; the caller
        writes it to RocksDB (``flush``), or (``pending``) has it written by a thread
        while the writes stay readable from ``_pending`` until the backend's ``settle``
        (``RocksDBBackend.snapshot_sync(background=True)``)."""
        dirty = self._dirty
        if not dirty:
            return None
        if pending:
            self._pending = dirty
        batch = rocksdict.WriteBatch(raw_mode=True)
        put, delete, handle = batch.put, batch.delete, self._handle
        encode = self._encode_value
        cacheable = self._ttl is None
        compact_ints = self._compact_ints and cacheable
        clean, clean_keys, read_keys = self._clean, self._clean_keys, self._read_keys
        for key, value in dirty.items():
            ek = read_keys.get(key) or clean_keys.get(key) or encode_key(key)
            if type(value) is int and compact_ints:  # counters: inline, no serde
                compact = SMALL_INTS[value + 0x80] if -0x80 <= value < 0x80 else int_value(value)
                if compact is not None:
                    put(ek, compact, handle)
                    clean[key] = value
                    clean_keys[key] = ek
                    continue
            if value is _TOMBSTONE:
                delete(ek, handle)
                if cacheable:
                    clean[key] = value
                    clean_keys[key] = ek
                continue
            if type(value) is _Timed:
                put(ek, encode(value.value, value.at), handle)
            else:
                at = self._backend.clock() if self._ttl is not None else None
                put(ek, encode(value, at), handle)
            if clean and key in clean:  # an older cached value of this key is stale now
                del clean[key], clean_keys[key]
        self._dirty = {}
        self._read_keys = {}
        excess = len(clean) - self._limit
        if excess > 0:  # the oldest first (insertion order)
            for k in list(islice(clean, excess)):
                del clean[k], clean_keys[k]
        return batch

    def _drop_cached(self, lo: bytes, hi: bytes) -> None:
        """Cached entries in ``[lo, hi)`` are gone: note the range (merged with one it
        overlaps or touches); past a few ranges, filter the cache once."""
        merged = []
        for a, b in self._dropped:
            if a <= hi and lo <= b:
                lo, hi = min(a, lo), max(b, hi)
            else:
                merged.append((a, b))
        merged.append((lo, hi))
        if len(merged) <= _DROPPED_RANGES:
            self._dropped = merged
            return
        gone = [k for k, ek in self._clean_keys.items() if any(a <= ek < b for a, b in merged)]
        for k in gone:
            del self._clean[k], self._clean_keys[k]
        self._dropped = []

    def _was_dropped(self, key: StateKey) -> bool:
        ek = self._clean_keys[key]
        return any(a <= ek < b for a, b in self._dropped)

    def _detach(self) -> None:
        """Drop the column-family handles (they keep the DB open); the table is unusable after."""
        self._clean, self._clean_keys, self._read_keys, self._dropped = {}, {}, {}, []
        self._pending = {}
        self._cf = None
        self._handle = None

    def purge_expired(self) -> int:
        """Delete every entry whose TTL has passed; returns how many were deleted."""
        if self._ttl is None:
            return 0
        self.flush()
        self._backend.settle()
        now = self._backend.clock()
        expired = []
        it = self._cf.iter(rocksdict.ReadOptions())
        it.seek_to_first()
        while it.valid():
            if self._decode_value(it.value(), now) is _MISSING:
                expired.append(it.key())
            it.next()
        if expired:
            batch = rocksdict.WriteBatch(raw_mode=True)
            for k in expired:
                batch.delete(k, self._handle)
            self._backend.settle()
            self._backend._db.write(batch)
        return len(expired)


class RocksDBBackend(KeyedStateBackend):
    """All keyed state of one task in one RocksDB instance under ``path``.

    ``cache_entries`` bounds each table's write cache; ``clock`` (seconds) drives
    TTLs; ``local_retained`` is how many local snapshots are kept for task-local
    recovery (older ones are deleted when a new one is taken, so an upload must
    finish before ``local_retained`` newer snapshots are taken).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        cache_entries: int = 100_000,
        clock: Clock = time.time,
        local_retained: int = 2,
    ) -> None:
        if cache_entries < 1:
            raise ValueError(f"cache_entries must be >= 1, got {cache_entries}")
        self.path = Path(path)
        self.db_path = self.path / "db"
        self.snapshot_root = self.path / "snapshots"
        self.cache_entries = cache_entries
        self.clock = clock
        self.local_retained = local_retained
        self.db_path.mkdir(parents=True, exist_ok=True)
        opts = db_options()
        existing: list[str] = []
        if (self.db_path / "CURRENT").exists():
            existing = [
                n for n in rocksdict.Rdict.list_cf(str(self.db_path), opts) if n != "default"
            ]
        self._db = rocksdict.Rdict(
            str(self.db_path), opts, column_families={n: cf_options() for n in existing}
        )
        self._db.set_write_options(write_options())
        self._cfs: set[str] = set(existing)
        self._tables: dict[str, RocksDBTable] = {}
        self._closed = False
        self._checkpointer: ThreadPoolExecutor | None = None  # background checkpoints
        self._checkpointing: Future[None] | None = None  # the one being created
        self._write_error: Exception | None = None  # its writing of the cached writes failed
        # Local snapshots in creation order (earlier runs' by modification time).
        self._local_order: list[str] = []
        if self.snapshot_root.is_dir():
            found = [d for d in self.snapshot_root.iterdir() if d.is_dir()]
            self._local_order = [d.name for d in sorted(found, key=lambda d: d.stat().st_mtime_ns)]

    def table(self, spec: TableSpec) -> RocksDBTable:
        """The table for ``spec`` (a column family named ``spec.name``)."""
        t = self._tables.get(spec.name)
        if t is not None:
            if t.spec != spec:
                raise StateError(
                    f"table {spec.name!r} is already open as {t.spec}; cannot reopen it as {spec}"
                )
            return t
        if spec.name == "default" or not spec.name:
            raise StateError(f"invalid table name {spec.name!r}")
        if spec.name in self._cfs:
            cf = self._db.get_column_family(spec.name)
        else:
            self.settle()
            cf = self._db.create_column_family(spec.name, cf_options())
            self._cfs.add(spec.name)
        t = RocksDBTable(self, spec, cf)
        self._tables[spec.name] = t
        return t

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
        return int(self._db.latest_sequence_number())

    def snapshot_sync(
        self, checkpoint_id: int, label: str | None = None, *, background: bool = False
    ) -> LocalSnapshot:
        """Synchronous part of a snapshot: flush the cache, take a RocksDB checkpoint.

        The checkpoint is hard links into ``snapshots/<label>`` (``label`` defaults
        to ``chk-<checkpoint_id>``) and is immutable; processing may continue at
        once while ``SnapshotUploader`` uploads it. Older local snapshots beyond
        ``local_retained`` are deleted.

        ``background``: only encoding the write cache into batches is synchronous;
        writing them to RocksDB (the GIL released), the RocksDB checkpoint (a memtable
        flush, hard links, a few synced files: I/O waits) and the pruning run on a
        thread of this backend, and the snapshot's ``ready`` is done when they are. The
        state it holds is still this call's: the batches' writes stay readable from the
        tables (``_pending``) until then, and every later write to RocksDB (a cache
        flush, a range deletion, a new table) and every scan first waits for it
        (``settle``), while point reads go on.
        """
        label = label or snapshot_label(CHECKPOINT_LABEL, checkpoint_id)
        t0 = time.perf_counter()
        # 1. Cached writes into RocksDB, so the checkpoint holds all state: here, or
        #    (background) as batches the checkpoint's thread writes first.
        batches: list[rocksdict.WriteBatch] = []
        if background:
            self.settle()
            for t in self._tables.values():
                batch = t.take_batch(pending=True)
                if batch is not None:
                    batches.append(batch)
        else:
            self.flush()
            self.settle()
        # RocksDB gives each operation of a batch the next sequence number.
        seq = self.sequence_number + sum(int(b.len()) for b in batches)
        # 2. RocksDB checkpoint: flushes memtables and hard-links the live SSTs.
        target = self.snapshot_root / label
        if target.exists():
            shutil.rmtree(target)
        marker(target).unlink(missing_ok=True)
        self.snapshot_root.mkdir(parents=True, exist_ok=True)
        if label in self._local_order:
            self._local_order.remove(label)
        self._local_order.append(label)
        tables = tuple(sorted(self._cfs))
        if not background:
            self._checkpoint(target, label)
            sync_ms = (time.perf_counter() - t0) * 1000
            return LocalSnapshot(checkpoint_id, label, target, seq, tables, sync_ms)
        if self._checkpointer is None:
            self._checkpointer = ThreadPoolExecutor(1, thread_name_prefix="rocksdb-checkpoint")
        self._checkpointing = self._checkpointer.submit(self._checkpoint, target, label, batches)
        sync_ms = (time.perf_counter() - t0) * 1000
        return LocalSnapshot(
            checkpoint_id, label, target, seq, tables, sync_ms, ready=self._checkpointing
        )

    def _checkpoint(
        self, target: Path, label: str, batches: list[rocksdict.WriteBatch] | None = None
    ) -> None:
        for batch in batches or []:
            try:
                self._db.write(batch)
            except Exception as e:
                self._write_error = e
                raise
        rocksdict.Checkpoint(self._db).create_checkpoint(str(target))
        self._prune_local(keep=label)

    def settle(self) -> None:
        """Wait for a checkpoint being created in the background (RocksDB must not change
        under it). A failed checkpoint is not raised here (the snapshot's upload reports
        it); failed writes of its batches are (StateError: RocksDB lacks state)."""
        pending = self._checkpointing
        if pending is None:
            return
        self._checkpointing = None
        pending.exception()
        for t in self._tables.values():
            t._pending = {}
        failed, self._write_error = self._write_error, None
        if failed is not None:  # RocksDB lacks writes the tables' caches gave up: unusable
            raise StateError(
                f"writing a snapshot's cached writes to RocksDB at {self.db_path} failed: "
                f"{failed}; restore the task from a checkpoint"
            ) from failed

    def _prune_local(self, keep: str) -> None:
        """Delete local snapshots no longer useful, never one an upload may still read.

        Uploads of one task finish in order, so every snapshot older than the newest
        uploaded one is finished (uploaded, or failed: useless). Keep the newest
        ``local_retained`` uploaded ones and everything newer than the newest uploaded.
        """
        self._local_order = [n for n in self._local_order if (self.snapshot_root / n).is_dir()]
        dirs = [self.snapshot_root / n for n in self._local_order if n != keep]
        uploaded = [d for d in dirs if marker(d).exists()]
        if not uploaded:
            return
        newest_uploaded = dirs.index(uploaded[-1])
        keep_uploaded = set(
            uploaded[-max(0, self.local_retained - 1) :] if self.local_retained > 1 else []
        )
        for d in dirs[: newest_uploaded + 1]:
            if d not in keep_uploaded:
                shutil.rmtree(d, ignore_errors=True)
                marker(d).unlink(missing_ok=True)

    def close(self) -> None:
        """Flush the cache and close the DB (idempotent)."""
        if self._closed:
            return
        self.flush()
        self.settle()
        if self._checkpointer is not None:
            self._checkpointer.shutdown(wait=True)
        for t in self._tables.values():
            t._detach()
        self._tables.clear()
        self._db.close()
        self._closed = True
